"""Ledger, client map and input forms of the base estimator."""

import joblib
import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from skfedclust import SERVER, KFed, Ledger, map_clients
from skfedclust._base import input_form
from skfedclust._federation import Federation, payload_nbytes


def test_payload_nbytes_counts_buffers():
    a = np.zeros((3, 4))
    assert payload_nbytes(a) == 96
    assert payload_nbytes((a, np.zeros(2, dtype=np.int32))) == 104
    assert payload_nbytes({"x": a, "k": 3}) == 104
    assert payload_nbytes(None) == 0
    with pytest.raises(TypeError, match="object"):
        payload_nbytes(object())


def test_ledger_report_by_direction_round_and_client():
    ledger = Ledger(3)
    up = np.ones((2, 2))
    assert ledger.upload(0, up, round=0) is up
    ledger.upload(1, np.ones(4), round=0)
    ledger.broadcast(np.ones(1), [0, 1, 2], round=0)
    ledger.upload(2, np.ones(1), round=1)
    ledger.send(np.ones(3), sender=0, receiver=2, round=0)
    rep = ledger.report()
    assert rep["rounds"] == 2
    assert rep["bytes_up"] == 32 + 32 + 8
    assert rep["bytes_down"] == 24
    assert rep["bytes_peer"] == 24
    assert rep["bytes_total"] == 32 + 32 + 8 + 24 + 24
    assert rep["n_messages"] == 7
    np.testing.assert_array_equal(rep["per_client"]["bytes_up"], [32, 32, 8])
    np.testing.assert_array_equal(rep["per_client"]["bytes_down"], [8, 8, 8])
    np.testing.assert_array_equal(rep["per_client"]["bytes_peer_sent"], [24, 0, 0])
    np.testing.assert_array_equal(rep["per_client"]["bytes_peer_received"], [0, 0, 24])


def test_ledger_rejects_unknown_parties():
    ledger = Ledger(2)
    with pytest.raises(ValueError, match="unknown party"):
        ledger.upload(5, np.ones(1))
    with pytest.raises(ValueError, match="itself"):
        ledger.send(np.ones(1), sender=SERVER, receiver=SERVER)


def _client_sum(X, seed, *, offset):
    rng = np.random.RandomState(seed)
    return X.sum() + offset + rng.rand()


def test_map_clients_is_independent_of_n_jobs():
    data = [np.full((3, 2), i, dtype=float) for i in range(5)]
    seeds = np.arange(5)
    one = map_clients(_client_sum, zip(data, seeds), n_jobs=1, offset=1.0)
    two = map_clients(_client_sum, zip(data, seeds), n_jobs=2, offset=1.0)
    assert one == two
    assert one[3] == pytest.approx(18 + 1 + np.random.RandomState(3).rand())


def test_map_clients_runs_on_dask():
    distributed = pytest.importorskip("distributed")
    X, _ = make_blobs(90, centers=3, random_state=0)
    reference = KFed(n_clusters=3, partition=3, random_state=0).fit(X)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2):
        with joblib.parallel_config(backend="dask"):
            est = KFed(n_clusters=3, partition=3, random_state=0, n_jobs=2).fit(X)
    np.testing.assert_array_equal(est.labels_, reference.labels_)


def test_gather_rows_restores_input_order():
    X = np.arange(12, dtype=float).reshape(6, 2)
    fed = Federation(X, [np.array([4, 0, 2]), np.array([5, 1, 3])])
    values = [X[r][:, 0] for r in fed.client_rows]
    np.testing.assert_array_equal(fed.gather_rows(values), X[:, 0])


@pytest.mark.parametrize(
    "X, form",
    [
        (np.zeros((3, 2)), "pooled"),
        ([[0.0, 1.0], [2.0, 3.0]], "pooled"),
        ([np.zeros((3, 2)), np.zeros((2, 2))], "clients"),
        ([[[0.0, 1.0]], [[2.0, 3.0], [4.0, 5.0]]], "clients"),
        ([[np.zeros((3, 1)), np.zeros((3, 2))]], "grid"),
    ],
)
def test_input_form(X, form):
    assert input_form(X) == form


def test_three_input_forms_give_the_same_federation():
    X, _ = make_blobs(90, centers=3, random_state=1)
    ids = np.repeat([0, 1, 2], 30)
    by_list = KFed(n_clusters=3, random_state=0).fit([X[:30], X[30:60], X[60:]])
    by_ids = KFed(n_clusters=3, random_state=0).fit(X, client_ids=ids)
    np.testing.assert_array_equal(by_list.labels_, by_ids.labels_)
    np.testing.assert_array_equal(by_list.cluster_centers_, by_ids.cluster_centers_)
    assert by_ids.n_clients_ == 3


def test_client_ids_in_any_row_order():
    X, _ = make_blobs(90, centers=3, random_state=1)
    ids = np.repeat([0, 1, 2], 30)
    perm = np.random.RandomState(0).permutation(90)
    ref = KFed(n_clusters=3, random_state=0).fit(X, client_ids=ids)
    shuffled = KFed(n_clusters=3, random_state=0).fit(X[perm], client_ids=ids[perm])
    np.testing.assert_array_equal(shuffled.client_sizes_, ref.client_sizes_)
    # Local k-means sees the rows in another order, so cluster numbering may differ.
    assert adjusted_rand_score(shuffled.labels_, ref.labels_[perm]) == 1.0


def test_client_ids_errors():
    X, _ = make_blobs(30, centers=3, random_state=1)
    with pytest.raises(ValueError, match="client_ids has 3 entries"):
        KFed(n_clusters=3).fit(X, client_ids=[0, 1, 2])
    with pytest.raises(ValueError, match="client_ids can only"):
        KFed(n_clusters=3).fit([X[:15], X[15:]], client_ids=np.zeros(30))
    with pytest.raises(ValueError, match="partition"):
        KFed(n_clusters=3, partition=2).fit([X[:15], X[15:]])


def test_client_ids_route_through_pipeline_metadata():
    from sklearn import config_context
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, _ = make_blobs(60, centers=3, random_state=1)
    ids = np.repeat([0, 1, 2], 20)
    with config_context(enable_metadata_routing=True):
        est = KFed(n_clusters=3, random_state=0).set_fit_request(client_ids=True)
        pipe = make_pipeline(StandardScaler().set_fit_request(sample_weight=False), est)
        pipe.fit(X, client_ids=ids)
    assert pipe[-1].n_clients_ == 3


def test_vertical_partition_rejected_by_horizontal_method():
    from skfedclust.partition import VerticalPartition

    X, _ = make_blobs(30, n_features=4, centers=3, random_state=1)
    with pytest.raises(ValueError, match="horizontal"):
        KFed(n_clusters=3, partition=VerticalPartition(2)).fit(X)
    with pytest.raises(ValueError, match="horizontal"):
        KFed(n_clusters=3).fit([[X[:, :2], X[:, 2:]]])
