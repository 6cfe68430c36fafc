"""audit_epsilon: an empirical lower bound on epsilon that finds leaks and respects claims."""

import numpy as np
import pytest

from skfedclust import FederatedKMeans, FedSpectralClustering
from skfedclust.secure import audit_epsilon, gaussian_sigma
from skfedclust.secure._audit import _epsilon_from_rates, _upper_rate

NEIGHBOURS = ([0.0] * 10, [0.0] * 9 + [1.0])


def _gaussian_sum(sigma):
    def release(data, seed):
        return float(np.sum(data) + np.random.default_rng(seed).normal(0.0, sigma))

    return release


def test_a_leaking_mechanism_is_caught_above_its_claim():
    # Noise of 0.01 on a sum of sensitivity 1 claimed as epsilon = 1: the
    # audit's lower bound exceeds the claim, refuting it.
    result = audit_epsilon(_gaussian_sum(0.01), NEIGHBOURS, n_trials=200, random_state=0)
    assert result.epsilon_lower > 1.0
    assert result.direction == "above" and 0.0 < result.threshold < 1.0


def test_a_calibrated_gaussian_stays_below_its_epsilon_and_is_seen():
    sigma = gaussian_sigma(1.0, 4.0, 1e-5)
    result = audit_epsilon(_gaussian_sum(sigma), NEIGHBOURS, n_trials=4000, random_state=0)
    # Powerful enough to see a real effect, never above the claim.
    assert 0.0 < result.epsilon_lower < 4.0
    # The second data set's smaller statistics flip the test's direction.
    flipped = audit_epsilon(_gaussian_sum(sigma), NEIGHBOURS[::-1], n_trials=4000, random_state=0)
    assert flipped.direction == "below" and 0.0 < flipped.epsilon_lower < 4.0


def test_the_bound_is_the_clopper_pearson_one():
    # 0 errors in 100 trials: the one-sided 97.5% upper bound is 1 - 0.025**(1/100).
    assert _upper_rate(0, 100, 0.025) == pytest.approx(1 - 0.025 ** (1 / 100), rel=1e-12)
    assert _upper_rate(100, 100, 0.025) == 1.0
    # FPR e^eps + FNR >= 1 - delta, both ways: the larger of the two logarithms.
    assert _epsilon_from_rates(0.1, 0.2, 0.0) == pytest.approx(np.log(0.8 / 0.1))
    assert _epsilon_from_rates(0.6, 0.6, 0.0) == 0.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_trials=3), "n_trials must be an integer >= 4"),
        (dict(n_trials=10.5), "n_trials must be an integer >= 4"),
        (dict(delta=1.0), "delta must be in"),
        (dict(confidence=1.0), "confidence must be in"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        audit_epsilon(_gaussian_sum(1.0), NEIGHBOURS, **kwargs)
    with pytest.raises(ValueError, match="pair of neighbouring"):
        audit_epsilon(_gaussian_sum(1.0), NEIGHBOURS[:1])
    with pytest.raises(TypeError, match="callable"):
        audit_epsilon(None, NEIGHBOURS)
    with pytest.raises(ValueError, match="not a finite number"):
        audit_epsilon(lambda data, seed: float("nan"), NEIGHBOURS, n_trials=4)


def _blobs_and_neighbour(n=20, d=2, corner=4.0):
    rng = np.random.RandomState(0)
    X = np.vstack([rng.normal(c, 0.3, (n, d)) for c in (-2.0, 0.0, 2.0)])
    other = X.copy()
    other[0] = corner  # one row replaced by the corner of the public box
    return X, other


def test_dp_federated_kmeans_stays_below_its_claim():
    X, other = _blobs_and_neighbour()

    def centers_sum(data, seed):
        est = FederatedKMeans(
            3,
            privacy="dp",
            epsilon=1.0,
            delta=1e-5,
            bounds=(-4.0, 4.0),
            max_iter=3,
            random_state=seed,
        ).fit([data[::3], data[1::3], data[2::3]])
        return float(est.cluster_centers_.sum())

    result = audit_epsilon(centers_sum, (X, other), n_trials=24, delta=1e-5, random_state=0)
    assert 0.0 <= result.epsilon_lower < 1.0


@pytest.mark.parametrize(
    "params",
    [
        dict(privacy="data", epsilon=1.0, delta=1e-5, clip_norm=8.0),
        dict(
            privacy="factors",
            epsilon=1.0,
            delta=1e-5,
            n_components=4,
            bandwidth=2.0,
            z_update="gradient",
            learning_rate=0.1,
        ),
    ],
    ids=["data", "factors"],
)
def test_dp_fedsc_stays_below_its_claim_in_both_modes(params):
    X, other = _blobs_and_neighbour(n=10)

    def dictionary_sum(data, seed):
        est = FedSpectralClustering(
            3, n_rounds=1, kmeans_n_init=1, random_state=seed, **params
        ).fit([data[::3], data[1::3], data[2::3]])
        return float(np.sum(est.dictionary_))

    result = audit_epsilon(dictionary_sum, (X, other), n_trials=16, delta=1e-5, random_state=0)
    assert 0.0 <= result.epsilon_lower < 1.0
