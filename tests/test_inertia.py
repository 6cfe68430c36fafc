"""inertia_ of the centroid estimators: a secure sum at the end of the fit, and score."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_blobs

from skfedclust import (
    FeCA,
    FederatedFuzzyCMeans,
    GOLDClustering,
    KFed,
    KumarFederatedKMeans,
    MAvg,
)
from skfedclust.clusterers import nearest_center
from skfedclust.federation import SERVER, Federation, InProcessRuntime
from skfedclust.methods._centroid_steps import (
    secure_inertia,
    secure_inertia_communication,
)
from skfedclust.secure import fixed_point_shift
from skfedclust.utils.protocol_checks import RecordingRuntime, recording_runtime

# inertia_ is computed only when asked (its secure sums are evaluation, not the method).
ESTIMATORS = [
    KFed(3, random_state=0, compute_inertia=True),
    FeCA(3, random_state=0, compute_inertia=True),
    MAvg(3, random_state=0, compute_inertia=True),
    # The coordinator's rounds (the blind fit's nodes release the inertia with the
    # result: tests/test_ffcm_blind.py).
    FederatedFuzzyCMeans(
        3, n_rounds=3, random_state=0, compute_inertia=True, coordinator="sees-totals"
    ),
    KumarFederatedKMeans(3, n_rounds=2, random_state=0, compute_inertia=True),
    GOLDClustering(3, remc_n_init=5, random_state=0, compute_inertia=True),
]


def _reference_inertia(X, centers):
    return float((((X[:, None, :] - centers[None, :, :]) ** 2).sum(-1)).min(axis=1).sum())


def _runtime(X, n_clients, entropy=1):
    rows = np.array_split(np.arange(len(X)), n_clients)
    fed = Federation(X, rows)
    fed.spawn_seeds(np.random.RandomState(0))
    return rows, InProcessRuntime(fed, private_entropy=[entropy])


@pytest.mark.parametrize("n_clients", [3, 5, 6, 9, 17])
def test_secure_inertia_is_the_pooled_inertia_at_the_documented_cost(n_clients):
    X, _ = make_blobs(120, centers=3, random_state=0)
    X = X + 1.7e9
    centers = X[:3] + 0.25
    rows, runtime = _runtime(X, n_clients)
    inertia = secure_inertia(runtime, np.random.RandomState(0), centers)
    assert inertia == pytest.approx(_reference_inertia(X, centers), rel=1e-12)
    report = runtime.ledger.report()
    expected = secure_inertia_communication(n_clients)
    for key, value in expected.items():
        extra = n_clients * centers.nbytes if key == "bytes_down" else 0
        assert report[key] == value + extra, key
    # The labels are each client's output, handed back in input order.
    np.testing.assert_array_equal(runtime.hand_back("labels"), nearest_center(X, centers))


def test_the_server_gets_masked_vectors_not_a_clients_inertia():
    X, _ = make_blobs(90, centers=3, random_state=1)
    centers = X[:3]
    rows = np.array_split(np.arange(len(X)), 3)
    fed = Federation(X, rows)
    fed.spawn_seeds(np.random.RandomState(0))
    runtime = RecordingRuntime(fed, private_entropy=[1])
    total = secure_inertia(runtime, np.random.RandomState(0), centers)
    shares = [_reference_inertia(X[r], centers) for r in rows]
    assert total == pytest.approx(sum(shares), rel=1e-12)
    # What reached the server steps: two unmaskings, of masked vectors only.
    sums = [received for name, received, _ in runtime.server_inputs if name == "unmask_sum"]
    assert len(sums) == 2 and len(runtime.server_inputs) == 2
    uploads, _ = sums[1]
    bound = 2.0 ** np.ceil(np.log2(max(shares)))
    shift = fixed_point_shift(bound, 3)
    for c, share in enumerate(shares):
        masked = np.asarray(uploads[c][0], dtype=np.uint64)
        plain = np.uint64(np.rint(np.ldexp(share, shift)))
        assert masked[0] != plain and masked[1] != 0


def test_an_overflowing_distance_gives_inf_not_an_error():
    X = np.array([[0.0], [1.0], [1e200], [2.0], [3.0], [4.0]])
    rows, runtime = _runtime(X, 3)
    assert secure_inertia(runtime, np.random.RandomState(0), np.array([[0.0], [1.0]])) == np.inf


@pytest.mark.parametrize("n_clients", [1, 2])
def test_fewer_than_three_clients_get_their_labels_and_no_inertia(n_clients):
    X, _ = make_blobs(60, centers=3, random_state=0)
    rows, runtime = _runtime(X, n_clients)
    with pytest.warns(UserWarning, match="at least 3 clients"):
        inertia = secure_inertia(runtime, np.random.RandomState(0), X[:3])
    assert np.isnan(inertia)
    # No client sent anything to the server; each labelled its own rows.
    assert not [m for m in runtime.ledger.messages if m.receiver == SERVER]
    labels = runtime.hand_back("labels")
    assert len(labels) == len(X)


def test_zero_inertia():
    X = np.repeat(np.eye(3), 4, axis=0)
    rows, runtime = _runtime(X, 3)
    assert secure_inertia(runtime, np.random.RandomState(0), np.eye(3)) == 0.0


@pytest.mark.parametrize("est", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_inertia_and_score_of_every_centroid_estimator(est):
    X, _ = make_blobs(240, centers=3, cluster_std=0.7, random_state=2)
    clients = [X[:70], X[70:160], X[160:]]
    with recording_runtime() as runtimes:
        est.fit(clients)
    assert est.inertia_ == pytest.approx(_reference_inertia(X, est.cluster_centers_), rel=1e-12)
    assert est.score(X) == pytest.approx(-est.inertia_, rel=1e-12)
    assert est.score(X[:10]) == pytest.approx(-_reference_inertia(X[:10], est.cluster_centers_))
    # The server learnt the inertia from the two secure sums only.
    steps = [name for name, _, _ in runtimes[-1].server_inputs]
    assert steps[-2:] == ["unmask_sum", "unmask_sum"]
    assert est.communication_["evaluation_rounds"] >= 1
    # With the default, the same fit sends nothing after the method's own messages.
    default = clone(est).set_params(compute_inertia=False)
    with recording_runtime() as runtimes:
        default.fit(clients)
    assert not hasattr(default, "inertia_")
    np.testing.assert_array_equal(default.labels_, est.labels_)
    np.testing.assert_array_equal(default.cluster_centers_, est.cluster_centers_)
    unmasked = [name for name, _, _ in runtimes[-1].server_inputs].count("unmask_sum")
    assert unmasked == steps.count("unmask_sum") - 2
    assert default.communication_["evaluation_rounds"] == 0
    for key in ("bytes_up", "bytes_peer"):
        assert default.communication_[key] < est.communication_[key]
