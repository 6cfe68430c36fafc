"""Reusable clusterers and clustering building blocks.

Centralized algorithms that the federated protocols run on one party's data
(a client's local k-means, the server's clustering of uploaded centers or of a
reconstructed matrix), kept here once so every method shares them.

Names load on first use (PEP 562): a client step that needs local k-means
does not import the numba-compiled competitive learning.
"""

import importlib

#: Where each building block lives.
_NAMES = {
    "center_means": "_centroids",
    "fuzzy_memberships": "_centroids",
    "nearest_center": "_centroids",
    "normalized_frame": "_centroids",
    "squared_distances": "_centroids",
    "CompetitivePenalizedLearning": "_cpl",
    "CPLResult": "_cpl",
    "FCPLResult": "_cpl",
    "MCPLResult": "_cpl",
    "cluster_weight": "_cpl",
    "competition_step": "_cpl",
    "competitive_penalized_learning": "_cpl",
    "feature_importance": "_cpl",
    "fine_grained_cpl": "_cpl",
    "gaussian_hellinger": "_cpl",
    "multi_granular_cpl": "_cpl",
    "resolve_initial_clusters": "_cpl",
    "weighted_assignment": "_cpl",
    "LocalKMeans": "_kmeans",
    "awasthi_sheffet_kmeans": "_kmeans",
    "local_kmeans": "_kmeans",
    "knn_graph": "_njw",
    "knn_kernel_graph": "_njw",
    "n_neighbors_auto": "_njw",
    "njw_embedding": "_njw",
    "njw_spectral_clustering": "_njw",
    "FuzzyCMeans": "_precomputed",
    "HierarchicalLinkage": "_precomputed",
    "KMedoids": "_precomputed",
    "AMG_MIN_VERTICES": "_spectral",
    "choose_eigen_solver": "_spectral",
    "REMCResult": "_remc",
    "WeightedKModes": "_remc",
    "categorical_divergence": "_remc",
    "matching_scores": "_remc",
    "remc": "_remc",
    "remc_weights": "_remc",
}

__all__ = sorted(_NAMES)


def __getattr__(name):
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
