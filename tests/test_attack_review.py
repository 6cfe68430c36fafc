"""A malicious coordinator against deployed nodes (default ``NodePolicy()``): attacks refused.

Each test drives package client steps with parameters a hostile server chooses and
checks that a node with the default policy refuses, naming the rule.
"""

import numpy as np
import pytest

from skfedclust.federation import Federation, InProcessRuntime
from skfedclust.federation._runtime import client_step_name, resolve_client_step
from skfedclust.methods._centroid_steps import lloyd_deviations
from skfedclust.methods._fedkmeans_steps import (
    TAG_CENTERS,
    TAG_RELOCATE,
    fedkmeans_cluster_inertia,
    fedkmeans_far_rows,
    fedkmeans_largest_distances,
    fedkmeans_lloyd_statistics,
    fedkmeans_nearest_distances,
)
from skfedclust.methods._fedsc_steps import fedsc_rows
from skfedclust.metrics import cluster_moments_bound_step
from skfedclust.node._policy import NodePolicy


def _deployed(n_per_client=20, n_clients=4, d=3, seed=0, clear_sums=True, centers=True):
    # Nodes that allow sums in the clear (secure_aggregation=False) and centers the
    # coordinator chose (coordinator="sees-totals"), so that the row rules are what
    # refuses; ``clear_sums=False, centers=False`` is the default node.
    X = np.random.default_rng(seed).normal(size=(n_per_client * n_clients, d))
    rows = [np.arange(n_per_client * c, n_per_client * (c + 1)) for c in range(n_clients)]
    federation = Federation(X, rows)
    federation.spawn_seeds(np.random.RandomState(0))
    policy = NodePolicy(
        allow_clear_sums=clear_sums, allow_coordinator_centers="*" if centers else ()
    )
    return X, rows, InProcessRuntime(federation, policy=policy)


def _no_message(runtime, tag):
    return not [m for m in runtime.ledger.messages if m.tag == tag]


@pytest.mark.parametrize(
    ("step", "public"),
    [
        (cluster_moments_bound_step, {"centers_tag": "c", "labels_key": None}),
        (fedkmeans_nearest_distances, {"centers": np.zeros((1, 3))}),
        (fedsc_rows, {}),
        (lloyd_deviations, {"centers_tag": "c"}),
    ],
)
def test_every_bound_only_step_is_refused_on_its_own_and_as_a_summand(step, public):
    # The row-level steps of the metrics, FederatedKMeans and FedSC (the existing
    # tests cover the moments' ones): a node runs them only inside a bound agreement.
    _, _, runtime = _deployed()
    runtime.broadcast(np.zeros((1, 3)), tag="c")
    with pytest.raises(PermissionError, match="only inside a bound agreement"):
        runtime.run(step, tag="harvest", **public)
    assert _no_message(runtime, "harvest")
    name = client_step_name(step)
    with pytest.raises(PermissionError, match="refused as the vector of a secure sum"):
        resolve_client_step(name, ("skfedclust",), role="summand")
    with pytest.raises(PermissionError, match="refused as a step of its own"):
        resolve_client_step(name, ("skfedclust",), role="top")


def test_a_default_node_answers_no_centers_the_coordinator_chose():
    # Before any row rule: exact Lloyd statistics for the coordinator's centers.
    _, _, runtime = _deployed(centers=False)
    runtime.broadcast(np.zeros((2, 3)), tag=TAG_CENTERS)
    with pytest.raises(PermissionError, match="coordinator-centers"):
        runtime.run(fedkmeans_lloyd_statistics, tag="harvest")
    assert _no_message(runtime, "harvest")


def test_lloyd_statistics_of_one_more_center_than_half_the_rows_are_refused():
    # The count rule at its edge: n/2 + 1 per-cluster sums from a 20-row node.
    _, _, runtime = _deployed()
    centers = np.random.default_rng(1).normal(size=(11, 3))
    runtime.broadcast(centers, tag=TAG_CENTERS)
    with pytest.raises(PermissionError, match="min-rows-per-vector"):
        runtime.run(fedkmeans_lloyd_statistics, tag="harvest")
    assert _no_message(runtime, "harvest")


def test_far_rows_of_a_donor_centred_at_the_origin_beyond_a_one_row_threshold_are_refused():
    # The relocation request names a donor centred at the origin and a threshold
    # that only the node's farthest row passes: the "sum of far deviations" is that row.
    X, rows, runtime = _deployed()
    runtime.broadcast(np.zeros((1, 3)), tag=TAG_CENTERS)
    runtime.run(fedkmeans_lloyd_statistics, tag="lloyd")  # one cluster: every label is 0
    squared = (X[rows[0]] ** 2).sum(axis=1)
    request = {
        "donors": np.array([0]),
        "centers": np.zeros((1, 3)),
        "thresholds": np.array([np.sort(squared)[-2]]),
    }
    runtime.send({0: request}, tag=TAG_RELOCATE)
    with pytest.raises(PermissionError, match="refuse-raw-rows"):
        runtime.run(fedkmeans_far_rows, tag="harvest", clients=[0])
    assert _no_message(runtime, "harvest")


def _one_row_trap(rows):
    """Two centers: the rows' mean, and a point beyond the row farthest from it."""
    mean = rows.mean(axis=0)
    far = int(np.argmax(((rows - mean) ** 2).sum(axis=1)))
    trap = rows[far] + 0.25 * (rows[far] - mean)
    return np.vstack([mean, trap]), far


def test_a_center_placed_beyond_one_row_does_not_get_that_row_back_in_the_clear():
    # With sums in the clear, a center set just beyond a node's outermost row
    # makes a cluster of that row alone: the sum of its deviation plus the
    # public center is the row, though the deviation itself is no row.
    X, rows, runtime = _deployed()
    centers, far = _one_row_trap(X[rows[0]])
    labels = np.argmin(((X[rows[0]][:, None] - centers[None]) ** 2).sum(axis=2), axis=1)
    assert np.flatnonzero(labels == 1).tolist() == [far]  # the trap holds one row
    runtime.broadcast(centers, tag=TAG_CENTERS, clients=[0])
    with pytest.raises(PermissionError, match="refuse-raw-rows"):
        runtime.run(fedkmeans_lloyd_statistics, tag="harvest", clients=[0])
    assert _no_message(runtime, "harvest")


def test_far_rows_of_a_donor_centred_anywhere_beyond_a_one_row_threshold_are_refused():
    # The relocation attack above with the donor's center away from the origin:
    # the far row's deviation is no row, its deviation plus the center is.
    X, rows, runtime = _deployed()
    center = np.full((1, 3), 5.0)
    runtime.broadcast(center, tag=TAG_CENTERS)
    runtime.run(fedkmeans_lloyd_statistics, tag="lloyd")
    squared = ((X[rows[0]] - center) ** 2).sum(axis=1)
    request = {
        "donors": np.array([0]),
        "centers": center,
        "thresholds": np.array([np.sort(squared)[-2]]),
    }
    runtime.send({0: request}, tag=TAG_RELOCATE)
    with pytest.raises(PermissionError, match="refuse-raw-rows"):
        runtime.run(fedkmeans_far_rows, tag="harvest", clients=[0])
    assert _no_message(runtime, "harvest")


def test_cluster_means_of_many_rows_are_sent():
    # The means are searched for rows, not refused as such: the mean of a
    # node's rows is a summary the policy lets through.
    X, rows, runtime = _deployed()
    centers = np.vstack([X[rows[0]].mean(axis=0), X[rows[0]].mean(axis=0) + 100.0])
    runtime.broadcast(centers, tag=TAG_CENTERS)
    sent = runtime.run(fedkmeans_lloyd_statistics, tag="lloyd")
    assert len(sent) == 4


def _summands():
    from skfedclust.utils._step_audit import client_steps

    steps = [resolve_client_step(f"{s.module}:{s.name}", role="bound") for s in client_steps()]
    return [s for s in steps if getattr(s, "__skfedclust_summand__", False)]


@pytest.mark.parametrize("step", _summands(), ids=lambda s: s.__qualname__)
def test_a_default_node_sends_a_statistic_made_to_be_added_only_inside_a_secure_sum(step):
    # Asked on its own, a summand would hand the server one client's
    # statistic (its column sums, its per-cluster sums, its inertia).
    _, _, runtime = _deployed(clear_sums=False)
    with pytest.raises(PermissionError, match="allow-clear-sums = false"):
        runtime.run(step, tag="harvest")
    assert _no_message(runtime, "harvest")


def test_every_summand_of_the_package_is_marked():
    names = {f"{s.__module__}:{s.__qualname__}" for s in _summands()}
    assert {
        "skfedclust.secure._moments:moments_raw",
        "skfedclust.secure._lcc_offset:offset_sum_step",
        "skfedclust.methods._fedkmeans_steps:fedkmeans_lloyd_statistics",
        "skfedclust.methods._centroid_steps:lloyd_statistics",
        "skfedclust.methods._ffcm:ffcm_client_moves",
        "skfedclust.metrics:silhouette_sum_step",
    } <= names


@pytest.mark.parametrize("method", ["KFed", "MAvg", "FeCA", "KumarFederatedKMeans"])
@pytest.mark.parametrize("step", [fedkmeans_largest_distances, fedkmeans_far_rows])
def test_a_node_agreed_to_another_method_refuses_federated_kmeans_row_level_steps(method, step):
    # A coordinator that announced another method cannot reach FederatedKMeans'
    # empty-cluster steps (which send per-row distances and far-row sums).
    with pytest.raises(PermissionError, match=f"this node agreed to a fit of {method}"):
        NodePolicy().check_step(client_step_name(step), method=method)


# --------------------------------------------------------------------------- #
# Attacks an independent review found successful, now refused by default nodes
# --------------------------------------------------------------------------- #
def _deployed_nodes(n_clients=4, n_per=20, d=3, seed=0):
    from skfedclust.federation import Federation, InProcessRuntime
    from skfedclust.node._policy import NodePolicy

    X = np.random.default_rng(seed).uniform(-1, 1, size=(n_per * n_clients, d))
    rows = [np.arange(n_per * c, n_per * (c + 1)) for c in range(n_clients)]
    federation = Federation(X, rows)
    federation.spawn_seeds(np.random.RandomState(0))
    # Centers the coordinator chose are allowed: the farthest-row rules are what refuses.
    policy = NodePolicy(allow_clear_sums=True, allow_coordinator_centers="*")
    return X, InProcessRuntime(federation, policy=policy)


def test_largest_distances_and_farthest_rows_are_refused_where_rows_stay_in():
    # The coordinator asks every distance of every row, from chosen centers:
    # d + 1 queries give every row (the review recovered 80 of 80).
    from skfedclust.methods._fedkmeans_steps import (
        TAG_CENTERS,
        TAG_FARTHEST,
        fedkmeans_largest_distances,
        fedkmeans_lloyd_statistics,
    )

    _, runtime = _deployed_nodes()
    runtime.broadcast(np.zeros((1, 3)), tag=TAG_CENTERS)
    runtime.run(fedkmeans_lloyd_statistics, tag="lloyd")
    runtime.broadcast({"n_empty": 20, "centers": np.full((1, 3), 37.0)}, tag=TAG_FARTHEST)
    with pytest.raises(PermissionError, match="refuse-raw-rows"):
        runtime.run(fedkmeans_largest_distances, tag="far")


def test_index_distance_steps_run_only_in_a_secure_sum_for_one_set_of_means():
    # The review ran distance_sums_step in the clear with 4,000 centers and
    # fresh mean shifts per query, and trilaterated 78 of 80 rows.
    from skfedclust.metrics import (
        cluster_moments_bound_step,
        distance_sums_step,
        squares_around_means_step,
    )
    from skfedclust.secure import SecureAggregator, agree_bound

    _, runtime = _deployed_nodes()
    aggregator = SecureAggregator(runtime, seed=3)
    aggregator.setup()
    centers = np.random.default_rng(1).uniform(-1.2, 1.2, size=(4000, 3))
    runtime.broadcast(centers, tag="index centers")
    # Per-cluster values of 4,000 clusters from 20 rows: the node's count rule.
    with pytest.raises(PermissionError, match="min-rows-per-vector"):
        agree_bound(
            aggregator,
            cluster_moments_bound_step,
            tag="bound",
            centers_tag="index centers",
            labels_key=None,
        )
    for step in (distance_sums_step, squares_around_means_step):
        with pytest.raises(PermissionError, match="only inside a secure sum"):
            runtime.run(step, tag="d", centers_tag="index centers", shifts_tag="index mean shifts")


def test_index_means_are_agreed_once_per_fit():
    from skfedclust.metrics import cluster_moments_bound_step, distance_sums_step
    from skfedclust.secure import SecureAggregator, agree_bound

    X, runtime = _deployed_nodes()
    aggregator = SecureAggregator(runtime, seed=3)
    aggregator.setup()
    centers = X[:3].copy()
    runtime.broadcast(centers, tag="index centers")
    agree_bound(
        aggregator,
        cluster_moments_bound_step,
        tag="b",
        centers_tag="index centers",
        labels_key=None,
    )
    public = dict(centers_tag="index centers", shifts_tag="index mean shifts")
    runtime.broadcast(np.zeros((3, 3)), tag="index mean shifts")
    aggregator.sum(distance_sums_step, tag="first", bounds=[64.0], **public)
    # Other means under another tag: refused (the means of a fit's index are agreed once).
    runtime.broadcast(np.ones((3, 3)), tag="other shifts")
    with pytest.raises(PermissionError, match="other cluster means"):
        aggregator.sum(
            distance_sums_step,
            tag="second",
            bounds=[64.0],
            centers_tag="index centers",
            shifts_tag="other shifts",
        )


def test_histogram_wrappers_are_refused_on_their_own_and_means_are_one_row():
    # The review shifted one row per query with a per-row "mean" and read its
    # bits off a single client's histogram, in the clear.
    from skfedclust.federation._runtime import client_step_name
    from skfedclust.secure._moments import moments_deviations
    from skfedclust.secure._sum_bounds import (
        column_exponent_histogram_step,
        exponent_histogram_step,
    )

    _, runtime = _deployed_nodes()
    inner = client_step_name(moments_deviations)
    for step, extra in (
        (exponent_histogram_step, {}),
        (column_exponent_histogram_step, dict(top=16, window=64, coarseness=1)),
    ):
        with pytest.raises(PermissionError, match="only inside a secure sum"):
            runtime.run(
                step, tag="h", clients=[0], inner=inner, inner_public={"mean": np.zeros(3)}, **extra
            )
    from skfedclust.secure import SecureAggregator, agree_bound

    aggregator = SecureAggregator(runtime, seed=3)
    aggregator.setup()
    with pytest.raises(PermissionError, match=r"one mean of its 3 features"):
        agree_bound(aggregator, moments_deviations, tag="b", mean=np.zeros((20, 3)))


@pytest.mark.parametrize(
    "change, junk",
    [
        (dict(bounds=[128.0, None]), False),  # other fixed-point bounds, the same values
        (dict(bounds=[64.0, None]), True),  # a server message the step never reads
    ],
    ids=["other bounds", "unread message"],
)
def test_a_second_sum_over_fewer_clients_is_refused_whatever_its_bounds(change, junk):
    # The review differenced two sums of moments_raw over 6 and 5 clients,
    # told apart only by their bounds, and got the sixth client's column sums.
    from skfedclust.secure import SecureAggregator
    from skfedclust.secure._moments import moments_raw

    _, runtime = _deployed_nodes(n_clients=6)
    aggregator = SecureAggregator(runtime, seed=3)
    aggregator.setup()
    aggregator.sum(moments_raw, tag="all", bounds=[64.0, None])
    if junk:
        runtime.broadcast(np.arange(3.0), tag="junk", clients=[0, 1, 2, 3, 4])
    with pytest.raises(PermissionError, match="one-sum-per-input"):
        aggregator.sum(moments_raw, tag="all but one", clients=[0, 1, 2, 3, 4], **change)


def test_a_one_feature_node_refuses_to_send_its_farthest_values():
    # The review read every value of a one-feature node through the
    # farthest-row steps (the raw-row rule skips width one).
    from skfedclust.methods._fedkmeans_steps import (
        TAG_CENTERS,
        TAG_FARTHEST,
        fedkmeans_largest_distances,
        fedkmeans_lloyd_statistics,
    )

    _, runtime = _deployed_nodes(d=1)
    runtime.broadcast(np.zeros((1, 1)), tag=TAG_CENTERS)
    runtime.run(fedkmeans_lloyd_statistics, tag="lloyd")
    runtime.broadcast({"n_empty": 10, "centers": np.full((1, 1), -100.0)}, tag=TAG_FARTHEST)
    with pytest.raises(PermissionError, match="refuse-raw-rows"):
        runtime.run(fedkmeans_largest_distances, tag="far")


# --------------------------------------------------------------------------- #
# Attacks of an independent attack suite, refused by default nodes
# --------------------------------------------------------------------------- #
def test_a_sum_that_reads_nothing_is_one_statistic_whatever_sum_came_between():
    # moments_raw (column sums and count) reads no server message: a second
    # sum of it over five of six clients, after a sum of another step, would
    # give the sixth client's column sums by difference.
    from skfedclust.secure import SecureAggregator
    from skfedclust.secure._moments import moments_raw

    X, rows, runtime = _deployed(n_clients=6, clear_sums=False)
    aggregator = SecureAggregator(runtime, seed=3)
    aggregator.sum(moments_raw, tag="all", bounds=[64.0, None])
    runtime.broadcast(np.zeros((1, 3)), tag=TAG_CENTERS)
    aggregator.sum(fedkmeans_lloyd_statistics, tag="between", bounds=[64.0, None, None])
    with pytest.raises(PermissionError, match="one-sum-per-input"):
        aggregator.sum(moments_raw, tag="all but 5", clients=[0, 1, 2, 3, 4], bounds=[64.0, None])


def test_the_clusters_inertia_is_one_statistic_of_the_last_lloyd_iteration():
    # The server may ask for the clusters' inertia whenever it likes, but a node
    # computes it on the labels and centers of its last Lloyd iteration, not on
    # anything the server sends now: asked again over five of six clients it
    # would give the sixth client's inertia by difference, and is refused.
    from skfedclust.secure import SecureAggregator

    X, rows, runtime = _deployed(n_clients=6, clear_sums=False)
    aggregator = SecureAggregator(runtime, seed=3)
    centers = X[:2].copy()
    runtime.broadcast(centers, tag=TAG_CENTERS)
    aggregator.sum(fedkmeans_lloyd_statistics, tag="lloyd", bounds=[64.0, None, None])
    inertia, _ = aggregator.sum(fedkmeans_cluster_inertia, tag="inertia", bounds=[512.0])
    labels = np.argmin(((X[:, None, :] - centers[None]) ** 2).sum(axis=2), axis=1)
    expected = np.bincount(labels, weights=((X - centers[labels]) ** 2).sum(axis=1))
    np.testing.assert_allclose(inertia, expected, rtol=1e-9)
    # Other centers sent now change nothing: the same statistic, refused over fewer.
    runtime.broadcast(centers + 5.0, tag=TAG_CENTERS)
    with pytest.raises(PermissionError, match="one-sum-per-input"):
        aggregator.sum(
            fedkmeans_cluster_inertia, tag="again", clients=[0, 1, 2, 3, 4], bounds=[512.0]
        )


def test_a_party_builds_the_lagrange_encoding_itself():
    # A server-sent encoding matrix with zero noise rows would make every share
    # the rows themselves: a party takes l, t, m and p, and refuses t = 0.
    from skfedclust.secure._lcc import TAG_SHARE, lcc_share_step
    from skfedclust.secure._lcc_offset import TAG_OFFSET, offset_bounds_step

    _, _, runtime = _deployed()
    runtime.broadcast(np.zeros(3), tag=TAG_OFFSET)
    runtime.run(offset_bounds_step, tag="bounds")
    share = {"precision": 20, "n_parties": 4, "n_segments": 1, "p": 2**31 - 1}
    with pytest.raises(TypeError, match="encoding"):
        runtime.run(lcc_share_step, tag=TAG_SHARE, encoding=np.ones((2, 4)), **share)
    with pytest.raises(PermissionError, match="lcc-noise.*colluders"):
        runtime.run(lcc_share_step, tag=TAG_SHARE, n_colluders=0, **share)
    with pytest.raises(PermissionError, match="lcc-noise.*no Lagrange code"):
        runtime.run(lcc_share_step, tag=TAG_SHARE, n_colluders=1, **{**share, "p": 2**31 - 3})
    assert _no_message(runtime, TAG_SHARE)


def test_a_party_sends_its_bounds_around_one_offset_per_fit():
    # Its farthest row's distance from several server-chosen offsets would locate it.
    from skfedclust.secure._lcc_offset import TAG_OFFSET, offset_bounds_step

    _, _, runtime = _deployed()
    runtime.broadcast(np.zeros(3), tag=TAG_OFFSET)
    runtime.run(offset_bounds_step, tag="bounds")
    runtime.broadcast(np.ones(3), tag=TAG_OFFSET)
    with pytest.raises(PermissionError, match="one-offset"):
        runtime.run(offset_bounds_step, tag="again")
    assert _no_message(runtime, "again")
