"""Checks every exported estimator against scikit-learn's conventions."""

import re

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score, make_scorer
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_param_validation, parametrize_with_checks

from skfedclust import FederatedKMeans, KFed
from skfedclust.utils import all_estimators

ESTIMATORS = [cls for _, cls in all_estimators()]

# Parameters for the tests that need an accurate clustering of 2-D blobs, each with its
# reason. DCClustering: the paper's default keeps n_features - 1 PCA components per party,
# which reduces 2-D data to one dimension; the lossless setting keeps both.
ACCURACY_PARAMS = {"DCClustering": {"n_components_intermediate": None}}

# For the tests that fit a pooled X. GOLDClustering: its default simulates 8 clients, 15
# of these 120 rows each, too few for its micro-clusters, which then mix blobs (ARI 0.88
# with random_state=0); with two clients of 60 rows it separates them (ARI 0.95-1.0).
POOLED_PARAMS = {**ACCURACY_PARAMS, "GOLDClustering": {"partition": 3}}

# Parameters for the tests that simulate 3 clients, each with its reason.
# OmniFCClustering: Lagrange decoding with l = t = 2 needs 7 share-holding parties;
# n_parties=7 adds 4 parties that hold no data.
THREE_CLIENT_PARAMS = {"OmniFCClustering": {"n_parties": 7}}


def _instances():
    return [cls() for cls in ESTIMATORS]


def test_discovery_finds_estimators():
    names = [name for name, _ in all_estimators()]
    assert "KFed" in names
    assert names == sorted(names)


@parametrize_with_checks(_instances())
def test_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_param_validation(Estimator):
    check_param_validation(Estimator.__name__, Estimator())


def _blobs():
    return make_blobs(n_samples=120, centers=3, cluster_std=0.6, random_state=0)


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_in_pipeline_and_clone(Estimator):
    X, y = _blobs()
    est = Estimator(n_clusters=3, random_state=0, **POOLED_PARAMS.get(Estimator.__name__, {}))
    pipe = make_pipeline(StandardScaler(), est).fit(X)
    labels = pipe[-1].labels_
    assert labels.shape == (len(X),)
    assert adjusted_rand_score(y, labels) > 0.9
    cloned = clone(est)
    assert cloned.get_params() == est.get_params()
    assert not hasattr(cloned, "labels_")


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_grid_search_over_n_clusters(Estimator):
    X, y = _blobs()
    est = Estimator(random_state=0, **ACCURACY_PARAMS.get(Estimator.__name__, {}))
    if not hasattr(est, "predict"):
        pytest.xfail(f"{Estimator.__name__} has no predict: GridSearchCV cannot score it")
    search = GridSearchCV(
        est, {"n_clusters": [2, 3, 4]}, scoring=make_scorer(adjusted_rand_score), cv=3
    )
    search.fit(X, y)
    assert search.best_params_["n_clusters"] == 3


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_communication_report(Estimator):
    X, _ = _blobs()
    extra = THREE_CLIENT_PARAMS.get(Estimator.__name__, {})
    est = Estimator(n_clusters=3, partition=3, random_state=0, **extra).fit(X)
    comm = est.communication_
    assert est.n_clients_ == 3
    assert comm["rounds"] >= 1
    assert comm["bytes_up"] > 0
    assert comm["bytes_total"] == comm["bytes_up"] + comm["bytes_down"] + comm["bytes_peer"]


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_n_jobs_invariance(Estimator):
    X, _ = _blobs()
    extra = THREE_CLIENT_PARAMS.get(Estimator.__name__, {})
    a = Estimator(n_clusters=3, partition=3, random_state=0, n_jobs=1, **extra).fit(X)
    b = Estimator(n_clusters=3, partition=3, random_state=0, n_jobs=2, **extra).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.communication_["bytes_total"] == b.communication_["bytes_total"]


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_verbose_reports_stages(Estimator, capsys):
    X, _ = _blobs()
    Estimator(n_clusters=3, random_state=0, verbose=1).fit(X)
    out = capsys.readouterr().out
    assert f"[{Estimator.__name__}]" in out
    assert "client" in out and "server" in out


def test_verbose_reports_each_lloyd_iteration_as_scikit_learn_does(capsys):
    X, _ = make_blobs(300, centers=3, cluster_std=3.0, random_state=0)
    model = FederatedKMeans(3, coordinator="sees-totals", init=X[:3], random_state=0, verbose=1)
    model.fit(X, client_ids=np.arange(len(X)) % 3)
    assert model.n_iter_ >= 3
    out = capsys.readouterr().out
    shifts = re.findall(r"\] iteration (\d+): center shift", out)
    # Every iteration but the last prints its shift; the last says why it stopped.
    assert [int(i) for i in shifts] == list(range(1, model.n_iter_))
    assert f"converged at iteration {model.n_iter_}" in out


def test_verbose_reports_blind_rounds_numbered(capsys):
    X, _ = _blobs()
    FederatedKMeans(3, coordinator="blind", random_state=0, verbose=1).fit(
        X, client_ids=np.arange(len(X)) % 3
    )
    out = capsys.readouterr().out
    rounds = re.findall(r"round (\d+) \(at most \d+\): a blind k-means step", out)
    assert rounds and [int(r) for r in rounds] == list(range(1, len(rounds) + 1))


@pytest.mark.parametrize("n_jobs", [None, 2])
def test_verbose_reports_progress_inside_a_long_client_step(capsys, monkeypatch, n_jobs):
    from skfedclust.federation import _runtime

    monkeypatch.setattr(_runtime, "PROGRESS_SECONDS", 0.0)
    X, _ = _blobs()
    KFed(3, random_state=0, verbose=1, n_jobs=n_jobs).fit(X, client_ids=np.arange(len(X)) % 4)
    out = capsys.readouterr().out
    done = re.findall(r"kfed_local_centers: (\d+) of 4 clients done", out)
    assert [int(d) for d in done] == [1, 2, 3]
    # Without verbose, nothing is printed.
    KFed(3, random_state=0).fit(X, client_ids=np.arange(len(X)) % 4)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_bad_input_errors(Estimator):
    X, _ = _blobs()
    est = Estimator(n_clusters=3)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        est.fit(bad)
    with pytest.raises(ValueError, match="NaN"):
        est.fit([X[:60], bad[:60]])
    with pytest.raises(ValueError, match="same features"):
        est.fit([X[:60], np.hstack([X[60:], X[60:]])])
    with pytest.raises(ValueError, match="no samples"):
        est.fit([X[:60], X[:0]])
    with pytest.raises(ValueError, match="n_samples=2"):
        est.fit(X[:2])


# --------------------------------------------------------------------------- #
# Robustness: offsets, extreme scales, duplicates. Every estimator gets these.
# --------------------------------------------------------------------------- #
def _fit_three_clients(Estimator, X, **params):
    extra = {**THREE_CLIENT_PARAMS.get(Estimator.__name__, {}), **params}
    extra.update(ACCURACY_PARAMS.get(Estimator.__name__, {}))
    clients = [X[:40], X[40:80], X[80:]]
    return Estimator(n_clusters=3, random_state=0, **extra).fit(clients)


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_a_large_common_offset_changes_no_label(Estimator):
    # A Unix timestamp added to every value: distances must be translation invariant.
    X, _ = _blobs()
    ref = _fit_three_clients(Estimator, X)
    shifted = _fit_three_clients(Estimator, X + 1.7e9)
    assert adjusted_rand_score(ref.labels_, shifted.labels_) == 1.0


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_predict_on_training_rows_agrees_with_labels(Estimator):
    X, _ = _blobs()
    est = _fit_three_clients(Estimator, X + 1.7e9)
    if not hasattr(est, "predict"):
        pytest.xfail(f"{Estimator.__name__} has no predict")
    np.testing.assert_array_equal(est.predict(X + 1.7e9), est.labels_)


@pytest.mark.parametrize("scale", [1e-300, 1e-12, 1e154, 1e300])
@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_extreme_scales_give_the_clustering_or_a_clear_error(Estimator, scale):
    X, _ = _blobs()
    ref = _fit_three_clients(Estimator, X)
    try:
        est = _fit_three_clients(Estimator, X * scale)
    except ValueError as exc:
        # A refusal must say why in terms of the data, not a numerical accident.
        message = str(exc).lower()
        assert "nan" not in message and "infeasible" not in message, message
        assert any(w in message for w in ("scale", "magnitude", "range", "precision")), message
        return
    assert adjusted_rand_score(ref.labels_, est.labels_) == 1.0


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_identical_rows_get_one_label(Estimator):
    X, _ = _blobs()
    X = np.vstack([X[:60], np.repeat(X[60:61], 60, axis=0)])
    est = _fit_three_clients(Estimator, X)
    assert len(np.unique(est.labels_[60:])) == 1


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_predict_far_from_the_centers_gives_the_nearest_center(Estimator):
    # Along a ray m + t u the nearest center (after any affine map of the rows) changes
    # finitely often, then stays: the ray's last cell. Where it has settled by t = 1e5
    # (checked at 1e5 and 1e6 times the spread, where distances are still resolved in
    # float64), rows 1e17 times the spread away must get the same center; their squared
    # distances to all centers round to one float64 value, so only the differences decide.
    X, _ = _blobs()
    est = _fit_three_clients(Estimator, X)
    if not hasattr(est, "predict"):
        pytest.skip(f"{Estimator.__name__} has no predict")
    angles = np.linspace(0.0, 2.0 * np.pi, 24, endpoint=False) + 0.1
    u = np.column_stack([np.cos(angles), np.sin(angles)])
    m, spread = X.mean(axis=0), X.std()
    try:
        settled = est.predict(m + 1e5 * spread * u)
    except ValueError as exc:
        # A method may refuse rows outside the range it was fitted for, saying so.
        message = str(exc).lower()
        assert any(w in message for w in ("scale", "bound", "range", "precision")), message
        return
    np.testing.assert_array_equal(est.predict(m + 1e6 * spread * u), settled)
    assert len(np.unique(settled)) > 1
    for far in (1e17, 1e100):
        np.testing.assert_array_equal(est.predict(m + far * spread * u), settled, err_msg=far)


# --------------------------------------------------------------------------- #
# pandas nullable dtypes (df.convert_dtypes()), accepted as scikit-learn accepts them
# --------------------------------------------------------------------------- #
def _nullable_frames():
    pd = pytest.importorskip("pandas")
    X, _ = _blobs()
    # One float column and one whole-number column: convert_dtypes() makes them
    # Float64 and Int64, the two nullable kinds a user's frame typically holds.
    X = np.column_stack([X[:, 0], np.round(10 * X[:, 1])])
    frame = pd.DataFrame(X, columns=["a", "b"]).convert_dtypes()
    assert [str(t) for t in frame.dtypes] == ["Float64", "Int64"]
    return pd, X, frame


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_nullable_pandas_dtypes_fit_as_their_float_values(Estimator):
    pd, X, frame = _nullable_frames()
    params = {"n_clusters": 3, "random_state": 0, **THREE_CLIENT_PARAMS.get(Estimator.__name__, {})}
    # The same values in NumPy and in nullable columns give the same fit, in every
    # input form: one frame with client ids, and a list of per-client frames.
    ids = np.arange(len(X)) % 3
    ref = Estimator(**params).fit(X, client_ids=ids)
    pooled = Estimator(**params).fit(frame, client_ids=ids)
    np.testing.assert_array_equal(pooled.labels_, ref.labels_)
    assert list(pooled.feature_names_in_) == ["a", "b"]
    parts = [frame[ids == c] for c in range(3)]
    ref = Estimator(**params).fit([X[ids == c] for c in range(3)])
    clients = Estimator(**params).fit(parts)
    np.testing.assert_array_equal(clients.labels_, ref.labels_)
    if hasattr(clients, "predict"):
        np.testing.assert_array_equal(clients.predict(frame[:7]), ref.predict(X[:7]))
    if Estimator._supports_vertical:
        # Row groups x feature blocks, each block a nullable frame.
        grid = [[p[["a"]], p[["b"]]] for p in parts]
        ref = Estimator(**params).fit([[X[ids == c][:, :1], X[ids == c][:, 1:]] for c in range(3)])
        vertical = Estimator(**params).fit(grid)
        np.testing.assert_array_equal(vertical.labels_, ref.labels_)
    # pd.NA is a missing value: refused with the error NaN gets.
    bad = frame.copy()
    bad.iloc[3, 1] = pd.NA
    with pytest.raises(ValueError, match="NaN"):
        Estimator(**params).fit(bad)
    with pytest.raises(ValueError, match="NaN"):
        Estimator(**params).fit([parts[0], bad[:40], parts[2]])
    if Estimator._supports_vertical:
        with pytest.raises(ValueError, match="NaN"):
            Estimator(**params).fit([[p[["a"]], p[["b"]]] for p in [parts[0], bad[:40]]])
