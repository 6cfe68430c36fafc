"""Federated fuzzy c-means (FFCM; Stallmann & Wilbik, 2022), an iterative baseline of FeCA.

Every round the server broadcasts the global centers; each client runs fuzzy
c-means iterations from them on its own rows and uploads its local centers and
their fuzzy masses; the server aggregates by weighted averaging (``"v1"``) or
by k-means on the pooled local centers (``"v2"``). The FeCA paper only names
the two aggregations; the initialization, the single local iteration and the
unweighted v2 are our reconstruction. The reconstruction's start (k-means++
seeds drawn from one client's rows, ``init="k-means++-rows"``) sends rows; the
default start (``init="local-centers"``) sends each client's local k-means
centers instead, each the mean of at least two of its rows.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.utils import check_array
from sklearn.utils._param_validation import Interval, StrOptions

from ..clusterers import fuzzy_memberships, local_kmeans
from ..federation import Reply, releases_rows, summand
from ..node._declarations import coordinator_centers, summary
from ..node._policy import (
    DEFAULT_MIN_ROWS_PER_VECTOR,
    DEFAULT_MIN_SUM_PARTICIPANTS,
    DEFAULT_RAW_ROW_TOLERANCE,
    raw_row_matches,
)
from ..secure import SumChannel
from ..secure._moments import moments_rows
from ._base import BaseFederatedClustering, CentroidPredictMixin
from ._centroid_steps import final_labels

# ``fuzzy_memberships`` is re-exported: the package's one membership rule
# lives in :mod:`skfedclust.clusterers`.
__all__ = ["FederatedFuzzyCMeans", "fuzzy_memberships"]


#: The start that sends no row (the default) and the reconstruction's, which sends rows.
INITS = ("local-centers", "k-means++-rows")

#: k-means restarts of a client's local k-means in the local-centers start.
LOCAL_N_INIT = 10


# ---------------------------------------------------------------- client side
@summary
def ffcm_local_centers(data, inbox, state, party, *, n_centers):
    """Client step of the local-centers start: local k-means; send its centers and sizes.

    The client runs k-means (``LOCAL_N_INIT`` k-means++ restarts, seeded by
    its public seed) on its rows with at most ``n_centers`` clusters and at
    most one per ``m`` of its rows; a cluster left with fewer than ``m`` rows
    takes the nearest rows of clusters holding more
    (:func:`fill_small_clusters`). ``m`` is what its node's policy asks: its
    ``min-rows-per-vector``, and at least 2 where it refuses raw rows (a
    deployed node's default: the mean of one row is the row); 1 for a
    simulated party, whose user holds every row. Where the policy refuses
    raw rows, the client sends only the means that lie farther than the
    raw-row tolerance from every one of its rows (three rows on a line have
    the middle one as mean). It sends them with their row counts: a summary
    its node's policy lets through, and no row. A client with fewer than
    ``m`` rows sends nothing. k-means runs on the rows moved to their mean,
    so a large common offset costs no precision.
    """
    return Reply(send=local_centers(data, party, n_centers))


def local_centers(data, party, n_centers):
    """What :func:`ffcm_local_centers` sends: ``(centers, sizes)``, or ``None`` if nothing.

    The computation of the step, for the steps that send local centers
    inside a message of their own (a blind or verified fit's start).
    """
    policy = party.policy
    per_center = max(
        policy.min_rows_per_vector or 1,
        DEFAULT_MIN_ROWS_PER_VECTOR if policy.refuse_raw_rows else 1,
    )
    k = min(int(n_centers), data.shape[0] // per_center)
    if k < 1:
        return None
    mean = data.mean(axis=0)
    shifted = data - mean
    local = local_kmeans(shifted, k, n_init=LOCAL_N_INIT, seed=party.seed)
    labels = fill_small_clusters(shifted, local.labels, local.centers, per_center)
    sizes = np.bincount(labels, minlength=k)
    centers = np.zeros_like(local.centers)
    np.add.at(centers, labels, shifted)
    centers = centers / sizes[:, None] + mean
    kept = sizes >= per_center
    if policy.refuse_raw_rows and data.shape[1] > 1:
        tolerance = max(DEFAULT_RAW_ROW_TOLERANCE, policy.raw_row_tolerance)
        for j in np.flatnonzero(kept):
            if raw_row_matches(data, centers[j : j + 1], tolerance) is not None:
                kept[j] = False
    if not kept.any():
        return None
    return centers[kept], sizes[kept].astype(np.int64)


def fill_small_clusters(X, labels, centers, min_size):
    """Labels where every cluster holds at least ``min_size`` rows of ``X``.

    While a cluster holds fewer, it takes the row nearest to its center among
    the clusters holding more than ``min_size``; with ``len(X) >= min_size *
    len(centers)`` such a cluster always exists. Clusters that were large
    enough keep their rows but those they give away.
    """
    labels = np.array(labels, copy=True)
    sizes = np.bincount(labels, minlength=len(centers))
    while (sizes < min_size).any():
        short = int(np.argmin(sizes))
        donors = np.flatnonzero(np.isin(labels, np.flatnonzero(sizes > min_size)))
        nearest = donors[np.argmin(((X[donors] - centers[short]) ** 2).sum(axis=1))]
        sizes[labels[nearest]] -= 1
        labels[nearest] = short
        sizes[short] += 1
    return labels


@releases_rows("FFCM's k-means++ seeds (init='k-means++-rows') are rows of the seed client")
def ffcm_seed_centers(data, inbox, state, party, *, n_seeds):
    """Client step of a seed client: k-means++ seeding on its own rows; send the seeds.

    ``n_seeds`` is the number of seeds asked of this client. The seeds are
    rows of the client: k-means++ runs on the rows moved to their mean, which
    leaves its choices unchanged but keeps its distances exact far from the
    origin.
    """
    _, indices = kmeans_plusplus(data - data.mean(axis=0), n_seeds, random_state=party.seed)
    return Reply(send=data[indices])


@coordinator_centers
@summary
def ffcm_client_update(data, inbox, state, party, *, fuzzifier, n_local_iter):
    """Client step of one FFCM round: fuzzy c-means iterations from the global centers.

    Sends the local centers and the fuzzy mass ``w_j = sum_i u_ij^m`` of each
    (a center with zero mass is sent unchanged).
    """
    local, mass, _ = fuzzy_local_update(
        data, inbox["global centers"], fuzzifier=fuzzifier, n_local_iter=n_local_iter
    )
    return Reply(send=(local, mass))


def fuzzy_local_update(data, centers, *, fuzzifier, n_local_iter):
    """``n_local_iter`` fuzzy c-means iterations from ``centers`` on a client's rows.

    Returns the local centers, their fuzzy masses ``w_j = sum_i u_ij^m`` and
    the weights ``u_ij^m`` of the last iteration (a center with zero mass
    stays unchanged).
    """
    local = np.array(centers, dtype=np.float64)
    # Weighted means relative to one row: a large common offset of the data
    # costs no precision.
    origin = data[0]
    shifted = data - origin
    for _ in range(n_local_iter):
        um = fuzzy_memberships(data, local, fuzzifier) ** fuzzifier
        mass = um.sum(axis=0)
        moved = mass > 0
        local = local.copy()
        local[moved] = (um.T @ shifted)[moved] / mass[moved, None] + origin
    return local, mass, um


@coordinator_centers
@summand
def ffcm_client_moves(data, inbox, state, party, *, fuzzifier, n_local_iter):
    """Client step of a v1 round by secure sums: mass-weighted moves of the centers, and masses.

    Sends ``w_j (c'_j - c_j)`` and ``w_j`` for every center: their sums over
    clients give v1's mass-weighted average (:func:`ffcm_aggregate_v1`), and
    the server needs nothing else.
    """
    centers = np.asarray(inbox["global centers"], dtype=np.float64)
    reply = ffcm_client_update(
        data, inbox, state, party, fuzzifier=fuzzifier, n_local_iter=n_local_iter
    )
    local, mass = reply.send
    return Reply(send=(mass[:, None] * (local - centers), mass))


# ---------------------------------------------------------------- server side
def ffcm_seeds_from_local_centers(uploads, *, n_clusters, seed):
    """Server step of the local-centers start: weighted k-means on the clients' local centers.

    Each local center weighs the rows of its cluster; k-means (10 k-means++
    restarts) on the pooled local centers gives the ``n_clusters`` initial
    centers. Fewer local centers than ``n_clusters`` is an error: the clients
    hold too few rows (two per center) for that many clusters.
    """
    payloads = uploads.list()
    if not payloads or sum(len(p[0]) for p in payloads) < n_clusters:
        received = sum(len(p[0]) for p in payloads)
        raise ValueError(
            f"FederatedFuzzyCMeans(init='local-centers') received {received} local centers "
            f"from the clients, fewer than n_clusters={n_clusters}: each local center "
            "summarises as many rows of its client as the client's node requires (two on "
            "a deployed node's default policy). Ask for fewer clusters, or give the initial "
            "centers (init=array)"
        )
    pooled = np.vstack([np.asarray(p[0], dtype=np.float64) for p in payloads])
    weights = np.concatenate([np.asarray(p[1], dtype=np.float64) for p in payloads])
    km = KMeans(n_clusters=n_clusters, n_init=10, random_state=seed)
    return km.fit(pooled, sample_weight=weights).cluster_centers_


def ffcm_aggregate_v1(centers, local_centers, masses):
    """v1: index-wise average of the local centers weighted by their fuzzy mass.

    Averaged as displacements from ``centers``, so a large common offset costs
    no precision; a center no client gave mass to stays where it was.
    """
    masses = np.asarray(masses)
    total = masses.sum(axis=0)
    moves = np.asarray(local_centers) - centers[None, :, :]
    weighted = np.einsum("mk,mkd->kd", masses, moves)
    new = centers.copy()
    filled = total > 0
    new[filled] = centers[filled] + weighted[filled] / total[filled, None]
    return new


def ffcm_aggregate_v2(local_centers, masses, n_clusters, *, weighted, seed):
    """v2: k-means (``n_clusters``) on the pooled local centers of every client.

    scikit-learn's k-means centers the pooled centers first, so a large common
    offset costs no precision.
    """
    pooled = np.vstack(local_centers)
    weights = np.concatenate(masses) if weighted else None
    km = KMeans(n_clusters=n_clusters, n_init=10, random_state=seed)
    return km.fit(pooled, sample_weight=weights).cluster_centers_


def ffcm_server_step(uploads, *, centers, aggregation, n_clusters, v2_weighted, seed):
    """Server step of one round on the received local centers and masses."""
    payloads = uploads.list()
    local = [np.asarray(p[0]) for p in payloads]
    masses = [np.asarray(p[1]) for p in payloads]
    if aggregation == "v1":
        return ffcm_aggregate_v1(centers, local, masses)
    return ffcm_aggregate_v2(local, masses, n_clusters, weighted=v2_weighted, seed=seed)


# ---------------------------------------------------------------- estimator
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

    Read more in the :ref:`User Guide <ffcm>`.

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
    secure_aggregation : bool, default=True
        With ``aggregation="v1"``, add the clients' mass-weighted moves and
        masses by secure sums: the server learns their totals per round, not
        a client's local centers (after a set-up round and a bound on the rows,
        each round is two exchanges). v2 needs every local center and ignores
        it.
    coordinator : {"auto", "blind", "verified", "sees-totals"}, default="auto"
        Who runs v1's aggregation. ``"blind"``: the nodes run it themselves,
        as :class:`~skfedclust.FederatedKMeans` runs Lloyd's
        (:ref:`fedkmeans_blind`): every round each node sends its
        mass-weighted moves and masses under pairwise masks to every other
        node (sealed peer messages), the nodes add them and move the centers
        alike, and the coordinator receives only the result (the centers,
        the sizes of the nearest-center clusters, ``n_iter_`` and the
        inertia) and one status byte per round: it can neither choose the
        centers a round answers nor see a round's totals. Two set-up rounds,
        one round per FFCM round and one for the result. Supports
        ``aggregation="v1"`` with secure sums, and ``init="local-centers"``
        (the weighted k-means on the local centers runs on the nodes, which
        share them with each other, never with the coordinator, with a seed
        from their committed nonces) or an array. ``"sees-totals"``: the
        coordinator sends the centers every round (a deployed node refuses
        to answer them unless its operator allows it:
        ``allow-coordinator-centers``). ``"verified"``: the nodes run v1,
        the coordinator adds their masked uploads and every node checks the
        total against a code the coordinator cannot forge
        (:ref:`fedkmeans_verified`): the coordinator sees each round's totals
        and chooses nothing, at a cost per node that does not grow with the
        federation. ``"auto"``: where the options above allow, ``"blind"``
        from 3 to 50 clients and ``"verified"`` above, as
        :class:`~skfedclust.FederatedKMeans`, else ``"sees-totals"``.
    init : {"local-centers", "k-means++-rows"} or array-like of shape \
            (n_clusters, n_features), default="local-centers"
        Initial centers, in an exchange of their own (one more round) or
        given (no exchange).

        - ``"local-centers"``: every client runs k-means on its own rows
          (at most ``n_clusters`` clusters, each of at least two of its rows
          on a node that refuses raw rows, a deployed node's default) and
          uploads their means, none of them a row, with their row counts;
          the server runs k-means on these local centers, each weighted by
          its rows, and starts from its ``n_clusters`` centers. No row
          leaves a client: a default node's policy
          (``min-rows-per-vector``, ``refuse-raw-rows``) checks the upload.
          Simulated parties, whose user holds every row, allow clusters of
          one row. Not in the paper (see Notes).
        - ``"k-means++-rows"``: the reconstruction of the paper's start:
          k-means++ seeding run by one randomly chosen client on its own
          rows (among clients holding at least ``n_clusters`` rows; if none
          does, the largest clients seed in turn), which uploads the seeds:
          rows of that client. A deployed node runs this step only if its
          operator allows it for this method by name
          (``allow-row-release = "FederatedFuzzyCMeans"``).
        - An array: distinct initial centers.
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
        Seeds the partition, the seed client, its seeding and the v2 k-means.
    verbose : int, default=0
        Print progress per protocol stage (``1``), and every few seconds of a
        long client step how many clients are done; ``2`` adds debug detail.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Global centers after the last round.
    initial_centers_ : ndarray of shape (n_clusters, n_features) or None
        Centers the first round started from; ``None`` when the nodes
        computed the start themselves (``coordinator_ == "blind"`` with
        ``init="local-centers"``): it never leaves them.
    coordinator_ : {"blind", "verified", "sees-totals"}
        The mode the fit ran (``coordinator`` with ``"auto"`` resolved).
    local_centers_ : list of ndarray or None
        Local centers each client uploaded in the last round (``None`` with
        secure v1 aggregation: the server never sees them).
    labels_ : ndarray of shape (n_samples,)
        Nearest-center label of each input row.
    inertia_ : float
        Only with ``compute_inertia=True`` or ``coordinator_ == "blind"``
        (the nodes release it with the result, at no extra round).
        Hard-assignment inertia of the final centers: the sum of squared
        distances of the training rows to their nearest center (not the
        fuzzy objective), from a secure sum at the end of the fit (the server
        learns the total, not a client's share); :meth:`score` gives it for
        rows the caller holds.
    n_iter_ : int
        Rounds run (``n_rounds``).
    n_clients_ : int
        Number of clients.
    client_sizes_ : ndarray of shape (n_clients,)
        Rows held by each client.
    communication_ : dict
        Rounds and bytes exchanged; see :class:`~skfedclust.federation.Ledger`. Rounds are
        ``n_rounds``, plus one for the start's exchange unless ``init`` is an
        array, plus four for the labels and the inertia (two secure sums) and
        one set-up round. With ``coordinator_ == "blind"``: ``n_rounds`` plus
        two (the final labels' statistics, the result) after two set-up
        rounds; what the nodes send each other is ``bytes_peer``.
    n_features_in_ : int
        Number of features seen during fit.

    Notes
    -----
    The FeCA paper, which reports FFCM as a baseline, does not say how FFCM
    starts; the package's reconstruction (``init="k-means++-rows"``) seeds
    with k-means++ on one random client's rows, which are sent to the
    server: with ``n_clusters`` equal to that client's row count, all of
    them. The default start sends summaries instead, and reaches about the
    same quality on the package's benchmark grid (the user guide quotes
    both).

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
        "compute_inertia": ["boolean"],
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "aggregation": [StrOptions({"v1", "v2"})],
        "n_rounds": [Interval(numbers.Integral, 1, None, closed="left")],
        "fuzzifier": [Interval(numbers.Real, 1, None, closed="neither")],
        "n_local_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "v2_weighted": ["boolean"],
        "secure_aggregation": ["boolean"],
        "coordinator": [StrOptions({"auto", "blind", "verified", "sees-totals"})],
        "init": [StrOptions(set(INITS)), "array-like"],
    }

    #: The coordinator-blind protocol's steps (``coordinator="blind"``).
    _client_step_modules = (
        "skfedclust.methods._fedkmeans_blind",
        "skfedclust.methods._fedkmeans_verified",
    )

    def __init__(
        self,
        n_clusters=8,
        *,
        aggregation="v1",
        n_rounds=10,
        fuzzifier=2.0,
        n_local_iter=1,
        v2_weighted=False,
        secure_aggregation=True,
        coordinator="auto",
        init="local-centers",
        compute_inertia=False,
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
        self.secure_aggregation = secure_aggregation
        self.coordinator = coordinator
        self.init = init
        self.compute_inertia = compute_inertia
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _check_init(self, n_features):
        init = check_array(self.init, dtype=np.float64, input_name="init")
        if init.shape != (self.n_clusters, n_features):
            raise ValueError(
                f"init has shape {init.shape} but must be (n_clusters, n_features) = "
                f"({self.n_clusters}, {n_features})"
            )
        if len(np.unique(init, axis=0)) < len(init):
            # Identical centers get identical memberships and identical updates:
            # fuzzy c-means can never separate them.
            raise ValueError(
                "init has identical rows; fuzzy c-means never separates identical centers, "
                "so every initial center must be distinct"
            )
        return init.copy()

    def _seed_quotas(self, sizes, random_state):
        """Seed clients and the number of k-means++ seeds each contributes."""
        big_enough = np.flatnonzero(sizes >= self.n_clusters)
        if len(big_enough):
            return {int(big_enough[random_state.randint(len(big_enough))]): self.n_clusters}
        # No client holds n_clusters rows: the largest clients seed in turn
        # until there are n_clusters centers (the pooled data has enough).
        order = np.argsort(-sizes, kind="stable")
        n_needed = np.cumsum(sizes[order]) < self.n_clusters
        quotas, missing = {}, self.n_clusters
        for c in order[: n_needed.sum() + 1]:
            quotas[int(c)] = min(missing, int(sizes[c]))
            missing -= quotas[int(c)]
        return quotas

    def _initial_centers(self, runtime, random_state):
        if not isinstance(self.init, str):
            return self._check_init(runtime.n_features)
        if self.init == "local-centers":
            return self._local_centers_start(runtime, random_state)
        quotas = self._seed_quotas(runtime.client_sizes, random_state)
        runtime.stage(f"round 0: client(s) {list(quotas)} seed the centers with k-means++")
        # The seeds are rows of the clients, not public parameters: the
        # seeding is a round of the protocol, not set-up.
        uploads = runtime.run(
            ffcm_seed_centers,
            tag="initial centers",
            clients=list(quotas),
            per_client={c: {"n_seeds": q} for c, q in quotas.items()},
        )
        return np.vstack([uploads[c] for c in quotas])

    def _local_centers_start(self, runtime, random_state):
        """The start from the clients' local k-means centers (no row sent)."""
        seed = int(random_state.randint(np.iinfo(np.int32).max))
        runtime.stage("round 0: every client sends its local k-means centers")
        uploads = runtime.run(
            ffcm_local_centers, tag="local k-means centers", n_centers=self.n_clusters
        )
        runtime.stage("server step: weighted k-means on the local centers")
        return runtime.server(
            ffcm_seeds_from_local_centers, uploads, n_clusters=self.n_clusters, seed=seed
        )

    def _run_protocol(self, runtime, random_state):
        self.coordinator_ = self._coordinator_mode(runtime)
        if self.coordinator_ in ("blind", "verified"):
            self._run_blind(runtime)
            return
        centers = self._initial_centers(runtime, random_state)
        self.initial_centers_ = centers
        server_seed = int(random_state.randint(np.iinfo(np.int32).max))
        if self.aggregation == "v1" and self.secure_aggregation:
            return self._run_secure_v1(runtime, random_state, centers)
        runtime.broadcast(centers, tag="global centers")
        for t in range(1, self.n_rounds + 1):
            runtime.stage(
                f"round {t}: client fuzzy c-means step, server {self.aggregation} aggregation"
            )
            uploads = runtime.run(
                ffcm_client_update,
                tag="local centers and masses",
                fuzzifier=float(self.fuzzifier),
                n_local_iter=self.n_local_iter,
            )
            centers = runtime.server(
                ffcm_server_step,
                uploads,
                centers=centers,
                aggregation=self.aggregation,
                n_clusters=self.n_clusters,
                v2_weighted=self.v2_weighted,
                seed=server_seed,
            )
            if t < self.n_rounds:
                runtime.broadcast(centers, tag="global centers")

        final_labels(self, runtime, random_state, centers, centers_tag="final centers")
        self.cluster_centers_ = centers
        self.local_centers_ = [np.asarray(p[0]) for p in uploads.list()]
        self.n_iter_ = self.n_rounds

    def _blind_unsupported(self):
        """The options the coordinator-blind protocol does not run, by name."""
        return {
            "aggregation": self.aggregation != "v1",
            "secure_aggregation": not self.secure_aggregation,
            "init": isinstance(self.init, str) and self.init != "local-centers",
        }

    def _coordinator_mode(self, runtime):
        """The mode this fit runs: ``coordinator``, with ``"auto"`` resolved."""
        # Imported here: the blind protocol's module imports this one's client steps.
        from ._fedkmeans_blind import coordinator_mode

        return coordinator_mode(self.coordinator, self._blind_unsupported(), runtime.n_clients)

    def _run_blind(self, runtime):
        """v1 run by the nodes: the coordinator relays and receives the result only."""
        # Imported here: the blind protocol's module imports this one's client steps.
        from ._fedkmeans import FederatedKMeansError
        from ._fedkmeans_blind import FUZZY_V1, run_blind_fit
        from ._fedkmeans_verified import run_verified_fit

        for name, bad in self._blind_unsupported().items():
            if bad:
                raise ValueError(
                    f'coordinator="{self.coordinator}" runs v1 with secure sums from '
                    f'init="local-centers" or an array; {name}={getattr(self, name)!r} needs '
                    'coordinator="sees-totals"'
                )
        if runtime.n_clients < DEFAULT_MIN_SUM_PARTICIPANTS:
            raise ValueError(
                f"the nodes add totals over at least {DEFAULT_MIN_SUM_PARTICIPANTS} clients "
                f"(each refuses fewer); this federation has {runtime.n_clients}"
            )
        init = None if isinstance(self.init, str) else self._check_init(runtime.n_features)
        run = run_blind_fit if self.coordinator_ == "blind" else run_verified_fit
        centers, sizes, n_iter, inertia = run(
            runtime,
            n_clusters=self.n_clusters,
            n_init=1,
            max_iter=self.n_rounds,
            tol=0.0,
            init=init,
            error=FederatedKMeansError,
            algorithm=FUZZY_V1,
            fuzzifier=float(self.fuzzifier),
            n_local_iter=int(self.n_local_iter),
        )
        self.initial_centers_ = init
        self.cluster_centers_ = np.asarray(centers, dtype=np.float64)
        self.local_centers_ = None
        self.n_iter_ = int(np.asarray(n_iter)[0])
        self.inertia_ = float(np.asarray(inertia)[0])

    def _run_secure_v1(self, runtime, random_state, centers):
        """v1 rounds whose moves and masses are secure sums (the server sees no client's)."""
        channel = SumChannel(
            runtime, secure=True, seed=int(random_state.randint(np.iinfo(np.int32).max))
        )
        channel.aggregator.setup()
        # A local center is a weighted mean of rows, so |c' - c| <= B + |c|
        # with B a bound on |x|: one agreed bound serves every round.
        rows = channel.bound(moments_rows, tag="bound on the rows", coarseness=4)
        largest = float(np.max(runtime.client_sizes))
        for t in range(1, self.n_rounds + 1):
            runtime.broadcast(centers, tag="global centers")
            runtime.stage(f"round {t}: client fuzzy c-means step, secure v1 aggregation")
            reach = 2.0 * (rows + float(np.abs(centers).max()))
            (moves, masses), _ = channel.sum(
                ffcm_client_moves,
                tag="mass-weighted moves and masses",
                bounds=[2.0 * largest * reach, 2.0 * largest],
                fuzzifier=float(self.fuzzifier),
                n_local_iter=self.n_local_iter,
            )
            runtime.stage("server step: centers moved by the total mass-weighted moves")
            new = centers.copy()
            filled = masses > 0
            new[filled] = centers[filled] + moves[filled] / masses[filled, None]
            centers = new
        final_labels(self, runtime, random_state, centers, centers_tag="final centers")
        self.cluster_centers_ = centers
        self.local_centers_ = None
        self.n_iter_ = self.n_rounds
