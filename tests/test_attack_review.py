"""A malicious coordinator against deployed nodes (default ``NodePolicy()``): attacks refused.

Each test drives package client steps with parameters a hostile server chooses and
checks that a node with the default policy refuses, naming the rule.
"""

import numpy as np
import pytest

from skfedclust.federation import Federation, InProcessRuntime
from skfedclust.federation._policy import NodePolicy
from skfedclust.federation._runtime import client_step_name, resolve_client_step
from skfedclust.methods._fedkmeans import (
    TAG_CENTERS,
    TAG_RELOCATE,
    fedkmeans_far_rows,
    fedkmeans_largest_distances,
    fedkmeans_lloyd_statistics,
    fedkmeans_nearest_distances,
)
from skfedclust.methods._fedsc import fedsc_rows
from skfedclust.metrics import cluster_moments_bound_step


def _deployed(n_per_client=20, n_clients=4, d=3, seed=0):
    X = np.random.default_rng(seed).normal(size=(n_per_client * n_clients, d))
    rows = [np.arange(n_per_client * c, n_per_client * (c + 1)) for c in range(n_clients)]
    federation = Federation(X, rows)
    federation.spawn_seeds(np.random.RandomState(0))
    return X, rows, InProcessRuntime(federation, policy=NodePolicy())


def _no_message(runtime, tag):
    return not [m for m in runtime.ledger.messages if m.tag == tag]


@pytest.mark.parametrize(
    ("step", "public"),
    [
        (cluster_moments_bound_step, {"centers_tag": "c", "labels_key": None}),
        (fedkmeans_nearest_distances, {"centers": np.zeros((1, 3))}),
        (fedsc_rows, {}),
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


@pytest.mark.parametrize("method", ["KFed", "MAvg", "FeCA", "KumarFederatedKMeans"])
@pytest.mark.parametrize("step", [fedkmeans_largest_distances, fedkmeans_far_rows])
def test_a_node_agreed_to_another_method_refuses_federated_kmeans_row_level_steps(method, step):
    # A coordinator that announced another method cannot reach FederatedKMeans'
    # empty-cluster steps (which send per-row distances and far-row sums).
    with pytest.raises(PermissionError, match=f"this node agreed to a fit of {method}"):
        NodePolicy().check_step(client_step_name(step), method=method)
