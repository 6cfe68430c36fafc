"""Multi-round federated k-means by centroid sharing, after Kumar et al. (2020).

This is a reconstruction, not the authors' code: DC-Clustering's paper uses
it as a baseline and describes it only as clients sharing cluster centroids
over several "federation steps". The steps below are our reconstruction; it
reproduces that paper's Iris numbers for this baseline closely.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.cluster import KMeans
from sklearn.utils._param_validation import Interval
from threadpoolctl import threadpool_limits

from ..clusterers import local_kmeans
from ..federation import Reply, summary
from ._base import BaseFederatedClustering, CentroidPredictMixin
from ._centroid_steps import final_labels

__all__ = ["KumarFederatedKMeans"]


# ---------------------------------------------------------------- client side
@summary
def kumar_local_centroids(
    data, inbox, state, party, *, n_clusters, n_init, max_iter, round_seed, send_counts
):
    """Client step: local k-means, warm-started from the global centroids after round one.

    The first round runs k-means++ with ``n_init`` restarts; later rounds start
    once from the global centroids the server sent. A client with no more rows
    than clusters sends its rows themselves (each row is its own centroid).
    The per-cluster counts are sent only when the server weights by them
    (``send_counts``).

    ``round_seed`` is this round's fresh public seed of the client, drawn by
    the server.
    """
    if data.shape[0] <= n_clusters:
        centers, counts = data.copy(), np.ones(data.shape[0], dtype=np.int64)
    else:
        init = inbox.get("global centroids")
        local = local_kmeans(
            data,
            n_clusters,
            init="k-means++" if init is None else init,
            n_init=n_init,
            max_iter=max_iter,
            seed=round_seed,
        )
        centers, counts = local.centers, local.sizes
    return Reply(send=(centers, counts) if send_counts else centers)


# ---------------------------------------------------------------- server side
def kumar_server_recluster(centroids, counts, *, n_clusters, weighted, n_init, seed):
    """k-means on the pooled client centroids, count-weighted if ``weighted``.

    ``counts`` is required when ``weighted`` and ignored otherwise.
    scikit-learn's k-means centers the pooled centroids first, so a large
    common offset of the data costs no precision.
    """
    pooled = np.vstack(centroids)
    weights = None
    if weighted:
        if counts is None:
            raise ValueError("a weighted server k-means needs the clients' cluster counts")
        weights = np.concatenate(counts).astype(float)
    km = KMeans(n_clusters, n_init=n_init, random_state=seed)
    # One thread: the pooled centroids are a few dozen rows, on which starting
    # OpenMP threads costs ten times the k-means itself on a busy machine (0.5 s
    # against 0.05 s a call); and the centers then do not depend on the server's
    # core count (scikit-learn's Lloyd reductions depend on the thread count).
    with threadpool_limits(limits=1):
        km.fit(pooled, sample_weight=weights)
    return km.cluster_centers_


def kumar_server_step(uploads, *, n_clusters, weighted, n_init, seed):
    """Server step on the received uploads: centroids, and counts when they were sent."""
    payloads = uploads.list()
    if weighted:
        centroids, counts = [np.asarray(p[0]) for p in payloads], [p[1] for p in payloads]
    else:
        centroids, counts = [np.asarray(p) for p in payloads], None
    return kumar_server_recluster(
        centroids, counts, n_clusters=n_clusters, weighted=weighted, n_init=n_init, seed=seed
    )


# ---------------------------------------------------------------- estimator
class KumarFederatedKMeans(CentroidPredictMixin, BaseFederatedClustering):
    """Federated k-means by centroid sharing (reconstruction of Kumar et al., 2020).

    The multi-round baseline of DC-Clustering's paper, for horizontally split
    data. Round one: every client runs k-means on its rows and uploads its
    centroids; the server runs k-means on the pooled centroids and sends the
    global centroids back. Each further round: every client runs k-means
    started from the global centroids and uploads the new local centroids; the
    server clusters them again. After ``n_rounds`` rounds every client labels
    its rows by the nearest global centroid.

    DC-Clustering's paper describes the method only in outline; these steps
    are a reconstruction, not the authors' code. Read more in the
    :ref:`User Guide <kumar>`.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    n_rounds : int, default=10
        Federation rounds (10 in DC-Clustering's experiments, 5 in the original).
    weighted : bool, default=False
        Weight every client centroid by its cluster size in the server's k-means;
        the clients then send their ``n_clusters`` cluster counts with their
        centroids. Recommended on data with outliers (see Notes).
    n_init : int, default=10
        Restarts of the first local k-means and of every server k-means.
    max_iter : int, default=300
        Iterations of each local k-means.
    compute_inertia : bool, default=False
        Compute ``inertia_`` after the fit: two secure sums over the clients
        (a public bound on a client's inertia, then the inertia), five
        evaluation rounds (their set-up included) and their bytes on top of
        the method's own messages. Off by default, so that ``communication_`` counts the
        method's messages only; :func:`~skfedclust.metrics.federated_score`
        and :func:`~skfedclust.model_selection.select_n_clusters` evaluate a
        fitted model when asked.
    partition : int, partition specification or None, default=None
        How to simulate clients from a pooled ``X``; ``None`` gives three IID
        clients.
    n_jobs : int, default=None
        Number of parallel client workers (joblib).
    random_state : int, RandomState instance or None, default=None
        Seeds the partition, the clients' k-means and the server's k-means.
    verbose : int, default=0
        Print progress per protocol stage (``1``), and every few seconds of a
        long client step how many clients are done; ``2`` adds debug detail.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Global centroids after the last round.
    labels_ : ndarray of shape (n_samples,)
        Nearest-centroid label of each input row.
    inertia_ : float
        Only with ``compute_inertia=True``.
        Sum of squared distances of the training rows to their nearest
        center, from a secure sum at the end of the fit (the server learns
        the total, not a client's share); :meth:`score` gives it for rows
        the caller holds.
    n_iter_ : int
        Number of rounds run.
    n_clients_ : int
        Number of clients.
    client_sizes_ : ndarray of shape (n_clients,)
        Rows held by each client.
    communication_ : dict
        Rounds and bytes exchanged; see :class:`~skfedclust.federation.Ledger`.
    n_features_in_ : int
        Number of features seen during fit.

    See Also
    --------
    skfedclust.DCClustering : One-round clustering over horizontally and
        vertically split data, which the paper compares with this baseline.

    Notes
    -----
    Communication: ``n_rounds`` rounds; in each, every client uploads at most
    ``n_clusters`` centroids (its rows if it holds no more) plus, when
    ``weighted``, as many int64 counts, and downloads the ``n_clusters``
    global centroids. Then four rounds (two secure sums, after one set-up
    round) label the rows and give ``inertia_``.

    **Unweighted re-clustering can collapse.** As described, the server's
    k-means gives every client centroid the same weight, whatever the number of
    rows behind it. A local cluster of one outlying row then weighs as much as
    one of hundreds of rows. In high dimension such outliers lie far from
    everything else, so the server spends global clusters on them and merges
    the dense clusters; the next round's local k-means starts from these global
    centroids, keeps the outliers as singleton clusters and the effect grows
    round after round. On scikit-learn's digits (standardized, three IID
    clients, ten clusters) one global cluster ends up with about 1750 of the
    1797 rows: NMI about 0.46 after one round and 0.02-0.04 after ten (seeds 0-4;
    centralized k-means 0.63). This comes from the method, not from the
    implementation, and the default keeps the method as described (the
    clients upload their centroids only). ``weighted=True`` avoids it (NMI
    0.60-0.64 on the same runs) at the cost of ``n_clusters`` integers more
    per upload.

    References
    ----------
    .. [1] H. H. Kumar, V. R. Karthik and M. K. Nair, "Federated k-means
       clustering: a novel edge AI based approach for privacy preservation",
       IEEE CCEM 2020.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfedclust import KumarFederatedKMeans
    >>> X, _ = make_blobs(300, centers=3, random_state=0)
    >>> km = KumarFederatedKMeans(n_clusters=3, n_rounds=5, random_state=0).fit(X)
    >>> km.cluster_centers_.shape, km.communication_["rounds"]
    ((3, 2), 5)
    """

    _parameter_constraints: dict = {
        **BaseFederatedClustering._parameter_constraints,
        "compute_inertia": ["boolean"],
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_rounds": [Interval(numbers.Integral, 1, None, closed="left")],
        "weighted": ["boolean"],
        "n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        n_rounds=10,
        weighted=False,
        n_init=10,
        max_iter=300,
        compute_inertia=False,
        partition=None,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.n_rounds = n_rounds
        self.weighted = weighted
        self.n_init = n_init
        self.max_iter = max_iter
        self.compute_inertia = compute_inertia
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _run_protocol(self, runtime, random_state):
        n_pooled = np.minimum(runtime.client_sizes, self.n_clusters).sum()
        if n_pooled < self.n_clusters:
            raise ValueError(
                f"the clients upload {n_pooled} centroids in total, fewer than "
                f"n_clusters={self.n_clusters}"
            )
        centers = None
        for r in range(self.n_rounds):
            runtime.stage(f"round {r + 1}: local k-means on every client")
            # Fresh public client seeds every round, drawn by the server.
            fresh = random_state.randint(np.iinfo(np.int32).max, size=runtime.n_clients)
            uploads = runtime.run(
                kumar_local_centroids,
                tag="centroids and counts" if self.weighted else "centroids",
                n_clusters=self.n_clusters,
                n_init=self.n_init,
                max_iter=self.max_iter,
                per_client={c: {"round_seed": int(s)} for c, s in enumerate(fresh)},
                send_counts=self.weighted,
            )
            runtime.stage(f"round {r + 1}: server k-means on the pooled centroids")
            centers = runtime.server(
                kumar_server_step,
                uploads,
                n_clusters=self.n_clusters,
                weighted=self.weighted,
                n_init=self.n_init,
                seed=random_state.randint(np.iinfo(np.int32).max),
            )
            if r + 1 < self.n_rounds:
                runtime.broadcast(centers, tag="global centroids")

        final_labels(self, runtime, random_state, centers, centers_tag="global centroids")
        self.cluster_centers_ = centers
        self.n_iter_ = self.n_rounds
