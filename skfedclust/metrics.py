"""Clustering metrics used by the papers that the package reproduces.

Every metric that needs a one-to-one matching between clusters and classes
(or between two sets of centers) solves it exactly with the Hungarian method
(:func:`scipy.optimize.linear_sum_assignment`).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import cohen_kappa_score
from sklearn.metrics.cluster import contingency_matrix
from sklearn.utils import check_array, check_consistent_length
from sklearn.utils.validation import column_or_1d

__all__ = ["clustering_accuracy", "kappa", "purity", "centroid_distance"]


def _check_labels(y_true, y_pred):
    y_true = column_or_1d(y_true)
    y_pred = column_or_1d(y_pred)
    check_consistent_length(y_true, y_pred)
    if len(y_true) == 0:
        raise ValueError("labels are empty")
    return y_true, y_pred


def clustering_accuracy(y_true, y_pred):
    """Accuracy of a clustering under the best one-to-one cluster-to-class map.

    Clusters and classes are matched to maximise the number of agreeing
    samples; a cluster matched to no class (more clusters than classes)
    counts as wrong.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Ground-truth classes.
    y_pred : array-like of shape (n_samples,)
        Cluster labels.

    Returns
    -------
    accuracy : float
        Fraction of samples whose cluster is matched to their class.

    Examples
    --------
    >>> from skfedclust.metrics import clustering_accuracy
    >>> clustering_accuracy([0, 0, 1, 1, 2], [1, 1, 0, 0, 0])
    0.8
    """
    y_true, y_pred = _check_labels(y_true, y_pred)
    counts = contingency_matrix(y_true, y_pred)
    rows, cols = linear_sum_assignment(counts, maximize=True)
    return float(counts[rows, cols].sum() / len(y_true))


def kappa(y_true, y_pred):
    """Cohen's kappa after matching clusters to classes (OmniFC's Kappa).

    Both label vectors are renumbered ``0..K-1`` in sorted order (DBSCAN's noise
    label -1 is an ordinary cluster). Clusters are matched to classes by the
    Hungarian method on the cost ``|A ∪ B| - |A ∩ B|`` (symmetric difference);
    with different counts the cost matrix is padded with zero-cost dummies and a
    cluster matched to a dummy class gets a label no true class has. The result
    is :func:`sklearn.metrics.cohen_kappa_score` between the true and the mapped
    labels. This follows the OmniFC authors' evaluation code, including the
    zero-cost padding.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Ground-truth classes.
    y_pred : array-like of shape (n_samples,)
        Cluster labels.

    Returns
    -------
    kappa : float
        Between -1 and 1; 1 is perfect agreement.

    Examples
    --------
    >>> from skfedclust.metrics import kappa
    >>> kappa([0, 0, 1, 1], [1, 1, 0, 0])
    1.0
    """
    y_true, y_pred = _check_labels(y_true, y_pred)
    _, t = np.unique(y_true, return_inverse=True)
    _, p = np.unique(y_pred, return_inverse=True)
    n_true, n_pred = t.max() + 1, p.max() + 1
    inter = contingency_matrix(p, t)  # (n_pred, n_true)
    size_p = np.bincount(p)[:, None]
    size_t = np.bincount(t)[None, :]
    cost = (size_p + size_t - inter) - inter  # |A ∪ B| - |A ∩ B|
    size = max(n_true, n_pred)
    padded = np.zeros((size, size), dtype=float)
    padded[:n_pred, :n_true] = cost
    rows, cols = linear_sum_assignment(padded)
    mapping = np.empty(size, dtype=int)
    mapping[rows] = cols
    mapped = mapping[p]
    # A cluster matched to a dummy column keeps a label that no class has.
    return float(cohen_kappa_score(t, mapped))


def purity(y_true, y_pred, *, average="sample"):
    """Purity of a clustering.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Ground-truth classes.
    y_pred : array-like of shape (n_samples,)
        Cluster labels.
    average : {"sample", "cluster"}, default="sample"
        ``"sample"``: ``(1/N) Σ_clusters max_class |cluster ∩ class|`` (the
        standard form); ``"cluster"``: unweighted mean over clusters of
        ``max_class |cluster ∩ class| / |cluster|``.

    Returns
    -------
    purity : float
        Between 0 and 1.

    Examples
    --------
    >>> from skfedclust.metrics import purity
    >>> purity([0, 0, 1, 1], [0, 0, 0, 1])
    0.75
    """
    y_true, y_pred = _check_labels(y_true, y_pred)
    counts = contingency_matrix(y_true, y_pred)  # (classes, clusters)
    best = counts.max(axis=0)
    if average == "sample":
        return float(best.sum() / len(y_true))
    if average == "cluster":
        return float(np.mean(best / counts.sum(axis=0)))
    raise ValueError(f"average must be 'sample' or 'cluster', got {average!r}")


def centroid_distance(true_centers, centers):
    """Matched ℓ2 distance between two sets of centers (FeCA's metric).

    ``sqrt(Σ_(u,s)∈π ||c*_u - θ_s||²)`` where ``π`` is the one-to-one matching
    that minimises the summed squared distances (Hungarian method). If the
    sets differ in size only the matched pairs count. The FeCA paper reports
    this value divided by ``1e4`` on the S-sets.

    Parameters
    ----------
    true_centers : array-like of shape (k_true, n_features)
        Reference centers.
    centers : array-like of shape (k, n_features)
        Recovered centers.

    Returns
    -------
    distance : float
        Frobenius norm of the matched differences.

    Examples
    --------
    >>> from skfedclust.metrics import centroid_distance
    >>> centroid_distance([[0, 0], [10, 0]], [[10, 3], [0, 4]])
    5.0
    """
    true_centers = check_array(true_centers, dtype=np.float64, input_name="true_centers")
    centers = check_array(centers, dtype=np.float64, input_name="centers")
    if true_centers.shape[1] != centers.shape[1]:
        raise ValueError(
            f"center sets have different dimensions: {true_centers.shape[1]} and {centers.shape[1]}"
        )
    cost = ((true_centers[:, None, :] - centers[None, :, :]) ** 2).sum(axis=-1)
    rows, cols = linear_sum_assignment(cost)
    return float(np.sqrt(cost[rows, cols].sum()))
