"""GOLD: one-shot federated clustering of Non-ICD data (Zhang et al., IEEE IoT Journal 2026).

GOLD (Global Oriented Local Distribution learning) is built for the hardest
kind of heterogeneity, *Non-ICD* data (non-independent, completely
distributed): every global cluster may be fragmented into sub-clusters that
are scattered over the clients at different granularities, so no client sees
a complete cluster.

1. Every client runs FCPL (fine-grained competitive penalized learning,
   :func:`~skfedclust.clusterers.fine_grained_cpl`) on its own rows and finds
   compact micro-clusters; their number is learnt.
2. Every client uploads its micro-centroids, once.
3. The server runs MCPL (:func:`~skfedclust.clusterers.multi_granular_cpl`) on
   the stacked micro-centroids: partitions at several, decreasing
   granularities, one column of a categorical code per level.
4. REMC (:func:`~skfedclust.clusterers.remc`), a feature-weighted k-modes,
   clusters these codes into ``n_clusters`` global clusters.
5. The server sends every client the global label of each of its
   micro-clusters; every sample inherits the label of its micro-cluster.

References
----------
Y. Zhang, S. Cai, Z. Yang, S. Feng, Y. Ji and H. Zhang, "One-Shot Federated
Clustering of Non-Independent Completely Distributed Data", IEEE Internet of
Things Journal, 2026 (arXiv:2601.17512).
"""

from __future__ import annotations

import numbers
import warnings
from typing import NamedTuple

import numpy as np
from joblib import parallel_config
from sklearn.cluster import kmeans_plusplus
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, RealNotInt, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..clusterers import center_means, local_kmeans, nearest_center
from ..clusterers._cpl import canonical_order, fine_grained_cpl, multi_granular_cpl
from ..clusterers._remc import remc
from ..federation import (
    Reply,
    per_client_inputs,
    releases_nothing,
    side_by_side,
    summand,
    summary,
)
from ..partition import IIDPartition
from ..preprocessing import client_moments, combine_moments
from ..secure import SumChannel, pooled_moments
from ._base import BaseFederatedClustering
from ._centroid_steps import final_labels, inertia_message, pooled_inertia

__all__ = ["GOLDClustering", "GOLDServerResult", "gold_server_cluster"]

#: Clients simulated from a pooled ``X`` when ``partition=None`` (the authors' setting).
DEFAULT_N_CLIENTS = 8


# ---------------------------------------------------------------- client side
# The online pass visits the rows one after another on one thread (compiled,
# without the GIL): clients run it side by side on the cores.
@side_by_side
@summary
def gold_micro_clusters(
    data,
    inbox,
    state,
    party,
    *,
    local_init,
    learning_rate,
    max_iter,
    min_cluster_size,
    visit_order="storage",
    seed=None,
    send_sizes=False,
):
    """Client step: FCPL on the client's rows; send the micro-centroids (spec 2.3-2.4).

    With standardization, the pooled mean and scale of the pre-round arrive in
    the inbox and the client z-scores its rows first. The micro-cluster of
    every row and the feature weights stay on the client.

    In ``"canonical"`` visiting order every client runs FCPL from the same
    public ``seed`` on its rows in :func:`~skfedclust.clusterers.canonical_order`,
    so that its micro-clusters depend on its rows alone, not on their storage
    order nor on the client's position; in ``"storage"`` order it uses its
    own public seed, ``party.seed``. With ``send_sizes`` the number of rows
    of every micro-cluster is uploaded too (for the server's refinement).
    """
    X = data
    if "standardization" in inbox:
        mean, scale = inbox["standardization"]
        X = (data - mean) / scale
    res = fine_grained_cpl(
        X,
        local_init=local_init,
        learning_rate=learning_rate,
        max_iter=max_iter,
        min_cluster_size=min_cluster_size,
        order=visit_order,
        random_state=seed if visit_order == "canonical" else party.seed,
    )
    keep = {
        "micro_labels": res.labels,
        "micro_sizes": res.sizes,
        "feature_weights": res.feature_weights,
    }
    # The number of CPL passes rides along (one int64), for ``n_iter_``.
    message = (res.centers, np.int64(res.n_iter))
    if send_sizes:
        message += (res.sizes.astype(np.int64),)
    return Reply(send=message, keep=keep)


@releases_nothing
def gold_inherit_labels(data, inbox, state, party):
    """Client step: every row takes the global label of its micro-cluster (spec 2.8).

    ``y_ij = g_i[l_ij]``: ``g_i`` is the server's global label of each of the
    client's micro-clusters, ``l_ij`` the micro-cluster of row ``j``. Nothing is
    sent.
    """
    global_labels = np.asarray(inbox["micro-cluster labels"])
    return Reply(output={"labels": global_labels[state["micro_labels"]]})


@per_client_inputs("micro-cluster labels")
@summand
def gold_labels_and_inertia(data, inbox, state, party, *, centers_tag):
    """Client step: inherit the labels (:func:`gold_inherit_labels`) and send the inertia.

    The inertia is that of the client's rows on their nearest global
    prototype, in the input's units (the prototypes arrive under
    ``centers_tag``), for a secure sum; the prototypes are kept for its
    next step.
    """
    reply = gold_inherit_labels(data, inbox, state, party)
    centers = inbox[centers_tag]
    return Reply(
        send=inertia_message(data, centers), keep={centers_tag: centers}, output=reply.output
    )


# ---------------------------------------------------------------- server side
class GOLDServerResult(NamedTuple):
    """What GOLD's server computes from the stacked micro-centroids.

    Attributes
    ----------
    labels : ndarray of shape (n_micro_clusters,)
        Global cluster of every micro-centroid (``q`` of the paper).
    centers : ndarray of shape (n_found, n_features)
        Global prototypes: the unweighted mean of the member micro-centroids
        (with ``refine``, the centers of the refinement).
    granular_codes : ndarray of shape (n_micro_clusters, n_levels)
        MCPL cluster of every micro-centroid at every level (``Z``).
    level_n_clusters : ndarray of shape (n_levels,)
        Cluster count of every MCPL level, strictly decreasing.
    remc_weights : ndarray of shape (n_clusters, n_levels) or None
        REMC's level weights of every global cluster (None when REMC did not
        give the partition: ``n_clusters=None``, too few distinct
        micro-centroids, or the k-means fallback).
    n_attempts : int
        MCPL + REMC attempts made (1 when the first one succeeded).
    fallback : bool
        True when every attempt failed and k-means on the micro-centroids
        gave the partition.
    n_refine_iter : int
        Iterations of the k-means refinement (0 without ``refine``).
    """

    labels: np.ndarray
    centers: np.ndarray
    granular_codes: np.ndarray
    level_n_clusters: np.ndarray
    remc_weights: np.ndarray | None
    n_attempts: int
    fallback: bool
    n_refine_iter: int = 0


#: Iteration bound of the server's k-means refinement (it runs on the few
#: micro-centroids, so the bound is generous).
REFINE_MAX_ITER = 300


def refine_partition(points, labels, n_clusters, *, weights=None, max_iter=REFINE_MAX_ITER):
    """Weighted k-means iterations that start from a given partition.

    Centers are the weighted means of their members; every point then moves
    to its nearest center (ties: the lowest index), until no point moves. A
    cluster left empty restarts from the point farthest from its center among
    the clusters of two or more points, as k-means implementations do, so the
    result keeps ``n_clusters`` non-empty clusters whenever there are that
    many points. Identical points always share a cluster.

    Parameters
    ----------
    points : ndarray of shape (n_points, n_features)
        Points (GOLD: the distinct micro-centroids).
    labels : ndarray of shape (n_points,)
        Starting partition, in ``0..n_clusters - 1``.
    n_clusters : int
        Number of clusters.
    weights : ndarray of shape (n_points,), default=None
        Weight of each point (its multiplicity; 1 if None).
    max_iter : int, default=300
        Largest number of reassignments.

    Returns
    -------
    labels : ndarray of shape (n_points,)
    centers : ndarray of shape (n_clusters, n_features)
    n_iter : int
    """
    points = np.asarray(points, dtype=np.float64)
    weights = np.ones(len(points)) if weights is None else np.asarray(weights, dtype=float)
    labels = np.asarray(labels, dtype=np.int64)
    centers, _ = center_means(points, labels, n_clusters, weights=weights)
    n_iter = 0
    while n_iter < max_iter:
        n_iter += 1
        new = np.asarray(nearest_center(points, centers), dtype=np.int64)
        new = _fill_empty_clusters(points, new, centers, n_clusters)
        if np.array_equal(new, labels):
            break
        labels = new
        centers, _ = center_means(points, labels, n_clusters, weights=weights, previous=centers)
    return labels, centers, n_iter


def _weighted_inertia(points, labels, centers, weights):
    return float(weights @ ((points - centers[labels]) ** 2).sum(axis=1))


def _refine(points, labels, n_clusters, weights, n_init, rng):
    # REMC's partition first, then k-means++ starts: the smallest weighted
    # inertia wins, REMC's on ties.
    best = refine_partition(points, labels, n_clusters, weights=weights)
    best_inertia = _weighted_inertia(points, best[0], best[1], weights)
    seeds = rng.randint(np.iinfo(np.int32).max, size=n_init) if n_init else []
    for seed in seeds:
        start, _ = kmeans_plusplus(
            points, n_clusters, sample_weight=weights, random_state=int(seed)
        )
        start_labels = np.asarray(nearest_center(points, start), dtype=np.int64)
        run = refine_partition(points, start_labels, n_clusters, weights=weights)
        inertia = _weighted_inertia(points, run[0], run[1], weights)
        if inertia < best_inertia:
            best, best_inertia = run, inertia
    return best


def _fill_empty_clusters(points, labels, centers, n_clusters):
    sizes = np.bincount(labels, minlength=n_clusters)
    empty = np.flatnonzero(sizes == 0)
    if not len(empty):
        return labels
    labels = labels.copy()
    distance = ((points - centers[labels]) ** 2).sum(axis=1)
    # Farthest first; among equals the lowest index (a deterministic choice).
    for row in np.lexsort((np.arange(len(points)), -distance)):
        if not len(empty):
            break
        if sizes[labels[row]] > 1:
            sizes[labels[row]] -= 1
            labels[row], empty = empty[0], empty[1:]
    return labels


def _distinct_rows(T, canonical, rng):
    # The server works on the distinct micro-centroids: identical ones then get
    # identical codes and labels. In canonical order (sorted, then shuffled by
    # the server's seed) nothing depends on the order of clients or rows.
    distinct, first, inverse = np.unique(T, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    if canonical:
        order = canonical_order(distinct, rng)
    else:
        order = np.argsort(first, kind="stable")
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    return distinct[order], position[inverse]


def gold_server_cluster(
    centers,
    n_clusters,
    *,
    server_init=0.5,
    learning_rate=0.05,
    max_iter=30,
    min_cluster_size=2,
    remc_max_iter=30,
    remc_divergence="reference",
    remc_n_init=1,
    n_retries=10,
    refine=False,
    refine_n_init=0,
    sample_weight=None,
    order="storage",
    random_state=None,
):
    """GOLD's server: MCPL levels, then REMC on their code (spec 2.5-2.6).

    MCPL draws fresh partitions of the micro-centroids at decreasing
    granularities; their labels form a categorical code that REMC clusters
    into ``n_clusters`` groups. REMC cannot start when the code has fewer
    distinct rows than ``n_clusters``, and a run can end with an empty
    cluster; either way MCPL and REMC are run again with fresh draws, up to
    ``n_retries`` times, after which k-means on the micro-centroids gives the
    partition (with a warning; not in the paper). ``n_clusters=None`` returns
    the coarsest MCPL level (automatic number of clusters; not in the paper).

    The server works on the distinct micro-centroids, so identical ones get
    identical codes and labels. With ``refine`` (not in the paper), weighted
    k-means iterations on the micro-centroids start from REMC's partition
    (:func:`refine_partition`): REMC groups the codes without looking at
    distances, and the refinement moves every micro-centroid to its nearest
    global prototype.

    Parameters
    ----------
    centers : array-like of shape (n_micro_clusters, n_features)
        The stacked micro-centroids of every client.
    n_clusters : int or None
        Number of global clusters, or None for the coarsest MCPL level.
    server_init : int or float, default=0.5
        Seed clusters of the first MCPL stage: a count or a fraction.
    learning_rate, max_iter, min_cluster_size : CPL settings
        See :func:`~skfedclust.clusterers.multi_granular_cpl`.
    remc_max_iter, remc_divergence, remc_n_init : REMC settings
        See :func:`~skfedclust.clusterers.remc`.
    n_retries : int, default=10
        Fresh MCPL + REMC attempts after a failed one.
    refine : bool, default=False
        Refine REMC's partition by weighted k-means iterations on the
        micro-centroids.
    refine_n_init : int, default=0
        With ``refine``, k-means++ starts refined next to REMC's partition;
        the refined partition of smallest weighted inertia is kept (REMC's
        on ties).
    sample_weight : array-like of shape (n_micro_clusters,), default=None
        Weight of every micro-centroid in the refinement (the rows of its
        micro-cluster); 1 if None. Identical micro-centroids add up.
    order : {"storage", "canonical"}, default="storage"
        Order in which MCPL visits the distinct micro-centroids: as uploaded
        (client after client, the authors' implementation) or sorted and
        shuffled by the server's seed, so that the result does not depend on
        the order of the clients or of their micro-centroids.
    random_state : int, RandomState instance or None, default=None
        The server's randomness, one stream for every attempt.

    Returns
    -------
    result : GOLDServerResult

    Raises
    ------
    ValueError
        If fewer micro-centroids than ``n_clusters`` (or than 2) are given.
    """
    T = np.asarray(centers, dtype=np.float64)
    if len(T) < 2 or (n_clusters is not None and len(T) < n_clusters):
        raise ValueError(
            f"GOLD's server received {len(T)} micro-centroids in all, fewer than "
            f"{max(2, n_clusters or 2)}: it cannot form n_clusters={n_clusters} global "
            "clusters. Use fewer clusters, more data per client, or a larger local_init."
        )
    if order not in ("storage", "canonical"):
        raise ValueError(f"order must be 'storage' or 'canonical', got {order!r}.")
    rng = check_random_state(random_state)
    U, inverse = _distinct_rows(T, order == "canonical", rng)
    weight = np.ones(len(T)) if sample_weight is None else np.asarray(sample_weight, float)
    multiplicity = np.bincount(inverse, weights=weight, minlength=len(U))

    def finish(u_labels, k, codes, levels, weights, attempts, fallback):
        labels = u_labels[inverse].astype(np.int64)
        n_iter = 0
        if refine:
            u_labels, centers_, n_iter = _refine(U, u_labels, k, multiplicity, refine_n_init, rng)
            labels = u_labels[inverse].astype(np.int64)
        else:
            centers_, _ = center_means(T, labels, k)
        return GOLDServerResult(
            labels, centers_, codes[inverse], levels, weights, attempts, fallback, n_iter
        )

    if len(U) < 2 or (n_clusters is not None and len(U) < n_clusters):
        warnings.warn(
            f"GOLD: the {len(T)} micro-centroids hold only {len(U)} distinct points, fewer "
            f"than n_clusters={n_clusters}: identical rows are kept together, so only "
            f"{len(U)} global clusters are formed.",
            UserWarning,
            stacklevel=2,
        )
        u_labels = np.arange(len(U))
        codes = u_labels[:, None]
        return finish(u_labels, len(U), codes, np.array([len(U)]), None, 0, False)

    attempts = 0
    for attempts in range(1, n_retries + 2):
        mcpl = multi_granular_cpl(
            U,
            server_init=server_init,
            learning_rate=learning_rate,
            max_iter=max_iter,
            min_cluster_size=min_cluster_size,
            random_state=rng,
        )
        codes = mcpl.granular_codes
        if n_clusters is None:
            u_labels = codes[:, -1]
            return finish(
                u_labels,
                int(u_labels.max()) + 1,
                codes,
                mcpl.n_clusters_per_level,
                None,
                attempts,
                False,
            )
        if len(np.unique(codes, axis=0)) < n_clusters:
            continue
        with warnings.catch_warnings():
            # An empty cluster is handled here: the attempt is made again.
            warnings.simplefilter("ignore", RuntimeWarning)
            res = remc(
                codes,
                n_clusters,
                max_iter=remc_max_iter,
                divergence=remc_divergence,
                n_init=remc_n_init,
                random_state=rng,
            )
        if len(np.unique(res.labels)) < n_clusters:
            continue
        return finish(
            res.labels, n_clusters, codes, mcpl.n_clusters_per_level, res.weights, attempts, False
        )
    warnings.warn(
        f"GOLD: in {attempts} attempts, MCPL + REMC never gave n_clusters={n_clusters} "
        f"non-empty clusters of the {len(T)} micro-centroids (the last multi-granular code "
        f"has {len(np.unique(codes, axis=0))} distinct rows); the global clusters come from "
        "k-means on the micro-centroids instead.",
        UserWarning,
        stacklevel=2,
    )
    km = local_kmeans(U, n_clusters, n_init=10, seed=int(rng.randint(np.iinfo(np.int32).max)))
    return finish(
        np.asarray(km.labels), n_clusters, codes, mcpl.n_clusters_per_level, None, attempts, True
    )


def gold_server_step(uploads, **params):
    """Server step on the received micro-centroids: the global label of each one.

    The micro-centroids are stacked client after client (the server knows
    which rows came from which client, to route the labels back), then
    :func:`gold_server_cluster` runs MCPL and REMC.

    Returns
    -------
    result : GOLDServerResult
        For the stacked micro-centroids.
    client_labels : list of ndarray
        The global labels of each client's micro-clusters, in client order.
    """
    messages = uploads.list()
    local = [np.asarray(m[0]) for m in messages]
    if params.get("refine"):
        params["sample_weight"] = np.concatenate([np.asarray(m[2]) for m in messages])
    result = gold_server_cluster(np.vstack(local), **params)
    bounds = np.cumsum([0] + [len(c) for c in local])
    client_labels = [result.labels[a:b].astype(np.int64) for a, b in zip(bounds[:-1], bounds[1:])]
    return result, client_labels


# ---------------------------------------------------------------- estimator
class GOLDClustering(BaseFederatedClustering):
    """GOLD: one-shot federated clustering of Non-ICD data.

    Built for clients that each see only fragments of the global clusters, at
    different granularities (Non-ICD data). Every client runs fine-grained
    competitive penalized learning (FCPL) on its own rows: many seed clusters
    compete for the samples, the losers are eliminated, and compact
    micro-clusters remain (their number is learnt). Each client uploads its
    micro-centroids once. The server partitions them at several decreasing
    granularities (multi-granular CPL, MCPL), describes each micro-centroid by
    its clusters at all levels, and clusters these codes into ``n_clusters``
    groups with a feature-weighted k-modes (REMC). The server sends each client
    the global label of every one of its micro-clusters, and every sample
    inherits the label of its micro-cluster. One upload per client; the
    download only delivers the result.

    Read more in the :ref:`User Guide <gold>`.

    Parameters
    ----------
    n_clusters : int or None, default=8
        Number of global clusters (REMC's target). ``None`` returns the
        coarsest MCPL level: the number of clusters is then learnt (not in the
        paper).
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
        split, ``None`` eight IID clients (the authors' setting). Ignored for a
        list of client arrays or with ``client_ids``.
    learning_rate : float, default=0.05
        Reward and penalty step of the competition (FCPL and MCPL).
    local_init : int or float, default=0.5
        Seed clusters of FCPL on each client: a fraction of the client's rows
        (the authors' 0.5), or an int count, clipped to the client's rows.
        FCPL's cost grows with rows x seeds: an int keeps it linear in the
        number of rows.
    server_init : int or float, default=0.5
        Seed clusters of the first MCPL stage: a fraction of the
        micro-centroids, or an int count.
    max_iter : int, default=30
        Feature-weight updates of each CPL run (at most ``max_iter + 1``
        competition passes).
    remc_max_iter : int, default=30
        Iteration bound of each REMC run.
    remc_divergence : {"reference", "hellinger"}, default="reference"
        Inter-cluster difference of REMC's weights: the form of the authors'
        implementation, ``sqrt(sum((p - q)^2) / 2)``, or the Hellinger distance.
    remc_n_init : int, default=1
        REMC runs from random starts; the largest weighted matching is kept.
        1 is the published algorithm; more starts reduce the run-to-run spread
        considerably.
    n_retries : int, default=10
        When REMC cannot start (the code has fewer distinct rows than
        ``n_clusters``) or ends with an empty cluster, MCPL and REMC are run
        again with fresh draws, at most this many times; then k-means on the
        micro-centroids gives the clusters, with a warning.
    min_cluster_size : int, default=2
        Clusters smaller than this at a feature-weight update of CPL are
        eliminated (2 removes singletons, as the authors' implementation does
        implicitly).
    standardize : bool, default=True
        Z-score every feature with the pooled mean and standard deviation,
        learnt in pre-rounds: by secure sums (``secure_aggregation=True``,
        :func:`~skfedclust.secure.pooled_moments`: eight rounds and a set-up
        round, the server learns only the pooled moments) or from each
        client's count, means and sums of squared deviations in the clear (one
        round, ``8 + 16 d`` bytes up per client). ``16 d`` bytes down per
        client either way. CPL's similarity has a fixed unit bandwidth, so it
        needs standardized features. ``False`` is the strict one-shot protocol
        of the paper, for data already on a unit scale.
    secure_aggregation : bool, default=True
        Learn the standardization by secure sums (see ``standardize``).
    n_jobs : int, default=None
        Number of parallel client workers (joblib, threads unless a backend
        is chosen with ``joblib.parallel_config``). With ``None`` the clients'
        FCPL still runs side by side, one thread per client, on the cores
        (the pass is sequential and releases the GIL); the result does not
        depend on ``n_jobs``.
    random_state : int, RandomState instance or None, default=None
        Seeds the partition, every client's FCPL and the server.
    verbose : int, default=0
        Print progress per protocol stage (``1``), and every few seconds of a
        long client step how many clients are done; ``2`` adds debug detail.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Global label of every input row (its micro-cluster's).
    inertia_ : float
        Only with ``compute_inertia=True``.
        Sum of squared distances of the training rows to their nearest
        prototype of ``cluster_centers_`` (in the input's units), from a
        secure sum at the end of the fit (the server learns the total, not a
        client's share). A row's label is its micro-cluster's, which need not
        be its nearest prototype's. :meth:`score` gives it for rows the
        caller holds.
    cluster_centers_ : ndarray of shape (n_clusters_found, n_features)
        Global prototypes: the unweighted mean of the member micro-centroids,
        in the input's units.
    local_centers_ : list of ndarray
        Micro-centroids uploaded by each client, in the input's units.
    n_local_clusters_ : ndarray of shape (n_clients,)
        Number of micro-clusters of each client.
    level_n_clusters_ : ndarray of shape (n_levels,)
        Cluster count of each MCPL level, strictly decreasing.
    granular_codes_ : ndarray of shape (n_micro_clusters, n_levels)
        Cluster of every micro-centroid at every MCPL level, stacked client
        after client.
    server_labels_ : ndarray of shape (n_micro_clusters,)
        Global label of every micro-centroid.
    remc_weights_ : ndarray of shape (n_clusters, n_levels) or None
        REMC's level weights of every global cluster; None when the partition
        did not come from REMC (``n_clusters=None``, k-means fallback).
    n_attempts_ : int
        MCPL + REMC attempts made by the server.
    n_iter_ : int
        Largest number of FCPL competition passes run by a client (kept on the
        clients; a diagnostic of the simulation).
    mean_, scale_ : ndarray of shape (n_features,) or None
        Pooled mean and standard deviation used to standardize (None when
        ``standardize=False``). A constant feature gets scale 1.
    n_clients_ : int
        Number of clients.
    client_sizes_ : ndarray of shape (n_clients,)
        Rows held by each client.
    communication_ : dict
        Rounds and bytes exchanged; see :class:`~skfedclust.federation.Ledger`.
        One upload of ``k_i x d`` float64 micro-centroids per client and a
        download of ``k_i`` int64 labels, plus the standardization pre-round;
        then the prototypes down and four rounds (two secure sums, after one
        set-up round) for ``inertia_``.
    n_features_in_ : int
        Number of features seen during fit.

    Notes
    -----
    The paper's equations are missing from the available text; the dynamics
    follow the authors' public implementation of the same routines, with
    guards where it produces NaN. Two of them change an outcome: a feature
    that is constant on one client breaks that client's feature weights in the
    authors' implementation (every weight becomes NaN and the client collapses
    to one micro-cluster), while here such a feature gets zero separation and
    the others decide; and a client's only remaining cluster is never
    eliminated for being small.

    Micro-clusters are deliberately fine: a micro-centroid can be the mean of
    two records, and on tiny clients (where the first competition moves
    nothing) of a single one. A client holding one row uploads that row (a
    warning says so). The server learns every client's number of
    micro-clusters and their geometry.

    ``predict`` assigns a new sample to its nearest global prototype (in the
    standardized space), as the paper's prototype protocol does. On training
    rows it agrees with ``labels_`` when every micro-cluster's nearest
    prototype is its own global cluster's; it may differ for samples of
    micro-clusters that REMC grouped with far-away micro-centroids.

    The run-to-run spread is large: most of it comes from REMC's single random
    start (``remc_n_init`` reduces it).

    References
    ----------
    .. [1] Y. Zhang, S. Cai, Z. Yang, S. Feng, Y. Ji and H. Zhang, "One-Shot
       Federated Clustering of Non-Independent Completely Distributed Data",
       IEEE Internet of Things Journal, 2026 (arXiv:2601.17512).

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfedclust import GOLDClustering
    >>> X, _ = make_blobs(400, centers=3, cluster_std=0.5, random_state=0)
    >>> gold = GOLDClustering(n_clusters=3, remc_n_init=10, random_state=0).fit(X)
    >>> gold.cluster_centers_.shape, gold.n_clients_
    ((3, 2), 8)
    >>> gold.communication_["rounds"]  # standardization by secure sums, one upload
    9
    """

    # Its prototypes are centers in the input space (labels_ come from the micro-clusters).
    _centers_in_input_space = True

    _parameter_constraints: dict = {
        **BaseFederatedClustering._parameter_constraints,
        "compute_inertia": ["boolean"],
        "n_clusters": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "learning_rate": [Interval(numbers.Real, 0, None, closed="neither")],
        "local_init": [
            Interval(numbers.Integral, 2, None, closed="left"),
            Interval(RealNotInt, 0, 1, closed="right"),
            StrOptions({"sqrt"}),
        ],
        "server_init": [
            Interval(numbers.Integral, 2, None, closed="left"),
            Interval(RealNotInt, 0, 1, closed="right"),
        ],
        "max_iter": [Interval(numbers.Integral, 0, None, closed="left")],
        "remc_max_iter": [Interval(numbers.Integral, 0, None, closed="left")],
        "remc_divergence": [StrOptions({"reference", "hellinger"})],
        "remc_n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_retries": [Interval(numbers.Integral, 0, None, closed="left")],
        "min_cluster_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "refine": ["boolean"],
        "refine_n_init": [Interval(numbers.Integral, 0, None, closed="left")],
        "visit_order": [StrOptions({"canonical", "storage"})],
        "standardize": ["boolean"],
        "secure_aggregation": ["boolean"],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        compute_inertia=False,
        partition=None,
        learning_rate=0.05,
        local_init="sqrt",
        server_init=0.5,
        max_iter=30,
        remc_max_iter=30,
        remc_divergence="reference",
        remc_n_init=10,
        n_retries=10,
        min_cluster_size=2,
        refine=True,
        refine_n_init=10,
        visit_order="canonical",
        standardize=True,
        secure_aggregation=True,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.compute_inertia = compute_inertia
        self.partition = partition
        self.learning_rate = learning_rate
        self.local_init = local_init
        self.server_init = server_init
        self.max_iter = max_iter
        self.remc_max_iter = remc_max_iter
        self.remc_divergence = remc_divergence
        self.remc_n_init = remc_n_init
        self.n_retries = n_retries
        self.min_cluster_size = min_cluster_size
        self.refine = refine
        self.refine_n_init = refine_n_init
        self.visit_order = visit_order
        self.standardize = standardize
        self.secure_aggregation = secure_aggregation
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    # -- hooks of the base class -------------------------------------------------
    def _default_partition(self):
        return IIDPartition(DEFAULT_N_CLIENTS)

    def _min_samples(self):
        # MCPL needs two micro-centroids, REMC n_clusters of them.
        return max(self.n_clusters or 1, 2)

    # -- protocol ----------------------------------------------------------------
    def _standardization_round(self, runtime, random_state):
        if self.secure_aggregation:
            seed = int(random_state.randint(np.iinfo(np.int32).max))
            channel = SumChannel(runtime, secure=True, seed=seed)
            _, mean, variance, _ = pooled_moments(channel, tag="standardization")
        else:
            runtime.stage("client step: counts, means and squared deviations (standardization)")
            moments = runtime.run(client_moments, tag="moments")
            mean, variance, _ = runtime.server(combine_moments, moments)
        scale = np.sqrt(variance)
        # A constant feature keeps its (zero) deviations, as StandardScaler does.
        scale[scale == 0] = 1.0
        runtime.broadcast((mean, scale), tag="standardization")
        return mean, scale

    def _run_protocol(self, runtime, random_state):
        # The clients' work is the compiled pass, which releases the GIL: with
        # n_jobs, threads run the clients without copying their rows to worker
        # processes at every step. A backend the user chose
        # (joblib.parallel_config) still wins.
        with parallel_config(prefer="threads"):
            self._protocol(runtime, random_state)

    def _protocol(self, runtime, random_state):
        lonely = np.flatnonzero(np.asarray(runtime.client_sizes) == 1)
        if len(lonely):
            warnings.warn(
                f"GOLD: clients {lonely.tolist()} hold a single row; each uploads that row "
                "as its only micro-centroid.",
                UserWarning,
                stacklevel=4,
            )
        mean = scale = None
        if self.standardize:
            mean, scale = self._standardization_round(runtime, random_state)
        runtime.stage("client step: FCPL micro-clusters on each client")
        # One public seed for every client's FCPL: with the canonical visiting
        # order a client's micro-clusters then depend on its rows only, not on
        # its position among the clients.
        fcpl_seed = int(random_state.randint(np.iinfo(np.int32).max))
        uploads = runtime.run(
            gold_micro_clusters,
            tag="micro-centroids",
            local_init=self.local_init,
            learning_rate=self.learning_rate,
            max_iter=self.max_iter,
            min_cluster_size=self.min_cluster_size,
            visit_order=self.visit_order,
            seed=fcpl_seed,
            send_sizes=self.refine,
        )
        runtime.stage("server step: MCPL levels and REMC on the multi-granular code")
        result, client_labels = runtime.server(
            gold_server_step,
            uploads,
            n_clusters=self.n_clusters,
            server_init=self.server_init,
            learning_rate=self.learning_rate,
            max_iter=self.max_iter,
            min_cluster_size=self.min_cluster_size,
            remc_max_iter=self.remc_max_iter,
            remc_divergence=self.remc_divergence,
            remc_n_init=self.remc_n_init,
            n_retries=self.n_retries,
            refine=self.refine,
            refine_n_init=self.refine_n_init,
            order=self.visit_order,
            random_state=random_state,
        )
        self.mean_, self.scale_ = mean, scale
        self._centers_fitted = result.centers
        self.cluster_centers_ = self._to_input_units(result.centers)
        runtime.stage("client step: every row inherits its micro-cluster's label")
        final_labels(
            self,
            runtime,
            random_state,
            self.cluster_centers_,
            centers_tag="global prototypes",
            step=gold_labels_and_inertia,
            messages={"micro-cluster labels": dict(enumerate(client_labels))},
        )

        local = [np.asarray(m[0]) for m in uploads.list()]
        self.local_centers_ = [self._to_input_units(c) for c in local]
        self.n_local_clusters_ = np.array([len(c) for c in local], dtype=np.int64)
        self.level_n_clusters_ = result.level_n_clusters
        self.granular_codes_ = result.granular_codes
        self.server_labels_ = result.labels
        self.remc_weights_ = result.remc_weights
        self.n_attempts_ = result.n_attempts
        self.n_refine_iter_ = result.n_refine_iter
        self.n_iter_ = int(max(m[1] for m in uploads.list()))

    def _to_input_units(self, Z):
        if self.mean_ is None:
            return Z.copy()
        return Z * self.scale_ + self.mean_

    def predict(self, X):
        """Assign each sample to its nearest global prototype.

        With ``standardize=True`` the distances are taken in the standardized
        space, where the prototypes were learnt.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            New data.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Index of the nearest prototype of each sample.
        """
        check_is_fitted(self, "cluster_centers_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        if self.mean_ is not None:
            X = (X - self.mean_) / self.scale_
        return nearest_center(X, self._centers_fitted)

    def score(self, X, y=None):
        """Opposite of the inertia of ``X`` on the global prototypes, in the input's units.

        Computed here, on ``X``: the caller holds these rows. On the
        federated training data it equals ``-inertia_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to score.
        y : Ignored
            Not used, present for API consistency.

        Returns
        -------
        score : float
            Minus the sum of squared distances of the rows to their nearest
            prototype in ``cluster_centers_``.
        """
        check_is_fitted(self, "cluster_centers_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return -pooled_inertia(X, self.cluster_centers_)
