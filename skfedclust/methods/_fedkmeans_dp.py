"""Differentially private federated k-means: the noise plan and its server-side steps.

Rows are clipped to a public box; every release of the fit (the noisy
per-cluster sums and counts of each Lloyd iteration, the inertia, the moments
of the ``"random"`` start) is a Gaussian mechanism whose noise the
:class:`DPPlan` sets and whose cost the plan's accountant charges before the
release is asked for (Su et al., CODASPY 2016, for the start and the number
of iterations). The client steps that add the noise live with the other client
steps of :mod:`skfedclust.methods._fedkmeans`; each node also charges its own
releases to its own accountant.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..federation._inputs import MAX_MAGNITUDE
from ..secure import PrivacyAccountant, PrivacyLeakWarning, gaussian_sigma
from ._fedkmeans_steps import (
    TAG_CENTERS,
    fedkmeans_dp_extremes,
    fedkmeans_dp_inertia,
    fedkmeans_dp_lloyd_statistics,
    fedkmeans_dp_moments,
    fedkmeans_final_labels,
)

#: Safety factor of every public bound of a federated k-means sum: covers the
#: rounding of the clients' floating-point sums and near-ties of the nearest
#: center (one bit of 62).
_MARGIN = 2.0


#: Lloyd iterations of the private fit at most, and at least, under
#: ``dp_max_iter="auto"`` (the rule of Su et al. 2016, as diffprivlib uses).
_DP_ITER_RANGE = (2, 7)
#: Standard deviations of a client's noise within its fixed-point bound: the
#: bound is exceeded with probability below 1e-340. The bounds allow each
#: client the whole ``sigma``: a node adds ``sigma / sqrt(s)`` for the ``s``
#: shares it counts on, and its operator's ``dp-trusted-shares`` (default 1),
#: not the announced share, sets ``s``.
_NOISE_HEADROOM = 40.0


def sphere_packing_centers(lower, upper, n_clusters, random_state, *, retries=100):
    """Centers spread in the box ``[lower, upper]``, chosen without looking at the data.

    The initialisation of Su et al. (2016) that diffprivlib's ``KMeans``
    uses: centers are drawn uniformly at least ``r`` inside the box and at
    least ``2 r`` from each other, starting from ``r`` half the narrowest
    width and halving ``r`` until ``retries`` draws in a row no longer fail
    to place the next center. It reads no row, so it costs no privacy.
    """
    lower = np.asarray(lower, dtype=np.float64)
    width = np.asarray(upper, dtype=np.float64) - lower
    radius = float(width.min()) / 2.0
    while radius > 0:
        centers, failures = [], 0
        while len(centers) < n_clusters and failures < retries:
            step = random_state.random_sample(len(width)) * (width - 2 * radius)
            candidate = lower + radius + step
            nearest = (
                np.sqrt(((np.array(centers) - candidate) ** 2).sum(axis=1).min()) if centers else 0
            )
            if centers and nearest < 2 * radius:
                failures += 1
                continue
            centers.append(candidate)
            failures = 0
        if len(centers) == n_clusters:
            return np.array(centers)
        radius /= 2.0
    # A box flat in some feature: uniform draws within it.
    return lower + random_state.random_sample((n_clusters, len(width))) * width


def su_iterations(epsilon, n_samples, n_features, n_clusters, rho=0.225):
    """Lloyd iterations for a private k-means at ``epsilon``: Su et al.'s rule.

    Su, Cao, Li, Bertino and Jin ("Differentially private k-means
    clustering", CODASPY 2016) estimate the budget one iteration needs,
    ``epsilon_m = sqrt(500 k^3 / n^2 (d + (4 d rho^2)^(1/3))^3)``, and run
    ``epsilon / epsilon_m`` iterations, between 2 and 7 (diffprivlib's
    ``KMeans`` uses the same rule).
    """
    k, n, d = n_clusters, max(n_samples, 1), n_features
    per_iteration = math.sqrt(500 * k**3 / n**2 * (d + (4 * d * rho**2) ** (1 / 3)) ** 3)
    low, high = _DP_ITER_RANGE
    return int(max(min(epsilon / per_iteration, high), low))


class DPPlan:
    """Noise of every release of a private federated k-means fit (replace-one neighbours).

    Rows are clipped to the public box ``[lower, upper]`` of width ``w``;
    every release is a Gaussian mechanism, and the ``compositions`` releases
    of the fit share the budget equally (each is ``mu``-GDP with the same
    ``mu``), so the fit is ``(epsilon, delta)``-DP exactly.

    - Per Lloyd iteration, the per-cluster sums of the rows centred on the
      box's midpoint, noise ``sigma``, and the counts, noise ``2 sigma /
      ||w||``: replacing a row moves a sum by at most ``||w||`` (same
      cluster, counts unchanged) or two sums by ``||w|| / 2`` each and two
      counts by one (another cluster), ``||w||^2 / (2 sigma^2) + 2 ||w||^2 /
      (4 sigma^2)``; both cases give ``mu = ||w|| / sigma``.
    - The inertia, noise ``sigma_inertia``: each row adds at most ``||w||^2``
      (the centers stay in the box).
    - With the ``"random"`` start, the column sums of the centred rows
      (sensitivity ``||w||``) and of their squares (``||w^2|| / 4``), each
      taking half of one release's ``mu^2``.
    """

    def __init__(self, lower, upper, *, epsilon, delta, n_starts, n_iter, moments):
        #: Every release of the fit is charged here, with the noise this plan gave it:
        #: the plan is the one source of the fit's privacy figures.
        self.accountant = PrivacyAccountant(epsilon, delta, "replace-one")
        self.lower = np.asarray(lower, dtype=np.float64)
        self.upper = np.asarray(upper, dtype=np.float64)
        width = self.upper - self.lower
        self.diagonal = float(np.linalg.norm(width))
        self.n_iter = int(n_iter)
        self.moments = bool(moments)
        self.compositions = n_starts * (self.n_iter + 1) + int(self.moments)
        c = self.compositions
        self.sigma = gaussian_sigma(self.diagonal, epsilon, delta, c)
        self.sigma_counts = 2.0 * self.sigma / self.diagonal
        self.sigma_inertia = gaussian_sigma(self.diagonal**2, epsilon, delta, c)
        self.squares_sensitivity = float(np.linalg.norm(width**2)) / 4.0
        self.sigma_moment_sums = gaussian_sigma(self.diagonal, epsilon, delta, 2 * c)
        self.sigma_moment_squares = gaussian_sigma(
            max(self.squares_sensitivity, np.finfo(float).tiny), epsilon, delta, 2 * c
        )

    def _release(self, what):
        """The sensitivity and noise of a release: ``(sensitivity, sigma)``."""
        return {
            "cluster sums and counts": (self.diagonal, self.sigma),
            "inertia": (self.diagonal**2, self.sigma_inertia),
            "column sums": (self.diagonal, self.sigma_moment_sums),
            "column sums of squares": (
                max(self.squares_sensitivity, np.finfo(float).tiny),
                self.sigma_moment_squares,
            ),
        }[what]

    def charge(self, what):
        """Charge the release ``what`` to the fit's accountant, before it is made."""
        sensitivity, sigma = self._release(what)
        self.accountant.charge(what, sensitivity=sensitivity, sigma=sigma)

    @property
    def midpoint(self):
        return (self.lower + self.upper) / 2

    def noisy_sum(self, adder, step, **public):
        """The sum of a noisy client ``step`` on rows clipped to the box."""
        return adder.sum(step, lower=self.lower, upper=self.upper, **public)

    def clip_centers(self, centers):
        """Centers back in the box (post-processing: costs no privacy)."""
        return np.clip(centers, self.lower, self.upper)

    def scales(self):
        """The standard deviations of the noise in every released sum."""
        scales = {
            "sums": self.sigma,
            "counts": self.sigma_counts,
            "inertia": self.sigma_inertia,
        }
        if self.moments:
            scales["moment sums"] = self.sigma_moment_sums
            scales["moment squares"] = self.sigma_moment_squares
        return scales


def _dp_centers(centers, sums, counts, plan, noise):
    """New centers from noisy per-cluster sums and counts, kept in the box.

    A cluster whose noisy count is below ``max(1, 3 noise)`` (``noise`` the
    standard deviation of the counts' noise) keeps its center: its mean would
    be mostly noise.
    """
    new = np.array(centers, dtype=np.float64, copy=True)
    reliable = counts >= max(1.0, 3.0 * noise)
    new[reliable] = plan.midpoint + sums[reliable] / counts[reliable, None]
    return plan.clip_centers(new)


def _relocate_unreliable(new, counts, noise, plan):
    """Move the centers of clusters lost in the noise next to the largest clusters' centers.

    A cluster whose noisy count is below ``max(1, 3 noise)`` would keep its
    center for good (an empty cluster). Each takes the place of a split of
    the cluster with the largest noisy count that is not split yet: the
    donor's new center moved by a sixteenth of the box's widest side
    divided by the number of clusters, the donor's moved back as far. Only
    released values (noisy counts, the new centers) and the public box are
    read: post-processing, at no privacy cost.

    Returns
    -------
    centers : ndarray
    relocated : int
        How many centers moved.
    """
    unreliable = np.flatnonzero(counts < max(1.0, 3.0 * noise))
    if not unreliable.size:
        return new, 0
    widest = int(np.argmax(plan.upper - plan.lower))
    step = np.zeros(new.shape[1])
    step[widest] = (plan.upper[widest] - plan.lower[widest]) / (16.0 * len(new))
    donors = [int(j) for j in np.argsort(-counts, kind="stable") if j not in set(unreliable)]
    out = new.copy()
    for empty, donor in zip(unreliable, donors):
        out[empty] = new[donor] + step
        out[donor] = new[donor] - step
    return plan.clip_centers(out), int(min(len(unreliable), len(donors)))


class NoisyIteration:
    """One private Lloyd iteration: noisy per-cluster sums and counts, then new centers.

    The iteration of :meth:`FederatedKMeans._lloyd` with ``privacy="dp"``:
    each iteration's release is charged to the plan's accountant before the
    sum is asked for; clusters whose noisy count is lost in the noise keep
    their center and are moved next to the largest clusters (post-processing).
    """

    tag = "noisy cluster statistics"
    what = "noisy per-cluster sums and counts"

    def __init__(self, model, runtime, adder, plan):
        self.model, self.runtime, self.adder, self.plan = model, runtime, adder, plan
        self.max_iter = plan.n_iter
        self.relocated = 0
        self._noise = None

    def statistics(self, centers, participants):
        plan, model = self.plan, self.model
        factor = client_noise_factor(model, participants)
        n_c = model._max_size(self.runtime, participants)
        half = float(np.max(plan.upper - plan.lower)) / 2
        bounds = [
            _MARGIN * (n_c * half + _NOISE_HEADROOM * plan.sigma),
            _MARGIN * (n_c + _NOISE_HEADROOM * plan.sigma_counts),
        ]
        plan.charge("cluster sums and counts")
        total, survivors = plan.noisy_sum(
            self.adder,
            fedkmeans_dp_lloyd_statistics,
            tag=self.tag,
            bounds=bounds,
            clients=participants,
            sigma=plan.sigma,
            noise_share=client_noise_share(model, participants),
        )
        # The least noise of the counts in the sum (every answering client's
        # share, if each counts on the announced shares; more where nodes trust fewer).
        self._noise = plan.sigma_counts * factor * math.sqrt(len(survivors))
        return total, survivors

    def new_centers(self, centers, total, survivors):
        """New centers and whether the iteration has converged (never before its test)."""
        sums, counts = total
        new = _dp_centers(centers, sums, counts, self.plan, self._noise)
        new, self.relocated = _relocate_unreliable(new, counts, self._noise, self.plan)
        return new, False

    def finish(self):
        if self.relocated:
            warnings.warn(
                f"{self.relocated} of the {self.model.n_clusters} clusters held too few rows to "
                "tell from the noise in the last private iteration; their centers were moved "
                "next to the largest clusters (at no privacy cost). Fewer clusters, a larger "
                "epsilon or more rows help.",
                ConvergenceWarning,
                stacklevel=4,
            )


def _combine_extremes(received):
    """Server step: the box of the pooled rows from the clients' extremes."""
    uploads = received.list()
    lower = np.min([u[0] for u in uploads], axis=0)
    upper = np.max([u[1] for u in uploads], axis=0)
    return lower, upper


def private_bounds(model, runtime, clients):
    """The public box of the private fit: ``bounds``, or the data's (with a warning)."""
    d = runtime.n_features
    if model.bounds is None:
        warnings.warn(
            "privacy='dp' without bounds: each client sends its per-feature minimum and "
            "maximum, which the (epsilon, delta) guarantee does not cover (privacy_spent_ "
            "is None); pass public bounds=(lower, upper) to keep the data out of them",
            PrivacyLeakWarning,
            stacklevel=6,
        )
        runtime.stage("client step: per-feature extremes (bounds from the data)")
        received = runtime.run(fedkmeans_dp_extremes, tag="data bounds", clients=clients)
        lower, upper = runtime.server(_combine_extremes, received)
    else:
        if not isinstance(model.bounds, (tuple, list)) or len(model.bounds) != 2:
            raise ValueError(
                "bounds must be a pair (lower, upper) of numbers or arrays of shape "
                f"(n_features,), got {model.bounds!r}"
            )
        try:
            lower, upper = (
                np.broadcast_to(np.asarray(b, dtype=np.float64), (d,)).copy() for b in model.bounds
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"bounds must be a pair (lower, upper) of numbers or arrays of shape ({d},): {exc}"
            ) from None
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        raise ValueError("bounds must be finite")
    if max(np.abs(lower).max(), np.abs(upper).max()) > MAX_MAGNITUDE:
        raise ValueError(
            f"bounds reach beyond {MAX_MAGNITUDE:.0e}, where the squared distances and the "
            "noise of the private sums overflow float64: rescale the data and the bounds"
        )
    if np.any(lower > upper):
        raise ValueError("bounds: every lower bound must be at most its upper bound")
    if not np.any(upper > lower):
        raise ValueError("bounds: the box has no width (every lower bound equals its upper)")
    return lower, upper


def private_n_iter(model, runtime):
    if model.dp_max_iter != "auto":
        return int(model.dp_max_iter)
    # Under replace-one neighbours the number of rows is public.
    n = int(np.sum(runtime.client_sizes))
    return su_iterations(model.epsilon, n, runtime.n_features, model.n_clusters)


def client_noise_share(model, participants):
    """How many clients' shares make up the noise of a sum, as announced: ``t``.

    An announcement: each node counts on ``min(t, dp-trusted-shares)`` shares
    (:func:`~skfedclust.node._dp.node_noise_share`), 1 by default (it adds the
    whole ``sigma``); a simulated party counts on ``t``.
    """
    if not model.secure_aggregation:
        # Each client's upload reaches the server: each carries the whole noise.
        return 1
    needed = len(participants) // 2 + 1 if model.min_clients is None else model.min_clients
    return int(min(needed, len(participants)))


def client_noise_factor(model, participants):
    """A client's share of the noise's standard deviation, ``1 / sqrt(t)``."""
    return 1.0 / math.sqrt(client_noise_share(model, participants))


def private_fit(model, runtime, random_state):
    everyone = list(range(runtime.n_clients))
    model._check_min_clients(runtime)
    if callable(model.init):
        raise ValueError(
            "a callable init computes each client's local centers from its rows, which "
            "no differential-privacy guarantee covers; with privacy='dp' use "
            "init='sphere-packing', init='random' or an array of public centers"
        )
    if isinstance(model.init, str) and model.init in ("k-fed", "k-fed-weighted"):
        raise ValueError(
            f"init={model.init!r} uploads each client's local centers, which no differential-"
            "privacy guarantee covers; with privacy='dp' use init='sphere-packing' (centers "
            "spread in the bounds, no privacy cost), init='random' (drawn from private "
            "moments) or an array of public centers"
        )
    lower, upper = private_bounds(model, runtime, everyone)
    random_start = isinstance(model.init, str) and model.init == "random"
    n_starts = model.n_init if isinstance(model.init, str) else 1
    plan = DPPlan(
        lower,
        upper,
        epsilon=model.epsilon,
        delta=model.delta,
        n_starts=n_starts,
        n_iter=private_n_iter(model, runtime),
        moments=random_start,
    )
    model.bounds_ = (lower, upper)
    model.privacy_accountant_ = plan.accountant
    model.noise_scales_ = plan.scales()
    adder = model._sum_channel(runtime, random_state)
    model._agree_sampling(runtime, everyone, plan.n_iter * n_starts)
    if adder.secure:
        adder.aggregator.setup()
    if random_start:
        starts = _private_random_starts(model, runtime, adder, plan, everyone, random_state)
    elif isinstance(model.init, str):  # "sphere-packing"
        starts = [
            sphere_packing_centers(lower, upper, model.n_clusters, random_state)
            for _ in range(model.n_init)
        ]
    else:
        starts = [plan.clip_centers(model._array_init(runtime))]
    # scikit-learn's tolerance, on the variance of the box (public).
    tol = model.tol * float(np.mean((upper - lower) ** 2)) / 12.0
    best = None
    for start in starts:
        iteration = NoisyIteration(model, runtime, adder, plan)
        centers, n_iter = model._lloyd(
            runtime, iteration, np.array(start, dtype=np.float64), everyone, tol
        )
        inertia = _private_inertia(
            model, runtime, adder, plan, centers, everyone, output=len(starts) == 1
        )
        if best is None or inertia < best[0]:
            best = (inertia, centers, n_iter, start)
    model.inertia_, model.cluster_centers_, model.n_iter_, start = best
    model.init_centers_ = np.array(start, dtype=np.float64)
    # Bounds read from the data are a release no accountant covers: no
    # (epsilon, delta) can be claimed for the fit.
    model.privacy_spent_ = None if model.bounds is None else plan.accountant.spent()
    if len(starts) > 1:
        runtime.broadcast(model.cluster_centers_, tag=TAG_CENTERS, clients=everyone)
        runtime.stage("client step: nearest-center labels")
        runtime.run(fedkmeans_final_labels, tag="labels", clients=everyone)


def _noisy_sum(model, plan, adder, step, tag, bounds, clients, **public):
    """A noisy sum over ``clients``; too few answers end the fit."""
    total, survivors = plan.noisy_sum(
        adder, step, tag=tag, bounds=bounds, clients=clients, **public
    )
    model._check_survivors(tag, clients, survivors)
    return total, survivors


def _private_random_starts(model, runtime, adder, plan, clients, random_state):
    """Gaussian starts around the private mean, with the private per-feature variance."""
    n_c = model._max_size(runtime, clients)
    half = float(np.max(plan.upper - plan.lower)) / 2
    bounds = [
        _MARGIN * (n_c * half + _NOISE_HEADROOM * plan.sigma_moment_sums),
        _MARGIN * (n_c * half**2 + _NOISE_HEADROOM * plan.sigma_moment_squares),
    ]
    plan.charge("column sums")
    plan.charge("column sums of squares")
    runtime.stage("client step: private moments of the pooled rows")
    (sums, squares), survivors = _noisy_sum(
        model,
        plan,
        adder,
        fedkmeans_dp_moments,
        "private moments",
        bounds,
        clients,
        sigma_sums=plan.sigma_moment_sums,
        sigma_squares=plan.sigma_moment_squares,
        noise_share=client_noise_share(model, clients),
    )
    # The number of rows is public under replace-one neighbours.
    n = float(np.sum(np.asarray(runtime.client_sizes)[survivors]))
    shift = sums / n
    mean = plan.midpoint + shift
    variance = np.clip(squares / n - shift**2, 0.0, ((plan.upper - plan.lower) / 2) ** 2)
    k = model.n_clusters
    return [
        plan.clip_centers(mean + np.sqrt(variance) * random_state.standard_normal((k, len(mean))))
        for _ in range(model.n_init)
    ]


def _private_inertia(model, runtime, adder, plan, centers, active, output):
    n_c = model._max_size(runtime, active)
    runtime.broadcast(centers, tag=TAG_CENTERS, clients=active)
    bound = _MARGIN * (n_c * plan.diagonal**2 + _NOISE_HEADROOM * plan.sigma_inertia)
    plan.charge("inertia")
    runtime.stage("client step: noisy inertia" + (" and labels" if output else ""))
    total, _ = _noisy_sum(
        model,
        plan,
        adder,
        fedkmeans_dp_inertia,
        "noisy inertia",
        [bound],
        active,
        sigma=plan.sigma_inertia,
        noise_share=client_noise_share(model, active),
        output=output,
    )
    # A noisy sum of squares may come out negative; zero is the nearest inertia.
    return max(float(total[0]), 0.0)
