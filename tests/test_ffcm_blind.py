"""FederatedFuzzyCMeans(coordinator="blind"): v1 run by the nodes, against a hostile coordinator.

The claim: the coordinator learns no more than the final centers, the sizes
of the nearest-center clusters, ``n_iter_`` and the inertia of the parameters
the nodes accepted; it neither chooses the centers a round answers nor sees a
round's totals. The coordinator of the attack tests is the test: it drives the
protocol's client steps on nodes with a deployed node's default policy,
choosing the parameters and what each node's inbox holds; a colluding node is
played by rewriting what it holds and sends.
"""

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist
from sklearn.datasets import make_blobs
from test_attack_blind_kmeans import _blind_fit, _kept, _lie

from skfedclust import FederatedFuzzyCMeans
from skfedclust.clusterers import fuzzy_memberships
from skfedclust.federation import Federation, InProcessRuntime, use_runtime
from skfedclust.methods._fedkmeans_blind import (
    FUZZY_V1,
    TAG_RESULT,
    TAG_ROUND,
    TAG_SETUP,
)
from skfedclust.methods._ffcm import ffcm_client_moves
from skfedclust.node import NodePolicy, NodeRefusal

METHOD = "FederatedFuzzyCMeans"


def _blobs(n=240, seed=0):
    X, y = make_blobs(n, centers=[[0, 0], [8, 0], [0, 8]], cluster_std=1.0, random_state=seed)
    return X, y


def _nodes(blocks, ledger=None, method=METHOD, **policy):
    """Nodes of ``method`` with a deployed node's default policy (and ``policy``) holding
    ``blocks``."""
    X = np.vstack(blocks)
    rows = np.split(np.arange(len(X)), np.cumsum([len(b) for b in blocks])[:-1])
    federation = Federation(X, rows)
    federation.spawn_seeds(np.random.RandomState(0))
    policy = NodePolicy(privacy_ledger="none" if ledger is None else str(ledger), **policy)
    return InProcessRuntime(federation, policy=policy, method=method, private_entropy=[4, 5])


def _fit(runtime, participants, hook=None, setup_per_client=None, **params):
    """The coordinator's own driver (the k-means attack suite's) of a blind fuzzy c-means fit.

    ``{node: result or refusal}``; ``hook(runtime, stage)`` runs before each
    exchange after the set-up (``"reveal"``, the round's number, ``"result"``).
    """
    params = {
        "n_clusters": 3,
        "max_iter": 4,
        "tol": 0.0,
        "algorithm": FUZZY_V1,
        "fuzzifier": 2.0,
        "n_local_iter": 1,
        **params,
    }
    return _blind_fit(runtime, participants, hook, setup_per_client, **params)


def _reference_fcm(X, centers, m, n_steps):
    """Centralized fuzzy c-means, one step per round (v1 with one local iteration)."""
    for _ in range(n_steps):
        w = fuzzy_memberships(X, centers, m) ** m
        centers = (w.T @ X) / w.sum(axis=0)[:, None]
    return centers


# --------------------------------------------------------------------------- #
# What the estimator gives
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("offset", [0.0, 1.7e9])
def test_the_nodes_v1_equals_the_coordinators_from_the_same_start(offset):
    X, _ = _blobs()
    X = X + offset
    clients = [X[:60], X[60:150], X[150:]]
    init = X[[0, 100, 200]] + 0.5
    params = dict(n_rounds=4, n_local_iter=2, fuzzifier=1.7, init=init, random_state=0)
    blind = FederatedFuzzyCMeans(3, coordinator="blind", **params).fit(clients)
    seen = FederatedFuzzyCMeans(3, coordinator="sees-totals", compute_inertia=True, **params)
    seen.fit(clients)
    assert blind.coordinator_ == "blind" and seen.coordinator_ == "sees-totals"
    # The same arithmetic on exact totals: the centers agree to the float64 spacing
    # of the rows (2.4e-7 at 1.7e9).
    np.testing.assert_allclose(
        blind.cluster_centers_, seen.cluster_centers_, rtol=0, atol=max(offset * 1e-15, 1e-12)
    )
    np.testing.assert_array_equal(blind.labels_, seen.labels_)
    assert blind.inertia_ == pytest.approx(seen.inertia_, rel=1e-9)
    assert blind.n_iter_ == 4 and blind.local_centers_ is None
    np.testing.assert_array_equal(blind.initial_centers_, init)


def test_one_local_iteration_is_centralized_fuzzy_c_means():
    X, _ = _blobs()
    init = X[[3, 90, 170]] + 0.3
    est = FederatedFuzzyCMeans(
        3, n_rounds=3, fuzzifier=2.0, init=init, coordinator="blind", random_state=0
    ).fit([X[:40], X[40:200], X[200:]])
    np.testing.assert_allclose(est.cluster_centers_, _reference_fcm(X, init, 2.0, 3), atol=1e-12)
    np.testing.assert_array_equal(est.labels_, cdist(X, est.cluster_centers_).argmin(axis=1))
    assert est.inertia_ == pytest.approx((cdist(X, est.cluster_centers_).min(1) ** 2).sum())


def test_auto_runs_blind_where_it_can_and_the_start_is_the_nodes():
    X, y = _blobs(600)
    clients = [X[:200], X[200:400], X[400:]]
    est = FederatedFuzzyCMeans(3, random_state=0).fit(clients)
    assert est.coordinator_ == "blind"
    # The weighted k-means on the local centers ran on the nodes: no start left them.
    assert est.initial_centers_ is None
    truth = np.array([[0, 0], [8, 0], [0, 8]])
    cost = cdist(truth, est.cluster_centers_)
    assert cost[linear_sum_assignment(cost)].max() < 0.5
    # What "auto" cannot run blind runs as before.
    for params in ({"aggregation": "v2"}, {"secure_aggregation": False}):
        assert FederatedFuzzyCMeans(3, random_state=0, **params).fit(clients).coordinator_ == (
            "sees-totals"
        )
    # Above 50 clients the coordinator adds the totals, and the nodes verify them.
    many = FederatedFuzzyCMeans(3, random_state=0).fit(X, client_ids=np.arange(600) % 60)
    assert many.coordinator_ == "verified"


def test_reproducible_and_independent_of_n_jobs():
    X, _ = _blobs(300)
    fits = [
        FederatedFuzzyCMeans(3, partition=4, random_state=7, n_jobs=n_jobs).fit(X)
        for n_jobs in (None, 2, None)
    ]
    for other in fits[1:]:
        np.testing.assert_array_equal(other.cluster_centers_, fits[0].cluster_centers_)
        np.testing.assert_array_equal(other.labels_, fits[0].labels_)


def test_options_the_blind_protocol_does_not_run_are_refused_before_any_exchange():
    X, _ = _blobs(90)
    for params in (
        {"aggregation": "v2"},
        {"secure_aggregation": False},
        {"init": "k-means++-rows"},
    ):
        with pytest.raises(ValueError, match='needs coordinator="sees-totals"'):
            FederatedFuzzyCMeans(3, coordinator="blind", **params).fit(X)
    with pytest.raises(ValueError, match="at least 3 clients"):
        FederatedFuzzyCMeans(3, coordinator="blind").fit([X[:45], X[45:]])


# --------------------------------------------------------------------------- #
# The coordinator's view, on default nodes
# --------------------------------------------------------------------------- #
def test_default_nodes_run_it_and_the_coordinator_gets_status_bytes_and_the_result():
    X, _ = _blobs()
    blocks = np.array_split(X, 4)
    runtime = _nodes(blocks)
    results = _fit(runtime, [0, 1, 2, 3])
    first = results[0]
    for other in results.values():
        for a, b in zip(first, other):
            np.testing.assert_array_equal(a, b)
    centers, sizes, n_iter, inertia = first
    assert n_iter[0] == 4 and sizes.sum() == len(X)
    for message in (m for m in runtime.ledger.messages if m.receiver == "server"):
        if message.tag == TAG_RESULT:
            assert message.nbytes == centers.nbytes + sizes.nbytes + 8 + 8
        else:
            assert message.nbytes == 1
    # The labels stay on the nodes.
    labels = runtime.hand_back("labels")
    np.testing.assert_array_equal(labels, cdist(X, centers).argmin(axis=1))


def test_a_default_node_refuses_the_coordinators_rounds_unless_allowed():
    X, _ = _blobs()
    blocks = np.array_split(X, 3)
    est = FederatedFuzzyCMeans(3, coordinator="sees-totals", random_state=0)
    policy = NodePolicy(privacy_ledger="none")
    with use_runtime(lambda federation, **kw: InProcessRuntime(federation, policy=policy, **kw)):
        with pytest.raises(NodeRefusal) as refused:
            est.fit(blocks)
        assert refused.value.rule == "coordinator-centers"
        assert FederatedFuzzyCMeans(3, random_state=0).fit(blocks).coordinator_ == "blind"
    allowing = NodePolicy(privacy_ledger="none", allow_coordinator_centers=(METHOD,))
    assert allowing.allows_coordinator_centers(METHOD)
    assert not policy.allows_coordinator_centers(METHOD)
    assert getattr(ffcm_client_moves, "__skfedclust_coordinator_centers__", False)


def test_centers_the_coordinator_sends_change_nothing():
    X, _ = _blobs()
    blocks = np.array_split(X, 3)
    honest = _fit(_nodes(blocks), [0, 1, 2])

    def send_centers(runtime, stage):
        runtime.broadcast(np.full((3, 2), 4.0), tag="global centers")

    steered = _fit(_nodes(blocks), [0, 1, 2], hook=send_centers)
    for a, b in zip(honest[0], steered[0]):
        np.testing.assert_array_equal(a, b)


def test_an_array_start_is_refused_by_a_default_node():
    X, _ = _blobs()
    runtime = _nodes(np.array_split(X, 3))
    with pytest.raises(NodeRefusal) as refused:
        _fit(runtime, [0, 1, 2], init=X[[0, 1, 2]], max_iter=1)
    assert refused.value.rule == "coordinator-centers"
    assert not [m for m in runtime.ledger.messages if m.tag == TAG_SETUP]


@pytest.mark.parametrize(
    "change",
    [{"fuzzifier": 1.5}, {"n_local_iter": 2}, {"max_iter": 2}, {"algorithm": "k-means"}],
    ids=["fuzzifier", "n_local_iter", "rounds", "algorithm"],
)
def test_parameters_that_differ_for_one_node_are_refused(change):
    X, _ = _blobs()
    if change.get("algorithm") == "k-means":
        change = {**change, "fuzzifier": None, "n_local_iter": None}
    with pytest.raises(NodeRefusal, match="consistent-view.*other parameters"):
        _fit(_nodes(np.array_split(X, 3)), [0, 1, 2], setup_per_client={0: change})


@pytest.mark.parametrize(
    "bad",
    [
        {"fuzzifier": 1.0},
        {"fuzzifier": float("nan")},
        {"fuzzifier": True},
        {"n_local_iter": 0},
        {"n_local_iter": 1.5},
        {"n_init": 2},
        {"algorithm": "median"},
        {"algorithm": "k-means"},
    ],
    ids=["m=1", "m=nan", "m=True", "local=0", "local=1.5", "n_init=2", "other", "k-means+m"],
)
def test_fuzzy_parameters_a_node_cannot_run_are_refused(bad):
    X, _ = _blobs()
    runtime = _nodes(np.array_split(X, 3))
    with pytest.raises(NodeRefusal) as refused:
        _fit(runtime, [0, 1, 2], **bad)
    assert refused.value.rule == "well-formed"
    assert not [m for m in runtime.ledger.messages if m.tag == TAG_SETUP]


def _block(k=3, d=2):
    """Offsets of a fuzzy round's upload: moves, masses, squared weights, presence."""
    return {
        "masses": k * d,
        "squares": k * d + k,
        "present": k * d + 2 * k,
        "length": k * d + 3 * k,
    }


@pytest.mark.parametrize(
    "entry, amount",
    [
        ("masses", 200.0),
        ("masses", -500.0),
        ("squares", 100.0),
        ("present", 5.0),
        ("present", -5.0),
    ],
    ids=["mass>rows", "mass<0", "squares>mass", "present>clients", "present<0"],
)
def test_totals_that_cannot_be_right_are_refused(entry, amount):
    X, _ = _blobs()
    at = _block()

    def lie(runtime, stage):
        if stage == 2:
            delta = np.zeros(at["length"])
            delta[at[entry]] = amount
            _lie(runtime, 2, delta)

    with pytest.raises(NodeRefusal) as refused:
        _fit(_nodes(np.array_split(X, 3)), [0, 1, 2], hook=lie)
    assert refused.value.rule == "well-formed"


@pytest.mark.parametrize(
    "holders, present, refused",
    [(3, [1, 1, 1], False), (3, [1, 0, 1], True), (1, [1, 0, 0], False), (1, [0, 0, 0], True)],
    ids=["blind-enough", "blind-too-few", "verified-enough", "verified-none"],
)
def test_every_node_holding_rows_must_be_present_somewhere(holders, present, refused):
    # Each node holding rows has a nearest center for each of them: the
    # presence counts add up to at least the nodes holding rows (a blind fit
    # knows each node's row count; a verified fit only that some node has rows).
    from skfedclust.methods._fedkmeans_blind import _fuzzy_totals, _Run

    k, d = 3, 2
    kept = {"n_rows": 30, "participants": [0, 1, 2], "holders": holders, "max_iter": 5}
    block = np.concatenate([np.zeros(k * d), [10.0] * k, [5.0] * k, present])
    run = _Run(np.zeros((k, d)), phase="fuzzy")
    if refused:
        with pytest.raises(NodeRefusal, match="client counts cannot be right"):
            _fuzzy_totals(kept, run, block, k, d)
    else:
        _fuzzy_totals(kept, run, block, k, d)
        assert run.n_iter == 1


def test_the_release_checks_each_centers_effective_rows():
    # A diffuse cluster: its far rows weigh little, so its center rests on fewer
    # effective rows, (sum w)^2 / sum w^2 (Kish), than it holds nearest rows.
    rng = np.random.default_rng(0)
    tight = [rng.normal(c, 0.3, size=(30, 2)) for c in ([0, 0], [10, 0])]
    diffuse = rng.normal([5, 12], 4.0, size=(30, 2))
    X = np.vstack([*tight, diffuse])
    blocks = [X[i::3] for i in range(3)]
    # One round from a start the operator allows: the backing is that round's.
    init = np.array([[0.0, 0.0], [10.0, 0.0], [5.0, 12.0]])
    allow = {"allow_coordinator_centers": (METHOD,)}
    backing = []

    def read_backing(runtime, stage):
        if stage == "result":
            backing.append(_kept(runtime, 0)["runs"][0].backing.copy())

    runtime = _nodes(blocks, min_rows_per_vector=2, **allow)
    results = _fit(runtime, [0, 1, 2], max_iter=1, init=init, hook=read_backing)
    centers, sizes = results[0][0], results[0][1]
    weights = fuzzy_memberships(X, init, 2.0) ** 2
    expected = weights.sum(axis=0) ** 2 / (weights**2).sum(axis=0)
    effective, present = backing[0].T
    np.testing.assert_allclose(effective, expected, rtol=1e-9)
    np.testing.assert_array_equal(present, [3, 3, 3])
    np.testing.assert_allclose(centers, _reference_fcm(X, init, 2.0, 1), atol=1e-12)
    assert effective[2] < sizes[2] - 1, "the diffuse cluster rests on fewer effective rows"
    # A node whose minimum lies between the two refuses that center, naming the round.
    minimum = int(np.floor(effective[2])) + 1
    assert minimum <= sizes.min()
    refused = _fit(
        _nodes(blocks, min_rows_per_vector=minimum, **allow), [0, 1, 2], max_iter=1, init=init
    )
    assert all(isinstance(r, NodeRefusal) for r in refused.values())
    assert {r.rule for r in refused.values()} == {"min-rows-per-vector"}
    assert all("cluster 2 of the last iteration" in str(r) for r in refused.values())


def test_a_re_run_with_one_participant_fewer_is_refused(tmp_path):
    X, _ = _blobs()
    blocks = np.array_split(X, 5)

    class Stop(Exception):
        pass

    def stop(runtime, stage):
        if stage == 2:
            raise Stop

    # The same start (an array start the operator allows) over four of the five
    # nodes: the first totals would differ by node 4's statistics. Each node's
    # ledger keys its first statistics by what they reveal and refuses the
    # second fit's upload (one-sum-per-input).
    allow = {"allow_coordinator_centers": (METHOD,)}
    init = X[[0, 100, 200]]
    with pytest.raises(Stop):
        _fit(_nodes(blocks, tmp_path, **allow), [0, 1, 2, 3, 4], hook=stop, init=init)
    with pytest.raises(PermissionError, match="one-sum-per-input"):
        _fit(_nodes(blocks, tmp_path, **allow), [0, 1, 2, 3], hook=stop, init=init)


def test_a_relay_that_drops_an_upload_is_refused():
    X, _ = _blobs()

    def drop(runtime, stage):
        if stage == 2:
            del runtime._inboxes[0][TAG_ROUND][2]

    with pytest.raises(NodeRefusal) as refused:
        _fit(_nodes(np.array_split(X, 3)), [0, 1, 2], hook=drop)
    assert refused.value.rule == "consistent-view"
