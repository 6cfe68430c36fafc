"""FeCA: one-shot federated k-means that repairs local solutions (Xu et al., TMLR 2024).

The protocol ("Jigsaw Game") has three steps and one communication:

1. every client runs Lloyd's k-means and removes its *one-fit-many* centroids,
   the centroids that sit between several true clusters (Algorithm 2);
2. every client attaches a radius to each centroid it keeps (Algorithm 4, or
   the theoretical Algorithm 3) and uploads the (centroid, radius) pairs;
3. the server groups the pooled centroids with radius balls, largest radius
   first, keeps the ``k`` largest groups and outputs their means (Algorithm 5).

The pure functions below (:func:`feca_client_update`, :func:`radius_empirical`,
:func:`radius_theoretical`, :func:`feca_server_aggregate` and the wrapper
:func:`feca_aggregate`) are usable without the estimator, for instance inside
a federated deep-clustering loop.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from scipy.spatial.distance import pdist, squareform
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from threadpoolctl import threadpool_limits

from ..clusterers import local_kmeans as _local_kmeans
from ..federation import Reply, summary
from ._base import BaseFederatedClustering, CentroidPredictMixin
from ._centroid_steps import final_labels, lloyd_statistics, secure_lloyd_step

__all__ = [
    "FeCA",
    "feca_aggregate",
    "feca_client_update",
    "feca_server_aggregate",
    "radius_empirical",
    "radius_theoretical",
]


# --------------------------------------------------------------------------- #
# Client side: Algorithm 2 (local k-means, then detect and eliminate)
# --------------------------------------------------------------------------- #
def _cluster_spread(points, center, sse, spread):
    """Spread of one cluster, the quantity whose argmax is the one-fit-many candidate."""
    if spread == "rms":
        # Multivariate standard deviation of the cluster: sqrt(G_i / |D_i|).
        return np.sqrt(sse / len(points))
    return float(np.std(np.linalg.norm(points - center, axis=1)))


def _sse(points, center):
    return float(((points - center) ** 2).sum())


def eliminate_one_fit_many(centers, clusters, *, spread="rms", merge_on_confirm=False):
    """Detect-and-eliminate loop of Algorithm 2 on a fitted local solution.

    Parameters
    ----------
    centers : ndarray of shape (n_centers, n_features)
        Centroids of the client's k-means.
    clusters : list of ndarray
        Points of each centroid's cluster (none empty).
    spread : {"rms", "distance_std"}, default="rms"
        How the one-fit-many candidate is picked: the cluster with the largest
        RMS distance to its centroid, or with the largest standard deviation of
        the distances to its centroid.
    merge_on_confirm : bool, default=False
        Also replace the many-fit-one pair by its merged cluster when a
        candidate is removed (not the paper-literal reading).

    Returns
    -------
    centers : ndarray of shape (n_kept, n_features)
        Centroids kept.
    clusters : list of ndarray
        Their clusters.
    n_removed : int
        Number of confirmed one-fit-many centroids removed.
    """
    centers = [np.asarray(c, dtype=float) for c in centers]
    clusters = list(clusters)
    # Per-cluster SSE and spread are cached: only a removal or merge changes them.
    sse = [_sse(D, c) for D, c in zip(clusters, centers)]
    spreads = [_cluster_spread(D, c, s, spread) for D, c, s in zip(clusters, centers, sse)]
    n_removed = 0
    # With two centroids the candidate is necessarily one of the pair and can
    # never pass the test (G_i <= G_p + G_q <= G_j), so the loop stops at 2.
    while len(centers) >= 3:
        i_star = int(np.argmax(spreads))  # ties: lowest index
        dists = squareform(pdist(np.vstack(centers)))
        dists[np.diag_indices_from(dists)] = np.inf
        p, q = np.unravel_index(int(np.argmin(dists)), dists.shape)  # lexicographic ties
        p, q = min(p, q), max(p, q)
        if i_star in (p, q):
            break
        merged = np.vstack([clusters[p], clusters[q]])
        c_j = merged.mean(axis=0)
        g_j = _sse(merged, c_j)
        if sse[i_star] < g_j:
            break
        n_removed += 1
        if merge_on_confirm:
            drop = sorted({i_star, p, q}, reverse=True)
            for idx in drop:
                for lst in (centers, clusters, sse, spreads):
                    del lst[idx]
            centers.append(c_j)
            clusters.append(merged)
            sse.append(g_j)
            spreads.append(_cluster_spread(merged, c_j, g_j, spread))
        else:
            for lst in (centers, clusters, sse, spreads):
                del lst[i_star]
    d = clusters[0].shape[1] if clusters else 0
    return (np.vstack(centers) if centers else np.empty((0, d))), clusters, n_removed


def local_kmeans(X, n_clusters, *, init="k-means++", n_init=10, max_iter=300, tol=1e-4, seed=None):
    """Step 1 of Algorithm 2: Lloyd's k-means on the client's own rows.

    A thin call of :func:`skfedclust.clusterers.local_kmeans` with
    ``drop_empty=True``: ``n_clusters`` is capped at the number of rows and
    clusters left empty (for instance by duplicate points) are dropped.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        The client's rows.
    n_clusters : int
        Clusters of the k-means (the paper's ``k'``).
    init, n_init, max_iter, tol : k-means settings
        ``init`` may be an array of initial centers (one start, ``n_init`` ignored).
    seed : int or None
        Seed of the k-means.

    Returns
    -------
    centers : ndarray of shape (n_nonempty, n_features)
    clusters : list of ndarray
        Points of each returned center.
    n_iter : int
        Lloyd iterations of the best restart.
    """
    # One thread also outside the protocol runtime (feca_aggregate): the OpenMP
    # reductions of scikit-learn's Lloyd depend on the thread count.
    with threadpool_limits(limits=1):
        local = _local_kmeans(
            X,
            n_clusters,
            init=init,
            n_init=n_init,
            max_iter=max_iter,
            tol=tol,
            seed=seed,
            drop_empty=True,
        )
    clusters = [X[local.labels == i] for i in range(len(local.centers))]
    return local.centers, clusters, local.n_iter


def feca_client_update(
    X,
    n_clusters,
    *,
    spread="rms",
    merge_on_confirm=False,
    eliminate=True,
    init="k-means++",
    n_init=10,
    max_iter=300,
    tol=1e-4,
    seed=None,
):
    """Algorithm 2 (ClientUpdate): local k-means, then removal of one-fit-many centroids.

    Points of removed clusters are discarded (not reassigned, no new Lloyd run),
    so the radii of the remaining centroids use only their own points.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        The client's rows.
    n_clusters : int
        Clusters of the local k-means (the paper's ``k'``), capped at ``n_samples``.
    spread, merge_on_confirm : see :func:`eliminate_one_fit_many`.
    eliminate : bool, default=True
        Run the detect-and-eliminate loop (``False`` is the Table 5 ablation).
    init, n_init, max_iter, tol : local k-means settings
        ``init`` may be an array of initial centers (one start, ``n_init`` ignored).
    seed : int or None
        Seed of the local k-means.

    Returns
    -------
    centers : ndarray of shape (n_kept, n_features)
    clusters : list of ndarray
    n_removed : int
    """
    centers, clusters, _ = local_kmeans(
        X, n_clusters, init=init, n_init=n_init, max_iter=max_iter, tol=tol, seed=seed
    )
    if not eliminate:
        return centers, clusters, 0
    return eliminate_one_fit_many(
        centers, clusters, spread=spread, merge_on_confirm=merge_on_confirm
    )


# --------------------------------------------------------------------------- #
# Client side: radius assignment (Algorithms 3 and 4)
# --------------------------------------------------------------------------- #
def _farthest_own_point(centers, clusters):
    """r'_i: distance from each centroid to the farthest point of its own cluster."""
    return np.array([np.sqrt(((D - c) ** 2).sum(axis=1).max()) for c, D in zip(centers, clusters)])


def radius_empirical(centers, clusters):
    """Algorithm 4: ``r_i = min(r'_i, r''_i)``.

    ``r'_i`` is the distance to the farthest own point, ``r''_i`` half the
    distance to the nearest other refined centroid (``+inf`` for a single
    centroid).

    Parameters
    ----------
    centers : ndarray of shape (n_centers, n_features)
        Centroids kept by Algorithm 2.
    clusters : list of ndarray
        Their clusters.

    Returns
    -------
    radii : ndarray of shape (n_centers,)
    """
    centers = np.asarray(centers, dtype=float)
    r_own = _farthest_own_point(centers, clusters)
    if len(centers) < 2:
        return r_own
    dists = squareform(pdist(centers))
    dists[np.diag_indices_from(dists)] = np.inf
    return np.minimum(r_own, dists.min(axis=1) / 2)


def radius_theoretical(centers, clusters):
    """Algorithm 3: one radius ``Δ̃ / 2`` for every centroid of the client.

    Centroids whose own balls (radius ``r'``) overlap their nearest alive
    neighbour's are set aside as many-fit-one pairs, visiting centroids in index
    order and searching neighbours among the alive ones; ``Δ̃`` is the smallest
    pairwise distance among the centroids left alive.

    Fallbacks outside the paper: with fewer than two alive centroids ``Δ̃`` is the
    smallest pairwise distance over all centroids; a single centroid gets its
    own ``r'``.

    Parameters
    ----------
    centers : ndarray of shape (n_centers, n_features)
    clusters : list of ndarray

    Returns
    -------
    radii : ndarray of shape (n_centers,)
    """
    centers = np.asarray(centers, dtype=float)
    r_own = _farthest_own_point(centers, clusters)
    n = len(centers)
    if n == 1:
        return r_own
    dists = squareform(pdist(centers))
    dists[np.diag_indices_from(dists)] = np.inf
    alive = np.ones(n, dtype=bool)
    for i in range(n):
        if not alive[i]:
            continue
        others = np.where(alive, dists[i], np.inf)
        j = int(np.argmin(others))
        if not np.isfinite(others[j]):
            break
        if r_own[i] + r_own[j] > dists[i, j]:
            alive[i] = alive[j] = False
    kept = dists[np.ix_(alive, alive)] if alive.sum() >= 2 else dists
    return np.full(n, kept.min() / 2)


# --------------------------------------------------------------------------- #
# Server side: Algorithm 5
# --------------------------------------------------------------------------- #
def feca_server_aggregate(centers, radii, n_clusters):
    """Algorithm 5 (ServerAggregation): radius-ball grouping, top-k groups, means.

    Repeatedly take the remaining centroid with the largest radius (ties: lowest
    pooled index) and group every remaining centroid inside its closed ball.
    Groups are ordered by size, descending (ties keep creation order); the first
    ``n_clusters`` are kept and each gives the unweighted mean of its members.

    Parameters
    ----------
    centers : ndarray of shape (n_pooled, n_features)
        Centroids received from all clients, client by client.
    radii : ndarray of shape (n_pooled,)
        Their radii.
    n_clusters : int
        Number of global centers wanted.

    Returns
    -------
    global_centers : ndarray of shape (min(n_clusters, n_groups), n_features)
    groups : list of ndarray of int
        Pooled indices of every group, ordered by size (kept groups first).
    """
    centers = np.asarray(centers, dtype=float)
    radii = np.asarray(radii, dtype=float)
    alive = np.ones(len(centers), dtype=bool)
    groups = []
    while alive.any():
        i = int(np.argmax(np.where(alive, radii, -np.inf)))
        inside = alive & (np.sqrt(((centers - centers[i]) ** 2).sum(axis=1)) <= radii[i])
        inside[i] = True  # the seed centroid always belongs to its own group
        groups.append(np.flatnonzero(inside))
        alive &= ~inside
    order = sorted(range(len(groups)), key=lambda g: -len(groups[g]))  # stable
    groups = [groups[g] for g in order]
    kept = groups[:n_clusters]
    return np.vstack([centers[g].mean(axis=0) for g in kept]), groups


def feca_aggregate(client_arrays, n_clusters, *, radius="empirical", random_state=None, **kwargs):
    """Run FeCA's three steps on a list of client arrays without the estimator.

    Meant for loops that re-cluster changing features every round (DeepFeCA).
    No communication is recorded; use :class:`FeCA` for the full protocol.

    Parameters
    ----------
    client_arrays : list of array-like of shape (n_samples_i, n_features)
        Data of each client.
    n_clusters : int
        Number of global centers (also the clients' ``k'``).
    radius : {"empirical", "theoretical"}, default="empirical"
        Radius rule (Algorithm 4 or 3).
    random_state : int, RandomState instance or None, default=None
        Seeds every client's k-means.
    **kwargs
        Passed to ``feca_client_update``.

    Returns
    -------
    centers : ndarray of shape (<= n_clusters, n_features)
    """
    rng = check_random_state(random_state)
    assign_radius = radius_empirical if radius == "empirical" else radius_theoretical
    pooled_c, pooled_r = [], []
    for Xi in client_arrays:
        Xi = check_array(Xi, dtype=np.float64)
        seed = int(rng.randint(np.iinfo(np.int32).max))
        c, D, _ = feca_client_update(Xi, n_clusters, seed=seed, **kwargs)
        pooled_c.append(c)
        pooled_r.append(assign_radius(c, D))
    centers, _ = feca_server_aggregate(np.vstack(pooled_c), np.concatenate(pooled_r), n_clusters)
    return centers


# --------------------------------------------------------------------------- #
# Protocol steps
# --------------------------------------------------------------------------- #
_RADIUS_RULES = {"empirical": radius_empirical, "theoretical": radius_theoretical}


@summary
def feca_client_step(
    data,
    inbox,
    state,
    party,
    *,
    n_local_clusters,
    radius,
    spread,
    merge_on_confirm,
    eliminate,
    init,
    n_init,
    max_iter,
    tol,
):
    """Client step of FeCA: Algorithm 2, then Algorithm 4 or 3.

    Sends the kept centroids and their radii, the only message of the
    protocol, with two int64 diagnostics riding along: the number of
    centroids removed and of local Lloyd iterations.

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_features)
        The client's rows.
    inbox, state : mapping
        Unused: the step needs nothing from the server or from earlier steps.
    party : Party
        The client; its public seed starts the local k-means.
    n_local_clusters : int
        Clusters of the local k-means (``k'``).
    radius : {"empirical", "theoretical"}
        Algorithm 4 or Algorithm 3.
    spread, merge_on_confirm : see :func:`eliminate_one_fit_many`.
    eliminate : bool
        Run the detect-and-eliminate loop.
    init, n_init, max_iter, tol : local k-means settings

    Returns
    -------
    reply : Reply
        ``send=(centers, radii, n_removed, n_iter)``.
    """
    centers, clusters, n_iter = local_kmeans(
        data,
        n_local_clusters,
        init=init,
        n_init=n_init,
        max_iter=max_iter,
        tol=tol,
        seed=party.seed,
    )
    n_removed = 0
    if eliminate:
        centers, clusters, n_removed = eliminate_one_fit_many(
            centers, clusters, spread=spread, merge_on_confirm=merge_on_confirm
        )
    radii = _RADIUS_RULES[radius](centers, clusters)
    return Reply(send=(centers, radii, np.int64(n_removed), np.int64(n_iter)))


def feca_server_step(uploads, *, n_clusters):
    """Server step of FeCA: Algorithm 5 on the pooled (centroid, radius) pairs.

    Centroids are pooled client by client, so radius ties go to the lowest
    client, then the lowest centroid of that client.

    Parameters
    ----------
    uploads : Received
        ``(centers, radii)`` of every client.
    n_clusters : int
        Number of global centers wanted.

    Returns
    -------
    centers, groups : see :func:`feca_server_aggregate`
    """
    payloads = uploads.list()
    return feca_server_aggregate(
        np.vstack([p[0] for p in payloads]),
        np.concatenate([p[1] for p in payloads]),
        n_clusters,
    )


def lloyd_server_update(stats, *, centers):
    """Server step of one federated Lloyd iteration; empty centers stay where they are.

    The clients' sums are relative to ``centers[0]`` (see
    :func:`~skfedclust.methods._centroid_steps.lloyd_statistics`), so the mean of a center's rows
    is ``centers[0] + sum / count``.

    Parameters
    ----------
    stats : Received
        ``(sums, counts)`` of every client for the broadcast ``centers``.
    centers : ndarray of shape (n_centers, n_features)
        The centers the server broadcast (its own output).

    Returns
    -------
    centers : ndarray of shape (n_centers, n_features)
    """
    payloads = stats.list()
    total = np.sum([sums for sums, _ in payloads], axis=0)
    n = np.sum([counts for _, counts in payloads], axis=0)
    new = np.array(centers, dtype=np.float64, copy=True)
    filled = n > 0
    new[filled] = centers[0] + total[filled] / n[filled, None]
    return new


# --------------------------------------------------------------------------- #
# Estimator
# --------------------------------------------------------------------------- #
class FeCA(CentroidPredictMixin, BaseFederatedClustering):
    """FeCA: one-shot federated k-means that repairs local solutions.

    Lloyd's k-means often stops at a *local solution*: one centroid sits between
    several true clusters (*one-fit-many*) while several centroids share one
    true cluster (*many-fit-one*). FeCA lets every client run k-means, remove
    its one-fit-many centroids and attach a radius to each centroid it keeps;
    the server groups the pooled centroids with radius balls, largest radius
    first, and averages the ``n_clusters`` largest groups. Different clients
    miss different true centers, so together they cover all of them. One
    round of communication: each client uploads at most ``k'`` centroids and
    ``k'`` radii.

    Read more in the :ref:`User Guide <feca>`.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of global centers ``k``.
    client_n_clusters : int, default=None
        Clusters of each client's k-means (the paper's ``k'``); ``None`` uses
        ``n_clusters``. Capped at each client's number of rows.
    radius : {"empirical", "theoretical"}, default="empirical"
        Radius rule: Algorithm 4 (``min`` of the farthest own point and half
        the distance to the nearest kept centroid; used in all of the paper's
        experiments) or Algorithm 3 (one radius per client, half the smallest
        distance between centroids that are not many-fit-one pairs).
    spread : {"rms", "distance_std"}, default="rms"
        "Standard deviation" of a cluster used to pick the one-fit-many
        candidate: RMS distance to the centroid, or standard deviation of the
        distances to the centroid. The paper's wording allows both; ``"rms"``
        picks the right cluster far more often.
    merge_on_confirm : bool, default=False
        When a candidate is removed, also merge the many-fit-one pair. The
        paper removes only the candidate (the default).
    eliminate : bool, default=True
        Run the detect-and-eliminate loop. ``False`` is the paper's ablation.
    init : {"k-means++", "random"} or array-like of shape (client_n_clusters, n_features), \
            default="k-means++"
        Initialization of every client's k-means. An array starts every client
        from the same centers (one start).
    n_init : int, default=10
        Restarts of every client's k-means.
    max_iter : int, default=300
        Iterations of every client's k-means.
    tol : float, default=1e-4
        Convergence tolerance of every client's k-means.
    final_lloyd_step : bool, default=False
        After aggregation, run one federated Lloyd iteration: clients send
        per-center sums and counts for the FeCA centers, the server moves each
        center to the mean, and labels use the moved centers. The paper does
        this before measuring Purity and NMI in its client-number study. By
        secure sums (``secure_aggregation=True``: one set-up round and four
        rounds, the server learns the totals only) or in the clear (one round,
        every client's sums and counts).
    secure_aggregation : bool, default=True
        Add the final Lloyd step's sums and counts by secure aggregation.
    compute_inertia : bool, default=False
        Compute ``inertia_`` after the fit: two secure sums over the clients
        (a public bound on a client's inertia, then the inertia), five
        evaluation rounds (their set-up included) and their bytes on top of
        the method's own messages. Off by default, so that ``communication_`` counts the
        method's messages only; :func:`~skfedclust.metrics.federated_score`
        and :func:`~skfedclust.model_selection.select_n_clusters` evaluate a
        fitted model when asked.
    partition : int, partition specification or None, default=None
        How to simulate clients from a pooled ``X``: an int gives that many IID
        clients, a specification from :mod:`skfedclust.partition` any other
        split, ``None`` three IID clients.
    n_jobs : int, default=None
        Number of parallel client workers (joblib).
    random_state : int, RandomState instance or None, default=None
        Seeds the partition and every client's k-means.
    verbose : int, default=0
        Print progress per protocol stage (``1``), and every few seconds of a
        long client step how many clients are done; ``2`` adds debug detail.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters_found, n_features)
        Global centers, ordered by server group size (after the Lloyd step if
        ``final_lloyd_step``).
    feca_centers_ : ndarray of shape (n_clusters_found, n_features)
        Centers output by the server aggregation, before any Lloyd step.
    n_clusters_ : int
        Number of centers found. It is smaller than ``n_clusters`` only when
        the server finds fewer radius groups (for instance when every client
        returns the same few centroids); a ``UserWarning`` is raised then.
    labels_ : ndarray of shape (n_samples,)
        Nearest-center label of each input row.
    inertia_ : float
        Only with ``compute_inertia=True``.
        Sum of squared distances of the training rows to their nearest
        center, from a secure sum at the end of the fit (the server learns
        the total, not a client's share); :meth:`score` gives it for rows
        the caller holds.
    local_centers_ : list of ndarray
        Centroids each client uploaded (after removing one-fit-many ones).
    radii_ : list of ndarray
        Radius of each uploaded centroid.
    n_removed_ : ndarray of shape (n_clients,)
        One-fit-many centroids each client removed (known to the client only).
    server_groups_ : list of ndarray
        Pooled indices (client by client, centroid by centroid) of every
        server group, largest first; the first ``n_clusters_`` were kept.
    n_clients_ : int
        Number of clients.
    client_sizes_ : ndarray of shape (n_clients,)
        Rows held by each client.
    communication_ : dict
        Rounds and bytes exchanged; see :class:`~skfedclust.federation.Ledger`. One
        round (with ``final_lloyd_step``, four more and a set-up round by
        secure sums, one more in the clear); the labels and the inertia's two
        secure sums are in ``evaluation_rounds``.
    n_iter_ : int
        Largest number of Lloyd iterations run by a client's local k-means.
    n_features_in_ : int
        Number of features seen during fit.

    See Also
    --------
    skfedclust.KFed : one-shot federated k-means for clients holding few clusters.
    skfedclust.MAvg : averaging of Hungarian-matched client centroids.
    skfedclust.FederatedFuzzyCMeans : iterative federated fuzzy c-means.

    Notes
    -----
    Resolutions of points the paper leaves open (see the User Guide): the
    elimination loop runs while at least three centroids remain and stops when
    the candidate is one of the closest pair; points of removed clusters are
    discarded; ties go to the lowest index. The clients reveal centroids and
    radii, and a radius reveals the distance to a cluster's farthest point.

    References
    ----------
    .. [1] J. Xu, H.-Y. Chen, W.-L. Chao and Y. Zhang, "Jigsaw Game: Federated
       Clustering", Transactions on Machine Learning Research, 2024.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfedclust import FeCA
    >>> X, _ = make_blobs(600, centers=4, cluster_std=0.5, random_state=0)
    >>> est = FeCA(n_clusters=4, partition=3, random_state=0).fit(X)
    >>> est.cluster_centers_.shape, est.communication_["rounds"]
    ((4, 2), 1)
    >>> len(est.local_centers_), len(est.radii_)
    (3, 3)
    """

    _parameter_constraints: dict = {
        **BaseFederatedClustering._parameter_constraints,
        "compute_inertia": ["boolean"],
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "client_n_clusters": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "radius": [StrOptions({"empirical", "theoretical"})],
        "spread": [StrOptions({"rms", "distance_std"})],
        "merge_on_confirm": ["boolean"],
        "eliminate": ["boolean"],
        "init": [StrOptions({"k-means++", "random"}), "array-like"],
        "n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "final_lloyd_step": ["boolean"],
        "secure_aggregation": ["boolean"],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        client_n_clusters=None,
        radius="empirical",
        spread="rms",
        merge_on_confirm=False,
        eliminate=True,
        init="k-means++",
        n_init=10,
        max_iter=300,
        tol=1e-4,
        final_lloyd_step=False,
        secure_aggregation=True,
        compute_inertia=False,
        partition=None,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.client_n_clusters = client_n_clusters
        self.radius = radius
        self.spread = spread
        self.merge_on_confirm = merge_on_confirm
        self.eliminate = eliminate
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.final_lloyd_step = final_lloyd_step
        self.secure_aggregation = secure_aggregation
        self.compute_inertia = compute_inertia
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _check_init(self, n_features):
        if isinstance(self.init, str):
            return self.init, self.client_n_clusters or self.n_clusters
        init = check_array(self.init, dtype=np.float64, input_name="init")
        k_local = self.client_n_clusters or self.n_clusters
        if init.shape != (k_local, n_features):
            raise ValueError(
                f"init has shape {init.shape} but must be (client_n_clusters, n_features) "
                f"= ({k_local}, {n_features})"
            )
        return init, k_local

    def _run_protocol(self, runtime, random_state):
        init, k_local = self._check_init(runtime.n_features)
        runtime.stage(
            f"client step: k-means with {k_local} clusters, one-fit-many removal, "
            f"{self.radius} radii"
        )
        uploads = runtime.run(
            feca_client_step,
            tag="centroids and radii",
            n_local_clusters=k_local,
            radius=self.radius,
            spread=self.spread,
            merge_on_confirm=self.merge_on_confirm,
            eliminate=self.eliminate,
            init=init,
            n_init=self.n_init,
            max_iter=self.max_iter,
            tol=self.tol,
        )

        runtime.stage("server step: radius-ball grouping, top-k groups, group means")
        centers, groups = runtime.server(feca_server_step, uploads, n_clusters=self.n_clusters)
        if len(centers) < self.n_clusters:
            warnings.warn(
                f"FeCA's server found only {len(centers)} radius groups for n_clusters="
                f"{self.n_clusters} (the clients' centroids cover fewer distinct clusters); "
                f"returning {len(centers)} centers.",
                UserWarning,
                stacklevel=3,
            )
        self.feca_centers_ = centers
        centers_tag = "global centers"

        if self.final_lloyd_step:
            if self.secure_aggregation:
                centers = secure_lloyd_step(runtime, random_state, centers, centers_tag=centers_tag)
            else:
                runtime.broadcast(centers, tag=centers_tag)
                runtime.stage("one federated Lloyd step on the FeCA centers")
                stats = runtime.run(lloyd_statistics, tag="sums and counts")
                centers = runtime.server(lloyd_server_update, stats, centers=centers)
            centers_tag = "refined centers"

        final_labels(self, runtime, random_state, centers, centers_tag=centers_tag)
        self.cluster_centers_ = centers
        self.n_clusters_ = len(centers)
        # What the clients sent, diagnostics included: the server saw it all.
        payloads = uploads.list()
        self.local_centers_ = [p[0] for p in payloads]
        self.radii_ = [p[1] for p in payloads]
        self.n_removed_ = np.array([p[2] for p in payloads], dtype=np.intp)
        self.n_iter_ = int(max(p[3] for p in payloads))
        self.server_groups_ = groups
