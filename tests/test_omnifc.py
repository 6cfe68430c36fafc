"""Tests of OmniFCClustering."""

import copy
import logging
import pickle
import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from _byte_formulas import offset_sum_bytes
from scipy.cluster.hierarchy import fcluster, linkage
from sklearn.base import clone
from sklearn.cluster import DBSCAN, AgglomerativeClustering, KMeans, SpectralClustering
from sklearn.datasets import load_digits, load_iris, make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler, normalize

from skfedclust import OmniFCClustering
from skfedclust.clusterers import FuzzyCMeans, HierarchicalLinkage, KMedoids
from skfedclust.clusterers._memory import AVAILABLE_MEMORY_ENV
from skfedclust.federation import InProcessRuntime, use_runtime
from skfedclust.methods._omnifc_cluster import PEAK_COPIES
from skfedclust.metrics import kappa
from skfedclust.partition import IIDPartition, NonIIDLevelPartition
from skfedclust.secure import (
    DEFAULT_PRIME,
    FAST_PRIME,
    _lcc_sinks,
    lcc_squared_distances,
    max_safe_precision,
    quantize,
)
from skfedclust.secure._lcc_offset import DataHolderDroppedError
from skfedclust.secure._secure_sum import TAG_UPLOAD as TAG_SUM_UPLOAD
from skfedclust.utils.protocol_checks import RecordingRuntime, check_protocol, recording_runtime


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(120, centers=3, cluster_std=0.6, random_state=3)
    return X, y


def exact_sq(X, Y, q):
    Xi = np.rint(np.ldexp(X, q)).astype(np.int64)
    Yi = np.rint(np.ldexp(Y, q)).astype(np.int64)
    return ((Xi[:, None, :] - Yi[None, :, :]) ** 2).sum(-1) / 4.0**q


class DropFromOffset(InProcessRuntime):
    """Loses client 2's masked upload to the offset's secure sum (it drops after masking)."""

    def _lost(self, tag, party):
        return tag == TAG_SUM_UPLOAD and party == 2


def q_auto(X, est):
    """The precision "auto" picks: from the spread of the rows around their mean."""
    centred = X - X.mean(axis=0)
    return max_safe_precision(
        np.abs(centred).max() * (1 + 1e-9),
        np.linalg.norm(centred, axis=1).max() * (1 + 1e-9),
        X.shape[1],
        est.prime,
    )


# --------------------------------------------------------------------------- #
# The reconstructed matrix
# --------------------------------------------------------------------------- #
def test_dissimilarity_matrix_is_exact_in_input_order(blobs):
    X, y = blobs
    est = OmniFCClustering(
        3, clusterer="kmedoids", partition=NonIIDLevelPartition(0.5, n_clients=7)
    )
    est.fit(X, y)
    assert est.precision_ == q_auto(X, est)
    assert np.array_equal(est.dissimilarity_matrix_, exact_sq(X, X, est.precision_))


def test_same_result_for_every_partition(blobs):
    X, y = blobs
    reference = None
    partitions = [None, 9, IIDPartition(8)] + [
        NonIIDLevelPartition(p, n_clients=7) for p in (0.0, 0.25, 0.5, 0.75, 1.0)
    ]
    for partition in partitions:
        est = OmniFCClustering(3, partition=partition, random_state=0, keep_dissimilarity=True)
        est.fit(X, y)
        # the noise differs with the partition seed but D and labels do not
        if reference is None:
            reference = est
            continue
        assert np.array_equal(est.dissimilarity_matrix_, reference.dissimilarity_matrix_)
        assert np.array_equal(est.labels_, reference.labels_)


def test_same_matrix_for_every_random_state(blobs):
    X, _ = blobs
    fits = [OmniFCClustering(3, clusterer="kmedoids", random_state=s).fit(X) for s in range(3)]
    for est in fits[1:]:
        assert np.array_equal(est.dissimilarity_matrix_, fits[0].dissimilarity_matrix_)
        assert np.array_equal(est.labels_, fits[0].labels_)


def test_client_list_and_client_ids_give_the_same_matrix(blobs):
    X, _ = blobs
    ids = np.arange(len(X)) % 7
    by_ids = OmniFCClustering(3, random_state=1, keep_dissimilarity=True).fit(X, client_ids=ids)
    order = np.argsort(ids, kind="stable")
    clients = [X[ids == c] for c in range(7)]
    by_list = OmniFCClustering(3, random_state=1, keep_dissimilarity=True).fit(clients)
    D = by_ids.dissimilarity_matrix_
    assert np.array_equal(by_list.dissimilarity_matrix_, D[np.ix_(order, order)])
    assert np.array_equal(by_list.labels_, by_ids.labels_[order])


def test_n_jobs_invariance(blobs):
    X, _ = blobs
    a = OmniFCClustering(3, clusterer="kmeans", random_state=0, n_jobs=1).fit(X)
    b = OmniFCClustering(3, clusterer="kmeans", random_state=0, n_jobs=2).fit(X)
    assert np.array_equal(a.dissimilarity_matrix_, b.dissimilarity_matrix_)
    assert np.array_equal(a.labels_, b.labels_)


def test_features_not_divisible_by_segments_are_padded():
    X, _ = make_blobs(60, n_features=5, centers=2, random_state=0)
    est = OmniFCClustering(2, n_segments=2, n_colluders=1, clusterer="kmedoids").fit(X)
    assert np.array_equal(est.dissimilarity_matrix_, exact_sq(X, X, est.precision_))
    est3 = OmniFCClustering(2, n_segments=3, n_colluders=2, clusterer="kmedoids").fit(X)
    assert np.array_equal(est3.dissimilarity_matrix_, est.dissimilarity_matrix_)


# --------------------------------------------------------------------------- #
# Equivalence with the centralized methods
# --------------------------------------------------------------------------- #
def test_spectral_equals_centralized_rbf(blobs):
    X, _ = blobs
    for gamma in (1.0, 0.3):
        est = OmniFCClustering(
            3, clusterer="spectral", clusterer_params={"gamma": gamma}, random_state=0
        ).fit(X)
        central = SpectralClustering(3, gamma=gamma, random_state=0).fit(X)
        assert np.array_equal(est.labels_, central.labels_)


def test_dbscan_equals_centralized(blobs):
    X, _ = blobs
    params = {"eps": 0.7, "min_samples": 4}
    est = OmniFCClustering(clusterer="dbscan", clusterer_params=params).fit(X)
    central = DBSCAN(**params).fit(X)
    assert np.array_equal(est.labels_, central.labels_)
    assert np.array_equal(est.clusterer_.core_sample_indices_, central.core_sample_indices_)


@pytest.mark.parametrize("method", ["ward", "average", "complete", "single"])
def test_agglomerative_equals_centralized(blobs, method):
    X, _ = blobs
    est = OmniFCClustering(4, clusterer="agglomerative", clusterer_params={"linkage": method}).fit(
        X
    )
    central = fcluster(linkage(X, method), 4, criterion="maxclust")
    assert adjusted_rand_score(central, est.labels_) == 1.0
    sk = AgglomerativeClustering(4, linkage=method).fit(X)
    assert adjusted_rand_score(sk.labels_, est.labels_) == 1.0


def test_kmedoids_equals_centralized(blobs):
    X, _ = blobs
    for params in ({}, {"method": "pam", "init": "build"}):
        est = OmniFCClustering(3, clusterer="kmedoids", clusterer_params=params).fit(X)
        central = KMedoids(3, **params).fit(X)
        assert np.array_equal(est.labels_, central.labels_)
        assert np.array_equal(est.clusterer_.medoid_indices_, central.medoid_indices_)


@pytest.mark.parametrize("clusterer, cls", [("kmeans", KMeans), ("fcm", FuzzyCMeans)])
def test_feature_methods_equal_the_method_on_rows_of_D(blobs, clusterer, cls):
    X, y = blobs
    est = OmniFCClustering(3, clusterer=clusterer, random_state=0).fit(X)
    D_ref = exact_sq(X, X, est.precision_)
    # OmniFC runs ten restarts of both by default
    assert est.clusterer_.n_init == 10
    central = cls(3, n_init=10, random_state=0).fit(D_ref)
    assert np.array_equal(est.labels_, central.labels_)
    assert adjusted_rand_score(y, est.labels_) > 0.9


def test_nmf_labels_are_largest_component(blobs):
    X, y = blobs
    est = OmniFCClustering(3, clusterer="nmf", random_state=0).fit(X)
    W = est.clusterer_.transform(est.dissimilarity_matrix_)
    assert np.array_equal(est.labels_, np.argmax(W, axis=1))


def test_custom_precomputed_estimators(blobs):
    X, _ = blobs
    est = OmniFCClustering(clusterer=DBSCAN(eps=0.7, metric="precomputed")).fit(X)
    assert np.array_equal(est.labels_, DBSCAN(eps=0.7).fit(X).labels_)
    sc = SpectralClustering(3, affinity="precomputed", gamma=0.5, random_state=0)
    est = OmniFCClustering(clusterer=sc).fit(X)
    central = SpectralClustering(3, gamma=0.5, random_state=0).fit(X)
    assert np.array_equal(est.labels_, central.labels_)
    agg = AgglomerativeClustering(3, metric="precomputed", linkage="average")
    est = OmniFCClustering(clusterer=agg).fit(X)
    assert (
        adjusted_rand_score(
            est.labels_, AgglomerativeClustering(3, linkage="average").fit(X).labels_
        )
        == 1.0
    )
    with pytest.raises(ValueError, match="precomputed"):
        OmniFCClustering(clusterer=KMeans(3)).fit(X)


def test_hierarchical_linkage_and_fcm_helpers():
    X, y = make_blobs(90, centers=3, cluster_std=0.4, random_state=1)
    fcm = FuzzyCMeans(3, random_state=0).fit(X)
    assert np.allclose(fcm.u_.sum(axis=1), 1.0)
    assert adjusted_rand_score(y, fcm.labels_) == 1.0
    assert np.array_equal(fcm.predict(X), fcm.labels_)
    single = HierarchicalLinkage(1).fit(np.zeros((1, 1)))
    assert single.labels_.tolist() == [0]


# --------------------------------------------------------------------------- #
# Parties, threshold, errors
# --------------------------------------------------------------------------- #
def test_n_parties_lets_few_data_holders_run(blobs):
    X, _ = blobs
    clients = [X[:40], X[40:80], X[80:]]
    with pytest.raises(ValueError, match="n_parties=7"):
        OmniFCClustering(3).fit(clients)
    est = OmniFCClustering(3, n_parties=7, clusterer="kmedoids").fit(clients)
    assert est.n_parties_ == 7 and est.n_clients_ == 3
    report = est.communication_
    # set-up: the bounds on |x|, the secure sum's pairwise seeds, the bounds around
    # the offset; rounds: the offset's secure sum (upload, unmasking), the share
    # exchange, the streamed upload
    assert (report["setup_rounds"], report["rounds"]) == (3, 4)
    assert len(report["per_client"]["bytes_up"]) == 7
    # share-holding parties without data upload but send no shares and take no part
    # in the offset's secure sum
    assert np.all(report["per_client"]["bytes_peer_sent"][3:] == 0)
    # bounds: one float64 |x|, two float64 around the offset
    distances, offset, bounds = 4 * 120 * 119 // 2, offset_sum_bytes(3, 2)["up"], 8 + 16
    assert (
        report["per_client"]["bytes_up"].tolist()
        == [distances + offset + bounds] * 3 + [distances] * 4
    )
    assert np.array_equal(est.dissimilarity_matrix_, exact_sq(X, X, est.precision_))


def test_a_data_client_dropping_from_the_offset_ends_the_fit_clearly(blobs):
    X, _ = blobs
    clients = np.array_split(X, 7)
    # The secure sum recovers from the dropout (the neighbours reveal their pairwise
    # keys with client 2), but the distances need every data holder's rows.
    with (
        use_runtime(DropFromOffset),
        pytest.raises(
            DataHolderDroppedError, match=r"data clients \[2\] dropped .* needs every data holder"
        ),
    ):
        OmniFCClustering(3, clusterer="kmedoids", random_state=0).fit(clients)


def test_communication_matches_protocol(blobs):
    X, _ = blobs
    est = OmniFCClustering(3, partition=7, clusterer="kmeans", random_state=0).fit(X)
    sizes = est.client_sizes_
    report = est.communication_
    w, d = 1, 2  # two features in two segments
    offset = offset_sum_bytes(7, d)
    # shares, plus the offset's secure sum (seeds and self-mask shares)
    sent = [4 * 6 * s * w + offset["peer"][j] for j, s in enumerate(sizes)]
    assert report["per_client"]["bytes_peer_sent"].tolist() == sent
    assert report["bytes_up"] == 7 * (4 * 120 * 119 // 2 + offset["up"] + 8 + 16)
    item = est.labels_.itemsize
    # who dropped from the secure sum, the offset (d float64) and the labels
    expected = [offset["down"] + 8 * d + item * s for s in sizes]
    assert report["per_client"]["bytes_down"].tolist() == expected


def test_bad_input_raises(blobs):
    X, _ = blobs
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        OmniFCClustering(3).fit(Xn)
    with pytest.raises(ValueError, match="could wrap around"):
        OmniFCClustering(3, precision=40).fit(X)
    with pytest.raises(ValueError, match="n_segments"):
        OmniFCClustering(3, n_segments=0).fit(X)
    with pytest.raises(ValueError, match="not a prime"):
        OmniFCClustering(3, prime=2**30).fit(X)
    with pytest.raises(ValueError, match="clusterer"):
        OmniFCClustering(3, clusterer="birch").fit(X)
    with pytest.raises(ValueError, match="feature_dissimilarity"):
        OmniFCClustering(
            3, clusterer="kmeans", clusterer_params={"feature_dissimilarity": "l1"}
        ).fit(X)


# --------------------------------------------------------------------------- #
# predict
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "clusterer", ["kmeans", "fcm", "nmf", "spectral", "kmedoids", "dbscan", "agglomerative"]
)
def test_predict_uses_exact_secure_distances(blobs, clusterer):
    X, y = blobs
    params = {"eps": 0.7} if clusterer == "dbscan" else None
    est = OmniFCClustering(3, clusterer=clusterer, clusterer_params=params, random_state=0)
    est.fit(X[:100])
    new = X[100:] + 0.01
    assert np.array_equal(est._query_distances(new), exact_sq(new, X[:100], est.precision_))
    pred = est.predict(X[100:])
    assert pred.shape == (20,)
    if clusterer != "nmf":
        # a training row is its own nearest neighbour / in its own cell
        assert np.array_equal(est.predict(X[:100]), est.labels_)
    if clusterer in ("kmeans", "spectral", "kmedoids", "agglomerative", "fcm"):
        assert adjusted_rand_score(y[100:], pred) == 1.0


def test_predict_refuses_rows_that_could_wrap(blobs):
    X, _ = blobs
    est = OmniFCClustering(3, clusterer="kmedoids").fit(X)
    with pytest.raises(ValueError, match="wrap"):
        est.predict(X * 1000)


# --------------------------------------------------------------------------- #
# scikit-learn integration
# --------------------------------------------------------------------------- #
def test_pipeline_clone_and_grid_search(blobs):
    X, y = blobs
    pipe = make_pipeline(StandardScaler(), OmniFCClustering(3, clusterer="kmedoids"))
    labels = pipe.fit_predict(X)
    assert adjusted_rand_score(y, labels) == 1.0
    est = clone(OmniFCClustering(3, clusterer="kmeans", random_state=0))
    grid = GridSearchCV(est, {"n_clusters": [2, 3]}, scoring="adjusted_rand_score", cv=2).fit(X, y)
    assert grid.best_params_ == {"n_clusters": 3}


def test_vote_matches_scikit_learn_distance_weighted_knn():
    from sklearn.neighbors import KNeighborsClassifier

    from skfedclust.methods._omnifc import nearest_neighbour_vote

    rng = np.random.RandomState(0)
    train = rng.rand(60, 3)
    labels = rng.randint(0, 4, 60)
    new = np.vstack([rng.rand(25, 3), train[:5]])  # the last rows sit on training rows
    D_train = np.sqrt(((train[:, None] - train[None]) ** 2).sum(-1))
    D_new = np.sqrt(((new[:, None] - train[None]) ** 2).sum(-1))
    knn = KNeighborsClassifier(5, weights="distance", metric="precomputed").fit(D_train, labels)
    assert np.array_equal(nearest_neighbour_vote(D_new, labels, 5), knn.predict(D_new))


# --------------------------------------------------------------------------- #
# Common offset, scales and extreme magnitudes
# --------------------------------------------------------------------------- #
ALL_CLUSTERERS = ["spectral", "kmeans", "fcm", "nmf", "kmedoids", "dbscan", "agglomerative"]


def test_offset_data_are_clustered_like_centred_data(blobs):
    X, y = blobs
    far = X + 1e5
    est = OmniFCClustering(3, clusterer="kmedoids", random_state=0).fit(far)
    # the field holds the spread around the mean, not the position of the data
    assert est.precision_ == q_auto(far, est) == q_auto(X, est) >= 5
    assert np.allclose(est.offset_, far.mean(axis=0), rtol=1e-12)
    assert np.array_equal(est.dissimilarity_matrix_, exact_sq(far, far, est.precision_))
    assert adjusted_rand_score(y, est.labels_) == 1.0
    # the querying party subtracts the same offset
    new = far[:10] + 0.01
    assert np.array_equal(est._query_distances(new), exact_sq(new, far, est.precision_))
    assert np.array_equal(est.predict(far), est.labels_)


@pytest.mark.parametrize("scale", [1e-50, 1e-12, 1e12, 1e50])
@pytest.mark.parametrize("clusterer", ALL_CLUSTERERS)
def test_tiny_and_huge_scales_give_the_same_clusters(blobs, scale, clusterer):
    X, y = blobs
    params = {"eps": 0.7 * scale} if clusterer == "dbscan" else None
    est = OmniFCClustering(
        3, clusterer=clusterer, clusterer_params=params, random_state=0, keep_dissimilarity=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # NMF's iteration cap
        est.fit(X * scale)
    assert np.all(np.isfinite(est.dissimilarity_matrix_))
    assert est.dissimilarity_matrix_.max() > 0
    if clusterer == "dbscan":
        # the rounding at each scale's precision moves a border row or two
        assert adjusted_rand_score(y, est.labels_) > 0.9
    elif clusterer != "nmf":
        assert adjusted_rand_score(y, est.labels_) == 1.0


@pytest.mark.parametrize(
    "scale, message",
    [
        (1e154, "overflow"),
        (1e300, "overflow"),
        (1e120, "too large to cluster"),
        (1e-80, "too small to cluster"),
        (1e-300, "underflow"),
    ],
)
@pytest.mark.parametrize("clusterer", ["spectral", "kmeans", "dbscan"])
def test_extreme_magnitudes_raise_a_clear_error(blobs, scale, message, clusterer):
    X, _ = blobs
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning on the way
        with pytest.raises(ValueError, match=message):
            OmniFCClustering(3, clusterer=clusterer).fit(X * scale)


def test_spread_hidden_by_a_user_precision_raises(blobs):
    X, _ = blobs
    with pytest.raises(ValueError, match="below what the field can resolve"):
        OmniFCClustering(3, precision=8).fit(X * 1e-6)


def test_rows_identical_in_float64_get_one_label(blobs):
    X, _ = blobs
    # 1e145 absorbs the data: every row is the same float64 vector
    with pytest.warns(ConvergenceWarning, match=r"distinct rows \(1, after quantization\)"):
        est = OmniFCClustering(3, keep_dissimilarity=True).fit(X + 1e145)
    assert np.array_equal(est.labels_, np.zeros(len(X)))
    assert not est.dissimilarity_matrix_.any()


def test_paper_literal_gamma_too_large_for_the_distances_raises(blobs):
    X, _ = blobs
    with pytest.raises(ValueError, match="isolated vertices"):
        OmniFCClustering(3, clusterer_params={"gamma": 1.0}).fit(X * 1e3)


# --------------------------------------------------------------------------- #
# Identical rows
# --------------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def blobs_with_duplicates(blobs):
    X, y = blobs
    copies = np.repeat(X[:1], 60, axis=0)
    return np.vstack([X, copies]), np.concatenate([y, np.repeat(y[:1], 60)])


@pytest.mark.parametrize("clusterer", ALL_CLUSTERERS)
def test_identical_rows_get_one_label_and_predict_returns_labels(blobs_with_duplicates, clusterer):
    X, y = blobs_with_duplicates
    params = {"eps": 0.7} if clusterer == "dbscan" else None
    est = OmniFCClustering(3, clusterer=clusterer, clusterer_params=params, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X)
    duplicates = est.labels_[120:]
    assert np.all(duplicates == est.labels_[0])
    assert np.array_equal(est.predict(X), est.labels_)
    if clusterer == "dbscan":
        assert adjusted_rand_score(y, est.labels_) > 0.9  # a border row is noise
    elif clusterer not in ("nmf", "kmedoids"):
        # (k-medoids' heuristic start puts every medoid near the heavy row)
        assert adjusted_rand_score(y, est.labels_) == 1.0


def test_spectral_does_not_split_groups_of_identical_rows():
    X = np.repeat(np.array([[0.0, 0.0], [5.0, 5.0], [0.0, 9.0]]), 20, axis=0)
    for params in (None, {"gamma": 0.1}):
        est = OmniFCClustering(3, clusterer_params=params, random_state=0).fit(X)
        assert np.array_equal(np.bincount(est.labels_), [20, 20, 20])
        for group in range(3):
            assert len(set(est.labels_[20 * group : 20 * (group + 1)])) == 1
        assert np.array_equal(est.predict(X), est.labels_)


@pytest.mark.parametrize("clusterer", ALL_CLUSTERERS)
def test_sixty_identical_rows_get_one_label(clusterer):
    X = np.repeat(np.array([[1.0, -2.0, 0.5]]), 60, axis=0)
    est = OmniFCClustering(3, clusterer=clusterer, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X)
    assert len(set(est.labels_)) == 1
    assert np.array_equal(est.predict(X), est.labels_)


def test_fewer_distinct_rows_than_clusters_make_one_cluster_per_group():
    X = np.repeat(np.array([[0.0, 0.0], [5.0, 5.0]]), 30, axis=0)
    for clusterer in ("spectral", "kmeans", "kmedoids"):
        est = OmniFCClustering(3, clusterer=clusterer)
        with pytest.warns(ConvergenceWarning, match=r"smaller than n_clusters \(3\)"):
            est.fit(X)
        assert est.clusterer_ is None
        assert np.array_equal(est.labels_, np.repeat([0, 1], 30))
        assert np.array_equal(est.predict([[0.1, 0.0], [4.0, 5.0]]), [0, 1])


def test_fcm_sample_weight_counts_as_repeated_rows():
    X, _ = make_blobs(60, centers=3, cluster_std=0.5, random_state=2)
    weights = np.arange(60) % 3 + 1
    repeated = np.repeat(X, weights, axis=0)
    a = FuzzyCMeans(3, tol=1e-10, max_iter=1000, random_state=0).fit(X, sample_weight=weights)
    b = FuzzyCMeans(3, tol=1e-10, max_iter=1000, random_state=0).fit(repeated)
    order_a = np.lexsort(a.cluster_centers_.T)
    order_b = np.lexsort(b.cluster_centers_.T)
    assert np.allclose(a.cluster_centers_[order_a], b.cluster_centers_[order_b], atol=1e-6)
    assert np.isclose(a.objective_, b.objective_, rtol=1e-6)


# --------------------------------------------------------------------------- #
# The spectral affinity
# --------------------------------------------------------------------------- #
def test_default_spectral_affinity_is_median_rbf_on_the_knn_graph(blobs):
    X, _ = blobs
    est = OmniFCClustering(3, random_state=0, keep_dissimilarity=True).fit(X)
    D = est.dissimilarity_matrix_
    gamma = 1.0 / np.median(D[D > 0])
    A = est.clusterer_.affinity_matrix_
    assert sp.issparse(A)
    A = A.toarray()
    # the pattern: a pair is kept when either row is among the other's 10 nearest
    order = np.argsort(D + np.diag(np.full(len(D), np.inf)), axis=1, kind="stable")[:, :10]
    knn = np.zeros(D.shape, dtype=bool)
    knn[np.arange(len(D))[:, None], order] = True
    assert np.array_equal(A > 0, knn | knn.T)
    # the values: exp(-gamma * D) on the squared distances, not on sqrt(D)
    assert np.allclose(A[A > 0], np.exp(-gamma * D)[A > 0], rtol=1e-14, atol=0)
    assert not np.allclose(A[A > 0], np.exp(-gamma * np.sqrt(D))[A > 0])


def test_explicit_gamma_gives_the_dense_rbf_of_scikit_learn(blobs):
    X, _ = blobs
    est = OmniFCClustering(3, clusterer_params={"gamma": 0.3}, random_state=0).fit(X)
    D = est.dissimilarity_matrix_
    A = est.clusterer_.affinity_matrix_
    assert np.array_equal(A, np.exp(-0.3 * D))
    # a k-NN graph with a given gamma, on request
    est = OmniFCClustering(3, clusterer_params={"gamma": 0.3, "n_neighbors": 5}).fit(X)
    A = est.clusterer_.affinity_matrix_
    assert sp.issparse(A) and np.allclose(A.data, np.exp(-0.3 * D)[A.nonzero()])


def test_spectral_receives_the_affinity_of_the_squared_distances(blobs):
    """A spy clusterer records the matrix the server hands to it."""
    X, _ = blobs

    class Spy(SpectralClustering):
        def fit(self, X, y=None):
            Spy.received = X
            return super().fit(X, y)

    spy = Spy(3, affinity="precomputed", gamma=0.2, random_state=0)
    est = OmniFCClustering(clusterer=spy).fit(X)
    D = est.dissimilarity_matrix_
    assert np.array_equal(Spy.received, np.exp(-0.2 * D))
    assert not np.allclose(Spy.received, np.exp(-0.2 * np.sqrt(D)))


@pytest.mark.parametrize("params", [{"gamma": "mean"}, {"gamma": -1.0}, {"n_neighbors": 0}])
def test_bad_spectral_parameters_raise(blobs, params):
    X, _ = blobs
    with pytest.raises(ValueError, match="gamma|n_neighbors"):
        OmniFCClustering(3, clusterer_params=params).fit(X)


# --------------------------------------------------------------------------- #
# Restarts
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("clusterer", ["kmeans", "fcm"])
def test_ten_restarts_by_default_on_iris(clusterer):
    X, y = load_iris(return_X_y=True)
    X = normalize(X)
    scores = [
        kappa(y, OmniFCClustering(3, clusterer=clusterer, random_state=seed).fit(X).labels_)
        for seed in range(10)
    ]
    # one start falls into a poor optimum (Kappa about 0.25) on 2-3 of these seeds
    assert min(scores) > 0.9


# --------------------------------------------------------------------------- #
# Memory
# --------------------------------------------------------------------------- #
def test_memory_guard_refuses_before_the_protocol(blobs, monkeypatch):
    X, _ = blobs
    monkeypatch.setenv(AVAILABLE_MEMORY_ENV, str(120 * 120 * 8))
    with pytest.raises(MemoryError, match=r"n=120 rows need about .* only 112\.5 KiB") as info:
        OmniFCClustering(3).fit(X)
    assert isinstance(info.value, ValueError)
    assert "subsample" in str(info.value) and "no n x n matrix" in str(info.value)
    monkeypatch.setenv(AVAILABLE_MEMORY_ENV, str(10**9))
    est = OmniFCClustering(3, clusterer="kmedoids").fit(X)
    monkeypatch.setenv(AVAILABLE_MEMORY_ENV, "100")
    with pytest.raises(MemoryError, match="query distances"):
        est.predict(X[:5])


def test_peak_memory_of_default_fit():
    n = 2000
    X, _ = make_blobs(n, centers=4, n_features=6, random_state=0)
    est = OmniFCClustering(4, random_state=0)
    # A first fit compiles the kernels: numba's compiler would count as the fit's.
    est.fit(X)
    tracemalloc.start()
    est.fit(X)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # D itself, half of it for the median, thin blocks: well below 2.5 copies
    # (the dense affinity and scikit-learn's copies of it made it about 5)
    assert peak < 2.5 * n * n * 8
    assert peak < PEAK_COPIES["spectral"] * n * n * 8


# --------------------------------------------------------------------------- #
# The protocol on the runtime
# --------------------------------------------------------------------------- #
def _protocol_sizes(runtime, n_features, n_segments=2):
    sizes = np.asarray(runtime.client_sizes)
    return sizes, int(sizes.sum()), -(-n_features // n_segments)


@pytest.mark.parametrize("n_parties", [None, 9])
def test_protocol_rounds_and_bytes(n_parties):
    X, _ = make_blobs(93, n_features=5, centers=3, random_state=4)
    clients = [X[:20], X[20:51], X[51:]] if n_parties else np.array_split(X, 7)
    d, item = 5, 4  # 4-byte field elements
    est = OmniFCClustering(3, clusterer="kmedoids", n_parties=n_parties, random_state=0)

    def peer(runtime):
        sizes, n, w = _protocol_sizes(runtime, d)
        m_c, m = runtime.n_clients, runtime.n_parties
        # set-up and rounds 1-2: the offset's secure sum among the data clients;
        # round 3: client i's shares, 4 n_i w bytes to each of the m - 1 other parties
        return sum(offset_sum_bytes(m_c, d)["peer"]) + item * w * (m - 1) * n

    def up(runtime):
        _, n, _ = _protocol_sizes(runtime, d)
        # set-up: the bound on |x| (8 bytes) and the bounds around the offset (16 bytes)
        # from every data client; rounds 1-2: the offset's secure sum;
        # round 4: every party's n(n-1)/2 encoded distances, 4 bytes each, in tiles
        m_c = runtime.n_clients
        return (8 + 16 + offset_sum_bytes(m_c, d)["up"]) * m_c + runtime.n_parties * item * n * (
            n - 1
        ) // 2

    def down(runtime):
        _, n, _ = _protocol_sizes(runtime, d)
        # round 1: who dropped from the secure sum, round 2: the mean (8d bytes), to every
        # data client; round 4: the labels of its rows
        m_c = runtime.n_clients
        return (offset_sum_bytes(m_c, d)["down"] + 8 * d) * m_c + n * est.labels_.itemsize

    runtime = check_protocol(est, clients, rounds=4, bytes_up=up, bytes_down=down, bytes_peer=peer)
    report = runtime.ledger.report()
    assert report["setup_rounds"] == 3
    assert runtime.n_parties == (9 if n_parties else 7)
    # every party's upload is its own encoded distances; data-less parties send nothing else
    per = report["per_client"]
    for j in range(runtime.n_clients, runtime.n_parties):
        assert per["bytes_up"][j] == item * 93 * 92 // 2
        assert per["bytes_peer_sent"][j] == 0 and per["bytes_down"][j] == 0
    tags = {(m.tag, m.sender == "server") for m in runtime.ledger.messages}
    assert tags == {
        ("bound on |x|", False),
        ("secure sum: pairwise seeds", False),
        ("secure sum: masked vectors", False),
        ("secure sum: who uploaded", True),
        ("secure sum: unmasking", False),
        ("offset", True),
        ("bounds around offset", False),
        ("LCC share", False),
        ("encoded distances", False),
        ("labels", True),
    }


def test_data_less_parties_never_hold_raw_data():
    X, _ = make_blobs(60, n_features=4, centers=3, random_state=5)
    clients = [X[:25], X[25:40], X[40:]]
    with recording_runtime() as runtimes:
        est = OmniFCClustering(3, clusterer="kmedoids", n_parties=8, random_state=0).fit(clients)
    states = runtimes[-1].private_states()
    q, p = est.precision_, est.prime
    residues = quantize(X, q, p, 2, est.offset_)
    segments = [residues[:, :2], residues[:, 2:]]
    for party in range(3, 8):
        state = states[party]
        # its encoded rows and their norms: no rows, bounds, offset or labels of any client
        assert set(state) == {"encoded rows", "row norms"}
        Z = state["encoded rows"]
        assert Z.dtype == np.uint32 and Z.shape == (60, 2)
        for segment in segments:
            # shares are uniform on the field: agreement with a segment is chance (1/p)
            assert np.mean(Z == segment) < 0.05
        assert not np.isin(np.rint(np.ldexp(X, q)).astype(np.int64) % p, Z).all()
    # the data clients keep their encoded rows, never another client's rows; the
    # labels are an output for their own user
    outputs = runtimes[-1].party_outputs()
    for client in range(3):
        assert "encoded rows" in states[client] and "labels" in outputs[client]
        assert states[client]["own share"] is None


def test_labels_go_down_to_each_client_as_its_own_rows():
    X, _ = make_blobs(70, centers=3, random_state=6)
    ids = np.random.RandomState(0).randint(0, 7, len(X))
    with recording_runtime() as runtimes:
        est = OmniFCClustering(3, clusterer="kmeans", random_state=0).fit(X, client_ids=ids)
    runtime = runtimes[-1]
    labels = [m for m in runtime.ledger.messages if m.tag == "labels"]
    assert [m.receiver for m in labels] == list(range(7))
    for client, message in enumerate(labels):
        assert message.nbytes == np.sum(ids == np.unique(ids)[client]) * est.labels_.itemsize
    kept = [outputs["labels"] for outputs in runtime.party_outputs()]
    for client, own in enumerate(kept):
        assert np.array_equal(own, est.labels_[ids == np.unique(ids)[client]])


def test_server_steps_get_only_what_was_sent():
    X, _ = make_blobs(50, centers=3, random_state=7)
    with recording_runtime() as runtimes:
        OmniFCClustering(3, clusterer="kmeans", random_state=0).fit(X)
    runtime = runtimes[-1]
    steps = [name for name, _, _ in runtime.server_inputs]
    # 50 rows: the whole upload is one exchange of tiles
    assert steps == [
        "max_bound_step",
        "unmask_sum",
        "max_bound_step",
        "lcc_decode_tiles_step",
        "omnifc_server_step",
    ]
    for _, (bounds,), _ in (runtime.server_inputs[0], runtime.server_inputs[2]):
        assert bounds.tag in ("bound on |x|", "bounds around offset") and len(bounds) == 7
    # the offset: masked uploads and unmasking shares only (no client's sums)
    _, (uploads, reveals), _ = runtime.server_inputs[1]
    assert (uploads.tag, reveals.tag) == ("secure sum: masked vectors", "secure sum: unmasking")
    _, (distances,), public = runtime.server_inputs[3]
    assert distances.tag == "encoded distances" and len(distances) == 7
    # centred int32 residues of the upper triangle, nothing else
    for tiles in distances.values():
        assert all(t.dtype == np.int32 for t in tiles)
        assert sum(t.size for t in tiles) == 50 * 49 // 2
    # the server steps see public constants only: no row, share, bound or offset
    assert set(public) == {
        "tiles",
        "weights",
        "p",
        "precision",
        "sink",
        "symmetric",
        "progress",
        "n_jobs",
    }
    assert set(runtime.server_inputs[4][2]) == {
        "D",
        "clusterer",
        "clusterer_params",
        "n_clusters",
        "seed",
    }


# --------------------------------------------------------------------------- #
# Offset invariance and predict on the training rows
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("clusterer", ALL_CLUSTERERS)
def test_offset_of_1_7e9_leaves_labels_unchanged(blobs, clusterer):
    X, _ = blobs
    params = {"eps": 0.7} if clusterer == "dbscan" else None
    est = OmniFCClustering(3, clusterer=clusterer, clusterer_params=params, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        near = clone(est).fit(X).labels_
        far = clone(est).fit(X + 1.7e9)
    # the same partition, up to relabelling
    assert adjusted_rand_score(near, far.labels_) == 1.0
    assert np.array_equal(far.predict(X + 1.7e9), far.labels_)


@pytest.mark.parametrize("clusterer", ALL_CLUSTERERS)
def test_predict_on_training_rows_returns_labels(blobs, clusterer):
    X, _ = blobs
    params = {"eps": 0.7} if clusterer == "dbscan" else None
    est = OmniFCClustering(3, clusterer=clusterer, clusterer_params=params, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X)
    assert np.array_equal(est.predict(X), est.labels_)


# --------------------------------------------------------------------------- #
# Both field schemes, progress lines
# --------------------------------------------------------------------------- #
def test_fast_prime_is_exact_at_its_lower_precision(blobs):
    X, _ = blobs
    default = OmniFCClustering(3, clusterer="kmedoids", random_state=0).fit(X)
    fast = OmniFCClustering(3, clusterer="kmedoids", prime=FAST_PRIME, random_state=0).fit(X)
    assert default.prime == DEFAULT_PRIME == 2**30 - 35
    # both are exact for their own quantization; the fast prime has 3-4 bits less room
    for est in (default, fast):
        assert np.array_equal(est.dissimilarity_matrix_, exact_sq(X, X, est.precision_))
    assert default.precision_ - fast.precision_ in (3, 4)
    assert np.array_equal(default.labels_, fast.labels_)


def test_default_prime_reaches_the_papers_precision_on_digits():
    """OmniFC's Table 7: RMSE 2e-4 on MNIST; L2-normalised digits here."""
    X = normalize(load_digits().data)
    true = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    rmse = {}
    for prime in (DEFAULT_PRIME, FAST_PRIME):
        D, _ = lcc_squared_distances(np.array_split(X, 7), prime=prime, random_state=0)
        rmse[prime] = np.sqrt(np.mean((D - true) ** 2))
    assert rmse[DEFAULT_PRIME] <= 2e-4
    assert rmse[FAST_PRIME] > 2e-4  # the documented price of the fast option


def test_verbose_2_logs_every_block_of_the_long_stages(blobs, monkeypatch, caplog):
    from skfedclust.secure import _lcc

    monkeypatch.setattr(_lcc, "BLOCK_SIZE", 32)
    X, _ = blobs
    with caplog.at_level(logging.DEBUG, logger="skfedclust"):
        OmniFCClustering(3, random_state=0).fit(X)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    # 120 rows in blocks of 32: 4 block rows, 10 blocks of the upper triangle
    decoding = [m for m in messages if m.startswith("decoding D: block")]
    assert len(decoding) == 10 and decoding[-1].startswith("decoding D: block 10/10")
    # the default spectral clusterer streams: its graph is kept while decoding
    spectral = [m for m in messages if m.startswith("spectral:")]
    assert spectral[0].startswith("spectral: embedding") and spectral[-1] == "spectral: done"
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="skfedclust"):
        OmniFCClustering(
            3,
            random_state=0,
            keep_dissimilarity=False,
            clusterer_params={"gamma": "median", "n_neighbors": None},
        ).fit(X)
    spectral = [r.getMessage() for r in caplog.records if r.getMessage().startswith("spectral:")]
    assert any("dense affinity: block" in m for m in spectral)
    assert any("median of the distances: block" in m for m in spectral)
    assert spectral[-1] == "spectral: done"


def test_memory_guard_counts_the_parties_shares(monkeypatch):
    # 120 rows: D is 112.5 KiB, but 7 parties' shares of 2000 features are about
    # 3.2 MiB (with the tiles' scratch and two exchanges of messages, above 4 MiB)
    X = np.random.RandomState(8).rand(120, 2000)
    monkeypatch.setenv(AVAILABLE_MEMORY_ENV, str(4 * 2**20))
    with pytest.raises(MemoryError, match="n=120 rows need about"):
        OmniFCClustering(3, clusterer="kmedoids").fit(X)
    OmniFCClustering(3, clusterer="kmedoids").fit(X[:, :2])


# --------------------------------------------------------------------------- #
# Nothing secret in the model; private randomness
# --------------------------------------------------------------------------- #
def _shares_of(runtime):
    """Every party's encoded rows (its shares of every training row)."""
    return [state["encoded rows"] for state in runtime.private_states()]


def test_the_server_model_holds_no_share_and_cannot_predict(blobs):
    X, _ = blobs
    with recording_runtime() as runtimes:
        est = OmniFCClustering(3, clusterer="kmedoids", random_state=0).fit(X)
    shares = _shares_of(runtimes[-1])
    assert len(shares) == 7 and all(z.shape == (120, 1) for z in shares)
    # The in-process model carries its simulated parties, shares included.
    assert any(z.tobytes() in pickle.dumps(est) for z in shares)
    server = est.server_model()
    blob = pickle.dumps(server)
    for z in shares:
        # no party's shares, nor any run of 8 of its rows, are in the server's copy
        assert z.tobytes() not in blob
        for start in range(0, 120, 8):
            assert z[start : start + 8].tobytes() not in blob
    # the fitted attributes hold no share either (only public values and D)
    for value in vars(server).values():
        if isinstance(value, np.ndarray) and value.dtype == np.uint32:
            assert not any(np.array_equal(value, z) for z in shares)
    # the server's copy keeps what derives from D and refuses predict, naming
    # what it still has
    for other in (server, pickle.loads(blob)):
        assert np.array_equal(other.labels_, est.labels_)
        assert np.array_equal(other.dissimilarity_matrix_, est.dissimilarity_matrix_)
        with pytest.raises(RuntimeError, match="server's copy.*labels_, dissim"):
            other.predict(X[:10])


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_pickled_or_copied_model_predicts_the_same_labels(blobs, how):
    X, _ = blobs
    est = OmniFCClustering(3, clusterer="kmedoids", random_state=0).fit(X)
    expected = est.predict(X[:10])
    assert np.array_equal(expected, est.labels_[:10])
    other = pickle.loads(pickle.dumps(est)) if how == "pickle" else copy.deepcopy(est)
    assert np.array_equal(other.predict(X[:10]), expected)
    new = X[:10] + 0.05
    assert np.array_equal(other.predict(new), est.predict(new))


def test_same_random_state_same_fit_other_private_entropy_other_shares(blobs):
    X, _ = blobs

    def fit(**runtime_kwargs):
        def factory(federation, **kwargs):
            return RecordingRuntime(federation, **{**kwargs, **runtime_kwargs})

        with use_runtime(factory):
            RecordingRuntime.instances = []
            est = OmniFCClustering(3, clusterer="kmeans", random_state=0).fit(X)
        return est, _shares_of(RecordingRuntime.instances[-1])

    first, shares = fit()
    again, shares_again = fit()
    other, other_shares = fit(private_entropy=[12345])
    # reproducible: the private streams derive from random_state in a simulation
    assert all(np.array_equal(a, b) for a, b in zip(shares, shares_again))
    assert np.array_equal(first.labels_, again.labels_)
    # other private entropy: other noise, the same exact D, hence the same labels
    assert not any(np.array_equal(a, b) for a, b in zip(shares, other_shares))
    for est in (again, other):
        assert np.array_equal(est.dissimilarity_matrix_, first.dissimilarity_matrix_)
        assert np.array_equal(est.labels_, first.labels_)
        assert est.communication_["bytes_total"] == first.communication_["bytes_total"]


def test_default_spectral_with_one_cluster_per_row():
    X, _ = make_blobs(14, centers=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        est = OmniFCClustering(14, random_state=0).fit(X)
    assert sorted(est.labels_) == list(range(14))


# --------------------------------------------------------------------------- #
# Streamed decoding into a neighbour graph
# --------------------------------------------------------------------------- #
def _tied_with_duplicates(n=300, copies=0, seed=0):
    X, _ = make_blobs(n, centers=4, n_features=4, random_state=seed)
    # rounded: many exactly tied distances, so the tie rule matters
    X = np.round(X, 1)
    if copies:
        X = np.vstack([X, np.repeat(X[:3], copies, axis=0)])
    return X


def _reference_affinity(X, q, k=10, gamma="median"):
    """The k-NN affinity of the exact squared distances: ties to the lowest row."""
    from skfedclust.methods._omnifc_cluster import distinct_rows, knn_affinity, nearest_columns

    D = exact_sq(X, X, q)
    if gamma == "median":
        gamma = 1.0 / np.median(D[np.triu_indices(len(D), 1)][D[np.triu_indices(len(D), 1)] > 0])
    rows = distinct_rows(D).rows
    sub = D[np.ix_(rows, rows)]
    np.fill_diagonal(sub, np.inf)
    idx = nearest_columns(sub, k)
    # the lowest index among ties, checked against a stable sort of (distance, index)
    stable = np.argsort(sub, axis=1, kind="stable")[:, :k]
    assert np.array_equal(np.sort(stable, axis=1), idx)
    return knn_affinity(idx, np.take_along_axis(sub, idx, axis=1), gamma)


def _same_sparse(A, B):
    A, B = sp.csr_array(A), sp.csr_array(B)
    A.sort_indices()
    B.sort_indices()
    return (
        np.array_equal(A.indptr, B.indptr)
        and np.array_equal(A.indices, B.indices)
        and np.array_equal(A.data, B.data)
    )


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("copies", [0, 4])
@pytest.mark.parametrize("block", [512, 48])
def test_streamed_graph_equals_the_graph_of_the_exact_distances(
    copies, block, compiled, monkeypatch
):
    from skfedclust.secure import _kernels, _lcc

    # small blocks: many tiles on both threads, rows meeting their copies off the diagonal
    monkeypatch.setattr(_lcc, "BLOCK_SIZE", block)
    # the compiled passes (every tile of a large fit) or their NumPy twins
    monkeypatch.setattr(_kernels, "COMPILED_MIN_ELEMENTS", 0 if compiled else 1 << 62)
    X = _tied_with_duplicates(copies=copies)
    est = OmniFCClustering(4, random_state=0).fit(X)
    assert not hasattr(est, "dissimilarity_matrix_")
    A = est.clusterer_.affinity_matrix_
    assert sp.issparse(A)
    assert _same_sparse(A, _reference_affinity(X, est.precision_))


@pytest.mark.parametrize(
    "clusterer, params",
    [
        ("spectral", None),
        ("spectral", {"n_neighbors": 4}),
        ("spectral", {"gamma": 0.5, "n_neighbors": 7}),
        ("spectral", {"n_neighbors": 400}),  # every distinct row: the dense kernel
        ("dbscan", None),
        ("dbscan", {"eps": 0.8, "min_samples": 4}),
    ],
)
@pytest.mark.parametrize("copies", [0, 5])
def test_streamed_labels_equal_the_dense_path(clusterer, params, copies, monkeypatch):
    from skfedclust.methods._omnifc_cluster import server_cluster
    from skfedclust.secure import _lcc

    monkeypatch.setattr(_lcc, "BLOCK_SIZE", 64)

    X = _tied_with_duplicates(copies=copies)
    streamed = OmniFCClustering(
        4, clusterer=clusterer, clusterer_params=params, random_state=0
    ).fit(X)
    kept = OmniFCClustering(
        4, clusterer=clusterer, clusterer_params=params, random_state=0, keep_dissimilarity=True
    ).fit(X)
    D = kept.dissimilarity_matrix_
    assert np.array_equal(D, exact_sq(X, X, kept.precision_))
    _, dense = server_cluster(D, clusterer, params, 4, 0)
    assert np.array_equal(streamed.labels_, dense)
    assert np.array_equal(kept.labels_, dense)
    # predict needs no D: the training rows get their labels back
    assert np.array_equal(streamed.predict(X), streamed.labels_)


def test_a_second_pass_settles_the_median_and_crowded_neighbour_lists(monkeypatch, caplog):

    # a tiny sample and window: the median falls outside the window
    monkeypatch.setattr(_lcc_sinks, "MEDIAN_SAMPLE", 50)
    monkeypatch.setattr(_lcc_sinks, "MEDIAN_WINDOW", 4)
    # 40 copies of three rows crowd every neighbour list of 2 * 3 entries
    X = _tied_with_duplicates(n=200, copies=40)
    with caplog.at_level(logging.INFO, logger="skfedclust"):
        est = OmniFCClustering(
            4, clusterer_params={"n_neighbors": 3}, random_state=0, keep_dissimilarity=False
        ).fit(X)
    assert any("second pass" in r.getMessage() for r in caplog.records)
    assert _same_sparse(est.clusterer_.affinity_matrix_, _reference_affinity(X, est.precision_, 3))
    # the second pass is a second upload of every tile, counted
    once = OmniFCClustering(4, clusterer="kmedoids", random_state=0).fit(X)
    n = len(X)
    extra = est.communication_["bytes_up"] - once.communication_["bytes_up"]
    assert extra == 7 * 4 * n * (n - 1) // 2


@pytest.mark.parametrize("spread", [True, False])
def test_the_median_sample_spans_the_matrix_when_rows_come_by_client(spread, monkeypatch):
    from skfedclust.secure import _lcc

    # 16-row blocks, rectangles of several tiles, a sample of about six tiles
    monkeypatch.setattr(_lcc, "BLOCK_SIZE", 16)
    monkeypatch.setattr(_lcc, "MIN_EXCHANGE_BYTES", 4 * 7 * 16 * 16 * 9)
    monkeypatch.setattr(_lcc_sinks, "MEDIAN_SAMPLE", 6 * 16 * 16)
    if not spread:
        # the plan without its spread first tiles: the first rectangles alone
        monkeypatch.setattr(_lcc, "_sample_tiles", lambda rectangles, symmetric: {})
    # Non-IID rows in client order: ten groups, one after the other (as
    # clients that each hold a few classes). The first rectangles hold
    # distances within the first groups only; most pairs are between groups.
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 3, size=(10, 5))
    X = np.concatenate([rng.normal(c, 1.0, size=(60, 5)) for c in centers])
    D = ((X[:, None] - X[None]) ** 2).sum(axis=2)
    n = len(X)
    upper = np.triu_indices(n, 1)
    # the values the streaming median keeps as its sample: the first tiles' entries
    sample, tiles = [], [t for e in _lcc.tile_exchanges(n, n, 7, symmetric=True) for t in e]
    for a0, a1, b0, b1 in tiles:
        block = D[a0:a1, b0:b1]
        sample += list(block[np.triu_indices(a1 - a0, 1)] if a0 == b0 else block.ravel())
        if len(sample) >= _lcc_sinks.MEDIAN_SAMPLE:
            break
    # where the sample's median falls among all pairs (0.5: a fair sample)
    rank = np.mean(D[upper] < np.median(sample))
    if spread:
        assert abs(rank - 0.5) < 0.1
    else:
        assert abs(rank - 0.5) > 0.25
    # Either plan still sends every tile once.
    assert sorted(tiles) == sorted(
        (a, min(a + 16, n), b, min(b + 16, n)) for a in range(0, n, 16) for b in range(a, n, 16)
    )


@pytest.mark.parametrize("sample, window", [(2**22, 2**23), (100, 2**20), (100, 8)])
def test_streaming_median_is_exact(sample, window, monkeypatch):

    # all values kept; a window that holds the median; one that misses it (a recount)
    monkeypatch.setattr(_lcc_sinks, "MEDIAN_SAMPLE", sample)
    monkeypatch.setattr(_lcc_sinks, "MEDIAN_WINDOW", window)
    rng = np.random.default_rng(0)
    for size in (1, 2, 101, 5000, 5001):
        values = rng.permutation(rng.integers(1, 2**20, size=size))
        med = _lcc_sinks._StreamingMedian(2**29)
        passes = 1
        for chunk in np.array_split(values, 7):
            med.add(chunk)
        if not med.settle(0.25):
            passes += 1
            for chunk in np.array_split(values, 5):
                med.add(chunk)
            assert med.settle(0.25)
        assert med.result == np.median(values * 0.25)
        # the window is opened from the first chunks: it misses the median of all
        assert passes == (2 if window == 8 and size > 7 * sample else 1)


def test_memory_of_the_streamed_fit_does_not_grow_with_n_squared():
    from skfedclust.secure._lcc import LCCSetup
    from skfedclust.secure._lcc_sinks import neighbour_sink_bytes

    setup = LCCSetup(
        n_clients=7, n_features=784, n_segments=2, n_colluders=2, prime=2**30 - 35, n_parties=None
    )
    n = 200_000
    streamed = setup.decoding_bytes(n, streamed=True) + neighbour_sink_bytes(
        n, n_neighbors=10, median=True
    )
    # the parties' shares (in a simulation) dominate: 7 n (4 w + 8) bytes
    assert streamed < 3 * 2**30
    assert streamed < 0.01 * 8 * n * n


def test_memory_guard_names_the_streaming_clusterers(blobs, monkeypatch):
    X, _ = blobs
    monkeypatch.setenv(AVAILABLE_MEMORY_ENV, str(2**20))
    with pytest.raises(MemoryError, match="clusterer='spectral'.*clusterer='dbscan'"):
        OmniFCClustering(3, clusterer="kmedoids").fit(X)


# --------------------------------------------------------------------------- #
# What each downstream clusterer is fed: sqrt(D) or D, as its method requires
# --------------------------------------------------------------------------- #
# The server holds squared distances D. Each test below fails if a clusterer gets D
# where it needs sqrt(D), or the reverse: the data are chosen where the two differ.
def _quantized(X, q):
    return np.ldexp(np.rint(np.ldexp(X, q)), -q)


@pytest.mark.parametrize("method", ["ward", "single", "average", "complete"])
def test_linkage_merge_heights_are_scipys_on_the_plain_data(blobs, method):
    X, _ = blobs
    est = OmniFCClustering(4, clusterer="agglomerative", clusterer_params={"linkage": method})
    est.fit(X)
    # scipy's linkage of the rows themselves, as the server's distances are exact
    # for the rows quantized at the fit's precision.
    central = linkage(_quantized(X, est.precision_), method)
    np.testing.assert_allclose(est.clusterer_.linkage_matrix_[:, 2], central[:, 2], rtol=1e-9)
    # Heights on the squared distances would be other numbers altogether.
    assert central[-1, 2] > 2 and not np.allclose(central[:, 2] ** 2, central[:, 2], rtol=0.1)


@pytest.mark.parametrize(
    "spacing, eps",
    # eps between the distance d of neighbouring rows and d**2, on both sides of 1.
    [(0.5, 0.4), (2.0, 3.0)],
    ids=["d<1", "d>1"],
)
@pytest.mark.parametrize("how", ["named", "custom"])
def test_dbscan_radius_is_a_plain_distance(spacing, eps, how):
    # Three rows of points, evenly spaced along x, far apart in y.
    X = np.array([[spacing * i, 100.0 * r] for r in range(3) for i in range(6)])
    central = DBSCAN(eps=eps, min_samples=3).fit(X).labels_
    on_squares = DBSCAN(eps=eps, min_samples=3, metric="sqeuclidean").fit(X).labels_
    assert adjusted_rand_score(central, on_squares) < 1  # the data tell them apart
    if how == "named":
        params = {"clusterer": "dbscan", "clusterer_params": {"eps": eps, "min_samples": 3}}
    else:
        params = {"clusterer": DBSCAN(eps=eps, min_samples=3, metric="precomputed")}
    # Three data holders and four share holders: LCC decoding needs seven parties.
    est = OmniFCClustering(n_parties=7, **params).fit([X[:6], X[6:12], X[12:]])
    np.testing.assert_array_equal(est.labels_, central)


@pytest.mark.parametrize("duplicate", [False, True], ids=["distinct", "a-duplicate-row"])
@pytest.mark.parametrize("params", [{}, {"method": "pam", "init": "build"}], ids=["alt", "pam"])
def test_kmedoids_medoid_minimises_the_sum_of_plain_distances(duplicate, params):
    # Per cluster, x in {0, 1, 2, 3, 12} (and a second 2): the sum of distances is
    # smallest at x=2 (14 vs 15 at x=3), the sum of squared distances at x=3 (303 vs
    # 330; with the second 2, 96 vs 106).
    xs = [0.0, 1.0, 2.0, 3.0, 12.0] + ([2.0] if duplicate else [])
    X = np.array([[x, 100.0 * r] for r in range(2) for x in xs])
    est = OmniFCClustering(
        2, clusterer="kmedoids", clusterer_params=params, n_parties=7, random_state=0
    )
    n = len(xs)
    est.fit([X[: n // 2], X[n // 2 : n], X[n : n + n // 2], X[n + n // 2 :]])
    medoids = est.clusterer_.medoid_indices_
    np.testing.assert_array_equal(X[medoids, 0], [2.0, 2.0])
    assert est.clusterer_.inertia_ == pytest.approx(2 * 14.0)
    # The scikit-learn-extra default, on the rows, agrees.
    central = KMedoids(2, **params).fit(X)
    np.testing.assert_array_equal(X[central.medoid_indices_, 0], [2.0, 2.0])


@pytest.mark.parametrize("kind", ["sqeuclidean", "euclidean"])
@pytest.mark.parametrize("clusterer", ["kmeans", "fcm"])
def test_feature_methods_cluster_the_rows_of_the_chosen_dissimilarity(blobs, kind, clusterer):
    X, _ = blobs
    X = 5 * X  # squared distances in the hundreds: far from their square roots
    est = OmniFCClustering(
        3, clusterer=clusterer, clusterer_params={"feature_dissimilarity": kind}, random_state=0
    ).fit(X)
    D = exact_sq(X, X, est.precision_)
    features = D if kind == "sqeuclidean" else np.sqrt(D)
    centers = est.clusterer_.cluster_centers_
    if clusterer == "kmeans":
        # k-means centers are the means of the feature rows of each cluster.
        expected = np.array([features[est.labels_ == j].mean(axis=0) for j in range(3)])
        np.testing.assert_allclose(centers, expected, rtol=1e-9, atol=1e-9 * features.max())
    else:
        # Fuzzy c-means centers are the u**m-weighted means of the feature rows (to the
        # memberships' tolerance).
        um = est.clusterer_.u_**est.clusterer_.m
        expected = (um.T @ features) / um.sum(axis=0)[:, None]
        np.testing.assert_allclose(centers, expected, rtol=1e-3, atol=1e-3 * features.max())
    # New rows are labelled by the nearest center in the same feature space.
    new = (X[:40] + X[40:80]) / 2  # inside the public bounds of the fit
    D_new = exact_sq(new, X, est.precision_)
    new_features = D_new if kind == "sqeuclidean" else np.sqrt(D_new)
    nearest = np.argmin(((new_features[:, None, :] - centers[None]) ** 2).sum(-1), axis=1)
    np.testing.assert_array_equal(est.predict(new), nearest)


def test_nmf_factorises_the_squared_distances(blobs, monkeypatch):
    from sklearn.decomposition import NMF

    import skfedclust.methods._omnifc_cluster as server

    class Spy(NMF):
        def fit_transform(self, X, y=None, W=None, H=None):
            Spy.received = np.array(X)
            return super().fit_transform(X, y, W=W, H=H)

    monkeypatch.setattr(server, "NMF", Spy)
    X, _ = blobs
    X = 5 * X
    est = OmniFCClustering(3, clusterer="nmf", random_state=0).fit(X)
    D = exact_sq(X, X, est.precision_)
    # D scaled by a power of two (exactly), not sqrt(D).
    ratio = Spy.received[D > 0] / D[D > 0]
    assert np.all(ratio == ratio[0]) and np.log2(ratio[0]).is_integer()


def test_affinity_propagation_gets_the_negative_squared_distances(blobs):
    from sklearn.cluster import AffinityPropagation

    X, _ = blobs
    X = 5 * X
    ap = AffinityPropagation(affinity="precomputed", random_state=0)
    est = OmniFCClustering(clusterer=ap).fit(X)
    # scikit-learn's default similarity is -||x - y||**2, and its preference the median.
    central = AffinityPropagation(random_state=0).fit(_quantized(X, est.precision_))
    np.testing.assert_array_equal(est.labels_, central.labels_)
    on_plain = AffinityPropagation(affinity="precomputed", random_state=0)
    on_plain.fit(-np.sqrt(exact_sq(X, X, est.precision_)))
    assert len(on_plain.cluster_centers_indices_) != len(central.cluster_centers_indices_)


@pytest.mark.parametrize("clusterer", ["dbscan", "spectral"])
def test_new_rows_vote_with_plain_distances(blobs, clusterer, monkeypatch):
    import skfedclust.methods._omnifc as omnifc

    votes = []

    def spy(distances, labels, n_neighbors):
        votes.append(np.array(distances))
        return vote(distances, labels, n_neighbors)

    vote = omnifc.nearest_neighbour_vote
    monkeypatch.setattr(omnifc, "nearest_neighbour_vote", spy)
    X, _ = blobs
    X = 5 * X  # squared distances far from their square roots
    params = {"eps": 3.5, "min_samples": 4} if clusterer == "dbscan" else None
    est = OmniFCClustering(3, clusterer=clusterer, clusterer_params=params, random_state=0)
    est.fit(X)
    new = (X[:6] + X[6:12]) / 2  # inside the public bounds of the fit
    est.predict(new)
    (received,) = votes
    # The distance-weighted vote (weights 1/d) on Euclidean distances, as scikit-learn's
    # KNeighborsClassifier(weights="distance") has them.
    q = est.precision_
    expected = np.sqrt(exact_sq(new, X, q))
    np.testing.assert_allclose(received, expected, rtol=1e-9)
