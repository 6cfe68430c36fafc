"""Centralized clusterers OmniFC runs on its reconstructed distance matrix.

scikit-learn has no k-medoids and no fuzzy c-means, and its agglomerative
clustering refuses Ward linkage on a precomputed matrix; the paper uses
scikit-learn-extra's ``KMedoids``, the ``fuzzy-c-means`` package and scipy's
``linkage``. Rather than adding two dependencies for ~150 lines, the two
missing algorithms are written here (vectorised numpy, loops only over
clusters and iterations), and Ward on distances goes through scipy.
"""

from __future__ import annotations

import numbers

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.metrics import pairwise_distances
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

__all__ = ["FuzzyCMeans", "HierarchicalLinkage", "KMedoids"]


# --------------------------------------------------------------------------- #
# k-medoids
# --------------------------------------------------------------------------- #
class KMedoids(ClusterMixin, BaseEstimator):
    """k-medoids clustering (alternate or PAM), on features or a precomputed matrix.

    Mirrors the defaults of scikit-learn-extra's ``KMedoids`` (``metric=
    "euclidean"``, ``method="alternate"``, ``init="heuristic"``), the
    implementation OmniFC's paper used.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of medoids.
    metric : str, default="euclidean"
        Any metric of :func:`sklearn.metrics.pairwise_distances`, or
        ``"precomputed"`` for a square distance matrix.
    method : {"alternate", "pam"}, default="alternate"
        ``"alternate"``: assign to the nearest medoid, then move each medoid
        to the member with the smallest total distance, until stable.
        ``"pam"``: greedy swaps of a medoid and a non-medoid while the total
        distance decreases (Kaufman & Rousseeuw).
    init : {"heuristic", "build", "k-medoids++", "random"}, default="heuristic"
        ``"heuristic"``: the points with the smallest total distance;
        ``"build"``: PAM's greedy BUILD; ``"k-medoids++"``: distance-weighted
        seeding; ``"random"``: uniform.
    max_iter : int, default=300
        Largest number of alternate steps or swaps.
    random_state : int, RandomState instance or None, default=None
        Used by ``"k-medoids++"`` and ``"random"`` initialisations.

    Attributes
    ----------
    medoid_indices_ : ndarray of shape (n_clusters,)
        Rows of the training data that are medoids.
    cluster_centers_ : ndarray of shape (n_clusters, n_features) or None
        The medoids (None with a precomputed metric).
    labels_ : ndarray of shape (n_samples,)
        Index of the nearest medoid.
    inertia_ : float
        Sum of the distances to the nearest medoid.
    n_iter_ : int
        Steps run.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.clusterers import KMedoids
    >>> X = np.array([[0.0], [0.1], [5.0], [5.2]])
    >>> KMedoids(2).fit(X).labels_.tolist() in ([0, 0, 1, 1], [1, 1, 0, 0])
    True
    """

    _parameter_constraints: dict = {
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "metric": [str],
        "method": [StrOptions({"alternate", "pam"})],
        "init": [StrOptions({"heuristic", "build", "k-medoids++", "random"})],
        "max_iter": [Interval(numbers.Integral, 0, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        metric="euclidean",
        method="alternate",
        init="heuristic",
        max_iter=300,
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.metric = metric
        self.method = method
        self.init = init
        self.max_iter = max_iter
        self.random_state = random_state

    def fit(self, X, y=None, sample_weight=None):
        """Find the medoids.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, n_samples)
            Data, or distances with ``metric="precomputed"``.
        y : Ignored
            Not used.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of every sample in the total distance (a sample of weight
            ``c`` counts as ``c`` identical samples).

        Returns
        -------
        self : object
            Fitted estimator.
        """
        self._validate_params()
        X = validate_data(self, X, dtype=np.float64)
        if self.metric == "precomputed":
            if X.shape[0] != X.shape[1]:
                raise ValueError(f"a precomputed distance matrix must be square, got {X.shape}")
            D = X
        else:
            D = pairwise_distances(X, metric=self.metric)
        n = D.shape[0]
        if self.n_clusters > n:
            raise ValueError(f"n_samples={n} should be >= n_clusters={self.n_clusters}")
        weights = _check_sample_weight(sample_weight, D, dtype=np.float64)
        rng = check_random_state(self.random_state)
        medoids = self._initial_medoids(D, weights, rng)
        step = self._alternate if self.method == "alternate" else self._pam_swap
        self.n_iter_ = 0
        for _ in range(self.max_iter):
            new = step(D, weights, medoids)
            self.n_iter_ += 1
            if np.array_equal(new, medoids):
                break
            medoids = new
        self.medoid_indices_ = medoids
        self.labels_ = np.argmin(D[:, medoids], axis=1)
        self.inertia_ = float(D[np.arange(n), medoids[self.labels_]] @ weights)
        self.cluster_centers_ = None if self.metric == "precomputed" else X[medoids]
        return self

    def predict(self, X):
        """Nearest medoid of new samples (distances to the training rows if precomputed)."""
        check_is_fitted(self, "medoid_indices_")
        if self.metric == "precomputed":
            D = np.asarray(X, dtype=np.float64)[:, self.medoid_indices_]
        else:
            X = validate_data(self, X, dtype=np.float64, reset=False)
            D = pairwise_distances(X, self.cluster_centers_, metric=self.metric)
        return np.argmin(D, axis=1)

    # ---------------------------------------------------------------- init
    def _initial_medoids(self, D, weights, rng):
        k, n = self.n_clusters, D.shape[0]
        if self.init == "heuristic":
            return np.sort(np.argsort(D @ weights, kind="stable")[:k])
        if self.init == "random":
            return np.sort(rng.choice(n, size=k, replace=False))
        if self.init == "build":
            medoids = [int(np.argmin(D @ weights))]
            near = D[:, medoids[0]].copy()
            for _ in range(1, k):
                gain = weights @ np.maximum(near[:, None] - D, 0.0)
                gain[medoids] = -1.0
                medoids.append(int(np.argmax(gain)))
                near = np.minimum(near, D[:, medoids[-1]])
            return np.array(medoids)
        medoids = [int(rng.randint(n))]
        near = D[:, medoids[0]] ** 2 * weights
        for _ in range(1, k):
            total = near.sum()
            pick = int(rng.choice(n, p=near / total)) if total > 0 else int(rng.randint(n))
            medoids.append(pick)
            near = np.minimum(near, D[:, pick] ** 2 * weights)
        return np.array(medoids)

    # ---------------------------------------------------------------- steps
    @staticmethod
    def _alternate(D, weights, medoids):
        labels = np.argmin(D[:, medoids], axis=1)
        new = medoids.copy()
        for c in range(len(medoids)):
            members = np.flatnonzero(labels == c)
            if members.size:
                costs = D[np.ix_(members, members)] @ weights[members]
                new[c] = members[np.argmin(costs)]
        return new

    @staticmethod
    def _pam_swap(D, weights, medoids):
        """One best-improvement swap of PAM (returns the medoids unchanged at a local optimum)."""
        dm = D[:, medoids]
        order = np.argsort(dm, axis=1)
        rows = np.arange(D.shape[0])
        nearest = dm[rows, order[:, 0]]
        second = dm[rows, order[:, 1]] if len(medoids) > 1 else np.full(D.shape[0], np.inf)
        best, best_delta = None, -1e-12 * max(nearest @ weights, 1.0)
        for c in range(len(medoids)):
            owned = order[:, 0] == c
            # cost if medoid c is replaced by candidate h, for every h at once
            fallback = np.where(owned, second, nearest)
            delta = weights @ (np.minimum(D, fallback[:, None]) - nearest[:, None])
            delta[medoids] = np.inf
            h = int(np.argmin(delta))
            if delta[h] < best_delta:
                best, best_delta = (c, h), delta[h]
        if best is None:
            return medoids
        new = medoids.copy()
        new[best[0]] = best[1]
        return new


# --------------------------------------------------------------------------- #
# fuzzy c-means
# --------------------------------------------------------------------------- #
class FuzzyCMeans(ClusterMixin, BaseEstimator):
    """Fuzzy c-means (Bezdek), with the defaults of the ``fuzzy-c-means`` package.

    Memberships start uniform-random (rows normalised), then centres and
    memberships alternate until the memberships move less than ``tol``.
    Several starts keep the lowest objective, because FCM on OmniFC's distance
    features can stall in a poor optimum from one start.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    m : float, default=2.0
        Fuzzifier (> 1).
    max_iter : int, default=150
        Iterations per start.
    tol : float, default=1e-5
        Stop when the largest membership change is below ``tol``.
    n_init : int, default=3
        Random starts.
    random_state : int, RandomState instance or None, default=None
        Seeds the initial memberships.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
    u_ : ndarray of shape (n_samples, n_clusters)
        Memberships of the training samples.
    labels_ : ndarray of shape (n_samples,)
        Largest membership.
    objective_ : float
        ``sum u**m * ||x - c||**2`` of the kept start.
    n_iter_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.clusterers import FuzzyCMeans
    >>> X = np.array([[0.0], [0.1], [5.0], [5.2]])
    >>> labels = FuzzyCMeans(2, random_state=0).fit(X).labels_
    >>> bool(labels[0] == labels[1] != labels[2] == labels[3])
    True
    """

    _parameter_constraints: dict = {
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "m": [Interval(numbers.Real, 1, None, closed="neither")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(self, n_clusters=8, *, m=2.0, max_iter=150, tol=1e-5, n_init=3, random_state=None):
        self.n_clusters = n_clusters
        self.m = m
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.random_state = random_state

    def fit(self, X, y=None, sample_weight=None):
        """Run fuzzy c-means.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Data.
        y : Ignored
            Not used.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of every sample in the centres and the objective (a sample
            of weight ``c`` counts as ``c`` identical samples).

        Returns
        -------
        self : object
            Fitted estimator.
        """
        self._validate_params()
        X = validate_data(self, X, dtype=np.float64)
        if self.n_clusters > X.shape[0]:
            raise ValueError(f"n_samples={X.shape[0]} should be >= n_clusters={self.n_clusters}")
        weights = _check_sample_weight(sample_weight, X, dtype=np.float64)
        rng = check_random_state(self.random_state)
        best = None
        for _ in range(self.n_init):
            run = self._single_run(X, weights, rng)
            if best is None or run[3] < best[3]:
                best = run
        self.cluster_centers_, self.u_, self.n_iter_, self.objective_ = best
        self.labels_ = np.argmax(self.u_, axis=1)
        return self

    def _memberships(self, X, x_sq, centers):
        # BLAS form of the squared distances: this loop runs on n x n feature
        # matrices (rows of OmniFC's D), where cdist would dominate the fit.
        d2 = x_sq[:, None] - 2.0 * (X @ centers.T) + np.einsum("ij,ij->i", centers, centers)
        d2 = np.maximum(d2, 1e-300)
        # u_ik = 1 / sum_j (d_ik / d_jk)^(2/(m-1)), written on squared distances
        inv = d2 ** (-1.0 / (self.m - 1.0))
        return inv / inv.sum(axis=1, keepdims=True), d2

    def _single_run(self, X, weights, rng):
        u = rng.uniform(size=(X.shape[0], self.n_clusters))
        u /= u.sum(axis=1, keepdims=True)
        x_sq = np.einsum("ij,ij->i", X, X)
        n_iter = 0
        while n_iter < self.max_iter:
            n_iter += 1
            um = u**self.m * weights[:, None]
            # (X.T @ um).T rather than um.T @ X: the transposed small operand is
            # several times slower in BLAS.
            centers = (X.T @ um).T / um.sum(axis=0)[:, None]
            new_u, d2 = self._memberships(X, x_sq, centers)
            moved = np.abs(new_u - u).max()
            u = new_u
            if moved < self.tol:
                break
        objective = float(((u**self.m) * d2 * weights[:, None]).sum())
        return centers, u, n_iter, objective

    def predict(self, X):
        """Largest membership (the nearest centre) of new samples."""
        check_is_fitted(self, "cluster_centers_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return np.argmin(pairwise_distances(X, self.cluster_centers_, metric="sqeuclidean"), axis=1)


# --------------------------------------------------------------------------- #
# hierarchical clustering on distances
# --------------------------------------------------------------------------- #
class HierarchicalLinkage(ClusterMixin, BaseEstimator):
    """Agglomerative clustering of a precomputed Euclidean distance matrix with scipy.

    scikit-learn's ``AgglomerativeClustering`` accepts a precomputed matrix
    only for single, complete and average linkage; scipy's ``linkage`` also
    runs Ward (and centroid, median) from distances, which equals Ward on the
    features when the distances are Euclidean. The tree is cut into
    ``n_clusters`` clusters with ``fcluster(..., "maxclust")``.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters of the cut.
    linkage : {"ward", "single", "complete", "average", "weighted", "centroid", "median"}, \
default="ward"
        scipy linkage method.

    Attributes
    ----------
    linkage_matrix_ : ndarray of shape (n_samples - 1, 4)
        scipy linkage matrix.
    labels_ : ndarray of shape (n_samples,)
        Cluster of each sample, numbered 0.. in order of first appearance of
        scipy's cluster ids.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.metrics import pairwise_distances
    >>> from skfedclust.clusterers import HierarchicalLinkage
    >>> X = np.array([[0.0], [0.1], [5.0], [5.2]])
    >>> HierarchicalLinkage(2).fit(pairwise_distances(X)).labels_.tolist()
    [0, 0, 1, 1]
    """

    _parameter_constraints: dict = {
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "linkage": [
            StrOptions({"ward", "single", "complete", "average", "weighted", "centroid", "median"})
        ],
    }

    def __init__(self, n_clusters=8, *, linkage="ward"):
        self.n_clusters = n_clusters
        self.linkage = linkage

    def fit(self, X, y=None):
        """Build the tree from a square Euclidean distance matrix and cut it.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_samples)
            Euclidean distances.
        y : Ignored
            Not used.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        self._validate_params()
        D = validate_data(self, X, dtype=np.float64)
        if D.shape[0] != D.shape[1]:
            raise ValueError(f"HierarchicalLinkage needs a square distance matrix, got {D.shape}")
        if D.shape[0] < 2:
            self.linkage_matrix_ = np.empty((0, 4))
            self.labels_ = np.zeros(D.shape[0], dtype=np.intp)
            return self
        self.linkage_matrix_ = linkage(squareform(D, checks=False), method=self.linkage)
        ids = fcluster(self.linkage_matrix_, self.n_clusters, criterion="maxclust")
        _, first = np.unique(ids, return_index=True)
        order = np.argsort(np.argsort(first))
        self.labels_ = order[np.searchsorted(np.unique(ids), ids)]
        return self
