"""Tests of KumarFederatedKMeans, the reconstructed Kumar et al. (2020) baseline."""

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from skfedclust import KumarFederatedKMeans
from skfedclust.methods._centroid_steps import secure_inertia_communication as inertia_cost
from skfedclust.methods._kumar import kumar_server_recluster
from skfedclust.utils.protocol_checks import check_protocol

#: compute_inertia=False (the default): nothing is exchanged for inertia_ after the fit.
NO_INERTIA = dict.fromkeys(inertia_cost(3), 0)


def test_kumar_rounds_and_messages():
    X, y = make_blobs(300, centers=3, cluster_std=0.5, random_state=0)
    km = KumarFederatedKMeans(3, n_rounds=4, partition=3, random_state=0).fit(X)
    inertia = NO_INERTIA
    assert km.communication_["rounds"] == 4 + inertia["rounds"]
    # Each round: k x d float64 centroids up, k x d down, per client; then
    # the labels and the inertia's secure sums.
    per = km.communication_["per_client"]
    assert per["bytes_up"].tolist() == [4 * 3 * 2 * 8 + inertia["bytes_up"] // 3] * 3
    assert per["bytes_down"].tolist() == [4 * 3 * 2 * 8 + inertia["bytes_down"] // 3] * 3
    assert not hasattr(km, "inertia_")
    assert adjusted_rand_score(y, km.labels_) == 1.0
    assert np.array_equal(km.predict(X), km.labels_)


def test_kumar_invariant_to_n_jobs_and_small_clients():
    X, _ = make_blobs(60, centers=4, random_state=1)
    ids = np.r_[np.zeros(57, int), np.ones(3, int)]  # client 1 holds fewer rows than k
    one = KumarFederatedKMeans(4, n_rounds=3, random_state=0, n_jobs=1).fit(X, client_ids=ids)
    two = KumarFederatedKMeans(4, n_rounds=3, random_state=0, n_jobs=2).fit(X, client_ids=ids)
    assert np.array_equal(one.labels_, two.labels_)


# --------------------------------------------------------------------------- #
# Protocol
# --------------------------------------------------------------------------- #
def _clients():
    X, _ = make_blobs(200, n_features=3, centers=4, random_state=2)
    return [X[:90], X[90:197], X[197:]]  # the last client holds 3 < k rows


@pytest.mark.parametrize("weighted", [False, True])
def test_kumar_protocol_rounds_and_bytes(weighted):
    clients = _clients()
    k, d, T, m = 4, 3, 5, len(clients)
    # Each client sends min(k, n_m) centroids per round (its rows when it holds
    # no more than k).
    sent = sum(min(k, len(c)) for c in clients)
    # T rounds. Up per round: sent x d float64 centroids, plus one int64 count
    # per centroid when weighted. Down per round: k x d global centroids to
    # each client. Then the labels and the inertia's secure sums.
    per_centroid = d * 8 + (8 if weighted else 0)
    inertia = NO_INERTIA
    runtime = check_protocol(
        KumarFederatedKMeans(k, n_rounds=T, weighted=weighted, random_state=0),
        clients,
        rounds=T + inertia["rounds"],
        bytes_up=T * sent * per_centroid + inertia["bytes_up"],
        bytes_down=T * m * k * d * 8 + inertia["bytes_down"],
        bytes_peer=inertia["bytes_peer"],
    )
    assert runtime.ledger.report()["setup_rounds"] == inertia["setup_rounds"]
    # The counts reach the server only when the clients sent them.
    kumar = [i for i in runtime.server_inputs if i[0] == "kumar_server_step"]
    assert len(kumar) == T
    for _step, (uploads,), public in kumar:
        for payload in uploads.values():
            assert isinstance(payload, tuple) == weighted
        assert public["weighted"] == weighted
        assert not any(isinstance(v, np.ndarray) for v in public.values())


def test_server_needs_counts_to_weight():
    with pytest.raises(ValueError, match="counts"):
        kumar_server_recluster(
            [np.zeros((2, 2)), np.ones((2, 2))], None, n_clusters=2, weighted=True, n_init=1, seed=0
        )


def test_unweighted_server_spends_clusters_on_singleton_centroids():
    # The mechanism documented in the Notes: three clients each found two
    # dense clusters (100 rows each) and one outlying row.
    dense = np.array([[0.0, 0.0], [40.0, 0.0]])
    outliers = np.array([[100.0, 100.0], [-100.0, 100.0], [100.0, -100.0]])
    centroids = [np.vstack([dense + 0.1 * i, outliers[i]]) for i in range(3)]
    counts = [np.array([100, 100, 1])] * 3
    kw = dict(n_clusters=3, n_init=10, seed=0)
    unweighted = kumar_server_recluster(centroids, None, weighted=False, **kw)
    weighted = kumar_server_recluster(centroids, counts, weighted=True, **kw)

    def n_dense_found(centers):
        return len({int(np.argmin(((centers - c) ** 2).sum(axis=1))) for c in dense})

    # Unweighted, the two dense clusters share one global centroid.
    assert n_dense_found(unweighted) == 1
    assert n_dense_found(weighted) == 2


# --------------------------------------------------------------------------- #
# Robustness
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("weighted", [False, True])
def test_kumar_large_offset_changes_no_label(weighted):
    clients = _clients()
    kw = dict(n_rounds=3, weighted=weighted, random_state=0)
    ref = KumarFederatedKMeans(4, **kw).fit(clients)
    shifted = KumarFederatedKMeans(4, **kw).fit([c + 1.7e9 for c in clients])
    assert adjusted_rand_score(ref.labels_, shifted.labels_) == 1.0
    np.testing.assert_array_equal(shifted.predict(np.vstack(clients) + 1.7e9), shifted.labels_)
