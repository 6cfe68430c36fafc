"""Differential privacy a node enforces itself: its budget, the noise it adds, the t rule.

A malicious coordinator announces the noise of each release. Nodes charge every
noisy release to their own accountant from the public box, refuse one their
budget cannot pay or one without noise, add their share of the noise from
their cryptographic generator, and unmask no noisy sum announced with fewer
survivors than the shares the noise needs.
"""

import functools
import math

import numpy as np
import pytest
from scipy import stats
from sklearn.datasets import make_blobs

from skfedclust import FederatedKMeans
from skfedclust.federation import Federation, InProcessRuntime, Party, use_runtime
from skfedclust.methods._fedkmeans_dp import DPPlan
from skfedclust.methods._fedkmeans_steps import TAG_CENTERS, fedkmeans_dp_lloyd_statistics
from skfedclust.node._dp import NODE_ACCOUNTANT, private_normal
from skfedclust.node._policy import NodePolicy
from skfedclust.node._sum_guard import SumRefusal
from skfedclust.secure import SecureAggregator
from skfedclust.secure._secure_sum import (
    TAG_ATTEST,
    TAG_SURVIVORS,
    TAG_UPLOAD,
    secure_sum_attest_step,
    secure_sum_upload_step,
)

BOX = (-12.0, 14.0)


def simulated_nodes(**budget):
    """Simulated parties with a node's own DP budget (harvest checks off, as in a simulation)."""
    policy = NodePolicy(min_rows_per_vector=None, refuse_raw_rows=False, **budget)
    return use_runtime(functools.partial(InProcessRuntime, policy=policy))


def _clients(n=600, n_clients=5):
    X, y = make_blobs(n, centers=3, random_state=0)
    return X, y, np.array_split(X, n_clients)


def refused(rule):
    return pytest.raises(SumRefusal, match=f"refused by rule '{rule}'")


def test_a_fit_over_a_nodes_budget_is_refused_by_the_node():
    _, _, clients = _clients()
    estimator = FederatedKMeans(3, privacy="dp", epsilon=1.0, bounds=BOX, random_state=0)
    with simulated_nodes(dp_epsilon=0.5), refused("dp-budget"):
        estimator.fit(clients)
    with simulated_nodes(dp_epsilon=1.0):
        estimator.fit(clients)
    assert estimator.privacy_spent_[0] == pytest.approx(1.0, rel=1e-6)


def _runtime(n_clients=6, policy=None):
    X = np.random.RandomState(0).normal(size=(30 * n_clients, 2))
    federation = Federation(X, np.array_split(np.arange(len(X)), n_clients))
    federation.spawn_seeds(np.random.RandomState(1))
    return InProcessRuntime(federation, private_entropy=[3], policy=policy)


def _noisy_upload(runtime, aggregator, *, sigma, noise_share, run_on=None, sum_id=50):
    """The coordinator's own upload request for a noisy Lloyd sum."""
    participants = list(range(runtime.n_clients))
    runtime.broadcast(np.zeros((2, 2)), tag=TAG_CENTERS, clients=run_on or participants)
    from skfedclust.federation._runtime import client_step_name
    from skfedclust.secure._secure_sum import fixed_point_shift

    return runtime.run(
        secure_sum_upload_step,
        tag=TAG_UPLOAD,
        clients=run_on or participants,
        inner=client_step_name(fedkmeans_dp_lloyd_statistics),
        inner_public={
            "lower": np.full(2, BOX[0]),
            "upper": np.full(2, BOX[1]),
            "sigma": sigma,
            "noise_share": noise_share,
        },
        sum_id=sum_id,
        participants=participants,
        graph=aggregator.graph,
        threshold=aggregator._threshold(participants),
        shifts=[fixed_point_shift(1e6, len(participants))] * 2,
        n_clients=len(participants),
    )


@pytest.mark.parametrize("sigma", [0.0, -1.0, 1e-300, math.inf])
def test_a_release_without_noise_is_refused_even_without_a_budget(sigma):
    runtime = _runtime()
    aggregator = SecureAggregator(runtime, seed=0)
    aggregator.setup()
    with refused("dp-noise"):
        _noisy_upload(runtime, aggregator, sigma=sigma, noise_share=4)


def test_less_noise_than_the_nodes_budget_needs_is_refused():
    # The server asks for the noise of epsilon = 10 from nodes that allow 1.
    plan = DPPlan(
        *(np.full(2, b) for b in BOX), epsilon=10.0, delta=1e-5, n_starts=1, n_iter=1, moments=False
    )
    runtime = _runtime(
        policy=NodePolicy.simulation().__class__(
            min_rows_per_vector=None, refuse_raw_rows=False, dp_epsilon=1.0
        )
    )
    aggregator = SecureAggregator(runtime, seed=0)
    aggregator.setup()
    with refused("dp-budget"):
        _noisy_upload(runtime, aggregator, sigma=plan.sigma, noise_share=4)


def test_a_nodes_budget_holds_over_the_whole_fit():
    plan = DPPlan(
        *(np.full(2, b) for b in BOX), epsilon=1.0, delta=1e-5, n_starts=1, n_iter=1, moments=False
    )
    runtime = _runtime(
        policy=NodePolicy(min_rows_per_vector=None, refuse_raw_rows=False, dp_epsilon=1.0)
    )
    aggregator = SecureAggregator(runtime, seed=0)
    aggregator.setup()
    # One release of mu at epsilon 1 spends the whole budget...
    _noisy_upload(runtime, aggregator, sigma=plan.sigma / math.sqrt(2), noise_share=4, sum_id=50)
    spent = runtime.private_states()[0][NODE_ACCOUNTANT].spent()[0]
    assert 0.9 < spent <= 1.0 + 1e-9
    # ... and a second one is refused, whatever the server announces.
    with refused("dp-budget"):
        _noisy_upload(runtime, aggregator, sigma=plan.sigma, noise_share=4, sum_id=60)


def test_a_noisy_sum_announced_with_fewer_survivors_than_its_noise_share_is_not_unmasked():
    runtime = _runtime()
    aggregator = SecureAggregator(runtime, seed=0)
    aggregator.setup()
    uploaded = [0, 1, 2, 3]  # each added 1/5 of the noise: the sum of 4 holds 4/5 of it
    _noisy_upload(runtime, aggregator, sigma=50.0, noise_share=5, run_on=uploaded)
    runtime.broadcast(
        {"survivors": np.array(uploaded), "dropped": np.array([4, 5])},
        tag=TAG_SURVIVORS,
        clients=uploaded,
    )
    with refused("noise-share"):
        runtime.run(secure_sum_attest_step, tag=TAG_ATTEST, clients=uploaded)


def test_the_server_stops_a_noisy_sum_short_of_its_shares_before_unmasking():
    from skfedclust.methods import _fedkmeans
    from skfedclust.secure import SecureSumError

    class Losing(InProcessRuntime):
        def _lost(self, tag, party):
            return tag == TAG_UPLOAD and party in (1, 2) and self._exchange >= 3

    _, _, clients = _clients()
    estimator = FederatedKMeans(
        3, privacy="dp", epsilon=1.0, bounds=BOX, min_clients=5, random_state=0
    )
    with (
        use_runtime(Losing),
        pytest.raises(
            (SecureSumError, _fedkmeans.FederatedKMeansError), match="noise needs the shares of 5"
        ),
    ):
        estimator.fit(clients)


def test_the_noise_comes_from_the_cryptographic_generator_and_is_gaussian():
    party = Party(0, 0, [5], stream=(1,))
    noise = private_normal(party, 2.0, (200, 50))
    assert noise.shape == (200, 50)
    assert stats.kstest(noise.ravel() / 2.0, "norm").pvalue > 1e-3
    # Reproducible in a simulation, fresh for every stream, independent of the rng.
    again = private_normal(Party(0, 0, [5], stream=(1,)), 2.0, (200, 50))
    np.testing.assert_array_equal(noise, again)
    other = private_normal(Party(0, 0, [5], stream=(2,)), 2.0, (200, 50))
    assert abs(np.corrcoef(noise.ravel(), other.ravel())[0, 1]) < 0.02
    statistical = Party(0, 0, [5], stream=(1,)).rng.normal(0, 2.0, (200, 50))
    assert not np.allclose(noise, statistical)


# --------------------------------------------------------------------------- #
# FedSC: the node charges its own releases
# --------------------------------------------------------------------------- #
FEDSC_FACTORS = dict(
    privacy="factors", epsilon=1.0, delta=1e-5, bandwidth=2.5, n_components=7,
    z_update="gradient", learning_rate=0.1, n_rounds=2, kmeans_n_init=2, random_state=0,
)  # fmt: skip
FEDSC_DATA = dict(
    privacy="data", epsilon=1.0, delta=1e-5, clip_norm=8.0, n_rounds=2, kmeans_n_init=2,
    random_state=0,
)  # fmt: skip


def _iris_clients():
    from sklearn.datasets import load_iris

    X = load_iris().data
    return np.array_split(X[np.random.default_rng(0).permutation(len(X))], 4)


@pytest.mark.parametrize("params", [FEDSC_FACTORS, FEDSC_DATA], ids=["factors", "data"])
def test_fedsc_releases_are_charged_to_the_nodes_own_budget(params):
    from skfedclust import FedSpectralClustering

    clients = _iris_clients()
    # Every node pays the whole epsilon the estimator claims, from its own
    # computation of each release's sensitivity.
    # A budget per fit (no ledger): a node that charged its first releases
    # before another refused the fit would otherwise carry them over.
    per_fit = dict(dp_epsilon=1.0, privacy_ledger=False)
    with simulated_nodes(**per_fit), refused("dp-budget"):
        FedSpectralClustering(3, **{**params, "epsilon": 1.5}).fit(clients)
    with simulated_nodes(**per_fit):
        est = FedSpectralClustering(3, **params).fit(clients)
    assert est.privacy_spent_[0] == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize(
    "params, rule",
    [
        # Without privacy the fit first asks a bound agreement on the raw rows.
        (dict(n_rounds=2, kmeans_n_init=2, random_state=0), "dp-bounds"),
        (
            dict(privacy="data", noise_ratio=0.3, n_rounds=2, kmeans_n_init=2, random_state=0),
            "dp-noise",
        ),
        # The set-up sums of the raw rows (no bandwidth given) start with a bound.
        (
            dict(privacy="factors", noise_ratio=0.1, n_rounds=2, kmeans_n_init=2, random_state=0),
            "dp-bounds",
        ),
    ],
    ids=["no privacy", "relative data noise", "relative factor noise"],
)
def test_fedsc_releases_without_calibrated_noise_are_refused_by_a_node_with_a_budget(params, rule):
    from skfedclust import FedSpectralClustering

    with simulated_nodes(dp_epsilon=1.0), refused(rule):
        FedSpectralClustering(3, **params).fit(_iris_clients())
    # Without a budget of its own a node takes part (the paper's experiments).
    FedSpectralClustering(3, **params).fit(_iris_clients())


def test_fedsc_factor_noise_smaller_than_the_sensitivity_needs_is_refused():
    # A lying coordinator halves the dictionary's noise: the node computes the
    # sensitivity itself, so the same budget no longer pays for the release.
    from skfedclust.methods._fedsc_steps import fedsc_round
    from skfedclust.secure import factor_noise_scales

    scales = factor_noise_scales(
        1.0, 1e-5, bandwidth=2.5, n_components=7, lam=1e-2, n_rounds=2, learning_rate=0.1
    )
    rng = np.random.default_rng(0)
    party = Party(0, 0, 1, policy=NodePolicy(dp_epsilon=1.0))
    public = dict(
        check_underflow=False, bandwidth=2.5, reg=1e-2, z_update="gradient",
        learning_rate=0.1, coef_clip=None, send_count=False, send_objective=False,
        send_coef=False, coef_noise=None,
    )  # fmt: skip
    inbox = {"dictionary": rng.normal(size=(7, 4))}
    data = rng.normal(size=(30, 4))
    honest = ("calibrated", None, scales.dictionary)
    state, accepted = {}, 0
    with refused("dp-budget"):
        while accepted < 10:
            step = fedsc_round(data, inbox, state, party, dictionary_noise=honest, **public)
            state.update(step.keep)
            accepted += 1
    # The dictionary's share of the budget (half of mu**2) pays for the fit's two
    # rounds and, unused, the coefficients' half for two more: four in all.
    assert accepted == 4
    with refused("dp-budget"):
        fedsc_round(
            data, inbox, {}, party,
            dictionary_noise=("calibrated", None, scales.dictionary / 4), **public,
        )  # fmt: skip


def test_fedsc_noise_comes_from_the_cryptographic_generator():
    # The same public seed and another private entropy: other noise. The same
    # entropy: the noise private_normal draws (reproducible in a simulation).
    from skfedclust.methods._fedsc_steps import _perturb

    matrix = np.zeros((50, 4))
    noise = ("calibrated", None, 2.0)
    a, _ = _perturb(matrix, noise, Party(0, 7, 1), "rows")
    b, _ = _perturb(matrix, noise, Party(0, 7, 2), "rows")
    np.testing.assert_array_equal(a, private_normal(Party(0, 7, 1), 2.0, (50, 4)))
    assert not np.allclose(a, b)
    assert stats.normaltest(a.ravel()).pvalue > 1e-3


def test_a_nodes_budget_names_its_neighbouring_relation():
    assert NodePolicy.from_node_config({"dp-epsilon": 1.0}).dp_neighbouring == "replace-one"
    config = {"dp-epsilon": 1.0, "dp-neighbouring": "replace-one"}
    assert NodePolicy.from_node_config(config).dp_neighbouring == "replace-one"
    with pytest.raises(ValueError, match="row count is public"):
        NodePolicy.from_node_config({"dp-epsilon": 1.0, "dp-neighbouring": "add-remove"})


def test_fedsc_objective_in_the_clear_is_refused_by_a_node_with_a_budget():
    from skfedclust.methods._fedsc_steps import fedsc_round
    from skfedclust.secure import factor_noise_scales

    scales = factor_noise_scales(
        1.0, 1e-5, bandwidth=2.5, n_components=7, lam=1e-2, n_rounds=2, learning_rate=0.1
    )
    rng = np.random.default_rng(0)
    public = dict(
        check_underflow=False, bandwidth=2.5, reg=1e-2, z_update="gradient",
        learning_rate=0.1, coef_clip=None, send_count=False, send_coef=False, coef_noise=None,
        dictionary_noise=("calibrated", None, scales.dictionary),
    )  # fmt: skip
    inbox = {"dictionary": rng.normal(size=(7, 4))}
    data = rng.normal(size=(30, 4))
    with refused("dp-noise"):
        fedsc_round(data, inbox, {}, Party(0, 0, 1, policy=NodePolicy(dp_epsilon=1.0)),
                    send_objective=True, **public)  # fmt: skip
    # Without a budget of its own the node sends it (the paper's protocol).
    reply = fedsc_round(data, inbox, {}, Party(0, 0, 1), send_objective=True, **public)
    assert "objective" in reply.send
