"""GOLD: every step of the protocol (spec section 2) rebuilt from its building blocks.

Each test rebuilds one step by hand from :mod:`skfedclust.clusterers` and compares it
with what the estimator did, so a change to that step fails the test.
"""

import copy
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

import skfedclust.methods._gold as gold_module
from skfedclust import GOLDClustering, KFed
from skfedclust.clusterers._cpl import (
    competition_step,
    fine_grained_cpl,
    gaussian_hellinger,
    multi_granular_cpl,
)
from skfedclust.clusterers._remc import _modes as remc_modes
from skfedclust.clusterers._remc import categorical_divergence, matching_scores, remc
from skfedclust.clusterers._remc import remc_weights as remc_level_weights
from skfedclust.methods._centroid_steps import secure_inertia_communication as inertia_cost
from skfedclust.methods._gold import gold_server_cluster
from skfedclust.utils.protocol_checks import check_protocol, recording_runtime

#: compute_inertia=False (the default): nothing is exchanged for inertia_ after the fit.
NO_INERTIA = dict.fromkeys(inertia_cost(3), 0)

#: The paper's settings (and those of the authors' implementation): the tests that rebuild
#: a step of the published protocol by hand use them.
PAPER = dict(local_init=0.5, remc_n_init=1, refine=False, visit_order="storage")


def _clients(n=240, k=3, d=2, m=4, std=0.6, seed=0):
    X, y = make_blobs(n, n_features=d, centers=k, cluster_std=std, random_state=seed)
    bounds = np.linspace(0, n, m + 1).astype(int)
    return [X[a:b] for a, b in zip(bounds[:-1], bounds[1:])], y


@pytest.fixture
def server_rng(monkeypatch):
    """Record a copy of the server's random stream and the micro-centroids it got."""
    seen = {}
    original = gold_module.gold_server_cluster

    def recording(centers, n_clusters, *, random_state=None, **params):
        seen["centers"] = np.array(centers, copy=True)
        seen["rng"] = copy.deepcopy(random_state)
        seen["params"] = dict(params, n_clusters=n_clusters)
        return original(centers, n_clusters, random_state=random_state, **params)

    monkeypatch.setattr(gold_module, "gold_server_cluster", recording)
    return seen


def _micro_centroids(runtime):
    """The upload of the micro-centroids (after any standardization exchanges)."""
    (upload,) = [r for r in runtime.received if r.tag == "micro-centroids"]
    return upload


def _fit_recorded(est, X, **fit_params):
    with recording_runtime() as runtimes:
        est.fit(X, **fit_params)
    return runtimes[-1]


# --------------------------------------------------------------------------- #
# 2.12: worked vectors (the building blocks, as the pipeline calls them)
# --------------------------------------------------------------------------- #
def test_worked_vectors_of_the_spec():
    centers = np.array([[0.0], [2.0]])
    beta, wins = np.array([1.0, 1.0]), np.array([1.0, 1.0])
    v, r = competition_step(np.array([0.5]), centers, np.ones((2, 1)), beta, wins)
    assert (v, r) == (0, 1)
    np.testing.assert_allclose(beta, [1.05, 0.9816060], atol=1e-7)
    np.testing.assert_array_equal(wins, [2, 1])
    np.testing.assert_allclose(gaussian_hellinger(0, 1, 1, 1), 0.3427872, atol=1e-7)
    np.testing.assert_allclose(gaussian_hellinger(0, 1, 0, 4), 0.3249197, atol=1e-7)
    assert gaussian_hellinger(0.3, 2.0, 0.3, 2.0) == 0
    p_in, p_out = np.array([1.0, 0.0]), np.array([0.5, 0.5])
    np.testing.assert_allclose(categorical_divergence(p_in, p_out), 0.5, atol=1e-7)
    np.testing.assert_allclose(
        categorical_divergence(p_in, p_out, "hellinger"), 0.5411961, atol=1e-7
    )


# --------------------------------------------------------------------------- #
# 2.1: standardization from client aggregates (a counted pre-round)
# --------------------------------------------------------------------------- #
def test_standardization_uses_pooled_moments_and_clients_zscore_before_fcpl():
    clients, _ = _clients(d=3)
    clients = [c * [1.0, 50.0, 0.01] + [3.0, -7.0, 1e3] for c in clients]
    est = GOLDClustering(3, random_state=0, **PAPER)
    runtime = _fit_recorded(est, clients)
    pooled = np.vstack(clients)
    np.testing.assert_allclose(est.mean_, pooled.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(est.scale_, pooled.std(axis=0), rtol=1e-12)
    uploads = _micro_centroids(runtime).list()
    for i, Xi in enumerate(clients):
        expected = fine_grained_cpl((Xi - est.mean_) / est.scale_, random_state=runtime.seeds[i])
        np.testing.assert_array_equal(uploads[i][0], expected.centers)
        assert uploads[i][1] == expected.n_iter


def test_without_standardization_clients_run_fcpl_on_their_raw_rows():
    clients, _ = _clients()
    est = GOLDClustering(3, standardize=False, random_state=0, **PAPER)
    runtime = _fit_recorded(est, clients)
    assert est.mean_ is None and est.scale_ is None
    # The upload is all the server receives: the labels are the clients' own
    # (no inertia_ exchange with compute_inertia=False, the default).
    tags = [r.tag for r in runtime.received]
    assert tags == ["micro-centroids", "labels"]
    assert all(payload is None for payload in runtime.received[1].list())
    for i, Xi in enumerate(clients):
        expected = fine_grained_cpl(Xi, random_state=runtime.seeds[i])
        np.testing.assert_array_equal(_micro_centroids(runtime)[i][0], expected.centers)


def test_standardization_changes_the_result_on_badly_scaled_features():
    clients, y = _clients(d=2, std=0.5)
    clients = [c * [1.0, 1000.0] for c in clients]

    def mean_ari(standardize):
        return np.mean([
            adjusted_rand_score(y, GOLDClustering(3, remc_n_init=10, standardize=standardize,
                                                  random_state=s).fit(clients).labels_)
            for s in range(3)
        ])  # fmt: skip

    # CPL's similarity has a unit bandwidth: a feature 1000x wider swamps the other.
    scaled, raw = mean_ari(True), mean_ari(False)
    assert scaled > 0.85
    assert scaled > raw + 0.2


# --------------------------------------------------------------------------- #
# 2.2-2.4: FCPL per client, one upload of the micro-centroids
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("local_init", [0.5, 0.3, 7])
def test_each_client_uploads_its_fcpl_micro_centroids_once(local_init):
    clients, _ = _clients()
    est = GOLDClustering(3, local_init=local_init, learning_rate=0.07, max_iter=12,
                         standardize=False, refine=False, visit_order="storage",
                         random_state=1)  # fmt: skip
    runtime = _fit_recorded(est, clients)
    for i, Xi in enumerate(clients):
        local = fine_grained_cpl(
            Xi,
            local_init=local_init,
            learning_rate=0.07,
            max_iter=12,
            random_state=runtime.seeds[i],
        )
        np.testing.assert_array_equal(_micro_centroids(runtime)[i][0], local.centers)
        np.testing.assert_array_equal(est.local_centers_[i], local.centers)
        assert est.n_local_clusters_[i] == local.n_clusters
        state = runtime.private_states()[i]
        np.testing.assert_array_equal(state["micro_labels"], local.labels)
    uploads = [m for m in runtime.ledger.messages if m.tag == "micro-centroids"]
    assert sorted(m.sender for m in uploads) == list(range(len(clients)))


def test_local_init_default_grows_as_the_square_root_of_the_client_rows(monkeypatch):
    clients, _ = _clients(n=203, m=3)
    asked = []
    original = gold_module.fine_grained_cpl

    def spy(X, **params):
        asked.append((len(X), params["local_init"]))
        return original(X, **params)

    monkeypatch.setattr(gold_module, "fine_grained_cpl", spy)
    GOLDClustering(3, random_state=0).fit(clients)
    # Clients run side by side: in any order.
    assert sorted(asked) == sorted((len(c), "sqrt") for c in clients)
    asked.clear()
    GOLDClustering(3, random_state=0, **PAPER).fit(clients)
    assert sorted(asked) == sorted((len(c), 0.5) for c in clients)
    # "sqrt": half the rows on small clients (the paper), 10 sqrt(n) on large ones.
    from skfedclust.clusterers import _cpl

    seeds = []
    monkeypatch.setattr(
        _cpl, "competitive_penalized_learning",
        lambda X, k, **kw: seeds.append(k) or _cpl.CPLResult(
            X[:1], np.zeros(len(X), int), np.ones((1, X.shape[1])), np.array([len(X)]), 0,
            np.empty((0, 1), int), 0.0),
    )  # fmt: skip
    for n in (60, 400, 20_000):
        fine_grained_cpl(np.arange(2.0 * n).reshape(n, 2), local_init="sqrt")
    assert seeds == [30, 200, 1414]


# --------------------------------------------------------------------------- #
# 2.5-2.6: MCPL on the stacked micro-centroids, REMC on the code
# --------------------------------------------------------------------------- #
def test_server_stacks_client_major_then_mcpl_then_remc(server_rng, monkeypatch):
    remc_calls = []
    original_remc = gold_module.remc

    def spy(codes, n_clusters, **params):
        remc_calls.append(params)
        return original_remc(codes, n_clusters, **params)

    monkeypatch.setattr(gold_module, "remc", spy)
    clients, _ = _clients(n=300, k=4, m=5)
    est = GOLDClustering(
        4, server_init=0.4, remc_n_init=3, remc_max_iter=7, remc_divergence="hellinger",
        refine=False, visit_order="storage", random_state=2,
    )  # fmt: skip
    est.fit(clients)
    T = np.vstack([(c - est.mean_) / est.scale_ for c in est.local_centers_])
    np.testing.assert_allclose(server_rng["centers"], T, atol=1e-12)
    T = server_rng["centers"]

    rng = server_rng["rng"]
    mcpl = multi_granular_cpl(T, server_init=0.4, random_state=rng)
    np.testing.assert_array_equal(est.granular_codes_, mcpl.granular_codes)
    np.testing.assert_array_equal(est.level_n_clusters_, mcpl.n_clusters_per_level)
    assert est.n_attempts_ == 1
    assert [{k: c[k] for k in ("n_init", "max_iter", "divergence")} for c in remc_calls] == [
        {"n_init": 3, "max_iter": 7, "divergence": "hellinger"}
    ]
    res = remc(mcpl.granular_codes, 4, n_init=3, max_iter=7, divergence="hellinger",
               random_state=rng)  # fmt: skip
    np.testing.assert_array_equal(est.server_labels_, res.labels)
    np.testing.assert_array_equal(est.remc_weights_, res.weights)


def test_mcpl_levels_strictly_decrease_from_at_most_half_the_micro_centroids():
    clients, _ = _clients(n=400, k=4, m=4, std=1.0)
    for seed in range(4):
        est = GOLDClustering(4, random_state=seed).fit(clients)
        levels = est.level_n_clusters_
        assert np.all(np.diff(levels) < 0)
        assert levels[0] <= round(0.5 * est.n_local_clusters_.sum())
        codes = est.granular_codes_
        assert codes.shape == (est.n_local_clusters_.sum(), len(levels))
        assert [len(np.unique(col)) for col in codes.T] == levels.tolist()


@pytest.mark.parametrize("seed", range(3))
def test_server_labels_are_a_fixed_point_of_remc_on_the_code(seed):
    clients, _ = _clients(n=400, k=5, m=4, std=1.5, seed=seed)
    est = GOLDClustering(5, random_state=seed, **PAPER).fit(clients)
    codes, q = est.granular_codes_, est.server_labels_
    n_values = codes.max(axis=0) + 1
    modes = remc_modes(codes, q, 5, n_values)
    weights = remc_level_weights(codes, q, 5, n_values=n_values)
    np.testing.assert_array_equal(matching_scores(codes, modes, weights).argmax(axis=1), q)
    np.testing.assert_array_equal(est.remc_weights_, weights)


def test_global_prototypes_are_unweighted_means_of_member_micro_centroids():
    clients, _ = _clients(n=300, k=3, m=4, std=1.0)
    est = GOLDClustering(3, random_state=0, **PAPER).fit(clients)
    T = np.vstack(est.local_centers_)
    for label in range(3):
        np.testing.assert_allclose(
            est.cluster_centers_[label], T[est.server_labels_ == label].mean(axis=0), atol=1e-12
        )


@pytest.mark.parametrize("seed", range(3))
def test_refinement_is_weighted_kmeans_from_remcs_partition(server_rng, monkeypatch, seed):
    # Not in the paper: k-means iterations on the micro-centroids, each weighted by the
    # rows of its micro-cluster (uploaded with it), start from REMC's partition.
    remc_labels = []
    original = gold_module.remc

    def spy(codes, n_clusters, **params):
        res = original(codes, n_clusters, **params)
        remc_labels.append(res.labels)
        return res

    monkeypatch.setattr(gold_module, "remc", spy)
    clients, _ = _clients(n=400, k=4, m=4, std=1.5, seed=seed)
    est = GOLDClustering(4, refine_n_init=0, random_state=seed)
    runtime = _fit_recorded(est, clients)
    T = server_rng["centers"]
    sizes = np.concatenate([runtime.private_states()[i]["micro_sizes"] for i in range(4)])
    np.testing.assert_array_equal(
        np.concatenate([u[2] for u in _micro_centroids(runtime).list()]), sizes
    )
    C = est._centers_fitted
    q = est.server_labels_
    # A fixed point of weighted k-means: nearest prototype, prototypes = weighted means.
    np.testing.assert_array_equal(((T[:, None] - C[None]) ** 2).sum(-1).argmin(1), q)
    for label in range(4):
        members = q == label
        np.testing.assert_allclose(
            C[label], np.average(T[members], axis=0, weights=sizes[members]), atol=1e-12
        )
    # ... reached from REMC's partition (of the distinct micro-centroids) by the iterations.
    _, first, inverse = np.unique(T, axis=0, return_index=True, return_inverse=True)
    assert len(first) == len(T)
    u_remc = remc_labels[-1]
    distinct, inverse_u = gold_module._distinct_rows(T, True, copy.deepcopy(server_rng["rng"]))
    expected, _, n_iter = gold_module.refine_partition(
        distinct, u_remc, 4, weights=np.bincount(inverse_u, weights=sizes)
    )
    np.testing.assert_array_equal(q, expected[inverse_u])
    assert est.n_refine_iter_ == n_iter >= 1
    off = GOLDClustering(4, refine=False, random_state=seed).fit(clients)
    assert off.n_refine_iter_ == 0

    # k-means++ starts next to REMC's (the default): the smallest weighted inertia wins.
    def inertia(e):
        C, q = e._centers_fitted, e.server_labels_
        return float(sizes @ ((T - C[q]) ** 2).sum(axis=1))

    full = GOLDClustering(4, random_state=seed).fit(clients)
    np.testing.assert_array_equal(np.vstack(full.local_centers_), np.vstack(est.local_centers_))
    assert inertia(full) <= inertia(est)
    C = full._centers_fitted
    np.testing.assert_array_equal(((T[:, None] - C[None]) ** 2).sum(-1).argmin(1),
                                  full.server_labels_)  # fmt: skip


# --------------------------------------------------------------------------- #
# 2.7-2.8: labels sent back, every sample inherits its micro-cluster's label
# --------------------------------------------------------------------------- #
def test_each_client_gets_its_micro_cluster_labels_and_relabels_its_rows():
    clients, _ = _clients(n=300, k=3, m=4)
    est = GOLDClustering(3, random_state=0)
    runtime = _fit_recorded(est, clients)
    bounds = np.cumsum([0, *est.n_local_clusters_])
    downloads = [m for m in runtime.ledger.messages if m.tag == "micro-cluster labels"]
    assert sorted(m.receiver for m in downloads) == list(range(4))
    offset = 0
    for i, Xi in enumerate(clients):
        g_i = est.server_labels_[bounds[i] : bounds[i + 1]]
        assert downloads[i].nbytes == 8 * len(g_i)
        micro = runtime.private_states()[i]["micro_labels"]
        np.testing.assert_array_equal(est.labels_[offset : offset + len(Xi)], g_i[micro])
        offset += len(Xi)
    assert set(np.unique(est.labels_)) <= set(range(3))


# --------------------------------------------------------------------------- #
# Communication
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("standardize", [True, False])
def test_protocol_rounds_and_bytes(standardize):
    clients, _ = _clients(n=300, k=3, d=3, m=5)
    m, d = len(clients), 3
    est = GOLDClustering(3, standardize=standardize, secure_aggregation=False, random_state=0)

    def k_total(runtime):
        return int(est.n_local_clusters_.sum())

    # Micro-centroids: sum k_i x d float64 up, with each client's CPL pass
    # count (one int64); their labels: sum k_i int64 down. Pre-round in the
    # clear: a count, a mean and squared deviations up (8 + 16 d), mean and
    # scale down. Then the k x d float64 prototypes down, with the inertia's
    # secure sums.
    inertia = NO_INERTIA
    check_protocol(
        est,
        clients,
        rounds=1 + standardize + inertia["rounds"],
        bytes_up=lambda rt: (
            8 * d * k_total(rt)
            + 8 * m
            + 8 * k_total(rt)  # the micro-cluster sizes, for the server's refinement
            + standardize * m * (8 + 16 * d)
            + inertia["bytes_up"]
        ),
        bytes_down=lambda rt: (
            8 * k_total(rt)
            + standardize * m * 16 * d
            + m * 8 * d * len(est.cluster_centers_)
            + inertia["bytes_down"]
        ),
        bytes_peer=inertia["bytes_peer"],
        # The micro-cluster sizes are uploaded (for the refinement); the rest stays.
        private_keys=("labels", "micro_labels", "feature_weights"),
    )
    assert est.communication_["rounds"] == 1 + standardize + inertia["rounds"]
    assert not hasattr(est, "inertia_")


# --------------------------------------------------------------------------- #
# n_clusters=None, predict
# --------------------------------------------------------------------------- #
def test_n_clusters_none_returns_the_coarsest_mcpl_level():
    clients, _ = _clients(n=300, k=3, m=4)
    est = GOLDClustering(None, random_state=0).fit(clients)
    np.testing.assert_array_equal(est.server_labels_, est.granular_codes_[:, -1])
    assert est.remc_weights_ is None
    assert len(est.cluster_centers_) == est.level_n_clusters_[-1]
    assert set(np.unique(est.labels_)) <= set(range(est.level_n_clusters_[-1]))


def test_predict_is_the_nearest_prototype_in_the_standardized_space():
    clients, _ = _clients(n=300, k=3, d=2, m=4, std=1.5)
    clients = [c * [1.0, 20.0] for c in clients]
    est = GOLDClustering(3, random_state=0).fit(clients)
    X = np.random.RandomState(0).normal(0, 30, (200, 2))
    Z = (X - est.mean_) / est.scale_
    C = (est.cluster_centers_ - est.mean_) / est.scale_
    expected = (((Z[:, None, :] - C[None]) ** 2).sum(-1)).argmin(axis=1)
    np.testing.assert_array_equal(est.predict(X), expected)


def test_predict_agrees_with_labels_on_training_rows_of_separated_clusters():
    clients, y = _clients(n=400, k=3, m=4, std=0.3)
    est = GOLDClustering(3, remc_n_init=10, random_state=0).fit(clients)
    assert adjusted_rand_score(y, est.labels_) == 1.0
    np.testing.assert_array_equal(est.predict(np.vstack(clients)), est.labels_)


# --------------------------------------------------------------------------- #
# Determinism, n_jobs, offsets
# --------------------------------------------------------------------------- #
def test_determinism_and_n_jobs_invariance(monkeypatch):
    from skfedclust.federation import _runtime

    clients, _ = _clients(n=400, k=4, m=6, std=1.0)
    runs = [GOLDClustering(4, n_jobs=j, random_state=3).fit(clients) for j in (None, 1, 3)]
    # One core: the clients' FCPL runs in turn instead of side by side.
    monkeypatch.setattr(_runtime, "_openmp_effective_n_threads", lambda: 1)
    runs.append(GOLDClustering(4, random_state=3).fit(clients))
    for other in runs[1:]:
        np.testing.assert_array_equal(runs[0].labels_, other.labels_)
        np.testing.assert_array_equal(runs[0].cluster_centers_, other.cluster_centers_)
        np.testing.assert_array_equal(runs[0].granular_codes_, other.granular_codes_)
        assert runs[0].communication_["bytes_total"] == other.communication_["bytes_total"]


def test_clients_run_fcpl_side_by_side_on_the_cores(monkeypatch):
    from skfedclust.clusterers import _cpl
    from skfedclust.federation import _runtime
    from skfedclust.methods import _gold

    # The pass runs without the GIL, so threads do run the clients at once.
    assert _cpl._competition_pass_numba.targetoptions["nogil"]
    threads = []
    original = _gold.fine_grained_cpl

    def recording(*args, **kwargs):
        import threading

        threads.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(_gold, "fine_grained_cpl", recording)
    monkeypatch.setattr(_runtime, "_openmp_effective_n_threads", lambda: 2)
    clients, _ = _clients(n=200, k=3, m=4, std=1.0)
    GOLDClustering(3, random_state=0).fit(clients)
    assert len(threads) == 4 and all(t.startswith("skfedclust-client") for t in threads)


@pytest.mark.parametrize("standardize", [True, False])
def test_a_large_offset_changes_no_label(standardize):
    clients, _ = _clients(n=300, k=3, m=4)
    ref = GOLDClustering(3, standardize=standardize, random_state=0).fit(clients)
    shifted = GOLDClustering(3, standardize=standardize, random_state=0).fit(
        [c + 1.7e9 for c in clients]
    )
    assert adjusted_rand_score(ref.labels_, shifted.labels_) == 1.0
    assert (
        adjusted_rand_score(
            ref.predict(np.vstack(clients)), shifted.predict(np.vstack(clients) + 1.7e9)
        )
        == 1.0
    )


# --------------------------------------------------------------------------- #
# Quality on Non-ICD fragments: better than k-FED (the gallery example's setting)
# --------------------------------------------------------------------------- #
def test_gold_beats_kfed_on_fragmented_clusters():
    from skfedclust.partition import NonICDPartition

    X, y = make_blobs(1200, centers=[[-6, 0], [0, 6], [6, 0]], cluster_std=1.6, random_state=0)
    rows = list(NonICDPartition(8, max_subclusters=6, random_state=0).split(X, y))
    clients = [X[r] for r in rows]
    truth = np.concatenate([y[r] for r in rows])
    gold = [
        adjusted_rand_score(
            truth, GOLDClustering(3, remc_n_init=10, random_state=s).fit(clients).labels_
        )
        for s in range(3)
    ]
    kfed = [
        adjusted_rand_score(truth, KFed(3, random_state=s).fit(clients).labels_) for s in range(3)
    ]
    assert np.mean(gold) > 0.8
    assert np.mean(gold) >= np.mean(kfed) - 0.05


# --------------------------------------------------------------------------- #
# 2.11: guards and bad input
# --------------------------------------------------------------------------- #
def test_a_feature_constant_on_one_client_or_everywhere_is_harmless():
    clients, y = _clients(n=300, k=3, d=3, m=4, std=0.4)
    clients[1] = clients[1].copy()
    clients[1][:, 2] = 5.0  # constant on one client
    est = GOLDClustering(3, remc_n_init=10, random_state=0).fit(clients)
    assert est.n_local_clusters_[1] > 1  # the reference collapses this client to one
    assert np.isfinite(est.cluster_centers_).all()
    everywhere = [np.column_stack([c, np.full(len(c), 2.0)]) for c in clients]
    est2 = GOLDClustering(3, remc_n_init=10, random_state=0).fit(everywhere)
    assert est2.scale_[-1] == 1.0
    assert np.isfinite(est2.cluster_centers_).all()
    assert adjusted_rand_score(y, est2.labels_) > 0.5


def test_a_client_with_one_sample_uploads_it_with_a_warning():
    clients, _ = _clients(n=300, k=3, m=4)
    clients.append(clients[0][:1] + 0.01)
    with pytest.warns(UserWarning, match=r"clients \[4\] hold a single row"):
        est = GOLDClustering(3, standardize=False, random_state=0).fit(clients)
    assert est.n_local_clusters_[4] == 1
    np.testing.assert_array_equal(est.local_centers_[4], clients[4])
    assert est.labels_.shape == (sum(len(c) for c in clients),)


def test_fewer_distinct_codes_than_clusters_falls_back_to_kmeans_after_retries(monkeypatch):
    calls = []
    original = gold_module.multi_granular_cpl

    def coarse(T, **params):
        calls.append(1)
        res = original(T, **params)
        # A code of two distinct rows: REMC cannot form three clusters.
        codes = (np.arange(len(T)) % 2)[:, None]
        return res._replace(granular_codes=codes, n_clusters_per_level=np.array([2]))

    monkeypatch.setattr(gold_module, "multi_granular_cpl", coarse)
    clients, y = _clients(n=300, k=3, m=4, std=0.4)
    with pytest.warns(UserWarning, match="in 4 attempts.*2 distinct rows.*k-means"):
        est = GOLDClustering(3, n_retries=3, random_state=0).fit(clients)
    assert len(calls) == 4 and est.n_attempts_ == 4
    assert est.remc_weights_ is None
    assert len(np.unique(est.server_labels_)) == 3
    assert adjusted_rand_score(y, est.labels_) > 0.9


def test_an_empty_remc_cluster_triggers_a_fresh_attempt(monkeypatch):
    results = []
    original = gold_module.remc

    def first_leaves_one_empty(codes, n_clusters, **params):
        res = original(codes, n_clusters, **params)
        if not results:
            res = res._replace(labels=np.minimum(res.labels, n_clusters - 2))
        results.append(res)
        return res

    monkeypatch.setattr(gold_module, "remc", first_leaves_one_empty)
    clients, _ = _clients(n=300, k=3, m=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = GOLDClustering(3, random_state=0, **PAPER).fit(clients)
    assert est.n_attempts_ == 2 and len(results) == 2
    np.testing.assert_array_equal(est.server_labels_, results[1].labels)


def test_fewer_micro_centroids_than_clusters_is_a_clear_error():
    with pytest.raises(ValueError, match="micro-centroids in all, fewer than"):
        gold_server_cluster(np.eye(3), 4)
    rng = np.random.RandomState(0)
    X = np.vstack([rng.normal(0, 0.01, (6, 2)), rng.normal(5, 0.01, (6, 2))])
    # Two tight pairs of groups: each client finds two micro-clusters, 4 in all.
    clients = [X[[0, 1, 2, 6, 7, 8]], X[[3, 4, 5, 9, 10, 11]]]
    with pytest.raises(ValueError, match="received 4 micro-centroids.*n_clusters=5 global"):
        GOLDClustering(5, standardize=False, random_state=0).fit(clients)


def test_too_few_samples_is_a_clear_error():
    with pytest.raises(ValueError, match="n_samples=1 should be >= 2"):
        GOLDClustering(None).fit(np.zeros((1, 2)))


# --------------------------------------------------------------------------- #
# The authors' own client splits
# --------------------------------------------------------------------------- #
def test_runs_on_the_authors_us_split_in_the_papers_range():
    from skfedclust.datasets import load_gold_clients

    data = load_gold_clients("US")
    assert len(data.clients) == 8 and data.n_clusters == 4
    pooled = sum(len(c) for c in data.clients)
    assert pooled / 403 == pytest.approx(1.15, abs=0.01)  # 403 rows in the paper's Table I
    truth = np.concatenate(data.targets)
    aris = [
        adjusted_rand_score(
            truth, GOLDClustering(4, standardize=False, random_state=s).fit(data.clients).labels_
        )
        for s in range(5)
    ]
    # Table IV: ARI 0.227 +- 0.12 on this split (client protocol).
    assert 0.227 - 0.12 < np.mean(aris) < 0.227 + 0.12


# --------------------------------------------------------------------------- #
# Defaults that do not depend on how the data are stored (not in the paper)
# --------------------------------------------------------------------------- #
def _shuffled(clients, seed):
    # The same rows, each client's rows permuted, the clients in another order.
    rng = np.random.RandomState(seed)
    rows = [rng.permutation(len(c)) for c in clients]
    order = rng.permutation(len(clients))
    return [clients[i][rows[i]] for i in order], rows, order


def _back(labels, clients, rows, order):
    # Labels of the shuffled fit, in the rows' original places.
    bounds = np.cumsum([0] + [len(clients[i]) for i in order])
    out = [None] * len(clients)
    for pos, i in enumerate(order):
        out[i] = np.empty(len(clients[i]), dtype=labels.dtype)
        out[i][rows[i]] = labels[bounds[pos] : bounds[pos + 1]]
    return np.concatenate(out)


@pytest.mark.parametrize("seed", range(3))
def test_permuting_rows_and_clients_changes_no_label(seed):
    clients, _ = _clients(n=360, k=4, d=3, m=5, std=1.2, seed=seed)
    shuffled, rows, order = _shuffled(clients, seed)
    # Without standardization the run is exactly the same: same labels, same prototypes.
    ref = GOLDClustering(4, standardize=False, random_state=seed).fit(clients)
    other = GOLDClustering(4, standardize=False, random_state=seed).fit(shuffled)
    np.testing.assert_array_equal(_back(other.labels_, clients, rows, order), ref.labels_)
    np.testing.assert_array_equal(other.cluster_centers_, ref.cluster_centers_)
    # The pooled moments are sums in another order (rounding only): the same partition.
    ref = GOLDClustering(4, random_state=seed).fit(clients)
    other = GOLDClustering(4, random_state=seed).fit(shuffled)
    assert adjusted_rand_score(_back(other.labels_, clients, rows, order), ref.labels_) == 1.0
    # The paper's storage order does depend on it (the reason for the default).
    paper = [
        GOLDClustering(4, standardize=False, random_state=seed, **PAPER).fit(c).labels_
        for c in (clients, shuffled)
    ]
    assert not np.array_equal(_back(paper[1], clients, rows, order), paper[0])


def test_copies_of_the_same_rows_on_different_clients_get_the_same_labels():
    clients, _ = _clients(n=300, k=3, m=3, std=1.5)
    rng = np.random.RandomState(0)
    copy_rows = rng.permutation(len(clients[0]))
    clients = [*clients, clients[0][copy_rows]]  # client 3 holds client 0's rows
    for seed in range(5):
        est = GOLDClustering(3, random_state=seed).fit(clients)
        first = est.labels_[: len(clients[0])]
        last = est.labels_[-len(clients[0]) :]
        np.testing.assert_array_equal(last, first[copy_rows])
        np.testing.assert_array_equal(est.local_centers_[3], est.local_centers_[0])


def test_identical_rows_are_never_split():
    X = np.tile([[1.0, 2.0, 3.0]], (60, 1))
    with pytest.warns(UserWarning, match="only 1 distinct points.*identical rows are kept"):
        est = GOLDClustering(3, partition=3, random_state=0).fit(X)
    assert np.unique(est.labels_).tolist() == [0]
    np.testing.assert_allclose(est.cluster_centers_, X[:1])
    # Duplicated rows among others: every copy takes the same label.
    clients, _ = _clients(n=300, k=3, m=3, std=1.5)
    clients = [np.vstack([c, c[:20], c[:20]]) for c in clients]
    est = GOLDClustering(3, random_state=0).fit(clients)
    offset = 0
    for c in clients:
        labels = est.labels_[offset : offset + len(c)]
        n = len(c) - 40
        np.testing.assert_array_equal(labels[n : n + 20], labels[:20])
        np.testing.assert_array_equal(labels[n + 20 :], labels[:20])
        offset += len(c)


@pytest.mark.parametrize("standardize", [True, False])
def test_a_constant_column_changes_no_label(standardize):
    clients, _ = _clients(n=300, k=3, d=3, m=4, std=1.2)
    with_constant = [np.column_stack([c[:, :1], np.full(len(c), 7.3), c[:, 1:]]) for c in clients]
    for seed in range(3):
        ref = GOLDClustering(3, standardize=standardize, random_state=seed).fit(clients)
        est = GOLDClustering(3, standardize=standardize, random_state=seed).fit(with_constant)
        np.testing.assert_array_equal(est.labels_, ref.labels_)
        np.testing.assert_allclose(est.cluster_centers_[:, [0, 2, 3]], ref.cluster_centers_)
        np.testing.assert_allclose(est.cluster_centers_[:, 1], 7.3)


def test_defaults_beat_the_papers_settings_on_iid_clients():
    # The measured gap of benchmarks/defaults_gold.py, on a small case.
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)

    def ari(**params):
        return [
            adjusted_rand_score(y, GOLDClustering(3, partition=3, random_state=s, **params)
                                .fit(X).labels_)
            for s in range(5)
        ]  # fmt: skip

    defaults, paper = ari(), ari(**PAPER)
    assert np.mean(defaults) > 0.7
    assert np.mean(defaults) > np.mean(paper) + 0.1
    assert np.std(defaults) < np.std(paper)


def test_secure_standardization_is_the_clear_one_and_costs_eight_rounds():
    clients, _ = _clients(n=300, k=3, d=3, m=5)
    clients = [c * [1.0, 1e3, 1e-3] + 1.7e9 for c in clients]
    clear = GOLDClustering(3, secure_aggregation=False, random_state=0).fit(clients)
    secure = GOLDClustering(3, random_state=0)
    runtime = _fit_recorded(secure, clients)
    pooled = np.vstack(clients)
    np.testing.assert_allclose(secure.mean_, pooled.mean(axis=0), rtol=1e-15)
    for j in range(pooled.shape[1]):
        # The exact standard deviation, in rationals (numpy's own loses digits
        # of the narrow feature 1.7e9 from the origin).
        column = [Fraction(float(v)) for v in pooled[:, j]]
        mean = sum(column) / len(column)
        exact = math.sqrt(sum((c - mean) ** 2 for c in column) / len(column))
        assert secure.scale_[j] == pytest.approx(exact, rel=1e-12)
    # The same partition (the secure path draws one more public seed, so the
    # server's later draws, and the cluster numbers, may differ).
    assert adjusted_rand_score(secure.labels_, clear.labels_) == 1.0
    comm = secure.communication_
    assert comm["rounds"] - clear.communication_["rounds"] == 7
    assert comm["setup_rounds"] == 1
    # No client's own count, mean or deviations reach a server step: the
    # standardization's uploads are masked vectors.
    tags = {r.tag for r in runtime.received}
    assert "moments" not in tags and "secure sum: masked vectors" in tags
