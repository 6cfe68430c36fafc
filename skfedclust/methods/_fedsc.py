"""FedSC: federated spectral clustering by kernel factorisation (Qiao, Ding & Fan, NeurIPS 2023).

The clients and the server factorise the Gaussian kernel of all samples as
``K ~ C^T K(Z, Z) C`` over FedAvg-style rounds (stage I): the server broadcasts
a shared dictionary ``Z``, every client solves its private coefficients ``C_p``
in closed form, takes one step on its own copy of ``Z`` and uploads it, and the
server averages the uploads. At the end the clients upload their coefficients
and the server clusters the reconstructed kernel ``C^T K(Z, Z) C`` with
Ng-Jordan-Weiss spectral clustering on its kNN graph (stage II), then sends
every client the labels of its own samples.

The math lives in :mod:`skfedclust.methods._fedsc_core` (client and server updates),
:mod:`skfedclust.clusterers._njw` (the kNN graph of the factorised kernel and
NJW) and :mod:`skfedclust.secure` (sensitivities, exact calibration and accounting of
the Gaussian noise); this module is the protocol: client steps, server steps and the estimator.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np
from scipy import linalg
from sklearn.metrics import pairwise_distances_argmin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..clusterers._njw import knn_kernel_graph, n_neighbors_auto, njw_spectral_clustering
from ..node._accounting import MAX_EPSILON, NEIGHBOURING_RELATIONS, PrivacyAccountant
from ..partition import IIDPartition
from ..secure._dp import (
    data_noise_scale,
    factor_noise_scales,
)
from ..secure._moments import SumChannel
from ._base import BaseFederatedClustering
from ._fedsc_core import (
    MAX_SAMPLES,
    _check_bandwidth,
    aggregate_dictionaries,
    combine_feature_sums,
    gaussian_kernel,
    initial_dictionaries,
    relative_coefficients,
)
from ._fedsc_hyperparameters import (
    combine_n_components,
    n_components_auto,
    pair_sum_bandwidth,
    pooled_bandwidth,
)
from ._fedsc_steps import (
    MAX_NOISE_SCALE,
    TAG_BANDWIDTH,
    TAG_COEF,
    TAG_DICTIONARY,
    TAG_LABELS,
    TAG_RANK,
    TAG_ROWS,
    TAG_STATS,
    TAG_UPLOAD,
    _relative,
    fedsc_coefficients,
    fedsc_distance_total,
    fedsc_prepare,
    fedsc_rank_histogram,
    fedsc_receive_labels,
    fedsc_round,
    fedsc_rows,
    fedsc_setup_sums,
)

__all__ = ["FedSpectralClustering"]

#: Clients simulated from a pooled ``X`` by default: the paper's P = 8.
DEFAULT_N_CLIENTS = 8

#: Fewest neighbours of the default kNN graph. The paper's ceil(ln n) is 5-8 on data
#: sets of a few hundred to a few thousand samples, sparse enough to split a cluster of
#: standardised Iris in some splits (NMI 0.60 +- 0.07 over 5 seeds against 0.66 +- 0.01
#: with 15). 10 measured no better than ceil(ln n), 30 broke the moons and circles; 15
#: had the best mean over six data sets (benchmarks/neighbors_fedsc.py).
#: ``n_neighbors="log"`` keeps the paper's rule.
MIN_NEIGHBORS = 15

#: Headroom on the public bound of a client's feature sums: ``n_p`` rows of
#: ``|x| <= B`` add up to at most ``n_p B``, and a factor 2 covers the
#: rounding of the float sum.
SUM_MARGIN = 2.0

#: Binary orders per range of the histograms behind the public bounds of the
#: secure set-up sums: the server learns less, and a bound costs at most 4
#: bits of the sums' 58, which leaves them exact to float64 rounding.
BOUND_COARSENESS = 4


# ---------------------------------------------------------------- server side
def fedsc_hyperparameters(
    *stats,
    bandwidth,
    bandwidth_scale,
    n_components,
    energy,
    n_samples,
    max_samples,
    seed,
    pair_sums=None,
):
    """Server step: bandwidth (and the pooled dictionary size) from the set-up messages.

    ``bandwidth='federated'`` estimates the pooled rule from the clients'
    within-client pair distances (Eq. 42 without the zero self-distances):
    from ``pair_sums``, the sum of their distance totals and pair counts
    (:func:`~skfedclust.methods._fedsc_core.pair_sum_bandwidth`).
    ``'pooled'`` is the mean pairwise distance of the rows uploaded for the
    pooled shortcut (Eq. 40), a float is itself. With
    ``n_components='pooled'`` the dictionary size is the energy rule (Eq. 43)
    on those rows. Returns ``(bandwidth, n_components or None)``.
    """
    payloads = stats[0].list() if stats else []
    pooled = None
    if bandwidth == "pooled" or n_components == "pooled":
        pooled = np.vstack([p["rows"] for p in payloads])
    if bandwidth == "federated":
        r = pair_sum_bandwidth(*pair_sums, n_samples=n_samples, scale=bandwidth_scale)
    elif bandwidth == "pooled":
        r = pooled_bandwidth(
            pooled, scale=bandwidth_scale, max_samples=max_samples, random_state=seed
        )
        if r <= 0:
            raise ValueError("The bandwidth is 0: all samples are identical. Give it explicitly.")
    else:
        r = float(bandwidth)
    d = None
    if n_components == "pooled":
        d = n_components_auto(
            pooled, bandwidth=r, tol=energy, max_samples=max_samples, random_state=seed
        )
    return r, d


def dictionary_size_of_histogram(counts):
    """Server: the largest rank of a secure sum of one-hot ranks (how many clients per rank)."""
    counts = np.asarray(counts, dtype=np.int64)
    return combine_n_components(np.repeat(np.arange(len(counts)), counts))


def fedsc_initial_dictionary(
    *, n_clients, n_components, n_features, bandwidth, seed, feature_totals=None
):
    """Server step: the first dictionary, the mean of ``n_clients`` random ones.

    Every atom is drawn around the mean of the clients' rows (from
    ``feature_totals``, the sum of their feature sums and row counts; the
    origin when none were sent) with a spread of
    ``bandwidth / sqrt(n_features)`` per coordinate per client slot, so the
    initialisation commutes with translations and scalings of the data (the
    paper draws ``N(0, 1)`` entries around the origin).
    """
    center = None if feature_totals is None else combine_feature_sums([feature_totals])
    slots = initial_dictionaries(
        n_clients,
        n_components,
        n_features,
        center=center,
        scale=bandwidth / np.sqrt(n_features),
        random_state=seed,
    )
    return aggregate_dictionaries(slots)


def fedsc_aggregate(uploads, *, aggregation, with_coef):
    """Server step: the next dictionary, the mean of the uploads (Eq. 11).

    ``aggregation='weighted'`` weights client ``p`` by ``n_p / n`` (the
    clients then sent their counts). In calibrated mode the mean is clipped
    like the clients clip what they receive, so both sides use the same
    atoms. Returns ``(dictionary, coefficients or None, report)``; ``report``
    holds what the clients reported with their uploads: the sum of their
    objectives (``"objective"``, NaN when they sent none) and their relative
    noise scales (``"noise_scale"``, ``"coef_noise_scale"``, one per client).
    """
    payloads = uploads.list()
    counts = [p["count"] for p in payloads] if aggregation == "weighted" else None
    dictionary = aggregate_dictionaries([p["dictionary"] for p in payloads], sample_counts=counts)
    coef = np.hstack([p["coef"] for p in payloads]) if with_coef else None
    report = {
        "objective": (
            float(np.sum([p["objective"] for p in payloads]))
            if all("objective" in p for p in payloads)
            else np.nan
        )
    }
    for key in ("noise_scale", "coef_noise_scale"):
        if all(key in p for p in payloads):
            report[key] = np.array([p[key] for p in payloads], dtype=np.float64)
    return dictionary, coef, report


def fedsc_reported(received, *, key):
    """Server step: the scalar ``key`` every client reported in ``received``, in client order."""
    return np.array([p[key] for p in received.list()], dtype=np.float64)


def fedsc_cluster(
    *coefs,
    coef,
    dictionary,
    bandwidth,
    n_clusters,
    n_neighbors,
    kernel_scaling,
    kmeans_n_init,
    seed,
):
    """Server step: NJW spectral clustering of the reconstructed kernel (stage II).

    ``K_hat = C^T K(Z, Z) C`` over all samples, stacked client by client,
    min-max scaled, reduced to its kNN graph symmetrised with the maximum (in
    tiles, never dense), then Ng-Jordan-Weiss spectral clustering. ``coef``
    (the last round's coefficients of ``final_coef='legacy'``) replaces the
    received ``coefs`` when given. Returns ``(labels, affinity, coef)``.
    """
    if coef is None:
        coef = np.hstack([p["coef"] for p in coefs[0].list()])
    kernel_zz = gaussian_kernel(dictionary, bandwidth=bandwidth)
    affinity = knn_kernel_graph(coef, kernel_zz, n_neighbors=n_neighbors, scaling=kernel_scaling)
    labels = njw_spectral_clustering(affinity, n_clusters, n_init=kmeans_n_init, random_state=seed)
    return labels, affinity, coef


# ---------------------------------------------------------------- estimator
@dataclasses.dataclass
class _NoisePlan:
    """The noise of every release of a FedSC fit, fixed before anything is sent."""

    mode: str
    calibrated_factors: bool = False
    coef_clip: float | None = None
    #: How each release is perturbed, as the client steps read it (None: not at all).
    data: tuple | None = None
    dictionary: tuple | None = None
    coef: tuple | None = None
    #: The calibrated factor scales (``factor_noise_scales``), and the fit's accountant.
    scales: object = None
    accountant: object = None


class FedSpectralClustering(BaseFederatedClustering):
    """FedSC: federated spectral clustering on a factorised Gaussian kernel.

    The clients and the server factorise the Gaussian kernel
    ``k(x, y) = exp(-||x - y||**2 / (2 r**2))`` of all samples as
    ``K ~ C^T K(Z, Z) C`` (Qiao, Ding & Fan 2023): a dictionary ``Z`` of
    ``n_components`` atoms shared by everybody and a private coefficient
    vector per sample. Every round the server broadcasts ``Z``; each client
    solves its coefficients ``C_p = (K(Z, Z) + reg I)^-1 K(Z, X_p)`` in closed
    form, takes one local step on its copy of ``Z`` and uploads it; the server
    averages the uploads. After ``n_rounds`` rounds the clients upload their
    coefficients, and the server runs Ng-Jordan-Weiss spectral clustering on
    the kNN graph of the reconstructed kernel ``C^T K(Z, Z) C``, min-max scaled,
    with ``max(15, ceil(ln n))`` neighbours (the paper's ``ceil(ln n)`` with
    ``n_neighbors="log"``) symmetrised with the maximum. Each
    client gets back the labels of its own samples.

    **What the server learns.** Without noise on the coefficients the server
    recovers every sample exactly whenever ``n_components > n_features``: it
    knows ``Z``, hence ``K(Z, x) = (K(Z, Z) + reg I) c`` and the distance of
    ``x`` to every atom (trilateration). The default mode is therefore *not*
    private. ``privacy='factors'`` perturbs every uploaded dictionary and the
    coefficients, ``privacy='data'`` the samples themselves; with ``epsilon``
    and ``delta`` the noise is calibrated to an ``(epsilon, delta)``
    differential-privacy guarantee for data sets that differ in one replaced
    row (sensitivities proved for the protocol as it runs, every release
    charged to a :class:`~skfedclust.secure.PrivacyAccountant` and composed
    exactly), with ``noise_ratio`` it is relative to the spread of what is
    perturbed, as in the paper's experiments, without a formal guarantee.
    The set-up statistics the server needs only summed over the clients (the
    global mean and the pair-distance totals behind the bandwidth) reach it
    by secure aggregation (``secure_aggregation=True``).

    Read more in the :ref:`User Guide <fedsc>`.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    partition : int, partition specification or None, default=None
        How to simulate clients from a pooled ``X``: an int gives that many IID
        clients, a specification from :mod:`skfedclust.partition` any other
        split, ``None`` eight IID clients (the paper's P = 8). Ignored for a
        list of client arrays or with ``client_ids``.
    n_components : {"auto", "pooled"} or int, default="auto"
        Dictionary size ``d``. ``"auto"``: every client applies the energy rule
        (the smallest ``d`` whose leading eigenvalues of its own kernel matrix
        hold ``energy`` of the total, Eq. 43) and sends the answer; the server
        takes the largest (one integer per client). ``"pooled"``: the same
        rule on the pooled data, the paper's experimental shortcut: the
        clients upload their rows for it, which is not private.
    energy : float, default=0.99
        Energy fraction of the dictionary-size rule, in (0, 1].
    reg : float, default=1e-2
        Ridge penalty ``lambda`` of the coefficients (> 0).
    bandwidth : {"federated", "pooled"} or float, default="federated"
        Kernel bandwidth ``r``. ``"federated"``: every client sends the mean
        distance between its distinct rows and their number of pairs (two
        numbers); the server's pair-weighted mean times ``1 - 1/n`` estimates
        the pooled rule. This is the paper's federated rule (Eq. 42) without
        the clients' zero self-distances, which bias Eq. 42 low by about
        ``1 / n_p`` (5 % on iris over 8 clients; this estimate lands within
        about 1 % of the pooled value there). ``"pooled"``: the mean pairwise
        distance of the pooled rows (Eq. 40), the paper's experimental
        shortcut, for which the clients upload their rows (not private). A
        float is used as is; calibrated factor noise needs one.
    bandwidth_scale : float, default=1.0
        Factor ``c`` applied to a federated or pooled bandwidth.
    n_rounds : int, default=20
        Communication rounds of stage I (the paper's S = 20).
    z_update : {"preconditioned", "gradient"}, default="preconditioned"
        Local dictionary step: the preconditioned step of the authors' code
        (``Z <- M^-1 W^T X_p``), or one gradient step (Eq. 16), which needs
        many more rounds for the same reconstruction.
    learning_rate : "auto" or float, default="auto"
        Step size of the gradient step; ``"auto"`` is ``1 / ||M / r**2||_2``
        (data-dependent). Calibrated factor noise needs a float.
    aggregation : {"mean", "weighted"}, default="mean"
        Server aggregation of the uploaded dictionaries: the plain mean
        (Eq. 11), or weighted by the clients' sample counts, which they then
        send with every upload.
    final_coef : {"refit", "legacy"}, default="refit"
        ``"refit"``: after the last round the server broadcasts the final
        dictionary and the clients solve their coefficients for it (one more
        round). ``"legacy"``: the clients send the coefficients of the last
        round with their last dictionary, as the authors' code uses them
        (one round less; coefficients and dictionary are one step apart).
    kernel_scaling : {"minmax"} or None, default="minmax"
        Min-max scaling of the reconstructed kernel to [0, 1] before the kNN
        graph (the authors' code), or None.
    n_neighbors : {"auto", "log"} or int, default="auto"
        Neighbours of the kNN graph. ``"auto"`` is ``max(15, ceil(ln n))``
        (at most ``n``); ``"log"`` is the paper's ``max(ceil(ln n), 1)``,
        which is 5-8 below a few thousand samples and leaves the graph of
        small data sets sparse enough to split clusters (see the User Guide
        for the measurements).
    kmeans_n_init : int, default=50
        Restarts of the k-means of the spectral embedding.
    privacy : {None, "data", "factors"}, default=None
        What the clients perturb: nothing; their samples, once, before
        anything else (everything afterwards is post-processing); or every
        uploaded dictionary and their coefficients.
    epsilon : float, default=None
        Privacy budget of the calibrated mode (> 0), for the whole fit. The
        releases compose exactly (``mu``-GDP); with ``privacy='factors'``
        half of ``mu**2`` goes to the dictionaries of all rounds, half to the
        coefficients. Valid at every ``epsilon``.
    delta : float, default=None
        The ``delta`` of the calibrated mode, in (0, 1).
    clip_norm : float, default=None
        Public bound ``tau_X`` on the sample norms of calibrated
        ``privacy='data'`` (required there): the clients clip their rows to
        it. Clipping is around the origin: centre the data first. Calibrated
        ``privacy='factors'`` needs none (its sensitivities hold for rows of
        any norm) and refuses it.
    coef_clip : float, default=None
        Calibrated ``privacy='factors'`` only: the clients clip every
        coefficient vector to this norm, in the dictionary step and in the
        release, which bounds the sensitivities by ``coef_clip`` instead of
        ``1 / sqrt(reg)``. The coefficients of Iris have norms of about 1 to
        3; clipping below them biases the reconstruction.
    neighbouring : {"replace-one", "add-remove"}, default="replace-one"
        Which data sets the guarantee calls neighbours: ``"replace-one"``, one
        row of one client replaced by any other (the clients' row counts are
        public: the server receives one coefficient vector per row and sends
        back one label per row, and the counts sent with
        ``aggregation='weighted'`` are the same in both data sets).
        ``"add-remove"`` (one row more or less) cannot be covered, because
        those per-row messages reveal every client's row count, and is
        refused with calibrated noise.
    noise_ratio : float or (float, float), default=None
        Relative noise of the paper's experiments: ``privacy='data'`` adds
        ``N(0, (noise_ratio std(X_p))**2)`` to the rows of client ``p``;
        ``privacy='factors'`` adds ``alpha std(Z_p)`` to every uploaded
        dictionary and ``alpha std(C_p)`` to the coefficients, with one
        ``alpha`` or a pair ``(alpha_dictionary, alpha_coef)``. No formal
        guarantee. Exclusive with ``epsilon``.
    secure_aggregation : bool, default=True
        Send the set-up statistics the server only needs summed over the
        clients (the feature sums and row counts behind the centre of the
        first dictionary, the pair-distance totals and pair counts behind
        ``bandwidth="federated"``) by secure aggregation
        (:class:`~skfedclust.secure.SumChannel`): the server learns the sums,
        who took part and the binary orders of the public bounds of the
        fixed point, not a client's statistics. With ``n_components="auto"``
        the clients' energy ranks go into a secure sum as one-hot vectors:
        the server learns how many clients have each rank, not which. One
        set-up round and two rounds per sum and per bound (eight with both
        statistics and the ranks). ``False``
        sends every client's statistics to the server in one set-up
        exchange (for comparison); the fit is the same up to rounding. The
        pooled shortcut (``"pooled"`` bandwidth or dictionary size) uploads
        the rows, so it sends the statistics in the clear either way.
    n_jobs : int, default=None
        Number of parallel client workers (joblib).
    random_state : int, RandomState instance or None, default=None
        Seeds the partition, the initial dictionary, the clients' noise and
        subsamples, and the spectral clustering.
    verbose : int, default=0
        Print progress per protocol stage (``1``), and every few seconds of a
        long client step how many clients are done; ``2`` adds debug detail.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Cluster of each input row.
    dictionary_ : ndarray of shape (d, n_features)
        Final dictionary ``Z``, one atom per row (``d = n_components_``).
    coef_ : ndarray of shape (n_samples, d)
        Coefficients the server received (noisy under ``privacy='factors'``),
        one row per sample in the server's stacking order: client by client,
        each client's rows in its own order. The server knows the clients'
        sizes, not which input row each client holds, so for clients
        simulated from a pooled ``X`` this is not the input order.
    affinity_matrix_ : scipy.sparse.csr_array of shape (n_samples, n_samples)
        kNN graph of the reconstructed kernel, in the order of ``coef_``.
    stacked_labels_ : ndarray of shape (n_samples,)
        Labels the server computed and sent, in the order of ``coef_``
        (``labels_`` holds the same labels in input order).
    bandwidth_ : float
        Kernel bandwidth ``r``.
    n_components_ : int
        Dictionary size ``d``.
    n_neighbors_ : int
        Neighbours of the kNN graph.
    objective_history_ : ndarray of shape (n_rounds,) or None
        Sum over clients of the local objective ``f_p`` at the start of every
        round, from the one float every client sends with its dictionary.
        None under calibrated factor noise, whose guarantee does not cover
        the objective: the clients then keep it.
    n_iter_ : int
        Rounds of stage I run.
    noise_scales_ : dict
        Standard deviations of the noise: ``{"data": sigma}`` or
        ``{"dictionary": sigma_Z, "coef": sigma_C}``; empty without privacy.
        Calibrated scales are floats the server computes from the public
        budget. Relative scales (``noise_ratio``) follow the spread of private
        data, so every client sends its own with what it perturbed: one per
        client (``"data"``, ``"coef"``) and per round and client
        (``"dictionary"``, shape ``(n_rounds, n_clients)``).
    privacy_spent_ : tuple of (float, float) or None
        ``(epsilon, delta)`` the calibrated mode spent, read from
        ``privacy_accountant_`` (the exact composition of its releases);
        None otherwise.
    privacy_accountant_ : PrivacyAccountant or None
        The accountant the calibrated mode charged, before each release was
        made: its ``releases`` list every noisy release with its sensitivity
        and noise (``"rows"``; or ``"dictionary, round s"`` for every round and
        ``"coefficients"``), ``neighbouring`` the relation. None otherwise.
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
    skfedclust.clusterers.njw_spectral_clustering : stage II on any affinity.
    skfedclust.secure.factor_noise_scales : the calibration of ``privacy='factors'``.
    skfedclust.secure.PrivacyAccountant : exact accounting of Gaussian releases.

    Notes
    -----
    :meth:`predict` computes the coefficients of new points,
    ``c = (K(Z, Z) + reg I)^-1 K(Z, x)``, and returns the label of the training
    sample ``i`` with the largest normalised reconstructed kernel
    ``K_hat(x, i) / sqrt(K_hat(x, x) K_hat(i, i))``: the nearest in the
    kernel's feature space, whose vectors have unit norm. The rule ignores the
    scale of ``c``, so it is computed from kernel values relative to the
    nearest atom and stays exact where the kernel underflows, at any distance
    from the data. A training row is its own best match, so ``predict``
    returns ``labels_`` on the training rows unless the coefficients carry
    noise.

    References
    ----------
    .. [1] D. Qiao, C. Ding and J. Fan, "Federated Spectral Clustering via Secure
       Similarity Reconstruction", NeurIPS 2023.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from skfedclust import FedSpectralClustering
    >>> X = load_iris().data
    >>> est = FedSpectralClustering(n_clusters=3, random_state=0).fit(X)
    >>> est.n_clients_, est.n_components_, est.n_neighbors_
    (8, 7, 15)
    >>> est.communication_["rounds"], est.communication_["setup_rounds"]
    (29, 1)
    """

    #: Its client steps live in their own module.
    _client_step_modules = ("skfedclust.methods._fedsc_steps",)

    _parameter_constraints: dict = {
        **BaseFederatedClustering._parameter_constraints,
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_components": [
            StrOptions({"auto", "pooled"}),
            Interval(numbers.Integral, 1, None, closed="left"),
        ],
        "energy": [Interval(numbers.Real, 0, 1, closed="right")],
        "reg": [Interval(numbers.Real, 0, None, closed="neither")],
        "bandwidth": [
            StrOptions({"federated", "pooled"}),
            Interval(numbers.Real, 0, None, closed="neither"),
        ],
        "bandwidth_scale": [Interval(numbers.Real, 0, None, closed="neither")],
        "n_rounds": [Interval(numbers.Integral, 1, None, closed="left")],
        "z_update": [StrOptions({"preconditioned", "gradient"})],
        "learning_rate": [StrOptions({"auto"}), Interval(numbers.Real, 0, None, closed="neither")],
        "aggregation": [StrOptions({"mean", "weighted"})],
        "final_coef": [StrOptions({"refit", "legacy"})],
        "kernel_scaling": [StrOptions({"minmax"}), None],
        "n_neighbors": [
            StrOptions({"auto", "log"}),
            Interval(numbers.Integral, 1, None, closed="left"),
        ],
        "kmeans_n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "privacy": [StrOptions({"data", "factors"}), None],
        "epsilon": [Interval(numbers.Real, 0, MAX_EPSILON, closed="right"), None],
        "delta": [Interval(numbers.Real, 0, 1, closed="neither"), None],
        "clip_norm": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "coef_clip": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "neighbouring": [StrOptions(set(NEIGHBOURING_RELATIONS))],
        "noise_ratio": [Interval(numbers.Real, 0, None, closed="left"), tuple, None],
        "secure_aggregation": ["boolean"],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        partition=None,
        n_components="auto",
        energy=0.99,
        reg=1e-2,
        bandwidth="federated",
        bandwidth_scale=1.0,
        n_rounds=20,
        z_update="preconditioned",
        learning_rate="auto",
        aggregation="mean",
        final_coef="refit",
        kernel_scaling="minmax",
        n_neighbors="auto",
        kmeans_n_init=50,
        privacy=None,
        epsilon=None,
        delta=None,
        clip_norm=None,
        coef_clip=None,
        neighbouring="replace-one",
        noise_ratio=None,
        secure_aggregation=True,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.partition = partition
        self.n_components = n_components
        self.energy = energy
        self.reg = reg
        self.bandwidth = bandwidth
        self.bandwidth_scale = bandwidth_scale
        self.n_rounds = n_rounds
        self.z_update = z_update
        self.learning_rate = learning_rate
        self.aggregation = aggregation
        self.final_coef = final_coef
        self.kernel_scaling = kernel_scaling
        self.n_neighbors = n_neighbors
        self.kmeans_n_init = kmeans_n_init
        self.privacy = privacy
        self.epsilon = epsilon
        self.delta = delta
        self.clip_norm = clip_norm
        self.coef_clip = coef_clip
        self.neighbouring = neighbouring
        self.noise_ratio = noise_ratio
        self.secure_aggregation = secure_aggregation
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _default_partition(self):
        return IIDPartition(DEFAULT_N_CLIENTS)

    # ------------------------------------------------------------ privacy plan
    def _noise_ratios(self):
        ratio = self.noise_ratio
        if isinstance(ratio, tuple):
            if self.privacy != "factors" or len(ratio) != 2:
                raise ValueError(
                    "noise_ratio is a float, or with privacy='factors' a pair "
                    f"(alpha_dictionary, alpha_coef); got {ratio!r}."
                )
            ratios = tuple(float(a) for a in ratio)
            if not all(np.isfinite(a) and a >= 0 for a in ratios):
                raise ValueError(f"noise_ratio values must be finite and >= 0, got {ratio!r}.")
            return ratios
        return float(ratio), float(ratio)

    def _privacy_plan(self):
        """Check the privacy parameters; return the mode: None, 'ratio' or 'calibrated'."""
        calibrated = self.epsilon is not None or self.delta is not None
        if self.privacy is None:
            if (
                calibrated
                or self.noise_ratio is not None
                or self.clip_norm is not None
                or self.coef_clip is not None
            ):
                raise ValueError(
                    "epsilon, delta, clip_norm, coef_clip and noise_ratio need privacy='data' "
                    "or privacy='factors'."
                )
            return None
        if self.coef_clip is not None and (self.privacy != "factors" or not calibrated):
            raise ValueError(
                "coef_clip bounds the sensitivities of calibrated factor noise: it needs "
                "privacy='factors' with epsilon and delta."
            )
        if calibrated and self.noise_ratio is not None:
            raise ValueError(
                "Give either epsilon and delta (calibrated differential privacy) or "
                "noise_ratio (the paper's relative noise, no formal guarantee), not both."
            )
        if self.noise_ratio is not None:
            if self.clip_norm is not None:
                raise ValueError(
                    "clip_norm bounds the sensitivity of calibrated noise (epsilon, delta); "
                    "relative noise (noise_ratio) does not clip."
                )
            self._noise_ratios()
            return "ratio"
        if not calibrated:
            raise ValueError(
                f"privacy={self.privacy!r} needs epsilon and delta (calibrated noise) or "
                "noise_ratio (relative noise)."
            )
        if self.epsilon is None or self.delta is None:
            raise ValueError("Calibrated noise needs both epsilon and delta.")
        if self.neighbouring != "replace-one":
            raise ValueError(
                f"neighbouring={self.neighbouring!r} cannot be covered: every client "
                "uploads one coefficient vector per row and receives one label per row, so "
                "the server learns each client's row count, which differs between data "
                "sets that differ by one added or removed row. FedSpectralClustering's "
                "guarantee is for neighbouring='replace-one' (one row replaced; the row "
                "counts are public)."
            )
        if self.clip_norm is None and self.privacy == "data":
            raise ValueError(
                "Calibrated data noise needs clip_norm, a public bound on the norm of every "
                "sample: the clients clip their rows to it, which bounds the sensitivity "
                "(centre the data first, e.g. with FederatedStandardScaler)."
            )
        if self.clip_norm is not None and self.privacy == "factors":
            raise ValueError(
                "Calibrated factor noise does not clip the rows: its sensitivities hold for "
                "rows of any norm (they depend on reg, bandwidth, learning_rate and "
                "coef_clip). Leave clip_norm=None."
            )
        if self.privacy == "factors":
            if isinstance(self.bandwidth, str):
                raise ValueError(
                    "Calibrated factor noise needs a data-independent bandwidth (a float): "
                    f"bandwidth={self.bandwidth!r} is computed from the private data, which "
                    "the guarantee does not cover."
                )
            if isinstance(self.n_components, str):
                raise ValueError(
                    "Calibrated factor noise needs a data-independent dictionary size (an "
                    f"int): n_components={self.n_components!r} is computed from the private "
                    "data, and the noise scales with it."
                )
            if self.z_update != "gradient" or isinstance(self.learning_rate, str):
                raise ValueError(
                    "Calibrated factor noise covers one gradient step of a fixed size per "
                    "round: use z_update='gradient' with a float learning_rate."
                )
        return "calibrated"

    def _check_noise_scale(self, sigma, what):
        """Refuse a calibrated noise scale whose perturbed values float64 cannot square."""
        if sigma <= MAX_NOISE_SCALE:
            return
        hint = "a smaller clip_norm" if self.privacy == "data" else "a larger reg or a coef_clip"
        raise ValueError(
            f"epsilon={self.epsilon:g} and delta={self.delta:g} call for noise of standard "
            f"deviation {sigma:.3g} on {what}, above {MAX_NOISE_SCALE:.0e}: float64 "
            "arithmetic on the perturbed values (squared distances, kernels) would overflow. "
            f"Use a larger epsilon or delta, or {hint}."
        )

    def _accountant(self):
        return PrivacyAccountant(
            epsilon=self.epsilon, delta=self.delta, neighbouring=self.neighbouring
        )

    @staticmethod
    def _charge_coef(accountant, scales):
        # One coefficient vector per row: a replaced row changes its own vector only.
        accountant.charge("coefficients", sensitivity=scales.coef_sensitivity, sigma=scales.coef)

    # ------------------------------------------------------------ protocol
    def _run_protocol(self, runtime, random_state):
        n_samples = int(np.sum(runtime.client_sizes))
        self._check_sizes(n_samples)
        seed_init, seed_server, seed_pooled = random_state.randint(np.iinfo(np.int32).max, size=3)
        # Drawn in both modes, so that secure and clear fits share every other draw.
        seed_sums = int(random_state.randint(np.iinfo(np.int32).max))
        noise = self._plan_noise()
        self.privacy_accountant_ = noise.accountant
        r, public_r, d, stats, feature_totals = self._set_up(
            runtime, noise, n_samples, seed_pooled, seed_sums
        )
        runtime.stage(f"server step: initial dictionary of {d} atoms")
        dictionary = runtime.server(
            fedsc_initial_dictionary,
            feature_totals=feature_totals,
            n_clients=runtime.n_clients,
            n_components=d,
            n_features=runtime.n_features,
            bandwidth=r,
            seed=seed_init,
        )
        dictionary, coef, coefs, report = self._factorise(runtime, noise, dictionary, public_r)
        self._cluster_and_label(runtime, dictionary, coef, coefs, r, n_samples, seed_server)
        self.objective_history_ = (
            np.asarray(report["objectives"]) if not noise.calibrated_factors else None
        )
        self.n_iter_ = self.n_rounds
        self.privacy_spent_ = None if noise.accountant is None else noise.accountant.spent()
        if noise.mode == "ratio":
            self._record_relative_noise(runtime, noise, stats, report)
        self._directions = _unit_rows(self._embed(self.coef_))

    def _check_sizes(self, n_samples):
        if isinstance(self.n_components, numbers.Integral) and self.n_components > n_samples:
            raise ValueError(
                f"n_components={self.n_components} exceeds the number of samples "
                f"({n_samples}): the dictionary cannot have more atoms than samples."
            )
        if isinstance(self.n_neighbors, numbers.Integral) and self.n_neighbors > n_samples:
            raise ValueError(
                f"n_neighbors={self.n_neighbors} exceeds the number of samples ({n_samples})."
            )
        if not isinstance(self.bandwidth, str):
            _check_bandwidth(self.bandwidth)

    def _plan_noise(self):
        """The noise of every release, fixed before anything is sent."""
        mode = self._privacy_plan()
        noise = _NoisePlan(mode=mode)
        noise.calibrated_factors = mode == "calibrated" and self.privacy == "factors"
        noise.coef_clip = self.coef_clip if noise.calibrated_factors else None
        self.noise_scales_ = {}
        if mode == "ratio":
            alpha_z, alpha_c = self._noise_ratios()
            if self.privacy == "data":
                noise.data = ("ratio", alpha_z)
            else:
                noise.dictionary = ("ratio", alpha_z) if alpha_z > 0 else None
                noise.coef = ("ratio", alpha_c) if alpha_c > 0 else None
        elif mode == "calibrated" and self.privacy == "data":
            sigma = data_noise_scale(self.epsilon, self.delta, self.clip_norm)
            self._check_noise_scale(sigma, "the rows")
            noise.data = ("calibrated", self.clip_norm, sigma)
            self.noise_scales_ = {"data": sigma}
            noise.accountant = self._accountant()
            # A replaced row moves the perturbed rows by at most 2 clip_norm.
            noise.accountant.charge("rows", sensitivity=2.0 * self.clip_norm, sigma=sigma)
        elif noise.calibrated_factors:
            scales = factor_noise_scales(
                self.epsilon,
                self.delta,
                coef_clip=self.coef_clip,
                bandwidth=self.bandwidth,
                n_components=self.n_components,
                lam=self.reg,
                n_rounds=self.n_rounds,
                learning_rate=self.learning_rate,
            )
            self._check_noise_scale(scales.dictionary, "every dictionary")
            self._check_noise_scale(scales.coef, "the coefficients")
            noise.dictionary = ("calibrated", None, scales.dictionary)
            # ||c|| <= 1 / sqrt(reg) always holds; coef_clip (if any) bounds it further.
            noise.coef = ("calibrated", noise.coef_clip, scales.coef)
            noise.scales = scales
            self.noise_scales_ = {"dictionary": scales.dictionary, "coef": scales.coef}
            noise.accountant = self._accountant()
        return noise

    def _set_up(self, runtime, noise, n_samples, seed_pooled, seed_sums):
        """Bandwidth and dictionary size, from the set-up messages and sums.

        Returns ``(bandwidth, public bandwidth or None, dictionary size, set-up
        uploads or None, summed feature totals or None)``, the totals being the
        centre of the first dictionary.
        """
        pooled = self.bandwidth == "pooled" or self.n_components == "pooled"
        send_sums = not noise.calibrated_factors
        send_distance = self.bandwidth == "federated"
        # The server needs only the sums of these statistics over the clients:
        # one sum channel (one key agreement) carries them, secure by default.
        # The pooled shortcut uploads the rows, from which it has them anyway.
        channel = SumChannel(runtime, secure=self.secure_aggregation and not pooled, seed=seed_sums)
        max_samples = MAX_SAMPLES
        stats = None
        if pooled or noise.data is not None:
            runtime.stage("client step: set-up" + (" (pooled rows)" if pooled else ", noisy rows"))
            stats = runtime.run(
                fedsc_prepare,
                tag=TAG_ROWS if pooled else TAG_STATS,
                setup=True,
                data_noise=noise.data,
                send_rows=pooled,
            )
            if not len(stats):
                stats = None
        feature_totals = pair_sums = None
        if send_sums or send_distance:
            feature_totals, pair_sums = self._setup_sums(
                runtime, channel, send_sums, send_distance, max_samples
            )
        runtime.stage("server step: bandwidth and dictionary size")
        if isinstance(self.bandwidth, str) or self.n_components == "pooled":
            r, d = runtime.server(
                fedsc_hyperparameters,
                *((stats,) if stats is not None else ()),
                pair_sums=pair_sums,
                bandwidth=self.bandwidth,
                bandwidth_scale=self.bandwidth_scale,
                n_components=self.n_components,
                energy=self.energy,
                n_samples=n_samples,
                max_samples=max_samples,
                seed=seed_pooled,
            )
        else:
            r, d = float(self.bandwidth), None
        # A bandwidth the server computed reaches the clients as a message; a
        # given one is a public constant.
        public_r = None
        if isinstance(self.bandwidth, str):
            runtime.broadcast(r, tag=TAG_BANDWIDTH)
        else:
            public_r = r
        if self.n_components == "auto":
            runtime.stage("sum: how many clients have each local dictionary size")
            length = int(min(max_samples, np.max(runtime.client_sizes))) + 1
            counts, _ = channel.sum(
                fedsc_rank_histogram,
                tag=TAG_RANK,
                bounds=[None],
                bandwidth=public_r,
                energy=self.energy,
                max_samples=max_samples,
                length=length,
            )
            d = dictionary_size_of_histogram(counts)
        elif d is None:
            d = int(self.n_components)
        # A bandwidth computed from (degenerate) data must be usable too.
        self.bandwidth_, self.n_components_ = _check_bandwidth(r), int(d)
        return r, public_r, int(d), stats, feature_totals

    def _factorise(self, runtime, noise, dictionary, public_r):
        """Stage I, the federated factorisation: ``n_rounds`` rounds, then the coefficients.

        Returns ``(dictionary, coef or None, coefficient uploads or None,
        report)``, the report holding the objectives and the relative noise's
        scales.
        """
        weighted = self.aggregation == "weighted"
        legacy = self.final_coef == "legacy"
        accountant, scales = noise.accountant, noise.scales
        # The objective is a function of the clean rows: calibrated factor
        # noise does not cover it, so the clients keep it to themselves.
        send_objective = not noise.calibrated_factors
        coef = None
        report = {"objectives": [], "dictionary_scales": [], "coef_scales": None}
        for s in range(self.n_rounds):
            runtime.broadcast(dictionary, tag=TAG_DICTIONARY)
            last = s == self.n_rounds - 1
            if noise.calibrated_factors:
                # Charged before the release: a budget the accountant refuses stops the fit
                # before anything leaves.
                accountant.charge(
                    f"dictionary, round {s + 1}",
                    sensitivity=scales.dictionary_sensitivity,
                    sigma=scales.dictionary,
                )
                if legacy and last:
                    self._charge_coef(accountant, scales)
            runtime.stage(f"client step: round {s + 1}/{self.n_rounds}, C-step and Z-step")
            uploads = runtime.run(
                fedsc_round,
                tag=TAG_UPLOAD + (" and coefficients" if legacy and last else ""),
                check_underflow=s == 0 and not noise.calibrated_factors,
                bandwidth=public_r,
                reg=self.reg,
                z_update=self.z_update,
                learning_rate=self.learning_rate,
                coef_clip=noise.coef_clip,
                dictionary_noise=noise.dictionary,
                send_count=weighted,
                send_objective=send_objective,
                send_coef=legacy and last,
                coef_noise=noise.coef,
            )
            runtime.stage(f"server step: round {s + 1}, mean of the dictionaries")
            dictionary, coef, round_report = runtime.server(
                fedsc_aggregate,
                uploads,
                aggregation=self.aggregation,
                with_coef=legacy and last,
            )
            report["objectives"].append(round_report["objective"])
            if "noise_scale" in round_report:
                report["dictionary_scales"].append(round_report["noise_scale"])
            report["coef_scales"] = round_report.get("coef_noise_scale")
        coefs = None
        if not legacy:
            runtime.broadcast(dictionary, tag=TAG_DICTIONARY)
            if noise.calibrated_factors:
                self._charge_coef(accountant, scales)
            runtime.stage("client step: coefficients for the final dictionary")
            coefs = runtime.run(
                fedsc_coefficients, tag=TAG_COEF, reg=self.reg, coef_noise=noise.coef
            )
            if _relative(noise.coef):
                report["coef_scales"] = runtime.server(fedsc_reported, coefs, key="noise_scale")
        return dictionary, coef, coefs, report

    def _cluster_and_label(self, runtime, dictionary, coef, coefs, r, n_samples, seed):
        """Stage II on the server: the kNN graph of the reconstructed kernel, NJW, the labels."""
        self.n_neighbors_ = self._n_neighbors(n_samples)
        runtime.stage("server step: kNN graph of the reconstructed kernel and NJW clustering")
        labels, affinity, coef = runtime.server(
            fedsc_cluster,
            *((coefs,) if coefs is not None else ()),
            coef=coef,
            dictionary=dictionary,
            bandwidth=r,
            n_clusters=self.n_clusters,
            n_neighbors=self.n_neighbors_,
            kernel_scaling=self.kernel_scaling,
            kmeans_n_init=self.kmeans_n_init,
            seed=seed,
        )
        # k-means labels are int32: 4 bytes per sample on the wire. The server
        # stacked the clients' coefficients in client order, so client c's
        # labels are the slice the public client sizes give.
        labels = labels.astype(np.int32, copy=False)
        offsets = np.concatenate([[0], np.cumsum(runtime.client_sizes)])
        runtime.send(
            {c: labels[offsets[c] : offsets[c + 1]] for c in range(runtime.n_clients)},
            tag=TAG_LABELS,
        )
        runtime.stage("client step: labels")
        runtime.run(fedsc_receive_labels, tag="keep labels")
        # What the server holds: what it received, sent or computed, with the
        # samples in its stacking order (client by client).
        self.dictionary_ = dictionary
        self.coef_ = coef.T
        self.affinity_matrix_ = affinity.tocsr()
        self.stacked_labels_ = labels

    def _record_relative_noise(self, runtime, noise, stats, report):
        """The scales of relative noise, which only the clients knew and reported."""
        if self.privacy == "data":
            self.noise_scales_ = {"data": runtime.server(fedsc_reported, stats, key="noise_scale")}
            return
        # A zero ratio adds no noise, and its scale is 0 (public).
        P = runtime.n_clients
        self.noise_scales_ = {
            "dictionary": (
                np.array(report["dictionary_scales"])
                if noise.dictionary is not None
                else np.zeros((self.n_rounds, P))
            ),
            "coef": report["coef_scales"] if noise.coef is not None else np.zeros(P),
        }

    @staticmethod
    def _setup_sums(runtime, channel, send_sums, send_distance, max_samples):
        """The set-up statistics summed over the clients, through the fit's sum channel.

        With secure sums, a public bound per statistic first (the power of two
        above every client's largest value, from a secure sum of one-hot
        histograms of binary orders), then one secure sum of everything. Returns
        ``(feature_totals, pair_sums)``: ``(sums, row count)`` and
        ``(distance total, pair count)``, or None where not asked.
        """
        largest = float(np.max(runtime.client_sizes))
        bounds = []
        if send_sums:
            if channel.secure:
                runtime.stage("secure sums: a public bound on the rows")
            rows = channel.bound(fedsc_rows, tag="bound on the rows", coarseness=BOUND_COARSENESS)
            bounds += [None if rows is None else SUM_MARGIN * largest * rows, None]
        if send_distance:
            if channel.secure:
                runtime.stage("secure sums: a public bound on the pair-distance totals")
            distances = channel.bound(
                fedsc_distance_total,
                tag="bound on the pair distances",
                coarseness=BOUND_COARSENESS,
                max_samples=max_samples,
            )
            bounds += [distances, None]
        runtime.stage("sums: the set-up statistics")
        totals, _ = channel.sum(
            fedsc_setup_sums,
            tag="set-up statistics",
            bounds=bounds,
            send_sums=send_sums,
            send_distance=send_distance,
        )
        feature_totals = (totals[0], int(totals[1][0])) if send_sums else None
        pair_sums = (float(totals[-2][0]), int(totals[-1][0])) if send_distance else None
        return feature_totals, pair_sums

    def _n_neighbors(self, n_samples):
        if self.n_neighbors == "log":
            return n_neighbors_auto(n_samples)
        if self.n_neighbors == "auto":
            return min(n_samples, max(MIN_NEIGHBORS, n_neighbors_auto(n_samples)))
        return int(self.n_neighbors)

    # ------------------------------------------------------------ predict
    def _embed(self, coef_rows):
        """Rows ``u`` with ``u_i . u_j = K_hat(i, j)``: ``C^T L`` for ``K(Z, Z) = L L^T``."""
        kernel_zz = gaussian_kernel(self.dictionary_, bandwidth=self.bandwidth_)
        values, vectors = linalg.eigh(kernel_zz)
        return coef_rows @ (vectors * np.sqrt(np.maximum(values, 0.0)))

    def predict(self, X):
        """Label new samples by the most similar training sample in the reconstructed kernel.

        The coefficients of every new point are
        ``c = (K(Z, Z) + reg I)^-1 K(Z, x)``; its label is the one the server
        gave the training sample ``i`` with the largest normalised
        reconstructed kernel
        ``K_hat(x, i) / sqrt(K_hat(x, x) K_hat(i, i))`` (ties: the first in
        the server's order). For exact features (``||phi(x)|| = 1``) this is
        the nearest training sample in the kernel's feature space. The rule
        does not depend on the scale of ``c``, so it is computed from kernel
        values relative to the nearest atom, which stay exact where the
        kernel itself underflows: a point far from the data gets the label
        of the training samples closest to the atoms it is nearest to, at any
        distance. On the training rows this returns their labels unless the
        coefficients carry noise (``privacy='factors'``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            New data.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Cluster of each sample.
        """
        check_is_fitted(self, "dictionary_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self.stacked_labels_[self._nearest_training_samples(X)]

    def _nearest_training_samples(self, X):
        """Row of ``coef_`` whose reconstructed feature vector has the direction
        nearest to the one of each row of ``X``."""
        coef = relative_coefficients(X, self.dictionary_, bandwidth=self.bandwidth_, lam=self.reg)
        return pairwise_distances_argmin(_unit_rows(self._embed(coef.T)), self._directions)


def _unit_rows(U):
    """Rows scaled to unit length; zero rows stay zero."""
    norms = np.linalg.norm(U, axis=1, keepdims=True)
    return U / np.where(norms > 0, norms, 1.0)
