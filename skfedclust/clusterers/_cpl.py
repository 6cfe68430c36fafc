"""Competitive penalized learning (CPL) with cluster-wise feature weights.

CPL is the clustering engine of GOLD on both sides of the federation: the
clients run it as FCPL (fine-grained CPL) to find compact micro-clusters, and
the server runs it recursively as MCPL (multi-granular CPL) on the uploaded
micro-centroids to obtain partitions at several granularities.

CPL starts from many more seed clusters than needed. Objects are visited one
at a time; the clusters compete for each object with a score that combines a
feature-weighted Gaussian similarity, a cluster weight learnt by reward and
penalty, and a penalty on frequent winners. The winner is rewarded, the
runner-up (the rival) is penalised, and clusters that lose all their members,
or are left with a single member when the feature weights are updated, are
eliminated. The number of clusters is therefore learnt, not given.

The dynamics follow the authors' reference implementation: online competition
passes in storage order (Eqs. 8-15) alternate with an update of the
feature-cluster importance matrix (Eqs. 16-21) until no object changes cluster.

References
----------
Y. Zhang, S. Cai, Z. Yang, S. Feng, Y. Ji and H. Zhang, "One-Shot Federated
Clustering of Non-Independent Completely Distributed Data", IEEE Internet of
Things Journal, 2026 (arXiv:2601.17512).
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numba  # the per-object pass is sequential: compiled, it runs ~100x faster
import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClusterMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, RealNotInt
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

__all__ = [
    "CPLResult",
    "CompetitivePenalizedLearning",
    "FCPLResult",
    "MCPLResult",
    "cluster_weight",
    "competition_step",
    "canonical_order",
    "competitive_penalized_learning",
    "feature_importance",
    "fine_grained_cpl",
    "gaussian_hellinger",
    "multi_granular_cpl",
    "resolve_initial_clusters",
    "weighted_assignment",
]

# Cluster weight g = sigmoid(SLOPE * beta - OFFSET) (Eq. 15): with beta = 1 at the
# start, every cluster begins at g ~ 0.9933.
_SLOPE = 10.0
_OFFSET = 5.0

# "numba" or "numpy": the two engines run the same dynamics and are checked
# against each other.
_ENGINE = "numba"

#: ``local_init="sqrt"`` seeds ``min(n / 2, SQRT_INIT_FACTOR * sqrt(n))`` clusters.
SQRT_INIT_FACTOR = 10.0


# --------------------------------------------------------------------------- #
# Results
# --------------------------------------------------------------------------- #
class CPLResult(NamedTuple):
    """Outcome of one CPL run.

    Attributes
    ----------
    centers : ndarray of shape (n_clusters, n_features)
        Member means of the surviving clusters, in the order of their seeds.
    labels : ndarray of shape (n_samples,)
        Cluster of each object, in ``0..n_clusters - 1``.
    feature_weights : ndarray of shape (n_clusters, n_features)
        Feature-cluster importance matrix; each row sums to 1.
    sizes : ndarray of shape (n_clusters,)
        Number of members of each cluster.
    n_iter : int
        Competition passes run.
    size_history : ndarray of shape (n_iter, n_initial_clusters)
        Member count of every seed cluster at the end of each pass.
    objective : float
        Total intra-cluster similarity ``J`` (Eq. 6) with the final weights.
    """

    centers: np.ndarray
    labels: np.ndarray
    feature_weights: np.ndarray
    sizes: np.ndarray
    n_iter: int
    size_history: np.ndarray
    objective: float

    @property
    def n_clusters(self):
        """Number of surviving clusters."""
        return len(self.centers)

    @property
    def n_active_per_pass(self):
        """Number of non-empty clusters at the end of each pass."""
        return (self.size_history > 0).sum(axis=1)


class FCPLResult(NamedTuple):
    """What a client obtains from FCPL.

    Attributes
    ----------
    centers : ndarray of shape (n_micro_clusters, n_features)
        Micro-centroids, the only thing the client uploads.
    sizes : ndarray of shape (n_micro_clusters,)
        Members of each micro-cluster (kept on the client).
    labels : ndarray of shape (n_samples,)
        Micro-cluster of each local sample; a global label for each
        micro-cluster relabels the samples.
    feature_weights : ndarray of shape (n_micro_clusters, n_features)
        Feature-cluster importance, used to place new local samples.
    n_iter : int
        Competition passes run.
    objective : float
        Total intra-cluster similarity.
    """

    centers: np.ndarray
    sizes: np.ndarray
    labels: np.ndarray
    feature_weights: np.ndarray
    n_iter: int
    objective: float

    @property
    def n_clusters(self):
        """Number of micro-clusters."""
        return len(self.centers)


class MCPLResult(NamedTuple):
    """Multi-granular partitions of the server's micro-centroids.

    Attributes
    ----------
    n_clusters_per_level : ndarray of shape (n_levels,)
        Cluster counts ``K_1 > K_2 > ... > K_n_levels``.
    granular_codes : ndarray of shape (n_centers, n_levels)
        Column ``t`` is the cluster of every micro-centroid at level ``t``.
    objectives : ndarray of shape (n_levels,)
        CPL objective of each recorded level.
    n_stages : int
        CPL runs made, including the final one that did not reduce the count.
    """

    n_clusters_per_level: np.ndarray
    granular_codes: np.ndarray
    objectives: np.ndarray
    n_stages: int

    @property
    def n_levels(self):
        """Number of recorded granularity levels."""
        return len(self.n_clusters_per_level)


# --------------------------------------------------------------------------- #
# Small closed-form pieces
# --------------------------------------------------------------------------- #
def cluster_weight(beta):
    """Cluster weight ``g = 1 / (1 + exp(-10 beta + 5))`` (Eq. 15).

    Parameters
    ----------
    beta : array-like
        Unconstrained intermediate variables, rewarded and penalised by the
        competition.

    Returns
    -------
    g : ndarray
        Weights in (0, 1).
    """
    return np.exp(_log_cluster_weight(np.asarray(beta, dtype=float)))


def _log_cluster_weight(beta):
    # log sigmoid without overflow for the very negative beta of losing clusters
    return -np.logaddexp(0.0, -(_SLOPE * beta - _OFFSET))


def gaussian_hellinger(mean_a, var_a, mean_b, var_b):
    """Hellinger distance between two univariate Gaussians (Eq. 16).

    ``sqrt(1 - sqrt(2 s_a s_b / (s_a^2 + s_b^2)) exp(-(m_a - m_b)^2 / (4 (s_a^2 + s_b^2))))``.

    Two point masses (both variances zero) are at distance 0 when they
    coincide and 1 otherwise, the limits of the formula; the formula itself
    would divide 0 by 0.

    Parameters
    ----------
    mean_a, var_a, mean_b, var_b : array-like
        Means and variances, broadcast together.

    Returns
    -------
    distance : ndarray
        Values in [0, 1].
    """
    mean_a, var_a, mean_b, var_b = (
        np.asarray(v, dtype=float) for v in (mean_a, var_a, mean_b, var_b)
    )
    var_sum = var_a + var_b
    point_masses = var_sum <= 0
    safe_sum = np.where(point_masses, 1.0, var_sum)
    overlap = np.sqrt(2.0 * np.sqrt(var_a) * np.sqrt(var_b) / safe_sum) * np.exp(
        -((mean_a - mean_b) ** 2) / (4.0 * safe_sum)
    )
    overlap = np.where(point_masses, (mean_a == mean_b).astype(float), overlap)
    return np.sqrt(np.clip(1.0 - overlap, 0.0, 1.0))


def resolve_initial_clusters(initial_clusters, n_samples, max_clusters=None):
    """Number of seed clusters: an absolute count, or a fraction of the samples.

    Parameters
    ----------
    initial_clusters : int or float
        An int is a count; a float in (0, 1] is a fraction of ``n_samples``,
        rounded half to even.
    n_samples : int
        Objects to cluster.
    max_clusters : int, default=None
        Optional cap, for large parties (CPL costs ``O(n_samples * k)`` per pass).

    Returns
    -------
    k : int
        The count clipped to ``[min(2, n_samples), n_samples]``.
    """
    if isinstance(initial_clusters, numbers.Integral):
        k = int(initial_clusters)
    else:
        k = int(np.round(initial_clusters * n_samples))
    if max_clusters is not None:
        k = min(k, int(max_clusters))
    return int(np.clip(k, min(2, n_samples), n_samples))


# --------------------------------------------------------------------------- #
# Stage 1: competition
# --------------------------------------------------------------------------- #
def _scores(x, centers, weights, log_g, wins, total_wins):
    # log of (1 - gamma_j) g_j s_j(x) up to a constant shared by all clusters:
    # the constant (log total_wins and the Eq. 22 normaliser) cancels in the
    # argmax and in the rival ratio, and logs never underflow.
    diff = x - centers
    distance = np.einsum("kd,kd->k", weights, diff * diff)
    return (np.log(total_wins - wins) + log_g) - 0.5 * distance


def _winner_and_rival(scores):
    winner = int(np.argmax(scores))
    if len(scores) < 2:
        return winner, -1, 0.0
    others = scores.copy()
    others[winner] = -np.inf
    rival = int(np.argmax(others))
    return winner, rival, float(np.exp(others[rival] - scores[winner]))


def competition_step(x, centers, feature_weights, beta, wins, *, learning_rate=0.05):
    """One competition of CPL for the object ``x`` (Eqs. 9-15).

    The winner ``v`` maximises ``(1 - gamma_j) g_j s_j(x)`` with relative winning
    frequency ``gamma_j = wins_j / sum(wins)``, cluster weight ``g_j`` (Eq. 15)
    and feature-weighted similarity ``s_j(x) = exp(-sum_r w_jr (x_r - c_jr)^2 / 2)``
    (Eq. 8). The rival ``r`` is the runner-up. ``beta_v`` grows by
    ``learning_rate``; ``beta_r`` shrinks by ``learning_rate`` times the ratio of
    the rival's score to the winner's; the winner's win count grows by 1.

    Parameters
    ----------
    x : ndarray of shape (n_features,)
        The object.
    centers : ndarray of shape (n_clusters, n_features)
        Current centroids of the competing clusters.
    feature_weights : ndarray of shape (n_clusters, n_features)
        Feature-cluster importance.
    beta : ndarray of shape (n_clusters,)
        Intermediate variables of the cluster weights, updated in place.
    wins : ndarray of shape (n_clusters,)
        Win counters, updated in place.
    learning_rate : float, default=0.05
        Reward and penalty step.

    Returns
    -------
    winner : int
        Index of the winning cluster.
    rival : int
        Index of the rival, -1 when a single cluster competes.
    """
    beta_before = np.asarray(beta, dtype=float)
    log_g = _log_cluster_weight(beta_before)
    scores = _scores(
        np.asarray(x, dtype=float), centers, feature_weights, log_g, wins, float(np.sum(wins))
    )
    winner, rival, ratio = _winner_and_rival(scores)
    beta[winner] += learning_rate
    if rival >= 0:
        beta[rival] -= learning_rate * ratio
    wins[winner] += 1
    return winner, rival


def _competition_pass_numpy(
    X, order, centers, sums, counts, labels, weights, log_g, beta, wins, total_wins, active, lr
):
    """One online pass over ``order``, vectorised over clusters; see the numba kernel."""
    ids = np.flatnonzero(active)
    n_changed = 0
    for i in order:
        x = X[i]
        scores = _scores(x, centers[ids], weights[ids], log_g[ids], wins[ids], total_wins)
        w_pos, r_pos, ratio = _winner_and_rival(scores)
        v = ids[w_pos]
        beta[v] += lr
        log_g[v] = _log_cluster_weight(beta[v])
        if r_pos >= 0:
            r = ids[r_pos]
            beta[r] -= lr * ratio
            log_g[r] = _log_cluster_weight(beta[r])
        wins[v] += 1.0
        total_wins += 1.0
        old = labels[i]
        if old != v:
            n_changed += 1
            labels[i] = v
            sums[v] += x
            counts[v] += 1
            centers[v] = sums[v] / counts[v]
            if old >= 0:
                sums[old] -= x
                counts[old] -= 1
                if counts[old] == 0:
                    active[old] = False  # an emptied cluster is eliminated for good
                    ids = np.flatnonzero(active)
                else:
                    centers[old] = sums[old] / counts[old]
    return n_changed, total_wins


def _log_sigmoid_scalar(t):
    if t >= 0:
        return -math.log1p(math.exp(-t))
    return t - math.log1p(math.exp(t))


def _competition_pass_loops(
    X, order, centers, sums, counts, labels, weights, log_g, beta, wins, total_wins, active, lr
):
    """One online pass over ``order`` (compiled with numba).

    Every object is offered to the active clusters; the winner and the rival
    are updated at once, and the object moves to the winner, which updates the
    two centroids involved. A cluster that loses its last member is deactivated.
    Ties go to the lowest cluster index.
    """
    n_features = X.shape[1]
    ids = np.flatnonzero(active)
    m = ids.shape[0]
    slot = np.full(centers.shape[0], -1, dtype=np.int64)
    # Feature-major copies of the active clusters: the distance loop then runs
    # over contiguous clusters and vectorises, still summing each cluster's
    # features in order (the same rounding as a plain loop).
    centers_t = np.empty((n_features, m))
    weights_t = np.empty((n_features, m))
    # The cluster weights in slot order, and -inf for an eliminated cluster, so
    # that the ranking loop reads contiguous memory and needs no test.
    log_g_slot = np.empty(m)
    for q in range(m):
        slot[ids[q]] = q
        log_g_slot[q] = log_g[ids[q]]
        for f in range(n_features):
            centers_t[f, q] = centers[ids[q], f]
            weights_t[f, q] = weights[ids[q], f]
    distance = np.empty(m)
    partial = np.empty(m)
    max_wins = wins.max()
    n_changed = 0
    for p in range(order.shape[0]):
        i = order[p]
        distance[:] = 0.0
        for f in range(n_features):
            xf = X[i, f]
            for q in range(m):
                diff = xf - centers_t[f, q]
                distance[q] += weights_t[f, q] * (diff * diff)
        # The frequency term log(total - wins_j) lies in [log(total - max_wins),
        # log(total - 1)], a narrow band once there are many wins: rank on
        # log g_j - distance_j / 2 first and take logs only for the clusters
        # that can still reach the top two.
        for q in range(m):
            partial[q] = log_g_slot[q] - 0.5 * distance[q]
        top1 = -np.inf
        top2 = -np.inf
        for q in range(m):
            if partial[q] > top2:
                if partial[q] > top1:
                    top2 = top1
                    top1 = partial[q]
                else:
                    top2 = partial[q]
        band = math.log(total_wins - 1.0) - math.log(total_wins - max_wins)
        threshold = top2 - band - 1e-9 * (1.0 + abs(top2))
        best = -np.inf
        second = -np.inf
        v = -1
        r = -1
        for q in range(m):
            # An eliminated cluster (-inf) stays out even when threshold is -inf.
            if partial[q] < threshold or log_g_slot[q] == -np.inf:
                continue
            j = ids[q]
            score = (math.log(total_wins - wins[j]) + log_g[j]) - 0.5 * distance[q]
            if score > best:
                second = best
                r = v
                best = score
                v = j
            elif score > second:
                second = score
                r = j
        beta[v] += lr
        log_g[v] = _log_sigmoid(_SLOPE * beta[v] - _OFFSET)
        log_g_slot[slot[v]] = log_g[v]
        if r >= 0:
            beta[r] -= lr * math.exp(second - best)
            log_g[r] = _log_sigmoid(_SLOPE * beta[r] - _OFFSET)
            log_g_slot[slot[r]] = log_g[r]
        wins[v] += 1.0
        total_wins += 1.0
        max_wins = max(max_wins, wins[v])
        old = labels[i]
        if old != v:
            n_changed += 1
            labels[i] = v
            counts[v] += 1
            sv = slot[v]
            for f in range(n_features):
                sums[v, f] += X[i, f]
                centers[v, f] = sums[v, f] / counts[v]
                centers_t[f, sv] = centers[v, f]
            if old >= 0:
                counts[old] -= 1
                if counts[old] == 0:
                    active[old] = False
                    if slot[old] >= 0:
                        log_g_slot[slot[old]] = -np.inf
                else:
                    so = slot[old]
                    for f in range(n_features):
                        sums[old, f] -= X[i, f]
                        centers[old, f] = sums[old, f] / counts[old]
                        if so >= 0:
                            centers_t[f, so] = centers[old, f]
    return n_changed, total_wins


_log_sigmoid = numba.njit(cache=True, nogil=True)(_log_sigmoid_scalar)
_competition_pass_numba = numba.njit(cache=True, nogil=True)(_competition_pass_loops)


#: Fewer rows take the NumPy pass: as fast as the compiled one on a client of
#: tens of rows, and a small fit does not wait for the compilation (1.5 s on
#: a fresh install).
_COMPILED_MIN_ROWS = 128


def _competition_pass(*args):
    if _ENGINE == "numba" and len(args[0]) >= _COMPILED_MIN_ROWS:
        return _competition_pass_numba(*args)
    return _competition_pass_numpy(*args)


# --------------------------------------------------------------------------- #
# Stage 2: feature-cluster importance
# --------------------------------------------------------------------------- #
def _membership(labels, n_clusters):
    n = len(labels)
    return sp.csr_matrix((np.ones(n), (labels, np.arange(n))), shape=(n_clusters, n))


def feature_importance(X, labels, n_clusters):
    """Feature-cluster importance matrix of a partition (Eqs. 16-21).

    ``w_jr`` is proportional to ``D_jr * Q_jr``, where ``D_jr`` is the Hellinger
    distance between Gaussians fitted (unbiased variance) to feature ``r``
    inside and outside cluster ``j`` (how well ``r`` separates ``j``, Eq. 16)
    and ``Q_jr`` is the mean of ``exp(-(x_r - c_jr)^2 / 2)`` over the members
    (how compact ``j`` is along ``r``, Eq. 20). Each row sums to 1 (Eq. 21).

    Statistics are computed from centred differences, never from raw sums of
    squares, so they do not depend on the location of the data. A side of
    fewer than two objects gets variance 0, a cluster holding everything gets
    ``D = 0``, and a row with ``sum_r D_jr Q_jr = 0`` (a constant data set, an
    empty cluster) falls back to uniform weights.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Data.
    labels : ndarray of shape (n_samples,)
        Cluster of each object, in ``0..n_clusters - 1``.
    n_clusters : int
        Number of clusters, including empty ones.

    Returns
    -------
    weights : ndarray of shape (n_clusters, n_features)
        Non-negative rows summing to 1.
    """
    X = np.asarray(X, dtype=float)
    labels = np.asarray(labels, dtype=np.intp)
    n, d = X.shape
    membership = _membership(labels, n_clusters)
    counts = np.bincount(labels, minlength=n_clusters).astype(float)
    occupied = counts > 0
    safe_counts = np.where(occupied, counts, 1.0)[:, None]

    mean_in = (membership @ X) / safe_counts
    resid = X - mean_in[labels]
    scatter_in = membership @ (resid * resid)
    compactness = (membership @ np.exp(-0.5 * resid * resid)) / safe_counts

    # Outside statistics from the totals: O(n d) for all clusters at once.
    mean_all = X.mean(axis=0)
    scatter_all = ((X - mean_all) ** 2).sum(axis=0)
    n_out = (n - counts)[:, None]
    safe_out = np.where(n_out > 0, n_out, 1.0)
    mean_out = mean_all + counts[:, None] * (mean_all - mean_in) / safe_out
    scatter_out = (
        scatter_all
        + n * (mean_all - mean_out) ** 2
        - scatter_in
        - counts[:, None] * (mean_in - mean_out) ** 2
    )
    scatter_out = np.maximum(scatter_out, 0.0)
    var_in = np.where(counts[:, None] > 1, scatter_in / np.maximum(counts[:, None] - 1, 1), 0.0)
    var_out = np.where(n_out > 1, scatter_out / np.maximum(n_out - 1, 1), 0.0)

    separation = gaussian_hellinger(mean_in, var_in, mean_out, var_out)
    separation[(n_out[:, 0] == 0) | ~occupied] = 0.0
    importance = separation * compactness
    row_sums = importance.sum(axis=1, keepdims=True)
    uniform = np.full((1, d), 1.0 / d)
    return np.where(row_sums > 0, importance / np.where(row_sums > 0, row_sums, 1.0), uniform)


# --------------------------------------------------------------------------- #
# The CPL routine
# --------------------------------------------------------------------------- #
def _similarity_to_own_cluster(X, labels, centers, weights):
    diff = X - centers[labels]
    return np.exp(-0.5 * np.einsum("nd,nd->n", weights[labels], diff * diff))


def competitive_penalized_learning(
    X,
    initial_clusters,
    *,
    learning_rate=0.05,
    max_iter=30,
    min_cluster_size=2,
    shuffle=False,
    random_state=None,
):
    """Cluster ``X`` by competitive penalized learning; the cluster count is learnt.

    ``initial_clusters`` distinct objects, drawn at random, seed as many
    clusters (member sums at the seed, one member, uniform feature weights,
    ``beta = 1``, one win each). Each pass offers every object, in storage
    order, to the active clusters (:func:`competition_step`) and moves it to
    the winner. A pass in which no object moves ends the run; otherwise the
    feature weights are re-estimated (:func:`feature_importance`) and clusters
    with fewer than ``min_cluster_size`` members are eliminated: their members
    join other clusters during the next pass. A cluster that becomes empty
    never returns. After ``max_iter`` weight updates the run stops anyway, so
    at most ``max_iter + 1`` passes are made.

    The data are shifted by their first row before the run (and the centers
    shifted back), which changes nothing in exact arithmetic and keeps the
    running member sums accurate at any magnitude.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Data.
    initial_clusters : int or float
        Seed clusters: a count, or a fraction of ``n_samples``; clipped to
        ``[min(2, n_samples), n_samples]``.
    learning_rate : float, default=0.05
        Reward and penalty step ``eta``.
    max_iter : int, default=30
        Largest number of feature-weight updates.
    min_cluster_size : int, default=2
        Clusters smaller than this at a weight update are eliminated. The
        default 2 removes singletons, as the reference implementation does
        implicitly. The rule is skipped if it would leave no cluster.
    shuffle : bool, default=False
        Visit the objects in a fresh random order at each pass instead of in
        storage order.
    random_state : int, RandomState instance or None, default=None
        Draws the seeds (and the visiting orders if ``shuffle``).

    Returns
    -------
    result : CPLResult
        Centers, labels, feature weights, sizes, passes, per-pass sizes of
        every seed cluster and the objective.

    Notes
    -----
    A pass costs ``O(n_samples * k * n_features)`` for the ``k`` clusters still
    active, and a weight update ``O(n_samples * n_features)``. With ``k``
    proportional to ``n_samples`` the run is quadratic in ``n_samples``;
    ``initial_clusters`` as a fixed count keeps it linear. The pass is
    sequential by nature (each object sees the clusters the previous objects
    left); it runs compiled with numba.
    """
    X = check_array(X, dtype=np.float64, order="C")
    rng = check_random_state(random_state)
    n, d = X.shape
    k = resolve_initial_clusters(initial_clusters, n)
    varying = (X != X[:1]).any(axis=0)
    if not varying.all():
        return _with_constant_columns(
            X,
            varying,
            k,
            learning_rate=learning_rate,
            max_iter=max_iter,
            min_cluster_size=min_cluster_size,
            shuffle=shuffle,
            rng=rng,
        )
    origin = X[0].copy()
    Xc = X - origin

    seeds = rng.choice(n, size=k, replace=False)
    sums = Xc[seeds].copy()
    centers = sums.copy()
    counts = np.ones(k, dtype=np.int64)
    labels = np.full(n, -1, dtype=np.int64)
    labels[seeds] = np.arange(k)
    weights = np.full((k, d), 1.0 / d)
    beta = np.ones(k)
    log_g = _log_cluster_weight(beta)
    wins = np.ones(k)
    total_wins = float(k)
    active = np.ones(k, dtype=np.bool_)

    history = []
    n_iter = 0
    order = np.arange(n, dtype=np.int64)
    while n > 1:
        n_iter += 1
        if shuffle:
            order = rng.permutation(n).astype(np.int64)
        n_changed, total_wins = _competition_pass(
            Xc, order, centers, sums, counts, labels, weights, log_g, beta, wins, total_wins,
            active, float(learning_rate),
        )  # fmt: skip
        history.append(counts.copy())
        if n_changed == 0:
            break
        # Exact sums from the labels: no drift from thousands of online updates.
        counts[:] = np.bincount(labels, minlength=k)
        sums[:] = _membership(labels, k) @ Xc
        occupied = counts > 0
        centers[occupied] = sums[occupied] / counts[occupied, None]
        weights[:] = feature_importance(Xc, labels, k)
        too_small = occupied & (counts < min_cluster_size)
        if too_small.any() and (occupied & ~too_small).any():
            active[too_small] = False
        if n_iter > max_iter:
            break

    counts = np.bincount(labels, minlength=k)
    survivors = np.flatnonzero(counts > 0)
    relabel = np.full(k, -1, dtype=np.int64)
    relabel[survivors] = np.arange(len(survivors))
    final_labels = relabel[labels]
    final_centers = (_membership(labels, k) @ Xc)[survivors] / counts[survivors, None]
    final_weights = weights[survivors]
    objective = float(
        _similarity_to_own_cluster(Xc, final_labels, final_centers, final_weights).sum()
    )
    return CPLResult(
        centers=final_centers + origin,
        labels=final_labels,
        feature_weights=final_weights,
        sizes=counts[survivors],
        n_iter=n_iter,
        size_history=np.asarray(history, dtype=np.int64).reshape(-1, k),
        objective=objective,
    )


def _with_constant_columns(X, varying, k, *, rng, **params):
    # A constant column adds nothing to any distance, but the uniform starting
    # weights would spread over it and so change every similarity of the first
    # pass: CPL runs on the varying columns alone, and the constant ones come
    # back with their value and weight 0, so that such a column changes nothing.
    n, d = X.shape
    if not varying.any():
        # Every row is the same point: one cluster holds them all.
        return CPLResult(
            centers=X[:1].copy(),
            labels=np.zeros(n, dtype=np.int64),
            feature_weights=np.full((1, d), 1.0 / d),
            sizes=np.array([n], dtype=np.int64),
            n_iter=0,
            size_history=np.empty((0, k), dtype=np.int64),
            objective=float(n),
        )
    res = competitive_penalized_learning(X[:, varying], k, random_state=rng, **params)
    centers = np.repeat(X[:1], len(res.centers), axis=0)
    centers[:, varying] = res.centers
    weights = np.zeros((len(res.centers), d))
    weights[:, varying] = res.feature_weights
    return res._replace(centers=centers, feature_weights=weights)


def canonical_order(X, random_state=None):
    """An order of the rows that depends on their values only, not on their storage order.

    The rows are sorted lexicographically, then shuffled by a permutation
    drawn from ``random_state``: the same multiset of rows and the same seed
    give the same sequence of rows, whatever order they arrive in.
    Identical rows are interchangeable, so their relative order does not
    matter.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Rows.
    random_state : int, RandomState instance or None, default=None
        Draws the shuffle.

    Returns
    -------
    order : ndarray of shape (n_samples,)
        Row indices: ``X[order]`` is the canonical sequence.
    """
    X = np.asarray(X, dtype=float)
    rng = check_random_state(random_state)
    if X.shape[1] == 0:
        return np.arange(len(X))
    # np.lexsort's last key is the primary one; +0.0 maps -0.0 onto 0.0.
    order = np.lexsort((X + 0.0).T[::-1])
    return order[rng.permutation(len(X))]


def _merge_identical_rows(X, res):
    # The online competition can send two copies of one row to different
    # clusters; every copy joins the cluster of the first, so identical rows
    # always share a micro-cluster (and therefore a global label).
    _, first, inverse = np.unique(X, axis=0, return_index=True, return_inverse=True)
    if len(first) == len(X):
        return res
    labels = res.labels[first][inverse.ravel()]
    k = len(res.centers)
    counts = np.bincount(labels, minlength=k)
    survivors = np.flatnonzero(counts > 0)
    relabel = np.full(k, -1, dtype=np.int64)
    relabel[survivors] = np.arange(len(survivors))
    labels = relabel[labels]
    centers, _ = _member_means(X, labels, len(survivors))
    weights = res.feature_weights[survivors]
    objective = float(_similarity_to_own_cluster(X, labels, centers, weights).sum())
    return res._replace(
        centers=centers,
        labels=labels,
        feature_weights=weights,
        sizes=counts[survivors],
        objective=objective,
    )


def _member_means(X, labels, k):
    # Means of the members, taken relative to the first row (accurate at any offset).
    origin = X[0]
    counts = np.bincount(labels, minlength=k)
    sums = _membership(labels, k) @ (X - origin)
    return sums / np.maximum(counts, 1)[:, None] + origin, counts


def weighted_assignment(X, centers, feature_weights):
    """Most similar cluster of each object under cluster-wise feature weights.

    ``argmin_j sum_r w_jr (x_r - c_jr)^2``, the argmax of the CPL similarity
    (Eq. 8) without the training-time competition factors. Differences are
    taken directly, so the result does not depend on the data's location.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Objects.
    centers : array-like of shape (n_clusters, n_features)
        Cluster centroids.
    feature_weights : array-like of shape (n_clusters, n_features)
        Feature-cluster importance.

    Returns
    -------
    labels : ndarray of shape (n_samples,)
        Index of the most similar cluster (the lowest index on ties).
    """
    X = np.asarray(X, dtype=float)
    centers = np.asarray(centers, dtype=float)
    feature_weights = np.asarray(feature_weights, dtype=float)
    n_clusters, d = centers.shape
    labels = np.empty(len(X), dtype=np.intp)
    chunk = max(1, 2**22 // max(1, n_clusters * d))  # bounds the n x k x d temporary
    for start in range(0, len(X), chunk):
        diff = X[start : start + chunk, None, :] - centers[None, :, :]
        distance = np.einsum("kd,nkd->nk", feature_weights, diff * diff)
        labels[start : start + chunk] = np.argmin(distance, axis=1)
    return labels


# --------------------------------------------------------------------------- #
# Federated steps
# --------------------------------------------------------------------------- #
def fine_grained_cpl(
    X,
    *,
    local_init=0.5,
    learning_rate=0.05,
    max_iter=30,
    min_cluster_size=2,
    max_local_init=None,
    order="storage",
    random_state=None,
):
    """FCPL: a client's search for compact micro-clusters in its own data.

    CPL seeded with a deliberately large number of clusters (half the
    client's samples by default) so that redundant clusters are eliminated
    and compact micro-clusters remain. A client with a single sample returns
    that sample as its only micro-cluster. Copies of one row always end in
    the same micro-cluster (the copies join the cluster of the first one).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The client's data.
    local_init : int, float or "sqrt", default=0.5
        Seed clusters: a count, a fraction of the client's samples, or
        ``"sqrt"``: ``min(n / 2, 10 sqrt(n))``, which keeps a pass's cost
        (samples x seed clusters) at ``O(n^1.5)`` instead of ``O(n^2)``.
    learning_rate : float, default=0.05
        Reward and penalty step.
    max_iter : int, default=30
        Largest number of feature-weight updates.
    min_cluster_size : int, default=2
        Elimination threshold at the weight updates.
    max_local_init : int, default=None
        Cap on the number of seed clusters (the cost of a pass grows with
        ``n_samples`` times the number of clusters).
    order : {"storage", "canonical"}, default="storage"
        Order in which the competition visits the samples: their storage
        order (the authors' implementation), or ``canonical_order``, which
        depends on the rows' values and ``random_state`` only, so that the
        result does not depend on how the rows are stored.
    random_state : int, RandomState instance or None, default=None
        The client's randomness (seed clusters, canonical shuffle).

    Returns
    -------
    result : FCPLResult
        ``centers`` (to upload), ``sizes``, ``labels`` and ``feature_weights``
        (kept locally), ``n_iter`` and ``objective``.
    """
    X = check_array(X, dtype=np.float64, order="C")
    n = len(X)
    if isinstance(local_init, str):
        if local_init != "sqrt":
            raise ValueError(f"local_init must be a number or 'sqrt', got {local_init!r}.")
        local_init = int(min(np.round(0.5 * n), np.round(SQRT_INIT_FACTOR * np.sqrt(n))))
    k = resolve_initial_clusters(local_init, n, max_local_init)
    rng = check_random_state(random_state)
    if order == "canonical":
        visit = canonical_order(X, rng)
    elif order == "storage":
        visit = np.arange(n)
    else:
        raise ValueError(f"order must be 'storage' or 'canonical', got {order!r}.")
    Xv = np.ascontiguousarray(X[visit])
    res = competitive_penalized_learning(
        Xv,
        k,
        learning_rate=learning_rate,
        max_iter=max_iter,
        min_cluster_size=min_cluster_size,
        random_state=rng,
    )
    res = _merge_identical_rows(Xv, res)
    labels = np.empty(n, dtype=np.int64)
    labels[visit] = res.labels
    return FCPLResult(
        centers=res.centers,
        sizes=res.sizes,
        labels=labels,
        feature_weights=res.feature_weights,
        n_iter=res.n_iter,
        objective=res.objective,
    )


def multi_granular_cpl(
    centers,
    *,
    server_init=0.5,
    learning_rate=0.05,
    max_iter=30,
    min_cluster_size=2,
    tol=None,
    max_levels=20,
    random_state=None,
):
    """MCPL: the server's recursion of CPL over the uploaded micro-centroids.

    Stage 1 runs CPL with ``server_init`` seed clusters. Every later stage
    restarts CPL from freshly drawn seeds, weights and counters, inheriting
    only the cluster count the previous stage converged to. A stage that
    reduces the count is recorded as a new, coarser level; the first stage
    that does not reduce it ends the recursion unrecorded (unless it is stage
    1), as does a count below 2. With ``tol``, the recursion also requires the
    objective to change by less than ``tol`` before stopping on a stable count.

    Parameters
    ----------
    centers : array-like of shape (n_centers, n_features)
        Micro-centroids of all clients, stacked client after client.
    server_init : int or float, default=0.5
        Seed clusters of stage 1: a count, or a fraction of ``n_centers``.
    learning_rate : float, default=0.05
        Reward and penalty step.
    max_iter : int, default=30
        Largest number of feature-weight updates per stage.
    min_cluster_size : int, default=2
        Elimination threshold at the weight updates.
    tol : float, default=None
        Optional objective tolerance of the stopping test; None stops on the
        first stage that keeps the count.
    max_levels : int, default=20
        Largest number of CPL stages, a bound that guarantees termination.
    random_state : int, RandomState instance or None, default=None
        The server's randomness, one stream for all stages.

    Returns
    -------
    result : MCPLResult
        ``n_clusters_per_level`` (strictly decreasing), ``granular_codes``
        (one column per level), ``objectives`` and ``n_stages``.

    Raises
    ------
    ValueError
        If fewer than two micro-centroids are given.
    """
    T = check_array(centers, dtype=np.float64, order="C")
    if len(T) < 2:
        raise ValueError(f"MCPL needs at least 2 micro-centroids, got n_samples={len(T)}.")
    rng = check_random_state(random_state)
    k = resolve_initial_clusters(server_init, len(T))
    codes, counts, objectives = [], [], []
    previous_objective = None
    n_stages = 0
    for stage in range(1, max_levels + 1):
        n_stages = stage
        res = competitive_penalized_learning(
            T,
            k,
            learning_rate=learning_rate,
            max_iter=max_iter,
            min_cluster_size=min_cluster_size,
            random_state=rng,
        )
        reduced = res.n_clusters < k
        if reduced or stage == 1:
            codes.append(res.labels)
            counts.append(res.n_clusters)
            objectives.append(res.objective)
        if res.n_clusters < 2:
            break
        if not reduced:
            stable = tol is None or (
                previous_objective is not None and abs(res.objective - previous_objective) < tol
            )
            if stable:
                break
        k = res.n_clusters
        previous_objective = res.objective
    return MCPLResult(
        n_clusters_per_level=np.asarray(counts, dtype=np.int64),
        granular_codes=np.column_stack(codes).astype(np.int64),
        objectives=np.asarray(objectives),
        n_stages=n_stages,
    )


# --------------------------------------------------------------------------- #
# Estimator
# --------------------------------------------------------------------------- #
class CompetitivePenalizedLearning(ClusterMixin, BaseEstimator):
    """Competitive penalized learning with cluster-wise feature weights.

    Centralized CPL as used by GOLD's clients (FCPL) and server (MCPL): many
    seed clusters compete for the objects in online passes; winners are
    rewarded, rivals penalised, and clusters that lose their members (or are
    left with fewer than ``min_cluster_size`` at a feature-weight update) are
    eliminated, so the number of clusters is learnt. Each cluster learns its
    own feature weights from how well a feature separates it from the rest and
    how compact it is along that feature.

    The similarity uses a Gaussian kernel of unit bandwidth, so the result
    depends on the scale of the features: standardise them first.

    Parameters
    ----------
    initial_clusters : int or float, default=0.5
        Seed clusters: a count, or a fraction of the training samples.
    learning_rate : float, default=0.05
        Reward and penalty step.
    max_iter : int, default=30
        Largest number of feature-weight updates (at most ``max_iter + 1``
        passes).
    min_cluster_size : int, default=2
        Clusters smaller than this at a weight update are eliminated.
    shuffle : bool, default=False
        Visit the objects in a random order at each pass instead of in storage
        order.
    random_state : int, RandomState instance or None, default=None
        Draws the seeds (and the visiting orders if ``shuffle``).

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters_found, n_features)
        Member means of the learnt clusters.
    labels_ : ndarray of shape (n_samples,)
        Cluster of each training object.
    n_clusters_ : int
        Number of learnt clusters.
    feature_weights_ : ndarray of shape (n_clusters_found, n_features)
        Feature-cluster importance; rows sum to 1.
    cluster_sizes_ : ndarray of shape (n_clusters_found,)
        Members of each cluster.
    n_iter_ : int
        Competition passes run.
    n_active_per_pass_ : ndarray of shape (n_passes,)
        Non-empty clusters at the end of each pass (non-increasing), one entry
        per pass (``n_iter_`` of them).
    objective_ : float
        Total intra-cluster similarity.
    n_features_in_ : int
        Number of features seen during fit.

    See Also
    --------
    fine_grained_cpl : The client step of GOLD.
    multi_granular_cpl : The server's recursion over the micro-centroids.

    References
    ----------
    Y. Zhang, S. Cai, Z. Yang, S. Feng, Y. Ji and H. Zhang, "One-Shot Federated
    Clustering of Non-Independent Completely Distributed Data", IEEE Internet
    of Things Journal, 2026 (arXiv:2601.17512).

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.clusterers._cpl import CompetitivePenalizedLearning
    >>> rng = np.random.RandomState(0)
    >>> X = np.vstack([rng.normal(-3, 0.3, (20, 2)), rng.normal(3, 0.3, (20, 2))])
    >>> cpl = CompetitivePenalizedLearning(initial_clusters=10, random_state=0).fit(X)
    >>> bool(np.all(cpl.n_active_per_pass_[1:] <= cpl.n_active_per_pass_[:-1]))
    True
    >>> left = cpl.labels_[:20]
    >>> bool(np.isin(left, cpl.labels_[20:]).any())  # no cluster straddles the blobs
    False
    """

    _parameter_constraints: dict = {
        "initial_clusters": [
            Interval(numbers.Integral, 2, None, closed="left"),
            Interval(RealNotInt, 0, 1, closed="right"),
        ],
        "learning_rate": [Interval(numbers.Real, 0, None, closed="neither")],
        "max_iter": [Interval(numbers.Integral, 0, None, closed="left")],
        "min_cluster_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "shuffle": ["boolean"],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        initial_clusters=0.5,
        *,
        learning_rate=0.05,
        max_iter=30,
        min_cluster_size=2,
        shuffle=False,
        random_state=None,
    ):
        self.initial_clusters = initial_clusters
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.min_cluster_size = min_cluster_size
        self.shuffle = shuffle
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Learn the clusters and their number.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : Ignored
            Not used.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        X = validate_data(self, X, dtype=np.float64)
        res = competitive_penalized_learning(
            X,
            self.initial_clusters,
            learning_rate=self.learning_rate,
            max_iter=self.max_iter,
            min_cluster_size=self.min_cluster_size,
            shuffle=self.shuffle,
            random_state=self.random_state,
        )
        self.cluster_centers_ = res.centers
        self.labels_ = res.labels
        self.n_clusters_ = res.n_clusters
        self.feature_weights_ = res.feature_weights
        self.cluster_sizes_ = res.sizes
        self.n_iter_ = res.n_iter
        self.n_active_per_pass_ = res.n_active_per_pass
        self.objective_ = res.objective
        return self

    def predict(self, X):
        """Most similar learnt cluster of each object (feature-weighted).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            New data.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Cluster index of each object.
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return weighted_assignment(X, self.cluster_centers_, self.feature_weights_)
