"""Every method of the example app, fitted through Flower's wire, is the in-process fit.

A deployed node receives each message and its Context as Flower's protocol
buffers (the SuperNode hands them to the ``flwr-clientapp`` process, which
hands them to the node's step worker), and its reply goes back the same way.
:class:`WireGrid` runs the nodes' ClientApp in this process but passes every
message, every Context and every reply through those bytes, so a fit here
takes the path of a deployed one without its processes. The nodes' private
randomness is the only thing a deployment does not share with an in-process
fit: each node draws its own from the operating system. Here every node's
``private-seed`` equals the in-process fit's private entropy, so the two must
agree exactly; what a node's own draw changes is tested apart, method by
method, with what the Flower guide says of it.
"""

import json
import sys

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("cryptography")

from flwr.common.serde import (  # noqa: E402
    context_from_proto,
    context_to_proto,
    message_from_proto,
    message_to_proto,
)
from flwr.proto.message_pb2 import Context as ProtoContext  # noqa: E402
from flwr.proto.message_pb2 import Message as ProtoMessage  # noqa: E402
from test_flower import (  # noqa: E402
    ALLOWED,
    DEPLOYMENT_PARAMS,
    EXAMPLE_APP,
    Clients,
    LocalGrid,
    Memory,
    _assert_same_communication,
    _demo_blocks,
    _private_runtime,
)

from skfedclust import FederatedFuzzyCMeans, FederatedKMeans  # noqa: E402
from skfedclust.federation import use_runtime  # noqa: E402
from skfedclust.flower import fit_on_flower, make_client_app  # noqa: E402

#: The private seed of every node, and the private entropy of the in-process fit.
PRIVATE_SEED = 5
N_ORGANISATIONS = 3


def _through_the_wire(message):
    """``message`` as the receiving process reads it: serialised, then parsed."""
    raw = message_to_proto(message).SerializeToString()
    return message_from_proto(ProtoMessage.FromString(raw))


def _context_through_the_wire(context):
    raw = context_to_proto(context).SerializeToString()
    return context_from_proto(ProtoContext.FromString(raw))


class OverTheWire:
    """A ClientApp whose message, Context and reply cross as Flower's bytes, as deployed.

    The node's state comes back in the Context the app updated, as the step
    worker hands it back to the ``flwr-clientapp`` process, and that process to
    the SuperNode.
    """

    def __init__(self, app):
        self.app = app

    def __call__(self, message, context):
        received = _context_through_the_wire(context)
        reply = self.app(_through_the_wire(message), received)
        context.state = _context_through_the_wire(received).state
        return _through_the_wire(reply)


def _estimators():
    """``{method: estimator}`` of the example app, with the deployment test's parameters."""
    sys.path.insert(0, str(EXAMPLE_APP))
    try:
        from skfedclust_app.server_app import make_estimators
    finally:
        sys.path.remove(str(EXAMPLE_APP))
    config = {
        "method": "all",
        "n-clusters": 3,
        "random-state": 0,
        "params": json.dumps(DEPLOYMENT_PARAMS),
    }
    return dict(make_estimators(config))


METHODS = list(_estimators())


def _fit_over_the_wire(estimator, blocks, n_nodes, private_seed=PRIVATE_SEED):
    """Fit ``estimator`` on ``n_nodes`` nodes (``blocks``, then nodes without data).

    Returns the fitted estimator and the labels the data nodes wrote, in order.
    """
    memory = Memory()
    clients = Clients(blocks + [None] * (n_nodes - len(blocks)))
    app = make_client_app(clients, save_output=memory, allowed_modules=ALLOWED)
    # Every node allows DC's rows through its private map, as prepare_data's nodes do.
    configs = [
        {"partition-id": i, "private-seed": private_seed, "allow-row-release": "DCClustering"}
        for i in range(n_nodes)
    ]
    grid = LocalGrid(OverTheWire(app), configs)
    fit_on_flower(estimator, grid, n_nodes=n_nodes, timeout=60, allowed_modules=ALLOWED)
    labels = np.concatenate([memory.written[("labels", i)] for i in range(len(blocks))])
    return estimator, labels


def _n_nodes(estimator):
    """OmniFC's parties beyond the organisations hold shares and no rows."""
    return getattr(estimator, "n_parties", None) or N_ORGANISATIONS


@pytest.mark.parametrize("method", METHODS)
def test_a_fit_through_flowers_wire_is_the_in_process_fit(method):
    blocks = _demo_blocks(N_ORGANISATIONS)
    with use_runtime(_private_runtime(PRIVATE_SEED)):
        reference = _estimators()[method].fit(blocks)
    estimator, labels = _fit_over_the_wire(_estimators()[method], blocks, _n_nodes(reference))
    np.testing.assert_array_equal(labels, reference.labels_)
    _assert_same_communication(estimator.communication_, reference.communication_)
    for attribute in ("cluster_centers_", "coef_", "n_iter_", "inertia_"):
        if hasattr(reference, attribute):
            np.testing.assert_array_equal(
                getattr(estimator, attribute), getattr(reference, attribute), err_msg=attribute
            )


#: The methods whose fit uses none of the nodes' private draws, or only draws
#: that cancel (masks, secret-sharing noise): their fit on nodes that draw
#: their own is the in-process fit, bit for bit.
THE_SAME_WHATEVER_THE_NODES_DRAW = [
    m for m in METHODS if m not in ("dc", "fedkmeans", "fedkmeans-blind", "ffcm")
]
#: Private seeds of the nodes other than the in-process fit's private entropy:
#: nodes that draw their own, as deployed nodes do from the operating system.
OTHER_DRAWS = (7, 8)


def _rows_in_order(centers):
    return centers[np.lexsort(centers.T[::-1])]


@pytest.mark.parametrize("method", THE_SAME_WHATEVER_THE_NODES_DRAW)
def test_a_fit_on_nodes_drawing_their_own_randomness_is_the_in_process_fit(method):
    blocks = _demo_blocks(N_ORGANISATIONS)
    reference = _estimators()[method].fit(blocks)
    for seed in OTHER_DRAWS:
        estimator, labels = _fit_over_the_wire(
            _estimators()[method], blocks, _n_nodes(reference), private_seed=seed
        )
        np.testing.assert_array_equal(labels, reference.labels_)
        _assert_same_communication(estimator.communication_, reference.communication_)
        for attribute in ("cluster_centers_", "coef_"):
            if hasattr(reference, attribute):
                np.testing.assert_array_equal(
                    getattr(estimator, attribute), getattr(reference, attribute)
                )


def test_dcs_anchors_are_the_coordinators_draw_so_its_fit_differs_near_the_boundaries():
    """The Flower guide: the coordinating node draws the anchors, which define the
    space of the collaborative representation and its centroids; rows near a
    boundary between clusters may change cluster with them."""
    from sklearn.metrics import adjusted_rand_score

    blocks = _demo_blocks(N_ORGANISATIONS)
    reference = _estimators()["dc"].fit(blocks)
    changed_rows = []
    for seed in OTHER_DRAWS:
        estimator, labels = _fit_over_the_wire(_estimators()["dc"], blocks, N_ORGANISATIONS, seed)
        _assert_same_communication(estimator.communication_, reference.communication_)
        assert not np.allclose(estimator.cluster_centers_, reference.cluster_centers_)
        assert not np.allclose(
            estimator.collaborative_representation_, reference.collaborative_representation_
        )
        assert adjusted_rand_score(labels, reference.labels_) > 0.99
        changed_rows.append(int((labels != reference.labels_).sum()))
    # One draw moves one row of 600 to another cluster (ARI 0.995); the other none.
    assert changed_rows == [1, 0]


@pytest.mark.parametrize("method", ["fedkmeans", "fedkmeans-blind", "ffcm"])
def test_a_blind_fit_starts_from_the_nodes_nonces_so_its_numbers_may_differ(method):
    """The Flower guide: the blind start is seeded by the nodes' nonces; another
    draw starts elsewhere, here the same clustering under other cluster numbers.
    The defaults of FederatedKMeans and FederatedFuzzyCMeans run blind on these
    five nodes."""
    blocks = _demo_blocks(N_ORGANISATIONS)
    reference = _estimators()[method].fit(blocks)
    assert reference.coordinator_ == "blind"
    renumbered = []
    for seed in OTHER_DRAWS:
        estimator, labels = _fit_over_the_wire(_estimators()[method], blocks, N_ORGANISATIONS, seed)
        _assert_same_communication(estimator.communication_, reference.communication_)
        np.testing.assert_array_equal(
            _rows_in_order(estimator.cluster_centers_), _rows_in_order(reference.cluster_centers_)
        )
        renumbered.append(not np.array_equal(labels, reference.labels_))
        # The same partition: each cluster of the reference is one cluster here.
        pairs = set(zip(reference.labels_.tolist(), labels.tolist()))
        assert len(pairs) == len(set(reference.labels_))
    assert renumbered == [False, True]


@pytest.mark.parametrize(
    "estimator",
    [
        lambda: FederatedKMeans(n_clusters=3, coordinator="verified", random_state=0),
        lambda: FederatedFuzzyCMeans(
            n_clusters=3, n_rounds=3, coordinator="verified", random_state=0
        ),
    ],
    ids=["kmeans", "fuzzy"],
)
def test_a_verified_fit_through_flowers_wire_is_the_in_process_fit(estimator):
    """The mode above 50 clients, on the demo's five nodes: every message of it
    (the announcement, the words of agreement, the codes, the limbs) crosses
    Flower's wire unchanged."""
    blocks = _demo_blocks(N_ORGANISATIONS)
    with use_runtime(_private_runtime(PRIVATE_SEED)):
        reference = estimator().fit(blocks)
    assert reference.coordinator_ == "verified"
    fitted, labels = _fit_over_the_wire(estimator(), blocks, N_ORGANISATIONS)
    np.testing.assert_array_equal(labels, reference.labels_)
    np.testing.assert_array_equal(fitted.cluster_centers_, reference.cluster_centers_)
    _assert_same_communication(fitted.communication_, reference.communication_)
