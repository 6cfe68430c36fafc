"""Multi-round federated k-means by centroid sharing, after Kumar et al. (2020).

This is a reconstruction, not the authors' code: DC-Clustering's paper uses
it as a baseline and describes it only as clients sharing cluster centroids
over several "federation steps". The steps below follow the reconstruction
in DC-Clustering's specification, which reproduces the paper's Iris numbers
closely.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.cluster import KMeans
from sklearn.utils._param_validation import Interval

from ._base import BaseFederatedClustering, CentroidPredictMixin, nearest_center_labels
from ._federation import map_clients

__all__ = ["KumarFederatedKMeans"]


# ---------------------------------------------------------------- client side
def kumar_client_centroids(X_client, seed, *, n_clusters, init, n_init, max_iter):
    """Client step: local k-means, warm-started from the global centroids after round one.

    A client with no more rows than clusters uploads its rows themselves
    (each row is its own centroid).
    """
    if len(X_client) <= n_clusters:
        return X_client.copy(), np.ones(len(X_client), dtype=np.int64)
    if init is None:
        km = KMeans(n_clusters, n_init=n_init, max_iter=max_iter, random_state=seed)
    else:
        km = KMeans(n_clusters, init=init, n_init=1, max_iter=max_iter, random_state=seed)
    km.fit(X_client)
    return km.cluster_centers_, np.bincount(km.labels_, minlength=n_clusters)


# ---------------------------------------------------------------- server side
def kumar_server_recluster(centroids, counts, *, n_clusters, weighted, n_init, seed):
    """Server step: k-means on the pooled client centroids (count-weighted if asked)."""
    pooled = np.vstack(centroids)
    weights = np.concatenate(counts).astype(float) if weighted else None
    km = KMeans(n_clusters, n_init=n_init, random_state=seed)
    km.fit(pooled, sample_weight=weights)
    return km.cluster_centers_


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
    :ref:`User Guide <dcclustering>`.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    n_rounds : int, default=10
        Federation rounds (10 in DC-Clustering's experiments, 5 in the original).
    weighted : bool, default=False
        Weight every client centroid by its cluster size in the server's k-means.
    n_init : int, default=10
        Restarts of the first local k-means and of every server k-means.
    max_iter : int, default=300
        Iterations of each local k-means.
    partition : int, partition specification or None, default=None
        How to simulate clients from a pooled ``X``; ``None`` gives two IID
        clients.
    n_jobs : int, default=None
        Number of parallel client workers (joblib).
    random_state : int, RandomState instance or None, default=None
        Seeds the partition, the clients' k-means and the server's k-means.
    verbose : int, default=0
        Print progress per protocol stage.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Global centroids after the last round.
    labels_ : ndarray of shape (n_samples,)
        Nearest-centroid label of each input row.
    n_iter_ : int
        Number of rounds run.
    n_clients_ : int
        Number of clients.
    client_sizes_ : ndarray of shape (n_clients,)
        Rows held by each client.
    communication_ : dict
        Rounds and bytes exchanged; see :class:`~skfedclust.Ledger`.
    n_features_in_ : int
        Number of features seen during fit.

    See Also
    --------
    skfedclust.DCClustering : One-round clustering over horizontally and
        vertically split data, which the paper compares with this baseline.

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
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _fit_federation(self, federation, ledger, random_state):
        clients = range(federation.n_clients)
        n_pooled = federation.client_sizes.clip(max=self.n_clusters).sum()
        if n_pooled < self.n_clusters:
            raise ValueError(
                f"the clients upload {n_pooled} centroids in total, fewer than "
                f"n_clusters={self.n_clusters}"
            )
        centers = None
        for r in range(self.n_rounds):
            ledger.stage(f"round {r + 1}: local k-means on every client")
            # Fresh client seeds per round, drawn from the estimator's state.
            seeds = random_state.randint(np.iinfo(np.int32).max, size=federation.n_clients)
            uploads = map_clients(
                kumar_client_centroids,
                zip(federation.clients_data(), seeds),
                n_jobs=self.n_jobs,
                verbose=self.verbose,
                n_clusters=self.n_clusters,
                init=centers,
                n_init=self.n_init,
                max_iter=self.max_iter,
            )
            for c, (cents, counts) in zip(clients, uploads):
                ledger.upload(
                    c, (cents, counts) if self.weighted else cents, round=r, tag="centroids"
                )
            ledger.stage(f"round {r + 1}: server k-means on the pooled centroids")
            centers = kumar_server_recluster(
                [u[0] for u in uploads],
                [u[1] for u in uploads],
                n_clusters=self.n_clusters,
                weighted=self.weighted,
                n_init=self.n_init,
                seed=random_state.randint(np.iinfo(np.int32).max),
            )
            ledger.broadcast(centers, clients, round=r, tag="global centroids")

        ledger.stage("clients: nearest-centroid labels")
        labels = map_clients(
            nearest_center_labels,
            zip(federation.clients_data(), federation.seeds),
            n_jobs=self.n_jobs,
            centers=centers,
        )
        self.cluster_centers_ = centers
        self.n_iter_ = self.n_rounds
        return federation.gather_rows(labels)
