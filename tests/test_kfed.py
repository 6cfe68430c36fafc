"""k-FED: server step by hand, recovery, and its communication."""

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from skfedclust import KFed
from skfedclust.methods._centroid_steps import secure_inertia_communication
from skfedclust.methods._kfed import farthest_point_seeds, kfed_server_aggregate
from skfedclust.metrics import centroid_distance
from skfedclust.partition import DirichletPartition, NonIIDLevelPartition


def test_farthest_point_seeding_by_hand():
    candidates = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0], [5.0, 0.0]])
    seeds = farthest_point_seeds(candidates, candidates[:1], 3)
    np.testing.assert_array_equal(seeds, [[0, 0], [10, 0], [5, 0]])


def test_server_step_one_lloyd_iteration_by_hand():
    local = [np.array([[0.0, 0.0], [10.0, 0.0]]), np.array([[2.0, 0.0], [12.0, 0.0]])]
    sizes = [np.array([1, 1]), np.array([3, 1])]
    centers = kfed_server_aggregate(
        local, sizes, n_clusters=2, seed_client=0, n_lloyd_steps=1, weighted=False
    )
    np.testing.assert_allclose(centers, [[1.0, 0.0], [11.0, 0.0]])
    weighted = kfed_server_aggregate(
        local, sizes, n_clusters=2, seed_client=0, n_lloyd_steps=1, weighted=True
    )
    np.testing.assert_allclose(weighted, [[1.5, 0.0], [11.0, 0.0]])
    seeds_only = kfed_server_aggregate(
        local, sizes, n_clusters=2, seed_client=1, n_lloyd_steps=0, weighted=False
    )
    np.testing.assert_allclose(seeds_only, local[1])


@pytest.mark.parametrize(
    "partition, k_local",
    [
        # k-FED's setting: each client holds one true cluster, k' = 1.
        (NonIIDLevelPartition(1.0, n_clients=8), 1),
        # IID clients hold every cluster, k' = k.
        (DirichletPartition(6, alpha=100.0, min_size=20), 4),
    ],
    ids=["one-cluster-per-client", "iid"],
)
def test_recovers_separated_centers(partition, k_local):
    centers = np.array([[0, 0], [20, 0], [0, 20], [20, 20]], dtype=float)
    X, y = make_blobs(800, centers=centers, cluster_std=1.0, random_state=0)
    est = KFed(n_clusters=4, n_local_clusters=k_local, partition=partition, random_state=0).fit(
        X, y
    )
    assert centroid_distance(centers, est.cluster_centers_) < 0.5
    assert adjusted_rand_score(y, est.labels_) > 0.99
    np.testing.assert_array_equal(est.predict(X), est.labels_)


def test_one_round_and_bytes():
    X, _ = make_blobs(90, n_features=2, centers=3, random_state=0)
    clients = [X[:30], X[30:60], X[60:]]
    est = KFed(n_clusters=3, n_local_clusters=2, random_state=0).fit(clients)
    comm = est.communication_
    # One-shot: one round, and the uploads are the local centers and nothing else:
    # 3 clients, 2 centers, 2 features, and the local iteration count (one int64).
    assert comm["rounds"] == 1 and comm["setup_rounds"] == 0
    assert comm["evaluation_rounds"] == 0
    assert comm["bytes_up"] == 3 * (2 * 2 * 8 + 8)
    # global centers to each client, which label their own rows
    assert comm["bytes_down"] == 3 * 3 * 2 * 8
    assert comm["bytes_peer"] == 0
    assert not hasattr(est, "inertia_")
    # inertia_ when asked: the labels and the inertia's secure sums follow.
    asked = KFed(n_clusters=3, n_local_clusters=2, random_state=0, compute_inertia=True)
    comm = asked.fit(clients).communication_
    inertia = secure_inertia_communication(3)
    assert comm["rounds"] == 1 + inertia["rounds"]
    assert comm["evaluation_rounds"] == inertia["evaluation_rounds"]
    assert comm["bytes_up"] == 3 * (2 * 2 * 8 + 8) + inertia["bytes_up"]
    assert comm["bytes_down"] == 3 * 3 * 2 * 8 + inertia["bytes_down"]
    assert comm["bytes_peer"] == inertia["bytes_peer"]
    assert asked.inertia_ == pytest.approx(-asked.score(X), rel=1e-12)
    np.testing.assert_array_equal(asked.labels_, est.labels_)


def test_local_cluster_count_errors():
    X, _ = make_blobs(30, centers=3, random_state=0)
    with pytest.raises(ValueError, match="at least 20 per client"):
        KFed(n_clusters=3, n_local_clusters=20).fit(X)
    with pytest.raises(ValueError, match="local centers in total"):
        KFed(n_clusters=5, n_local_clusters=2).fit([X[:15], X[15:]])
    with pytest.raises(ValueError, match="seed_client=4"):
        KFed(n_clusters=3, seed_client=4).fit(X)


def test_client_order_does_not_change_the_clustering():
    X, y = make_blobs(120, centers=3, random_state=0)
    parts = [X[:40], X[40:80], X[80:]]
    a = KFed(n_clusters=3, seed_client="first", random_state=0).fit(parts)
    b = KFed(n_clusters=3, seed_client=2, random_state=0).fit(parts[::-1])
    assert centroid_distance(a.cluster_centers_, b.cluster_centers_) < 1e-8


def test_server_runs_lloyd_to_convergence_by_default():
    # Seeds land at 0 and 10; one Lloyd step pulls the left center to the mean of
    # {0, 4.8, -10}, after which 4.8 is nearer the right center: only a second step
    # moves it there.
    local = [np.array([[0.0, 0.0], [10.0, 0.0]]), np.array([[4.8, 0.0], [-10.0, 0.0]])]
    one = kfed_server_aggregate(
        local, None, n_clusters=2, seed_client=0, n_lloyd_steps=1, weighted=False
    )
    full = kfed_server_aggregate(
        local, None, n_clusters=2, seed_client=0, n_lloyd_steps=None, weighted=False
    )
    np.testing.assert_allclose(one, [[-5.2 / 3.0, 0.0], [10.0, 0.0]])
    np.testing.assert_allclose(full, [[-5.0, 0.0], [7.4, 0.0]])
    assert KFed().n_lloyd_steps is None


def test_awasthi_sheffet_pruning_keeps_rows_three_times_closer():
    from skfedclust.clusterers import awasthi_sheffet_kmeans
    from skfedclust.clusterers._kmeans import awasthi_sheffet_init

    # Two tight groups and a row at a third of the way: it is less than three
    # times closer to either group, so the 1:3 split drops it from both initial
    # means, which are then exactly the group means.
    X = np.array([[0.0, 0.0], [0.0, 0.2], [10.0, 0.0], [10.0, 0.2], [3.5, 0.1]])
    for seed in range(5):
        init = awasthi_sheffet_init(X, 2, seed=seed)
        init = init[np.argsort(init[:, 0])]
        np.testing.assert_allclose(init, [[0.0, 0.1], [10.0, 0.1]], atol=1e-9)
    tiny = awasthi_sheffet_kmeans(X[:2], 2, seed=0)
    np.testing.assert_array_equal(tiny.centers, X[:2])


def test_awasthi_sheffet_solver_recovers_separated_blobs():
    centers = np.array([[0, 0], [20, 0], [0, 20], [20, 20]], dtype=float)
    X, y = make_blobs(800, centers=centers, random_state=1)
    est = KFed(4, local_solver="awasthi-sheffet", partition=4, random_state=0).fit(X)
    assert adjusted_rand_score(y, est.labels_) > 0.99


@pytest.mark.parametrize("solver", ["kmeans", "awasthi-sheffet"])
def test_a_large_offset_changes_no_label(solver):
    X, _ = make_blobs(120, centers=3, random_state=0)
    clients = [X[:40], X[40:80], X[80:]]
    ref = KFed(3, local_solver=solver, random_state=0).fit(clients)
    shifted = KFed(3, local_solver=solver, random_state=0).fit([c + 1.7e9 for c in clients])
    assert adjusted_rand_score(ref.labels_, shifted.labels_) == 1.0
    np.testing.assert_array_equal(shifted.predict(np.vstack(clients) + 1.7e9), shifted.labels_)
