"""The eigensolver of the spectral embedding: chosen by size, forced on request."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from sklearn.cluster import SpectralClustering
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.neighbors import kneighbors_graph

from skfedclust import OmniFCClustering
from skfedclust.clusterers import AMG_MIN_VERTICES, _spectral, choose_eigen_solver

SOLVERS = ["arpack", "lobpcg", "amg"]


def knn_affinity(X, k=10):
    A = kneighbors_graph(X, k, include_self=False)
    return A.maximum(A.T).tocsr()


def test_auto_keeps_arpack_below_the_threshold_and_on_dense_affinities():
    small = sp.identity(AMG_MIN_VERTICES - 1, format="csr")
    large = sp.identity(AMG_MIN_VERTICES, format="csr")
    assert choose_eigen_solver(None, small) == "arpack"
    assert choose_eigen_solver(None, large) == "amg"
    assert choose_eigen_solver(None, np.eye(5)) == "arpack"
    for solver in SOLVERS:
        assert choose_eigen_solver(solver, small) == solver
        assert choose_eigen_solver(solver, large) == solver
    with pytest.raises(ValueError, match="eigen_solver must be one of"):
        choose_eigen_solver("dense", small)


def test_auto_takes_amg_on_a_large_sparse_graph():
    # pyamg is a dependency: no fallback to choose.
    import pyamg  # noqa: F401

    large = sp.identity(AMG_MIN_VERTICES, format="csr")
    assert choose_eigen_solver(None, large) == "amg"
    smaller = sp.identity(AMG_MIN_VERTICES - 1, format="csr")
    assert choose_eigen_solver(None, smaller) == "arpack"


@pytest.mark.parametrize("solver", SOLVERS)
def test_every_solver_gives_the_same_partition_on_an_easy_graph(solver):
    # touching blobs: one connected graph, clusters joined by a few edges
    X, y = make_blobs(400, centers=3, cluster_std=1.5, random_state=3)
    A = knn_affinity(X)
    assert connected_components(A, directed=False, return_labels=False) == 1
    reference = SpectralClustering(3, affinity="precomputed", random_state=0).fit(A).labels_
    assert adjusted_rand_score(y, reference) > 0.9
    labels = (
        SpectralClustering(3, affinity="precomputed", eigen_solver=solver, random_state=0)
        .fit(A)
        .labels_
    )
    assert adjusted_rand_score(reference, labels) == 1.0


@pytest.mark.parametrize("solver", SOLVERS)
def test_omnifc_forced_solver_gives_the_default_partition(solver):
    X, _ = make_blobs(300, centers=3, cluster_std=1.0, random_state=1)
    default = OmniFCClustering(3, random_state=0).fit(X)
    assert default.clusterer_.eigen_solver == "arpack"
    forced = OmniFCClustering(3, clusterer_params={"eigen_solver": solver}, random_state=0).fit(X)
    assert forced.clusterer_.eigen_solver == solver
    assert adjusted_rand_score(default.labels_, forced.labels_) == 1.0


@pytest.mark.parametrize("solver", SOLVERS)
def test_omnifc_disconnected_graph_keeps_each_component_whole(solver):
    # far-apart blobs: the 10-NN graph falls into one component per blob
    X, y = make_blobs(300, centers=3, cluster_std=0.2, random_state=0)
    assert connected_components(knn_affinity(X), directed=False, return_labels=False) == 3
    with warnings.catch_warnings():
        # the components fit the clusters: the estimator silences this warning
        warnings.filterwarnings("error", message="Graph is not fully connected")
        est = OmniFCClustering(3, clusterer_params={"eigen_solver": solver}, random_state=0).fit(X)
    assert adjusted_rand_score(y, est.labels_) == 1.0


def test_omnifc_chooses_amg_on_graphs_from_the_threshold(monkeypatch):
    X, _ = make_blobs(300, centers=3, cluster_std=1.0, random_state=1)
    arpack = OmniFCClustering(3, random_state=0).fit(X)
    monkeypatch.setattr(_spectral, "AMG_MIN_VERTICES", 300)
    amg = OmniFCClustering(3, random_state=0).fit(X)
    assert amg.clusterer_.eigen_solver == "amg"
    assert adjusted_rand_score(arpack.labels_, amg.labels_) == 1.0
    # the dense kernel keeps ARPACK at any size
    dense = OmniFCClustering(3, clusterer_params={"gamma": 0.3}, random_state=0).fit(X)
    assert dense.clusterer_.eigen_solver == "arpack"
