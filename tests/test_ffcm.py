"""Tests of federated fuzzy c-means (FFCM v1/v2), a baseline of FeCA."""

import functools

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

import skfedclust.methods._ffcm
from skfedclust import FederatedFuzzyCMeans
from skfedclust.clusterers import fuzzy_memberships
from skfedclust.federation import use_runtime
from skfedclust.methods._centroid_steps import secure_inertia_communication as inertia_cost
from skfedclust.methods._ffcm import fill_small_clusters
from skfedclust.node._policy import NodePolicy, raw_row_matches
from skfedclust.partition import DirichletPartition, IIDPartition
from skfedclust.utils.protocol_checks import RecordingRuntime, check_protocol

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


def _reference_fcm(X, centers, m, n_steps):
    """Centralized fuzzy c-means written from the textbook formulas, point by point."""
    V = centers.copy()
    for _ in range(n_steps):
        U = np.empty((len(X), len(V)))
        for i, x in enumerate(X):
            d = np.linalg.norm(x - V, axis=1)
            for j in range(len(V)):
                U[i, j] = 1.0 / np.sum((d[j] / d) ** (2.0 / (m - 1.0)))
        W = U**m
        V = (W.T @ X) / W.sum(axis=0)[:, None]
    return V


@pytest.mark.parametrize("fuzzifier", [2.0, 1.5])
@pytest.mark.parametrize(
    "secure, coordinator",
    [(False, "sees-totals"), (True, "sees-totals"), (True, "blind")],
    ids=["clear", "secure", "blind"],
)
def test_ffcm_v1_one_local_iteration_equals_centralized_fcm(fuzzifier, secure, coordinator):
    X, _ = make_blobs(300, centers=4, cluster_std=2.0, random_state=0)
    init = X[[0, 50, 100, 150]] + 0.1
    client_ids = np.r_[np.zeros(40), np.ones(200), np.full(60, 2)]  # unequal clients
    rng = np.random.RandomState(0)
    rng.shuffle(client_ids)
    est = FederatedFuzzyCMeans(
        4,
        aggregation="v1",
        n_rounds=5,
        fuzzifier=fuzzifier,
        n_local_iter=1,
        init=init,
        secure_aggregation=secure,
        coordinator=coordinator,
    ).fit(X, client_ids=client_ids)
    expected = _reference_fcm(X, init, fuzzifier, 5)
    np.testing.assert_allclose(est.cluster_centers_, expected, rtol=1e-10, atol=1e-10)
    assert est.coordinator_ == coordinator
    np.testing.assert_array_equal(est.labels_, np.argmin(cdist(X, expected), axis=1))
    assert (est.local_centers_ is None) == secure
    if coordinator == "blind":
        # Two set-up rounds among the nodes, one round per FCM step, one for
        # the final labels' statistics and one for the result, which carries
        # the inertia of the nearest-center labels.
        assert est.communication_["rounds"] == 5 + 2
        assert est.communication_["setup_rounds"] == 2
        np.testing.assert_allclose(
            est.inertia_, (cdist(X, expected).min(axis=1) ** 2).sum(), rtol=1e-10
        )
        return
    # Given initial centers need no seeding exchange: one round per FCM step
    # in the clear; by secure sums a bound on the rows, then two exchanges per
    # step, after a set-up round. The inertia's sums are evaluation rounds.
    assert est.communication_["rounds"] == (2 + 2 * 5 if secure else 5)
    assert est.communication_["setup_rounds"] == int(secure)
    assert not hasattr(est, "inertia_")


def test_ffcm_kmeanspp_init_adds_one_seeding_round():
    X, _, _ = _separated_blobs()
    k, d, m, T = 6, X.shape[1], 4, 3
    # The paper's start (k-means++ seeds, rows of one client). T + 1 rounds:
    # the seed client's k-means++ seeds are data-derived, so
    # sending them is a round of its own (not set-up). Up: the k x d seeds
    # once, then each round every client's k x d local centers and k masses.
    # Down: the initial centers, then the centers after every round, k x d
    # to each client. Then the labels and the inertia's secure sums.
    inertia = NO_INERTIA
    runtime = check_protocol(
        FederatedFuzzyCMeans(
            k,
            n_rounds=T,
            init="k-means++-rows",
            partition=m,
            secure_aggregation=False,
            random_state=0,
        ),
        X,
        rounds=T + 1 + inertia["rounds"],
        bytes_up=8 * (k * d + T * m * (k * d + k)) + inertia["bytes_up"],
        bytes_down=8 * (T + 1) * m * k * d + inertia["bytes_down"],
        bytes_peer=inertia["bytes_peer"],
    )
    assert runtime.ledger.report()["setup_rounds"] == inertia["setup_rounds"]
    seeding = runtime.received[0]
    assert len(seeding) == 1 and seeding.list()[0].shape == (k, d)
    assert runtime.received[0].tag == "initial centers"


def test_ffcm_given_init_has_exactly_n_rounds():
    X, _, truth = _separated_blobs()
    clients = [X[:500], X[500:1700], X[1700:]]
    k, d, m, T = 6, X.shape[1], len(clients), 4
    # T rounds, no seeding exchange. Up: each round every client's k x d local
    # centers and k masses. Down: the given centers, then the centers after
    # every round. Then the labels and the inertia's secure sums.
    inertia = NO_INERTIA
    runtime = check_protocol(
        FederatedFuzzyCMeans(k, n_rounds=T, init=truth + 0.5, aggregation="v2", random_state=0),
        clients,
        rounds=T + inertia["rounds"],
        bytes_up=8 * T * m * (k * d + k) + inertia["bytes_up"],
        bytes_down=8 * (T + 1) * m * k * d + inertia["bytes_down"],
    )
    # The server gets only what the clients sent, and its own public constants.
    ffcm = [i for i in runtime.server_inputs if i[0] == "ffcm_server_step"]
    assert len(ffcm) == T
    for _step, (uploads,), public in ffcm:
        assert all(len(p) == 2 for p in uploads.list())
        assert set(public) == {"centers", "aggregation", "n_clusters", "v2_weighted", "seed"}


def test_ffcm_memberships_are_a_fuzzy_partition():
    X = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 4.0], [1e6, 1e6]])
    V = np.array([[0.0, 0.0], [2.0, 0.0]])
    U = fuzzy_memberships(X, V, 2.0)
    np.testing.assert_allclose(U.sum(axis=1), 1.0)
    np.testing.assert_array_equal(U[0], [1.0, 0.0])  # on a center
    np.testing.assert_allclose(U[1], [0.5, 0.5])  # equidistant
    # Two identical centers share a point lying on them equally.
    np.testing.assert_allclose(fuzzy_memberships(X[:1], np.zeros((2, 2)), 2.0), [[0.5, 0.5]])
    assert np.isfinite(fuzzy_memberships(X, V, 1.01)).all()


@pytest.mark.parametrize("aggregation", ["v1", "v2"])
def test_ffcm_recovers_separated_centers_iid(aggregation):
    X, y, truth = _separated_blobs()
    est = FederatedFuzzyCMeans(
        6, aggregation=aggregation, n_rounds=10, partition=IIDPartition(5), random_state=1
    ).fit(X)
    assert _max_matched_error(truth, est.cluster_centers_) < 0.5
    assert adjusted_rand_score(y, est.labels_) > 0.98


def test_ffcm_n_jobs_invariant_and_deterministic():
    X, y, _ = _separated_blobs()
    part = DirichletPartition(4, alpha=0.3)
    kw = dict(aggregation="v2", n_rounds=3, partition=part, random_state=3)
    a = FederatedFuzzyCMeans(6, n_jobs=1, **kw).fit(X, y)
    b = FederatedFuzzyCMeans(6, n_jobs=2, **kw).fit(X, y)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.labels_, b.labels_)


def test_ffcm_tiny_clients_seed_together():
    X, _, _ = _separated_blobs()
    clients = [X[:3], X[3:6], X[6:10]]  # no client holds 6 rows
    k, d, m, T = 6, X.shape[1], len(clients), 2
    # The paper's start: the largest clients seed in one exchange (4 + 2
    # seeds): still T + 1 rounds (and the inertia's), and k seeds up in total.
    inertia = NO_INERTIA
    runtime = check_protocol(
        FederatedFuzzyCMeans(
            k, n_rounds=T, init="k-means++-rows", secure_aggregation=False, random_state=0
        ),
        clients,
        rounds=T + 1 + inertia["rounds"],
        bytes_up=8 * (k * d + T * m * (k * d + k)) + inertia["bytes_up"],
        bytes_down=8 * (T + 1) * m * k * d + inertia["bytes_down"],
    )
    seeding = runtime.received[0]
    assert {c: len(p) for c, p in seeding.items()} == {2: 4, 0: 2}
    assert len(np.unique(np.vstack(seeding.list()), axis=0)) == k


def _on_nodes_refusing_raw_rows(estimator, clients):
    """Fit on parties whose policy refuses raw rows (a deployed node's default) but counts
    no vector (so that small clients' rounds pass); the runtime, with what it received."""
    RecordingRuntime.instances = []
    policy = NodePolicy(
        min_rows_per_vector=None,
        privacy_ledger=False,
        allow_coordinator_centers=("FederatedFuzzyCMeans",),
    )
    with use_runtime(functools.partial(RecordingRuntime, policy=policy)):
        estimator.fit(clients)
    return RecordingRuntime.instances[-1]


def test_ffcm_local_centers_start_sends_summaries_of_two_rows_or_more():
    X, _, truth = _separated_blobs()
    X = X[:200]
    # Clients of 150, 40, 7 and 1 rows; 6 clusters.
    clients = [X[:150], X[150:190], X[190:197], X[197:198]]
    k, T = 6, 2
    # v1 by secure sums, the coordinator starting it: the local center of the
    # client of one row would be its row in the clear.
    est = FederatedFuzzyCMeans(k, n_rounds=T, random_state=0, coordinator="sees-totals")
    runtime = _on_nodes_refusing_raw_rows(est, clients)
    start = runtime.received[0]
    assert start.tag == "local k-means centers"
    # The client of one row sends nothing; the others min(k, rows / 2) centers,
    # small clusters filled with rows of larger ones (7 rows: 3 centers).
    assert sorted(start) == [0, 1, 2]
    assert [len(start[c][0]) for c in range(3)] == [6, 6, 3]
    for c, (centers, sizes) in start.items():
        assert len(centers) == len(sizes) <= k and sizes.dtype == np.int64
        assert (sizes >= 2).all() and sizes.sum() <= len(clients[c])
        # Each is the mean of its rows, and none of them a row.
        assert raw_row_matches(clients[c], centers, 1e-4) is None
    # The server starts from weighted k-means on the pooled local centers.
    (step, (uploads,), public) = runtime.server_inputs[0]
    assert step == "ffcm_seeds_from_local_centers" and uploads is start
    assert set(public) == {"n_clusters", "seed"}
    assert _max_matched_error(truth, est.initial_centers_) < 1.0


def test_ffcm_local_centers_never_send_a_mean_that_is_a_row():
    # Three rows on a line: the middle one is their mean. A client of such
    # triples sends none of those means (its node would refuse the row).
    triple = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    client = np.vstack([triple + [10.0 * i, 0.0] for i in range(3)])
    X, _, _ = _separated_blobs()
    est = FederatedFuzzyCMeans(3, n_rounds=1, random_state=0, coordinator="sees-totals")
    runtime = _on_nodes_refusing_raw_rows(est, [client, X[:300], X[300:600]])
    # Its local k-means finds the three triples: it sends nothing.
    assert 0 not in runtime.received[0] and sorted(runtime.received[0]) == [1, 2]


def test_ffcm_local_centers_need_two_rows_per_cluster_on_nodes():
    X, _, _ = _separated_blobs()
    tiny = [X[:3], X[3:6], X[6:10]]
    with pytest.raises(ValueError, match="fewer than n_clusters=6: each local center"):
        _on_nodes_refusing_raw_rows(FederatedFuzzyCMeans(6, coordinator="sees-totals"), tiny)
    # The nodes of a blind fit find it out themselves.
    with pytest.raises(ValueError, match="shared 4 local centers .*fewer than n_clusters=6"):
        _on_nodes_refusing_raw_rows(FederatedFuzzyCMeans(6), tiny)
    # Simulated parties (the user holds every row) may send clusters of one row.
    assert FederatedFuzzyCMeans(6, random_state=0).fit(tiny).cluster_centers_.shape == (6, 2)


def test_small_clusters_take_the_nearest_rows_of_larger_ones():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(11, 2))
    labels = np.array([0] * 8 + [1, 2, 3])  # three clusters of one row, one of eight
    centers = np.vstack([X[:8].mean(axis=0), X[8], X[9], X[10]])
    filled = fill_small_clusters(X, labels, centers, 2)
    sizes = np.bincount(filled, minlength=4)
    assert (sizes >= 2).all() and sizes.sum() == 11
    # Each small cluster kept its row and took a row of the large one.
    assert filled[8] == 1 and filled[9] == 2 and filled[10] == 3
    assert set(np.flatnonzero(filled != labels)) <= set(range(8))
    # Already large enough: unchanged.
    np.testing.assert_array_equal(fill_small_clusters(X, filled, centers, 2), filled)


def test_ffcm_bad_input():
    X, _, _ = _separated_blobs()
    with pytest.raises(ValueError, match="init has shape"):
        FederatedFuzzyCMeans(6, init=np.zeros((4, 2))).fit(X)
    # Identical centers get identical updates and never separate.
    with pytest.raises(ValueError, match="identical rows"):
        FederatedFuzzyCMeans(6, init=np.ones((6, 2))).fit(X)
    init = np.arange(12.0).reshape(6, 2)
    init[4] = init[1]
    with pytest.raises(ValueError, match="identical rows"):
        FederatedFuzzyCMeans(6, init=init).fit(X)
    with pytest.raises(ValueError, match="fuzzifier"):
        FederatedFuzzyCMeans(6, fuzzifier=1.0).fit(X)
    with pytest.raises(ValueError, match="'init' parameter"):
        FederatedFuzzyCMeans(6, init="k-means++").fit(X)


def test_ffcm_memberships_are_the_package_rule():
    # One zero-distance rule for the package: the module name is an alias.
    assert skfedclust.methods._ffcm.fuzzy_memberships is fuzzy_memberships


# --------------------------------------------------------------------------- #
# Robustness
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "params",
    [
        {"aggregation": "v1"},
        {"aggregation": "v2", "v2_weighted": True},
        {"aggregation": "v1", "n_local_iter": 3, "fuzzifier": 1.5},
    ],
    ids=["v1", "v2-weighted", "v1-local3"],
)
def test_ffcm_large_offset_changes_no_label(params):
    X, _, _ = _separated_blobs()
    X = X[::4]
    clients = [X[:150], X[150:400], X[400:]]
    # The start the coordinator computes (it publishes initial_centers_).
    kw = dict(n_rounds=5, random_state=0, coordinator="sees-totals", **params)
    ref = FederatedFuzzyCMeans(6, **kw).fit(clients)
    shifted = FederatedFuzzyCMeans(6, **kw).fit([c + 1.7e9 for c in clients])
    assert adjusted_rand_score(ref.labels_, shifted.labels_) == 1.0
    # The local k-means runs on rows moved to their mean: the same start at any
    # offset, up to the rounding of rows near 1.7e9 (a spacing of 2.4e-7).
    np.testing.assert_allclose(shifted.initial_centers_ - 1.7e9, ref.initial_centers_, atol=1e-5)
    np.testing.assert_array_equal(shifted.predict(X + 1.7e9), shifted.labels_)
    # k-means++ seeding (the paper's start) picks the same rows at any offset.
    kw["init"] = "k-means++-rows"
    ref = FederatedFuzzyCMeans(6, **kw).fit(clients)
    shifted = FederatedFuzzyCMeans(6, **kw).fit([c + 1.7e9 for c in clients])
    np.testing.assert_array_equal(shifted.initial_centers_, ref.initial_centers_ + 1.7e9)


def test_ffcm_large_offset_with_given_init():
    X, _, truth = _separated_blobs()
    clients = [X[:800], X[800:1600], X[1600:]]
    init = truth + np.array([1.0, -1.0])
    ref = FederatedFuzzyCMeans(6, n_rounds=3, init=init).fit(clients)
    shifted = FederatedFuzzyCMeans(6, n_rounds=3, init=init + 1.7e9).fit(
        [c + 1.7e9 for c in clients]
    )
    np.testing.assert_array_equal(ref.labels_, shifted.labels_)
    np.testing.assert_allclose(shifted.cluster_centers_ - 1.7e9, ref.cluster_centers_, atol=1e-5)


def test_a_small_fuzzifier_avoids_flat_memberships_in_many_dimensions():
    # The guidance of the user guide: in 64 dimensions m = 2 flattens the memberships
    # (NMI ~0.39 on standardized digits, k-means ~0.63); m = 1.25 does not.
    from sklearn.datasets import load_digits
    from sklearn.metrics import normalized_mutual_info_score as nmi
    from sklearn.preprocessing import StandardScaler

    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)

    def score(m):
        est = FederatedFuzzyCMeans(10, fuzzifier=m, partition=3, random_state=0)
        return nmi(y, est.fit(X).labels_)

    default = FederatedFuzzyCMeans(10).fuzzifier
    assert default == 2.0
    assert score(1.25) > 0.55
    assert score(1.25) > score(default) + 0.15
