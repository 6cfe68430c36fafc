"""Exact calibration and accounting of the Gaussian mechanism, on Google's ``dp-accounting``.

A Gaussian release of a quantity with L2 sensitivity ``Delta`` and noise
``N(0, sigma**2 I)`` is ``mu``-Gaussian differentially private with
``mu = Delta / sigma`` (Dong, Roth and Su, "Gaussian differential privacy",
JRSS-B 2022), and ``k`` such releases compose into ``mu = sqrt(sum_i
(Delta_i / sigma_i)**2)`` exactly. ``mu``-GDP is ``(epsilon, delta)``-DP for
exactly the ``delta(epsilon)`` of one Gaussian mechanism with noise multiplier
``1 / mu`` (Balle and Wang, "Improving the Gaussian mechanism for
differential privacy", ICML 2018), which ``dp_accounting.gaussian_mechanism``
computes (and inverts) to numerical precision. Nothing here uses the classical
bound ``sigma = sqrt(2 ln(1.25 / delta)) Delta / epsilon``, which holds only
for ``epsilon < 1``.

The neighbouring relation says which data sets are neighbours: with
``"replace-one"`` a neighbour has one row replaced by any other; with
``"add-remove"`` one row added or removed. A mechanism's sensitivity is
computed for the relation of its accountant, and counts (cluster sizes) are
releases too under ``"add-remove"``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

__all__ = [
    "NEIGHBOURING_RELATIONS",
    "BudgetError",
    "PrivacyAccountant",
    "PrivacyLeakWarning",
    "Release",
    "gaussian_epsilon",
    "gaussian_sigma",
]

NEIGHBOURING_RELATIONS = ("replace-one", "add-remove")


class BudgetError(ValueError):
    """A release that would take the spent privacy past the accountant's budget."""


class PrivacyLeakWarning(RuntimeWarning):
    """A differentially private fit that releases something its guarantee does not cover.

    Raised, as diffprivlib does, when the public bounds a mechanism needs are
    taken from the data: the bounds themselves then tell the server about the
    extreme rows, outside the ``(epsilon, delta)`` guarantee.
    """


def _gaussian():
    from dp_accounting import gaussian_mechanism  # a dependency, imported on first use

    return gaussian_mechanism


def _quietly(function, *args):
    # At extreme budgets dp_accounting takes the log of an underflowed
    # difference on its way to the right answer; its warning says nothing.
    with np.errstate(divide="ignore", over="ignore", under="ignore"):
        return function(*args)


#: The largest epsilon the helpers take: far beyond any meaningful guarantee
#: (1e5 is the package's "no noise to speak of"), and where the analytic
#: calibration is still exact.
MAX_EPSILON = 1e8
#: The largest sensitivity / sigma ratio an accountant composes (mu); a
#: larger one is no noise at all and overflows mu squared.
MAX_MU = 1e100


def _check(value, name, *, low=0.0, high=math.inf, strict_low=True, strict_high=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    if math.isinf(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    too_low = value <= low if strict_low else value < low
    too_high = value >= high if strict_high else value > high
    if too_low or too_high:
        left = "(" if strict_low else "["
        right = ")" if strict_high or high == math.inf else "]"
        raise ValueError(f"{name} must be in {left}{low:g}, {high:g}{right}, got {value!r}")
    return float(value)


def gaussian_sigma(sensitivity, epsilon, delta, compositions=1):
    """The smallest noise that makes ``compositions`` Gaussian releases (epsilon, delta)-DP.

    Exact accounting: the releases compose into one Gaussian mechanism with
    noise multiplier ``sigma / (sensitivity sqrt(compositions))``, calibrated
    with the analytic Gaussian mechanism of Balle and Wang (2018) through
    ``dp_accounting``. Valid at every ``epsilon > 0``.

    Parameters
    ----------
    sensitivity : float
        L2 sensitivity of each release (> 0).
    epsilon : float
        Target epsilon (> 0).
    delta : float
        Target delta, in (0, 1).
    compositions : int, default=1
        Number of releases of that sensitivity, each with the returned noise.

    Returns
    -------
    sigma : float
        Standard deviation of the Gaussian noise of every release.

    Examples
    --------
    >>> from skfedclust.secure import gaussian_sigma
    >>> round(gaussian_sigma(1.0, 1.0, 1e-5), 2)
    3.73
    >>> round(gaussian_sigma(1.0, 1.0, 1e-5, compositions=4) / gaussian_sigma(1.0, 1.0, 1e-5), 6)
    2.0
    """
    sensitivity = _check(sensitivity, "sensitivity")
    epsilon = check_epsilon(epsilon)
    delta = _check(delta, "delta", high=1.0, strict_high=True)
    compositions = _check_count(compositions, "compositions")
    multiplier = _quietly(_gaussian().get_sigma_gaussian, epsilon, delta)
    sigma = float(multiplier * sensitivity * math.sqrt(compositions))
    if not math.isfinite(sigma):
        raise ValueError(
            f"the noise for sensitivity={sensitivity:g} over {compositions} releases overflows "
            "float64: rescale the data (smaller bounds)"
        )
    return sigma


def check_epsilon(epsilon, name="epsilon"):
    """``epsilon`` as a float, or a clear error: finite, in ``(0, MAX_EPSILON]``."""
    return _check(epsilon, name, high=MAX_EPSILON)


def _check_count(count, name):
    if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
        raise ValueError(f"{name} must be an int >= 1, got {count!r}")
    return int(count)


def gaussian_epsilon(mu, delta):
    """The epsilon at ``delta`` of a ``mu``-GDP mechanism (0 for ``mu = 0``)."""
    mu = _check(mu, "mu", strict_low=False, high=MAX_MU)
    delta = _check(delta, "delta", high=1.0, strict_high=True)
    if mu == 0:
        return 0.0
    return float(_quietly(_gaussian().get_epsilon_gaussian, 1.0 / mu, delta))


@dataclass(frozen=True)
class Release:
    """One Gaussian release charged to an accountant.

    Attributes
    ----------
    what : str
        What was released (a name for the record).
    sensitivity : float
        Its L2 sensitivity under the accountant's neighbouring relation.
    sigma : float
        Its noise standard deviation.
    count : int
        Number of releases of that kind.
    """

    what: str
    sensitivity: float
    sigma: float
    count: int = 1

    @property
    def mu_squared(self):
        return self.count * (self.sensitivity / self.sigma) ** 2


class PrivacyAccountant:
    """What a fit's differentially private releases have spent, and a budget to stay under.

    Every Gaussian release is charged with its sensitivity and noise; the
    spent privacy is the exact composition (``mu``-GDP), reported as
    ``(epsilon, delta)`` at the accountant's ``delta``. With a budget,
    a charge that would exceed it raises :class:`BudgetError` before the
    release is made. Estimators charge their accountant and read
    ``privacy_spent_`` from it; diffprivlib's ``BudgetAccountant`` plays the
    same part for its models.

    Parameters
    ----------
    epsilon : float or None, default=None
        Budget; ``None`` records without a limit.
    delta : float, default=1e-5
        The delta at which the spent epsilon is reported and the budget held.
    neighbouring : {"replace-one", "add-remove"}, default="replace-one"
        Which data sets are neighbours; sensitivities are charged for it.

    Attributes
    ----------
    releases : list of Release
        Every release charged, in order.

    Examples
    --------
    >>> from skfedclust.secure import PrivacyAccountant, gaussian_sigma
    >>> acc = PrivacyAccountant(epsilon=2.0, delta=1e-5)
    >>> sigma = gaussian_sigma(1.0, 2.0, 1e-5, compositions=10)
    >>> acc.charge("sums", sensitivity=1.0, sigma=sigma, count=10)
    >>> round(acc.spent()[0], 6)
    2.0
    """

    def __init__(self, epsilon=None, delta=1e-5, neighbouring="replace-one"):
        if epsilon is not None:
            epsilon = check_epsilon(epsilon)
        self.epsilon = epsilon
        self.delta = _check(delta, "delta", high=1.0, strict_high=True)
        if neighbouring not in NEIGHBOURING_RELATIONS:
            raise ValueError(
                f"neighbouring must be one of {NEIGHBOURING_RELATIONS}, got {neighbouring!r}"
            )
        self.neighbouring = neighbouring
        self.releases = []

    @property
    def mu(self):
        """The ``mu`` of everything charged so far (composition of Gaussians is exact)."""
        return math.sqrt(sum(r.mu_squared for r in self.releases))

    def spent(self, delta=None):
        """``(epsilon, delta)`` spent so far, at ``delta`` (default: the accountant's)."""
        delta = self.delta if delta is None else delta
        return gaussian_epsilon(self.mu, delta), float(delta)

    def remaining_mu(self):
        """How much ``mu`` the budget still allows (``inf`` without a budget)."""
        if self.epsilon is None:
            return math.inf
        total = 1.0 / _quietly(_gaussian().get_sigma_gaussian, self.epsilon, self.delta)
        return math.sqrt(max(total**2 - self.mu**2, 0.0))

    def charge(self, what, *, sensitivity, sigma, count=1):
        """Record ``count`` Gaussian releases; refuse them if they break the budget.

        ``sensitivity`` and ``sigma`` are finite and > 0, ``count`` an int >= 1
        (a count below 1 would refund budget); a clear :class:`ValueError`
        otherwise, before anything is recorded.
        """
        sensitivity = _check(sensitivity, "sensitivity")
        sigma = _check(sigma, "sigma")
        count = _check_count(count, "count")
        if sensitivity / sigma > MAX_MU / math.sqrt(count):
            raise ValueError(
                f"sigma={sigma:g} for sensitivity={sensitivity:g} is no noise at all (mu above "
                f"{MAX_MU:g}); refusing to account it"
            )
        release = Release(str(what), sensitivity, sigma, count)
        if self.epsilon is not None:
            mu = math.sqrt(self.mu**2 + release.mu_squared)
            epsilon = gaussian_epsilon(mu, self.delta)
            if epsilon > self.epsilon * (1 + 1e-9):
                raise BudgetError(
                    f"releasing {what!r} would spend epsilon={epsilon:.6g} at delta={self.delta:g},"
                    f" over the budget epsilon={self.epsilon:g}"
                )
        self.releases.append(release)

    def __repr__(self):
        epsilon, delta = self.spent()
        return (
            f"PrivacyAccountant(spent epsilon={epsilon:.4g} at delta={delta:g}, "
            f"budget={self.epsilon}, neighbouring={self.neighbouring!r}, "
            f"releases={len(self.releases)})"
        )
