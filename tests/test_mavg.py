"""Tests of M-Avg, one-shot averaging of matched client centroids (a baseline of FeCA)."""

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from skfedclust import MAvg
from skfedclust.methods._centroid_steps import secure_inertia_communication as inertia_cost
from skfedclust.methods._mavg import matched_average
from skfedclust.partition import DirichletPartition, IIDPartition
from skfedclust.utils.protocol_checks import check_protocol

#: compute_inertia=False (the default): nothing is exchanged for inertia_ after the fit.
NO_INERTIA = dict.fromkeys(inertia_cost(3), 0)


def _max_matched_error(true_centers, centers):
    cost = cdist(true_centers, centers)
    rows, cols = linear_sum_assignment(cost)
    return cost[rows, cols].max()


def _separated_blobs(random_state=0):
    grid = np.array([[x, y] for x in (0, 20, 40) for y in (0, 20)], dtype=float)
    X, y = make_blobs(2400, centers=grid, cluster_std=1.0, random_state=random_state)
    return X, y, grid


def test_matched_average_hand_built():
    ref = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    other = np.array([[0.0, 11.0], [1.0, 0.0], [11.0, 0.0]])  # permuted, shifted by 1
    small = np.array([[9.0, 0.0]])  # a client with a single center
    out = matched_average([ref, other, small], reference=0)
    # Slot means over the clients that matched each slot.
    np.testing.assert_allclose(out, [[0.5, 0.0], [10.0, 0.0], [0.0, 10.5]])


def test_matched_average_single_pass_and_refined_fixed_point():
    ref = np.array([[0.0, 0.0], [4.0, 0.0]])
    c1 = np.array([[3.0, 0.0], [5.0, 0.0]])  # Hungarian: (0,0)->(3,0), (4,0)->(5,0)
    c2 = np.array([[1.0, 0.0], [-1.0, 0.0]])  # (0,0)->(-1,0), (4,0)->(1,0)
    single = matched_average([ref, c1, c2], reference=0)
    np.testing.assert_allclose(single, [[2.0 / 3, 0.0], [10.0 / 3, 0.0]])
    rng = np.random.RandomState(0)
    clients = [rng.normal(size=(5, 2)) * 3 for _ in range(6)]
    refined = matched_average(clients, reference=0, n_refine=50)
    # After refinement, matching every client to the result and averaging
    # gives the result back.
    sums = np.zeros_like(refined)
    for c in clients:
        rows, cols = linear_sum_assignment(cdist(refined, c))
        sums[rows] += c[cols]
    np.testing.assert_allclose(sums / len(clients), refined)


@pytest.mark.parametrize(
    "partition", [IIDPartition(5), DirichletPartition(5, alpha=1.0)], ids=["iid", "dir1"]
)
def test_mavg_recovers_separated_centers(partition):
    X, y, truth = _separated_blobs()
    est = MAvg(6, partition=partition, random_state=0).fit(X, y)
    assert est.communication_["rounds"] == 1 + NO_INERTIA["rounds"]
    assert est.reference_client_ == 0
    if isinstance(partition, IIDPartition):
        assert _max_matched_error(truth, est.cluster_centers_) < 0.3


def test_mavg_random_reference_and_n_jobs():
    X, _, _ = _separated_blobs()
    a = MAvg(6, reference="random", partition=4, random_state=5, n_jobs=1).fit(X)
    b = MAvg(6, reference="random", partition=4, random_state=5, n_jobs=2).fit(X)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.reference_client_ == b.reference_client_


def test_mavg_small_clients():
    X, _, truth = _separated_blobs()
    clients = [X[:2], X[2:1200], X[1200:]]  # first client holds 2 < 6 rows
    est = MAvg(6, random_state=0).fit(clients)
    assert est.reference_client_ == 1  # the first client with the most centers
    assert est.n_clusters_ == 6
    with pytest.warns(UserWarning, match="fewer than n_clusters"):
        est = MAvg(6, random_state=0).fit([X[:2], X[2:5], X[5:9]])
    assert est.n_clusters_ == 4


# --------------------------------------------------------------------------- #
# Protocol
# --------------------------------------------------------------------------- #
def test_mavg_protocol_one_round_centers_up_global_centers_down():
    X, _, _ = _separated_blobs()
    clients = [X[:700], X[700:1500], X[1500:]]
    k, d, m = 6, X.shape[1], len(clients)
    # One round. Up: each client's k x d float64 centers and its local
    # iteration count (one int64). Down: the k x d global centers to each client.
    # Then the labels and the inertia's secure sums.
    inertia = NO_INERTIA
    runtime = check_protocol(
        MAvg(k, random_state=0),
        clients,
        rounds=1 + inertia["rounds"],
        bytes_up=m * (k * d * 8 + 8) + inertia["bytes_up"],
        bytes_down=m * k * d * 8 + inertia["bytes_down"],
        bytes_peer=inertia["bytes_peer"],
    )
    # The server gets the centers and the iteration count, nothing else (no sizes).
    (step, (uploads,), public) = runtime.server_inputs[0]
    assert all(isinstance(c, np.ndarray) and c.shape == (k, d) for c, _ in uploads.list())
    assert all(np.ndim(n_iter) == 0 for _, n_iter in uploads.list())
    assert set(public) == {"reference", "n_refine"}


def test_mavg_protocol_small_client_sends_fewer_centers():
    X, _, _ = _separated_blobs()
    clients = [X[:4], X[4:1200], X[1200:]]
    k, d = 6, X.shape[1]
    # A client sends one center per non-empty local cluster: min(k, its rows) here.
    sent = [min(k, len(c)) for c in clients]
    inertia = NO_INERTIA
    check_protocol(
        MAvg(k, random_state=0),
        clients,
        rounds=1 + inertia["rounds"],
        bytes_up=sum(sent) * d * 8 + 8 * len(clients) + inertia["bytes_up"],
        bytes_down=len(clients) * k * d * 8 + inertia["bytes_down"],
    )


# --------------------------------------------------------------------------- #
# Robustness
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("reference", ["first", "random"])
def test_mavg_large_offset_changes_no_label(reference):
    X, _, _ = _separated_blobs()
    X = X[::4]
    clients = [X[:150], X[150:400], X[400:]]
    kw = dict(reference=reference, n_refine=2, random_state=0)
    ref = MAvg(6, **kw).fit(clients)
    shifted = MAvg(6, **kw).fit([c + 1.7e9 for c in clients])
    assert adjusted_rand_score(ref.labels_, shifted.labels_) == 1.0
    np.testing.assert_array_equal(shifted.predict(X + 1.7e9), shifted.labels_)
    np.testing.assert_allclose(shifted.cluster_centers_ - 1.7e9, ref.cluster_centers_, atol=1e-5)
