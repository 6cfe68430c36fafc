"""Ng-Jordan-Weiss spectral clustering on a sparse k-nearest-neighbour affinity.

The stage II of FedSC (Qiao, Ding & Fan, "Federated Spectral Clustering via
Secure Similarity Reconstruction", NeurIPS 2023, Section 2 and Appendix D.3),
which is the centralised spectral clustering it is compared with:

1. keep, in every row of a similarity matrix, its ``k = max(ceil(ln n), 1)``
   largest entries (the diagonal included when it ranks), and symmetrise with
   the maximum, ``W = max(S, S^T)`` (:func:`knn_graph`);
2. embed with the ``K`` leading eigenvectors of the normalised affinity
   ``D^-1/2 W D^-1/2`` (the ``K`` smallest of the normalised Laplacian
   ``I - D^-1/2 W D^-1/2``), normalise every row to unit length and run
   k-means on the rows (Ng, Jordan & Weiss, "On spectral clustering: analysis
   and an algorithm", NIPS 2001; :func:`njw_spectral_clustering`).

:func:`knn_kernel_graph` builds the affinity of FedSC's reconstructed kernel
``C^T K(Z, Z) C`` from the factors in row blocks, min-max scaled over all
``n**2`` entries, without ever holding the dense ``n x n`` matrix.

``sklearn.cluster.SpectralClustering`` is not used: its embedding is a
diffusion map without the row normalisation of Ng, Jordan & Weiss.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
from scipy import linalg, sparse
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import ArpackError, ArpackNoConvergence, eigsh
from sklearn.cluster import KMeans
from sklearn.utils import check_array, check_random_state
from threadpoolctl import threadpool_limits

from ._memory import check_dense_memory

__all__ = [
    "knn_graph",
    "knn_kernel_graph",
    "n_neighbors_auto",
    "njw_embedding",
    "njw_spectral_clustering",
]

#: Added to degrees and row norms so that isolated vertices do not divide by 0.
EPS = np.finfo(np.float64).eps

#: Scratch budget of one tile of :func:`knn_kernel_graph`.
BLOCK_BYTES = 2**25

#: Bytes of scratch per entry of a tile: the tile and its partitioned copy
#: (float64) and the candidate mask (bool).
SCRATCH_BYTES_PER_ENTRY = 8 + 8 + 1

#: Up to this many vertices the dense symmetric eigensolver is used: it cannot
#: fail to converge and costs milliseconds there. Beyond, ARPACK on the sparse
#: graph is as fast at a few thousand vertices and much faster above, in O(n k)
#: memory instead of O(n**2).
DENSE_EIGEN_MAX = 500

#: Up to this size the dense eigensolver runs on one BLAS thread (see
#: ``_leading_eigenpairs``).
SERIAL_EIGEN_MAX = 2000

#: Up to this many samples the k-means of the embedding runs on one thread.
SERIAL_KMEANS_MAX = 100_000


def n_neighbors_auto(n_samples):
    """Neighbour count of the kNN sparsification, ``max(ceil(ln n), 1)``.

    The rule of Qiao et al. (2023, Appendix D.3), after von Luxburg's tutorial
    on spectral clustering (2007), with the natural logarithm.

    Parameters
    ----------
    n_samples : int

    Returns
    -------
    n_neighbors : int

    Examples
    --------
    >>> from skfedclust.clusterers._njw import n_neighbors_auto
    >>> n_neighbors_auto(150), n_neighbors_auto(1440), n_neighbors_auto(1)
    (6, 8, 1)
    """
    if not isinstance(n_samples, numbers.Integral) or n_samples < 1:
        raise ValueError(f"n_samples must be an integer >= 1, got {n_samples!r}.")
    return max(math.ceil(math.log(n_samples)), 1)


def _resolve_n_neighbors(n_neighbors, n_samples):
    if isinstance(n_neighbors, str) and n_neighbors == "auto":
        return n_neighbors_auto(n_samples)
    if (
        not isinstance(n_neighbors, numbers.Integral)
        or isinstance(n_neighbors, bool)
        or not 1 <= n_neighbors <= n_samples
    ):
        raise ValueError(
            f"n_neighbors must be 'auto' or an integer in [1, {n_samples}], got {n_neighbors!r}."
        )
    return int(n_neighbors)


def _top_k_per_row(block, k):
    """Column indices of the ``k`` largest entries of every row, ties to the lower index.

    The tie rule of a stable descending sort, without sorting whole rows.
    Returns ``(rows, cols)`` in row-major order, exactly ``k`` per row.
    """
    n_cols = block.shape[1]
    kth = np.partition(block, n_cols - k, axis=1)[:, n_cols - k, None]
    above = block > kth
    tied = block == kth
    n_missing = k - above.sum(axis=1, keepdims=True)
    keep = np.cumsum(tied, axis=1, dtype=np.int32) <= n_missing
    keep &= tied
    keep |= above
    return np.nonzero(keep)


def _symmetric_max_graph(rows, cols, values, n):
    S = sparse.csr_array((values, (rows, cols)), shape=(n, n))
    W = S.maximum(S.T).tocsr()
    W.eliminate_zeros()
    return W


def knn_graph(similarity, *, n_neighbors="auto"):
    """Sparse kNN affinity of a dense similarity matrix, symmetrised with the maximum.

    Every row keeps its ``n_neighbors`` largest entries (the diagonal
    included when it ranks; ties go to the lower column index, as a stable
    sort would), the rest is set to 0, and ``W = max(S, S^T)``.

    Parameters
    ----------
    similarity : array-like of shape (n_samples, n_samples)
        Symmetric similarities, e.g. a Gaussian kernel matrix.
    n_neighbors : 'auto' or int, default='auto'
        ``'auto'`` is :func:`n_neighbors_auto` of ``n_samples``.

    Returns
    -------
    affinity : scipy.sparse.csr_array of shape (n_samples, n_samples)
        Symmetric, with at least ``n_neighbors`` stored entries per row
        (minus exact zeros).

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.clusterers._njw import knn_graph
    >>> S = np.array([[1.0, 0.9, 0.1], [0.9, 1.0, 0.2], [0.1, 0.2, 1.0]])
    >>> knn_graph(S, n_neighbors=2).toarray()
    array([[1. , 0.9, 0. ],
           [0.9, 1. , 0.2],
           [0. , 0.2, 1. ]])
    """
    S = check_array(similarity, dtype=np.float64, input_name="similarity")
    n = S.shape[0]
    if S.shape != (n, n):
        raise ValueError(f"similarity must be square, got shape {S.shape}.")
    k = _resolve_n_neighbors(n_neighbors, n)
    rows, cols = _top_k_per_row(S, k)
    return _symmetric_max_graph(rows, cols, S[rows, cols], n)


def _tile_size(n_samples, block_size):
    """Side of the square tiles of ``knn_kernel_graph``, within ``BLOCK_BYTES``."""
    if block_size is None:
        side = int(np.sqrt(BLOCK_BYTES / SCRATCH_BYTES_PER_ENTRY))
        return max(1, min(n_samples, side))
    if not isinstance(block_size, numbers.Integral) or block_size < 1:
        raise ValueError(f"block_size must be None or an integer >= 1, got {block_size!r}.")
    return int(block_size)


def _update_candidates(state, tile, offset, k, n_cols, transposed=False):
    """Fold a tile into one row block's kept candidates ``state = [values, cols]``.

    The block's rows are the tile's rows, or its columns if ``transposed``
    (comparisons then run along the tile's memory order and only the indices
    are swapped). A row holding ``k`` candidates takes the entries not below
    its ``k``-th value (an equal one may come from a lower column, since tiles
    arrive in any column order); a row holding fewer takes the tile's own
    ``k`` best, ties included. :func:`_merge_candidates` then orders by value
    and column.
    """
    best_values, best_cols = state
    axis = 0 if transposed else 1
    n_new = tile.shape[axis]
    width = min(k, best_values.shape[1] + n_new)
    if best_values.shape[1] == k:
        threshold = best_values[:, -1]
    else:
        k_tile = min(k, n_new)
        threshold = np.take(np.partition(tile, n_new - k_tile, axis=axis), n_new - k_tile, axis)
    mask = tile >= (threshold[None, :] if transposed else threshold[:, None])
    flat = np.flatnonzero(mask)
    if len(flat) == 0:
        return
    i, j = np.divmod(flat, tile.shape[1])
    rows, cols = (j, i) if transposed else (i, j)
    state[:] = _merge_candidates(
        best_values, best_cols, rows, tile.ravel()[flat], cols + offset, width, n_cols
    )


def _merge_candidates(best_values, best_cols, rows, values, cols, width, n_cols):
    """The ``width`` best candidates of every row, by value, ties to the lower column.

    ``best_*`` (one row per block row, possibly 0 columns) are the candidates
    kept so far; ``rows, values, cols`` are new candidates, in any order, with
    no (row, column) pair among the kept ones. Every row must have at least
    ``width`` candidates in all.
    """
    n_rows, n_best = best_values.shape
    all_rows = np.concatenate([np.repeat(np.arange(n_rows), n_best), rows])
    all_values = np.concatenate([best_values.ravel(), values])
    all_cols = np.concatenate([best_cols.ravel(), cols])
    # One sort on the key (row, value rank, column) instead of a three-key
    # lexsort, which is ten times slower.
    distinct, value_rank = np.unique(-all_values, return_inverse=True)
    if n_rows * len(distinct) * n_cols < np.iinfo(np.int64).max:
        key = (all_rows * len(distinct) + value_rank) * n_cols + all_cols
        order = np.argsort(key)
    else:
        order = np.lexsort((all_cols, value_rank, all_rows))
    starts = np.zeros(n_rows, dtype=np.intp)
    np.cumsum(np.bincount(all_rows, minlength=n_rows)[:-1], out=starts[1:])
    take = order[starts[:, None] + np.arange(width)]
    return all_values[take], all_cols[take]


def knn_kernel_graph(coef, kernel_zz, *, n_neighbors="auto", scaling="minmax", block_size=None):
    """kNN affinity of the reconstructed kernel ``C^T K(Z, Z) C``, built in tiles.

    FedSC's server reconstructs the kernel of all samples from the uploaded
    coefficients as ``K_hat = C^T K(Z, Z) C`` (Qiao et al. 2023, Eq. 12). It is
    computed a square tile at a time, the tiles on and above the diagonal only
    (each serves its rows, and transposed its columns); each row keeps its
    ``n_neighbors`` largest values seen so far (the rule of :func:`knn_graph`:
    ties go to the lower column) while the minimum and maximum over all
    ``n**2`` entries are tracked. Once a row holds ``n_neighbors`` candidates,
    a tile only matters for it where it reaches the current
    ``n_neighbors``-th value, which is one comparison per entry. The min-max
    scaling ``(K_hat - min) / (max - min)`` of the paper's experiments is then
    applied to the kept values only, which is exact because the map is
    monotone and affine. Memory is ``O(n k + n d)`` plus one tile; time is
    ``n**2 d`` multiply-adds in matrix products.

    Parameters
    ----------
    coef : array-like of shape (n_components, n_samples)
        Coefficients of all samples, one sample per column, in the global
        order of the graph's vertices.
    kernel_zz : array-like of shape (n_components, n_components)
        ``K(Z, Z)`` of the dictionary the coefficients refer to.
    n_neighbors : 'auto' or int, default='auto'
        ``'auto'`` is :func:`n_neighbors_auto` of ``n_samples``.
    scaling : {'minmax', None}, default='minmax'
        ``'minmax'`` maps the reconstructed kernel onto [0, 1], which makes
        every edge weight non-negative (skipped if the kernel is constant).
        ``None`` keeps the raw values, which can be negative.
    block_size : int, default=None
        Side of the square tiles; ``None`` keeps one tile's scratch near
        32 MiB (``BLOCK_BYTES``).

    Returns
    -------
    affinity : scipy.sparse.csr_array of shape (n_samples, n_samples)
        Symmetric kNN affinity (``max(S, S^T)``).

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.clusterers._njw import knn_graph, knn_kernel_graph
    >>> rng = np.random.default_rng(0)
    >>> C, B = rng.normal(size=(3, 40)), rng.normal(size=(3, 3))
    >>> K_zz = B @ B.T
    >>> W = knn_kernel_graph(C, K_zz, block_size=7)
    >>> K_hat = C.T @ K_zz @ C
    >>> dense = knn_graph((K_hat - K_hat.min()) / (K_hat.max() - K_hat.min()))
    >>> np.allclose(W.toarray(), dense.toarray())
    True
    """
    coef = check_array(coef, dtype=np.float64, input_name="coef")
    kernel_zz = check_array(kernel_zz, dtype=np.float64, input_name="kernel_zz")
    d, n = coef.shape
    if kernel_zz.shape != (d, d):
        raise ValueError(f"kernel_zz must have shape ({d}, {d}), got {kernel_zz.shape}.")
    if scaling not in ("minmax", None):
        raise ValueError(f"scaling must be 'minmax' or None, got {scaling!r}.")
    k = _resolve_n_neighbors(n_neighbors, n)
    if not np.allclose(kernel_zz, kernel_zz.T, rtol=1e-12, atol=0):
        raise ValueError("kernel_zz must be symmetric.")
    side = _tile_size(n, block_size)

    # Row-major copies: every tile is one contiguous (rows x d) @ (d x cols) product.
    left = np.ascontiguousarray(coef.T)  # (n, d)
    right = np.ascontiguousarray(kernel_zz @ coef)  # (d, n): K(Z, Z) C
    starts = range(0, n, side)
    states = [[np.empty((min(side, n - s), 0)), np.empty((min(side, n - s), 0), np.intp)]
              for s in starts]  # fmt: skip
    lo, hi = np.inf, -np.inf
    # K_hat is symmetric: each tile above the diagonal also serves, transposed,
    # the rows of its column block, which halves the matrix products.
    for i, r0 in enumerate(starts):
        for j in range(i, len(starts)):
            c0 = starts[j]
            tile = left[r0 : r0 + side] @ right[:, c0 : c0 + side]
            lo = min(lo, tile.min())
            hi = max(hi, tile.max())
            _update_candidates(states[i], tile, c0, k, n)
            if j != i:
                _update_candidates(states[j], tile, r0, k, n, transposed=True)
    kept_values = np.vstack([state[0] for state in states])
    kept_cols = np.vstack([state[1] for state in states])
    rows = np.repeat(np.arange(n), k)
    values = kept_values.ravel()
    if scaling == "minmax" and hi > lo:
        values = (values - lo) / (hi - lo)
    return _symmetric_max_graph(rows, kept_cols.ravel(), values, n)


def _check_affinity(affinity):
    W = sparse.csr_array(affinity, dtype=np.float64)
    n = W.shape[0]
    if W.shape != (n, n):
        raise ValueError(f"affinity must be square, got shape {W.shape}.")
    if W.nnz and not np.all(np.isfinite(W.data)):
        raise ValueError("affinity contains non-finite values.")
    if W.nnz and W.data.min() < 0:
        raise ValueError(
            "affinity has negative weights; spectral clustering needs non-negative "
            "similarities (e.g. min-max scale the kernel first)."
        )
    return W


def _leading_eigenpairs(A, n_components, eigen_solver, rng):
    n = A.shape[0]
    if eigen_solver == "auto":
        eigen_solver = "dense" if n <= DENSE_EIGEN_MAX else "arpack"
    if eigen_solver == "arpack" and n_components < n - 1:
        # A fixed start vector makes ARPACK reproducible under random_state.
        v0 = rng.uniform(-1, 1, n)
        try:
            return eigsh(A, k=n_components, which="LA", v0=v0)
        except (ArpackNoConvergence, ArpackError):
            warnings.warn(
                "ARPACK did not converge; falling back to the dense eigensolver "
                f"({8 * n * n / 2**20:.0f} MiB).",
                RuntimeWarning,
                stacklevel=3,
            )
    check_dense_memory(
        n,
        n,
        n_copies=2,
        what="The dense eigensolver's copy of the affinity",
        advice="Use eigen_solver='arpack' with a sparser graph (fewer neighbours).",
    )
    dense = A.toarray()
    # The reduction to tridiagonal form is a long chain of small BLAS calls:
    # on a small matrix extra threads only add synchronisation (seconds instead
    # of milliseconds on a busy machine).
    threads = 1 if n <= SERIAL_EIGEN_MAX else None
    with threadpool_limits(limits=threads, user_api="blas"):
        return linalg.eigh(dense, subset_by_index=[n - n_components, n - 1])


def _leading_eigenvectors_by_component(A, degrees, n_components, eigen_solver, rng):
    """Leading eigenvectors of a block-diagonal ``A``, one connected component at a time.

    Every connected component with edges contributes the eigenvalue 1 once
    (with the eigenvector ``sqrt(degrees)`` on the component), so a graph with
    several components has a multiple leading eigenvalue, which a Krylov
    solver on the whole matrix resolves unreliably: it can return two vectors
    of one component's eigenspace and none of another, which merges two
    components in the embedding. The spectrum of ``A`` is the union of the
    components' spectra: with at least ``n_components`` such components the
    leading eigenvectors are these known ones; with ``c`` fewer, each
    component's ``n_components - c + 1`` leading eigenpairs are computed
    separately and the ``n_components`` largest eigenvalues overall are kept.
    Ties go to the component holding the lower vertex.
    """
    n_parts, part = connected_components(A, directed=False)
    if n_parts == 1:
        return _leading_eigenpairs(A, n_components, eigen_solver, rng)[1]
    n = A.shape[0]
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(n_parts + 1))
    members = [order[bounds[c] : bounds[c + 1]] for c in range(n_parts)]
    with_edges = [c for c in range(n_parts) if degrees[members[c]].sum() > 0]
    if len(with_edges) >= n_components:
        U = np.zeros((n, n_components))
        for column, c in enumerate(with_edges[:n_components]):
            vector = np.sqrt(degrees[members[c]])
            U[members[c], column] = vector / np.linalg.norm(vector)
        return U
    extra = n_components - len(with_edges)
    values, owners, positions, pieces = [], [], [], []
    for c, rows in enumerate(members):
        k = min(extra + 1, len(rows))
        if len(rows) == 1:
            val, vec = np.array([A[rows[0], rows[0]]]), np.ones((1, 1))
        else:
            val, vec = _leading_eigenpairs(A[rows][:, rows], k, eigen_solver, rng)
        values.append(val)
        owners.append(np.full(len(val), c))
        positions.append(np.arange(len(val)))
        pieces.append(vec)
    values, owners = np.concatenate(values), np.concatenate(owners)
    positions = np.concatenate(positions)
    # Eigenvalues equal up to rounding (every component's 1) are ties.
    chosen = np.lexsort((positions, owners, -np.round(values, 12)))[:n_components]
    U = np.zeros((n, n_components))
    for column, i in enumerate(chosen):
        U[members[owners[i]], column] = pieces[owners[i]][:, positions[i]]
    return U


def njw_embedding(affinity, n_components, *, eigen_solver="auto", random_state=None):
    """Row-normalised spectral embedding of Ng, Jordan & Weiss (2001).

    The ``n_components`` leading eigenvectors of the normalised affinity
    ``D^-1/2 W D^-1/2`` (degrees are column sums plus machine epsilon), i.e.
    the eigenvectors of the smallest eigenvalues of the normalised Laplacian,
    with every row scaled to unit length.

    Parameters
    ----------
    affinity : {array-like, sparse matrix} of shape (n_samples, n_samples)
        Symmetric, non-negative affinity, e.g. from :func:`knn_graph`.
    n_components : int
        Embedding dimension, usually the number of clusters.
    eigen_solver : {'auto', 'arpack', 'dense'}, default='auto'
        ``'arpack'`` is :func:`scipy.sparse.linalg.eigsh` on the sparse
        matrix (dense fallback if it fails to converge); ``'dense'`` is
        :func:`scipy.linalg.eigh` on an ``n x n`` copy; ``'auto'`` picks
        ``'dense'`` up to 500 samples.
    random_state : int, RandomState instance or None, default=None
        Start vector of ARPACK.

    Returns
    -------
    embedding : ndarray of shape (n_samples, n_components)
        Rows of unit norm (up to the epsilon guard).

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.clusterers._njw import njw_embedding
    >>> W = np.kron(np.eye(2), np.ones((3, 3)))  # two disconnected triangles
    >>> U = njw_embedding(W, 2)
    >>> np.allclose(np.abs(U @ U.T), np.kron(np.eye(2), np.ones((3, 3))))
    True
    """
    W = _check_affinity(affinity)
    n = W.shape[0]
    if not isinstance(n_components, numbers.Integral) or not 1 <= n_components <= n:
        raise ValueError(f"n_components must be an integer in [1, {n}], got {n_components!r}.")
    if eigen_solver not in ("auto", "arpack", "dense"):
        raise ValueError(f"eigen_solver must be 'auto', 'arpack' or 'dense', got {eigen_solver!r}.")
    rng = check_random_state(random_state)
    degrees = np.asarray(W.sum(axis=0)).ravel()
    D = sparse.diags_array(1.0 / np.sqrt(degrees + EPS))
    A = (D @ W @ D).tocsr()
    U = _leading_eigenvectors_by_component(A, degrees, int(n_components), eigen_solver, rng)
    return U / (np.linalg.norm(U, axis=1, keepdims=True) + EPS)


def njw_spectral_clustering(
    affinity,
    n_clusters,
    *,
    n_init=50,
    max_iter=1000,
    eigen_solver="auto",
    random_state=None,
):
    """Spectral clustering of Ng, Jordan & Weiss (2001) on a given affinity.

    :func:`njw_embedding` with ``n_clusters`` dimensions, then k-means with
    ``n_init`` restarts on its rows. The defaults (50 restarts of at most
    1000 iterations) are those of FedSC's experiments (Qiao et al. 2023).

    Parameters
    ----------
    affinity : {array-like, sparse matrix} of shape (n_samples, n_samples)
        Symmetric, non-negative affinity, e.g. from :func:`knn_graph` or
        :func:`knn_kernel_graph`.
    n_clusters : int
    n_init : int, default=50
        k-means restarts.
    max_iter : int, default=1000
        Iterations per k-means restart.
    eigen_solver : {'auto', 'arpack', 'dense'}, default='auto'
        See :func:`njw_embedding`.
    random_state : int, RandomState instance or None, default=None
        Seeds ARPACK and k-means.

    Returns
    -------
    labels : ndarray of shape (n_samples,), dtype int
        Cluster labels in ``0 .. n_clusters - 1``.

    Examples
    --------
    >>> from sklearn.datasets import make_circles
    >>> from skfedclust.methods._fedsc_core import gaussian_kernel
    >>> from skfedclust.clusterers._njw import knn_graph, njw_spectral_clustering
    >>> X, y = make_circles(200, factor=0.5, noise=0.03, random_state=0)
    >>> W = knn_graph(gaussian_kernel(X, bandwidth=0.5))
    >>> labels = njw_spectral_clustering(W, 2, n_init=10, random_state=0)
    >>> from sklearn.metrics import adjusted_rand_score
    >>> adjusted_rand_score(y, labels)
    1.0
    """
    rng = check_random_state(random_state)
    embedding = njw_embedding(affinity, n_clusters, eigen_solver=eigen_solver, random_state=rng)
    kmeans = KMeans(n_clusters=n_clusters, n_init=n_init, max_iter=max_iter, random_state=rng)
    # Each Lloyd pass over an embedding of a few columns is short: OpenMP
    # threads synchronise more than they compute, and on a busy machine their
    # spin-waits cost 10x to 70x (50 restarts on 20,000 x 8: 2 s on one thread,
    # 140 s on two contended ones).
    threads = 1 if len(embedding) <= SERIAL_KMEANS_MAX else None
    with threadpool_limits(limits=threads):
        return kmeans.fit_predict(embedding)
