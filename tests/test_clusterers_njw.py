"""Tests of Ng-Jordan-Weiss spectral clustering and the kNN graphs (clusterers._njw)."""

import tracemalloc

import numpy as np
import pytest
from scipy import sparse
from sklearn.datasets import make_blobs, make_circles
from sklearn.metrics import adjusted_rand_score
from threadpoolctl import threadpool_limits

from skfedclust.clusterers import _njw
from skfedclust.clusterers._njw import (
    knn_graph,
    knn_kernel_graph,
    n_neighbors_auto,
    njw_embedding,
    njw_spectral_clustering,
)
from skfedclust.methods._fedsc_core import (
    aggregate_dictionaries,
    client_update,
    gaussian_kernel,
    initial_dictionaries,
    solve_coefficients,
)
from skfedclust.methods._fedsc_hyperparameters import (
    n_components_auto,
    pooled_bandwidth,
)


@pytest.fixture(autouse=True)
def one_thread():
    """The problems here are small: BLAS and OpenMP threads only add synchronisation."""
    with threadpool_limits(1):
        yield


def reference_knn_graph(K, k):
    """Dense kNN graph: per row the k first entries of a stable descending sort."""
    S = np.zeros_like(K)
    for i, row in enumerate(K):
        keep = np.argsort(-row, kind="stable")[:k]
        S[i, keep] = row[keep]
    return np.maximum(S, S.T)


def integer_factors(n, d, seed):
    """Small-integer factors: C^T K C is exact, so ties are exact in every block."""
    rng = np.random.default_rng(seed)
    C = rng.integers(-2, 3, size=(d, n)).astype(float)
    C[:, n // 2 :] = C[:, : n - n // 2]  # duplicated samples give tied rows
    B = rng.integers(-1, 2, size=(d, d)).astype(float)
    return C, B @ B.T + np.eye(d)


@pytest.fixture(scope="module")
def circles():
    X, y = make_circles(n_samples=600, factor=0.5, noise=0.04, random_state=0)
    return X, y


def test_n_neighbors_rule():
    # iris, ORL, MNIST-1000, Bank, COIL20, USPS
    sizes = [150, 400, 1000, 1372, 1440, 9298]
    assert [n_neighbors_auto(n) for n in sizes] == [6, 6, 7, 8, 8, 10]
    assert n_neighbors_auto(1) == n_neighbors_auto(2) == 1
    with pytest.raises(ValueError, match="n_samples"):
        n_neighbors_auto(0)


# --------------------------------------------------------------------------- #
# kNN graphs
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("k", [1, 3, 7])
def test_knn_graph_matches_the_dense_definition(k):
    C, K_zz = integer_factors(31, 4, seed=k)
    K = C.T @ K_zz @ C
    W = knn_graph(K, n_neighbors=k)
    assert sparse.issparse(W)
    np.testing.assert_array_equal(W.toarray(), reference_knn_graph(K, k))


@pytest.mark.parametrize("block_size", [1, 5, 31, 64, None])
@pytest.mark.parametrize("scaling", ["minmax", None])
def test_blockwise_kernel_graph_equals_the_dense_graph(block_size, scaling):
    C, K_zz = integer_factors(31, 4, seed=0)
    K_hat = C.T @ K_zz @ C
    assert len(np.unique(K_hat)) < K_hat.size // 4  # plenty of ties
    if scaling == "minmax":
        K_hat = (K_hat - K_hat.min()) / (K_hat.max() - K_hat.min())
    k = n_neighbors_auto(31)
    W = knn_kernel_graph(C, K_zz, scaling=scaling, block_size=block_size)
    np.testing.assert_allclose(W.toarray(), reference_knn_graph(K_hat, k), rtol=1e-14)
    assert np.array_equal(W.toarray(), W.toarray().T)


def test_minmax_uses_the_extremes_of_all_entries():
    """The scale comes from every entry, not only from the kept ones."""
    C, K_zz = integer_factors(20, 3, seed=1)
    K_hat = C.T @ K_zz @ C
    W = knn_kernel_graph(C, K_zz, n_neighbors=2, block_size=3).toarray()
    kept = reference_knn_graph(K_hat, 2) != 0
    expected = (K_hat - K_hat.min()) / (K_hat.max() - K_hat.min())
    np.testing.assert_allclose(W[kept], expected[kept])
    assert W.max() == 1.0


def test_constant_kernel_is_not_scaled():
    C = np.ones((2, 6))
    W = knn_kernel_graph(C, np.eye(2), n_neighbors=2)
    assert np.all(W.data == 2.0)


def test_blockwise_graph_never_holds_the_dense_matrix():
    n, d, block = 3000, 10, 64
    rng = np.random.default_rng(0)
    C = rng.normal(size=(d, n))
    K_zz = gaussian_kernel(rng.normal(size=(d, 3)), bandwidth=1.0)
    tracemalloc.start()
    try:
        W = knn_kernel_graph(C, K_zz, block_size=block)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    dense_bytes = 8 * n * n
    assert peak < dense_bytes / 8, (peak, dense_bytes)
    assert W.shape == (n, n) and W.nnz <= 2 * n * n_neighbors_auto(n)
    # The automatic tile keeps its scratch within the budget at any size.
    for n in (10, 5000, 10**5, 10**7):
        side = _njw._tile_size(n, None)
        assert 1 <= side <= n
        assert side**2 * _njw.SCRATCH_BYTES_PER_ENTRY <= _njw.BLOCK_BYTES


def test_graph_errors():
    with pytest.raises(ValueError, match="square"):
        knn_graph(np.ones((3, 4)))
    with pytest.raises(ValueError, match="n_neighbors"):
        knn_graph(np.eye(3), n_neighbors=4)
    with pytest.raises(ValueError, match="kernel_zz"):
        knn_kernel_graph(np.ones((2, 5)), np.eye(3))
    with pytest.raises(ValueError, match="scaling"):
        knn_kernel_graph(np.ones((2, 5)), np.eye(2), scaling="zscore")
    with pytest.raises(ValueError, match="symmetric"):
        knn_kernel_graph(np.ones((2, 5)), np.array([[1.0, 0.5], [0.0, 1.0]]))


# --------------------------------------------------------------------------- #
# Spectral clustering
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("eigen_solver", ["dense", "arpack"])
def test_njw_separates_concentric_circles(circles, eigen_solver):
    X, y = circles
    W = knn_graph(gaussian_kernel(X, bandwidth=pooled_bandwidth(X)))
    labels = njw_spectral_clustering(W, 2, n_init=10, eigen_solver=eigen_solver, random_state=0)
    assert adjusted_rand_score(y, labels) == 1.0
    assert set(labels) == {0, 1}


def test_njw_on_the_reconstructed_kernel_separates_circles(circles):
    """The FedSC pipeline: factorise over 4 clients, rebuild the graph, cluster."""
    X, y = circles
    r = pooled_bandwidth(X)
    d = n_components_auto(X, bandwidth=r)
    parts = np.array_split(np.random.default_rng(0).permutation(len(X)), 4)
    uploads = initial_dictionaries(4, d, 2, random_state=0)
    for _ in range(20):
        Z = aggregate_dictionaries(uploads)
        uploads = [client_update(X[idx], Z, bandwidth=r, lam=1e-2).dictionary for idx in parts]
    Z = aggregate_dictionaries(uploads)
    coef = np.empty((d, len(X)))
    for idx in parts:
        coef[:, idx] = solve_coefficients(X[idx], Z, bandwidth=r, lam=1e-2)
    W = knn_kernel_graph(coef, gaussian_kernel(Z, bandwidth=r), block_size=100)
    labels = njw_spectral_clustering(W, 2, n_init=10, random_state=0)
    assert adjusted_rand_score(y, labels) == 1.0


def test_embedding_of_disconnected_components():
    """Each component maps to one point of the sphere, components to orthogonal ones."""
    sizes = [4, 6, 5]
    blocks = [np.random.default_rng(s).uniform(0.5, 1, size=(s, s)) for s in sizes]
    W = sparse.block_diag([(b + b.T) / 2 for b in blocks], format="csr")
    truth = np.repeat(np.arange(3), sizes)
    for solver in ("dense", "arpack"):
        U = njw_embedding(W, 3, eigen_solver=solver, random_state=0)
        np.testing.assert_allclose(np.linalg.norm(U, axis=1), 1.0, atol=1e-12)
        same = np.abs(U @ U.T) > 1 - 1e-8
        np.testing.assert_array_equal(same, truth[:, None] == truth[None, :])
        labels = njw_spectral_clustering(W, 3, n_init=5, eigen_solver=solver, random_state=0)
        assert adjusted_rand_score(truth, labels) == 1.0


def test_many_large_components_each_get_their_own_direction():
    """Eight components of 500 vertices: eigenvalue 1 has multiplicity 8.

    ARPACK on the whole matrix returns a basis that misses some components
    (ARI 0.69-0.83 over five seeds); per-component eigenpairs never do.
    """
    X, y = make_blobs(4000, n_features=5, centers=8, cluster_std=0.5, random_state=0,
                      center_box=(-50, 50))  # fmt: skip
    W = knn_graph(gaussian_kernel(X, bandwidth=20.0))
    assert sparse.csgraph.connected_components(W)[0] == 8
    for seed in range(3):
        labels = njw_spectral_clustering(W, 8, n_init=5, random_state=seed)
        assert adjusted_rand_score(y, labels) == 1.0
    # More components than clusters: the leading ones are taken, no error.
    U = njw_embedding(W, 3, random_state=0)
    assert U.shape == (4000, 3) and np.isfinite(U).all()


@pytest.mark.parametrize("eigen_solver", ["dense", "arpack"])
def test_fewer_components_than_clusters(eigen_solver):
    """Two components, three clusters: the third direction splits the first component."""
    clique = np.ones((300, 300))
    bridged = sparse.block_diag([clique, clique], format="lil")
    bridged[0, 300] = bridged[300, 0] = 1.0  # one weak edge between the two cliques
    W = sparse.block_diag([bridged, clique[:200, :200]], format="csr")
    truth = np.repeat([0, 1, 2], [300, 300, 200])
    labels = njw_spectral_clustering(W, 3, n_init=5, eigen_solver=eigen_solver, random_state=0)
    assert adjusted_rand_score(truth, labels) == 1.0


def test_embedding_uses_the_normalised_affinity():
    """The leading eigenvectors solve D^-1/2 W D^-1/2 u = mu u before row scaling."""
    rng = np.random.default_rng(3)
    P = rng.uniform(size=(12, 12))
    W = (P + P.T) / 2
    U = njw_embedding(W, 1, eigen_solver="dense")
    # The top eigenvector of the normalised affinity is D^1/2 1: after the row
    # scaling every entry has the same magnitude.
    np.testing.assert_allclose(np.abs(U[:, 0]), 1.0)
    degrees = W.sum(0)
    A = W / np.sqrt(np.outer(degrees, degrees))
    U2 = njw_embedding(W, 2, eigen_solver="dense")
    _, vectors = np.linalg.eigh(A)
    top = vectors[:, -2:]
    expected = top / np.linalg.norm(top, axis=1, keepdims=True)
    # Same subspace, same row normalisation: equal up to an orthogonal map.
    Q, *_ = np.linalg.lstsq(expected, U2, rcond=None)
    np.testing.assert_allclose(expected @ Q, U2, atol=1e-8)


def test_clustering_is_reproducible(circles):
    X, _ = circles
    W = knn_graph(gaussian_kernel(X, bandwidth=0.3))
    first = njw_spectral_clustering(W, 3, n_init=3, eigen_solver="arpack", random_state=7)
    second = njw_spectral_clustering(W, 3, n_init=3, eigen_solver="arpack", random_state=7)
    np.testing.assert_array_equal(first, second)


def test_clustering_errors():
    with pytest.raises(ValueError, match="negative weights"):
        njw_spectral_clustering(np.array([[1.0, -0.5], [-0.5, 1.0]]), 2)
    with pytest.raises(ValueError, match="square"):
        njw_embedding(np.ones((2, 3)), 1)
    with pytest.raises(ValueError, match="n_components"):
        njw_embedding(np.eye(3), 4)
    with pytest.raises(ValueError, match="eigen_solver"):
        njw_embedding(np.eye(3), 1, eigen_solver="lobpcg")
