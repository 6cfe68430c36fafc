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
from joblib import parallel_config
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..clusterers import squared_distances
from ..federation import Federation, InProcessRuntime
from ..federation._inputs import float32_input, input_form
from ..node._accounting import MAX_EPSILON
from ..node._policy import DEFAULT_MIN_SUM_PARTICIPANTS
from ..secure import SumChannel
from ..secure._sampling import (
    TAG_COMMITS,
    TAG_REVEALS,
    TAG_SAMPLE,
    public_sample,
    sampling_commit_step,
    sampling_reveal_step,
    sampling_seed,
)
from ._base import BaseFederatedClustering, CentroidPredictMixin
from ._fedkmeans_blind import coordinator_mode, run_blind_fit
from ._fedkmeans_dp import _MARGIN, private_fit, sphere_packing_centers
from ._fedkmeans_relocation import donor_clusters, relocate_empty
from ._fedkmeans_steps import (
    TAG_CENTERS,
    TAG_FARTHEST,
    TAG_FARTHEST_PICK,
    TAG_RELOCATE,
    fedkmeans_callable_local_centers,
    fedkmeans_centered_moments,
    fedkmeans_cluster_inertia,
    fedkmeans_column_sums,
    fedkmeans_deviation_extremes,
    fedkmeans_far_rows,
    fedkmeans_farthest_rows,
    fedkmeans_final_labels,
    fedkmeans_inertia,
    fedkmeans_largest_distances,
    fedkmeans_lloyd_statistics,
    fedkmeans_nearest_distances,
    fedkmeans_row_extremes,
    fedkmeans_score_inertia,
)
from ._fedkmeans_verified import run_verified_fit
from ._kfed import kfed_local_centers, kfed_server_step, kfed_server_weighted_kmeans

#: Restarts of the server's weighted k-means++ on the local centers
#: (``init="k-fed-weighted"``): server work only, no message.
SERVER_RESTARTS = 10

__all__ = ["FederatedKMeans"]


class FederatedKMeansError(RuntimeError):
    """A federated k-means fit that cannot go on (too few clients answered)."""


def _farthest_picks(distances, *, n_empty):
    """Server step: how many of the ``n_empty`` farthest rows each client holds.

    Ties go to the later client, as within a client to the later row.
    """
    candidates = [
        (float(value), client, -rank)
        for client, values in zip(list(distances), distances.list())
        for rank, value in enumerate(np.atleast_1d(values))
    ]
    candidates.sort(reverse=True)
    picks = {}
    if not candidates or candidates[0][0] == 0:
        # Every row sits on its center: fewer distinct rows than clusters.
        # Relocating is pointless, and scikit-learn does not (its fit then
        # stops, as no center moved).
        return picks
    for _, client, _ in candidates[:n_empty]:
        picks[client] = picks.get(client, 0) + 1
    return picks


def _move_to_farthest_rows(rows, *, centers, sums, counts, empty):
    """Server step: each empty cluster becomes a far row, which leaves its cluster (as KMeans).

    Returns the new centers and which clusters hold rows. A cluster still
    empty (no row to relocate, or it gave its only row away) takes the center
    of the largest cluster, as scikit-learn's Lloyd places it.
    """
    sums, counts = np.array(sums, dtype=np.float64), np.array(counts, dtype=np.int64)
    picked = [
        (float(np.sum((row - centers[label]) ** 2)), client, -i, row, int(label))
        for client, (client_rows, labels) in zip(list(rows), rows.list())
        for i, (row, label) in enumerate(zip(client_rows, labels))
    ]
    picked.sort(key=lambda p: p[:3], reverse=True)
    new = np.array(centers, dtype=np.float64, copy=True)
    relocated = []
    for e, (_, _, _, row, old) in zip(empty, picked):
        sums[old] -= row - centers[old]
        counts[old] -= 1
        new[e] = row
        relocated.append(e)
    # The relocated clusters hold no counted row yet: only the others are means again.
    filled = counts > 0
    new[filled] = centers[filled] + sums[filled] / counts[filled, None]
    # The relocated row counts in its new cluster, as its weight does in scikit-learn's.
    counts[relocated] = 1
    filled = counts > 0
    if not filled.all():
        new[~filled] = new[np.argmax(counts)]
    return new, filled


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


def _warn_if_fewer_clusters(n_filled, n_clusters):
    """scikit-learn's warning when the rows fill fewer clusters than asked."""
    if n_filled < n_clusters:
        warnings.warn(
            f"Number of distinct clusters ({n_filled}) found smaller than n_clusters "
            f"({n_clusters}). Possibly due to duplicate points in the clients' rows.",
            ConvergenceWarning,
            stacklevel=4,
        )


def feature_radius(centers, mean, spread, radius):
    """Per feature, a bound on ``|x_f - c_f|`` for every row ``x`` and its nearest center ``c``.

    ``|x_f - c_f| <= spread_f + |mean_f - c_f|`` for any center, and no
    more than the distance ``radius`` to the nearest center: the smaller of
    the two, so that the per-cluster sums of a narrow feature get a bound of
    their own scale.
    """
    gaps = np.asarray(spread) + np.abs(np.asarray(centers) - np.asarray(mean)).max(axis=0)
    return np.minimum(gaps, radius)


class ExactIteration:
    """One Lloyd iteration on exact sums (in the clear or secure): per-cluster statistics, then
    new centers, empty clusters relocated.

    The iteration of :meth:`FederatedKMeans._lloyd` without differential privacy.
    With agreed bounds (``spread``), each sum gets public per-feature bounds
    from the centers: every row lies within ``spread`` of ``rough``.
    """

    tag = "cluster statistics"
    what = "per-cluster statistics"

    def __init__(self, model, runtime, adder, active, rough, spread):
        self.model, self.runtime, self.adder = model, runtime, adder
        self.active, self.rough, self.spread = list(active), rough, spread
        self.max_iter = model.max_iter
        self._bounds = None

    def statistics(self, centers, participants):
        self._bounds = self._inertia_bound = None
        if self.spread is not None:
            n_c = self.model._max_size(self.runtime, participants)
            radius = nearest_radius(centers, self.rough, self.spread)
            per_feature = feature_radius(centers, self.rough, self.spread, radius)
            self._bounds = [_MARGIN * n_c * per_feature, None, None]
            self._inertia_bound = _MARGIN * n_c * radius**2
        return self.adder.sum(
            fedkmeans_lloyd_statistics,
            tag=self.tag,
            bounds=self._bounds,
            clients=participants,
        )

    def new_centers(self, centers, total, survivors):
        """New centers, and whether no row changed cluster (then Lloyd has converged)."""
        sums, counts, changed = total
        filled = counts > 0
        new = centers.copy()
        new[filled] = centers[filled] + sums[filled] / counts[filled, None]
        everyone = survivors == self.active
        if everyone and not filled.all():
            new, filled = self.model._relocate(
                self.runtime,
                self.adder,
                centers,
                new,
                sums,
                counts,
                survivors,
                self._bounds,
                self._inertia_bound,
            )
        self.model._n_filled = int(filled.sum())
        return new, bool(everyone and int(changed[0]) == 0)

    def finish(self):
        pass


# --------------------------------------------------------------------------- #
# Estimator
# --------------------------------------------------------------------------- #
class FederatedKMeans(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, CentroidPredictMixin, BaseFederatedClustering
):
    """Federated k-means: Lloyd's algorithm on securely aggregated cluster sums.

    Every iteration the server sends the centers; each client assigns its
    rows to the nearest center and contributes, per cluster, the sum of the
    rows' deviations from the center and their number; a secure sum
    (:class:`~skfedclust.secure.SecureAggregator`) gives the server the totals
    and nothing else, from which it computes the new centers. Given the same
    initial centers the iterations are those of :class:`sklearn.cluster.KMeans`
    (``algorithm="lloyd"``) on the pooled rows, with the same stopping rule.

    Read more in the :ref:`User Guide <fedkmeans>`.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    init : {"auto", "k-fed", "random", "sphere-packing"}, callable or array-like of \
            shape (n_clusters, n_features), default="auto"
        Initial centers. ``"auto"``: ``"k-fed-weighted"`` in the clear,
        ``"sphere-packing"`` under ``privacy="dp"`` (the starts that measured
        best, see ``benchmarks/results/fedkmeans_defaults.md`` and
        ``benchmarks/results/dp_fedkmeans.md``). ``"k-fed-weighted"``: every
        client uploads the centers of a local k-means and their cluster sizes;
        the server runs k-means++ with 10 restarts on them, each center
        weighted by its size. ``"k-fed"``: the one-shot k-FED centers (the
        local centers without sizes, clustered by k-FED's server step: a seed
        client's centers, farthest points, Lloyd; see
        :class:`~skfedclust.KFed`); its restarts differ in the seed client,
        so ``n_init`` gives at most one start per client. ``"random"``: centers drawn from
        a Gaussian with the securely aggregated mean and per-feature variance
        of the pooled rows (not scikit-learn's ``"random"``, which picks rows);
        under ``privacy="dp"`` from noisy moments, at a share of the budget.
        ``"sphere-packing"``: centers spread in a box without reading a row
        (Su et al., 2016, as diffprivlib's ``KMeans``); the box is ``bounds``
        under ``privacy="dp"`` (no privacy cost: the start to use there),
        else two standard deviations around the pooled mean. An array: these
        centers. A callable: called as scikit-learn's ``KMeans`` calls it,
        ``init(X, n_clusters, random_state)``, on each client's own rows
        (in a simulation), the local centers (with their sizes on the
        client's rows) aggregated as ``"k-fed-weighted"``'s. Under
        ``privacy="dp"`` a cluster whose noisy count is lost in
        the noise is moved next to the largest cluster's center (a split,
        computed from released values only), with a ``ConvergenceWarning`` if
        that happens in the last iteration.
    n_init : int, default=1
        Restarts (server seeds of the weighted k-means++, k-FED seed
        clients, Gaussian draws or packings), each a federated Lloyd run from
        its start; the fit of lowest federated inertia is kept (under ``privacy="dp"``
        each restart takes its share of the budget). An array ``init`` runs once.
    max_iter : int, default=300
        Lloyd iterations at most.
    tol : float, default=1e-4
        Stop when the squared center shift of an iteration is at most ``tol``
        times the mean per-feature variance of the pooled rows (from secure
        moments), as scikit-learn does; Lloyd also stops when no row changes
        cluster.
    empty_clusters : {"far-rows", "farthest-row"}, default="far-rows"
        Where an empty cluster goes (without DP). ``"far-rows"``: to the mean
        of the far rows of the cluster with the largest inertia, through a
        secure sum (no row leaves a client; the Notes). ``"farthest-row"``:
        scikit-learn's rule, which moves it to the row farthest from its
        center: every client sends its largest distances and the client of
        the farthest row sends that row, so the result equals
        :class:`~sklearn.cluster.KMeans`' from the same start. A deployed
        node's default policy refuses to send the row (``refuse-raw-rows``).
    coordinator : {"auto", "blind", "verified", "sees-totals"}, default="auto"
        Who runs Lloyd's server step. ``"blind"``: the nodes run it
        themselves; every iteration each node sends its statistics under
        pairwise masks to every other node (sealed peer messages), the nodes
        add them and move the centers alike, and the coordinator receives
        only the result (the centers, the cluster sizes, ``n_iter_`` and the
        inertia) and one status byte per round: it can neither steer the
        centers nor see an iteration's totals. Two set-up rounds, then one
        round per iteration (two more in an iteration that leaves a cluster
        empty) and one for the result; the same centers as
        ``"sees-totals"`` from the same start. Supports ``init="auto"`` (the
        weighted k-FED start, computed on the nodes from local centers they
        share with each other, never with the coordinator, with a seed from
        their committed nonces) or an array, without ``privacy``, sampling,
        clear sums or the farthest-row relocation. ``"verified"``: the nodes
        run it too, with the same options, but each uploads its masked
        statistics to the coordinator, which adds them and sends back the
        total; every node checks the total against a code keyed by a secret
        the coordinator does not know before it moves the centers. The
        coordinator learns every iteration's totals and chooses nothing; a
        node's cost per round does not grow with the federation. The same
        centers as ``"blind"`` from the same start. ``"sees-totals"``: the
        coordinator sends the centers every iteration and learns the totals
        of the secure sums (a deployed node refuses it unless its operator
        allows it: ``allow-coordinator-centers``). ``"auto"``: where the
        options above allow, ``"blind"`` from 3 to ``BLIND_MAX_CLIENTS`` = 50
        clients (every node receives every other node's upload, so its cost
        per node grows with the federation; see Notes) and ``"verified"``
        above, else ``"sees-totals"``. ``coordinator_`` says which ran.
    secure_aggregation : bool, default=True
        Add the clients' statistics by secure aggregation (the server learns
        only their totals). ``False`` sends every client's statistics to the
        server in the clear, for comparison.
    client_fraction : float in (0, 1], default=1.0
        Fraction of the clients sampled for each Lloyd iteration; below 1 an
        iteration uses the sampled clients' rows only (a stochastic variant,
        like mini-batch k-means). The samples are drawn from nonces the
        clients commit to and then reveal, once per fit (two rounds), so that
        the server cannot choose whom a sum adds; each sampled client checks
        it was drawn.
    min_clients : int, default=None
        Fewest clients whose statistics must reach a sum; fewer raises
        ``FederatedKMeansError``. ``None`` asks for a majority of the
        clients taking part.
    privacy : {None, "dp"}, default=None
        ``"dp"``: differentially private Lloyd. Every iteration each client
        clips its rows to ``bounds`` and adds Gaussian noise from its private
        generator to its per-cluster sums and counts before the secure sum;
        the fit is ``(epsilon, delta)``-differentially private for data sets
        that differ in one replaced row, with exact accounting over the
        iterations (see Notes and the :ref:`Privacy <privacy>` page).
        Needs ``init="sphere-packing"`` (bounds that fit the data closely),
        ``"random"`` (a loose box) or an array: the k-FED start uploads local
        centers, which no noise covers.
    epsilon : float, default=1.0
        Privacy budget of the whole fit under ``privacy="dp"`` (> 0).
    delta : float, default=1e-5
        The ``delta`` of the guarantee under ``privacy="dp"``, in (0, 1).
    bounds : tuple (lower, upper) or None, default=None
        Public box of the rows under ``privacy="dp"``: numbers or arrays of
        shape (n_features,); rows are clipped to it, and the noise grows with
        its diagonal. ``None`` takes the box from the data (each client
        sends its extremes) with a
        :class:`~skfedclust.secure.PrivacyLeakWarning`.
    dp_max_iter : int or "auto", default="auto"
        Lloyd iterations under ``privacy="dp"`` (``max_iter`` is not used
        there): the budget is split over them in advance. ``"auto"``: the
        rule of Su et al. (2016), between 2 and 7 iterations, more for a
        larger budget or more rows per cluster, as diffprivlib's ``KMeans``.
    partition : int, partition specification or None, default=None
        How to simulate clients from a pooled ``X``; ``None`` gives three IID
        clients.
    n_jobs : int, default=None
        Number of clients run side by side on threads (joblib's
        ``n_jobs``). With ``None`` the clients run one after another and
        each client's Lloyd pass shares its blocks of rows among the cores
        OpenMP would use; the result is the same for every ``n_jobs``.
    random_state : int, RandomState instance or None, default=None
        Seeds the partition, the k-FED local k-means, the random centers, the
        client sampling and the secure-sum graph (all public), and, in a
        simulation, the parties' private masks.
    verbose : int, default=0
        Print progress per protocol stage (``1``): with
        ``coordinator="sees-totals"`` each Lloyd iteration's center shift and
        why the fit stopped, as scikit-learn's ``KMeans`` does; in the blind
        and verified modes the rounds, numbered (the coordinator sees no
        center); every few seconds of a long client step, how many clients
        are done. ``2`` adds debug detail.

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
    init_centers_ : ndarray of shape (n_clusters, n_features) or None
        The initial centers of the kept run, in float64: public, as every
        center the server broadcasts. Without differential privacy,
        ``KMeans(n_clusters, init=init_centers_, n_init=1)`` on the pooled
        rows gives the same centers and labels. ``None`` when the nodes
        computed the start themselves (``coordinator_ == "blind"`` with
        ``init="auto"``): it never leaves them.
    coordinator_ : {"blind", "verified", "sees-totals"}
        The mode the fit ran (``coordinator`` with ``"auto"`` resolved).
    n_clients_ : int
        Number of clients.
    client_sizes_ : ndarray of shape (n_clients,)
        Rows held by each client.
    communication_ : dict
        Rounds and bytes, secure-sum set-up included; see :class:`~skfedclust.federation.Ledger`.
    n_features_in_ : int
        Number of features seen during fit.
    privacy_spent_ : tuple of (float, float) or None
        ``(epsilon, delta)`` spent under ``privacy="dp"``, read from
        ``privacy_accountant_``; None otherwise, and None with ``bounds=None``
        (the box read from the data is outside the guarantee).
    privacy_accountant_ : PrivacyAccountant or None
        Every release of the private fit, charged before it was made.
    noise_scales_ : dict
        Standard deviations of the least noise in each released sum under
        ``privacy="dp"`` (``"sums"``, ``"counts"``, ``"inertia"``, and with
        the random start ``"moment sums"``, ``"moment squares"``); empty
        otherwise.
    bounds_ : tuple of ndarray
        The box the rows were clipped to (``privacy="dp"`` only).

    See Also
    --------
    skfedclust.KFed : One-shot federated k-means (the default initialisation).
    sklearn.cluster.KMeans : The centralized algorithm this one reproduces.

    Notes
    -----
    **What the server learns.** With ``coordinator="blind"`` (the default up
    to 50 clients): the final centers, the cluster sizes, ``n_iter_`` and the
    inertia, and when each round ends (:ref:`fedkmeans_blind`). With
    ``coordinator="verified"`` (the default above): also every iteration's
    totals (per-cluster sums of deviations, counts, how many clients hold
    rows of each cluster, rows that changed cluster), each node's row count
    and binary order, and the local centers of the (at most 50) nodes drawn
    for the start; it chooses no center (:ref:`fedkmeans_verified`). With
    ``coordinator="sees-totals"`` and secure aggregation: per iteration the
    number of rows of every cluster, the sum of their deviations from the
    center, and how many rows changed cluster, all totals over the clients
    (in an iteration that left a cluster empty, also the clusters' sums of
    squared distances); once per fit the pooled mean, the per-feature
    variance where the fit reads it (``tol > 0``, or a ``"random"`` or
    ``"sphere-packing"`` start), and two histograms of binary exponents (how many clients have
    their largest value, and their largest deviation from the mean, in each
    power-of-two range) that fix the public bounds of the fixed-point sums.
    The centers are means of clusters: a cluster of one row has that row as
    its center, as in any k-means. With ``init="k-fed-weighted"`` (the default
    in the clear) the server also receives each client's local centers and
    their cluster sizes, with ``init="k-fed"`` the local centers (the k-FED
    upload): means of local clusters. With ``secure_aggregation=False`` every client's
    statistics reach the server.

    **Bounds.** Fixed point needs a public bound on each client's entries.
    The clients agree once per fit, per feature, on powers of two ``D_i``
    above every ``|x_i - m_i|`` (``m`` the securely aggregated mean). Every
    row then lies within ``R = min_c ||D + |m - c| ||`` of its nearest
    center, and within ``R_i = min(R, D_i + max_c |m_i - c_i|)`` of it in
    feature ``i``, so a client of ``n_c`` rows has per-cluster sums below
    ``n_c R_i`` in feature ``i`` and squared distances below ``n_c R^2`` in
    absolute value; the bounds are twice these. Features of any mix of scales
    keep their digits. A client whose values exceed them refuses to upload.

    **Empty clusters.** scikit-learn moves an empty cluster to the row
    farthest from its center, which would send that row to the server. Here
    an empty cluster goes to the mean of the rows of the cluster with the
    largest inertia that lie farther from its center than its mean squared
    distance, which leave that cluster (two more secure sums, the clusters'
    inertia and the far rows' statistics, only in the iterations that have
    empty clusters; further empty clusters take the next clusters by
    inertia). In an iteration with sampled or dropped clients an
    empty cluster keeps its center. This private rule can differ from
    KMeans' (far rows on opposite sides average back to the donor's
    center); ``empty_clusters="farthest-row"`` applies scikit-learn's rule
    exactly, at the price of the farthest row leaving its client.

    **Dropouts.** A client that drops during a sum is left out of it; the
    iteration uses the others' rows. Strict convergence (no row changed
    cluster) is only declared in iterations every client answered.

    **Differential privacy** (``privacy="dp"``). The server learns noisy
    sums only: per iteration the per-cluster sums of the clipped rows
    (centred on the box's midpoint) with noise ``sigma`` per entry and the
    counts with noise ``2 sigma / ||w||`` (``w`` the box's widths); at the
    end a noisy inertia; with ``init="random"`` once noisy column sums and
    sums of squares. Replacing one row moves the sums and counts by a
    Gaussian sensitivity of ``||w|| / sigma`` whichever clusters it leaves
    and joins, so each iteration is ``mu``-GDP, and the fit composes exactly
    (:func:`~skfedclust.secure.gaussian_sigma` splits ``(epsilon, delta)``
    equally over its releases). The number of rows is public (the runtime
    reports each client's size), which is why the relation is replace-one.
    The estimator announces that ``t`` clients' shares make up the noise,
    ``t`` the fewest clients a sum accepts (``min_clients``); each node adds
    ``1 / min(t, k)`` of the noise variance, ``k`` its operator's
    ``dp-trusted-shares`` (default 1: a deployed node adds the whole noise,
    whatever is announced; a simulated party counts on ``t``), and a sum
    that is released holds at least the whole noise; without secure
    aggregation each client adds the whole noise to what it sends (its
    upload is then private on its own). Each node projects the server's
    centers into ``bounds`` before it computes, so the sensitivities hold
    for any centers. A cluster whose noisy count is
    below ``max(1, 3 x`` its noise) keeps its center; centers are clipped to
    the box. The guarantee is that of the real-valued Gaussian mechanism:
    the fixed-point rounding of the secure sum and floating point are not
    covered by the proof. ``labels_`` are each client's own output;
    ``score`` on new data is an exact secure sum, outside the budget.

    References
    ----------
    .. [1] S. P. Lloyd, "Least squares quantization in PCM", IEEE Transactions
       on Information Theory, 1982.
    .. [2] K. Bonawitz et al., "Practical secure aggregation for
       privacy-preserving machine learning", ACM CCS 2017.
    .. [3] D. K. Dennis, T. Li and V. Smith, "Heterogeneity for the win:
       one-shot federated clustering", ICML 2021.
    .. [4] D. Su, J. Cao, N. Li, E. Bertino and H. Jin, "Differentially
       private k-means clustering", CODASPY 2016.
    .. [5] J. Dong, A. Roth and W. J. Su, "Gaussian differential privacy",
       JRSS-B 2022.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfedclust import FederatedKMeans
    >>> X, _ = make_blobs(300, centers=3, random_state=0)
    >>> km = FederatedKMeans(n_clusters=3, random_state=0).fit([X[:100], X[100:200], X[200:]])
    >>> km.cluster_centers_.shape
    (3, 2)

    Differentially private, with public bounds:

    >>> dp = FederatedKMeans(
    ...     n_clusters=3, init="sphere-packing", privacy="dp", epsilon=5.0,
    ...     bounds=(-15.0, 15.0), random_state=0,
    ... ).fit([X[:100], X[100:200], X[200:]])
    >>> epsilon, delta = dp.privacy_spent_
    >>> round(epsilon, 6), delta
    (5.0, 1e-05)
    """

    #: Its k-FED starts ("k-fed-weighted", "k-fed") run k-FED's local step on the nodes.
    _client_step_modules = (
        "skfedclust.methods._fedkmeans_steps",
        "skfedclust.methods._fedkmeans_blind",
        "skfedclust.methods._fedkmeans_verified",
        "skfedclust.methods._kfed",
    )

    _parameter_constraints: dict = {
        **BaseFederatedClustering._parameter_constraints,
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "init": [
            StrOptions({"auto", "k-fed", "k-fed-weighted", "random", "sphere-packing"}),
            "array-like",
            callable,
        ],
        "n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "empty_clusters": [StrOptions({"far-rows", "farthest-row"})],
        "coordinator": [StrOptions({"auto", "sees-totals", "blind", "verified"})],
        "secure_aggregation": ["boolean"],
        "client_fraction": [Interval(numbers.Real, 0, 1, closed="right")],
        "min_clients": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "privacy": [StrOptions({"dp"}), None],
        "epsilon": [Interval(numbers.Real, 0, MAX_EPSILON, closed="right")],
        "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
        "bounds": [tuple, list, None],
        "dp_max_iter": [StrOptions({"auto"}), Interval(numbers.Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        init="auto",
        n_init=1,
        max_iter=300,
        tol=1e-4,
        empty_clusters="far-rows",
        coordinator="auto",
        secure_aggregation=True,
        client_fraction=1.0,
        min_clients=None,
        privacy=None,
        epsilon=1.0,
        delta=1e-5,
        bounds=None,
        dp_max_iter="auto",
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
        self.empty_clusters = empty_clusters
        self.coordinator = coordinator
        self.secure_aggregation = secure_aggregation
        self.client_fraction = client_fraction
        self.min_clients = min_clients
        self.privacy = privacy
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.dp_max_iter = dp_max_iter
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

    def _agree_sampling(self, runtime, active, horizon):
        """The seed of the fit's client samples, from the clients' commitments and nonces.

        Only when the fit samples clients: each active client commits to a
        nonce of its own, sees every commitment, then reveals it; the samples
        are drawn from all the nonces (:mod:`skfedclust.secure._sampling`),
        so the server cannot choose whom a sum adds.
        """
        self._sampling = None
        if self.client_fraction >= 1.0:
            return
        runtime.stage("client sampling: every client commits to a nonce, then reveals it")
        slots = sorted(int(c) for c in active)
        commitments = runtime.run(
            sampling_commit_step, tag=TAG_COMMITS, clients=slots, horizon=horizon
        )
        runtime.broadcast(
            {"slots": np.array(slots), "commitments": np.stack([commitments[c] for c in slots])},
            tag=TAG_COMMITS,
            clients=slots,
        )
        nonces = runtime.run(sampling_reveal_step, tag=TAG_REVEALS, clients=slots)
        nonces = np.stack([nonces[c] for c in slots])
        self._sampling = {"seed": sampling_seed(slots, nonces), "nonces": nonces, "t": 0}

    def _sample(self, runtime, active):
        """The clients of the next iteration, announced to them with the centers."""
        if self._sampling is None:
            return list(active)
        n = max(math.ceil(self.client_fraction * len(active)), self.min_clients or 1)
        n = min(n, len(active))
        self._sampling["t"] += 1
        t = self._sampling["t"]
        participants = public_sample(self._sampling["seed"], t, active, n)
        runtime.broadcast(
            {
                "nonces": self._sampling["nonces"],
                "iteration": t,
                "active": np.array(sorted(active)),
                "participants": np.array(participants),
            },
            tag=TAG_SAMPLE,
            clients=participants,
        )
        return participants

    def _max_size(self, runtime, clients):
        return float(np.max(np.asarray(runtime.client_sizes)[clients]))

    def _needs_variance(self):
        """Whether the fit reads the pooled mean and variance: for ``tol`` or a drawn start.

        As KMeans, which computes no variance for ``tol=0``.
        """
        return self.tol > 0 or (
            isinstance(self.init, str) and self.init in ("random", "sphere-packing")
        )

    def _moments(self, runtime, adder, clients):
        """Mean, per-feature variance and deviation bound of the pooled rows (secure sums).

        Each client reads its rows once, for its per-column extremes and sums
        (kept for the Lloyd pass): the bound agreements need only the extremes
        (those of the deviations from a mean are the extremes' deviations),
        and the centred moments a second pass, only when the fit reads the
        variance. Without it, the mean and variance are ``None``.
        """
        n_c = self._max_size(runtime, clients)
        raw = adder.bound(fedkmeans_row_extremes, tag="bound on the rows", clients=clients)
        bounds = None if raw is None else [_MARGIN * n_c * raw, None]
        (sums, count), survivors = adder.sum(
            fedkmeans_column_sums, tag="sums and counts", bounds=bounds, clients=clients
        )
        self._check_survivors("sums and counts", clients, survivors)
        n = int(count[0])
        rough = sums / n
        spread = adder.bound(
            fedkmeans_deviation_extremes,
            tag="bound on the deviations",
            clients=survivors,
            mean=rough,
        )
        # One bound per feature: a feature 1e12 times narrower than another
        # keeps its digits in the fixed-point sums (one bound for all would
        # round its centers to a step set by the widest feature).
        spread = adder.column_bounds(
            fedkmeans_deviation_extremes,
            tag="bounds on the deviations per feature",
            bound=spread,
            clients=survivors,
            mean=rough,
        )
        if not self._needs_variance():
            return None, None, rough, spread, survivors
        bounds = None if spread is None else [_MARGIN * n_c * spread, _MARGIN * n_c * spread**2]
        (first, second), survivors2 = adder.sum(
            fedkmeans_centered_moments,
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
        if isinstance(self.init, str) and self.init == "sphere-packing":
            # Without privacy the box is two standard deviations around the
            # pooled mean (from the secure moments).
            half = 2.0 * np.sqrt(variance)
            return [
                sphere_packing_centers(mean - half, mean + half, k, random_state)
                for _ in range(self.n_init)
            ]
        if isinstance(self.init, str) and self.init == "random":
            return [
                mean + np.sqrt(variance) * random_state.standard_normal((k, len(mean)))
                for _ in range(self.n_init)
            ]
        if isinstance(self.init, str) and self.init == "k-fed":
            uploads = self._local_centers(runtime, active, send_sizes=False)
            # k-FED's restarts differ in the seed client only: distinct ones, in
            # a random order (at most one start per client).
            order = random_state.permutation(len(uploads))[: self.n_init]
            starts = []
            for seed_client in order:
                runtime.stage("server step: k-FED aggregation of the local centers")
                starts.append(
                    runtime.server(
                        kfed_server_step,
                        uploads,
                        n_clusters=k,
                        seed_client=int(seed_client),
                        n_lloyd_steps=None,
                        weighted=False,
                        max_iter=self.max_iter,
                    )
                )
            return starts
        if isinstance(self.init, str) or callable(self.init):
            # "k-fed-weighted" ("auto" in the clear) and a callable init.
            uploads = self._local_centers(runtime, active, send_sizes=True)
            starts = []
            for _ in range(self.n_init):
                runtime.stage("server step: weighted k-means++ on the local centers")
                starts.append(
                    runtime.server(
                        kfed_server_weighted_kmeans,
                        uploads,
                        n_clusters=k,
                        n_init=SERVER_RESTARTS,
                        seed=int(random_state.randint(np.iinfo(np.int32).max)),
                        max_iter=self.max_iter,
                    )
                )
            return starts
        return [self._array_init(runtime)]

    def _local_centers(self, runtime, active, send_sizes):
        """Every client's local centers (callable init or k-means), with their sizes or not."""
        k = self.n_clusters
        if callable(self.init):
            runtime.stage("client step: the callable init on each client's rows")
            return runtime.run(
                fedkmeans_callable_local_centers,
                tag="local centers",
                clients=active,
                init=self.init,
                n_clusters=k,
            )
        runtime.stage("client step: k-means on each client (k-FED initialisation)")
        return runtime.run(
            kfed_local_centers,
            tag="local centers",
            clients=active,
            n_clusters=k,
            solver="kmeans",
            n_init=1,
            max_iter=self.max_iter,
            send_sizes=send_sizes,
        )

    def _array_init(self, runtime):
        k = self.n_clusters
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
                stacklevel=7,
            )
        return centers

    def _lloyd(self, runtime, iteration, centers, active, tol):
        """One run of federated Lloyd from ``centers``: centers, iterations.

        The loop of every variant: ``iteration`` (an :class:`ExactIteration` or a
        :class:`~skfedclust.methods._fedkmeans_dp.NoisyIteration`) says what the clients
        sum and how the server moves the centers.
        """
        n_iter = 0
        visited = set()
        for i in range(iteration.max_iter):
            participants = self._sample(runtime, active)
            runtime.broadcast(centers, tag=TAG_CENTERS, clients=participants)
            runtime.stage(f"iteration {i + 1}: client step, {iteration.what}")
            total, survivors = iteration.statistics(centers, participants)
            self._check_survivors(iteration.tag, participants, survivors)
            n_iter = i + 1
            runtime.stage(f"iteration {i + 1}: server step, new centers")
            new, converged = iteration.new_centers(centers, total, survivors)
            if converged:
                runtime.stage(f"converged at iteration {i + 1}: strict convergence")
                centers = new
                break
            shift = float(((new - centers) ** 2).sum())
            visited.add(centers.tobytes())
            centers = new
            if shift <= tol:
                runtime.stage(
                    f"converged at iteration {i + 1}: center shift {shift:.3g} within "
                    f"tolerance {tol:.3g}"
                )
                break
            runtime.stage(f"iteration {i + 1}: center shift {shift:.3g}")
            if self.secure_aggregation and centers.tobytes() in visited:
                # With client sampling the centers can return exactly to an
                # earlier state (a fixed point of a sample drawn again): the
                # iteration cycles, and nodes refuse a second sum of the same
                # statistic over other clients (it would give away the difference).
                break
        iteration.finish()
        return centers, n_iter

    def _relocate(self, runtime, adder, centers, new, sums, counts, clients, bounds, inertia_bound):
        """Relocate the empty clusters: the new centers and which clusters hold rows."""
        if self.empty_clusters == "farthest-row":
            return self._relocate_to_farthest_rows(runtime, centers, new, sums, counts, clients)
        new = self._relocate_to_far_rows(
            runtime, adder, centers, new, sums, counts, clients, bounds, inertia_bound
        )
        # A relocated empty cluster holds rows again.
        return new, (counts > 0) | np.any(new != centers, axis=1)

    def _relocate_to_far_rows(
        self, runtime, adder, centers, new, sums, counts, clients, bounds, inertia_bound
    ):
        # The clusters' inertia picks the donors: one more sum, only in an
        # iteration that left a cluster empty (the Lloyd pass skips the squares).
        runtime.stage("server step: empty cluster(s); client step: the clusters' inertia")
        inertia, survivors = adder.sum(
            fedkmeans_cluster_inertia,
            tag="inertia of the clusters",
            bounds=None if inertia_bound is None else [inertia_bound],
            clients=clients,
        )
        if survivors != list(clients):
            return new
        inertia = np.asarray(inertia, dtype=np.float64)
        donors = donor_clusters(counts, inertia)
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
        return relocate_empty(centers, new, sums, counts, inertia, (donors, far_sums, far_counts))

    def _relocate_to_farthest_rows(self, runtime, centers, new, sums, counts, clients):
        """scikit-learn's rule: each empty cluster takes the next farthest row of the pooled rows.

        Two exchanges, only in iterations with empty clusters: every client
        sends its ``n_empty`` largest squared distances to their centers; the
        clients of the ``n_empty`` largest send those rows with their clusters.
        """
        empty = np.flatnonzero(counts == 0)
        runtime.stage(f"server step: {len(empty)} empty cluster(s) take the farthest rows")
        runtime.broadcast(
            {"n_empty": len(empty), "centers": centers}, tag=TAG_FARTHEST, clients=clients
        )
        distances = runtime.run(
            fedkmeans_largest_distances, tag="largest distances", clients=clients
        )
        picks = runtime.server(_farthest_picks, distances, n_empty=len(empty))
        if not picks:
            # No row lies off its center: the empty clusters take the largest
            # cluster's center (scikit-learn's place for them), so no center moves
            # and the fit stops on the tolerance, after the same iterations as KMeans.
            filled = np.asarray(counts) > 0
            new = np.array(new, copy=True)
            new[~filled] = new[np.argmax(counts)]
            return new, filled
        chosen = sorted(picks)
        runtime.send({c: picks[c] for c in chosen}, tag=TAG_FARTHEST_PICK)
        rows = runtime.run(fedkmeans_farthest_rows, tag="farthest rows", clients=chosen)
        return runtime.server(
            _move_to_farthest_rows, rows, centers=centers, sums=sums, counts=counts, empty=empty
        )

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
            try:
                self.coordinator_ = self._coordinator_mode(runtime)
                if self.coordinator_ in ("blind", "verified"):
                    self.privacy_spent_ = self.privacy_accountant_ = None
                    self.noise_scales_ = {}
                    self._blind_protocol(runtime)
                elif self.privacy == "dp":
                    private_fit(self, runtime, random_state)
                else:
                    self.privacy_spent_ = self.privacy_accountant_ = None
                    self.noise_scales_ = {}
                    self._protocol(runtime, random_state)
            finally:
                # The sampling seed and nonces are the fit's, not the model's.
                self.__dict__.pop("_sampling", None)

    def _coordinator_mode(self, runtime):
        """The mode this fit runs: ``coordinator``, with ``"auto"`` resolved."""
        return coordinator_mode(self.coordinator, self._blind_unsupported(), runtime.n_clients)

    def _blind_unsupported(self):
        """The options the coordinator-blind protocol does not run, by name."""
        return {
            "privacy": self.privacy is not None,
            "client_fraction": self.client_fraction < 1.0,
            "secure_aggregation": not self.secure_aggregation,
            "empty_clusters": self.empty_clusters == "farthest-row",
            "init": isinstance(self.init, str)
            and self.init not in ("auto", "k-fed-weighted")
            or callable(self.init),
        }

    def _check_blind_options(self, runtime):
        """Refuse, before any exchange, options the coordinator-blind protocol does not run."""
        for name, bad in self._blind_unsupported().items():
            if bad:
                raise ValueError(
                    f'coordinator="{self.coordinator}" runs Lloyd on the nodes with '
                    'init="auto" or an array start, without privacy, sampling, clear sums or '
                    f"the farthest-row relocation; {name}={getattr(self, name)!r} needs "
                    'coordinator="sees-totals"'
                )
        if runtime.n_clients < DEFAULT_MIN_SUM_PARTICIPANTS:
            raise ValueError(
                f"the nodes add totals over at least {DEFAULT_MIN_SUM_PARTICIPANTS} clients "
                f"(each refuses fewer); this federation has {runtime.n_clients}"
            )

    def _blind_protocol(self, runtime):
        """Lloyd run by the nodes: the coordinator relays and receives the result only."""
        self._check_blind_options(runtime)
        # Every node adds every other's upload: min_clients holds when it is a
        # number of clients the federation has.
        self._check_min_clients(runtime)
        init = None if isinstance(self.init, str) else self._array_init(runtime)
        run = run_blind_fit if self.coordinator_ == "blind" else run_verified_fit
        centers, sizes, n_iter, inertia = run(
            runtime,
            n_clusters=self.n_clusters,
            n_init=1 if init is not None else self.n_init,
            max_iter=self.max_iter,
            tol=float(self.tol),
            init=init,
            error=FederatedKMeansError,
        )
        self.init_centers_ = None if init is None else np.array(init, dtype=np.float64)
        self.cluster_centers_ = np.asarray(centers, dtype=np.float64)
        self.n_iter_ = int(np.asarray(n_iter)[0])
        self.inertia_ = float(np.asarray(inertia)[0])
        _warn_if_fewer_clusters(int(np.count_nonzero(np.asarray(sizes))), self.n_clusters)

    def _check_min_clients(self, runtime):
        if self.min_clients is not None and self.min_clients > runtime.n_clients:
            raise ValueError(
                f"min_clients={self.min_clients} but there are {runtime.n_clients} clients"
            )
        sampled = max(math.ceil(self.client_fraction * runtime.n_clients), self.min_clients or 1)
        if self.secure_aggregation and min(sampled, runtime.n_clients) < (
            DEFAULT_MIN_SUM_PARTICIPANTS
        ):
            # Caught here, before any exchange: every node would refuse these
            # sums (a sum of two tells each client the other's vector).
            if sampled >= runtime.n_clients:
                raise ValueError(
                    f"secure sums need at least {DEFAULT_MIN_SUM_PARTICIPANTS} clients (nodes "
                    f"refuse smaller ones); this federation has {runtime.n_clients}: use more "
                    "clients, or secure_aggregation=False"
                )
            raise ValueError(
                f"client_fraction={self.client_fraction} of {runtime.n_clients} clients takes "
                f"{min(sampled, runtime.n_clients)} clients into each secure sum; nodes add "
                f"at least {DEFAULT_MIN_SUM_PARTICIPANTS}: raise client_fraction or "
                "min_clients, or use more clients"
            )

    def _sum_channel(self, runtime, random_state):
        """The fit's sums; its graph's public seed is the next draw of ``random_state``."""
        # A sampled client needs sampled neighbours to mask with: with sampling
        # the secure-sum graph is complete.
        degree = runtime.n_clients - 1 if self.client_fraction < 1.0 else None
        return SumChannel(
            runtime,
            secure=self.secure_aggregation,
            seed=int(random_state.randint(np.iinfo(np.int32).max)),
            degree=degree,
        )

    def _protocol(self, runtime, random_state):
        everyone = list(range(runtime.n_clients))
        self._check_min_clients(runtime)
        if callable(self.init) and not isinstance(runtime, InProcessRuntime):
            # Before any exchange: a deployed node runs only the package's steps.
            raise ValueError(
                "a callable init runs on every client's rows: a simulation can hand it to "
                "the simulated clients, a deployed node runs only the package's client "
                "steps; pass a string or an array of centers"
            )
        adder = self._sum_channel(runtime, random_state)
        runtime.stage("client step: secure moments of the pooled rows")
        mean, variance, rough, spread, active = self._moments(runtime, adder, everyone)
        # scikit-learn's tolerance: tol times the mean per-feature variance.
        tol = 0.0 if variance is None else float(np.mean(variance)) * self.tol
        starts = self._initial_centers(runtime, adder, active, mean, variance, random_state)
        self._agree_sampling(runtime, active, self.max_iter * len(starts))
        best = None
        for r, start in enumerate(starts):
            iteration = ExactIteration(self, runtime, adder, active, rough, spread)
            centers, n_iter = self._lloyd(
                runtime, iteration, np.array(start, dtype=np.float64), active, tol
            )
            inertia = self._final_inertia(
                runtime, adder, centers, active, rough, spread, output=len(starts) == 1
            )
            if best is None or inertia < best[0]:
                best = (inertia, centers, n_iter, r, self.__dict__.pop("_n_filled", len(centers)))
        self.inertia_, self.cluster_centers_, self.n_iter_, r, n_filled = best
        self.init_centers_ = np.array(starts[r], dtype=np.float64)
        _warn_if_fewer_clusters(n_filled, self.n_clusters)
        if len(starts) > 1:
            runtime.broadcast(self.cluster_centers_, tag=TAG_CENTERS, clients=active)
            runtime.stage("client step: nearest-center labels")
            runtime.run(fedkmeans_final_labels, tag="labels", clients=active)

    # ------------------------------------------------------------ private fit
    def _keep_input_precision(self, X):
        # As KMeans: float32 input, float32 centers (the protocol computes in float64).
        if float32_input(X):
            self.cluster_centers_ = self.cluster_centers_.astype(np.float32)

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
            Euclidean distances, translation invariant at any offset
            (computed in float64; float32 for float32 ``X``, as in
            :class:`~sklearn.cluster.KMeans`).
        """
        check_is_fitted(self, "cluster_centers_")
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        centers = np.asarray(self.cluster_centers_, dtype=np.float64)
        distances = np.sqrt(squared_distances(X.astype(np.float64, copy=False), centers))
        return distances.astype(X.dtype, copy=False)

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
        nearest center (a secure sum when ``secure_aggregation`` and at least
        three holders, with a
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
        # Rows of one or two holders: the caller holds them all (a pooled X) or
        # a sum would tell each the other's; they are added in the clear.
        secure = self.secure_aggregation and runtime.n_clients >= DEFAULT_MIN_SUM_PARTICIPANTS
        adder = SumChannel(runtime, secure=secure, seed=0)
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
