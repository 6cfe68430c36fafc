"""Federated k-means: Lloyd's algorithm on per-cluster sums added up by secure aggregation.

Every Lloyd iteration needs, per cluster, the number of rows and their sum: both
are sums over the clients, so a secure sum gives the server the pooled
statistics and nothing else, and the iterations are those of centralized
k-means on the pooled rows (Lloyd, 1982; the federated baseline of NVIDIA
FLARE, TensorFlow Federated, FATE and vantage6).
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
import scipy.sparse as sp
from joblib import parallel_config
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..clusterers import nearest_center, normalized_frame, squared_distances
from ..federation import Federation, InProcessRuntime, Reply
from ..federation._inputs import input_form
from ..secure import SumChannel
from ..secure._moments import moments_centered, moments_deviations, moments_raw, moments_rows
from ._base import BaseFederatedClustering, CentroidPredictMixin
from ._kfed import kfed_local_centers, kfed_server_step

try:  # the fused Lloyd pass runs compiled, without the GIL
    import numba
except ImportError:  # pragma: no cover - exercised only without numba
    numba = None

__all__ = ["FederatedKMeans"]

TAG_CENTERS = "centers"
TAG_RELOCATE = "relocation request"
#: Key of a client's labels of the last Lloyd iteration in its private state.
_LABELS = "fedkmeans: labels"
#: Safety factor of every public bound: covers the rounding of the clients'
#: floating-point sums and near-ties of the nearest center (one bit of 62).
_MARGIN = 2.0


class FederatedKMeansError(RuntimeError):
    """A federated k-means fit that cannot go on (too few clients answered)."""


# --------------------------------------------------------------------------- #
# Client steps
# --------------------------------------------------------------------------- #
def _cluster_sums(values, labels, n_clusters):
    # A sparse one-hot product: O(n d) in one pass, and a fixed summation order
    # (unlike a BLAS product, whose order may depend on its threads), so every
    # runtime adds up the same floats.
    n = len(labels)
    onehot = sp.csr_matrix((np.ones(n), (labels, np.arange(n))), shape=(n_clusters, n))
    return np.asarray(onehot @ values)


def _lloyd_pass_numpy(data, centers, previous):
    """One Lloyd pass in NumPy: labels, deviation sums, counts, inertia, changed labels."""
    k = centers.shape[0]
    labels = nearest_center(data, centers)
    deviations = data - centers[labels]
    sums = _cluster_sums(deviations, labels, k)
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    inertia = np.bincount(
        labels, weights=np.einsum("ij,ij->i", deviations, deviations), minlength=k
    )
    changed = data.shape[0] if previous is None else np.count_nonzero(previous != labels)
    return labels, sums, counts, inertia, int(changed)


#: Rows scored per BLAS product in the compiled pass (scikit-learn's chunk):
#: the chunk stays in cache while its rows are labelled and added up.
_CHUNK = 256
#: Rows may lie up to ``2**_HEADROOM`` times farther from the centers' midpoint
#: than the centers before the compiled pass hands over to ``nearest_center``
#: (which then scales by the rows); the same threshold as ``nearest_center``.
_HEADROOM = 500


def _lloyd_pass_loops(data, centers, reference, factor, previous, labels, sums, counts, squares):
    """One Lloyd pass over the rows, fused, in the frame of ``nearest_center``.

    Rows and centers are translated to ``reference`` and scaled by the power
    of two ``factor``; a row goes to the center of least ``||c||^2/2 - x.c``
    (ties to the lowest index), scored a chunk at a time by one BLAS product.
    In the same pass, while the chunk is in cache, each row's deviation from
    its center (in the data's units, so a large offset costs no precision) is
    added to its cluster's sums and squares, in row order. Returns the number
    of rows whose label differs from ``previous`` (every row if
    ``previous[0] < 0``), or -1 when a translated row is not finite or lies
    beyond the headroom: the caller then labels the rows by
    ``nearest_center``, which rescales by the rows.
    """
    n, d = data.shape
    k = centers.shape[0]
    scaled = np.empty((d, k))
    half = np.zeros(k)
    for c in range(k):
        for j in range(d):
            v = (centers[c, j] - reference[j]) * factor
            scaled[j, c] = v
            half[c] += v * v
    for c in range(k):
        half[c] *= 0.5
    limit = 2.0**_HEADROOM
    rows = np.empty((_CHUNK, d))
    scores = np.empty((_CHUNK, k))
    deviation = np.empty(d)
    fresh = n > 0 and previous[0] < 0
    changed = 0
    for start in range(0, n, _CHUNK):
        m = min(_CHUNK, n - start)
        within = True
        for i in range(m):
            for j in range(d):
                v = (data[start + i, j] - reference[j]) * factor
                rows[i, j] = v
                # False for NaN too.
                within &= abs(v) < limit
        if not within:
            return -1
        if m == _CHUNK:
            np.dot(rows, scaled, scores)
        else:
            scores[:m] = np.dot(rows[:m], scaled)
        for i in range(m):
            best = 0
            low = half[0] - scores[i, 0]
            for c in range(1, k):
                s = half[c] - scores[i, c]
                if s < low:
                    low = s
                    best = c
            labels[start + i] = best
            if fresh or previous[start + i] != best:
                changed += 1
            counts[best] += 1
            # Three loops over a buffer vectorise where one loop does not.
            for j in range(d):
                deviation[j] = data[start + i, j] - centers[best, j]
            for j in range(d):
                sums[best, j] += deviation[j]
            for j in range(d):
                squares[best, j] += deviation[j] * deviation[j]
    return changed


if numba is not None:
    # nogil: clients run side by side on threads.
    _lloyd_pass_compiled = numba.njit(cache=True, nogil=True)(_lloyd_pass_loops)
else:  # pragma: no cover - exercised only without numba
    _lloyd_pass_compiled = None


def lloyd_pass(data, centers, previous=None):
    """Labels and per-cluster statistics of one Lloyd iteration on a client's rows.

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_features)
    centers : ndarray of shape (n_clusters, n_features)
    previous : ndarray of shape (n_samples,) or None
        The labels of the last iteration (``None``: every row counts as changed).

    Returns
    -------
    labels : ndarray of shape (n_samples,)
        Nearest center of each row (ties to the lowest index), compared in the
        frame of :func:`~skfedclust.clusterers.nearest_center`; the two can
        differ only where rounding decides a near-tie.
    sums : ndarray of shape (n_clusters, n_features)
        Per cluster, the sum of its rows' deviations from its center.
    counts : ndarray of shape (n_clusters,)
    inertia : ndarray of shape (n_clusters,)
        Per cluster, the sum of its rows' squared distances to its center.
    changed : int
        Rows whose label differs from ``previous``.
    """
    data = np.ascontiguousarray(data, dtype=np.float64)
    # Writable copies of the small arguments: every read-only combination
    # would be compiled apart (seconds each).
    centers = np.array(centers, dtype=np.float64, order="C")
    n, d = data.shape
    k = centers.shape[0]
    if _lloyd_pass_compiled is not None and n and k >= 2:
        # The frame of nearest_center when the rows lie within the headroom.
        reference, _ = normalized_frame(centers)
        with np.errstate(over="ignore", invalid="ignore"):
            extent = np.abs(centers - reference).max()
        exponent = int(np.frexp(extent)[1]) if np.isfinite(extent) and extent > 0 else None
        # A subnormal extent would need a factor beyond the float range.
        if exponent is not None and exponent > -1000:
            factor = math.ldexp(1.0, -exponent)
            labels = np.empty(n, dtype=np.intp)
            sums = np.zeros((k, d))
            counts = np.zeros(k, dtype=np.int64)
            squares = np.zeros((k, d))
            if previous is None:
                before = np.full(1, -1, dtype=np.intp)
            else:
                before = np.require(previous, dtype=np.intp, requirements=["C", "W"])
            changed = _lloyd_pass_compiled(
                data, centers, reference, factor, before, labels, sums, counts, squares
            )
            if changed >= 0:
                return labels, sums, counts, squares.sum(axis=1), int(changed)
    return _lloyd_pass_numpy(data, centers, previous)


def fedkmeans_lloyd_statistics(data, inbox, state, party):
    """Client step of one Lloyd iteration: per-cluster statistics of the client's rows.

    Each row goes to its nearest center among those the server sent. Sent:
    per cluster the sum of the rows' deviations from their center (so a
    large common offset costs no precision), the number of rows and their
    squared distances, and how many of the client's rows changed cluster
    since its last iteration (all of them the first time).
    """
    labels, sums, counts, inertia, changed = lloyd_pass(
        data, inbox[TAG_CENTERS], state.get(_LABELS)
    )
    return Reply(
        send=(sums, counts, inertia, np.array([changed], dtype=np.int64)),
        keep={_LABELS: labels},
    )


def fedkmeans_far_rows(data, inbox, state, party):
    """Client step of the empty-cluster rule: statistics of the far rows of donor clusters.

    The server names donor clusters, their centers of the last iteration and
    a squared-distance threshold each (the donor's mean squared distance);
    the client sends, per donor, the sum of the deviations from the donor's
    center of its rows in that cluster lying beyond the threshold, and how
    many there are.
    """
    request = inbox[TAG_RELOCATE]
    labels = state[_LABELS]
    donors = np.asarray(request["donors"], dtype=np.intp)
    centers = np.asarray(request["centers"], dtype=np.float64)
    thresholds = np.asarray(request["thresholds"], dtype=np.float64)
    sums = np.zeros((len(donors), data.shape[1]))
    counts = np.zeros(len(donors), dtype=np.int64)
    for i, j in enumerate(donors):
        deviations = data[labels == j] - centers[i]
        far = np.einsum("ij,ij->i", deviations, deviations) > thresholds[i]
        sums[i] = deviations[far].sum(axis=0)
        counts[i] = np.count_nonzero(far)
    return Reply(send=(sums, counts))


def fedkmeans_inertia(data, inbox, state, party, *, output):
    """Client step: squared distances of the rows to their nearest center, summed.

    With ``output`` the client also hands its user the labels of its rows
    (the final labelling of the fit).
    """
    centers = np.asarray(inbox[TAG_CENTERS])
    labels = nearest_center(data, centers)
    deviations = data - centers[labels]
    inertia = np.array([np.einsum("ij,ij->", deviations, deviations)])
    return Reply(send=inertia, output={"labels": labels} if output else None)


def fedkmeans_nearest_distances(data, inbox, state, party, *, centers):
    """Client step for bound agreement: each row's squared distance to its nearest center."""
    return Reply(send=squared_distances(data, np.asarray(centers)).min(axis=1))


def fedkmeans_score_inertia(data, inbox, state, party, *, centers):
    """Client step of ``score``: the squared distances of the rows to the model's centers."""
    centers = np.asarray(centers)
    deviations = data - centers[nearest_center(data, centers)]
    return Reply(send=np.array([np.einsum("ij,ij->", deviations, deviations)]))


# --------------------------------------------------------------------------- #
# Server side
# --------------------------------------------------------------------------- #
def nearest_radius(centers, mean, spread):
    """A distance within which every row lies of its nearest center.

    Every row ``x`` satisfies ``|x_i - mean_i| <= spread`` (the agreed bound),
    so ``||x - c|| <= ||spread + |mean - c| ||`` for every center ``c``; the
    nearest center is no farther than the smallest of these.
    """
    gaps = spread + np.abs(np.asarray(centers) - np.asarray(mean))
    return float(np.sqrt(np.einsum("ij,ij->i", gaps, gaps)).min())


def _relocate_empty(centers, new, sums, counts, inertia, far):
    """Move each empty cluster to the mean of a donor cluster's far rows.

    ``far`` is ``(donors, far_sums, far_counts)``; the far rows leave their
    donor cluster, as scikit-learn's relocated row leaves its cluster.
    """
    empty = np.flatnonzero(counts == 0)
    donors, far_sums, far_counts = far
    for e, j, s, m in zip(empty, donors, far_sums, far_counts):
        if m == 0 or m >= counts[j]:
            continue
        new[e] = centers[j] + s / m
        new[j] = centers[j] + (sums[j] - s) / (counts[j] - m)
    return new


def _donors(counts, inertia):
    """Donor clusters for the empty ones: the largest inertia first, two rows at least."""
    n_empty = int(np.count_nonzero(counts == 0))
    order = np.argsort(-inertia, kind="stable")
    able = [int(j) for j in order if counts[j] >= 2 and inertia[j] > 0]
    return able[:n_empty]


# --------------------------------------------------------------------------- #
# Estimator
# --------------------------------------------------------------------------- #
class FederatedKMeans(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, CentroidPredictMixin, BaseFederatedClustering
):
    """Federated k-means: Lloyd's algorithm on securely aggregated cluster sums.

    Every iteration the server sends the centers; each client assigns its
    rows to the nearest center and contributes, per cluster, the sum of the
    rows' deviations from the center, their number and their squared
    distances; a secure sum (:class:`~skfedclust.secure.SecureAggregator`)
    gives the server the totals and nothing else, from which it computes the
    new centers. Given the same initial centers the iterations are those of
    :class:`sklearn.cluster.KMeans` (``algorithm="lloyd"``) on the pooled
    rows, with the same stopping rule.

    Read more in the :ref:`User Guide <fedkmeans>`.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    init : {"k-fed", "random"} or array-like of shape (n_clusters, n_features), \
            default="k-fed"
        Initial centers. ``"k-fed"``: the one-shot k-FED centers (every
        client uploads the centers of a local k-means, the server clusters
        them; see :class:`~skfedclust.KFed`). ``"random"``: centers drawn from
        a Gaussian with the securely aggregated mean and per-feature variance
        of the pooled rows (not scikit-learn's ``"random"``, which picks rows).
        An array: these centers.
    n_init : int, default=1
        Restarts (different k-FED seed clients or Gaussian draws); the fit of
        lowest federated inertia is kept. An array ``init`` runs once.
    max_iter : int, default=300
        Lloyd iterations at most.
    tol : float, default=1e-4
        Stop when the squared center shift of an iteration is at most ``tol``
        times the mean per-feature variance of the pooled rows (from secure
        moments), as scikit-learn does; Lloyd also stops when no row changes
        cluster.
    secure_aggregation : bool, default=True
        Add the clients' statistics by secure aggregation (the server learns
        only their totals). ``False`` sends every client's statistics to the
        server in the clear, for comparison.
    client_fraction : float in (0, 1], default=1.0
        Fraction of the clients the server samples (public random state) for
        each Lloyd iteration; below 1 an iteration uses the sampled clients'
        rows only (a stochastic variant, like mini-batch k-means).
    min_clients : int, default=None
        Fewest clients whose statistics must reach a sum; fewer raises
        :class:`FederatedKMeansError`. ``None`` asks for a majority of the
        clients taking part.
    partition : int, partition specification or None, default=None
        How to simulate clients from a pooled ``X``; ``None`` gives two IID
        clients.
    n_jobs : int, default=None
        Number of parallel client workers (joblib).
    random_state : int, RandomState instance or None, default=None
        Seeds the partition, the k-FED local k-means, the random centers, the
        client sampling and the secure-sum graph (all public), and, in a
        simulation, the parties' private masks.
    verbose : int, default=0
        Print progress per protocol stage.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Centers.
    labels_ : ndarray of shape (n_samples,)
        Nearest-center label of each input row (each client's own output).
    inertia_ : float
        Sum of the squared distances of the rows to their center (a secure sum).
    n_iter_ : int
        Lloyd iterations of the kept run.
    n_clients_ : int
        Number of clients.
    client_sizes_ : ndarray of shape (n_clients,)
        Rows held by each client.
    communication_ : dict
        Rounds and bytes, secure-sum set-up included; see :class:`~skfedclust.Ledger`.
    n_features_in_ : int
        Number of features seen during fit.

    See Also
    --------
    skfedclust.KFed : One-shot federated k-means (the default initialisation).
    sklearn.cluster.KMeans : The centralized algorithm this one reproduces.

    Notes
    -----
    **What the server learns.** With secure aggregation: per iteration the
    number of rows of every cluster, the sum of their deviations from the
    center and of their squared distances, and how many rows changed cluster,
    all totals over the clients; once per fit the pooled mean and per-feature
    variance, and two histograms of binary exponents (how many clients have
    their largest value, and their largest deviation from the mean, in each
    power-of-two range) that fix the public bounds of the fixed-point sums.
    The centers are means of clusters: a cluster of one row has that row as
    its center, as in any k-means. With ``init="k-fed"`` the server also
    receives each client's local centers (the k-FED upload), which are means
    of local clusters. With ``secure_aggregation=False`` every client's
    statistics reach the server.

    **Bounds.** Fixed point needs a public bound on each client's entries.
    The clients agree once per fit on a power of two ``D`` above every
    ``|x_i - m_i|`` (``m`` the securely aggregated mean). Every row then lies
    within ``R = min_c ||D + |m - c| ||`` of its nearest center, so a
    client of ``n_c`` rows has per-cluster sums below ``n_c R`` and squared
    distances below ``n_c R^2`` in absolute value; the bounds are twice
    these. A client whose values exceed them refuses to upload.

    **Empty clusters.** scikit-learn moves an empty cluster to the row
    farthest from its center, which would send that row to the server. Here
    an empty cluster goes to the mean of the rows of the cluster with the
    largest inertia that lie farther from its center than its mean squared
    distance, which leave that cluster (one more secure sum, only in the
    iterations that have empty clusters; further empty clusters take the next
    clusters by inertia). In an iteration with sampled or dropped clients an
    empty cluster keeps its center.

    **Dropouts.** A client that drops during a sum is left out of it; the
    iteration uses the others' rows. Strict convergence (no row changed
    cluster) is only declared in iterations every client answered.

    References
    ----------
    .. [1] S. P. Lloyd, "Least squares quantization in PCM", IEEE Transactions
       on Information Theory, 1982.
    .. [2] K. Bonawitz et al., "Practical secure aggregation for
       privacy-preserving machine learning", ACM CCS 2017.
    .. [3] D. K. Dennis, T. Li and V. Smith, "Heterogeneity for the win:
       one-shot federated clustering", ICML 2021.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfedclust import FederatedKMeans
    >>> X, _ = make_blobs(300, centers=3, random_state=0)
    >>> km = FederatedKMeans(n_clusters=3, random_state=0).fit([X[:100], X[100:200], X[200:]])
    >>> km.cluster_centers_.shape
    (3, 2)
    """

    _parameter_constraints: dict = {
        **BaseFederatedClustering._parameter_constraints,
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "init": [StrOptions({"k-fed", "random"}), "array-like"],
        "n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "secure_aggregation": ["boolean"],
        "client_fraction": [Interval(numbers.Real, 0, 1, closed="right")],
        "min_clients": [None, Interval(numbers.Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        init="k-fed",
        n_init=1,
        max_iter=300,
        tol=1e-4,
        secure_aggregation=True,
        client_fraction=1.0,
        min_clients=None,
        partition=None,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.secure_aggregation = secure_aggregation
        self.client_fraction = client_fraction
        self.min_clients = min_clients
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------ protocol
    def _check_survivors(self, tag, participants, survivors):
        needed = len(participants) // 2 + 1 if self.min_clients is None else self.min_clients
        if len(survivors) < needed:
            raise FederatedKMeansError(
                f"only {len(survivors)} of the {len(participants)} clients taking part in "
                f"{tag!r} answered; min_clients={self.min_clients} needs {needed}"
            )

    def _sample(self, active, random_state):
        if self.client_fraction >= 1.0:
            return list(active)
        n = max(math.ceil(self.client_fraction * len(active)), self.min_clients or 1)
        n = min(n, len(active))
        return sorted(int(c) for c in random_state.choice(active, n, replace=False))

    def _max_size(self, runtime, clients):
        return float(np.max(np.asarray(runtime.client_sizes)[clients]))

    def _moments(self, runtime, adder, clients):
        """Mean, per-feature variance and deviation bound of the pooled rows (secure sums)."""
        n_c = self._max_size(runtime, clients)
        raw = adder.bound(moments_rows, tag="bound on the rows", clients=clients)
        bounds = None if raw is None else [_MARGIN * n_c * raw, None]
        (sums, count), survivors = adder.sum(
            moments_raw, tag="sums and counts", bounds=bounds, clients=clients
        )
        self._check_survivors("sums and counts", clients, survivors)
        n = int(count[0])
        rough = sums / n
        spread = adder.bound(
            moments_deviations, tag="bound on the deviations", clients=survivors, mean=rough
        )
        bounds = None if spread is None else [_MARGIN * n_c * spread, _MARGIN * n_c * spread**2]
        (first, second), survivors2 = adder.sum(
            moments_centered,
            tag="centered moments",
            bounds=bounds,
            clients=survivors,
            mean=rough,
        )
        self._check_survivors("centered moments", survivors, survivors2)
        shift = first / n
        variance = np.maximum(second / n - shift**2, 0.0)
        return rough + shift, variance, rough, spread, survivors2

    def _initial_centers(self, runtime, adder, active, mean, variance, random_state):
        k = self.n_clusters
        if isinstance(self.init, str) and self.init == "random":
            return [
                mean + np.sqrt(variance) * random_state.standard_normal((k, len(mean)))
                for _ in range(self.n_init)
            ]
        if isinstance(self.init, str):  # "k-fed"
            runtime.stage("client step: k-means on each client (k-FED initialisation)")
            uploads = runtime.run(
                kfed_local_centers,
                tag="local centers",
                clients=active,
                n_clusters=k,
                solver="kmeans",
                n_init=1,
                max_iter=self.max_iter,
                send_sizes=False,
            )
            starts = []
            for _ in range(self.n_init):
                runtime.stage("server step: k-FED aggregation of the local centers")
                seed_client = int(random_state.randint(len(uploads)))
                starts.append(
                    runtime.server(
                        kfed_server_step,
                        uploads,
                        n_clusters=k,
                        seed_client=seed_client,
                        n_lloyd_steps=None,
                        weighted=False,
                        max_iter=self.max_iter,
                    )
                )
            return starts
        centers = np.array(self.init, dtype=np.float64)
        if centers.shape != (k, runtime.n_features):
            raise ValueError(
                f"init has shape {centers.shape}; expected (n_clusters, n_features) = "
                f"({k}, {runtime.n_features})"
            )
        if not np.all(np.isfinite(centers)):
            raise ValueError("init holds values that are not finite")
        if self.n_init != 1:
            warnings.warn(
                f"an array init gives one start: n_init={self.n_init} runs once",
                RuntimeWarning,
                stacklevel=6,
            )
        return [centers]

    def _lloyd(self, runtime, adder, centers, active, rough, spread, tol, random_state):
        """One run of federated Lloyd from ``centers``: centers, iterations."""
        n_iter = 0
        for i in range(self.max_iter):
            participants = self._sample(active, random_state)
            n_c = self._max_size(runtime, participants)
            runtime.broadcast(centers, tag=TAG_CENTERS, clients=participants)
            bounds = None
            if spread is not None:
                radius = nearest_radius(centers, rough, spread)
                bounds = [_MARGIN * n_c * radius, None, _MARGIN * n_c * radius**2, None]
            runtime.stage(f"iteration {i + 1}: client step, per-cluster statistics")
            (sums, counts, inertia, changed), survivors = adder.sum(
                fedkmeans_lloyd_statistics,
                tag="cluster statistics",
                bounds=bounds,
                clients=participants,
            )
            self._check_survivors("cluster statistics", participants, survivors)
            n_iter = i + 1
            runtime.stage(f"iteration {i + 1}: server step, new centers")
            filled = counts > 0
            new = centers.copy()
            new[filled] = centers[filled] + sums[filled] / counts[filled, None]
            everyone = survivors == list(active)
            if everyone and not filled.all():
                new = self._relocate(
                    runtime, adder, centers, new, sums, counts, inertia, survivors, bounds
                )
            if everyone and int(changed[0]) == 0:
                centers = new
                break
            shift = float(((new - centers) ** 2).sum())
            centers = new
            if shift <= tol:
                break
        return centers, n_iter

    def _relocate(self, runtime, adder, centers, new, sums, counts, inertia, clients, bounds):
        donors = _donors(counts, inertia)
        if not donors:
            return new
        runtime.stage(f"server step: {len(donors)} empty cluster(s) take far rows of others")
        runtime.broadcast(
            {
                "donors": np.array(donors, dtype=np.int64),
                "centers": centers[donors],
                "thresholds": inertia[donors] / counts[donors],
            },
            tag=TAG_RELOCATE,
            clients=clients,
        )
        (far_sums, far_counts), survivors = adder.sum(
            fedkmeans_far_rows,
            tag="far rows of the donor clusters",
            bounds=None if bounds is None else [bounds[0], None],
            clients=clients,
        )
        if survivors != list(clients):
            return new
        return _relocate_empty(centers, new, sums, counts, inertia, (donors, far_sums, far_counts))

    def _final_inertia(self, runtime, adder, centers, active, rough, spread, output):
        runtime.broadcast(centers, tag=TAG_CENTERS, clients=active)
        bounds = None
        if spread is not None:
            radius = nearest_radius(centers, rough, spread)
            bounds = [_MARGIN * self._max_size(runtime, active) * radius**2]
        runtime.stage("client step: inertia" + (" and labels" if output else ""))
        total, survivors = adder.sum(
            fedkmeans_inertia, tag="inertia", bounds=bounds, clients=active, output=output
        )
        self._check_survivors("inertia", active, survivors)
        return float(total[0])

    def _run_protocol(self, runtime, random_state):
        # Client steps spend their time in the compiled Lloyd pass, which
        # releases the GIL: threads run clients side by side without copying
        # their rows to worker processes at every iteration. A backend the
        # user chose (joblib.parallel_config) still wins.
        with parallel_config(prefer="threads"):
            self._protocol(runtime, random_state)

    def _protocol(self, runtime, random_state):
        everyone = list(range(runtime.n_clients))
        if self.min_clients is not None and self.min_clients > runtime.n_clients:
            raise ValueError(
                f"min_clients={self.min_clients} but there are {runtime.n_clients} clients"
            )
        # A sampled client needs sampled neighbours to mask with: with sampling
        # the secure-sum graph is complete.
        degree = runtime.n_clients - 1 if self.client_fraction < 1.0 else None
        adder = SumChannel(
            runtime,
            secure=self.secure_aggregation,
            seed=int(random_state.randint(np.iinfo(np.int32).max)),
            degree=degree,
        )
        runtime.stage("client step: secure moments of the pooled rows")
        mean, variance, rough, spread, active = self._moments(runtime, adder, everyone)
        # scikit-learn's tolerance: tol times the mean per-feature variance.
        tol = float(np.mean(variance)) * self.tol
        starts = self._initial_centers(runtime, adder, active, mean, variance, random_state)
        best = None
        for r, start in enumerate(starts):
            centers, n_iter = self._lloyd(
                runtime,
                adder,
                np.array(start, dtype=np.float64),
                active,
                rough,
                spread,
                tol,
                random_state,
            )
            inertia = self._final_inertia(
                runtime, adder, centers, active, rough, spread, output=len(starts) == 1
            )
            if best is None or inertia < best[0]:
                best = (inertia, centers, n_iter, r)
        self.inertia_, self.cluster_centers_, self.n_iter_, _ = best
        if len(starts) > 1:
            runtime.broadcast(self.cluster_centers_, tag=TAG_CENTERS, clients=active)
            runtime.stage("client step: nearest-center labels")
            runtime.run(fedkmeans_final_labels, tag="labels", clients=active)

    @property
    def _n_features_out(self):
        # Columns of transform: one distance per center.
        return self.cluster_centers_.shape[0]

    # ------------------------------------------------------------ new rows
    def transform(self, X):
        """Distances of each sample to every center.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            New data.

        Returns
        -------
        distances : ndarray of shape (n_samples, n_clusters)
            Euclidean distances, translation invariant at any offset.
        """
        check_is_fitted(self, "cluster_centers_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return np.sqrt(squared_distances(X, self.cluster_centers_))

    def fit_transform(self, X, y=None, client_ids=None):
        """Fit and return the distances of the input rows to the centers.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of array-like
            Any input form of :meth:`fit`.
        y : None
            Ignored.
        client_ids : array-like of shape (n_samples,), default=None
            Client of each pooled row.

        Returns
        -------
        distances : ndarray of shape (n_samples, n_clusters)
        """
        self.fit(X, y, client_ids=client_ids)
        rows = np.vstack(X) if input_form(X) == "clients" else X
        return self.transform(rows)

    def score(self, X, y=None):
        """Minus the inertia of ``X``'s rows, added up by a federated sum.

        Each holder of rows adds the squared distances of its rows to their
        nearest center (a secure sum when ``secure_aggregation``, with a
        public bound agreed as in the fit). For a pooled ``X`` this is minus
        the inertia, like :meth:`sklearn.cluster.KMeans.score`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of array-like
            Pooled rows (one holder) or a list of per-client arrays.
        y : None
            Ignored.

        Returns
        -------
        score : float
            Minus the sum of squared distances to the nearest center.
        """
        check_is_fitted(self, "cluster_centers_")
        if input_form(X) == "clients":
            blocks = [validate_data(self, Xi, dtype=np.float64, reset=False) for Xi in X]
        else:
            blocks = [validate_data(self, X, dtype=np.float64, reset=False)]
        rows = np.vstack(blocks)
        sizes = np.cumsum([0] + [len(b) for b in blocks])
        federation = Federation(
            rows, [np.arange(sizes[i], sizes[i + 1]) for i in range(len(blocks))]
        )
        random_state = np.random.RandomState(0)
        federation.spawn_seeds(random_state)
        runtime = InProcessRuntime(
            federation, n_jobs=self.n_jobs, name=f"{type(self).__name__}.score"
        )
        with parallel_config(prefer="threads"):
            return self._score(runtime)

    def _score(self, runtime):
        adder = SumChannel(runtime, secure=self.secure_aggregation, seed=0)
        clients = list(range(runtime.n_clients))
        # The model's centers are public to the holders of X's rows.
        centers = self.cluster_centers_
        bound = adder.bound(
            fedkmeans_nearest_distances,
            tag="bound on the distances",
            clients=clients,
            centers=centers,
        )
        bounds = None if bound is None else [_MARGIN * self._max_size(runtime, clients) * bound]
        total, _ = adder.sum(
            fedkmeans_score_inertia,
            tag="inertia",
            bounds=bounds,
            clients=clients,
            centers=centers,
        )
        return -float(total[0])


def fedkmeans_final_labels(data, inbox, state, party):
    """Client step: label the rows by the nearest of the kept centers; output the labels."""
    return Reply(output={"labels": nearest_center(data, inbox[TAG_CENTERS])})
