"""OmniFC: federated clustering on a losslessly reconstructed distance matrix.

Yan, Liu & Zhang, "OmniFC: Rethinking Federated Clustering via Lossless and
Secure Distance Reconstruction". The clients share only Lagrange-coded data
(:mod:`skfedclust.secure`); the server decodes the exact squared-Euclidean
distance matrix of the quantized data and runs any centralized clusterer on it.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..clusterers._memory import check_dense_memory
from ..federation import Federation, InProcessRuntime, Reply, releases_nothing
from ..partition import IIDPartition
from ..secure._field import DEFAULT_PRIME
from ..secure._lcc import LCCSetup, lcc_exchange, lcc_query_distances
from ..secure._lcc_coding import _data_bounds, decoding_threshold, precision_is_safe
from ..secure._lcc_offset import agree_scale
from ..secure._lcc_sinks import NeighbourSink, neighbour_sink_bytes
from ._base import BaseFederatedClustering
from ._omnifc_cluster import (
    CLUSTERERS,
    FEATURE_METHODS,
    N_VOTE_NEIGHBORS,
    PEAK_COPIES,
    _distance_features,
    _spectral_is_sparse,
    check_clustering_range,
    neighbour_sink_options,
    omnifc_graph_server_step,
    server_cluster,
    streams,
)

__all__ = ["OmniFCClustering"]


# --------------------------------------------------------------------------- #
# The protocol steps of OmniFC around the LCC distance round
# --------------------------------------------------------------------------- #
@releases_nothing
def omnifc_row_position_step(data, inbox, state, party, *, first_rows):
    """Client step (no message): declare the client-major position of each of its rows.

    An output for the party's own user, never sent: in a simulation, the
    user who plays every party says with it where each row was in its input.
    """
    start = first_rows[party.index]
    return Reply(output={"row position": np.arange(start, start + data.shape[0])})


def public_row_numbers(runtime):
    """The public row numbering: the global index of every row of each client.

    OmniFC's global row index is public metadata that the parties agree
    before the protocol (the server assembles ``D`` in it). A deployment
    numbers the rows client by client, in party order. A simulation uses
    the order of its user's input rows, so that ``dissimilarity_matrix_``
    follows them: the user plays every party and hands back where each of
    their rows was (the declared output ``"row position"``, through
    :meth:`~skfedclust.federation.Runtime.hand_back`; nothing is sent).
    """
    sizes = np.asarray(runtime.client_sizes)
    first_rows = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
    runtime.run(omnifc_row_position_step, tag="row numbering", first_rows=first_rows)
    position = runtime.hand_back("row position")
    if position is None:
        return [np.arange(a, a + s) for a, s in zip(first_rows, sizes)]
    input_row = np.empty_like(position)
    input_row[position] = np.arange(len(position))
    return [input_row[a : a + s] for a, s in zip(first_rows, sizes)]


def omnifc_server_step(*, D, clusterer, clusterer_params, n_clusters, seed):
    """Server step: run the centralized clusterer on the decoded squared distances.

    Returns
    -------
    estimator : estimator or None
        The fitted clusterer (:func:`server_cluster`).
    labels : ndarray of shape (n_samples,)
        The label of every row.
    """
    est, labels = server_cluster(D, clusterer, clusterer_params, n_clusters, seed)
    return est, np.asarray(labels)


@releases_nothing
def omnifc_keep_labels(data, inbox, state, party):
    """Client step (no message): the labels of its rows the server sent, for its own user."""
    return Reply(output={"labels": inbox["labels"]})


#: The server's message of the labels of a querying party's new rows (Flower predict).
TAG_PREDICTED = "predicted labels"


@releases_nothing
def omnifc_check_query_rows(data, inbox, state, party, *, precision, bounds, p):
    """Client step of a querying party: its new rows within the public bounds of the fit.

    Their distances to the training rows are exact only if no product wraps
    around modulo ``p`` at the fit's precision; a party whose rows exceed the
    bounds refuses before it shares anything. Nothing is sent.
    """
    max_abs, max_norm = _data_bounds([data], state["offset"])
    max_abs, max_norm = max(max_abs, bounds[0]), max(max_norm, bounds[1])
    if not precision_is_safe(precision, max_abs, max_norm, data.shape[1], p):
        raise ValueError(
            f"the new rows exceed the public bounds the precision q={precision} was chosen "
            "for: their distances to the training rows could wrap around modulo p. Scale "
            "them like the training data or refit with a lower precision."
        )
    return Reply()


@releases_nothing
def omnifc_predicted_labels(data, inbox, state, party):
    """Client step of a querying party: hand its user the labels of its new rows."""
    return Reply(output={"labels": np.asarray(inbox[TAG_PREDICTED], dtype=np.intp)})


def omnifc_assign_step(*, D_new, estimator, train_labels, rule, params, nmf):
    """Server step of predict: labels of the query rows from their decoded distances."""
    if estimator is None:
        # every group of identical training rows is a cluster: the nearest one
        labels = train_labels[np.argmin(D_new, axis=1)]
    elif rule == "medoid":
        labels = np.argmin(D_new[:, estimator.medoid_indices_], axis=1)
    elif rule == "centroid":
        features = _distance_features(
            D_new, (params or {}).get("feature_dissimilarity", "sqeuclidean")
        )
        if nmf is not None:
            classes, centroids = nmf
            labels = classes[_nearest_center(features, centroids)]
        else:
            labels = _nearest_center(features, estimator.cluster_centers_)
    else:
        labels = nearest_neighbour_vote(np.sqrt(D_new), train_labels, N_VOTE_NEIGHBORS)
    # A row identical to a training row (distance exactly 0) takes its label,
    # so predicting the training rows gives back labels_ whatever the rule.
    zero = D_new == 0
    identical = zero.any(axis=1)
    labels[identical] = train_labels[np.argmax(zero[identical], axis=1)]
    return labels


# --------------------------------------------------------------------------- #
# The estimator
# --------------------------------------------------------------------------- #
class OmniFCClustering(BaseFederatedClustering):
    """OmniFC: any clustering on the exact distance matrix, from Lagrange-coded shares.

    The clients first agree on their global mean by secure aggregation
    (:class:`~skfedclust.secure.SecureAggregator`) and subtract it: distances
    do not change, and
    the field then holds the spread of the data rather than its position.
    Every client quantizes its centred rows to a prime field, masks them with
    ``n_colluders`` random segments and sends one Lagrange-coded share of each
    row to every share-holding party. Each party computes the squared
    distances mod p between the encoded rows it holds and uploads them; the
    server decodes the exact squared-Euclidean distance matrix ``D`` of the
    quantized data (whatever the split of the rows) and runs a centralized
    clusterer on it, and sends every client the labels of its rows. Any
    ``n_colluders`` parties together learn nothing about other clients'
    rows; the server learns the mean, ``D`` and the per-segment distances
    (see the User Guide).

    Rounds (``communication_``): three set-up exchanges (each client's bound
    on ``|x|``; the secure sum's pairwise seeds; later each client's bounds
    around the offset, from which the precision is chosen:
    ``setup_rounds = 3``); then four rounds: the secure sum of the clients'
    column sums, masked up and unmasked (two rounds), with the mean down
    (the common offset, rounds of their own because the precision and the
    quantization depend on it), the share exchange, and the encoded
    distances up, as tiles the server asks for in a few exchanges and
    decodes one exchange at a time, with the labels down. The last two are
    the paper's two rounds. No share reaches the server or the fitted
    estimator. A data client that drops out of the secure sum ends the fit
    with a clear error (the distances need every data holder's rows).

    Read more in the :ref:`User Guide <omnifc>`.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters (ignored by ``"dbscan"``).
    clusterer : str or estimator, default="spectral"
        What the server runs on ``D``:

        - ``"spectral"``: :class:`~sklearn.cluster.SpectralClustering` on the
          affinity ``exp(-gamma * D)``. By default ``gamma`` is chosen from
          ``D`` itself, ``1 / median`` of its nonzero entries (the median
          heuristic: the kernel is ``1/e`` at a typical pair, in any units),
          and the affinity is kept on the graph of the 10 nearest neighbours
          of every row (``clusterer_params={"n_neighbors": k}`` changes it),
          which keeps outlying rows attached to their neighbours. Giving a
          number, ``clusterer_params={"gamma": 1.0}``, uses the dense kernel
          ``exp(-gamma * D)`` over every pair, scikit-learn's rbf affinity
          with that ``gamma``, which is the paper's literal setting.
          ``clusterer_params={"eigen_solver": ...}`` sets the solver of the
          embedding: ``None`` (the default) is ARPACK below
          :data:`~skfedclust.clusterers.AMG_MIN_VERTICES` distinct rows
          (20,000) or on the dense kernel, and ``"amg"`` (pyamg's
          multigrid) on a larger graph, where ARPACK's shift-invert
          factorization fills in; ``"arpack"``, ``"lobpcg"`` or ``"amg"``
          forces one;
        - ``"dbscan"``: :class:`~sklearn.cluster.DBSCAN` on ``sqrt(D)``;
        - ``"agglomerative"``: scipy linkage (``linkage="ward"`` by default)
          on ``sqrt(D)``, cut into ``n_clusters``;
        - ``"kmedoids"``: k-medoids on ``sqrt(D)`` (alternate, heuristic init);
        - ``"kmeans"``, ``"fcm"``, ``"nmf"``: k-means, fuzzy c-means or NMF
          (label = largest component) on the rows of ``D`` used as features
          (``clusterer_params={"feature_dissimilarity": "euclidean"}`` uses
          ``sqrt(D)``); k-means and fuzzy c-means keep the best of 10
          restarts unless ``clusterer_params`` sets ``n_init``;
        - a scikit-learn clusterer with ``metric="precomputed"`` (gets
          ``sqrt(D)``) or ``affinity="precomputed"`` (gets ``exp(-gamma D)``
          with its own ``gamma``; :class:`~sklearn.cluster.AffinityPropagation`
          gets ``-D``, its default similarity).
    clusterer_params : dict, default=None
        Parameters of the clusterer (passed to its constructor, or to
        ``set_params`` of a given estimator).
    partition : int, partition specification or None, default=None
        How to simulate clients from a pooled ``X``: an int gives that many IID
        clients, a specification from :mod:`skfedclust.partition` any other
        split. ``None`` gives ``2 * n_segments + 2 * n_colluders - 1`` IID
        clients, the fewest that can decode without ``n_parties``.
    n_segments : int, default=2
        Segments ``l`` each row is cut into (features are zero-padded to a
        multiple of ``l``).
    n_colluders : int, default=2
        Noise segments ``t``: privacy holds against any ``t`` colluding parties.
    precision : int or "auto", default="auto"
        Fixed-point bits ``q`` (values minus the common offset scaled by
        ``2**q`` and rounded). ``"auto"`` takes the largest ``q`` for which no
        squared distance can wrap modulo ``prime``; a given ``q`` that could
        wrap, or whose step ``2**-q`` hides the spread of the data, raises.
    prime : int, default=2**30 - 35
        Field modulus, a prime below ``2**31``. The default gives about 13
        bits of precision on unit-norm rows (the RMSE of ``D`` on
        L2-normalised digits is 1e-4) with two limbs stacked into one float64
        product per block. ``prime=2**23 - 15``
        (:data:`~skfedclust.secure.FAST_PRIME`) is the fast option: one
        product of half the width per block, about half the work of the
        distance round, for about three bits less (RMSE 8e-4).
    n_parties : int, default=None
        Share-holding parties (extension, not in the paper). Data clients are
        parties ``0 .. n_clients - 1``; a larger value adds parties that hold
        no data, so fewer than ``2 l + 2 t - 1`` data holders can run the
        protocol. ``None`` (or a value not above the number of clients) uses
        the data clients only.
    keep_dissimilarity : bool, default=False
        Also keep the dense ``D`` as ``dissimilarity_matrix_`` when the
        clusterer streams (the default spectral clusterer, DBSCAN), which then
        costs ``8 n**2`` bytes again; meant for small ``n``. The other
        clusterers always keep it (they need it).
    n_jobs : int, default=None
        Parallel workers for the client steps and the streamed distance blocks.
    random_state : int, RandomState instance or None, default=None
        Seeds the partition, the clients' noise (``D`` does not depend on it)
        and the clusterer. An int is passed to the clusterer unchanged, so the
        result equals the centralized method run with the same seed.
    verbose : int, default=0
        Print progress per protocol stage (``1``), and every few seconds of a
        long client step how many clients are done; ``2`` adds debug detail.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Cluster of each input row (``-1`` is DBSCAN noise).
    dissimilarity_matrix_ : ndarray of shape (n_samples, n_samples)
        Decoded squared Euclidean distances of the quantized rows, input-row
        order. Not set when the clusterer streams the distances into a
        neighbour graph (the default spectral clusterer, DBSCAN) unless
        ``keep_dissimilarity=True``.
    clusterer_ : estimator or None
        The fitted centralized clusterer; None when the data have fewer
        distinct rows than ``n_clusters`` (every group of identical rows is
        then a cluster, with a ``ConvergenceWarning``).
    precision_ : int
        The precision ``q`` used.
    offset_ : ndarray of shape (n_features,)
        The common offset (the global mean, from a secure sum) every party
        subtracted before quantizing; ``predict`` subtracts it from new rows.
    n_parties_ : int
        Share-holding parties.
    session_ : Session or None
        The simulated parties with the shares they kept, for :meth:`predict`
        (an in-process fit; pickled and copied with the model).
        ``None`` after a Flower fit and in :meth:`server_model`'s copy.
    n_clients_ : int
        Data-holding clients.
    client_sizes_ : ndarray of shape (n_clients,)
        Rows held by each client.
    communication_ : dict
        Rounds and bytes exchanged (see :class:`~skfedclust.federation.Ledger`). Set-up:
        24 bytes of bounds up from every data client (one float64, then two),
        and a 16-byte seed from every data client to each later neighbour on
        the secure-sum graph (peer bytes). Rounds 1-2, the offset's secure
        sum: every data client's masked column sums (``8 d`` bytes and 16 of
        structure) up, 32 bytes of self-mask shares to each of its ``deg``
        neighbours (peer) and back up in the unmasking; who uploaded (``8``
        bytes per data client) and the mean (``8 d`` bytes) down. Round 3: the
        shares, ``4 n_i w`` bytes from client ``i`` to each other party
        (``w = ceil(d / l)``; peer bytes). Round 4: ``4 n (n - 1) / 2`` bytes
        of encoded distances up from every answering party, and each client's
        labels down.
    n_features_in_ : int
        Number of features seen during fit.

    See Also
    --------
    skfedclust.secure.lcc_squared_distances : The secure distance round alone.

    Notes
    -----
    ``predict`` runs the same LCC round for the new rows as a second
    protocol with the parties of the fit (a querying party shares them with
    fresh private noise; the parties answer from the shares of the training
    rows they kept; nothing is added to ``communication_``), and then
    assigns: nearest medoid for ``"kmedoids"``; nearest centroid in the
    D-feature space for ``"kmeans"``, ``"fcm"`` and ``"nmf"`` (the mean
    feature row of each cluster for NMF); a distance-weighted vote of the 5
    nearest training rows for ``"spectral"``, ``"dbscan"``,
    ``"agglomerative"`` and custom clusterers. A new row identical to a
    training row (squared distance exactly 0) takes that row's label, so
    predicting the training rows returns ``labels_``.

    Identical rows (an exact zero in ``D``) always share a label: the
    spectral, feature-based, k-medoids and custom clusterers see each
    distinct row once (with its multiplicity as a sample weight where the
    algorithm has one; ``clusterer_`` is then fitted on the distinct rows),
    and DBSCAN and the linkages keep such rows together on their own.

    The default spectral clusterer (on its k-nearest-neighbour graph) and
    DBSCAN never hold ``D``: the server decodes it tile by tile and keeps,
    per row, only the nearest rows (ties to the lowest row) or the rows
    within ``eps``, the groups of identical rows and the exact median of the
    distances, in ``O(n k)`` memory plus the current tiles; the labels are
    those of the same clusterer on the dense ``D``. The other clusterers
    need all of ``D``. Either way the estimated peak is checked against the
    available memory first
    (``check_dense_memory``): a too large
    ``n`` raises a :class:`MemoryError` (also a :class:`ValueError`) that
    says how much is needed and names the streaming clusterers.

    Progress goes to the ``skfedclust`` logger: ``verbose=1`` prints the
    protocol stages, ``verbose=2`` also one line per block of the long
    server stages (the decoding of ``D``, the spectral step).

    The parties keep their shares. An in-process fit keeps the simulated
    parties in ``session_`` (the user of a simulation played them all): the
    model pickles and copies with them and predicts anywhere. The session
    is every party's shares of the training rows; :meth:`server_model` gives
    the model as the server holds it, without them. That copy, or a model
    fitted on Flower, keeps ``labels_``, ``dissimilarity_matrix_``,
    ``clusterer_`` and what derives from ``D``, and refuses ``predict``.

    Masks and noise come from each party's private generator (numpy's PCG64,
    fine for a simulation but not a cryptographic generator); ``D`` is exact
    and does not depend on them.

    References
    ----------
    .. [1] J. Yan, J. Liu and Z.-Y. Zhang, "OmniFC: Rethinking Federated
       Clustering via Lossless and Secure Distance Reconstruction", 2025.
    .. [2] Q. Yu, S. Li, N. Raviv, S. M. M. Kalan, M. Soltanolkotabi and
       S. Avestimehr, "Lagrange Coded Computing: Optimal Design for
       Resiliency, Security and Privacy", AISTATS 2019.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfedclust import OmniFCClustering
    >>> X, _ = make_blobs(70, centers=3, random_state=0)
    >>> clients = [X[i::7] for i in range(7)]
    >>> est = OmniFCClustering(3, clusterer="kmedoids", random_state=0).fit(clients)
    >>> est.dissimilarity_matrix_.shape, est.communication_["rounds"]
    ((70, 70), 4)
    """

    _parameter_constraints: dict = {
        **BaseFederatedClustering._parameter_constraints,
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "clusterer": [StrOptions(set(CLUSTERERS)), HasMethods(["fit", "get_params"])],
        "clusterer_params": [None, dict],
        "n_segments": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_colluders": [Interval(numbers.Integral, 1, None, closed="left")],
        "precision": [
            StrOptions({"auto"}),
            Interval(numbers.Integral, None, None, closed="neither"),
        ],
        "prime": [Interval(numbers.Integral, 3, 2**31, closed="left")],
        "n_parties": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "keep_dissimilarity": ["boolean"],
    }

    #: OmniFC's secure steps (the common offset and scale, the coded shares and
    #: their evaluations) live in ``secure``: they belong to OmniFC, and a node
    #: runs them only in an OmniFC fit (``NodePolicy.check_step``).
    _client_step_modules = ("skfedclust.secure._lcc", "skfedclust.secure._lcc_offset")

    def __init__(
        self,
        n_clusters=8,
        *,
        clusterer="spectral",
        clusterer_params=None,
        partition=None,
        n_segments=2,
        n_colluders=2,
        precision="auto",
        prime=DEFAULT_PRIME,
        n_parties=None,
        keep_dissimilarity=False,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.clusterer = clusterer
        self.clusterer_params = clusterer_params
        self.partition = partition
        self.n_segments = n_segments
        self.n_colluders = n_colluders
        self.precision = precision
        self.prime = prime
        self.n_parties = n_parties
        self.keep_dissimilarity = keep_dissimilarity
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    # ----------------------------------------------------------- federation
    def _n_parties(self, federation):
        return max(federation.n_clients, self.n_parties or 0)

    def _default_partition(self):
        return IIDPartition(decoding_threshold(self.n_segments, self.n_colluders))

    def _min_samples(self):
        if self.clusterer == "dbscan":
            return 1
        return max(self.n_clusters, 1)

    # ---------------------------------------------------------------- fit
    def _run_protocol(self, runtime, random_state):
        setup = LCCSetup(
            n_clients=runtime.n_clients,
            n_features=runtime.n_features,
            n_segments=self.n_segments,
            n_colluders=self.n_colluders,
            prime=self.prime,
            n_parties=self.n_parties,
        )
        n = int(np.sum(runtime.client_sizes))
        streamed = isinstance(self.clusterer, str) and streams(
            self.clusterer, self.clusterer_params
        )
        options = neighbour_sink_options(self.clusterer, self.clusterer_params) if streamed else {}
        keep = self.keep_dissimilarity or not streamed
        self._check_fit_memory(setup, n, streamed, keep, options)
        row_numbers = public_row_numbers(runtime)
        scale = agree_scale(runtime, setup, self.precision)
        check_clustering_range(scale.precision)
        sink = None
        if streamed:
            sink = NeighbourSink(
                n,
                value_bound=(setup.p - 1) // 2,
                dense=np.empty((n, n)) if keep else None,
                **options,
            )
        result = lcc_exchange(
            runtime, setup, scale.precision, row_numbers, n_jobs=self.n_jobs, sink=sink
        )
        D = result.dense if streamed else result
        runtime.stage(f"server: {self._clusterer_name()} on the decoded distances")
        seed = (
            int(self.random_state)
            if isinstance(self.random_state, numbers.Integral)
            else int(random_state.randint(np.iinfo(np.int32).max))
        )
        public = {
            "clusterer": self.clusterer,
            "clusterer_params": self.clusterer_params,
            "n_clusters": self.n_clusters,
            "seed": seed,
        }
        if streamed:
            est, labels = runtime.server(omnifc_graph_server_step, graph=result, **public)
        else:
            est, labels = runtime.server(omnifc_server_step, D=D, **public)
        runtime.send({c: labels[rows] for c, rows in enumerate(row_numbers)}, tag="labels")
        runtime.run(omnifc_keep_labels, tag="labels")

        self.__dict__.pop("dissimilarity_matrix_", None)
        if D is not None:
            self.dissimilarity_matrix_ = D
        self.clusterer_ = est
        self.precision_ = scale.precision
        self.offset_ = scale.offset.values
        self.n_parties_ = setup.m
        # Public parameters and bounds only: the shares stay with the parties.
        self._public = {"setup": setup, "bounds": scale.bounds}
        self._train_labels = labels
        self._nmf = None
        if self.clusterer == "nmf":
            kind = (self.clusterer_params or {}).get("feature_dissimilarity", "sqeuclidean")
            self._nmf = _label_means(_distance_features(D, kind), labels)

    def _fit_runtime(self, runtime, random_state):
        self.session_ = None
        super()._fit_runtime(runtime, random_state)
        # The parties, with the encoded rows they kept, for predict (None on a
        # deployed federation, whose nodes keep nothing): the user of a
        # simulation played them, and they travel with the model.
        self.session_ = runtime.party_session()
        return self

    # -------------------------------------------------------------- memory
    def _fit_peak_copies(self):
        """Peak number of dense ``n x n`` float64 matrices alive during ``fit``.

        Measured with tracemalloc at n = 2000 (see the tests); ``D`` itself is
        one of them.
        """
        if not isinstance(self.clusterer, str):
            return PEAK_COPIES["custom"]
        if self.clusterer == "spectral" and not _spectral_is_sparse(self.clusterer_params):
            return PEAK_COPIES["dense spectral"]
        return PEAK_COPIES[self.clusterer]

    def _check_fit_memory(self, setup, n, streamed, keep, options):
        """Refuse, before any round, a fit whose peak cannot fit in memory."""
        if not streamed:
            # the peak is the clusterer's, or D while the parties' shares and
            # one exchange of their tiles are alive
            decoding = 1.0 + setup.decoding_bytes(n) / (8.0 * n * n)
            self._check_memory(
                n, n, max(self._fit_peak_copies(), decoding), "the decoded distance matrix D"
            )
            return
        extra = setup.decoding_bytes(n, streamed=True) + neighbour_sink_bytes(n, **options)
        copies = (1.0 if keep else 0.0) + extra / (8.0 * n * n)
        what = "the streamed neighbour graph" + (" and the kept matrix D" if keep else "")
        self._check_memory(n, n, copies, what)

    def _check_memory(self, n_rows, n_cols, n_copies, what):
        check_dense_memory(
            n_rows,
            n_cols,
            n_copies=n_copies,
            what=f"{what} and the {self._clusterer_name()} clusterer's working copies",
            advice=(
                "Fit on fewer rows (e.g. a random subsample and predict the rest), use a "
                "clusterer that streams the distances into a neighbour graph and needs no "
                "n x n matrix (clusterer='spectral' on its default k-nearest-neighbour graph, "
                "or clusterer='dbscan'; keep_dissimilarity=False), or a federated method that "
                "needs none either (e.g. KFed or FeCA)."
            ),
        )

    def _clusterer_name(self):
        return self.clusterer if isinstance(self.clusterer, str) else type(self.clusterer).__name__

    def _assignment(self):
        if self.clusterer == "kmedoids":
            return "medoid"
        if isinstance(self.clusterer, str) and self.clusterer in FEATURE_METHODS:
            return "centroid"
        return "vote"

    # ------------------------------------------------------------- predict
    def predict(self, X):
        """Assign new rows, from their squared distances to the training rows.

        A second protocol with the parties of the fit: a querying party (the
        first data client) Lagrange-encodes the new rows with fresh private
        noise for the same parties, which answer with the encoded distances
        to the shares of the training rows they kept, streamed as in the fit;
        the server decodes them exactly and assigns (rule per clusterer in
        the Notes). The rows never cross a party boundary in plaintext.

        The shares stay with the parties, kept in ``session_`` by an
        in-process fit (and pickled with the model): the server's copy
        (:meth:`server_model`) or a model fitted on Flower raises a
        ``RuntimeError``; its ``labels_`` and the attributes derived from
        ``D`` remain. On Flower the nodes
        query with their own new rows through
        :func:`~skfedclust.flower.predict_on_flower` (fit with
        ``keep_for_predict=True``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            New data.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Cluster of each row; the rule per clusterer is given in the Notes.
        """
        check_is_fitted(self, "precision_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        session = getattr(self, "session_", None)
        if session is None:
            raise RuntimeError(
                "OmniFCClustering.predict needs the parties that fitted this model: they "
                "answer with the encoded distances of the new rows to their shares of the "
                "training rows, which never leave them. An in-process fit keeps them in "
                "session_; this model has none: it is the server's copy (server_model()) or "
                "was fitted on a deployed federation whose nodes keep nothing after the fit. "
                "It still has "
                "labels_, dissimilarity_matrix_, clusterer_ and what derives from D; refit to "
                "predict, or label new rows with fit_predict on all the rows; on Flower, fit "
                "with keep_for_predict=True and call skfedclust.flower.predict_on_flower."
            )
        runtime, D_new = self._query(X)
        return self._assign(runtime, D_new)

    def _assign(self, runtime, D_new):
        """Server step: labels of new rows from their decoded distances to the training rows."""
        return runtime.server(
            omnifc_assign_step,
            D_new=D_new,
            estimator=self.clusterer_,
            train_labels=self._train_labels,
            rule=self._assignment(),
            params=self.clusterer_params,
            nmf=self._nmf,
        )

    def _predict_runtime(self, runtime):
        """The query protocol on a runtime whose querying parties hold new rows (Flower).

        Every data client holding new rows queries in turn: it checks them
        against the public bounds, shares them, the parties answer with the
        encoded distances, the server decodes and assigns them and sends the
        querier its labels, which it writes. Returns the labels by party.
        """
        check_is_fitted(self, "precision_")
        sizes = np.asarray(runtime.client_sizes)
        queriers = [c for c in range(runtime.n_clients) if sizes[c] > 0]
        if not queriers:
            raise ValueError("no party holds new rows to predict")
        setup = self._public["setup"]
        n_train = len(self._train_labels)
        out = {}
        for c in queriers:
            self._check_query_memory(int(sizes[c]), n_train)
            runtime.stage(f"party {c}: its new rows against the public bounds")
            runtime.run(
                omnifc_check_query_rows,
                tag="query bounds",
                clients=[c],
                precision=self.precision_,
                bounds=self._public["bounds"],
                p=setup.p,
            )
            D_new = lcc_query_distances(
                runtime,
                setup,
                self.precision_,
                querier=c,
                parties=list(range(setup.m)),
                n_train=n_train,
                n_jobs=self.n_jobs,
            )
            labels = self._assign(runtime, D_new)
            runtime.send({c: labels}, tag=TAG_PREDICTED)
            runtime.run(omnifc_predicted_labels, tag="predicted labels", clients=[c])
            out[c] = labels
        return out

    def _query_distances(self, X):
        """The decoded squared distances of ``X`` to the training rows (:meth:`_query`)."""
        return self._query(X)[1]

    def _query(self, X):
        """The query protocol with the parties of the fit: its runtime and the decoded ``D``."""
        setup = self._public["setup"]
        n_new, n_train = X.shape[0], len(self._train_labels)
        self._check_query_memory(n_new, n_train)
        self._check_query_bounds(X)
        runtime = InProcessRuntime(
            Federation(X, [np.arange(n_new)]),
            n_jobs=self.n_jobs,
            name=f"{type(self).__name__}.predict",
            session=self.session_,
        )
        return runtime, lcc_query_distances(
            runtime,
            setup,
            self.precision_,
            querier=0,
            parties=list(range(setup.m)),
            n_train=n_train,
            n_jobs=self.n_jobs,
        )

    def _check_query_memory(self, n_new, n_train):
        # the query block twice, the parties' shares and one exchange of tiles
        setup = self._public["setup"]
        operands = setup.decoding_bytes(n_new, n_train) / (8.0 * n_new * n_train)
        self._check_memory(n_new, n_train, 2 + operands, "the query distances")

    def _check_query_bounds(self, X):
        """The querying party checks its rows against the public bounds of the fit."""
        max_abs, max_norm = _data_bounds([X], self.offset_)
        max_abs = max(max_abs, self._public["bounds"][0])
        max_norm = max(max_norm, self._public["bounds"][1])
        if not precision_is_safe(
            self.precision_, max_abs, max_norm, X.shape[1], self._public["setup"].p
        ):
            raise ValueError(
                f"the new rows exceed the public bounds the precision q={self.precision_} "
                "was chosen for: their distances to the training rows could wrap around "
                "modulo p. Scale them like the training data or refit with a lower precision."
            )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


def nearest_neighbour_vote(distances, labels, n_neighbors):
    """Distance-weighted vote of the nearest training rows (weights ``1 / distance``).

    A row at distance 0 from training rows takes the vote of those rows only,
    as in scikit-learn's ``KNeighborsClassifier(weights="distance")``; ties go
    to the smallest label.
    """
    k = min(n_neighbors, distances.shape[1])
    idx = np.argpartition(distances, k - 1, axis=1)[:, :k]
    dist = np.take_along_axis(distances, idx, axis=1)
    classes, codes = np.unique(labels, return_inverse=True)
    exact = dist == 0
    with np.errstate(divide="ignore"):
        weights = np.where(exact.any(axis=1, keepdims=True), exact.astype(float), 1.0 / dist)
    votes = np.zeros((distances.shape[0], len(classes)))
    rows = np.repeat(np.arange(distances.shape[0]), k)
    np.add.at(votes, (rows, codes[idx].ravel()), weights.ravel())
    return classes[np.argmax(votes, axis=1)]


def _label_means(features, labels):
    """Classes and the mean feature row of each, as one product (no per-class copies)."""
    classes, codes = np.unique(labels, return_inverse=True)
    membership = sp.csr_array(
        (np.ones(len(codes)), (codes, np.arange(len(codes)))), shape=(len(classes), len(codes))
    )
    sums = membership @ features
    return classes, sums / np.bincount(codes)[:, None]


def _nearest_center(features, centers):
    d2 = (
        np.einsum("ij,ij->i", features, features)[:, None]
        - 2.0 * features @ centers.T
        + np.einsum("ij,ij->i", centers, centers)[None, :]
    )
    return np.argmin(d2, axis=1)
