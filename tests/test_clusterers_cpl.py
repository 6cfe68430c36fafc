"""Competitive penalized learning: one step by hand, weights, invariants, guards, speed-ups."""

import numpy as np
import pytest
from scipy.special import expit
from sklearn.datasets import load_iris, make_blobs
from sklearn.preprocessing import MinMaxScaler, StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfedclust.clusterers import _cpl
from skfedclust.clusterers._cpl import (
    CompetitivePenalizedLearning,
    cluster_weight,
    competition_step,
    competitive_penalized_learning,
    feature_importance,
    fine_grained_cpl,
    gaussian_hellinger,
    multi_granular_cpl,
    resolve_initial_clusters,
    weighted_assignment,
)

ENGINES = ["numpy"] + (["numba"] if _cpl.numba is not None else [])


@pytest.fixture(params=ENGINES)
def engine(request, monkeypatch):
    monkeypatch.setattr(_cpl, "_ENGINE", request.param)
    # The compiled pass on every size (small data would take the NumPy one).
    monkeypatch.setattr(_cpl, "_COMPILED_MIN_ROWS", 0)
    return request.param


def _iris():
    return StandardScaler().fit_transform(load_iris().data), load_iris().target


def _purity(labels, y):
    return sum(np.bincount(y[labels == c]).max() for c in np.unique(labels)) / len(y)


# --------------------------------------------------------------------------- #
# One competition by hand
# --------------------------------------------------------------------------- #
def test_one_competition_step_worked_vector():
    # d = 1, centroids (0, 2), x = 0.5: phi = (0.3630829, 0.1335707), ratio e^-1.
    beta, wins = np.ones(2), np.ones(2)
    winner, rival = competition_step(
        np.array([0.5]), np.array([[0.0], [2.0]]), np.ones((2, 1)), beta, wins, learning_rate=0.05
    )
    assert (winner, rival) == (0, 1)
    np.testing.assert_allclose(beta, [1.05, 1 - 0.05 * np.exp(-1)], rtol=0, atol=1e-7)
    np.testing.assert_allclose(beta, [1.05, 0.9816060], rtol=0, atol=1e-7)
    np.testing.assert_allclose(cluster_weight(beta), [0.9959299, 0.9919664], rtol=0, atol=1e-7)
    np.testing.assert_array_equal(wins, [2, 1])
    np.testing.assert_allclose(cluster_weight([1.0]), [0.9933071], rtol=0, atol=1e-7)


def test_one_pass_of_one_object_matches_the_worked_vector(engine):
    # The same step through the pass kernel, which also moves x to the winner.
    centers = np.array([[0.0], [2.0]])
    beta, wins = np.ones(2), np.ones(2)
    labels = np.array([-1])
    counts = np.array([1, 1])
    n_changed, total = _cpl._competition_pass(
        np.array([[0.5]]), np.array([0]), centers, centers.copy(), counts, labels,
        np.ones((2, 1)), _cpl._log_cluster_weight(beta), beta, wins, 2.0,
        np.ones(2, dtype=bool), 0.05,
    )  # fmt: skip
    assert (n_changed, total) == (1, 3.0)
    np.testing.assert_allclose(beta, [1.05, 0.9816060], rtol=0, atol=1e-7)
    np.testing.assert_array_equal(wins, [2, 1])
    np.testing.assert_array_equal(labels, [0])
    np.testing.assert_array_equal(counts, [2, 1])
    np.testing.assert_allclose(centers, [[0.25], [2.0]])


def test_competition_step_maximises_the_normalised_competition_score():
    # Eq. 22 form, computed independently: phi_j = (1 - gamma_j) g_j s_j / sum_t s_t.
    rng = np.random.RandomState(0)
    for _ in range(20):
        k, d = 6, 3
        x, centers = rng.normal(size=d), rng.normal(size=(k, d))
        weights = rng.dirichlet(np.ones(d), size=k)
        beta, wins = rng.normal(1, 0.3, k), rng.randint(1, 9, k).astype(float)
        s = np.exp(-0.5 * (weights * (x - centers) ** 2).sum(axis=1))
        phi = (1 - wins / wins.sum()) * expit(10 * beta - 5) * s / s.sum()
        expected_v, expected_r = np.argsort(-phi, kind="stable")[:2]
        beta_after, wins_after = beta.copy(), wins.copy()
        v, r = competition_step(x, centers, weights, beta_after, wins_after, learning_rate=0.1)
        assert (v, r) == (expected_v, expected_r)
        expected_beta = beta.copy()
        expected_beta[v] += 0.1
        expected_beta[r] -= 0.1 * phi[r] / phi[v]
        np.testing.assert_allclose(beta_after, expected_beta, rtol=1e-12)
        assert wins_after[v] == wins[v] + 1 and wins_after.sum() == wins.sum() + 1


# --------------------------------------------------------------------------- #
# Feature-cluster importance
# --------------------------------------------------------------------------- #
def test_gaussian_hellinger_closed_form_values():
    np.testing.assert_allclose(gaussian_hellinger(0, 1, 1, 1), 0.3427872, rtol=0, atol=1e-7)
    np.testing.assert_allclose(gaussian_hellinger(0, 1, 0, 4), 0.3249197, rtol=0, atol=1e-7)
    assert gaussian_hellinger(0.3, 2.0, 0.3, 2.0) == 0
    assert gaussian_hellinger(1, 1, 0, 4) == gaussian_hellinger(0, 4, 1, 1)
    # two point masses: the formula's limits, never NaN
    np.testing.assert_array_equal(gaussian_hellinger([0, 0], [0, 0], [0, 1], [0, 0]), [0, 1])


def _importance_by_definition(X, labels, k):
    weights = np.zeros((k, X.shape[1]))
    for j in range(k):
        inside, outside = X[labels == j], X[labels != j]
        c = inside.mean(axis=0)
        D = gaussian_hellinger(
            c, inside.var(axis=0, ddof=1), outside.mean(axis=0), outside.var(axis=0, ddof=1)
        )
        Q = np.exp(-0.5 * (inside - c) ** 2).mean(axis=0)
        weights[j] = D * Q / (D * Q).sum()
    return weights


def test_feature_importance_matches_the_per_cluster_definition():
    rng = np.random.RandomState(1)
    X = rng.normal(size=(60, 4)) * [1, 2, 0.5, 3]
    labels = rng.randint(0, 5, 60)
    W = feature_importance(X, labels, 5)
    np.testing.assert_allclose(W, _importance_by_definition(X, labels, 5), rtol=1e-10)
    np.testing.assert_allclose(W.sum(axis=1), 1, rtol=0, atol=1e-12)


def test_feature_importance_favours_the_separating_feature():
    rng = np.random.RandomState(0)
    X = np.vstack([rng.normal([-3, 0], 1, (50, 2)), rng.normal([3, 0], 1, (50, 2))])
    W = feature_importance(X, np.repeat([0, 1], 50), 2)
    assert np.all(W[:, 0] > W[:, 1])


def test_feature_importance_guards():
    rng = np.random.RandomState(0)
    X = np.column_stack([rng.normal(size=10), np.full(10, 7.0)])
    # constant feature: no separation, weight 0 instead of NaN
    W = feature_importance(X, np.repeat([0, 1], 5), 2)
    np.testing.assert_array_equal(W[:, 1], 0)
    np.testing.assert_allclose(W[:, 0], 1)
    # complement of one object, a cluster holding everything, an empty cluster
    W = feature_importance(X, np.r_[np.zeros(9, int), 1], 3)
    assert np.isfinite(W).all()
    np.testing.assert_allclose(W.sum(axis=1), 1)
    W = feature_importance(X, np.zeros(10, int), 2)
    np.testing.assert_allclose(W, 0.5)  # uniform fallback
    W = feature_importance(np.ones((6, 3)), np.repeat([0, 1], 3), 2)
    np.testing.assert_allclose(W, 1 / 3)


# --------------------------------------------------------------------------- #
# The CPL run
# --------------------------------------------------------------------------- #
def test_cpl_output_is_a_consistent_partition(engine):
    X, _ = _iris()
    res = competitive_penalized_learning(X, 40, random_state=0)
    k = res.n_clusters
    np.testing.assert_array_equal(np.unique(res.labels), np.arange(k))
    np.testing.assert_array_equal(res.sizes, np.bincount(res.labels))
    for j in range(k):
        np.testing.assert_allclose(res.centers[j], X[res.labels == j].mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(res.feature_weights.sum(axis=1), 1, atol=1e-12)
    s = np.exp(-0.5 * (res.feature_weights[res.labels] * (X - res.centers[res.labels]) ** 2))
    np.testing.assert_allclose(res.objective, s.prod(axis=1).sum())
    assert res.size_history.shape == (res.n_iter, 40)


@pytest.mark.parametrize("seed", range(4))
def test_clusters_only_disappear_and_singletons_are_eliminated(engine, seed):
    X, _ = _iris()
    res = competitive_penalized_learning(X, 75, random_state=seed)
    sizes = res.size_history
    active = res.n_active_per_pass
    assert np.all(np.diff(active) <= 0) and active[0] <= 75
    assert active[-1] == res.n_clusters
    # an empty cluster never comes back
    assert not np.any((sizes[:-1] == 0) & (sizes[1:] > 0))
    # a singleton at a weight update (after every pass but the last) is empty one pass later
    singletons = sizes[:-1] == 1
    assert singletons.any()
    assert np.all(sizes[1:][singletons] == 0)


def test_min_cluster_size_one_keeps_singletons():
    X, _ = _iris()
    res = competitive_penalized_learning(X, 75, min_cluster_size=1, random_state=0)
    sizes = res.size_history
    assert np.any((sizes[:-1] == 1) & (sizes[1:] == 1))


def test_max_iter_bounds_the_passes():
    X, _ = _iris()
    assert competitive_penalized_learning(X, 75, max_iter=2, random_state=0).n_iter == 3
    assert competitive_penalized_learning(X, 75, max_iter=0, random_state=0).n_iter == 1
    assert competitive_penalized_learning(X, 75, random_state=0).n_iter <= 31


def test_fine_grained_micro_clusters_on_standardised_iris():
    X, y = _iris()
    results = [competitive_penalized_learning(X, 0.5, random_state=s) for s in range(5)]
    ks = [r.n_clusters for r in results]
    assert all(5 <= k <= 20 for k in ks)
    assert np.median([_purity(r.labels, y) for r in results]) >= 0.9
    # on [0, 1] data the unit-bandwidth kernel cannot tell the objects apart
    X01 = MinMaxScaler().fit_transform(load_iris().data)
    assert competitive_penalized_learning(X01, 0.5, random_state=0).n_clusters == 2


def test_engines_agree_and_runs_are_deterministic(monkeypatch):
    X, _ = make_blobs(300, n_features=5, centers=4, random_state=0)
    X = StandardScaler().fit_transform(X)
    runs = []
    monkeypatch.setattr(_cpl, "_COMPILED_MIN_ROWS", 0)
    for name in ENGINES + ENGINES:
        monkeypatch.setattr(_cpl, "_ENGINE", name)
        runs.append(competitive_penalized_learning(X, 0.5, random_state=3))
    for other in runs[1:]:
        np.testing.assert_array_equal(other.labels, runs[0].labels)
        np.testing.assert_allclose(other.centers, runs[0].centers, rtol=0, atol=1e-12)
    different = competitive_penalized_learning(X, 0.5, random_state=4)
    assert not np.array_equal(different.labels, runs[0].labels)


def test_shuffle_changes_the_visiting_order_only():
    X, _ = _iris()
    a = competitive_penalized_learning(X, 40, shuffle=True, random_state=0)
    b = competitive_penalized_learning(X, 40, shuffle=True, random_state=0)
    c = competitive_penalized_learning(X, 40, random_state=0)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert not np.array_equal(a.labels, c.labels)


def test_translation_at_large_magnitude_changes_nothing(engine):
    X, _ = make_blobs(200, n_features=4, centers=3, random_state=2)
    X = StandardScaler().fit_transform(X)
    offset = 1.7e9
    a = competitive_penalized_learning(X, 0.5, random_state=0)
    b = competitive_penalized_learning(X + offset, 0.5, random_state=0)
    np.testing.assert_array_equal(a.labels, b.labels)
    # two roundings to the float64 grid at this magnitude (spacing 2.4e-7), no more
    np.testing.assert_allclose(b.centers - offset, a.centers, rtol=0, atol=3e-7)
    np.testing.assert_allclose(b.feature_weights, a.feature_weights, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(
        weighted_assignment(X + offset, a.centers + offset, a.feature_weights),
        weighted_assignment(X, a.centers, a.feature_weights),
    )


def test_degenerate_inputs_give_documented_results(engine):
    # one sample: itself as the only cluster
    res = competitive_penalized_learning(np.array([[1.0, 2.0]]), 0.5, random_state=0)
    np.testing.assert_array_equal(res.centers, [[1.0, 2.0]])
    np.testing.assert_array_equal(res.labels, [0])
    assert res.n_iter == 0
    # identical rows: every center is the row, weights uniform
    X = np.tile([3.0, -1.0, 2.0], (20, 1))
    res = competitive_penalized_learning(X, 0.5, random_state=0)
    np.testing.assert_array_equal(res.centers, np.tile(X[0], (res.n_clusters, 1)))
    np.testing.assert_allclose(res.feature_weights, 1 / 3)
    assert np.isfinite(res.objective)
    # constant feature next to informative ones: no NaN anywhere, weight 0 on it
    X, _ = _iris()
    X = np.column_stack([X, np.full(len(X), 5.0)])
    res = competitive_penalized_learning(X, 0.5, random_state=0)
    assert np.isfinite(res.centers).all() and np.isfinite(res.feature_weights).all()
    assert res.n_clusters >= 3
    np.testing.assert_array_equal(res.feature_weights[:, -1], 0)


def test_resolve_initial_clusters():
    assert resolve_initial_clusters(0.5, 150) == 75
    assert resolve_initial_clusters(0.5, 5) == 2  # round half to even, as numpy
    assert resolve_initial_clusters(40, 150) == 40
    assert resolve_initial_clusters(400, 150) == 150
    assert resolve_initial_clusters(0.01, 150) == 2
    assert resolve_initial_clusters(0.5, 1) == 1
    assert resolve_initial_clusters(0.5, 150, max_clusters=30) == 30


def test_weighted_assignment_is_the_weighted_nearest_center():
    rng = np.random.RandomState(0)
    X, C = rng.normal(size=(50, 3)), rng.normal(size=(7, 3))
    W = rng.dirichlet(np.ones(3), size=7)
    brute = [np.argmin([(W[j] * (x - C[j]) ** 2).sum() for j in range(7)]) for x in X]
    np.testing.assert_array_equal(weighted_assignment(X, C, W), brute)


# --------------------------------------------------------------------------- #
# Federated steps
# --------------------------------------------------------------------------- #
def test_client_step_returns_what_the_client_uploads_and_keeps():
    X = _iris()[0][:80]
    res = fine_grained_cpl(X, random_state=0)
    assert res.centers.shape == res.feature_weights.shape == (res.n_clusters, 4)
    np.testing.assert_array_equal(res.sizes, np.bincount(res.labels))
    means = [X[res.labels == j].mean(axis=0) for j in range(res.n_clusters)]
    np.testing.assert_allclose(res.centers, means, atol=1e-12)
    assert fine_grained_cpl(X, max_local_init=3, random_state=0).n_clusters <= 3
    single = fine_grained_cpl(X[:1], random_state=0)
    np.testing.assert_array_equal(single.centers, X[:1])
    np.testing.assert_array_equal(single.sizes, [1])


def _micro_centroids():
    X, _ = make_blobs(600, n_features=3, centers=5, random_state=0)
    X = StandardScaler().fit_transform(X)
    return np.vstack(
        [
            fine_grained_cpl(part, random_state=i).centers
            for i, part in enumerate(np.array_split(X, 4))
        ]
    )


def test_mcpl_levels_strictly_decrease():
    T = _micro_centroids()
    res = multi_granular_cpl(T, random_state=0)
    K = res.n_clusters_per_level
    assert res.n_levels >= 2
    assert np.all(np.diff(K) < 0) and K[0] <= round(0.5 * len(T))
    assert res.granular_codes.shape == (len(T), res.n_levels)
    for t, k in enumerate(K):
        np.testing.assert_array_equal(np.unique(res.granular_codes[:, t]), np.arange(k))
    assert res.n_stages == res.n_levels + 1  # the stage that kept the count is dropped


def test_mcpl_stages_restart_from_scratch_with_only_the_count():
    T = _micro_centroids()
    res = multi_granular_cpl(T, random_state=np.random.RandomState(7))
    # Replaying the recursion with plain CPL runs on one random stream, each
    # given nothing but the previous count, reproduces every level.
    rng = np.random.RandomState(7)
    k = resolve_initial_clusters(0.5, len(T))
    for t in range(res.n_levels):
        stage = competitive_penalized_learning(T, k, random_state=rng)
        np.testing.assert_array_equal(stage.labels, res.granular_codes[:, t])
        k = stage.n_clusters
    assert competitive_penalized_learning(T, k, random_state=rng).n_clusters == k


def test_mcpl_bounds_and_errors():
    T = _micro_centroids()
    one = multi_granular_cpl(T, max_levels=1, random_state=0)
    assert one.n_levels == 1 and one.n_stages == 1
    loose = multi_granular_cpl(T, tol=np.inf, random_state=0)
    np.testing.assert_array_equal(
        loose.granular_codes, multi_granular_cpl(T, random_state=0).granular_codes
    )
    with pytest.raises(ValueError, match="at least 2"):
        multi_granular_cpl(T[:1])


# --------------------------------------------------------------------------- #
# Estimator
# --------------------------------------------------------------------------- #
def test_estimator_exposes_the_run():
    X, _ = _iris()
    est = CompetitivePenalizedLearning(initial_clusters=40, random_state=0).fit(X)
    res = competitive_penalized_learning(X, 40, random_state=0)
    np.testing.assert_array_equal(est.labels_, res.labels)
    np.testing.assert_array_equal(est.cluster_centers_, res.centers)
    assert est.n_clusters_ == res.n_clusters
    np.testing.assert_array_equal(
        est.predict(X[:30]), weighted_assignment(X[:30], res.centers, res.feature_weights)
    )


@parametrize_with_checks([CompetitivePenalizedLearning(random_state=0)])
def test_sklearn_compatible(estimator, check):
    check(estimator)
