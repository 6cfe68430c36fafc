"""FederatedKMeans(privacy="dp"): Gaussian noise on the secure sums, exact accounting."""

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score

from skfedclust import FederatedKMeans
from skfedclust.clusterers import nearest_center
from skfedclust.federation import Party
from skfedclust.methods._fedkmeans import FederatedKMeansError
from skfedclust.methods._fedkmeans_dp import DPPlan, su_iterations
from skfedclust.methods._fedkmeans_steps import (
    TAG_CENTERS,
    dp_inertia_exact,
    dp_lloyd_exact,
    dp_moments_exact,
)
from skfedclust.secure import PrivacyLeakWarning
from skfedclust.utils.protocol_checks import recording_runtime

BOX = (-12.0, 14.0)


def _data(n=900, k=3, d=2, seed=0):
    X, y = make_blobs(n, centers=k, n_features=d, random_state=seed, cluster_std=1.0)
    return X, y


def _fit(X, **params):
    params = {"init": "sphere-packing", "privacy": "dp", "bounds": BOX, "random_state": 0, **params}
    return FederatedKMeans(params.pop("n_clusters", 3), **params).fit(X, client_ids=_ids(X))


def _ids(X, m=4):
    return np.arange(len(X)) % m


def _epsilon_of_mu(mu, delta):
    # Dong, Roth and Su (2022), Corollary 2.13: delta(eps) of mu-GDP, inverted
    # here by root finding, independently of dp_accounting.
    def excess(eps):
        tail = math.exp(eps + norm.logcdf(-eps / mu - mu / 2))
        return norm.cdf(-eps / mu + mu / 2) - tail - delta

    return brentq(excess, 0.0, 200.0, xtol=1e-12)


def _quiet_party(index=0, seed=0):
    return Party(index, seed, entropy=0)


# --------------------------------------------------------------------------- #
# Accounting
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("epsilon", [0.3, 1.0, 8.0])
@pytest.mark.parametrize("init", ["random", "array"])
def test_the_fit_spends_exactly_its_budget_over_every_release(epsilon, init):
    X, _ = _data()
    start = X[:3] if init == "array" else "random"
    km = _fit(X, init=start, epsilon=epsilon, delta=1e-6, dp_max_iter=4, tol=0.0)
    releases = km.privacy_accountant_.releases
    names = [r.what for r in releases]
    moments = ["column sums", "column sums of squares"] if init == "random" else []
    assert names == moments + ["cluster sums and counts"] * 4 + ["inertia"]
    assert km.n_iter_ == 4
    # The reported spend is the exact mu-GDP composition of the charged releases,
    # recomputed here without dp_accounting.
    mu = math.sqrt(sum((r.sensitivity / r.sigma) ** 2 for r in releases))
    assert km.privacy_spent_[0] == pytest.approx(_epsilon_of_mu(mu, 1e-6), rel=1e-6)
    assert km.privacy_spent_ == (pytest.approx(epsilon, rel=1e-9), 1e-6)
    # Each release gets the same mu: every Lloyd iteration's sensitivity is the box's diagonal.
    diagonal = math.hypot(*(np.full(2, BOX[1] - BOX[0])))
    lloyd = [r for r in releases if r.what == "cluster sums and counts"]
    assert all(r.sensitivity == pytest.approx(diagonal) for r in lloyd)
    assert km.noise_scales_["counts"] == pytest.approx(2 * km.noise_scales_["sums"] / diagonal)


def test_restarts_split_the_budget_and_stopping_early_spends_less():
    X, _ = _data()
    km = _fit(X, n_init=3, epsilon=2.0, dp_max_iter=3, tol=0.0)
    assert [r.what for r in km.privacy_accountant_.releases].count("inertia") == 3
    assert km.privacy_spent_[0] == pytest.approx(2.0, rel=1e-9)
    # A huge tolerance stops after one iteration: the unspent iterations are not charged.
    early = _fit(X, epsilon=2.0, dp_max_iter=5, tol=1e9)
    assert early.n_iter_ == 1
    assert early.privacy_spent_[0] < 2.0


def test_auto_iterations_follow_su_et_al():
    # Between 2 and 7; more budget or more rows per cluster, more iterations.
    assert su_iterations(0.01, 1000, 2, 3) == 2
    assert su_iterations(1e6, 1000, 2, 3) == 7
    assert su_iterations(1.0, 10**6, 2, 3) >= su_iterations(1.0, 1000, 2, 3)
    X, _ = _data()
    km = _fit(X, epsilon=1.0, tol=0.0)
    assert km.n_iter_ == su_iterations(1.0, len(X), 2, 3)


# --------------------------------------------------------------------------- #
# Sensitivities: searched adversarially over neighbouring data sets
# --------------------------------------------------------------------------- #
def _neighbours(X, lower, upper, rng):
    """Data sets that differ from X in one row, replaced by a corner, a far row or a random one."""
    d = X.shape[1]
    corners = [np.array(c) for c in itertools.product(*zip(lower, upper, strict=True))]
    far = [np.full(d, 1e6), np.full(d, -1e6)]
    candidates = corners + far + list(rng.uniform(lower, upper, (20, d)))
    for i in rng.choice(len(X), 6, replace=False):
        for row in candidates:
            Y = X.copy()
            Y[i] = row
            yield Y
    # A row of X moved to the corner farthest from it.
    Y = X.copy()
    Y[0] = np.where(X[0] > (lower + upper) / 2, lower, upper)
    yield Y


def _corner_pairs(X, lower, upper):
    """Neighbouring pairs whose differing row sits at two corners of the box."""
    corners = [np.array(c) for c in itertools.product(*zip(lower, upper, strict=True))]
    for a, b in itertools.permutations(corners, 2):
        Y, Z = X.copy(), X.copy()
        Y[0], Z[0] = a, b
        yield Y, Z


def _call(step, X, centers, **public):
    reply = step(X, {TAG_CENTERS: centers}, {}, _quiet_party(), **public)
    return reply.send


def test_one_replaced_row_moves_the_sums_and_counts_by_at_most_one_release_mu():
    rng = np.random.default_rng(0)
    X, _ = _data(n=60)
    lower, upper = np.array([-6.0, -9.0]), np.array([5.0, 11.0])
    plan = DPPlan(lower, upper, epsilon=1.0, delta=1e-5, n_starts=1, n_iter=3, moments=True)
    mu = plan.diagonal / plan.sigma
    worst = 0.0
    for centers in (X[:3], np.array([[0.0, 0.0], [4.0, 10.0], [-5.0, -8.0]])):
        pairs = [(X, Y) for Y in _neighbours(X, lower, upper, rng)]
        for D, E in pairs + list(_corner_pairs(X, lower, upper)):
            sums, counts = dp_lloyd_exact(D, centers, lower, upper)
            other_sums, other_counts = dp_lloyd_exact(E, centers, lower, upper)
            moved = math.sqrt(
                ((sums - other_sums) ** 2).sum() / plan.sigma**2
                + ((counts - other_counts) ** 2).sum() / plan.sigma_counts**2
            )
            worst = max(worst, moved)
    assert worst <= mu * (1 + 1e-12)
    # The bound is reached: a row moved between opposite corners of the box,
    # within one cluster or between two.
    assert worst == pytest.approx(mu, rel=1e-9)


def test_one_replaced_row_moves_the_inertia_and_moments_within_their_sensitivities():
    rng = np.random.default_rng(1)
    X, _ = _data(n=60)
    lower, upper = np.array([-6.0, -9.0]), np.array([5.0, 11.0])
    plan = DPPlan(lower, upper, epsilon=1.0, delta=1e-5, n_starts=1, n_iter=3, moments=True)
    centers = np.array([[0.0, 0.0], [4.0, 10.0], [-5.0, -8.0]])
    inertia = dp_inertia_exact(X, centers, lower, upper)
    sums, squares = dp_moments_exact(X, lower, upper)
    worst = np.zeros(3)
    for Y in _neighbours(X, lower, upper, rng):
        other = dp_inertia_exact(Y, centers, lower, upper)
        s, q = dp_moments_exact(Y, lower, upper)
        moved = [
            abs(float(inertia[0] - other[0])),
            np.linalg.norm(sums - s),
            np.linalg.norm(squares - q),
        ]
        worst = np.maximum(worst, moved)
    sensitivities = [plan.diagonal**2, plan.diagonal, plan.squares_sensitivity]
    assert np.all(worst <= np.array(sensitivities) * (1 + 1e-12))


# --------------------------------------------------------------------------- #
# The noise: where it is added, how much, from whose generator
# --------------------------------------------------------------------------- #
def _noiseless_statistics(X, ids, centers, lower, upper):
    return {c: dp_lloyd_exact(X[ids == c], centers, lower, upper) for c in np.unique(ids)}


def test_in_the_clear_each_client_adds_the_whole_noise_from_its_private_generator():
    X, _ = _data(n=1200, k=4, d=6)
    ids = _ids(X)
    lower, upper = np.full(6, -15.0), np.full(6, 15.0)
    with recording_runtime() as runtimes:
        km = _fit(
            X, n_clusters=4, bounds=(lower, upper), secure_aggregation=False, dp_max_iter=5, tol=0
        )
    runtime = runtimes[0]
    statistics = [r for r in runtime.received if r.tag == "noisy cluster statistics"]
    # Five iterations, then the inertia's centers.
    centers = _centers_sent(runtime)[:5]
    assert len(statistics) == 5
    residuals, count_residuals = [], []
    for received, sent in zip(statistics, centers, strict=True):
        exact = _noiseless_statistics(X, ids, sent, lower, upper)
        for c, (sums, counts) in received.items():
            residuals.append((sums - exact[c][0]).ravel() / km.noise_scales_["sums"])
            count_residuals.append((counts - exact[c][1]) / km.noise_scales_["counts"])
    residuals, count_residuals = np.concatenate(residuals), np.concatenate(count_residuals)
    # 4 clients x 5 iterations x 4 clusters x 6 features: standard normal.
    assert abs(residuals.std() - 1.0) < 0.1 and abs(residuals.mean()) < 0.1
    assert abs(count_residuals.std() - 1.0) < 0.25
    # The noise is the parties' own: another private stream, other noise, same public draws.
    with recording_runtime() as again:
        _fit(X, n_clusters=4, bounds=(lower, upper), secure_aggregation=False, dp_max_iter=5)
    first = [r for r in again[0].received if r.tag == "noisy cluster statistics"][0]
    np.testing.assert_array_equal(first[0][0], statistics[0][0][0])  # reproducible


def _centers_sent(runtime):
    """The centers the server broadcast before each Lloyd iteration (from its step inputs)."""
    return runtime.dp_centers


@pytest.fixture(autouse=True)
def _record_centers(monkeypatch):
    # The centers broadcast before each noisy iteration, kept by the recording
    # runtime so that a test can recompute the clients' exact statistics.
    from skfedclust.utils._protocol_checks import RecordingRuntime

    original = RecordingRuntime.broadcast

    def broadcast(self, payload, *, tag, **kwargs):
        if tag == TAG_CENTERS:
            self.__dict__.setdefault("dp_centers", []).append(np.array(payload))
        return original(self, payload, tag=tag, **kwargs)

    monkeypatch.setattr(RecordingRuntime, "broadcast", broadcast, raising=False)


def test_with_secure_sums_each_client_adds_its_share_and_the_sum_holds_the_whole_noise():
    X, _ = _data(n=1200, k=4, d=6)
    lower, upper = np.full(6, -15.0), np.full(6, 15.0)
    residuals = []
    for seed in range(6):
        with recording_runtime() as runtimes:
            km = _fit(
                X, n_clusters=4, bounds=(lower, upper), dp_max_iter=4, tol=0, random_state=seed
            )
        runtime = runtimes[0]
        for total, sent in zip(runtime.dp_totals, runtime.dp_centers[: len(runtime.dp_totals)]):
            exact = _noiseless_statistics(X, _ids(X), sent, lower, upper)
            clean = sum(v[0] for v in exact.values())
            residuals.append((total[0] - clean).ravel() / km.noise_scales_["sums"])
    residuals = np.concatenate(residuals)
    # 4 clients answer, 3 are needed: the sum holds 4/3 of the calibrated variance.
    assert residuals.std() == pytest.approx(math.sqrt(4 / 3), rel=0.12)


@pytest.fixture(autouse=True)
def _record_totals(monkeypatch):
    from skfedclust.methods import _fedkmeans_dp

    original = _fedkmeans_dp._dp_centers

    def spy(centers, sums, counts, plan, noise):
        from skfedclust.utils._protocol_checks import RecordingRuntime

        if RecordingRuntime.instances:
            runtime = RecordingRuntime.instances[-1]
            runtime.__dict__.setdefault("dp_totals", []).append((sums.copy(), counts.copy()))
        return original(centers, sums, counts, plan, noise)

    monkeypatch.setattr(_fedkmeans_dp, "_dp_centers", spy)


def test_the_per_client_noise_share_follows_min_clients():
    from skfedclust.methods._fedkmeans_dp import client_noise_factor

    km = FederatedKMeans(privacy="dp", min_clients=2)
    assert client_noise_factor(km, list(range(5))) == pytest.approx(1 / math.sqrt(2))
    default = FederatedKMeans(privacy="dp")
    assert client_noise_factor(default, list(range(5))) == pytest.approx(1 / math.sqrt(3))
    clear = FederatedKMeans(privacy="dp", secure_aggregation=False)
    assert client_noise_factor(clear, list(range(5))) == 1.0


# --------------------------------------------------------------------------- #
# What the fit gives
# --------------------------------------------------------------------------- #
def test_a_large_budget_gives_federated_lloyd():
    X, _ = _data()
    init = X[[0, 1, 2]]
    dp = _fit(X, init=init, epsilon=1e5, dp_max_iter=3, tol=0.0)
    clear = FederatedKMeans(3, init=init, max_iter=3, tol=0.0).fit(X, client_ids=_ids(X))
    np.testing.assert_allclose(dp.cluster_centers_, clear.cluster_centers_, atol=0.05)
    assert dp.inertia_ == pytest.approx(clear.inertia_, rel=0.02)
    np.testing.assert_array_equal(dp.labels_, nearest_center(X, dp.cluster_centers_))


def test_a_moderate_budget_comes_near_centralized_kmeans():
    X, y = _data(n=3000)
    central = adjusted_rand_score(y, KMeans(3, n_init=10, random_state=0).fit(X).labels_)
    fits = [_fit(X, init="random", epsilon=2.0, random_state=s) for s in range(5)]
    scores = [adjusted_rand_score(y, km.labels_) for km in fits]
    # The median over noise draws: one draw in three costs up to 0.08 of ARI here.
    assert np.median(scores) > central - 0.05
    # A tiny budget drowns the clusters in noise.
    tiny = [adjusted_rand_score(y, _fit(X, epsilon=1e-3, random_state=s).labels_) for s in (0, 1)]
    assert max(tiny) < central - 0.2


def test_rows_are_clipped_to_the_bounds_and_centers_stay_in_the_box():
    X, _ = _data()
    X = X.copy()
    X[0] = [1e12, -1e12]  # one wild row cannot drag a center out of the box
    km = _fit(X, epsilon=1.0)
    assert np.all(km.cluster_centers_ >= BOX[0]) and np.all(km.cluster_centers_ <= BOX[1])
    np.testing.assert_array_equal(km.bounds_[0], np.full(2, BOX[0]))


def test_fits_are_reproducible_and_independent_of_n_jobs():
    X, _ = _data()
    a = _fit(X, epsilon=1.0)
    b = _fit(X, epsilon=1.0, n_jobs=2)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    c = _fit(X, epsilon=1.0, random_state=1)
    assert not np.array_equal(a.cluster_centers_, c.cluster_centers_)


def test_too_few_clients_answering_is_refused_before_the_noise_falls_short():
    from skfedclust.federation import InProcessRuntime, use_runtime

    class DropTwo(InProcessRuntime):
        def _lost(self, tag, party):
            return party in (1, 2) and tag != "data bounds"

    X, _ = _data()
    with use_runtime(DropTwo), pytest.raises(FederatedKMeansError, match="only 2 of the 4"):
        _fit(X, secure_aggregation=False)


# --------------------------------------------------------------------------- #
# Bounds and refusals
# --------------------------------------------------------------------------- #
def test_bounds_from_the_data_warn_of_the_leak():
    X, _ = _data()
    with pytest.warns(PrivacyLeakWarning, match="bounds"):
        km = _fit(X, bounds=None)
    np.testing.assert_array_equal(km.bounds_[0], X.min(axis=0))
    np.testing.assert_array_equal(km.bounds_[1], X.max(axis=0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        _fit(X)


@pytest.mark.parametrize(
    "bounds, match",
    [
        ((1.0, 0.0), "at most its upper"),
        ((0.0, 0.0), "no width"),
        ((0.0, np.inf), "finite"),
        ((np.zeros(3), 1.0), r"shape \(2,\)"),
        ((0.0, 1.0, 2.0), "pair"),
    ],
)
def test_bad_bounds_are_refused(bounds, match):
    X, _ = _data()
    with pytest.raises(ValueError, match=match):
        _fit(X, bounds=bounds)


def test_k_fed_start_is_refused_under_dp():
    X, _ = _data()
    with pytest.raises(ValueError, match="k-fed"):
        _fit(X, init="k-fed")


def test_without_privacy_no_budget_is_reported():
    X, _ = _data()
    km = FederatedKMeans(3, random_state=0).fit(X)
    assert km.privacy_spent_ is None and km.privacy_accountant_ is None
    assert km.noise_scales_ == {}


def test_a_cluster_with_a_count_lost_in_noise_keeps_its_center():
    from skfedclust.methods._fedkmeans_dp import _dp_centers

    plan = DPPlan(
        -1.0 * np.ones(2), np.ones(2), epsilon=1.0, delta=1e-5, n_starts=1, n_iter=2, moments=False
    )
    centers = np.array([[0.5, 0.5], [-0.5, -0.5], [0.0, 0.9]])
    sums = np.array([[20.0, 10.0], [3.0, 3.0], [-50.0, 400.0]])
    counts = np.array([40.0, 5.9, 100.0])
    new = _dp_centers(centers, sums, counts, plan, noise=2.0)
    np.testing.assert_array_equal(new[0], [0.5, 0.25])
    # Below three standard deviations of the counts' noise: the old center.
    np.testing.assert_array_equal(new[1], centers[1])
    # A mean outside the box is moved back into it.
    np.testing.assert_array_equal(new[2], [-0.5, 1.0])


# --------------------------------------------------------------------------- #
# The sphere-packing start
# --------------------------------------------------------------------------- #
def test_sphere_packing_spreads_centers_in_the_box_without_reading_rows():
    from skfedclust.methods._fedkmeans_dp import sphere_packing_centers

    lower, upper = np.array([-1.0, 0.0, 5.0]), np.array([1.0, 4.0, 6.0])
    centers = sphere_packing_centers(lower, upper, 6, np.random.RandomState(0))
    assert centers.shape == (6, 3)
    assert np.all(centers >= lower) and np.all(centers <= upper)
    gaps = np.sqrt(((centers[:, None] - centers[None]) ** 2).sum(-1))[np.triu_indices(6, 1)]
    # Placed at least 2r apart, r the last radius tried (a power-of-two fraction of 0.5).
    assert gaps.min() >= 2 * 0.5 / 2**4
    # Public draws: the same seed gives the same start.
    again = sphere_packing_centers(lower, upper, 6, np.random.RandomState(0))
    np.testing.assert_array_equal(centers, again)


def test_the_sphere_packing_start_costs_no_budget():
    X, _ = _data()
    km = _fit(X, init="sphere-packing", epsilon=1.0, dp_max_iter=3, tol=0.0)
    names = [r.what for r in km.privacy_accountant_.releases]
    assert names == ["cluster sums and counts"] * 3 + ["inertia"]
    assert km.privacy_spent_[0] == pytest.approx(1.0, rel=1e-9)
    # No client step ran before the first noisy iteration (bounds are given).
    with recording_runtime() as runtimes:
        _fit(X, init="sphere-packing", epsilon=1.0, dp_max_iter=3)
    tags = [r.tag for r in runtimes[0].received]
    sums = ["secure sum: masked vectors", "secure sum: unmasking"]
    assert tags == ["secure sum: pairwise seeds"] + sums * 4


def test_sphere_packing_without_privacy_starts_within_the_data():
    X, y = _data()
    km = FederatedKMeans(3, init="sphere-packing", random_state=0).fit(X, client_ids=_ids(X))
    central = KMeans(3, n_init=10, random_state=0).fit(X)
    assert km.inertia_ <= 1.05 * central.inertia_


# --------------------------------------------------------------------------- #
# Defaults that work together, and a private start that keeps every cluster
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("seed", range(5))
def test_dp_with_every_other_parameter_at_its_default_finds_k_clusters(seed):
    X, y = make_blobs(3000, centers=4, cluster_std=0.5, random_state=1)
    km = FederatedKMeans(
        4, privacy="dp", epsilon=1.0, delta=1e-5, bounds=(X.min() - 1, X.max() + 1)
    )
    km.set_params(random_state=seed).fit(np.array_split(X, 5))
    assert len(np.unique(km.labels_)) == 4
    assert adjusted_rand_score(y, km.labels_) > 0.7
    assert km.privacy_spent_[0] == pytest.approx(1.0, rel=1e-6)


def test_a_cluster_lost_in_the_noise_is_moved_next_to_the_largest_one():
    from skfedclust.methods._fedkmeans_dp import _relocate_unreliable

    plan = DPPlan(
        np.zeros(2),
        np.array([16.0, 4.0]),
        epsilon=1.0,
        delta=1e-5,
        n_starts=1,
        n_iter=2,
        moments=False,
    )
    new = np.array([[2.0, 2.0], [8.0, 1.0], [12.0, 3.0]])
    counts = np.array([50.0, 2.0, 400.0])
    moved, n = _relocate_unreliable(new, counts, 2.0, plan)
    assert n == 1
    # A split of the largest cluster along the widest side (16 / (16 * 3)).
    np.testing.assert_allclose(moved[1], [12.0 + 1 / 3, 3.0])
    np.testing.assert_allclose(moved[2], [12.0 - 1 / 3, 3.0])
    np.testing.assert_array_equal(moved[0], new[0])
    same, n = _relocate_unreliable(new, np.array([50.0, 60.0, 400.0]), 2.0, plan)
    assert n == 0 and same is new


def test_relocation_in_the_last_iteration_warns():
    X, _ = make_blobs(300, centers=2, cluster_std=0.3, random_state=0)
    with pytest.warns(ConvergenceWarning, match="too few rows to tell from the noise"):
        FederatedKMeans(
            12, privacy="dp", epsilon=0.5, bounds=(X.min() - 1, X.max() + 1), random_state=0
        ).fit(np.array_split(X, 3))


def test_no_epsilon_is_claimed_when_the_bounds_came_from_the_data():
    X, _ = make_blobs(300, centers=2, random_state=0)
    with pytest.warns(PrivacyLeakWarning, match="privacy_spent_ is None"):
        km = FederatedKMeans(2, privacy="dp", epsilon=1.0, random_state=0).fit(np.array_split(X, 3))
    assert km.privacy_spent_ is None
    assert km.privacy_accountant_ is not None  # what the noisy releases spent, for the record


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"epsilon": 1e300}, "epsilon"),
        ({"epsilon": math.inf}, "epsilon"),
        ({"bounds": (-1e300, 1e300)}, "bounds reach beyond"),
        ({"bounds": (-math.inf, 1.0)}, "bounds must be finite"),
    ],
)
def test_dp_parameters_out_of_range_are_refused_clearly(params, message):
    X, _ = make_blobs(90, centers=2, random_state=0)
    kwargs = {"privacy": "dp", "epsilon": 1.0, "bounds": (-20.0, 20.0), **params}
    with pytest.raises(ValueError, match=message):
        FederatedKMeans(2, **kwargs).fit(np.array_split(X, 3))
