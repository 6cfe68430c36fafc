"""Tests of FeCA: Algorithm 2 (elimination), Algorithms 3/4 (radii), Algorithm 5 (server)."""

import warnings

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist, pdist
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.utils._param_validation import InvalidParameterError

from skfedclust import FeCA
from skfedclust._feca import (
    eliminate_one_fit_many,
    feca_aggregate,
    feca_client_update,
    feca_server_aggregate,
    radius_empirical,
    radius_theoretical,
)
from skfedclust.partition import DirichletPartition, IIDPartition


def _max_matched_error(true_centers, centers):
    cost = cdist(true_centers, centers)
    rows, cols = linear_sum_assignment(cost)
    return cost[rows, cols].max()


# --------------------------------------------------------------------------- #
# Stochastic Ball Model (the setting of Theorem 4.1)
# --------------------------------------------------------------------------- #
SBM_CENTERS = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3) / 2]])
SBM_RADIUS = 1e-7


def _sbm_client(n, rng):
    """Uniform mixture of three disjoint balls of radius 1e-7 at unit mutual distance."""
    which = rng.randint(3, size=n)
    angle = rng.uniform(0, 2 * np.pi, size=n)
    radius = SBM_RADIUS * np.sqrt(rng.uniform(size=n))
    offsets = np.c_[np.cos(angle), np.sin(angle)] * radius[:, None]
    return SBM_CENTERS[which] + offsets


def _sbm_local_solution():
    """A Lloyd fixed point: one centroid between balls 0 and 1, two splitting ball 2."""
    half = 0.5 * SBM_RADIUS
    return np.array(
        [
            (SBM_CENTERS[0] + SBM_CENTERS[1]) / 2,
            SBM_CENTERS[2] - [half, 0],
            SBM_CENTERS[2] + [half, 0],
        ]
    )


@pytest.mark.parametrize("radius", ["theoretical", "empirical"])
def test_sbm_theorem_setting_recovers_true_grouping(radius):
    rng = np.random.RandomState(0)
    clients = [_sbm_client(3000, rng) for _ in range(5)]
    assign_radius = radius_theoretical if radius == "theoretical" else radius_empirical
    pooled_c, pooled_r, owner = [], [], []
    for m, Xm in enumerate(clients):
        # Clients 0 and 1 start from the local solution, the others from k-means++.
        init = _sbm_local_solution() if m < 2 else "k-means++"
        centers, clusters, n_removed = feca_client_update(Xm, 3, init=init, n_init=1, seed=m)
        if m < 2:
            # Exactly the one-fit-many centroid (between balls 0 and 1) is removed;
            # the two many-fit-one centroids of ball 2 are kept.
            assert n_removed == 1
            assert len(centers) == 2
            assert cdist(centers, SBM_CENTERS[[2]]).max() < 2 * SBM_RADIUS
        else:
            assert n_removed == 0
            assert len(centers) == 3
        pooled_c.append(centers)
        pooled_r.append(assign_radius(centers, clusters))
        owner.append(np.argmin(cdist(centers, SBM_CENTERS), axis=1))
    global_centers, groups = feca_server_aggregate(np.vstack(pooled_c), np.concatenate(pooled_r), 3)
    truth = np.concatenate(owner)
    # The server groups are exactly the sets of centroids of each true center.
    assert len(groups) == 3
    assert sorted(sorted(truth[g].tolist()) for g in groups) == [
        [s] * int((truth == s).sum()) for s in range(3)
    ]
    delta_min = pdist(SBM_CENTERS).min()
    assert _max_matched_error(SBM_CENTERS, global_centers) <= 0.16 * delta_min
    assert _max_matched_error(SBM_CENTERS, global_centers) < 1e-6


# --------------------------------------------------------------------------- #
# Algorithm 2 on four Gaussian blobs (spec check 2)
# --------------------------------------------------------------------------- #
def _four_blobs(rng):
    a = rng.normal([0, 0], 1.0, size=(400, 2))
    b = rng.normal([12, 0], 1.0, size=(400, 2))
    c = rng.normal([0, 40], 1.0, size=(400, 2))
    d = rng.normal([40, 40], 0.5, size=(200, 2))  # half the points, half the std of C
    return np.vstack([a, b, c, d])


FORCED_LOCAL = np.array([[6.0, 0.0], [-0.8, 40.0], [0.8, 40.0], [40.0, 40.0]])


def test_elimination_removes_only_the_one_fit_many_centroid():
    X = _four_blobs(np.random.RandomState(0))
    centers, clusters, n_removed = feca_client_update(X, 4, init=FORCED_LOCAL, n_init=1)
    assert n_removed == 1
    # The A/B centroid is gone; the two halves of C and the centroid of D stay.
    assert np.abs(centers[:, 1] - 40).max() < 1
    assert len(centers) == 3 and sum(len(D) for D in clusters) == 600  # A and B discarded


def test_elimination_keeps_a_global_optimum():
    X = _four_blobs(np.random.RandomState(1))
    optimum = np.array([[0.0, 0.0], [12.0, 0.0], [0.0, 40.0], [40.0, 40.0]])
    centers, _, n_removed = feca_client_update(X, 4, init=optimum, n_init=1)
    assert n_removed == 0 and len(centers) == 4


def test_merge_on_confirm_merges_the_many_fit_one_pair():
    X = _four_blobs(np.random.RandomState(2))
    centers, clusters, n_removed = feca_client_update(
        X, 4, init=FORCED_LOCAL, n_init=1, merge_on_confirm=True
    )
    assert n_removed == 1 and len(centers) == 2
    c_true = X[800:1200].mean(axis=0)  # blob C
    merged = np.argmin(np.abs(centers[:, 0]))
    np.testing.assert_allclose(centers[merged], c_true)
    assert len(clusters[merged]) == 400


def test_elimination_test_is_non_strict():
    # Candidate SSE equals the merged-pair SSE exactly: it is removed (G_i >= G_j).
    pair_p = np.array([[0.0, 0.0], [0.0, 2.0]])  # mean (0, 1), SSE 2
    pair_q = np.array([[3.0, 0.0], [3.0, 2.0]])  # mean (3, 1), SSE 2; merged SSE 13
    wide = np.array([[100.0, 0.0], [100.0, 2.0], [103.0, 0.0], [103.0, 2.0]])  # SSE 13
    clusters = [pair_p, pair_q, wide]
    centers = np.array([D.mean(axis=0) for D in clusters])
    kept, _, n_removed = eliminate_one_fit_many(centers, clusters)
    assert n_removed == 1
    np.testing.assert_array_equal(kept, centers[:2])
    # A slightly smaller candidate SSE (12.41 < 13) is kept.
    clusters[2] = wide * [1, 1] - [[0, 0], [0, 0], [0.1, 0], [0.1, 0]]
    centers[2] = clusters[2].mean(axis=0)
    _, _, n_removed = eliminate_one_fit_many(centers, clusters)
    assert n_removed == 0


def test_eliminate_false_keeps_every_centroid():
    X = _four_blobs(np.random.RandomState(0))
    centers, _, n_removed = feca_client_update(X, 4, init=FORCED_LOCAL, n_init=1, eliminate=False)
    assert n_removed == 0 and len(centers) == 4


def test_distance_std_spread_option_runs_the_same_loop():
    X = _four_blobs(np.random.RandomState(0))
    centers, _, n_removed = feca_client_update(
        X, 4, init=FORCED_LOCAL, n_init=1, spread="distance_std"
    )
    assert n_removed == 4 - len(centers)


# --------------------------------------------------------------------------- #
# Algorithms 3 and 4 on hand-built configurations
# --------------------------------------------------------------------------- #
def _cluster_around(center, r_own):
    """Two points at distance r_own on either side: mean = center, farthest point = r_own."""
    center = np.asarray(center, dtype=float)
    return np.vstack([center + [r_own, 0], center - [r_own, 0]])


HAND_CENTERS = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0], [10.0, 20.0]])
HAND_R_OWN = [0.8, 0.8, 1.0, 1.0]


def test_radius_empirical_hand_built():
    clusters = [_cluster_around(c, r) for c, r in zip(HAND_CENTERS, HAND_R_OWN)]
    # min(own farthest point, half the distance to the nearest other centroid)
    expected = [min(0.8, 0.5), min(0.8, 0.5), min(1.0, 4.5), min(1.0, 10.0)]
    np.testing.assert_allclose(radius_empirical(HAND_CENTERS, clusters), expected)
    # A single centroid keeps its farthest-point distance.
    np.testing.assert_allclose(radius_empirical(HAND_CENTERS[:1], clusters[:1]), [0.8])


def test_radius_theoretical_hand_built():
    clusters = [_cluster_around(c, r) for c, r in zip(HAND_CENTERS, HAND_R_OWN)]
    # Centroids 0 and 1 overlap (0.8 + 0.8 > 1): both are set aside; the alive
    # centroids 2 and 3 are 20 apart, so every centroid gets 20 / 2.
    np.testing.assert_allclose(radius_theoretical(HAND_CENTERS, clusters), [10.0] * 4)
    # Without the overlap (smaller own radii) the closest pair sets the radius.
    small = [_cluster_around(c, 0.1) for c in HAND_CENTERS]
    np.testing.assert_allclose(radius_theoretical(HAND_CENTERS, small), [0.5] * 4)
    # Fewer than two alive: half the smallest pairwise distance over all centroids.
    np.testing.assert_allclose(radius_theoretical(HAND_CENTERS[:2], clusters[:2]), [0.5, 0.5])
    # A single centroid keeps its own radius.
    np.testing.assert_allclose(radius_theoretical(HAND_CENTERS[:1], clusters[:1]), [0.8])


# --------------------------------------------------------------------------- #
# Algorithm 5 on a hand-built set
# --------------------------------------------------------------------------- #
def test_server_aggregation_hand_built():
    centers = np.array(
        [
            [0.0, 0.0],  # 0: largest radius, seeds group A
            [1.0, 0.0],  # 1: inside A
            [0.0, 2.0],  # 2: exactly on the boundary of A (closed ball)
            [10.0, 0.0],  # 3: radius tie with 4, lower index seeds group B
            [10.5, 0.0],  # 4: inside B
            [20.0, 0.0],  # 5: alone
            [0.0, 2.1],  # 6: just outside A, joins nothing else
        ]
    )
    radii = np.array([2.0, 0.5, 0.1, 1.0, 1.0, 0.3, 0.05])
    out, groups = feca_server_aggregate(centers, radii, 2)
    assert [g.tolist() for g in groups] == [[0, 1, 2], [3, 4], [5], [6]]
    np.testing.assert_allclose(out, [[1 / 3, 2 / 3], [10.25, 0.0]])
    # Equal-size groups keep creation order (larger seed radius first).
    out3, _ = feca_server_aggregate(centers, radii, 3)
    np.testing.assert_allclose(out3[2], [20.0, 0.0])


def test_server_uses_largest_remaining_radius():
    # Point 1 has a larger radius than 2 but is swallowed by 0's ball first, so
    # point 2 seeds the second group.
    centers = np.array([[0.0, 0.0], [0.5, 0.0], [5.0, 0.0], [5.0, 0.4]])
    radii = np.array([1.0, 0.9, 0.5, 0.1])
    _, groups = feca_server_aggregate(centers, radii, 2)
    assert [g.tolist() for g in groups] == [[0, 1], [2, 3]]


def test_server_groups_partition_the_received_centroids():
    X, _ = make_blobs(1500, centers=6, cluster_std=1.0, random_state=3)
    est = FeCA(6, partition=5, random_state=0).fit(X)
    pooled = np.concatenate(est.server_groups_)
    n_pooled = sum(len(c) for c in est.local_centers_)
    assert sorted(pooled.tolist()) == list(range(n_pooled))
    for centers, radii in zip(est.local_centers_, est.radii_):
        assert len(centers) <= 6
        if len(centers) > 1:
            nearest = np.sort(cdist(centers, centers), axis=1)[:, 1]
            assert np.all(radii <= nearest / 2 + 1e-12)


# --------------------------------------------------------------------------- #
# Estimator behaviour
# --------------------------------------------------------------------------- #
def _separated_blobs(random_state=0):
    grid = np.array([[x, y] for x in (0, 20, 40) for y in (0, 20)], dtype=float)
    X, y = make_blobs(3000, centers=grid, cluster_std=1.0, random_state=random_state)
    return X, y, grid


@pytest.mark.parametrize(
    "partition",
    [IIDPartition(10), DirichletPartition(10, alpha=0.3)],
    ids=["iid", "dirichlet0.3"],
)
def test_recovers_well_separated_centers(partition):
    X, y, truth = _separated_blobs()
    est = FeCA(6, partition=partition, random_state=0).fit(X, y)
    assert est.n_clusters_ == 6
    assert _max_matched_error(truth, est.cluster_centers_) < 0.3
    assert adjusted_rand_score(y, est.labels_) > 0.99
    np.testing.assert_array_equal(est.predict(X), est.labels_)


def test_deterministic_and_n_jobs_invariant():
    X, y, _ = _separated_blobs(1)
    part = DirichletPartition(4, alpha=0.3)
    a = FeCA(6, partition=part, random_state=7, n_jobs=1).fit(X, y)
    b = FeCA(6, partition=part, random_state=7, n_jobs=2).fit(X, y)
    c = FeCA(6, partition=part, random_state=7, n_jobs=1).fit(X, y)
    for other in (b, c):
        np.testing.assert_array_equal(a.cluster_centers_, other.cluster_centers_)
        np.testing.assert_array_equal(a.labels_, other.labels_)
        for r1, r2 in zip(a.radii_, other.radii_):
            np.testing.assert_array_equal(r1, r2)


def test_communication_is_one_round_of_centroids_and_radii():
    X, _, _ = _separated_blobs()
    est = FeCA(6, partition=4, random_state=0).fit(X)
    comm = est.communication_
    assert comm["rounds"] == 1
    # One upload per client (centroids and radii) and one download (global centers).
    assert comm["n_messages"] == 2 * 4
    d = X.shape[1]
    expected_up = sum(len(c) * (d + 1) * 8 for c in est.local_centers_)
    assert comm["bytes_up"] == expected_up
    assert np.all(comm["per_client"]["bytes_up"] <= 6 * (d + 1) * 8)


def test_final_lloyd_step_matches_one_centralized_lloyd_iteration():
    X, y = make_blobs(1200, centers=5, cluster_std=2.5, random_state=4)
    est = FeCA(5, partition=4, final_lloyd_step=True, random_state=0).fit(X)
    assert est.communication_["rounds"] == 2
    ref = KMeans(5, init=est.feca_centers_, n_init=1, max_iter=1).fit(X)
    np.testing.assert_allclose(est.cluster_centers_, ref.cluster_centers_, rtol=1e-10)
    np.testing.assert_array_equal(est.labels_, ref.labels_)


def test_feca_aggregate_matches_estimator_on_client_list():
    X, _, truth = _separated_blobs()
    clients = [X[i::3] for i in range(3)]
    centers = feca_aggregate(clients, 6, random_state=0)
    assert _max_matched_error(truth, centers) < 0.3


# --------------------------------------------------------------------------- #
# Bad or degenerate input
# --------------------------------------------------------------------------- #
def test_client_with_fewer_samples_than_clusters():
    X, _, truth = _separated_blobs()
    clients = [X[:1500], X[1500:2997], X[2997:]]  # the last client holds 3 rows < 6
    est = FeCA(6, random_state=0).fit(clients)
    # The small client runs 3-means: each cluster is one point, radius 0.
    np.testing.assert_allclose(
        np.sort(est.local_centers_[2], axis=0), np.sort(X[2997:], axis=0), atol=1e-9
    )
    np.testing.assert_allclose(est.radii_[2], 0, atol=1e-9)
    assert est.n_clusters_ == 6
    # Its points join the groups of their blobs as equal members of the
    # unweighted group mean, so the error stays below a third of a blob's spread.
    assert _max_matched_error(truth, est.cluster_centers_) < 1.0


def test_one_cluster_is_the_mean_of_equal_clients():
    X, _, _ = _separated_blobs()
    est = FeCA(1, partition=IIDPartition(5), random_state=0).fit(X)
    np.testing.assert_allclose(est.cluster_centers_, X.mean(axis=0, keepdims=True))
    assert np.all(est.labels_ == 0)


def test_duplicate_points_give_exact_centers():
    points = np.array([[0.0, 0.0], [5.0, 5.0], [9.0, 1.0]])
    X = np.repeat(points, 20, axis=0)
    est = FeCA(3, partition=3, random_state=0).fit(X)
    order = np.lexsort(est.cluster_centers_.T[::-1])
    np.testing.assert_allclose(est.cluster_centers_[order], points, atol=1e-9)
    assert all(np.all(r < 1e-9) for r in est.radii_)


def test_fewer_groups_than_clusters_warns_and_returns_them():
    X = np.repeat(np.array([[0.0, 0.0], [5.0, 5.0]]), 15, axis=0)
    with pytest.warns(UserWarning, match="only 2 radius groups"):
        est = FeCA(3, partition=3, random_state=0).fit(X)
    assert est.n_clusters_ == 2 and est.cluster_centers_.shape == (2, 2)
    assert set(est.labels_) == {0, 1}


def test_bad_parameters_raise():
    X, _, _ = _separated_blobs()
    with pytest.raises(InvalidParameterError):
        FeCA(6, radius="largest").fit(X)
    with pytest.raises(ValueError, match="init has shape"):
        FeCA(6, init=np.zeros((5, 2))).fit(X)
    with pytest.raises(ValueError, match="n_samples=3 should be >= 6"):
        FeCA(6).fit(X[:3])
    with pytest.raises(ValueError, match="NaN"):
        FeCA(2).fit(np.array([[0.0, np.nan], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]))


def test_no_warning_on_regular_data():
    X, _, _ = _separated_blobs()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FeCA(6, partition=3, random_state=0).fit(X)


# --------------------------------------------------------------------------- #
# DirichletPartition(method="hsu"): Hsu et al.'s per-client mixtures
# --------------------------------------------------------------------------- #
def test_dirichlet_hsu_every_sample_in_exactly_one_client():
    X, y = make_blobs(1003, centers=8, random_state=0)
    spec = DirichletPartition(7, alpha=0.1, method="hsu", random_state=0)
    rows = list(spec.split(X, y))
    assert sorted(np.concatenate(rows).tolist()) == list(range(1003))
    assert sorted(len(r) for r in rows) == [143] * 5 + [144] * 2
    # Small alpha: each client is dominated by few classes.
    top_share = [np.bincount(y[r]).max() / len(r) for r in rows]
    assert np.median(top_share) > 0.5
    # Large alpha: mixtures close to the class prior.
    iidish = DirichletPartition(7, alpha=1000.0, method="hsu", random_state=0).split(X, y)
    assert max(np.bincount(y[r], minlength=8).max() / len(r) for r in iidish) < 0.25
    again = list(DirichletPartition(7, alpha=0.1, method="hsu", random_state=0).split(X, y))
    assert all(np.array_equal(a, b) for a, b in zip(rows, again))
    with pytest.raises(ValueError, match="method must be"):
        list(DirichletPartition(7, method="nope").split(X, y))
