"""Tests of FeCA: Algorithm 2 (elimination), Algorithms 3/4 (radii), Algorithm 5 (server).

Every step of the protocol has a hand-built case decided by that step: the
tests named ``test_step*`` for Algorithm 2, ``test_radius*`` for Algorithms 3
and 4, ``test_server*`` for Algorithm 5, and ``test_protocol*`` for the one
message each client sends.
"""

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
from skfedclust.federation import Party, Received
from skfedclust.methods._centroid_steps import secure_inertia_communication as inertia_cost
from skfedclust.methods._feca import (
    eliminate_one_fit_many,
    feca_aggregate,
    feca_client_step,
    feca_client_update,
    feca_server_aggregate,
    feca_server_step,
    lloyd_server_update,
    radius_empirical,
    radius_theoretical,
)
from skfedclust.partition import DirichletPartition, IIDPartition
from skfedclust.utils.protocol_checks import check_protocol

#: compute_inertia=False (the default): nothing is exchanged for inertia_ after the fit.
NO_INERTIA = dict.fromkeys(inertia_cost(3), 0)


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
# Algorithm 2 on four Gaussian blobs (the paper's local-solution picture)
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


def test_eliminate_false_keeps_every_centroid():
    X = _four_blobs(np.random.RandomState(0))
    centers, _, n_removed = feca_client_update(X, 4, init=FORCED_LOCAL, n_init=1, eliminate=False)
    assert n_removed == 0 and len(centers) == 4


# --------------------------------------------------------------------------- #
# Algorithm 2, one test per step, on hand-built clusters
# --------------------------------------------------------------------------- #
# Every case below is decided by the step it is named for: changing that step
# (another candidate, another pair, another merged SSE, a strict test, ...)
# changes which centroids are kept.
def _segment(center, half_width, reps=1):
    """Points at ``center +- (half_width, 0)``: mean ``center``, RMS spread ``half_width``.

    Every point lies at the same distance, so the standard deviation of the
    distances is 0. SSE ``2 * reps * half_width**2``.
    """
    center = np.asarray(center, dtype=float)
    return np.tile(np.vstack([center + [half_width, 0], center - [half_width, 0]]), (reps, 1))


def _spike(center, half_width, n_center):
    """``n_center`` points on ``center`` and two at ``+- (half_width, 0)``: unequal distances."""
    center = np.asarray(center, dtype=float)
    return np.vstack(
        [np.tile(center, (n_center, 1)), center + [half_width, 0], center - [half_width, 0]]
    )


def _eliminate(clusters, **kwargs):
    centers = np.array([D.mean(axis=0) for D in clusters])
    return eliminate_one_fit_many(centers, clusters, **kwargs)


# The many-fit-one pair of every case: the closest centroids, SSE 2 each;
# merged they give the points -1, 1, 2, 4 around 1.5, so G_j = 13.
PAIR = [_segment((0, 0), 1.0), _segment((3, 0), 1.0)]
PAIR_CENTERS = [[0.0, 0.0], [3.0, 0.0]]


#: Parameters of feca_client_step other than the local k.
CLIENT_STEP_DEFAULTS = {
    "radius": "empirical",
    "spread": "rms",
    "merge_on_confirm": False,
    "eliminate": True,
    "init": "k-means++",
    "n_init": 10,
    "max_iter": 300,
    "tol": 1e-4,
}


def test_step1_local_kmeans_drops_empty_clusters():
    # Two distinct rows for k' = 3: the third cluster comes back empty and is
    # not sent (it has no points, hence no radius).
    data = np.repeat([[0.0, 0.0], [5.0, 5.0]], 6, axis=0)
    reply = feca_client_step(
        data, {}, {}, Party(0, seed=0), n_local_clusters=3, **{**CLIENT_STEP_DEFAULTS, "n_init": 1}
    )
    centers, radii, n_removed, _ = reply.send
    assert n_removed == 0
    np.testing.assert_allclose(np.sort(centers, axis=0), [[0.0, 0.0], [5.0, 5.0]])
    np.testing.assert_array_equal(radii, [0.0, 0.0])


def test_step_a_candidate_has_the_largest_rms_spread():
    wide = _segment((100, 0), 3.0)  # RMS 3, SSE 18 >= 13: the one-fit-many centroid
    tight = _segment((0, 100), 0.5, reps=100)  # RMS 0.5 but SSE 50: the largest SSE
    centers, _, n_removed = _eliminate([*PAIR, wide, tight])
    # The widest cluster is removed; then the pair holds the largest spread and
    # the loop stops. A candidate by SSE (or the smallest spread) would remove
    # the tight cluster instead.
    assert n_removed == 1
    np.testing.assert_array_equal(centers, [*PAIR_CENTERS, [0.0, 100.0]])


def test_step_a_distance_std_spread_picks_another_candidate():
    wide = _segment((100, 0), 3.0)  # distance std 0, RMS 3, SSE 18 >= 13
    spike = _spike((0, 100), 2.0, 3)  # distance std 0.98, RMS 1.26, SSE 8 < 13
    centers, _, n_removed = _eliminate([*PAIR, wide, spike], spread="rms")
    assert n_removed == 1
    np.testing.assert_array_equal(centers, [*PAIR_CENTERS, [0.0, 100.0]])
    # By the std of the distances only the spike spreads at all: it is the
    # candidate, its SSE is below G_j, nothing is removed.
    centers, _, n_removed = _eliminate([*PAIR, wide, spike], spread="distance_std")
    assert n_removed == 0
    np.testing.assert_array_equal(centers, [*PAIR_CENTERS, [100.0, 0.0], [0.0, 100.0]])


def test_step_a_spread_ties_go_to_the_lowest_index():
    # Two candidates of equal spread (SSE 18 >= 13 each). With merge_on_confirm
    # the first removal also merges the pair and leaves two centroids, so the
    # survivor shows which candidate went first.
    first, second = _segment((100, 0), 3.0), _segment((0, 100), 3.0)
    centers, _, n_removed = _eliminate([*PAIR, first, second], merge_on_confirm=True)
    assert n_removed == 1
    np.testing.assert_array_equal(centers, [[0.0, 100.0], [1.5, 0.0]])


def test_steps_b_d_e_test_is_non_strict():
    # Candidate SSE equals the merged-pair SSE exactly: it is removed (G_i >= G_j).
    pair_p = np.array([[0.0, 0.0], [0.0, 2.0]])  # mean (0, 1), SSE 2
    pair_q = np.array([[3.0, 0.0], [3.0, 2.0]])  # mean (3, 1), SSE 2; merged SSE 13
    wide = np.array([[100.0, 0.0], [100.0, 2.0], [103.0, 0.0], [103.0, 2.0]])  # SSE 13
    clusters = [pair_p, pair_q, wide]
    centers = np.array([D.mean(axis=0) for D in clusters])
    kept, _, n_removed = eliminate_one_fit_many(centers, clusters)
    assert n_removed == 1
    np.testing.assert_array_equal(kept, centers[:2])
    # A slightly smaller candidate SSE (12.41 < 13) is kept: G_j counts the
    # distance between the pair (G_p + G_q alone is 4).
    clusters[2] = wide * [1, 1] - [[0, 0], [0, 0], [0.1, 0], [0.1, 0]]
    centers[2] = clusters[2].mean(axis=0)
    _, _, n_removed = eliminate_one_fit_many(centers, clusters)
    assert n_removed == 0


def test_step_c_pair_is_the_closest_one():
    third = _segment((9, 0), 1.0)  # 6 from the pair: merged with it, G_j = 40
    wide = _segment((100, 0), 3.0)  # SSE 18: between 13 and 40
    centers, _, n_removed = _eliminate([*PAIR, third, wide])
    assert n_removed == 1
    np.testing.assert_array_equal(centers, [*PAIR_CENTERS, [9.0, 0.0]])


def test_step_c_pair_ties_go_to_the_lexicographically_smallest_pair():
    # A second pair at the same distance 3, with five times the points: G_j = 65.
    heavy = [_segment((50, 0), 1.0, reps=5), _segment((53, 0), 1.0, reps=5)]
    wide = _segment((100, 100), 3.0)  # SSE 18: removed against 13, kept against 65
    _, _, n_removed = _eliminate([*PAIR, *heavy, wide])
    assert n_removed == 1
    _, _, n_removed = _eliminate([*heavy, *PAIR, wide])
    assert n_removed == 0


def test_step_d_merged_centroid_is_the_mean_of_both_clusters():
    # Unequal sizes: the merged mean is 2.25 (SSE 21.5), not the midpoint 1.5 of
    # the two centroids (SSE 26 around it).
    pair = [_segment((0, 0), 1.0), _segment((3, 0), 1.0, reps=3)]
    wide = _segment((100, 0), 3.3)  # SSE 21.78
    _, _, n_removed = _eliminate([*pair, wide])
    assert n_removed == 1
    centers, clusters, _ = _eliminate([*pair, wide], merge_on_confirm=True)
    np.testing.assert_allclose(centers, [[2.25, 0.0]])
    assert len(clusters[0]) == 8


def test_step_e_removes_only_the_candidate_and_continues():
    # Two candidates above G_j = 13 (SSE 18 and 16.82): both go, one per
    # iteration; the pair stays as it was (centroids not recomputed, points of
    # the removed clusters discarded, not reassigned).
    clusters = [*PAIR, _segment((100, 0), 3.0), _segment((0, 100), 2.9)]
    centers, kept, n_removed = _eliminate(clusters)
    assert n_removed == 2
    np.testing.assert_array_equal(centers, PAIR_CENTERS)
    assert len(kept) == 2
    for got, want in zip(kept, PAIR):
        np.testing.assert_array_equal(got, want)


def test_step_e_stops_at_the_first_candidate_below_the_merged_sse():
    # The widest cluster has SSE 12.5 < 13: the loop stops, although the next
    # candidate (SSE 24 >= 13) would pass the test.
    clusters = [*PAIR, _segment((100, 0), 2.5), _segment((0, 100), 2.0, reps=3)]
    _, _, n_removed = _eliminate(clusters)
    assert n_removed == 0


def test_step_e_merge_on_confirm_replaces_the_pair_by_its_union():
    centers, clusters, n_removed = _eliminate(
        [*PAIR, _segment((100, 0), 3.0)], merge_on_confirm=True
    )
    assert n_removed == 1
    np.testing.assert_array_equal(centers, [[1.5, 0.0]])
    np.testing.assert_array_equal(clusters[0], np.vstack(PAIR))


def test_step_f_loop_runs_with_three_centroids():
    centers, _, n_removed = _eliminate([*PAIR, _segment((100, 0), 3.0)])
    assert n_removed == 1
    np.testing.assert_array_equal(centers, PAIR_CENTERS)


def test_step_f_stops_when_the_candidate_is_in_the_closest_pair():
    # Degenerate equality: a one-point cluster on the candidate's centroid.
    # The candidate (SSE 2) is one of the closest pair, whose merged SSE is
    # also 2, so without the guard the test G_i >= G_j would remove it.
    clusters = [_segment((0, 0), 1.0), np.array([[0.0, 0.0]]), _segment((50, 0), 0.5)]
    _, _, n_removed = _eliminate(clusters)
    assert n_removed == 0


# --------------------------------------------------------------------------- #
# The client step on one hand-built client (Algorithms 2 and 4 together)
# --------------------------------------------------------------------------- #
def _jigsaw_client():
    """One client: a many-fit-one pair, a one-fit-many cluster next to a spiky cluster.

    The cluster means are a Lloyd fixed point, so the local k-means started
    there (``init=means, n_init=1``) returns exactly these clusters.
    """
    clusters = [
        *PAIR,
        _segment((0, 103.5), 3.0),  # RMS 3, SSE 18 >= 13: removed with spread="rms"
        _spike((0, 100), 2.0, 10),  # RMS 0.82, SSE 8, farthest point 2, 3.5 from the above
    ]
    return np.vstack(clusters), np.array([D.mean(axis=0) for D in clusters])


def _fit_jigsaw(**params):
    X, means = _jigsaw_client()
    params = {"client_n_clusters": 4, "init": means, "n_init": 1, "random_state": 0, **params}
    return FeCA(2, **params).fit([X])


@pytest.mark.parametrize(
    "params, n_removed, kept, radii",
    [
        # Defaults: the local k is client_n_clusters (4), not n_clusters (2);
        # the one-fit-many centroid goes. The spiky cluster's radius is its
        # farthest point 2: half the distance to the removed centroid (1.75)
        # does not count, radii use the refined centroids only.
        ({}, 1, [*PAIR_CENTERS, [0.0, 100.0]], [1.0, 1.0, 2.0]),
        ({"spread": "distance_std"}, 0, [*PAIR_CENTERS, [0.0, 103.5], [0.0, 100.0]], None),
        ({"eliminate": False}, 0, [*PAIR_CENTERS, [0.0, 103.5], [0.0, 100.0]], None),
        ({"merge_on_confirm": True}, 1, [[0.0, 100.0], [1.5, 0.0]], None),
        # Algorithm 3: no ball overlaps, so every radius is half of 3.
        ({"radius": "theoretical"}, 1, [*PAIR_CENTERS, [0.0, 100.0]], [1.5, 1.5, 1.5]),
    ],
    ids=["defaults", "distance_std", "no-elimination", "merge", "alg3"],
)
def test_client_step_options_reach_the_client(params, n_removed, kept, radii):
    est = _fit_jigsaw(**params)
    assert est.n_removed_.tolist() == [n_removed]
    np.testing.assert_allclose(est.local_centers_[0], kept, atol=1e-9)
    if radii is not None:
        np.testing.assert_allclose(est.radii_[0], radii)


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


def test_radius_is_the_farthest_own_point():
    # Own points at distances 1 and 0.2 (mean distance 0.6): r' is the largest.
    cross = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.2], [0.0, -0.2]])
    centers = np.array([[0.0, 0.0], [10.0, 0.0]])
    clusters = [cross, _cluster_around(centers[1], 0.5)]
    np.testing.assert_allclose(radius_empirical(centers, clusters), [1.0, 0.5])
    # Algorithm 3: with r' = 1 the cross overlaps its neighbour 1.4 away
    # (1 + 0.5 > 1.4), both are set aside and the two far centroids, 20
    # apart, set the radius.
    centers = np.array([[0.0, 0.0], [1.4, 0.0], [10.0, 0.0], [30.0, 0.0]])
    clusters = [cross] + [_cluster_around(c, 0.5) for c in centers[1:]]
    np.testing.assert_allclose(radius_theoretical(centers, clusters), [10.0] * 4)


def test_radius_theoretical_touching_balls_do_not_overlap():
    # r'_0 + r'_1 = 0.5 + 0.5 equals their distance 1: not an overlap, so the
    # closest pair stays alive and sets the radius.
    centers = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0], [30.0, 0.0]])
    clusters = [_cluster_around(c, 0.5) for c in centers]
    np.testing.assert_allclose(radius_theoretical(centers, clusters), [0.5] * 4)


def test_radius_theoretical_visits_in_index_order_among_alive_centroids():
    centers = np.array([[0.0, 0.0], [1.0, 0.0], [2.5, 0.0], [10.0, 0.0], [30.0, 0.0]])
    clusters = [_cluster_around(c, r) for c, r in zip(centers, [0.6, 0.6, 1.0, 1.0, 1.0])]
    # 0 and 1 overlap and are set aside first. Centroid 2's nearest centroid is
    # then the dead 1 (1.5 away, overlapping); its nearest *alive* one is 3,
    # 7.5 away, without overlap: 2 stays alive and 7.5 / 2 is the radius. (In
    # reverse order 2 and 1 would die together and 0 would survive: 10 / 2.)
    np.testing.assert_allclose(radius_theoretical(centers, clusters), [3.75] * 5)


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


def test_server_seeds_with_the_largest_radius_not_the_first_centroid():
    # Centroid 1 has the larger radius: its ball takes 0 too. Seeded in pooled
    # order, 0's small ball would leave two groups.
    centers = np.array([[0.0, 0.0], [0.5, 0.0]])
    radii = np.array([0.1, 1.0])
    out, groups = feca_server_aggregate(centers, radii, 2)
    assert [g.tolist() for g in groups] == [[0, 1]]
    np.testing.assert_allclose(out, [[0.25, 0.0]])


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


def test_server_keeps_the_largest_groups_not_the_first():
    centers = np.array(
        [
            [100.0, 0.0],  # 0: the largest radius seeds the first group, alone
            [0.0, 0.0],  # 1-3: a group of three
            [0.5, 0.0],
            [0.0, 0.5],
            [10.0, 0.0],  # 4-5: a group of two
            [10.5, 0.0],
        ]
    )
    radii = np.array([5.0, 1.0, 0.2, 0.2, 0.8, 0.2])
    out, groups = feca_server_aggregate(centers, radii, 2)
    assert [g.tolist() for g in groups] == [[1, 2, 3], [4, 5], [0]]
    np.testing.assert_allclose(out, [[1 / 6, 1 / 6], [10.25, 0.0]])


def test_server_radius_ties_go_to_the_lowest_pooled_index():
    # 0 and 1 tie: 0 seeds and its ball (radius 1) misses 2; seeded by 1 the
    # ball would take all three.
    centers = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]])
    radii = np.array([1.0, 1.0, 0.1])
    _, groups = feca_server_aggregate(centers, radii, 2)
    assert [g.tolist() for g in groups] == [[0, 1], [2]]


def test_server_step_pools_clients_in_client_order():
    # The radius tie is across clients: client 0's centroid seeds.
    uploads = Received(
        "centroids and radii",
        {
            1: (np.array([[1.0, 0.0], [2.0, 0.0]]), np.array([1.0, 0.1])),
            0: (np.array([[0.0, 0.0]]), np.array([1.0])),
        },
    )
    centers, groups = feca_server_step(uploads, n_clusters=2)
    assert [g.tolist() for g in groups] == [[0, 1], [2]]
    np.testing.assert_allclose(centers, [[0.5, 0.0], [2.0, 0.0]])


def test_estimator_keeps_the_largest_groups():
    # Every client holds blobs A and B; clients 1 and 2 also hold C, client 0
    # a wide blob Z far away. Z's centroid has the largest radius and seeds the
    # first server group, of size 1; A and B (three centroids each) and then C
    # (two) are the largest groups.
    rng = np.random.RandomState(0)
    a, b, c = [0.0, 0.0], [10.0, 0.0], [0.0, 10.0]

    def blob(center, n, std=0.3):
        return rng.normal(center, std, size=(n, 2))

    clients = [
        np.vstack([blob(a, 50), blob(b, 50), blob([100.0, 100.0], 50, std=3.0)]),
        np.vstack([blob(a, 50), blob(b, 50), blob(c, 50)]),
        np.vstack([blob(a, 50), blob(b, 50), blob(c, 50)]),
    ]
    est = FeCA(2, client_n_clusters=3, random_state=0).fit(clients)
    assert _max_matched_error(np.array([a, b]), est.cluster_centers_) < 0.2
    est = FeCA(3, client_n_clusters=3, random_state=0).fit(clients)
    assert _max_matched_error(np.array([a, b, c]), est.cluster_centers_) < 0.2
    assert [len(g) for g in est.server_groups_] == [3, 3, 2, 1]


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


@pytest.mark.parametrize("final_lloyd_step", [False, True], ids=["one-shot", "lloyd"])
def test_protocol_rounds_and_bytes(final_lloyd_step):
    X, _, _ = _separated_blobs()
    n_clients, k, d = 4, 6, X.shape[1]
    est = FeCA(
        k,
        partition=n_clients,
        final_lloyd_step=final_lloyd_step,
        secure_aggregation=False,
        random_state=0,
    )

    def bytes_up(runtime):
        # Client i sends its k_i kept centroids (k_i x d float64) and their k_i
        # float64 radii: 8 (d + 1) k_i bytes, with k_i = k' - (removed by client i),
        # and two int64 diagnostics (removed centroids, local iterations).
        k_kept = [k - n for n in est.n_removed_]
        up = sum(8 * (d + 1) * k_i + 16 for k_i in k_kept)
        if final_lloyd_step:
            # Lloyd round: per-center sums (k x d float64) and counts (k int64).
            up += n_clients * (8 * k * d + 8 * k)
        return up

    # Every broadcast sends the k x d float64 centers to every client. The
    # labels and the inertia's secure sums follow the last one.
    n_broadcasts = 2 if final_lloyd_step else 1
    inertia = NO_INERTIA
    check_protocol(
        est,
        X,
        rounds=1 + final_lloyd_step + inertia["rounds"],
        bytes_up=lambda rt: bytes_up(rt) + inertia["bytes_up"],
        bytes_down=n_broadcasts * n_clients * 8 * k * d + inertia["bytes_down"],
        bytes_peer=inertia["bytes_peer"],
    )
    assert est.n_clusters_ == k
    assert not hasattr(est, "inertia_")


def test_protocol_sends_what_the_client_kept_and_radii_of_its_clusters():
    # What the server receives is exactly the client's refined centroids and
    # their radii: removed centroids (here one per client) are never sent.
    X, means = _jigsaw_client()
    est = FeCA(2, client_n_clusters=4, init=means, n_init=1)
    inertia = NO_INERTIA
    runtime = check_protocol(
        est,
        [X, X + [0.0, 1.0], X + [1.0, 0.0]],
        rounds=1 + inertia["rounds"],
        bytes_up=3 * (3 * (2 + 1) * 8 + 16) + inertia["bytes_up"],
        bytes_down=3 * 2 * 2 * 8 + inertia["bytes_down"],
    )
    (uploads,) = [r for r in runtime.received if r.tag == "centroids and radii"]
    for (centers, radii, _, _), sent_centers, sent_radii in zip(
        uploads.list(), est.local_centers_, est.radii_
    ):
        np.testing.assert_array_equal(centers, sent_centers)
        np.testing.assert_array_equal(radii, sent_radii)
    assert est.n_removed_.tolist() == [1, 1, 1]


@pytest.mark.parametrize("secure", [True, False], ids=["secure", "clear"])
@pytest.mark.parametrize("offset", [0.0, 1.7e9])
def test_final_lloyd_step_matches_one_centralized_lloyd_iteration(secure, offset):
    X, y = make_blobs(1200, centers=5, cluster_std=2.5, random_state=4)
    X = X + offset
    est = FeCA(
        5, partition=4, final_lloyd_step=True, secure_aggregation=secure, random_state=0
    ).fit(X)
    # The Lloyd step: one round in the clear; by secure sums a bound and the
    # sums, two exchanges each, after a set-up round.
    assert est.communication_["rounds"] == (5 if secure else 2)
    assert est.communication_["setup_rounds"] == int(secure)
    ref = KMeans(5, init=est.feca_centers_, n_init=1, max_iter=1).fit(X)
    np.testing.assert_allclose(est.cluster_centers_, ref.cluster_centers_, rtol=1e-12)
    np.testing.assert_array_equal(est.labels_, ref.labels_)


def test_secure_final_lloyd_step_sends_no_clients_sums():
    X, _, _ = _separated_blobs()
    runtime = check_protocol(
        FeCA(6, partition=4, final_lloyd_step=True, random_state=0), X, rounds=5
    )
    tags = {r.tag for r in runtime.received}
    assert "sums and counts" not in tags and "secure sum: masked vectors" in tags


def test_lloyd_server_update_adds_back_the_first_center():
    # Clients sum their rows relative to centers[0]; an empty center stays.
    centers = np.array([[10.0, 0.0], [20.0, 0.0], [30.0, 0.0]])
    stats = Received(
        "sums and counts",
        {
            0: (np.array([[1.0, 0.0], [21.0, 0.0], [0.0, 0.0]]), np.array([1, 2, 0])),
            1: (np.array([[-1.0, 2.0], [0.0, 0.0], [0.0, 0.0]]), np.array([1, 0, 0])),
        },
    )
    new = lloyd_server_update(stats, centers=centers)
    np.testing.assert_allclose(new, [[10.0, 1.0], [20.5, 0.0], [30.0, 0.0]])


@pytest.mark.parametrize("final_lloyd_step", [False, True], ids=["one-shot", "lloyd"])
def test_large_offset_leaves_labels_unchanged(final_lloyd_step):
    # 1.7e9 is a Unix timestamp: adding it to every value must not change the
    # clustering (up to relabelling), and predict on the training rows still
    # gives labels_.
    X, _ = make_blobs(1200, centers=5, cluster_std=2.5, random_state=4)
    params = {"partition": 4, "final_lloyd_step": final_lloyd_step, "random_state": 0}
    ref = FeCA(5, **params).fit(X)
    est = FeCA(5, **params).fit(X + 1.7e9)
    assert adjusted_rand_score(ref.labels_, est.labels_) == 1.0
    np.testing.assert_allclose(est.cluster_centers_ - 1.7e9, ref.cluster_centers_, atol=1e-5)
    np.testing.assert_array_equal(est.predict(X + 1.7e9), est.labels_)


@pytest.mark.parametrize("final_lloyd_step", [False, True], ids=["one-shot", "lloyd"])
def test_predict_on_training_rows_gives_labels(final_lloyd_step):
    # labels_ are the nearest cluster_centers_ (the refined ones after the Lloyd step).
    X, _ = make_blobs(600, centers=4, cluster_std=3.0, random_state=5)
    est = FeCA(4, partition=3, final_lloyd_step=final_lloyd_step, random_state=0).fit(X)
    np.testing.assert_array_equal(est.predict(X), est.labels_)


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
