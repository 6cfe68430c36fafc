"""OmniFC's server side: a centralized clusterer on the decoded distance matrix or graph.

What the server of OmniFC (Yan, Liu & Zhang) runs once it holds the exact
squared distances: k-means, fuzzy c-means or NMF on the rows of ``D``,
spectral clustering on a Gaussian or neighbour-graph affinity, k-medoids,
DBSCAN, agglomerative linkage, or a user's estimator; on the dense matrix or
on the neighbour graph a streamed round keeps. No message, no client step:
:mod:`skfedclust.methods._omnifc` runs the protocol.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from sklearn.base import clone
from sklearn.cluster import DBSCAN, AffinityPropagation, KMeans, SpectralClustering
from sklearn.decomposition import NMF
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import has_fit_parameter

from ..clusterers import FuzzyCMeans, HierarchicalLinkage, KMedoids
from ..clusterers._spectral import choose_eigen_solver
from ..federation import logger

CLUSTERERS = ("kmeans", "fcm", "nmf", "spectral", "kmedoids", "dbscan", "agglomerative")
#: Methods that use the rows of D as a feature vector per sample (the paper's
#: "D as a proxy for the raw features").
FEATURE_METHODS = ("kmeans", "fcm", "nmf")
#: Neighbours of the vote that labels new rows for graph- and density-based methods.
N_VOTE_NEIGHBORS = 5
#: Restarts of k-means and fuzzy c-means unless ``clusterer_params`` says otherwise.
DEFAULT_RESTARTS = 10
#: Neighbours of every row in the default spectral affinity (scikit-learn's
#: default for its nearest-neighbours affinity).
DEFAULT_N_NEIGHBORS = 10
#: Peak number of dense n x n float64 matrices alive during fit, D included
#: (tracemalloc at n = 2000, rounded up; see test_peak_memory_of_fit).
PEAK_COPIES = {
    "spectral": 1.9,
    "dense spectral": 5.1,
    "kmeans": 3.1,
    "fcm": 1.8,
    "nmf": 4.1,
    "kmedoids": 2.2,
    # DBSCAN's neighbour lists reach n**2 indices when eps covers most pairs
    "dbscan": 3.4,
    "agglomerative": 2.6,
    "custom": 5.1,
}
#: Precisions at which every clusterer's arithmetic on D stays within float64:
#: D lies in [4**-q, 2**30 * 4**-q], so its squares and sums neither overflow
#: nor vanish.
CLUSTERING_PRECISION_RANGE = (-200, 200)


def check_clustering_range(precision):
    """Refuse a precision whose distances the clusterers cannot handle in float64."""
    low, high = CLUSTERING_PRECISION_RANGE
    if low <= precision <= high:
        return
    scale = "large" if precision < low else "small"
    raise ValueError(
        f"the squared distances of this data are too {scale} to cluster in float64: at the "
        f"precision q={precision} the field needs for its spread, they are integers times "
        f"4**{-precision}, and the clusterers square and sum them. Rescale the data so that "
        f"its spread is between about 2**{10 - high} and 2**{10 - low}."
    )


def _spectral_is_sparse(params):
    params = params or {}
    gamma = params.get("gamma", "median")
    default = DEFAULT_N_NEIGHBORS if isinstance(gamma, str) else None
    return params.get("n_neighbors", default) is not None


# --------------------------------------------------------------------------- #
# Server side: what each clusterer is fed
# --------------------------------------------------------------------------- #
def server_cluster(D, clusterer, params, n_clusters, seed):
    """Server step: run the centralized clusterer on the decoded squared distances.

    Identical rows (an exact zero in ``D``) are one point for the spectral,
    feature-based, k-medoids and custom clusterers: they are clustered once,
    with their multiplicity as a weight where the algorithm has one, and
    share its label. DBSCAN and the linkages keep identical rows together on
    their own, and see every row so that they equal the centralized method.

    Returns
    -------
    estimator : estimator
        The fitted clusterer.
    labels : ndarray of shape (n_samples,)
        Label of every row of ``D``.
    """
    params = dict(params or {})
    if not isinstance(clusterer, str):
        return _custom_clusterer(D, clusterer, params)
    if clusterer in FEATURE_METHODS:
        return _feature_clusterer(D, clusterer, params, n_clusters, seed)
    if clusterer == "spectral":
        return _spectral_clusterer(D, params, n_clusters, seed)
    if clusterer == "kmedoids":
        return _kmedoids_clusterer(D, params, n_clusters, seed)
    euclidean = np.sqrt(D)
    if clusterer == "dbscan":
        est = DBSCAN(metric="precomputed", **params).fit(euclidean)
    else:
        est = HierarchicalLinkage(n_clusters=n_clusters, **params).fit(euclidean)
    return est, est.labels_


def _kmedoids_clusterer(D, params, n_clusters, seed):
    params.setdefault("random_state", seed)
    est = KMedoids(n_clusters=n_clusters, metric="precomputed", **params)
    distinct = distinct_rows(D)
    if distinct.all_distinct:
        est.fit(np.sqrt(D))
        return est, est.labels_
    if too_few_distinct_rows(distinct, n_clusters):
        return None, distinct.inverse
    # Identical rows as one weighted row: otherwise the heuristic start picks
    # several copies of the same row as medoids, and their clusters stay empty.
    est.fit(np.sqrt(D[np.ix_(distinct.rows, distinct.rows)]), sample_weight=distinct.counts)
    # report the medoids as rows of D, which is what predict measures against
    est.medoid_indices_ = distinct.rows[est.medoid_indices_]
    return est, est.labels_[distinct.inverse]


class DistinctRows(NamedTuple):
    """Groups of identical rows of a distance matrix.

    Attributes
    ----------
    rows : ndarray of shape (n_distinct,)
        First row of every group, increasing.
    inverse : ndarray of shape (n_samples,)
        Group of every row: ``rows[inverse]`` is the first row identical to it.
    counts : ndarray of shape (n_distinct,)
        Rows in every group.
    """

    rows: np.ndarray
    inverse: np.ndarray
    counts: np.ndarray

    @property
    def all_distinct(self):
        return len(self.rows) == len(self.inverse)


def distinct_rows(D):
    """Group the rows of ``D`` whose squared distance is exactly zero.

    The decoded distances are exact integers times ``4**-q``, so a zero means
    the same quantized row, and "distance zero" is an equivalence relation.
    Scanned in blocks of rows, so only a thin boolean slab is allocated.
    """
    n = D.shape[0]
    first = np.empty(n, dtype=np.intp)
    blocks = _row_blocks(n, n)
    for i, block in enumerate(blocks):
        first[block] = np.argmax(D[block] == 0, axis=1)
        _log_block("identical rows", i, blocks)
    rows = np.flatnonzero(first == np.arange(n))
    inverse = np.searchsorted(rows, first)
    return DistinctRows(rows, inverse, np.bincount(inverse, minlength=len(rows)))


def _row_blocks(n_rows, n_cols, budget=2**20):
    """Row slices whose ``n_cols``-wide slab stays within ``budget`` elements."""
    size = max(1, budget // max(n_cols, 1))
    return [slice(a, min(a + size, n_rows)) for a in range(0, n_rows, size)]


def _log_block(what, i, blocks):
    """A DEBUG progress line of a server stage that runs block by block of rows."""
    logger.debug(
        "%s: block %d/%d (rows %d:%d)", what, i + 1, len(blocks), blocks[i].start, blocks[i].stop
    )


def too_few_distinct_rows(distinct, n_clusters):
    """Whether there are fewer distinct rows than clusters (then each is its own cluster).

    Identical rows cannot be split, so the clustering is the groups of
    identical rows themselves; the clusterer is not run. Warns like
    scikit-learn's ``KMeans`` does in the same situation.
    """
    n_distinct = len(distinct.rows)
    if n_clusters is None or n_distinct >= n_clusters:
        return False
    warnings.warn(
        f"Number of distinct rows ({n_distinct}, after quantization) is smaller than "
        f"n_clusters ({n_clusters}): every group of identical rows is one cluster.",
        ConvergenceWarning,
        stacklevel=3,
    )
    return True


# ------------------------------------------------------- feature methods
def _feature_clusterer(D, clusterer, params, n_clusters, seed):
    kind = params.pop("feature_dissimilarity", "sqeuclidean")
    distinct = distinct_rows(D)
    if too_few_distinct_rows(distinct, n_clusters):
        return None, distinct.inverse
    features = _distance_features(D if distinct.all_distinct else D[distinct.rows], kind)
    weights = None if distinct.all_distinct else distinct.counts.astype(np.float64)
    params.setdefault("random_state", seed)
    if clusterer == "nmf":
        est = NMF(n_components=n_clusters, **params)
        labels = np.argmax(est.fit_transform(_nmf_input(features, weights)), axis=1)
    else:
        # A single k-means or FCM start often stops in a poor optimum on these
        # n-dimensional features (Iris: 2 of 10 seeds at Kappa 0.25-0.29 with one
        # start, every seed at 0.96 with ten).
        params.setdefault("n_init", DEFAULT_RESTARTS)
        cls = KMeans if clusterer == "kmeans" else FuzzyCMeans
        est = cls(n_clusters=n_clusters, **params).fit(features, sample_weight=weights)
        labels = est.labels_
    return est, np.asarray(labels)[distinct.inverse]


def _nmf_input(features, weights):
    """Rows of the feature matrix as NMF gets them: weighted, and scaled to about 1.

    NMF's Frobenius loss of a row repeated ``c`` times equals the loss of the
    row scaled by ``sqrt(c)``, whose largest component is the same. scikit-
    learn's NMF truncates its initialisation below an absolute ``1e-6``, so
    the features are scaled by a power of two (exact) to a largest entry in
    ``[0.5, 1)``: the labels then do not depend on the units of the data.
    """
    largest = float(features.max()) if features.size else 0.0
    exponent = math.frexp(largest)[1] if largest > 0 else 0
    scaled = np.ldexp(features, -exponent)
    if weights is not None:
        scaled *= np.sqrt(weights)[:, None]
    return scaled


def _distance_features(D, kind):
    if kind == "sqeuclidean":
        return D
    if kind == "euclidean":
        return np.sqrt(D)
    raise ValueError(f"feature_dissimilarity must be 'sqeuclidean' or 'euclidean', got {kind!r}")


# --------------------------------------------------------------- spectral
def median_gamma(D):
    """``1 / median`` of the nonzero squared distances: the kernel width heuristic.

    The median distance is the classic scale of an rbf kernel (the "median
    heuristic"): ``exp(-D / median)`` is ``1/e`` at a typical pair, whatever
    the units of the data. Zeros (identical rows) are left out. Only the upper
    triangle is gathered, row by row, so the scratch is at most half of ``D``.
    """
    n = D.shape[0]
    values = np.empty(n * (n - 1) // 2)
    filled = 0
    blocks = _row_blocks(n, n)
    for b, block in enumerate(blocks):
        for i in range(block.start, min(block.stop, n - 1)):
            row = D[i, i + 1 :]
            nonzero = row[row > 0]
            values[filled : filled + nonzero.size] = nonzero
            filled += nonzero.size
        _log_block("spectral: median of the distances", b, blocks)
    if filled == 0:
        raise ValueError("every squared distance is 0: the rows are identical")
    median = np.median(values[:filled], overwrite_input=True)
    return 1.0 / median


def spectral_affinity(D, rows, *, gamma, n_neighbors):
    """The affinity ``exp(-gamma * D)`` between ``rows``, dense or on a k-NN graph.

    With ``n_neighbors`` the affinity keeps, for every row, only its
    ``n_neighbors`` nearest other rows (symmetrised: a pair is kept if either
    row is among the other's neighbours) and is returned sparse; the graph
    then follows the shape of the data, and outlying rows stay attached to
    their neighbours instead of becoming near-isolated vertices. Without, it
    is the dense rbf kernel of scikit-learn's ``SpectralClustering``. Computed
    in place, block by block: no temporary of the size of ``D``.
    """
    u = len(rows)
    every_row = u == D.shape[0]
    blocks = _row_blocks(u, u)
    if n_neighbors is None or n_neighbors >= u - 1:
        affinity = np.empty((u, u))
        for i, block in enumerate(blocks):
            out = affinity[block]
            source = D[block] if every_row else np.take(D[rows[block]], rows, axis=1)
            np.multiply(source, -gamma, out=out)
            np.exp(out, out=out)
            _log_block("spectral: dense affinity", i, blocks)
        return affinity
    k = int(n_neighbors)
    nearest, distances = [], []
    for i, block in enumerate(blocks):
        slab = D[block].copy() if every_row else D[rows[block]][:, rows]
        local = np.arange(block.start, block.stop)
        slab[local - block.start, local] = np.inf  # not its own neighbour
        idx = nearest_columns(slab, k)
        nearest.append(idx)
        distances.append(np.take_along_axis(slab, idx, axis=1))
        _log_block(f"spectral: {k}-nearest-neighbour affinity", i, blocks)
    return knn_affinity(np.vstack(nearest), np.vstack(distances), gamma)


def nearest_columns(slab, k):
    """Columns of the ``k`` smallest entries of every row, ties to the lowest column.

    The same rule as the streamed graph (:class:`~skfedclust.secure._lcc_sinks.NeighbourSink`
    orders by ``(distance, index)``), so both give one graph. Returned in
    increasing column order.
    """
    kth = np.partition(slab, k - 1, axis=1)[:, k - 1 : k]
    less = slab < kth
    tied = slab == kth
    need = k - less.sum(axis=1, keepdims=True)
    take = less | (tied & (np.cumsum(tied, axis=1) <= need))
    return np.nonzero(take)[1].reshape(slab.shape[0], k)


def knn_affinity(nearest, distances, gamma):
    """The symmetrised sparse affinity ``exp(-gamma * d)`` of a k-nearest-neighbour graph.

    Parameters
    ----------
    nearest : ndarray of int of shape (u, k)
        The neighbours of every vertex.
    distances : ndarray of shape (u, k)
        Their squared distances.
    gamma : float
        Kernel width.

    Returns
    -------
    affinity : scipy.sparse.csr_array of shape (u, u)
        A pair is kept if either vertex is among the other's neighbours.
    """
    u, k = nearest.shape
    # 32-bit indices: scikit-learn's ARPACK path refuses int64 sparse indices
    heads = np.repeat(np.arange(u), k).astype(np.int32)
    tails = nearest.ravel().astype(np.int32)
    weights = np.exp(-gamma * distances.ravel())
    # a neighbour is an edge by construction: keep it even where exp underflows
    values = np.maximum(weights, np.finfo(np.float64).tiny)
    graph = sp.csr_array((values, (heads, tails)), shape=(u, u))
    # D is symmetric, so both directions of a kept pair carry the same value
    graph = graph.maximum(graph.T).tocsr()
    graph.indices = graph.indices.astype(np.int32, copy=False)
    graph.indptr = graph.indptr.astype(np.int32, copy=False)
    return graph


def _spectral_params(params):
    gamma = params.pop("gamma", "median")
    n_neighbors = params.pop("n_neighbors", DEFAULT_N_NEIGHBORS if isinstance(gamma, str) else None)
    if n_neighbors is not None and (
        isinstance(n_neighbors, bool)
        or not isinstance(n_neighbors, numbers.Integral)
        or n_neighbors < 1
    ):
        raise ValueError(f"n_neighbors must be a positive int or None, got {n_neighbors!r}")
    if isinstance(gamma, str):
        if gamma != "median":
            raise ValueError(f"gamma must be 'median' or a positive number, got {gamma!r}")
    elif isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not gamma > 0:
        raise ValueError(f"gamma must be 'median' or a positive number, got {gamma!r}")
    return gamma, n_neighbors


def _spectral_clusterer(D, params, n_clusters, seed):
    gamma, n_neighbors = _spectral_params(params)
    distinct = distinct_rows(D)
    if too_few_distinct_rows(distinct, n_clusters):
        return None, distinct.inverse
    gamma = _check_gamma(gamma, D)
    affinity = spectral_affinity(D, distinct.rows, gamma=gamma, n_neighbors=n_neighbors)
    return _fit_spectral(affinity, gamma, distinct, params, n_clusters, seed)


def _fit_spectral(affinity, gamma, distinct, params, n_clusters, seed):
    _check_affinity_has_edges(affinity, gamma)
    if sp.issparse(affinity) and n_clusters >= affinity.shape[0]:
        # ARPACK cannot return as many eigenvectors as vertices of a sparse
        # graph; scikit-learn falls back to a dense solver only for a dense
        # affinity, which is small here (no more vertices than clusters)
        affinity = affinity.toarray()
    params.setdefault("random_state", seed)
    # None chooses by size: ARPACK's shift-invert factorization fills in on large k-NN graphs
    params["eigen_solver"] = choose_eigen_solver(params.get("eigen_solver"), affinity)
    est = SpectralClustering(n_clusters=n_clusters, affinity="precomputed", **params)
    logger.debug(
        "spectral: embedding (%s) and k-means of the %d-vertex %s graph",
        params["eigen_solver"],
        affinity.shape[0],
        "sparse" if sp.issparse(affinity) else "dense",
    )
    with warnings.catch_warnings():
        if _components_fit_in_clusters(affinity, n_clusters):
            # a k-NN graph of well-separated groups falls apart into them: each
            # component then lies inside a cluster, which is what is wanted
            warnings.filterwarnings("ignore", message="Graph is not fully connected")
        est.fit(affinity)
    logger.debug("spectral: done")
    return est, est.labels_[distinct.inverse]


def _components_fit_in_clusters(affinity, n_clusters):
    if not sp.issparse(affinity):
        return False
    n_components = connected_components(affinity, directed=False, return_labels=False)
    return n_components <= n_clusters


def _check_gamma(gamma, D):
    if isinstance(gamma, str):
        if gamma != "median":
            raise ValueError(f"gamma must be 'median' or a positive number, got {gamma!r}")
        return median_gamma(D)
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not gamma > 0:
        raise ValueError(f"gamma must be 'median' or a positive number, got {gamma!r}")
    return float(gamma)


def _check_affinity_has_edges(affinity, gamma):
    """Refuse an affinity in which some row has weight 0 to every other row.

    Such a row is an isolated vertex: its degree is 0, the normalised
    Laplacian is undefined there and the eigensolver returns noise or fails.
    """
    if affinity.shape[0] < 2:
        return
    degrees = np.asarray(affinity.sum(axis=1)).ravel()
    if not sp.issparse(affinity):
        degrees -= affinity.diagonal()  # exp(0) = 1 on the diagonal is no edge
    isolated = np.flatnonzero(degrees <= 0)
    if isolated.size:
        raise ValueError(
            f"the affinity exp(-gamma * D) is 0 between {isolated.size} of the "
            f"{affinity.shape[0]} distinct rows and every other row (e.g. row "
            f"{isolated[0]}): gamma={gamma:.3g} is too large for these squared distances, so "
            "the graph has isolated vertices and no edges to cluster. Use gamma='median' or "
            "a smaller gamma."
        )


# --------------------------------------------------------------------------- #
# Server side, streamed: clusterers that need each row's neighbours only
# --------------------------------------------------------------------------- #
def streams(clusterer, params):
    """Whether ``clusterer`` runs on the streamed neighbour graph instead of ``D``.

    The spectral clusterer on its k-nearest-neighbour affinity (the default)
    needs every row's nearest rows and the median distance; DBSCAN the rows
    within ``eps``. The others need all of ``D``.
    """
    if clusterer == "dbscan":
        return True
    return clusterer == "spectral" and _spectral_is_sparse(params)


def neighbour_sink_options(clusterer, params):
    """What the server must keep per row for a streaming clusterer (public options)."""
    params = dict(params or {})
    if clusterer == "dbscan":
        # validated before any round: the radius decides what the server keeps
        est = DBSCAN(metric="precomputed", **params)
        est._validate_params()
        return {"radius": float(est.eps)}
    gamma, n_neighbors = _spectral_params(params)
    return {"n_neighbors": int(n_neighbors), "median": isinstance(gamma, str)}


def distinct_from_groups(first):
    """:class:`DistinctRows` from the lowest identical row of every row."""
    rows = np.flatnonzero(first == np.arange(len(first)))
    inverse = np.searchsorted(rows, first)
    return DistinctRows(rows, inverse, np.bincount(inverse, minlength=len(rows)))


def graph_neighbours(graph, distinct, k):
    """The ``k`` nearest distinct rows of every distinct row, from a :class:`NeighbourGraph`.

    Positions among the distinct rows and integer distances, in increasing
    ``(distance, index)`` order: what :func:`nearest_columns` selects on ``D``.
    """
    listed = graph.neighbours[distinct.rows]
    valid = listed >= 0
    safe = np.where(valid, listed, 0)
    if not graph.masked and not distinct.all_distinct:
        # identical rows count once: keep the first of every group, not the own one
        valid &= graph.first[safe] == safe
        valid &= graph.first[safe] != distinct.rows[:, None]
    take = valid & (np.cumsum(valid, axis=1) <= k)
    u = len(distinct.rows)
    if np.any(take.sum(axis=1) != k):
        raise RuntimeError("the streamed neighbour lists are shorter than n_neighbors")
    nearest = np.searchsorted(distinct.rows, listed[take]).reshape(u, k)
    return nearest, graph.distances[distinct.rows][take].reshape(u, k)


def graph_server_cluster(graph, clusterer, params, n_clusters, seed):
    """Server step, streamed: the clusterer on the neighbour graph kept of ``D``.

    Gives the labels :func:`server_cluster` gives on the dense ``D``: the same
    neighbours (ties to the lowest row), the same median, the same
    identical-row groups; DBSCAN gets the sparse graph of the pairs within
    ``eps``, which scikit-learn's DBSCAN treats as the dense matrix.
    """
    params = dict(params or {})
    if clusterer == "dbscan":
        est = DBSCAN(metric="precomputed", **params).fit(graph.radius_graph)
        return est, est.labels_
    gamma, n_neighbors = _spectral_params(params)
    distinct = distinct_from_groups(graph.first)
    if too_few_distinct_rows(distinct, n_clusters):
        return None, distinct.inverse
    if isinstance(gamma, str):
        if graph.median is None:
            raise ValueError("every squared distance is 0: the rows are identical")
        gamma = 1.0 / graph.median
    u = len(distinct.rows)
    k = min(int(n_neighbors), u - 1)
    nearest, ints = graph_neighbours(graph, distinct, k)
    distances = ints * graph.scale
    if n_neighbors >= u - 1:
        # every other distinct row is a neighbour: the dense kernel, as on D
        D = np.zeros((u, u))
        np.put_along_axis(D, nearest, distances, axis=1)
        affinity = np.exp(np.multiply(D, -gamma))
    else:
        affinity = knn_affinity(nearest, distances, gamma)
    return _fit_spectral(affinity, gamma, distinct, params, n_clusters, seed)


def omnifc_graph_server_step(*, graph, clusterer, clusterer_params, n_clusters, seed):
    """Server step: the streaming clusterer on the kept neighbour graph (labels per row)."""
    est, labels = graph_server_cluster(graph, clusterer, clusterer_params, n_clusters, seed)
    return est, np.asarray(labels)


# ---------------------------------------------------------------- custom
def _custom_clusterer(D, clusterer, params):
    est = clone(clusterer)
    if params:
        est.set_params(**params)
    kind = custom_input_kind(est)
    distinct = distinct_rows(D)
    if too_few_distinct_rows(distinct, est.get_params().get("n_clusters")):
        return None, distinct.inverse
    sub = D if distinct.all_distinct else D[np.ix_(distinct.rows, distinct.rows)]
    if kind == "distance":
        X = np.sqrt(sub)
    elif kind == "similarity":
        X = -sub
    else:
        X = np.exp(-est.get_params().get("gamma", 1.0) * sub)
    fit_params = {}
    if not distinct.all_distinct and has_fit_parameter(est, "sample_weight"):
        fit_params["sample_weight"] = distinct.counts.astype(np.float64)
    labels = est.fit_predict(X, **fit_params)
    return est, np.asarray(labels)[distinct.inverse]


def custom_input_kind(est):
    """What a scikit-learn clusterer expects: 'distance', 'affinity' or 'similarity'."""
    params = est.get_params(deep=False)
    if params.get("metric") == "precomputed":
        return "distance"
    if params.get("affinity") == "precomputed_nearest_neighbors":
        return "distance"
    if params.get("affinity") == "precomputed":
        # AffinityPropagation's default similarity is the negative squared distance.
        return "similarity" if isinstance(est, AffinityPropagation) else "affinity"
    raise ValueError(
        f"clusterer {type(est).__name__} must take a precomputed matrix: set "
        "metric='precomputed' (distances) or affinity='precomputed' (affinities)"
    )
