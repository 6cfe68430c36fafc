"""Federated scalers: pooled-equivalent statistics from client aggregates, any input form."""

from fractions import Fraction

import numpy as np
import pytest
from sklearn import config_context
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfedclust import FeCA
from skfedclust.preprocessing import FederatedMinMaxScaler, FederatedStandardScaler


def _clients(offset=0.0):
    X, y = make_blobs(150, n_features=3, centers=3, random_state=0)
    X = X * [1.0, 10.0, 0.1] + offset
    return X, y, [X[:40], X[40:100], X[100:]]


@parametrize_with_checks([FederatedStandardScaler(), FederatedMinMaxScaler()])
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_standard_scaler_equals_pooled_statistics():
    X, _, clients = _clients()
    fed = FederatedStandardScaler().fit(clients)
    ref = StandardScaler().fit(X)
    np.testing.assert_allclose(fed.mean_, ref.mean_, rtol=1e-12)
    np.testing.assert_allclose(fed.var_, ref.var_, rtol=1e-12)
    out = fed.transform(clients)
    assert isinstance(out, list) and [len(c) for c in out] == [40, 60, 50]
    np.testing.assert_allclose(np.vstack(out), ref.transform(X), atol=1e-12)
    np.testing.assert_allclose(np.vstack(fed.inverse_transform(out)), X, atol=1e-9)


def test_standard_scaler_is_exact_under_a_large_offset():
    X, _, clients = _clients(offset=1.7e9)
    fed = FederatedStandardScaler().fit(clients)
    X0, _, _ = _clients()
    # The variance of the offset data equals the variance of the data itself.
    np.testing.assert_allclose(fed.var_, X0.var(axis=0), rtol=1e-6)


def test_min_max_scaler_equals_pooled():
    X, _, clients = _clients()
    fed = FederatedMinMaxScaler(feature_range=(-1, 1)).fit(clients)
    ref = MinMaxScaler(feature_range=(-1, 1)).fit(X)
    np.testing.assert_allclose(np.vstack(fed.transform(clients)), ref.transform(X), atol=1e-12)
    with pytest.raises(ValueError, match="feature_range"):
        FederatedMinMaxScaler(feature_range=(1, 0)).fit(clients)


def test_bytes_and_rounds():
    _, _, clients = _clients()
    d = 3
    clear = FederatedStandardScaler(secure_aggregation=False).fit(clients).communication_
    # In the clear, up: a count (8 bytes) and two d-vectors per client; down: mean and scale.
    assert (clear["rounds"], clear["bytes_up"], clear["bytes_down"]) == (
        1,
        3 * (8 + 2 * d * 8),
        3 * 2 * d * 8,
    )
    secure = FederatedStandardScaler().fit(clients).communication_
    # Secure: four sums of two exchanges each (two bounds, two moment sums), one set-up.
    assert (secure["rounds"], secure["setup_rounds"]) == (8, 1)
    assert secure["bytes_peer"] > 0
    mm = FederatedMinMaxScaler().fit(clients).communication_
    assert (mm["bytes_up"], mm["bytes_down"]) == (3 * 2 * d * 8, 3 * 2 * d * 8)


def test_secure_scaler_equals_the_clear_one_and_the_server_gets_no_clients_moments():
    from skfedclust.secure._secure_sum import TAG_UPLOAD
    from skfedclust.utils.protocol_checks import recording_runtime

    _, _, clients = _clients()
    clients = [c * [1.0, 1e-6, 1e6] + 1.7e9 for c in clients]
    clear = FederatedStandardScaler(secure_aggregation=False).fit(clients)
    with recording_runtime() as runtimes:
        secure = FederatedStandardScaler().fit(clients)
    np.testing.assert_allclose(secure.mean_, clear.mean_, rtol=1e-15)
    # The exact variance, in rationals: a feature a million times narrower than
    # the offset keeps its digits (more of them than numpy's own var keeps).
    pooled = np.vstack(clients)
    for j in range(pooled.shape[1]):
        column = [Fraction(float(v)) for v in pooled[:, j]]
        mean = sum(column) / len(column)
        exact = float(sum((c - mean) ** 2 for c in column) / len(column))
        assert secure.var_[j] == pytest.approx(exact, rel=1e-12)
        assert clear.var_[j] == pytest.approx(exact, rel=1e-3)
    # Every upload is a masked vector: no client's own sums or counts among them.
    uploads = [r for r in runtimes[-1].received if r.tag == TAG_UPLOAD]
    own = [np.append(c.sum(axis=0), len(c)) for c in clients]
    for received in uploads:
        for masked, _ in received.values():
            for vector in own:
                assert not np.isin(vector, np.asarray(masked).view(np.int64)).any()


def test_pipeline_with_a_list_of_clients():
    X, y, clients = _clients()
    pipe = make_pipeline(FederatedStandardScaler(), FeCA(3, random_state=0)).fit(clients)
    assert adjusted_rand_score(y, pipe[-1].labels_) == 1.0
    assert pipe[0].n_clients_ == 3 and pipe[-1].n_clients_ == 3


def test_pipeline_with_client_ids_through_metadata_routing():
    X, y, _ = _clients()
    ids = np.repeat([0, 1, 2], 50)
    with config_context(enable_metadata_routing=True):
        pipe = make_pipeline(
            FederatedStandardScaler().set_fit_request(client_ids=True),
            FeCA(3, random_state=0).set_fit_request(client_ids=True),
        )
        pipe.fit(X, client_ids=ids)
    assert pipe[0].n_clients_ == 3 and pipe[-1].n_clients_ == 3
    assert adjusted_rand_score(y, pipe[-1].labels_) == 1.0
    np.testing.assert_allclose(pipe[0].mean_, X.mean(axis=0))


@pytest.mark.parametrize("Scaler", [FederatedStandardScaler, FederatedMinMaxScaler])
def test_set_output_pandas_with_a_list_of_client_frames(Scaler):
    pd = pytest.importorskip("pandas")
    X, _, clients = _clients()
    frames = [
        pd.DataFrame(c, columns=["a", "b", "c"], index=np.arange(len(c)) + 1000 * i)
        for i, c in enumerate(clients)
    ]
    expected = Scaler().fit_transform(clients)
    scaler = Scaler().set_output(transform="pandas")
    for out in (scaler.fit_transform(frames), scaler.fit(frames).transform(frames)):
        assert isinstance(out, list) and len(out) == 3
        for frame, got, want in zip(frames, out, expected):
            assert isinstance(got, pd.DataFrame)
            assert list(got.columns) == ["a", "b", "c"]
            assert got.index.equals(frame.index)
            np.testing.assert_allclose(got.to_numpy(), want)
    # pooled rows: one frame, as with scikit-learn's scalers
    pooled = scaler.transform(pd.DataFrame(X, columns=["a", "b", "c"]))
    assert isinstance(pooled, pd.DataFrame)
    np.testing.assert_allclose(pooled.to_numpy(), np.vstack(expected))
    # a pipeline set to pandas hands the next step one frame per client
    pipe = make_pipeline(Scaler(), FeCA(3, random_state=0)).set_output(transform="pandas")
    assert pipe.fit(frames)[-1].n_clients_ == 3


@pytest.mark.parametrize(
    "feature_range",
    [
        ("a", "b"),
        (0, 1, 2),
        (0,),
        (0, np.inf),
        (-np.inf, 0),
        (0, np.nan),
        (1, 0),
        (1, 1),
        (-1e308, 1e308),
        (False, True),
        [0, 1],
        None,
    ],
)
def test_min_max_scaler_rejects_an_invalid_feature_range(feature_range):
    from sklearn.utils._param_validation import InvalidParameterError

    X, _, clients = _clients()
    with pytest.raises(InvalidParameterError, match="'feature_range' parameter .* finite real"):
        FederatedMinMaxScaler(feature_range=feature_range).fit(clients)


def test_min_max_scaler_accepts_numpy_and_negative_ranges():
    X, _, clients = _clients()
    for feature_range in [(np.float64(-2.5), np.int64(3)), (-1, 1), (1e-3, 2e-3)]:
        out = np.vstack(FederatedMinMaxScaler(feature_range=feature_range).fit_transform(clients))
        ref = MinMaxScaler(feature_range=feature_range).fit_transform(X)
        np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-15)
