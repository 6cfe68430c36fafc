"""Input forms of fit, checked once by skfedclust.federation: clear errors for bad input."""

import re

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.exceptions import DataConversionWarning
from sklearn.metrics import adjusted_rand_score

from skfedclust import KFed
from skfedclust.federation import Federation, input_form
from skfedclust.partition import IIDPartition, VerticalPartition


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


def test_client_ids_as_one_tuples_warn_about_client_ids_not_y():
    X, _ = make_blobs(90, centers=3, random_state=1)
    ids = np.repeat([0, 1, 2], 30)
    ref = KFed(n_clusters=3, random_state=0).fit(X, client_ids=ids)
    with pytest.warns(DataConversionWarning) as record:
        est = KFed(n_clusters=3, random_state=0).fit(X, client_ids=[(i,) for i in ids])
    assert len(record) == 1
    message = str(record[0].message)
    assert "client_ids" in message and "y" not in message.split()
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    with pytest.raises(ValueError, match=r"one id per row .* shape \(90, 2\)"):
        KFed(n_clusters=3).fit(X, client_ids=np.stack([ids, ids], axis=1))


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


# --------------------------------------------------------------------------- #
# The partition contract
# --------------------------------------------------------------------------- #
class OddEvenSplitter:
    """A user's own splitter with only the public ``split``."""

    def split(self, X, y=None):
        n = len(X)
        yield np.arange(0, n, 2)
        yield np.arange(1, n, 2)


class OverlappingSplitter:
    def split(self, X, y=None):
        n = len(X)
        yield np.arange(n)
        yield np.arange(n // 2)


def test_a_users_splitter_with_only_split_works():
    X, _ = make_blobs(60, centers=3, random_state=0)
    est = KFed(3, partition=OddEvenSplitter(), random_state=0).fit(X)
    np.testing.assert_array_equal(est.client_sizes_, [30, 30])
    ref = KFed(3, random_state=0).fit(X, client_ids=np.arange(60) % 2)
    np.testing.assert_array_equal(est.labels_, ref.labels_)


def test_a_splitter_must_give_every_row_to_one_client():
    X, _ = make_blobs(60, centers=3, random_state=0)
    with pytest.raises(ValueError, match="exactly one client"):
        KFed(3, partition=OverlappingSplitter()).fit(X)


def test_partition_rejects_strings_and_cross_validation_splitters():
    from sklearn.model_selection import KFold
    from sklearn.utils._param_validation import InvalidParameterError

    X, _ = make_blobs(60, centers=3, random_state=0)
    with pytest.raises(TypeError, match="string"):
        KFed(3, partition="iid").fit(X)
    with pytest.raises(InvalidParameterError, match="partition"):
        KFed(3, partition=1.5).fit(X)
    with pytest.raises(TypeError, match="cross-validation splitter"):
        KFed(3, partition=KFold(3)).fit(X)


def test_vertical_user_splitter_row_groups_from_shared_rows():
    from skfedclust.federation import layout_from_partition

    class TwoByTwo:
        def split(self, X, y=None):
            for rows in (np.arange(0, 4), np.arange(4, 8)):
                for cols in (np.array([0]), np.array([1, 2])):
                    yield rows, cols

    X = np.zeros((8, 3))
    rows, cols, groups = layout_from_partition(TwoByTwo(), X, None, None)
    assert groups == [[0, 1], [2, 3]]
    assert [c.tolist() for c in cols] == [[0], [1, 2], [0], [1, 2]]


def test_label_skew_partition_refuses_nan_labels():
    from skfedclust.partition import DirichletPartition

    X, y = make_blobs(60, centers=3, random_state=0)
    y = y.astype(float)
    y[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        KFed(3, partition=DirichletPartition(2, alpha=1.0), random_state=0).fit(X, y)


# --------------------------------------------------------------------------- #
# client_ids
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "ids, error, match",
    [
        (np.array([0, 1, None, 1] * 15, dtype=object), ValueError, "None"),
        (np.array([0, 1, np.nan, 1] * 15, dtype=object), ValueError, "nan"),
        (np.array([0.0, 1.0, np.nan, 1.0] * 15), ValueError, "NaN"),
        (np.array(["a", 1, "a", 1] * 15, dtype=object), TypeError, "mixes types"),
    ],
)
def test_client_ids_with_missing_or_mixed_values(ids, error, match):
    X, _ = make_blobs(60, centers=3, random_state=0)
    with pytest.raises(error, match=match):
        KFed(3).fit(X, client_ids=ids)


# --------------------------------------------------------------------------- #
# DataFrames
# --------------------------------------------------------------------------- #
def test_client_dataframes_set_feature_names_and_must_agree():
    pd = pytest.importorskip("pandas")
    X, _ = make_blobs(60, n_features=2, centers=3, random_state=0)
    a = pd.DataFrame(X[:30], columns=["age", "dose"])
    b = pd.DataFrame(X[30:], columns=["age", "dose"])
    est = KFed(3, random_state=0).fit([a, b])
    assert est.feature_names_in_.tolist() == ["age", "dose"]
    est.predict(pd.DataFrame(X[:5], columns=["age", "dose"]))
    with pytest.raises(ValueError, match="feature names"):
        est.predict(pd.DataFrame(X[:5], columns=["dose", "age"]))
    swapped = pd.DataFrame(X[30:][:, ::-1], columns=["dose", "age"])
    with pytest.raises(ValueError, match="client 1's columns"):
        KFed(3).fit([a, swapped])
    renamed = pd.DataFrame(X[30:], columns=["age", "weight"])
    with pytest.raises(ValueError, match="client 1's columns"):
        KFed(3).fit([a, renamed])


# --------------------------------------------------------------------------- #
# Ambiguous nesting
# --------------------------------------------------------------------------- #
def test_list_of_1d_arrays_is_ambiguous():
    with pytest.raises(ValueError, match="list of 1-D arrays"):
        KFed(2).fit([np.arange(5.0), np.arange(5.0) + 10])


def test_list_of_3d_arrays_is_rejected():
    with pytest.raises(ValueError, match="nested levels"):
        KFed(2).fit([np.zeros((4, 2, 2)), np.zeros((4, 2, 2))])


def test_tolist_is_still_a_pooled_matrix():
    X, _ = make_blobs(30, centers=3, random_state=0)
    assert input_form(X.tolist()) == "pooled"
    KFed(3, random_state=0).fit(X.tolist())


def test_grid_with_an_empty_row_group():
    from skfedclust import DCClustering

    X = np.random.RandomState(0).rand(20, 4)
    with pytest.raises(ValueError, match="row group 1"):
        DCClustering(2).fit([[X[:10, :2], X[:10, 2:]], []])


def test_iid_default_partition_uses_the_estimator_seed():
    X, _ = make_blobs(60, centers=3, random_state=0)
    a = KFed(3, partition=IIDPartition(3), random_state=5).fit(X)
    b = KFed(3, partition=IIDPartition(3), random_state=5).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert VerticalPartition(2).split  # public contract


@pytest.mark.parametrize("scale, word", [(1e300, "overflow"), (1e-300, "underflow")])
def test_data_beyond_float64_distances_is_refused_clearly(scale, word):
    X, _ = make_blobs(60, centers=3, random_state=0)
    with pytest.raises(ValueError, match=word):
        KFed(3).fit(X * scale)
    # A common offset is not a spread: identical rows far from the origin are fine.
    KFed(1).fit(np.full((10, 2), 1e200))


# --------------------------------------------------------------------------- #
# Containers that are not arrays
# --------------------------------------------------------------------------- #
def _client_blocks():
    X, _ = make_blobs(40, centers=2, random_state=0)
    return X[:20], X[20:]


@pytest.mark.parametrize(
    "make, what, hint",
    [
        (lambda a, b: (c for c in (a, b)), "X is an iterator or generator", r"list\(X\)"),
        (lambda a, b: iter([a, b]), "X is an iterator or generator", r"list\(X\)"),
        (lambda a, b: map(np.asarray, [a, b]), "X is an iterator or generator", r"list\(X\)"),
        (lambda a, b: {"site A": a, "site B": b}, "X is a dict", r"list\(X.values\(\)\)"),
        (lambda a, b: {1.0, 2.0}, "X is a set", r"list\(X\)"),
        (lambda a, b: [a, (r for r in b)], r"X\[1\] is an iterator", r"list\(X\[1\]\)"),
        (lambda a, b: [a, dict(enumerate(b))], r"X\[1\] is a dict", r"X\[1\].values"),
        (lambda a, b: [[a[:, :1], {"x": a[:, 1:]}]], r"X\[0\]\[1\] is a dict", "values"),
    ],
)
def test_generators_dicts_and_sets_get_a_type_error_naming_the_forms(make, what, hint):
    a, b = _client_blocks()
    with pytest.raises(TypeError, match=what) as info:
        KFed(2).fit(make(a, b))
    message = str(info.value)
    assert "a list of 2-D client arrays" in message and "pooled rows" in message
    assert "float()" not in message
    assert re.search(hint, message), message


def test_the_forms_that_work_after_the_hint():
    a, b = _client_blocks()
    ref = KFed(2, random_state=0).fit([a, b])
    by_values = KFed(2, random_state=0).fit(list({"site A": a, "site B": b}.values()))
    by_list = KFed(2, random_state=0).fit(list(c for c in (a, b)))
    np.testing.assert_array_equal(by_values.labels_, ref.labels_)
    np.testing.assert_array_equal(by_list.labels_, ref.labels_)


def test_sparse_matrices_that_are_dicts_are_still_arrays():
    # scipy's dok_matrix subclasses dict: it is refused as sparse, not as a dict.
    sparse = pytest.importorskip("scipy.sparse")
    a, _ = _client_blocks()
    with pytest.raises(TypeError, match="[Ss]parse") as info:
        KFed(2).fit(sparse.dok_matrix(a))
    assert "is a dict" not in str(info.value)


@pytest.mark.parametrize(
    "ids",
    [
        np.repeat([0, 1, 2], [40, 30, 50]),  # sorted runs: views, no sort
        np.repeat([5, -2, 9], [40, 30, 50]),  # runs out of order
        np.random.RandomState(0).randint(0, 4, 120),  # scattered integers of a narrow range
        np.random.RandomState(1).randint(-(10**12), 10**12, 120) // 10**11,  # a wide range
        np.random.RandomState(2).randint(0, 3, 120).astype(np.uint8),
        np.random.RandomState(3).choice(np.array([-120, 0, 120], dtype=np.int8), 120),
        np.random.RandomState(4).choice(np.array([2**63, 2**64 - 1], dtype=np.uint64), 120),
        np.repeat(np.array(["b", "a", "c"]), 40),
        np.repeat([2.5, 0.5], 60),
        np.array(["x", "y", "z"] * 40, dtype=object),
    ],
    ids=[
        "sorted",
        "runs",
        "scattered",
        "wide",
        "uint8",
        "int8",
        "uint64",
        "strings",
        "floats",
        "objects",
    ],
)
def test_clients_from_ids_are_those_of_numpys_unique(ids):
    from skfedclust.federation._inputs import _federation_from_ids

    X = np.arange(240, dtype=float).reshape(120, 2)
    federation = _federation_from_ids(X, ids)
    names, inverse = np.unique(ids, return_inverse=True)
    assert federation.client_names == names.tolist()
    assert [type(n) for n in federation.client_names] == [type(n) for n in names.tolist()]
    for c, rows in enumerate(federation.client_rows):
        np.testing.assert_array_equal(rows, np.flatnonzero(inverse == c))
        np.testing.assert_array_equal(federation.client_data(c), X[rows])
    if np.all(ids[:-1] <= ids[1:]):
        assert all(np.shares_memory(federation.client_data(c), X) for c in range(len(names)))
