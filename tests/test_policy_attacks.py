"""A malicious coordinator harvesting rows through method parameters: deployed nodes refuse.

The coordinator chooses each method's parameters; some choices make a node
send its rows (a local k-means with as many clusters as rows, per-cluster
sums of one-row clusters, rows shifted by a hair). The runtime here gives
every party a deployed node's default policy (``NodePolicy()``); each attack
must end in a refusal naming its rule. Simulated parties (the default of a
simulation, whose user holds every row) do not run these checks.
"""

import functools

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from skfedclust import (
    FeCA,
    FederatedFuzzyCMeans,
    FederatedKMeans,
    KFed,
    KumarFederatedKMeans,
    MAvg,
)
from skfedclust.federation import InProcessRuntime, Reply, summary, use_runtime
from skfedclust.node._policy import NodePolicy, raw_row_matches
from skfedclust.utils.protocol_checks import RecordingRuntime


def deployed(**fields):
    return use_runtime(functools.partial(InProcessRuntime, policy=NodePolicy(**fields)))


def _clients(n_per_client=6, n_clients=4, d=3):
    X, _ = make_blobs(n_per_client * n_clients, n_features=d, centers=3, random_state=0)
    return X, np.array_split(X, n_clients)


HARVESTS = [
    (KFed, {"n_clusters": 6, "random_state": 0}),
    (MAvg, {"n_clusters": 6, "random_state": 0}),
    (FeCA, {"n_clusters": 6, "client_n_clusters": 6, "random_state": 0}),
    (KumarFederatedKMeans, {"n_clusters": 6, "random_state": 0}),
    (FederatedFuzzyCMeans, {"n_clusters": 6, "random_state": 0}),
    (FederatedKMeans, {"n_clusters": 6, "random_state": 0}),
    (FederatedKMeans, {"n_clusters": 6, "secure_aggregation": False, "random_state": 0}),
]


@pytest.mark.parametrize(
    ("Estimator", "params"),
    HARVESTS,
    ids=[f"{e.__name__}-{i}" for i, (e, _) in enumerate(HARVESTS)],
)
def test_as_many_clusters_as_a_nodes_rows_is_refused(Estimator, params):
    # Six rows per node, six clusters: each local center or per-cluster sum is a row
    # (refused by nodes that allow sums in the clear too).
    _, clients = _clients()
    with (
        deployed(allow_clear_sums=True),
        pytest.raises(PermissionError, match="min-rows-per-vector|refuse-raw-rows"),
    ):
        Estimator(**params).fit(clients)


@pytest.mark.parametrize(
    ("rule", "fields"),
    [
        ("min-rows-per-vector", {"refuse_raw_rows": False}),
        ("refuse-raw-rows", {"min_rows_per_vector": None}),
    ],
)
def test_each_harvest_rule_refuses_on_its_own(rule, fields):
    # A node with one of the two rules off still enforces the other: a policy
    # checks nothing per array only when both are off (a simulated party).
    _, clients = _clients()
    with (
        deployed(allow_clear_sums=True, **fields),
        pytest.raises(PermissionError, match=rule),
    ):
        KFed(n_clusters=6, random_state=0).fit(clients)


def test_a_policy_without_harvest_rules_lets_the_same_fit_through():
    _, clients = _clients()
    with deployed(allow_clear_sums=True, refuse_raw_rows=False, min_rows_per_vector=None):
        assert KFed(n_clusters=6, random_state=0).fit(clients).labels_.shape == (24,)


@pytest.mark.parametrize(("Estimator", "params"), HARVESTS[:2] + HARVESTS[-1:])
def test_the_same_fit_with_few_clusters_is_accepted(Estimator, params):
    X, clients = _clients(n_per_client=40)
    # (FederatedKMeans in the clear runs the coordinator's Lloyd: its operator allows it.)
    with deployed(allow_clear_sums=True, allow_coordinator_centers="FederatedKMeans"):
        est = Estimator(**{**params, "n_clusters": 3}).fit(clients)
    assert est.labels_.shape == (len(X),)


@pytest.mark.parametrize("Estimator", [FederatedKMeans, FeCA], ids=lambda e: e.__name__)
def test_sums_in_the_clear_need_the_nodes_consent(Estimator):
    # secure_aggregation=False asks each node for its per-cluster statistics in
    # the clear: a default node sends them only inside a secure sum.
    X, clients = _clients(n_per_client=40)
    params = {"n_clusters": 3, "secure_aggregation": False, "random_state": 0}
    if Estimator is FeCA:
        params["final_lloyd_step"] = True
    with deployed(), pytest.raises(PermissionError, match="allow-clear-sums = false"):
        Estimator(**params).fit(clients)
    with deployed(allow_clear_sums=True, allow_coordinator_centers="FederatedKMeans"):
        assert Estimator(**params).fit(clients).labels_.shape == (len(X),)


def test_a_simulated_party_does_not_run_the_harvest_checks():
    _, clients = _clients()
    KFed(n_clusters=6, random_state=0).fit(clients)  # the user holds every row anyway


@summary
def hair_shifted_rows(data, inbox, state, party, *, shift):
    return Reply(send=data[:3] + shift)


@pytest.mark.parametrize("shift", [0.0, 2.0**-20, 1e-6])
def test_rows_shifted_by_a_hair_are_rows(shift):
    X, clients = _clients(n_per_client=40)
    federation_runtime = functools.partial(InProcessRuntime, policy=NodePolicy())
    from skfedclust.federation import Federation

    federation = Federation(X, [np.arange(40 * c, 40 * (c + 1)) for c in range(4)])
    federation.spawn_seeds(np.random.RandomState(0))
    runtime = federation_runtime(federation)
    with pytest.raises(PermissionError, match="refuse-raw-rows"):
        runtime.run(hair_shifted_rows, tag="harvest", shift=shift)
    assert not [m for m in runtime.ledger.messages if m.tag == "harvest"]


def test_raw_row_matching_is_exact_about_its_tolerance():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(500, 4)) * [1.0, 10.0, 1e-3, 1e6] + [0, 0, 0, 1.7e9]
    spread = rows.max(axis=0) - rows.min(axis=0)
    near = rows[[17]] + 0.9e-4 * spread
    far = rows[[17]] + [0, 0, 0, 1.1e-4 * spread[3]]
    assert raw_row_matches(rows, near, 1e-4) == 17
    assert raw_row_matches(rows, far, 1e-4) is None
    assert raw_row_matches(rows, rows.mean(axis=0, keepdims=True), 1e-4) is None
    # Against a brute-force search on random vectors near and far from rows.
    probes = np.vstack(
        [rows[:50] + rng.normal(size=(50, 4)) * spread * 5e-5, rng.normal(size=(50, 4))]
    )
    brute = [bool(np.any(np.all(np.abs(rows - p) <= 1e-4 * spread, axis=1))) for p in probes]
    found = [raw_row_matches(rows, p[None], 1e-4) is not None for p in probes]
    assert found == brute


def test_strict_nodes_refuse_the_steps_that_release_rows_by_design():
    X, clients = _clients(n_per_client=40)
    # FFCM's k-means++ seeding sends rows of the seed client, as in its paper:
    # a node that allows it by name runs it, unless its policy is strict.
    paper = {"init": "k-means++-rows", "random_state": 0}
    # The paper's start runs with the coordinator moving the centers, which
    # the operator allows too.
    allowed = {
        "allow_row_release": ("FederatedFuzzyCMeans",),
        "allow_coordinator_centers": ("FederatedFuzzyCMeans",),
    }
    with deployed(**allowed):
        FederatedFuzzyCMeans(3, **paper).fit(clients)
    with (
        deployed(refuse_raw_rows="strict", **allowed),
        pytest.raises(PermissionError, match="raw-row.*by design"),
    ):
        FederatedFuzzyCMeans(3, **paper).fit(clients)


class Recording(RecordingRuntime):
    """A deployed node's default policy, every message the server received kept."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{"policy": NodePolicy(), **kwargs})


def _recorded_fit(estimator, clients, **policy):
    RecordingRuntime.instances = []
    factory = functools.partial(Recording, policy=NodePolicy(**policy))
    try:
        with use_runtime(factory):
            estimator.fit(clients)
    finally:
        runtime = RecordingRuntime.instances[-1]
    return runtime


def _rows_received(runtime, clients):
    """(client, row index) of every row of a client found in what the server received."""
    found = []
    for received in runtime.received:
        for array in _float_arrays(received.list()):
            vectors = array.reshape(1, -1) if array.ndim == 1 else array
            if vectors.ndim != 2 or vectors.shape[1] != clients[0].shape[1]:
                continue
            for vector in vectors:
                for c, rows in enumerate(clients):
                    hit = raw_row_matches(rows, vector[None], 1e-4)
                    if hit is not None:
                        found.append((c, hit))
    return found


def _float_arrays(payload):
    if isinstance(payload, np.ndarray):
        if payload.dtype.kind == "f":
            yield payload
    elif isinstance(payload, (list, tuple)):
        for value in payload:
            yield from _float_arrays(value)
    elif isinstance(payload, dict):
        for value in payload.values():
            yield from _float_arrays(value)


def test_ffcm_seeds_as_many_as_a_nodes_rows_hand_over_no_row_by_default():
    # The attack: n_clusters = the seed node's row count. With the paper's
    # start, the seed node would send every one of its rows as seeds: a
    # default node refuses the step (its method releases rows by design, and
    # its operator named no method in allow-row-release), and the server
    # receives nothing of it.
    _, clients = _clients()  # four nodes of six rows
    paper = FederatedFuzzyCMeans(6, init="k-means++-rows", random_state=0)
    with pytest.raises(PermissionError, match="row-release") as refusal:
        _recorded_fit(paper, clients)
    assert refusal.value.rule == "row-release"
    # It tells the operator the key to set, and for which method.
    assert 'allow-row-release = "FederatedFuzzyCMeans"' in str(refusal.value)
    runtime = RecordingRuntime.instances[-1]
    assert not runtime.received and not runtime.ledger.messages
    # The default start: each node's local k-means centers, each the mean of
    # two or more of its rows, go to its peers only (the blind fit); the
    # coordinator gets a status byte per round, and the result of six
    # clusters over 24 rows is refused by min-rows-per-vector.
    default = FederatedFuzzyCMeans(6, random_state=0)
    with pytest.raises(PermissionError, match="min-rows-per-vector") as refusal:
        _recorded_fit(default, clients)
    assert refusal.value.rule == "min-rows-per-vector"
    runtime = RecordingRuntime.instances[-1]
    assert runtime.received[0].tag == "blind set-up"
    assert all(np.asarray(m).shape == () for r in runtime.received for m in r.list())
    assert _rows_received(runtime, clients) == []
    # Where the coordinator starts it, the server receives the local centers: at
    # most three of six rows each.
    default.set_params(coordinator="sees-totals")
    with pytest.raises(PermissionError, match="coordinator-centers"):
        _recorded_fit(default, clients)
    runtime = RecordingRuntime.instances[-1]
    start = runtime.received[0]
    assert start.tag == "local k-means centers" and len(start) == 4
    assert all(len(centers) <= 3 for centers, _ in start.list())  # six rows, two per center
    assert _rows_received(runtime, clients) == []


def test_the_papers_start_runs_where_the_node_allows_ffcm_by_name():
    X, clients = _clients(n_per_client=40)
    paper = FederatedFuzzyCMeans(3, init="k-means++-rows", random_state=0)
    with pytest.raises(PermissionError, match="row-release"):
        _recorded_fit(paper, clients, allow_row_release=("KFed", "DCClustering"))
    runtime = _recorded_fit(
        paper,
        clients,
        allow_row_release=("FederatedFuzzyCMeans",),
        allow_coordinator_centers=("FederatedFuzzyCMeans",),
    )
    # It is the paper's release: the seeds the server received are rows of a node.
    seeds = runtime.received[0]
    assert seeds.tag == "initial centers"
    assert len({c for c, _ in _rows_received(runtime, clients)}) == 1
    assert len(_rows_received(runtime, clients)) == 3
    assert paper.labels_.shape == (len(X),)
    # The default start on the same nodes: no row anywhere in what they sent.
    runtime = _recorded_fit(FederatedFuzzyCMeans(3, random_state=0), clients)
    assert _rows_received(runtime, clients) == []


def test_which_methods_a_node_lets_release_rows():
    from skfedclust.methods._dc import dc_party_intermediate

    default, named = NodePolicy(), NodePolicy(allow_row_release=("DCClustering",))
    assert not default.allows_row_release("DCClustering")
    assert named.allows_row_release("DCClustering")
    assert not named.allows_row_release("FederatedFuzzyCMeans")
    assert not named.allows_row_release(None)  # a fit of no known method
    simulation = NodePolicy.simulation()
    assert simulation.allows_row_release("DCClustering")
    assert simulation.allows_row_release("AnyMethodOfTheUser")
    assert simulation.allows_row_release(None)
    rows = np.arange(12.0).reshape(6, 2)
    sent = rows @ np.array([[2.0, 1.0], [0.0, 1.0]])
    with pytest.raises(PermissionError, match="row-release") as refusal:
        named.check_outgoing(rows, sent, None, dc_party_intermediate, method=None)
    assert "method of this fit is unknown" in str(refusal.value)
    named.check_outgoing(rows, sent, None, dc_party_intermediate, method="DCClustering")
    # A node with neither harvest rule still asks for the method's name.
    bare = NodePolicy(min_rows_per_vector=None, refuse_raw_rows=False)
    with pytest.raises(PermissionError, match="row-release"):
        bare.check_outgoing(rows, sent, None, dc_party_intermediate, method="DCClustering")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"refuse-raw-rows": "maybe"}, "expected true, false or strict"),
        ({"min-rows-per-vector": -1}, ">= 0"),
        ({"min-sum-participants": 1}, ">= 2"),
        ({"raw-row-tolerance": "nan"}, "finite"),
    ],
)
def test_node_config_fields_are_checked(config, message):
    with pytest.raises(ValueError, match=message):
        NodePolicy.from_node_config(config)


def test_a_node_without_policy_fields_has_the_deployed_defaults():
    policy = NodePolicy.from_node_config({})
    assert policy.min_rows_per_vector == 2
    assert policy.refuse_raw_rows and not policy.strict_rows
    assert policy.min_sum_participants == 3
    assert NodePolicy.from_node_config({"refuse-raw-rows": "strict"}).strict_rows
    assert NodePolicy.from_node_config({"min-rows-per-vector": 0}).min_rows_per_vector is None


def test_a_secure_sums_plaintext_passes_the_policy_too():
    # Six clusters on six-row nodes from a given start: the only release is the
    # secure sum of per-cluster sums, whose total would hold rows.
    X, clients = _clients()
    start = dict(init=X[:6], n_init=1, random_state=0, coordinator="sees-totals")
    with (
        deployed(allow_coordinator_centers="FederatedKMeans"),
        pytest.raises(PermissionError, match="fedkmeans_lloyd_statistics"),
    ):
        FederatedKMeans(6, **start).fit(clients)


def test_a_default_node_refuses_dc_unless_its_operator_allows_it_by_name():
    # DC's intermediate representations are every row through the party's map.
    from skfedclust import DCClustering

    X, clients = _clients(n_per_client=40)
    with deployed(), pytest.raises(PermissionError, match="row-release") as refusal:
        DCClustering(3, random_state=0).fit(clients)
    assert 'set allow-row-release = "DCClustering" in the node config' in str(refusal.value)
    with deployed(allow_row_release=("DCClustering",)):
        assert DCClustering(3, random_state=0).fit(clients).labels_.shape == (len(X),)


def test_a_deployed_node_refuses_an_invertible_dc_map():
    from skfedclust import DCClustering

    X, clients = _clients(n_per_client=40)
    dc = {"allow_row_release": ("DCClustering",)}
    with deployed(**dc), pytest.raises(PermissionError, match="dc-full-rank-maps"):
        DCClustering(3, n_components_intermediate=None, random_state=0).fit(clients)
    with deployed(**dc), pytest.raises(PermissionError, match="dc-full-rank-maps"):
        DCClustering(3, n_components_intermediate=3, random_state=0).fit(clients)
    with deployed(**dc):  # the default keeps one dimension less per party
        DCClustering(3, random_state=0).fit(clients)
    with deployed(dc_full_rank_maps=True, **dc):
        DCClustering(3, n_components_intermediate=None, random_state=0).fit(clients)


def test_integer_vectors_of_the_nodes_width_are_values_too():
    # A summary whose vectors are integers (rows of integer data, rounded) is
    # counted and searched for rows as floats are; the words of a masked sum are not.
    from skfedclust.federation import Reply
    from skfedclust.node import NodePolicy, NodeRefusal, masked_sum, summary

    @summary
    def rows_as_integers(data, inbox, state, party):
        return Reply(send=np.rint(data[:2]).astype(np.int64))

    @masked_sum
    def masked_words(data, inbox, state, party):
        return Reply(send=np.rint(data[:2]).astype(np.uint64))

    data = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 10.0], [2.0, 9.0, 1.0]])
    data.flags.writeable = False
    policy = NodePolicy(privacy_ledger="none")
    sent = np.rint(data[:2]).astype(np.int64)
    with pytest.raises(NodeRefusal, match="raw-row"):
        policy.check_outgoing(data, sent, {}, rows_as_integers)
    policy.check_outgoing(data, np.rint(data[:2]).astype(np.uint64), {}, masked_words)
