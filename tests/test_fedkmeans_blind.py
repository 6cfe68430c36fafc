"""FederatedKMeans(coordinator="blind"): Lloyd run by the nodes, the coordinator blind.

What is pinned: the result is scikit-learn's KMeans from the same start; every
node releases the same bits; the coordinator receives one status byte per
round and the result, nothing else; and a hostile coordinator (or an
equivocating peer) that drops, alters or re-orders what the nodes exchange,
sends them centers, changes parameters for one node or calls steps out of
order is refused by the nodes, naming the rule.
"""

import functools
import math

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import load_iris, make_blobs

from skfedclust import FederatedKMeans
from skfedclust.federation import SERVER, InProcessRuntime, use_runtime
from skfedclust.methods._fedkmeans_blind import (
    TAG_ROUND,
    TAG_SETUP,
    blind_release_step,
    decode,
    encode,
    fixed_point_scales,
    ring_add,
    ring_neg,
)
from skfedclust.methods._fedkmeans_steps import TAG_CENTERS, fedkmeans_lloyd_statistics
from skfedclust.node import NodePolicy, NodeRefusal


def _blobs(offset=0.0, n=400, d=4, k=4, seed=0):
    X, _ = make_blobs(n, centers=k, n_features=d, cluster_std=1.5, random_state=seed)
    return X + offset


class Recording(InProcessRuntime):
    """The honest runtime, keeping itself and every exchange's replies for the test."""

    built = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        Recording.built.append(self)
        self.received = []

    def run(self, step, **kwargs):
        received = super().run(step, **kwargs)
        self.received.append((kwargs["tag"], received))
        return received


def _fit(X, runtime=Recording, **params):
    Recording.built = []
    params = {"n_clusters": 4, "coordinator": "blind", "partition": 4, "random_state": 0, **params}
    with use_runtime(runtime):
        est = FederatedKMeans(**params).fit(X)
    return est, Recording.built[-1] if Recording.built else None


@pytest.mark.parametrize("offset", [0.0, 1.7e9])
@pytest.mark.parametrize("tol", [1e-4, 0.0])
def test_the_centers_are_kmeans_from_the_same_start(offset, tol):
    X = _blobs(offset)
    init = X[[0, 7, 11, 19]]
    km = KMeans(4, init=init, n_init=1, tol=tol, max_iter=300).fit(X)
    est, _ = _fit(X, init=init, tol=tol)
    scale = np.abs(X).max()
    np.testing.assert_allclose(
        est.cluster_centers_, km.cluster_centers_, rtol=0, atol=1e-12 * scale
    )
    assert est.n_iter_ == km.n_iter_
    np.testing.assert_array_equal(est.labels_, km.labels_)
    assert est.inertia_ == pytest.approx(km.inertia_, rel=1e-9)


def test_max_iter_stops_the_nodes_as_kmeans_stops():
    X = load_iris().data
    init = X[[0, 1, 2]]
    km = KMeans(3, init=init, n_init=1, max_iter=2).fit(X)
    est, _ = _fit(X, n_clusters=3, init=init, max_iter=2, partition=3)
    assert est.n_iter_ == km.n_iter_ == 2
    np.testing.assert_allclose(est.cluster_centers_, km.cluster_centers_, atol=1e-12)
    np.testing.assert_array_equal(est.labels_, km.labels_)


def test_every_node_releases_the_same_bits_and_the_coordinator_gets_nothing_else():
    X = _blobs()
    est, runtime = _fit(X)
    results = dict(runtime.received)["blind result"].list()
    assert len(results) == 4
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert a.tobytes() == b.tobytes()
    to_server = [m for m in runtime.ledger.messages if m.receiver == SERVER]
    by_tag = {}
    for message in to_server:
        by_tag.setdefault(message.tag, []).append(message)
    assert set(by_tag) == {"blind set-up", "blind start", TAG_ROUND, "blind result"}
    # One status byte per node and round before the result.
    for tag in ("blind set-up", "blind start", TAG_ROUND):
        assert all(m.nbytes == 1 for m in by_tag[tag]), tag
    # The result: k centers, k sizes, n_iter and the inertia.
    assert all(m.nbytes == 4 * 4 * 8 + 4 * 8 + 8 + 8 for m in by_tag["blind result"])
    assert est.communication_["bytes_down"] == 0


def test_the_start_is_the_nodes_and_as_good_as_the_servers():
    X = _blobs(n=600, k=5, seed=3)
    blind, _ = _fit(X, n_clusters=5, n_init=3, partition=5)
    seen = FederatedKMeans(5, n_init=3, partition=5, random_state=0).fit(X)
    assert blind.inertia_ <= seen.inertia_ * 1.05
    # The same random_state gives the same fit (the simulated nodes' entropy).
    again, _ = _fit(X, n_clusters=5, n_init=3, partition=5)
    np.testing.assert_array_equal(again.cluster_centers_, blind.cluster_centers_)


def test_the_result_does_not_depend_on_n_jobs():
    X = _blobs()
    one, _ = _fit(X, n_jobs=None)
    two, _ = _fit(X, n_jobs=2)
    np.testing.assert_array_equal(one.cluster_centers_, two.cluster_centers_)
    np.testing.assert_array_equal(one.labels_, two.labels_)


def test_the_ring_holds_every_total_exactly():
    rng = np.random.default_rng(0)
    exponent, n_rows, d, k = 3, 1000, 4, 3
    scales = fixed_point_scales(exponent, n_rows, d, k, 1, True)
    values = [rng.uniform(-1, 1, len(scales)) * np.ldexp(1.0, exponent) for _ in range(5)]
    # Counts, clients and the changed rows are whole numbers at scale 0.
    for v in values:
        v[k * d : k * d + 2 * k + 1] = np.rint(np.abs(v[k * d : k * d + 2 * k + 1]) * 10)
    total = encode(values[0], scales)
    for v in values[1:]:
        total = ring_add(total, encode(v, scales))
    # The exact sum of the floats, within the one rounding of its decoding (a
    # float sum rounds at every addition).
    exact = np.array([math.fsum(column) for column in zip(*values)])
    np.testing.assert_allclose(decode(total, scales), exact, rtol=2**-52, atol=0)
    # Negative totals wrap around the ring and come back.
    np.testing.assert_array_equal(decode(ring_neg(total), scales), -decode(total, scales))


# --------------------------------------------------------------------------- #
# A hostile coordinator
# --------------------------------------------------------------------------- #
class SendsCenters(Recording):
    """Broadcasts centers of its choosing before every blind round."""

    def run(self, step, **kwargs):
        if kwargs["tag"] in (TAG_ROUND, "blind result"):
            self.broadcast(np.full((4, 4), 1e6), tag=TAG_CENTERS)
        return super().run(step, **kwargs)


def test_centers_the_coordinator_sends_change_nothing():
    X = _blobs()
    honest, _ = _fit(X)
    steered, _ = _fit(X, runtime=SendsCenters)
    np.testing.assert_array_equal(honest.cluster_centers_, steered.cluster_centers_)
    np.testing.assert_array_equal(honest.labels_, steered.labels_)


class AsksForTotals(Recording):
    """Half-way, asks the nodes for the Lloyd statistics of its own centers."""

    def run(self, step, **kwargs):
        if kwargs["tag"] == TAG_ROUND:
            self.broadcast(np.zeros((4, 4)), tag=TAG_CENTERS)
            super().run(fedkmeans_lloyd_statistics, tag="lloyd")
        return super().run(step, **kwargs)


def test_a_node_in_a_blind_fit_runs_no_step_that_hands_over_totals():
    with pytest.raises(NodeRefusal, match="agreed-method.*committed the fit"):
        _fit(_blobs(), runtime=AsksForTotals)


class Drops(Recording):
    """Loses participant 2's message to participant 0 in the second blind round."""

    rounds = 0

    def run(self, step, **kwargs):
        received = super().run(step, **kwargs)
        if kwargs["tag"] == TAG_ROUND:
            Drops.rounds += 1
            if Drops.rounds == 2:
                del self._inboxes[0][TAG_ROUND][2]
        return received


def test_a_missing_upload_ends_the_fit_naming_the_node():
    Drops.rounds = 0
    with pytest.raises(NodeRefusal, match=r"consistent-view.*participant\(s\) \[2\]"):
        _fit(_blobs(), runtime=Drops, init=_blobs()[[0, 7, 11, 19]])


class Equivocates(Recording):
    """Participant 1 sends participant 0 another upload than the others get."""

    def run(self, step, **kwargs):
        received = super().run(step, **kwargs)
        if kwargs["tag"] == TAG_ROUND:
            message = dict(self._inboxes[0][TAG_ROUND][1])
            words = np.array(message["upload"])
            words[0, 1] += np.uint64(1)
            message["upload"] = words
            self._inboxes[0][TAG_ROUND][1] = message
        return received


def test_an_upload_that_differs_between_receivers_is_caught():
    with pytest.raises(NodeRefusal, match="consistent-view.*another transcript"):
        _fit(_blobs(), runtime=Equivocates)


class OtherParameters(Recording):
    """Gives node 0 other parameters than the rest at the set-up."""

    def run(self, step, **kwargs):
        if kwargs["tag"] == TAG_SETUP:
            kwargs["per_client"] = {0: {"max_iter": 5}}
        return super().run(step, **kwargs)


def test_parameters_that_differ_between_nodes_are_refused():
    with pytest.raises(NodeRefusal, match="consistent-view.*other parameters"):
        _fit(_blobs(), runtime=OtherParameters)


class ReleasesEarly(Recording):
    """Asks for the result after the first blind round."""

    def run(self, step, **kwargs):
        received = super().run(step, **kwargs)
        if kwargs["tag"] == TAG_ROUND:
            super().run(blind_release_step, tag="early result")
        return received


def test_a_result_asked_before_the_final_round_is_refused():
    with pytest.raises(NodeRefusal, match="stage.*final statistics"):
        _fit(_blobs(), runtime=ReleasesEarly)


class Deployed(Recording):
    """Nodes with a deployed node's default policy (no ledger: each test is one fit)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, policy=NodePolicy(privacy_ledger="none"), **kwargs)


class AllowsArrayStarts(Recording):
    """Deployed nodes whose operator lets the coordinator choose a blind fit's start."""

    def __init__(self, *args, **kwargs):
        policy = NodePolicy(privacy_ledger="none", allow_coordinator_centers="FederatedKMeans")
        super().__init__(*args, policy=policy, **kwargs)


def test_default_nodes_release_only_clusters_of_enough_rows_and_clients():
    X = _blobs()
    est, _ = _fit(X, runtime=Deployed)
    assert est.cluster_centers_.shape == (4, 4)
    # A start that leaves one row alone in a cluster: its center would be that row.
    lonely = np.vstack([X, [[40.0, 40.0, 40.0, 40.0]]])
    init = np.vstack([lonely[[0, 7, 11]], [[40.0, 40.0, 40.0, 40.0]]])
    with pytest.raises(NodeRefusal, match="min-rows-per-vector.*cluster 3"):
        _fit(lonely, runtime=AllowsArrayStarts, init=init)


def test_the_centers_released_are_backed_by_the_iteration_that_made_them():
    # One iteration from a start whose far center catches the one row farthest
    # along a direction: the released center is that row, while the final
    # relabelling gives its cluster a half-space of rows.
    X = np.random.default_rng(0).uniform(-1, 1, size=(120, 3))
    middle, direction = X.mean(axis=0), np.ones(3) / np.sqrt(3)
    along = np.sort((X - middle) @ direction)
    init = np.vstack([middle, middle + (along[-1] + along[-2]) * direction])
    blocks = np.array_split(X, 6)
    one_iteration = dict(n_clusters=2, init=init, max_iter=1, tol=0.0, partition=None)
    with pytest.raises(NodeRefusal, match="min-rows-per-vector.*cluster 1 of the last iteration"):
        _fit(blocks, runtime=AllowsArrayStarts, **one_iteration)
    # Without the rule (a simulation), the released center is that row.
    est, _ = _fit(blocks, **one_iteration)
    assert np.min(np.abs(X - est.cluster_centers_[1]).sum(axis=1)) < 1e-12
    assert np.bincount(est.labels_)[1] > 1


def test_a_default_node_leaves_the_coordinator_no_center_to_choose():
    X = _blobs()
    # An array start is the coordinator's choice.
    with pytest.raises(NodeRefusal, match="coordinator-centers.*array init"):
        _fit(X, runtime=Deployed, init=X[[0, 7, 11, 20]])
    # So are the centers of every iteration where the coordinator runs Lloyd.
    with use_runtime(Deployed), pytest.raises(NodeRefusal, match="coordinator-centers"):
        FederatedKMeans(4, coordinator="sees-totals", partition=4, random_state=0).fit(X)
    # The default runs, with the nodes choosing every center.
    with use_runtime(Deployed):
        est = FederatedKMeans(4, partition=4, random_state=0).fit(X)
    assert est.coordinator_ == "blind" and est.init_centers_ is None


def test_options_the_blind_protocol_does_not_run_are_refused_before_any_exchange():
    X = _blobs()
    for params in (
        {"privacy": "dp"},
        {"client_fraction": 0.5},
        {"secure_aggregation": False},
        {"init": "random"},
        {"empty_clusters": "farthest-row"},
    ):
        with pytest.raises(ValueError, match='coordinator="blind"'):
            FederatedKMeans(4, coordinator="blind", partition=4, **params).fit(X)
    with pytest.raises(ValueError, match="at least 3 clients"):
        FederatedKMeans(4, coordinator="blind", partition=2).fit(X)


def test_a_node_with_fewer_rows_than_the_result_has_centers_still_takes_part():
    # The result is the federation's, not the node's summary: a node of three rows
    # releases four global centers (each backed by enough rows and clients).
    X = _blobs()
    small = [X[:3], X[3:200], X[200:300], X[300:]]
    Recording.built = []
    with use_runtime(Deployed):
        est = FederatedKMeans(4, coordinator="blind", random_state=0).fit(small)
    assert est.cluster_centers_.shape == (4, 4)


def test_a_re_run_over_one_node_fewer_is_refused_across_fits(tmp_path):
    # Two fits whose first totals differ by one node would give that node's
    # statistics to peers colluding with the coordinator: the ledger of each node
    # keys the first totals by their counts (which a nudged start keeps).
    X = _blobs()
    blocks = np.array_split(X, 6)
    init = X[[0, 7, 11, 19]]
    policy = NodePolicy(privacy_ledger=str(tmp_path), allow_coordinator_centers="FederatedKMeans")
    with use_runtime(functools.partial(InProcessRuntime, policy=policy)):
        FederatedKMeans(4, init=init, coordinator="blind").fit(blocks)
        with pytest.raises(PermissionError, match="one-sum-per-input"):
            FederatedKMeans(4, init=init + 1e-6, coordinator="blind").fit(blocks[:5])
        # Three nodes fewer isolate no node: the fit runs.
        FederatedKMeans(4, init=init, coordinator="blind").fit(blocks[:3])
