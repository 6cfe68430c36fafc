"""Clustering metrics: external ones used by the papers, and federated internal indices.

Every metric that needs a one-to-one matching between clusters and classes
(or between two sets of centers) solves it exactly with the Hungarian method
(:func:`scipy.optimize.linear_sum_assignment`).

The internal indices (Calinski-Harabasz, Davies-Bouldin, a simplified
silhouette) are computed on a federation without pooling its rows: each is a
protocol of secure sums (:class:`~skfedclust.secure.SecureAggregator`) on a
runtime, in which the server learns per-cluster aggregates and nothing of a
single client (``secure_*`` functions), with a convenience for a fitted
estimator and its federated data (:func:`federated_score`).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.base import clone
from sklearn.metrics import cohen_kappa_score
from sklearn.metrics.cluster import contingency_matrix
from sklearn.utils import Bunch, check_array, check_consistent_length, check_random_state
from sklearn.utils.validation import check_is_fitted, column_or_1d

from .clusterers import nearest_center
from .federation import (
    InProcessRuntime,
    Reply,
    bound_only,
    build_federation,
    private_entropy,
    sum_only,
    summand,
)
from .secure import SecureAggregator, agree_bound, agree_column_bounds

__all__ = [
    "clustering_accuracy",
    "kappa",
    "purity",
    "centroid_distance",
    "simplified_silhouette_score",
    "secure_calinski_harabasz",
    "secure_davies_bouldin",
    "secure_simplified_silhouette",
    "federated_score",
    "INTERNAL_INDICES",
]


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


# --------------------------------------------------------------------------- #
# Internal indices without pooling
# --------------------------------------------------------------------------- #
def _distances_to(X, centers):
    """Euclidean distance of every row to every center, each from the difference itself."""
    out = np.empty((X.shape[0], len(centers)))
    for j, c in enumerate(centers):
        diff = X - c
        out[:, j] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return out


def _silhouette_values(X, labels, centers):
    d = _distances_to(X, centers)
    rows = np.arange(X.shape[0])
    a = d[rows, labels]
    d[rows, labels] = np.inf
    b = d.min(axis=1)
    top = np.maximum(a, b)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.where(top > 0, (b - a) / top, 0.0)
    return s


def simplified_silhouette_score(X, labels, centers):
    """Mean simplified silhouette of pooled rows (centroid-based silhouette).

    For row ``i`` in cluster ``l_i``: ``a_i = ||x_i - c_{l_i}||`` and
    ``b_i = min_{j != l_i} ||x_i - c_j||``; its value is
    ``(b_i - a_i) / max(a_i, b_i)`` (0 when both are 0), and the score is
    the mean over rows. Unlike :func:`sklearn.metrics.silhouette_score`,
    which averages distances to every member of a cluster (all pairwise
    distances), it compares each row with the centers only (Vendramin,
    Campello and Hruschka, 2010), so it needs no pairwise distances and its
    sum over rows is a secure sum (:func:`secure_simplified_silhouette`).
    On compact, well-separated clusters both are close to 1; they differ
    otherwise, and the simplified one favours convex clusters around the
    centers.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Rows.
    labels : array-like of shape (n_samples,)
        Index in ``centers`` of each row's cluster.
    centers : array-like of shape (n_centers, n_features)
        Cluster centers, at least 2.

    Returns
    -------
    score : float
        Between -1 and 1; higher is better.

    References
    ----------
    .. [1] L. Vendramin, R. J. G. B. Campello and E. R. Hruschka, "Relative
       clustering validity criteria: a comparative overview", Statistical
       Analysis and Data Mining 3(4), 2010.

    Examples
    --------
    >>> from skfedclust.metrics import simplified_silhouette_score
    >>> # (1 + (3 - 1) / 3 + 1) / 3
    >>> simplified_silhouette_score([[0.0], [1.0], [4.0]], [0, 0, 1], [[0.0], [4.0]])
    0.8888888888888888
    """
    X = check_array(X, dtype=np.float64, input_name="X")
    centers = check_array(centers, dtype=np.float64, input_name="centers")
    labels = column_or_1d(labels).astype(np.intp)
    check_consistent_length(X, labels)
    if len(centers) < 2:
        raise ValueError("the simplified silhouette needs at least 2 centers")
    if labels.min() < 0 or labels.max() >= len(centers):
        raise ValueError("labels must index the centers")
    return float(_silhouette_values(X, labels, centers).mean())


#: Where an index's steps keep the centers and the mean shifts they agreed to:
#: one fixed place, whatever tags the coordinator names, so that a fit's index
#: is computed for one set of centers and one set of means.
_AGREED_CENTERS = "index: agreed centers"
_AGREED_SHIFTS = "index: agreed mean shifts"


def _agreed(state, key, value, what):
    """``value`` if it is the first of the session or equal to it; else a refusal."""
    value = np.asarray(value, dtype=np.float64)
    earlier = state.get(key)
    if earlier is not None and not (
        earlier.shape == value.shape and np.array_equal(earlier, value)
    ):
        raise PermissionError(
            f"this node already computed an index with other {what} in this fit: the same "
            f"sums with other {what} would give away its rows"
        )
    return value


def _check_cluster_count(data, n_clusters, party):
    """Refuse per-cluster values of more clusters than the node's rows allow (its policy)."""
    minimum = party.policy.min_rows_per_vector
    if minimum is not None and n_clusters * minimum > max(len(data), 1):
        raise PermissionError(
            f"min-rows-per-vector: {n_clusters} per-cluster values of {len(data)} rows would "
            f"summarise fewer than {minimum} rows each"
        )


def _centers_and_labels(data, inbox, state, centers_tag, labels_key):
    centers = inbox[centers_tag] if centers_tag in inbox else state[centers_tag]
    if labels_key is None:
        labels = nearest_center(data, centers)
    else:
        labels = np.asarray(state[labels_key], dtype=np.intp)
    return np.asarray(centers, dtype=np.float64), labels


def _moments(data, centers, labels):
    k, d = centers.shape
    sums = np.zeros((k, d))
    np.add.at(sums, labels, data - centers[labels])
    return sums, np.bincount(labels, minlength=k).astype(np.int64)


@bound_only
def cluster_moments_bound_step(data, inbox, state, party, *, centers_tag, labels_key):
    """Client step: the residual sums of :func:`cluster_moments_step`, flattened, for a bound.

    Keeps the centers and the labels for the steps that follow.
    """
    centers, labels = _centers_and_labels(data, inbox, state, centers_tag, labels_key)
    centers = _agreed(state, _AGREED_CENTERS, centers, "centers")
    _check_cluster_count(data, len(centers), party)
    sums, _ = _moments(data, centers, labels)
    return Reply(
        send=sums.ravel(),
        keep={centers_tag: centers, _AGREED_CENTERS: centers, "index labels": labels},
    )


@summand
def cluster_moments_step(data, inbox, state, party, *, centers_tag):
    """Client step: per-cluster residual sums and counts.

    For cluster ``j`` with public center ``c_j``: ``S_j = sum (x - c_j)``
    over the client's rows of the cluster and ``n_j`` their number.
    Residuals against the centers keep a large common offset from costing
    precision.
    """
    centers, labels = state[centers_tag], state["index labels"]
    return Reply(send=_moments(data, centers, labels))


def _residuals_around_means(data, centers, shifts, labels):
    """``x - m_j`` with ``m_j = c_j + shift_j``, without forming ``m_j``.

    ``x - c_j`` is split error-free into its rounded value and the rounding
    error (Knuth's TwoSum); the rounded value minus the shift cancels exactly
    where the mean is near the center, and the error is added back. So a
    cluster a million times tighter than its distance to the center keeps all
    its digits, at any offset of the data.
    """
    reference = centers[labels]
    rounded = data - reference
    back = rounded - data
    error = (data - (rounded - back)) - (reference + back)
    return (rounded - shifts[labels]) + error


@sum_only
def squares_around_means_step(data, inbox, state, party, *, centers_tag, shifts_tag):
    """Client step: per cluster, the sum of squared distances of its rows to the cluster mean.

    The means arrive as shifts from the centers (``m_j - c_j``, under
    ``shifts_tag``), as in :func:`distance_sums_step`; the sums of squares
    are taken around the means themselves, not as ``sum ||x - c||^2 -
    ||S||^2 / n``, whose cancellation loses the digits of tight clusters.
    """
    centers, labels, shifts = _centers_labels_and_shifts(party, data, inbox, state, shifts_tag)
    diff = _residuals_around_means(data, centers, shifts, labels)
    squares = np.einsum("ij,ij->i", diff, diff)
    return Reply(
        send=np.bincount(labels, weights=squares, minlength=len(centers)),
        keep={shifts_tag: shifts, _AGREED_SHIFTS: shifts},
    )


def _centers_labels_and_shifts(party, data, inbox, state, shifts_tag):
    """The agreed centers, the rows' clusters and the mean shifts, agreed once per fit.

    A helper of the indices' steps, not a step: its parameters do not start
    with ``data, inbox, state, party``, so that no coordinator can name it.
    """
    shifts = inbox[shifts_tag] if shifts_tag in inbox else state[shifts_tag]
    shifts = _agreed(state, _AGREED_SHIFTS, shifts, "cluster means")
    centers, labels = state[_AGREED_CENTERS], state["index labels"]
    if shifts.shape != centers.shape:
        raise PermissionError(
            f"the mean shifts have shape {shifts.shape}; the agreed centers {centers.shape}"
        )
    _check_cluster_count(data, len(centers), party)
    return centers, labels, shifts


@sum_only
def distance_sums_step(data, inbox, state, party, *, centers_tag, shifts_tag):
    """Client step: per cluster, the sum of the distances of its rows to the cluster mean.

    The server sends each mean as its shift from the cluster's center
    (``m_j - c_j``, under ``shifts_tag``), so that ``x - m_j`` is taken as
    ``(x - c_j) - (m_j - c_j)``: exact even far from the origin, where
    ``m_j`` itself would be rounded. The shifts are kept for the sum that
    follows the bound.
    """
    centers, labels, shifts = _centers_labels_and_shifts(party, data, inbox, state, shifts_tag)
    diff = _residuals_around_means(data, centers, shifts, labels)
    dist = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return Reply(
        send=np.bincount(labels, weights=dist, minlength=len(centers)),
        keep={shifts_tag: shifts, _AGREED_SHIFTS: shifts},
    )


@summand
def silhouette_sum_step(data, inbox, state, party, *, centers_tag, labels_key):
    """Client step: the sum of the simplified silhouettes of the client's rows, and their count."""
    centers, labels = _centers_and_labels(data, inbox, state, centers_tag, labels_key)
    values = _silhouette_values(data, labels, centers)
    return Reply(send=(np.array([values.sum()]), np.array([len(values)], dtype=np.int64)))


def _aggregator(runtime, aggregator, random_state):
    if aggregator is None:
        seed = int(check_random_state(random_state).randint(np.iinfo(np.int32).max))
        aggregator = SecureAggregator(runtime, seed=seed)
    aggregator.setup()
    return aggregator


def _secure_moments(runtime, centers, *, aggregator, labels_key, name):
    tag = "index centers"
    runtime.broadcast(centers, tag=tag)
    public = dict(centers_tag=tag)
    bound = agree_bound(
        aggregator,
        cluster_moments_bound_step,
        tag=f"{name}: bound",
        labels_key=labels_key,
        **public,
    )
    bound = bound or 1.0
    total, _ = aggregator.sum(
        cluster_moments_step,
        tag=f"{name}: cluster moments",
        bounds=[bound, None],
        **public,
    )
    counts = np.asarray(total[1])
    filled = counts > 0
    n_labels, n_samples = int(filled.sum()), int(counts.sum())
    if not 1 < n_labels < n_samples:
        raise ValueError(
            f"Number of labels is {n_labels}. Valid values are 2 to n_samples - 1 (inclusive)"
        )
    return total, filled


def _secure_means(runtime, centers, *, aggregator, labels_key, name):
    """Counts and mean shifts ``m_j - c_j`` of the clusters; the shifts go down to the clients."""
    (sums, counts), filled = _secure_moments(
        runtime,
        centers,
        aggregator=aggregator,
        labels_key=labels_key,
        name=name,
    )
    shifts = np.zeros_like(centers)
    shifts[filled] = sums[filled] / counts[filled, None]
    runtime.broadcast(shifts, tag="index mean shifts")
    return counts, shifts, filled


def _secure_cluster_sums(aggregator, step, *, name, per_cluster_bounds):
    """The secure sum over the clients of ``step``'s per-cluster vector, under agreed bounds.

    With ``per_cluster_bounds``, each cluster's entry gets a bound of its own
    (:func:`~skfedclust.secure.agree_column_bounds`): a tight cluster's
    value keeps its digits beside a loose one's.
    """
    public = dict(centers_tag="index centers", shifts_tag="index mean shifts")
    bound = agree_bound(aggregator, step, tag=f"{name}: bound", **public) or 1.0
    if per_cluster_bounds:
        bound = agree_column_bounds(
            aggregator, step, tag=f"{name}: bounds per cluster", bound=bound, **public
        )
        bound = np.maximum(bound, np.finfo(np.float64).tiny)
    total, _ = aggregator.sum(step, tag=name, bounds=[bound], **public)
    return np.asarray(total, dtype=np.float64)


def secure_calinski_harabasz(
    runtime, centers, *, labels_key=None, aggregator=None, random_state=None
):
    """Calinski-Harabasz index of a federation's clusters, from secure sums.

    The clients hold the rows; the cluster of a row is its nearest center in
    ``centers`` (or the label each client kept under ``labels_key``). The
    index is that of :func:`sklearn.metrics.calinski_harabasz_score` on the
    pooled rows and labels, computed with the cluster means of the labels
    (``centers`` serve only to label the rows and as references):
    ``CH = (B / (k - 1)) / (W / (n - k))`` with ``W`` the within-cluster and
    ``B`` the between-cluster sum of squares, ``k`` the non-empty clusters.

    Protocol: the centers down; a public bound (:func:`~skfedclust.secure.agree_bound`)
    on the clients' moments and a secure sum of the per-cluster residual sums
    ``S_j = sum (x - c_j)`` and counts ``n_j``, so ``mean_j = c_j + S_j /
    n_j``; the shifts ``S_j / n_j`` down; a bound and a secure sum of the
    per-cluster sums of squares around the means, ``W_j = sum ||x -
    mean_j||^2``, each client taking ``x - mean_j`` as ``(x - c_j) - S_j /
    n_j`` with the rounding of ``x - c_j`` added back. Computed around the
    means (not as ``sum ||x - c_j||^2 - ||S_j||^2 / n_j``, whose
    cancellation loses tight clusters' digits), the index equals the exact
    one to about 1e-15 relative, at any offset of the data. One set-up round
    (unless ``aggregator`` was set up already) and eight rounds.

    **What the server learns**: the per-cluster counts, means and
    within-cluster sums of squares (over all clients), how many clients'
    largest moment falls in each binary range, and which clients answered;
    nothing of a single client's rows or moments.

    Parameters
    ----------
    runtime : Runtime
        The protocol runtime of the federation.
    centers : array-like of shape (n_centers, n_features)
        Public centers, sent to the clients.
    labels_key : str, default=None
        Key of the clients' kept state holding each row's cluster (an index
        in ``centers``); ``None`` labels every row by its nearest center.
    aggregator : SecureAggregator, default=None
        An aggregator of ``runtime`` to reuse; ``None`` makes one.
    random_state : int, RandomState instance or None, default=None
        Draws the public seed of a new aggregator's communication graph.

    Returns
    -------
    score : float
        The Calinski-Harabasz index (higher is better).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import make_blobs
    >>> from sklearn.cluster import KMeans
    >>> from sklearn.metrics import calinski_harabasz_score
    >>> from skfedclust.federation import Federation, InProcessRuntime
    >>> from skfedclust.metrics import secure_calinski_harabasz
    >>> X, _ = make_blobs(300, centers=3, random_state=0)
    >>> km = KMeans(3, n_init=10, random_state=0).fit(X)
    >>> federation = Federation(X, [range(0, 100), range(100, 200), range(200, 300)])
    >>> _ = federation.spawn_seeds(np.random.RandomState(0))
    >>> runtime = InProcessRuntime(federation)
    >>> federated = secure_calinski_harabasz(runtime, km.cluster_centers_, random_state=0)
    >>> bool(abs(federated - calinski_harabasz_score(X, km.labels_)) < 1e-9 * federated)
    True
    """
    centers = check_array(centers, dtype=np.float64, input_name="centers")
    aggregator = _aggregator(runtime, aggregator, random_state)
    runtime.stage("Calinski-Harabasz: secure sums of the cluster means")
    counts, shifts, filled = _secure_means(
        runtime, centers, aggregator=aggregator, labels_key=labels_key, name="Calinski-Harabasz"
    )
    runtime.stage("Calinski-Harabasz: secure sum of the squares around the means")
    squares = _secure_cluster_sums(
        aggregator,
        squares_around_means_step,
        name="Calinski-Harabasz: squares around the means",
        per_cluster_bounds=False,
    )
    n = counts[filled].astype(np.float64)
    within = float(squares[filled].sum())
    # Means and the grand mean relative to one center: exact at any offset.
    C = centers[filled]
    moved = C - C[0] + shifts[filled]
    grand = (n[:, None] * moved).sum(axis=0) / n.sum()
    between = float(np.sum(n * np.einsum("ij,ij->i", moved - grand, moved - grand)))
    k, n_samples = len(n), n.sum()
    if within <= _rounding_floor(n, shifts[filled]):
        # No spread (scikit-learn's convention gives 1): identical rows at a
        # distance from their center that float64 rounds leave a sum of
        # squares at the level of that rounding, not an exact 0.
        return 1.0
    return float(between * (n_samples - k) / (within * (k - 1.0)))


def _rounding_floor(counts, shifts):
    """The within-cluster sum of squares that rounding ``x - c_j`` alone can make.

    A row's residual from its center is exact to ``2**-53`` of its size; for
    identical rows that size is the mean's shift from the center. A sum of
    squares below ``n_j d (2**-50 max |shift_j|)**2`` is no spread at all.
    """
    if not len(counts):
        return 0.0
    scale = 2.0**-50 * np.abs(shifts).max(axis=1)
    return float(np.sum(counts * shifts.shape[1] * scale**2))


def secure_davies_bouldin(runtime, centers, *, labels_key=None, aggregator=None, random_state=None):
    """Davies-Bouldin index of a federation's clusters, from secure sums.

    Labels as in :func:`secure_calinski_harabasz`. The index is that of
    :func:`sklearn.metrics.davies_bouldin_score` on the pooled rows and
    labels: with ``m_j`` the mean of cluster ``j`` and ``s_j`` the mean
    distance of its rows to ``m_j``, ``DB = mean_i max_{j != i} (s_i + s_j)
    / ||m_i - m_j||`` over the non-empty clusters (0 when every ``s_j`` or
    every distance between means is 0, as in scikit-learn).

    Protocol: the centers down; a bound and a secure sum of the per-cluster
    residual sums and counts (the means); the means down (as shifts from
    the centers, exact at any offset); a bound, per-cluster bounds
    (:func:`~skfedclust.secure.agree_column_bounds`, so that a tight
    cluster's distances keep their digits beside a loose one's) and a secure
    sum of the per-cluster sums of distances to the means. One set-up round
    (unless ``aggregator`` was set up already) and ten rounds.

    **What the server learns**: the per-cluster counts, means and sums of
    distances to the means (over all clients), the binary ranges of the
    clients' largest sums (overall and per cluster), and which clients
    answered; nothing of a single client.

    Parameters
    ----------
    runtime : Runtime
        The protocol runtime of the federation.
    centers : array-like of shape (n_centers, n_features)
        Public centers, sent to the clients.
    labels_key : str, default=None
        Key of the clients' kept state holding each row's cluster; ``None``
        labels every row by its nearest center.
    aggregator : SecureAggregator, default=None
        An aggregator of ``runtime`` to reuse; ``None`` makes one.
    random_state : int, RandomState instance or None, default=None
        Draws the public seed of a new aggregator's communication graph.

    Returns
    -------
    score : float
        The Davies-Bouldin index (lower is better, 0 at best).
    """
    centers = check_array(centers, dtype=np.float64, input_name="centers")
    aggregator = _aggregator(runtime, aggregator, random_state)
    runtime.stage("Davies-Bouldin: secure sums of the cluster means")
    counts, shifts, filled = _secure_means(
        runtime, centers, aggregator=aggregator, labels_key=labels_key, name="Davies-Bouldin"
    )
    runtime.stage("Davies-Bouldin: secure sums of the distances to the means")
    distances = _secure_cluster_sums(
        aggregator,
        distance_sums_step,
        name="Davies-Bouldin: distances",
        per_cluster_bounds=True,
    )
    intra = distances[filled] / counts[filled]
    # Means relative to one center: exact at any offset.
    M = centers[filled] - centers[filled][0] + shifts[filled]
    between = _distances_to(M, M)
    if np.allclose(intra, 0) or np.allclose(between, 0):
        return 0.0
    between[between == 0] = np.inf
    combined = intra[:, None] + intra[None, :]
    return float(np.mean(np.max(combined / between, axis=1)))


def secure_simplified_silhouette(
    runtime, centers, *, labels_key=None, aggregator=None, random_state=None
):
    """Mean simplified silhouette of a federation's rows, from one secure sum.

    Labels as in :func:`secure_calinski_harabasz`; the value of a row
    compares its distance to its own center with that to the nearest other
    center (:func:`simplified_silhouette_score`, which this equals on the
    pooled rows). Each client adds the values of its rows (each in
    ``[-1, 1]``, so the public bound is the largest client's size) and its
    row count. One set-up round (unless ``aggregator`` was set up already)
    and two rounds.

    **What the server learns**: the sum of the values and the number of
    rows, and which clients answered.

    Parameters
    ----------
    runtime : Runtime
        The protocol runtime of the federation.
    centers : array-like of shape (n_centers, n_features)
        Public centers (at least 2), sent to the clients.
    labels_key : str, default=None
        Key of the clients' kept state holding each row's cluster; ``None``
        labels every row by its nearest center.
    aggregator : SecureAggregator, default=None
        An aggregator of ``runtime`` to reuse; ``None`` makes one.
    random_state : int, RandomState instance or None, default=None
        Draws the public seed of a new aggregator's communication graph.

    Returns
    -------
    score : float
        Between -1 and 1; higher is better.
    """
    centers = check_array(centers, dtype=np.float64, input_name="centers")
    if len(centers) < 2:
        raise ValueError("the simplified silhouette needs at least 2 centers")
    aggregator = _aggregator(runtime, aggregator, random_state)
    runtime.broadcast(centers, tag="index centers")
    runtime.stage("simplified silhouette: secure sum of the rows' values")
    (total, count), _ = aggregator.sum(
        silhouette_sum_step,
        tag="simplified silhouette",
        bounds=[float(max(np.max(runtime.client_sizes), 1)), None],
        centers_tag="index centers",
        labels_key=labels_key,
    )
    return float(total[0] / count[0])


#: Internal indices by name: the protocol, and whether a larger value is better.
INTERNAL_INDICES = {
    "calinski_harabasz": (secure_calinski_harabasz, True),
    "davies_bouldin": (secure_davies_bouldin, False),
    "silhouette": (secure_simplified_silhouette, True),
}


def federated_score(
    estimator, X, y=None, *, criterion="calinski_harabasz", client_ids=None, random_state=None
):
    """An internal index of a fitted centroid estimator on federated data, without pooling.

    Builds the federation of ``X`` as the estimator's ``fit`` does (any input
    form; its ``partition`` simulates clients from a pooled ``X``), and runs
    the index's protocol in process with the estimator's
    ``cluster_centers_``: each client labels its rows by nearest center.
    For the nearest-center estimators these are their ``labels_``; GOLD's
    labels come from its micro-clusters, so its index is that of the
    nearest-prototype partition.

    Parameters
    ----------
    estimator : estimator with ``cluster_centers_``
        A fitted estimator of the package.
    X : array-like or list of array-like
        Any input form of the estimator's ``fit``.
    y : array-like, default=None
        Used only by label-skewed partition specifications.
    criterion : {"calinski_harabasz", "davies_bouldin", "silhouette"}, \
            default="calinski_harabasz"
        The index: :func:`secure_calinski_harabasz`,
        :func:`secure_davies_bouldin` or :func:`secure_simplified_silhouette`.
    client_ids : array-like of shape (n_samples,), default=None
        Client of each pooled row.
    random_state : int, RandomState instance or None, default=None
        Simulates the clients (as the estimator's ``random_state`` does in
        ``fit``: the same integer gives the same clients) and draws the
        public and private seeds of the protocol. ``None`` uses the
        estimator's ``random_state``.

    Returns
    -------
    result : :class:`~sklearn.utils.Bunch`
        ``score`` (float) and ``communication`` (the ledger's report of the
        index's protocol, as ``communication_``).

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfedclust import KFed
    >>> from skfedclust.metrics import federated_score
    >>> X, _ = make_blobs(300, centers=3, random_state=0)
    >>> est = KFed(3, partition=3, random_state=0).fit(X)
    >>> result = federated_score(est, X, criterion="silhouette")
    >>> round(result.score, 2), result.communication["rounds"]
    (0.61, 2)
    """
    check_is_fitted(estimator, "cluster_centers_")
    if criterion not in INTERNAL_INDICES:
        raise ValueError(f"criterion must be one of {sorted(INTERNAL_INDICES)}, got {criterion!r}")
    protocol, _ = INTERNAL_INDICES[criterion]
    seed = estimator.random_state if random_state is None else random_state
    rng = check_random_state(seed)
    # A clone: building the federation validates X on the estimator it is given.
    federation = build_federation(clone(estimator), X, y, client_ids, rng)
    runtime = InProcessRuntime(
        federation,
        name=f"{type(estimator).__name__} {criterion}",
        private_entropy=private_entropy(rng),
    )
    score = protocol(runtime, estimator.cluster_centers_, random_state=rng)
    return Bunch(score=score, communication=runtime.ledger.report())
