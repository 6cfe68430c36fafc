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
    with deployed(allow_clear_sums=True):
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
    with deployed(allow_clear_sums=True):
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
    # FFCM's k-means++ seeding sends rows of the seed client, as in its paper.
    with deployed():
        FederatedFuzzyCMeans(3, random_state=0).fit(clients)
    with deployed(refuse_raw_rows="strict"), pytest.raises(PermissionError, match="by design"):
        FederatedFuzzyCMeans(3, random_state=0).fit(clients)


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
    with deployed(), pytest.raises(PermissionError, match="fedkmeans_lloyd_statistics"):
        FederatedKMeans(6, init=X[:6], n_init=1, random_state=0).fit(clients)


def test_a_deployed_node_refuses_an_invertible_dc_map():
    from skfedclust import DCClustering

    X, clients = _clients(n_per_client=40)
    with deployed(), pytest.raises(PermissionError, match="dc-full-rank-maps"):
        DCClustering(3, n_components_intermediate=None, random_state=0).fit(clients)
    with deployed(), pytest.raises(PermissionError, match="dc-full-rank-maps"):
        DCClustering(3, n_components_intermediate=3, random_state=0).fit(clients)
    with deployed():  # the default keeps one dimension less per party
        DCClustering(3, random_state=0).fit(clients)
    with deployed(dc_full_rank_maps=True):
        DCClustering(3, n_components_intermediate=None, random_state=0).fit(clients)
