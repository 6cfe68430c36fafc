"""M-Avg: one-shot averaging of Hungarian-matched client centroids.

The FeCA paper (Xu et al., TMLR 2024) uses it as a baseline and describes it in
one sentence: it "matches different sets of centroids from clients by
minimizing their ℓ2-distances and returns the means of matched centroids". The
reference client, the cost and the single matching pass below are our
reconstruction of that sentence.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.utils._param_validation import Interval, StrOptions

from ..clusterers import local_kmeans, squared_distances
from ..federation import Reply, summary
from ._base import BaseFederatedClustering, CentroidPredictMixin
from ._centroid_steps import final_labels

__all__ = ["MAvg", "matched_average"]


# ---------------------------------------------------------------- client side
@summary
def mavg_local_centers(data, inbox, state, party, *, n_clusters, init, n_init, max_iter, tol):
    """Client step: k-means on the client's own rows; send the centers.

    Clusters left empty (a client with fewer distinct rows than
    ``n_clusters``) are dropped, so such a client sends fewer centers. The
    number of local Lloyd iterations rides along (one int64).
    """
    local = local_kmeans(
        data,
        n_clusters,
        init=init,
        n_init=n_init,
        max_iter=max_iter,
        tol=tol,
        seed=party.seed,
        drop_empty=True,
    )
    return Reply(send=(local.centers, np.int64(local.n_iter)))


# ---------------------------------------------------------------- server side
def _match_to(reference, centers):
    """Slot of ``reference`` matched to each row of ``centers`` (Hungarian, Euclidean cost)."""
    rows, cols = linear_sum_assignment(np.sqrt(squared_distances(reference, centers)))
    slots = np.empty(len(centers), dtype=np.intp)
    slots[cols] = rows
    return slots


def _slot_means(local_centers, slots, n_slots, fallback):
    # Sums relative to the first fallback center: a large common offset of the
    # data costs no precision.
    origin = fallback[0]
    sums = np.zeros_like(fallback)
    counts = np.zeros(n_slots)
    for centers, s in zip(local_centers, slots):
        np.add.at(sums, s, centers - origin)
        np.add.at(counts, s, 1)
    means = fallback.copy()
    filled = counts > 0
    means[filled] = sums[filled] / counts[filled, None] + origin
    return means


def matched_average(local_centers, reference, *, n_refine=0):
    """Server step of M-Avg: match every client's centers to the reference, average per slot.

    Parameters
    ----------
    local_centers : list of ndarray of shape (k_m, n_features)
        Centers of each client; no client may have more than the reference.
    reference : int
        Index of the client whose centers define the slots.
    n_refine : int, default=0
        Extra passes that re-match every client against the current means and
        average again (stops early when the matching no longer changes).

    Returns
    -------
    centers : ndarray of shape (k_reference, n_features)
        Unweighted mean of the centers matched to each slot, over the clients
        that matched it.
    """
    anchor = local_centers[reference]
    slots = [_match_to(anchor, c) for c in local_centers]
    means = _slot_means(local_centers, slots, len(anchor), anchor)
    for _ in range(n_refine):
        new_slots = [_match_to(means, c) for c in local_centers]
        if all(np.array_equal(a, b) for a, b in zip(slots, new_slots)):
            break
        slots = new_slots
        means = _slot_means(local_centers, slots, len(anchor), means)
    return means


def mavg_server_step(uploads, *, reference, n_refine):
    """Server step on the received centers: :func:`matched_average`."""
    local = [np.asarray(c) for c, _ in uploads.list()]
    return matched_average(local, reference, n_refine=n_refine)


# ---------------------------------------------------------------- estimator
class MAvg(CentroidPredictMixin, BaseFederatedClustering):
    """M-Avg: one-shot federated k-means by averaging matched client centroids.

    Every client runs k-means with ``n_clusters`` clusters and uploads its
    centers. The server takes one client's centers as reference slots, matches
    every client's centers to the slots with the Hungarian method (Euclidean
    cost) and outputs, per slot, the unweighted mean of the matched centers.
    One round of communication (then secure sums for ``inertia_`` with
    ``compute_inertia=True``). It is the
    "M-Avg" baseline of the FeCA paper, which describes it in one sentence;
    the details here are a reconstruction.

    Read more in the :ref:`User Guide <mavg>`.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters of every client and of the output.
    reference : {"first", "random"}, default="first"
        Which client defines the slots, among the clients with the most
        centers (a client with fewer rows than ``n_clusters`` has fewer).
    n_refine : int, default=0
        Re-match every client against the current means and average again, up
        to this many times. ``0`` is the single pass the paper describes.
    init : {"k-means++", "random"}, default="k-means++"
        Initialization of every client's k-means.
    n_init : int, default=10
        Restarts of every client's k-means.
    max_iter : int, default=300
        Iterations of every client's k-means.
    tol : float, default=1e-4
        Convergence tolerance of every client's k-means.
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
        Seeds the partition, every client's k-means and the reference client.
    verbose : int, default=0
        Print progress per protocol stage (``1``), and every few seconds of a
        long client step how many clients are done; ``2`` adds debug detail.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters_found, n_features)
        Averaged centers, in the slot order of the reference client.
    n_clusters_ : int
        Number of centers: the reference client's count, smaller than
        ``n_clusters`` only if every client holds fewer rows (a ``UserWarning``
        is raised then).
    local_centers_ : list of ndarray
        Centers uploaded by each client.
    reference_client_ : int
        Client whose centers defined the slots.
    labels_ : ndarray of shape (n_samples,)
        Nearest-center label of each input row.
    inertia_ : float
        Only with ``compute_inertia=True``.
        Sum of squared distances of the training rows to their nearest
        center, from a secure sum at the end of the fit (the server learns
        the total, not a client's share); :meth:`score` gives it for rows
        the caller holds.
    n_clients_ : int
        Number of clients.
    client_sizes_ : ndarray of shape (n_clients,)
        Rows held by each client.
    communication_ : dict
        Rounds and bytes exchanged; see :class:`~skfedclust.federation.Ledger`. One
        round for the centers, four for the labels and the inertia (two
        secure sums) and one set-up round.
    n_iter_ : int
        Largest number of Lloyd iterations run by a client's k-means.
    n_features_in_ : int
        Number of features seen during fit.

    See Also
    --------
    skfedclust.FeCA : repairs local solutions before aggregating them.

    References
    ----------
    .. [1] J. Xu, H.-Y. Chen, W.-L. Chao and Y. Zhang, "Jigsaw Game: Federated
       Clustering", Transactions on Machine Learning Research, 2024 (baseline
       "M-Avg").

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfedclust import MAvg
    >>> X, _ = make_blobs(600, centers=3, cluster_std=0.5, random_state=0)
    >>> est = MAvg(n_clusters=3, partition=3, random_state=0).fit(X)
    >>> est.cluster_centers_.shape, est.communication_["rounds"]
    ((3, 2), 1)
    """

    _parameter_constraints: dict = {
        **BaseFederatedClustering._parameter_constraints,
        "compute_inertia": ["boolean"],
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "reference": [StrOptions({"first", "random"})],
        "n_refine": [Interval(numbers.Integral, 0, None, closed="left")],
        "init": [StrOptions({"k-means++", "random"})],
        "n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        reference="first",
        n_refine=0,
        init="k-means++",
        n_init=10,
        max_iter=300,
        tol=1e-4,
        compute_inertia=False,
        partition=None,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.reference = reference
        self.n_refine = n_refine
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.compute_inertia = compute_inertia
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _pick_reference(self, counts, random_state):
        candidates = np.flatnonzero(counts == counts.max())
        if self.reference == "random":
            return int(candidates[random_state.randint(len(candidates))])
        return int(candidates[0])

    def _run_protocol(self, runtime, random_state):
        runtime.stage(f"client step: k-means with {self.n_clusters} clusters on each client")
        uploads = runtime.run(
            mavg_local_centers,
            tag="centers",
            n_clusters=self.n_clusters,
            init=self.init,
            n_init=self.n_init,
            max_iter=self.max_iter,
            tol=self.tol,
        )
        runtime.stage("server step: Hungarian matching to the reference client, slot means")
        local = [np.asarray(c) for c, _ in uploads.list()]
        reference = self._pick_reference(np.array([len(c) for c in local]), random_state)
        centers = runtime.server(
            mavg_server_step, uploads, reference=reference, n_refine=self.n_refine
        )
        if len(centers) < self.n_clusters:
            warnings.warn(
                f"every client found fewer than n_clusters={self.n_clusters} centers; "
                f"M-Avg returns {len(centers)} centers.",
                UserWarning,
                stacklevel=4,
            )
        final_labels(self, runtime, random_state, centers, centers_tag="global centers")
        self.cluster_centers_ = centers
        self.n_clusters_ = len(centers)
        self.local_centers_ = local
        self.reference_client_ = reference
        self.n_iter_ = int(max(n_iter for _, n_iter in uploads.list()))
