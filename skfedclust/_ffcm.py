"""Federated fuzzy c-means (FFCM; Stallmann & Wilbik, 2022), an iterative baseline of FeCA.

Every round the server broadcasts the global centers; each client runs fuzzy
c-means iterations from them on its own rows and uploads its local centers and
their fuzzy masses; the server aggregates by weighted averaging (``"v1"``) or
by k-means on the pooled local centers (``"v2"``). The FeCA paper only names
the two aggregations; the initialization, the single local iteration and the
unweighted v2 are our reconstruction.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.utils import check_array
from sklearn.utils._param_validation import Interval, StrOptions

from ._base import BaseFederatedClustering, CentroidPredictMixin, nearest_center_labels
from ._federation import map_clients

__all__ = ["FederatedFuzzyCMeans", "fuzzy_memberships"]


def fuzzy_memberships(X, centers, fuzzifier=2.0):
    """Fuzzy c-means memberships ``u_ij = 1 / Σ_h (‖x_i − v_j‖ / ‖x_i − v_h‖)^(2/(m−1))``.

    A point lying exactly on one or more centers is shared equally by them.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    centers : ndarray of shape (n_centers, n_features)
    fuzzifier : float, default=2.0
        The exponent ``m > 1``.

    Returns
    -------
    u : ndarray of shape (n_samples, n_centers)
        Rows sum to one.
    """
    d2 = (X**2).sum(axis=1)[:, None] - 2 * X @ centers.T + (centers**2).sum(axis=1)[None, :]
    np.maximum(d2, 0, out=d2)
    nearest = d2.min(axis=1, keepdims=True)
    on_center = nearest[:, 0] == 0
    # Dividing by the row minimum keeps the powers in [0, 1] whatever the scale
    # of the data or the fuzzifier, so they neither overflow nor underflow to 0/0.
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = (nearest / d2) ** (1.0 / (fuzzifier - 1.0))
    inv[on_center] = d2[on_center] == 0
    return inv / inv.sum(axis=1, keepdims=True)


def ffcm_seed_centers(X_client, seed, *, n_clusters):
    """Client step of the seed client: k-means++ seeding on its own rows."""
    centers, _ = kmeans_plusplus(X_client, n_clusters, random_state=seed)
    return centers


def ffcm_client_update(X_client, seed, *, centers, fuzzifier, n_local_iter):
    """Client step of one FFCM round: fuzzy c-means iterations from the global centers.

    Returns the local centers and the fuzzy mass ``w_j = Σ_i u_ij^m`` of each
    (a center with zero mass is returned unchanged).
    """
    local = centers.copy()
    for _ in range(n_local_iter):
        um = fuzzy_memberships(X_client, local, fuzzifier) ** fuzzifier
        mass = um.sum(axis=0)
        moved = mass > 0
        local = local.copy()
        local[moved] = (um.T @ X_client)[moved] / mass[moved, None]
    return local, mass


def ffcm_aggregate_v1(centers, local_centers, masses):
    """v1: index-wise average of the local centers weighted by their fuzzy mass."""
    masses = np.asarray(masses)
    total = masses.sum(axis=0)
    weighted = np.einsum("mk,mkd->kd", masses, np.asarray(local_centers))
    new = centers.copy()
    filled = total > 0
    new[filled] = weighted[filled] / total[filled, None]
    return new


def ffcm_aggregate_v2(local_centers, masses, n_clusters, *, weighted, seed):
    """v2: k-means (``n_clusters``) on the pooled local centers of every client."""
    pooled = np.vstack(local_centers)
    weights = np.concatenate(masses) if weighted else None
    km = KMeans(n_clusters=n_clusters, n_init=10, random_state=seed)
    return km.fit(pooled, sample_weight=weights).cluster_centers_


class FederatedFuzzyCMeans(CentroidPredictMixin, BaseFederatedClustering):
    """Federated fuzzy c-means (FFCM): iterative federated clustering.

    The server starts from initial centers. In every round it broadcasts the
    global centers; each client runs ``n_local_iter`` fuzzy c-means iterations
    from them on its own rows and uploads its local centers and their fuzzy
    masses ``Σ_i u_ij^m``; the server aggregates. With ``aggregation="v1"``
    the new centers are the mass-weighted average of the local centers, index
    by index (with one local iteration this is exactly centralized fuzzy
    c-means, one step per round); with ``"v2"`` they are the centers of
    k-means run on all local centers. Labels are the nearest final center
    (the largest membership).

    It is the "FFCM" baseline of the FeCA paper, which names the two
    aggregations and nothing more; the initialization and local iterations here
    are a reconstruction.

    Read more in the :ref:`User Guide <feca>`.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters ``c``.
    aggregation : {"v1", "v2"}, default="v1"
        Server aggregation: weighted averaging (v1) or k-means on the local
        centers (v2).
    n_rounds : int, default=10
        Communication rounds of fuzzy c-means updates (the paper's ``Rd``;
        it reports 1 and 10).
    fuzzifier : float, default=2.0
        Fuzzy exponent ``m > 1``.
    n_local_iter : int, default=1
        Fuzzy c-means iterations on each client per round.
    v2_weighted : bool, default=False
        Weight the local centers by their fuzzy mass in the v2 k-means.
    init : {"k-means++"} or array-like of shape (n_clusters, n_features), default="k-means++"
        Initial centers: k-means++ seeding run by one randomly chosen client
        on its own rows (among clients holding at least ``n_clusters`` rows;
        if none does, the largest clients seed in turn) and uploaded in a
        set-up exchange, or given centers (no set-up exchange).
    partition : int, partition specification or None, default=None
        How to simulate clients from a pooled ``X``: an int gives that many IID
        clients, a specification from :mod:`skfedclust.partition` any other
        split, ``None`` two IID clients.
    n_jobs : int, default=None
        Number of parallel client workers (joblib).
    random_state : int, RandomState instance or None, default=None
        Seeds the partition, the seed client, its seeding and the v2 k-means.
    verbose : int, default=0
        Print progress per protocol stage.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Global centers after the last round.
    initial_centers_ : ndarray of shape (n_clusters, n_features)
        Centers the first round started from.
    local_centers_ : list of ndarray
        Local centers each client uploaded in the last round.
    labels_ : ndarray of shape (n_samples,)
        Nearest-center label of each input row.
    n_iter_ : int
        Rounds run (``n_rounds``).
    n_clients_ : int
        Number of clients.
    client_sizes_ : ndarray of shape (n_clients,)
        Rows held by each client.
    communication_ : dict
        Rounds and bytes exchanged; see :class:`~skfedclust.Ledger`. Rounds are
        ``n_rounds``, plus one set-up exchange when ``init="k-means++"``.
    n_features_in_ : int
        Number of features seen during fit.

    See Also
    --------
    skfedclust.FeCA : one-shot federated k-means.

    References
    ----------
    .. [1] M. Stallmann and A. Wilbik, "Towards Federated Clustering: A
       Federated Fuzzy c-Means Algorithm (FFCM)", arXiv:2201.07316, 2022.
    .. [2] J. Xu, H.-Y. Chen, W.-L. Chao and Y. Zhang, "Jigsaw Game: Federated
       Clustering", Transactions on Machine Learning Research, 2024.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfedclust import FederatedFuzzyCMeans
    >>> X, _ = make_blobs(600, centers=3, cluster_std=0.5, random_state=0)
    >>> est = FederatedFuzzyCMeans(n_clusters=3, n_rounds=5, partition=3,
    ...                            random_state=0).fit(X)
    >>> est.cluster_centers_.shape, est.n_iter_
    ((3, 2), 5)
    """

    _parameter_constraints: dict = {
        **BaseFederatedClustering._parameter_constraints,
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "aggregation": [StrOptions({"v1", "v2"})],
        "n_rounds": [Interval(numbers.Integral, 1, None, closed="left")],
        "fuzzifier": [Interval(numbers.Real, 1, None, closed="neither")],
        "n_local_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "v2_weighted": ["boolean"],
        "init": [StrOptions({"k-means++"}), "array-like"],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        aggregation="v1",
        n_rounds=10,
        fuzzifier=2.0,
        n_local_iter=1,
        v2_weighted=False,
        init="k-means++",
        partition=None,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.aggregation = aggregation
        self.n_rounds = n_rounds
        self.fuzzifier = fuzzifier
        self.n_local_iter = n_local_iter
        self.v2_weighted = v2_weighted
        self.init = init
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _initial_centers(self, federation, ledger, random_state):
        if not isinstance(self.init, str):
            init = check_array(self.init, dtype=np.float64, input_name="init")
            if init.shape != (self.n_clusters, federation.n_features):
                raise ValueError(
                    f"init has shape {init.shape} but must be (n_clusters, n_features) = "
                    f"({self.n_clusters}, {federation.n_features})"
                )
            return init.copy()
        sizes = federation.client_sizes
        big_enough = np.flatnonzero(sizes >= self.n_clusters)
        if len(big_enough):
            seeders = [int(big_enough[random_state.randint(len(big_enough))])]
        else:
            # No client holds n_clusters rows: the largest clients seed in turn
            # until there are n_clusters centers (the pooled data has enough).
            order = np.argsort(-sizes, kind="stable")
            n_needed = np.cumsum(sizes[order]) < self.n_clusters
            seeders = [int(c) for c in order[: n_needed.sum() + 1]]
        ledger.stage(f"set-up: client(s) {seeders} seed the centers with k-means++")
        centers, missing = [], self.n_clusters
        for c in seeders:
            n_seeds = min(missing, int(sizes[c]))
            seeds = ffcm_seed_centers(
                federation.client_data(c), federation.seeds[c], n_clusters=n_seeds
            )
            # The set-up exchange is a round of its own (index 0); FCM rounds are 1..n_rounds.
            centers.append(ledger.upload(c, seeds, round=0, tag="initial centers"))
            missing -= n_seeds
        return np.vstack(centers)

    def _fit_federation(self, federation, ledger, random_state):
        clients = range(federation.n_clients)
        centers = self._initial_centers(federation, ledger, random_state)
        self.initial_centers_ = centers
        server_seed = int(random_state.randint(np.iinfo(np.int32).max))
        for t in range(1, self.n_rounds + 1):
            ledger.stage(
                f"round {t}: client fuzzy c-means step, server {self.aggregation} aggregation"
            )
            ledger.broadcast(centers, clients, round=t, tag="global centers")
            uploads = map_clients(
                ffcm_client_update,
                zip(federation.clients_data(), federation.seeds),
                n_jobs=self.n_jobs,
                verbose=self.verbose,
                centers=centers,
                fuzzifier=float(self.fuzzifier),
                n_local_iter=self.n_local_iter,
            )
            uploads = [
                ledger.upload(c, u, round=t, tag="local centers and masses")
                for c, u in zip(clients, uploads)
            ]
            local = [v for v, _ in uploads]
            masses = [w for _, w in uploads]
            if self.aggregation == "v1":
                centers = ffcm_aggregate_v1(centers, local, masses)
            else:
                centers = ffcm_aggregate_v2(
                    local, masses, self.n_clusters, weighted=self.v2_weighted, seed=server_seed
                )
        ledger.broadcast(centers, clients, round=self.n_rounds, tag="final centers")

        ledger.stage("client step: nearest-center labels")
        labels = map_clients(
            nearest_center_labels,
            zip(federation.clients_data(), federation.seeds),
            n_jobs=self.n_jobs,
            centers=centers,
        )
        self.cluster_centers_ = centers
        self.local_centers_ = local
        self.n_iter_ = self.n_rounds
        return federation.gather_rows(labels)
