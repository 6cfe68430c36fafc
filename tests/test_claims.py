"""The Security page's per-method claims, attacked as a coordinator would.

For every estimator a coordinator fits default nodes (``NodePolicy()``) and
nodes with a DP budget through the package's own runtime, and keeps
everything the nodes send it. From a default node it must get no row of any
node, within the node's own tolerance, and no per-client array of more vectors
than the node's ``min-rows-per-vector`` allows; a method that releases rows by
design only from a node that names it. From a DP node it must get nothing but
what a ``privacy="dp"`` fit charges (every other method is refused, rule
``dp-only`` or ``dp-bounds``). The claims are the table "What each method gives
away" of the Security page; the test reads the estimators from it.
"""

import re
from pathlib import Path

import pytest
from sklearn.datasets import make_blobs

import skfedclust
from skfedclust.federation import InProcessRuntime, use_runtime
from skfedclust.node import NodePolicy, NodeRefusal
from skfedclust.node._policy import DEFAULT_RAW_ROW_TOLERANCE, _arrays, raw_row_matches

SECURITY = Path(__file__).parents[1] / "doc" / "user_guide" / "security.rst"
N_CLIENTS, N_PER, D = 4, 60, 3

#: Each method as its claim is stated: the default fit, and what a default node does.
ESTIMATORS = {
    "KFed": (lambda: skfedclust.KFed(3, random_state=0), "fits"),
    "MAvg": (lambda: skfedclust.MAvg(3, random_state=0), "fits"),
    "FeCA": (lambda: skfedclust.FeCA(3, random_state=0), "fits"),
    "KumarFederatedKMeans": (lambda: skfedclust.KumarFederatedKMeans(3, random_state=0), "fits"),
    "FederatedFuzzyCMeans": (lambda: skfedclust.FederatedFuzzyCMeans(3, random_state=0), "fits"),
    "FederatedKMeans": (lambda: skfedclust.FederatedKMeans(3, random_state=0), "fits"),
    "FederatedKMeans-blind": (
        lambda: skfedclust.FederatedKMeans(3, coordinator="blind", random_state=0),
        "fits",
    ),
    "GOLDClustering": (lambda: skfedclust.GOLDClustering(3, random_state=0), "fits"),
    "DCClustering": (lambda: skfedclust.DCClustering(3, random_state=0), "row-release"),
    "FedSpectralClustering": (
        lambda: skfedclust.FedSpectralClustering(3, random_state=0),
        "fits",
    ),
    "OmniFCClustering": (
        # Three share-holding parties beside the four clients: LCC's decoding needs seven.
        lambda: skfedclust.OmniFCClustering(3, n_parties=7, random_state=0),
        "fits",
    ),
}


def _clients():
    X, _ = make_blobs(N_CLIENTS * N_PER, centers=3, n_features=D, random_state=0)
    return [X[c::N_CLIENTS] for c in range(N_CLIENTS)]


class Coordinator(InProcessRuntime):
    """The honest protocol's runtime, keeping every payload the nodes send the server."""

    policy_for_test = None
    built = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, policy=Coordinator.policy_for_test, **kwargs)
        Coordinator.built.append(self)
        self.payloads = []

    def run(self, step, **kwargs):
        received = super().run(step, **kwargs)
        self.payloads += [(client, received[client]) for client in received]
        return received


def _fit(make, policy):
    Coordinator.policy_for_test, Coordinator.built = policy, []
    clients = _clients()
    with use_runtime(Coordinator):
        make().fit(clients)
    return clients, Coordinator.built


def test_the_security_page_states_a_claim_for_every_estimator():
    table = SECURITY.read_text().partition("What each method gives away")[2]
    table = table.partition("\nThe secure sum against")[0]
    named = set(re.findall(r":class:`~skfedclust\.(\w+)`", table))
    estimators = {
        n
        for n in skfedclust.__all__
        if n[0].isupper()
        and "Clust" in n
        or n
        in {
            "KFed",
            "MAvg",
            "FeCA",
            "FederatedKMeans",
            "FederatedFuzzyCMeans",
            "KumarFederatedKMeans",
        }
    }
    assert estimators - {"BaseFederatedClustering"} <= named
    # Every row names the tests that attack its claim, and they exist.
    for path in set(re.findall(r"``(tests/test_\w+\.py)``", table)):
        assert (SECURITY.parents[2] / path).exists(), path


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_a_default_node_gives_the_coordinator_no_row_and_no_thin_summary(name):
    make, expected = ESTIMATORS[name]
    policy = NodePolicy(privacy_ledger="none")
    if expected == "row-release":
        with pytest.raises(NodeRefusal, match="row-release.*allow-row-release"):
            _fit(make, policy)
        # Named by the operator, the method runs (its release is the method).
        _fit(make, NodePolicy(privacy_ledger="none", allow_row_release=[name]))
        return
    clients, runtimes = _fit(make, policy)
    assert runtimes
    seen = 0
    for runtime in runtimes:
        for sender, payload in runtime.payloads:
            for array in _arrays(payload):
                if array.dtype.kind != "f" or array.ndim == 0 or array.shape[-1] != D:
                    continue
                vectors = array.reshape(-1, D)
                seen += len(vectors)
                for rows in clients:
                    hit = raw_row_matches(rows, vectors, DEFAULT_RAW_ROW_TOLERANCE)
                    assert hit is None, (name, sender, hit)
                if sender < N_CLIENTS and array.ndim == 2:
                    # A per-client array: its vectors summarise enough of the node's rows.
                    assert len(vectors) * policy.min_rows_per_vector <= N_PER, (name, sender)
    assert seen or name in {"FedSpectralClustering", "OmniFCClustering"}


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_a_dp_node_refuses_every_method_that_sends_exact_values(name):
    make, _ = ESTIMATORS[name]
    method = name.partition("-")[0]
    policy = NodePolicy(privacy_ledger="none", dp_epsilon=1.0, allow_row_release=[method])
    with pytest.raises(NodeRefusal) as refusal:
        _fit(make, policy)
    assert refusal.value.rule in {"dp-only", "dp-bounds"}, refusal.value


def test_a_dp_node_answers_a_private_fit_within_its_budget():
    policy = NodePolicy(privacy_ledger="none", dp_epsilon=2.0)
    make = lambda: skfedclust.FederatedKMeans(  # noqa: E731
        3,
        init="sphere-packing",
        privacy="dp",
        epsilon=1.0,
        bounds=(-15.0, 15.0),
        random_state=0,
    )
    clients, runtimes = _fit(make, policy)
    # Whatever reached the coordinator was charged: no array the node sent holds a row.
    for runtime in runtimes:
        for _, payload in runtime.payloads:
            for array in _arrays(payload):
                if array.dtype.kind == "f" and array.ndim == 2 and array.shape[1] == D:
                    for rows in clients:
                        assert raw_row_matches(rows, array, 1e-4) is None
