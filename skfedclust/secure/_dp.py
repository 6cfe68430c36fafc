"""Differential privacy by the Gaussian mechanism: noise scales, clipping, composition.

The building blocks of the privacy-enhanced variants of FedSC (Qiao, Ding &
Fan, "Federated Spectral Clustering via Secure Similarity Reconstruction",
NeurIPS 2023, Section 3), usable by any method:

* the classical Gaussian mechanism (Dwork & Roth 2014, Theorem 3.22): noise of
  standard deviation ``c * sensitivity / epsilon`` with
  ``c**2 > 2 ln(1.25 / delta)``, valid for ``epsilon < 1``;
* the noise of ``n`` adaptively composed Gaussian releases,
  ``sqrt(8 n sensitivity**2 log(e + epsilon / delta)) / epsilon`` (the
  accounting of FedSC Lemma J.2, after Kairouz, Oh & Viswanath 2015), and the
  basic composition of several budgets (Dwork & Roth, Theorem 3.16);
* clipping of rows or columns to a norm bound, which is what makes the
  sensitivities finite;
* the calibrations of FedSC: noise on the raw data (Proposition 3.7) and noise
  on the uploaded factors (Theorem 3.9), and the relative "noise ratio" of the
  paper's experiments, which has no formal guarantee.

Every function is pure: scales are computed from public constants, and noise is
drawn from a caller-supplied ``random_state``.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import NamedTuple

import numpy as np
from sklearn.utils import check_random_state

__all__ = [
    "FactorNoiseScales",
    "add_gaussian_noise",
    "basic_composition",
    "clip_columns",
    "clip_rows",
    "coef_sensitivity",
    "composed_gaussian_scale",
    "data_noise_scale",
    "dictionary_sensitivity",
    "factor_noise_scales",
    "gaussian_noise_multiplier",
    "gaussian_noise_scale",
    "relative_noise_scale",
]

#: ``c`` must exceed ``sqrt(2 ln(1.25 / delta))`` strictly; this factor makes
#: the inequality strict without a visible change of the scale.
_STRICT = 1.0 + 1e-12


# --------------------------------------------------------------------------- #
# Validation
# --------------------------------------------------------------------------- #
def _check_clip_norm(clip_norm):
    if clip_norm is None:
        raise ValueError(
            "clip_norm is required: the guarantee needs a public bound on every sample "
            "norm (the data cannot provide it without spending privacy); clip the "
            "samples to it with clip_rows."
        )
    return _check_positive(clip_norm, "clip_norm")


def _check_epsilon(epsilon, name="epsilon"):
    if (
        not isinstance(epsilon, numbers.Real)
        or isinstance(epsilon, bool)
        or not math.isfinite(epsilon)
        or epsilon <= 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {epsilon!r}.")
    return float(epsilon)


def _check_delta(delta, name="delta"):
    if not isinstance(delta, numbers.Real) or isinstance(delta, bool) or not 0 < delta < 1:
        raise ValueError(f"{name} must lie in the open interval (0, 1), got {delta!r}.")
    return float(delta)


def _check_positive(value, name, *, allow_zero=False):
    if value is None:
        raise ValueError(f"{name} is required, got None.")
    if (
        not isinstance(value, numbers.Real)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not allow_zero)
    ):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}.")
    return float(value)


# --------------------------------------------------------------------------- #
# Gaussian mechanism and composition
# --------------------------------------------------------------------------- #
def gaussian_noise_multiplier(delta):
    """Factor ``c`` of the classical Gaussian mechanism, ``c**2 > 2 ln(1.25 / delta)``.

    Parameters
    ----------
    delta : float
        Privacy parameter, in the open interval (0, 1).

    Returns
    -------
    c : float
        ``sqrt(2 ln(1.25 / delta))``, enlarged by a relative ``1e-12`` so that
        the inequality of Dwork & Roth (2014, Theorem 3.22) holds strictly.

    Examples
    --------
    >>> from skfedclust.secure import gaussian_noise_multiplier
    >>> round(gaussian_noise_multiplier(1e-5), 5)
    4.84481
    """
    delta = _check_delta(delta)
    return math.sqrt(2.0 * math.log(1.25 / delta)) * _STRICT


def gaussian_noise_scale(sensitivity, epsilon, delta):
    """Standard deviation of the classical Gaussian mechanism.

    Adding i.i.d. ``N(0, sigma**2)`` noise to a release of l2 sensitivity
    ``sensitivity`` is ``(epsilon, delta)``-differentially private for
    ``sigma = c * sensitivity / epsilon``, ``c**2 > 2 ln(1.25 / delta)``
    (Dwork & Roth 2014, Theorem 3.22).

    Parameters
    ----------
    sensitivity : float
        l2 sensitivity of the released quantity (> 0).
    epsilon : float
        Privacy parameter (> 0). The theorem is proved for ``epsilon < 1``; a
        larger value gives a scale but a ``UserWarning`` that the guarantee
        does not follow from the theorem.
    delta : float
        Privacy parameter in (0, 1).

    Returns
    -------
    sigma : float
        The noise standard deviation.

    Examples
    --------
    >>> from skfedclust.secure import gaussian_noise_scale
    >>> round(gaussian_noise_scale(2.0, 0.5, 1e-5), 4)
    19.3792
    """
    sensitivity = _check_positive(sensitivity, "sensitivity")
    epsilon = _check_epsilon(epsilon)
    c = gaussian_noise_multiplier(delta)
    if epsilon >= 1:
        warnings.warn(
            f"epsilon={epsilon:g} >= 1: the classical Gaussian mechanism (Dwork & Roth, "
            "Theorem 3.22) is proved only for epsilon < 1, so the returned scale does not "
            "carry a proven (epsilon, delta) guarantee.",
            UserWarning,
            stacklevel=2,
        )
    return c * sensitivity / epsilon


def composed_gaussian_scale(sensitivity, epsilon, delta, n_compositions):
    """Noise scale for ``n_compositions`` adaptive Gaussian releases within one budget.

    ``sigma = sqrt(8 n sensitivity**2 log(e + epsilon / delta)) / epsilon``:
    adding ``N(0, sigma**2)`` noise to each of ``n`` adaptively chosen releases
    of l2 sensitivity ``sensitivity`` makes the whole sequence
    ``(epsilon, delta)``-differentially private (the per-round accounting of
    FedSC, Qiao et al. 2023, Lemma J.2, by the composition theorem of Kairouz,
    Oh & Viswanath 2015). Valid for any ``epsilon > 0``.

    Parameters
    ----------
    sensitivity : float
        l2 sensitivity of one release (> 0).
    epsilon : float
        Total privacy parameter of the sequence (> 0).
    delta : float
        Total privacy parameter of the sequence, in (0, 1).
    n_compositions : int
        Number of releases (>= 1), e.g. communication rounds.

    Returns
    -------
    sigma : float
        The noise standard deviation of every release.

    Examples
    --------
    >>> from skfedclust.secure import composed_gaussian_scale
    >>> round(composed_gaussian_scale(1.0, 1.0, 1e-5, 20), 3)
    42.919
    """
    sensitivity = _check_positive(sensitivity, "sensitivity")
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    if (
        not isinstance(n_compositions, numbers.Integral)
        or isinstance(n_compositions, bool)
        or n_compositions < 1
    ):
        raise ValueError(f"n_compositions must be an integer >= 1, got {n_compositions!r}.")
    variance = 8.0 * n_compositions * sensitivity**2 * math.log(math.e + epsilon / delta)
    return math.sqrt(variance) / epsilon


def basic_composition(*budgets):
    """Total budget of several mechanisms run on the same data.

    Budgets add up: ``(sum epsilon_i, sum delta_i)`` (Dwork & Roth 2014,
    Theorem 3.16).

    Parameters
    ----------
    *budgets : tuple of (float, float)
        ``(epsilon, delta)`` of each mechanism.

    Returns
    -------
    epsilon, delta : tuple of float
        The composed budget.

    Examples
    --------
    >>> from skfedclust.secure import basic_composition
    >>> basic_composition((0.5, 1e-5), (0.5, 1e-5))
    (1.0, 2e-05)
    """
    if not budgets:
        raise ValueError("basic_composition needs at least one (epsilon, delta) budget.")
    epsilons = [_check_epsilon(eps) for eps, _ in budgets]
    deltas = [_check_delta(delta) for _, delta in budgets]
    return math.fsum(epsilons), math.fsum(deltas)


def add_gaussian_noise(X, scale, *, random_state=None):
    """Copy of ``X`` plus i.i.d. ``N(0, scale**2)`` noise on every entry.

    Parameters
    ----------
    X : array-like
        The release.
    scale : float
        Noise standard deviation (>= 0; 0 returns an unperturbed copy).
    random_state : int, RandomState instance, numpy.random.Generator or None, default=None
        Source of the noise.

    Returns
    -------
    X_noisy : ndarray of float64, same shape as ``X``
        The perturbed copy; ``X`` is not modified.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.secure import add_gaussian_noise
    >>> noisy = add_gaussian_noise(np.zeros((2, 3)), 0.1, random_state=0)
    >>> noisy.shape
    (2, 3)
    """
    scale = _check_positive(scale, "scale", allow_zero=True)
    X = np.array(X, dtype=np.float64)
    if scale > 0:
        rng = (
            random_state
            if isinstance(random_state, np.random.Generator)
            else check_random_state(random_state)
        )
        X += rng.normal(0.0, scale, size=X.shape)
    return X


# --------------------------------------------------------------------------- #
# Clipping
# --------------------------------------------------------------------------- #
def _clip_along(X, max_norm, axis):
    max_norm = _check_positive(max_norm, "max_norm")
    X = np.array(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"Expected a 2D array, got shape {X.shape}.")
    norms = np.linalg.norm(X, axis=axis, keepdims=True)
    # Rows already inside the ball are left exactly as they are.
    factor = np.minimum(1.0, max_norm / np.maximum(norms, np.finfo(np.float64).tiny))
    return X * factor


def clip_rows(X, max_norm):
    """Rescale every row of ``X`` whose l2 norm exceeds ``max_norm`` onto that norm.

    Clipping bounds the contribution of one sample, which is what gives a
    mechanism a finite sensitivity. Directions are preserved.

    Parameters
    ----------
    X : array-like of shape (n_rows, n_columns)
        The matrix, one sample (or dictionary atom) per row.
    max_norm : float
        The bound (> 0).

    Returns
    -------
    X_clipped : ndarray of shape (n_rows, n_columns)
        A clipped copy.

    Examples
    --------
    >>> from skfedclust.secure import clip_rows
    >>> clip_rows([[3.0, 4.0], [0.3, 0.4]], 1.0)
    array([[0.6, 0.8],
           [0.3, 0.4]])
    """
    return _clip_along(X, max_norm, axis=1)


def clip_columns(X, max_norm):
    """Rescale every column of ``X`` whose l2 norm exceeds ``max_norm`` onto that norm.

    The column form of :func:`clip_rows`, for matrices that store one sample
    per column, such as FedSC's coefficient matrices.

    Parameters
    ----------
    X : array-like of shape (n_rows, n_columns)
        The matrix, one sample per column.
    max_norm : float
        The bound (> 0).

    Returns
    -------
    X_clipped : ndarray of shape (n_rows, n_columns)
        A clipped copy.

    Examples
    --------
    >>> from skfedclust.secure import clip_columns
    >>> clip_columns([[3.0, 0.3], [4.0, 0.4]], 1.0)
    array([[0.6, 0.3],
           [0.8, 0.4]])
    """
    return _clip_along(X, max_norm, axis=0)


# --------------------------------------------------------------------------- #
# FedSC calibrations
# --------------------------------------------------------------------------- #
def data_noise_scale(epsilon, delta, clip_norm):
    """Noise on the raw data for ``(epsilon, delta)``-DP FedSC (perturbed data).

    Every client clips its samples to norm ``clip_norm`` (``tau_X``) and adds
    ``N(0, sigma**2)`` noise to every entry once, before anything else; two
    neighbouring data sets then differ by at most ``2 tau_X`` in l2, and
    everything computed afterwards is post-processing. The scale is
    ``sigma = 2 c tau_X / epsilon`` (Qiao et al. 2023, Proposition 3.7).

    Parameters
    ----------
    epsilon : float
        Privacy parameter (> 0; the proof needs ``epsilon < 1``).
    delta : float
        Privacy parameter in (0, 1).
    clip_norm : float
        Public bound ``tau_X`` on the norm of every sample (> 0).

    Returns
    -------
    sigma : float
        The noise standard deviation.

    Examples
    --------
    >>> from skfedclust.secure import data_noise_scale
    >>> round(data_noise_scale(0.5, 1e-5, 1.0), 4)
    19.3792
    """
    clip_norm = _check_clip_norm(clip_norm)
    return gaussian_noise_scale(2.0 * clip_norm, epsilon, delta)


def coef_sensitivity(*, clip_norm, bandwidth, n_components, lam, max_distance=None):
    """l2 sensitivity of one sample's FedSC coefficient vector.

    ``c = (K(Z, Z) + lam I)^-1 k(Z, x)`` changes by at most
    ``||G||_2 ||k(Z, x) - k(Z, x')||_2 <= 2 sqrt(d) tau_X (tau_X + Upsilon) / (lam r**2)``
    when one sample ``x`` is replaced by ``x'`` (Qiao et al. 2023, Lemma J.1).

    Parameters
    ----------
    clip_norm : float
        Bound ``tau_X`` on every sample norm (> 0).
    bandwidth : float
        Public kernel bandwidth ``r`` (> 0).
    n_components : int
        Dictionary size ``d``.
    lam : float
        Ridge penalty ``lambda`` (> 0).
    max_distance : float, default=None
        Bound ``Upsilon`` on every atom-to-sample distance. ``None`` takes
        ``2 tau_X``, which holds when the clients clip the received atoms to
        norm ``tau_X`` as well.

    Returns
    -------
    sensitivity : float

    Examples
    --------
    >>> from skfedclust.secure import coef_sensitivity
    >>> round(coef_sensitivity(clip_norm=1.0, bandwidth=1.0, n_components=10, lam=0.01), 2)
    1897.37
    """
    tau_x = _check_clip_norm(clip_norm)
    r = _check_positive(bandwidth, "bandwidth")
    d = _check_n_components(n_components)
    lam = _check_positive(lam, "lam")
    upsilon = 2.0 * tau_x if max_distance is None else _check_positive(max_distance, "max_distance")
    return 2.0 * math.sqrt(d) * tau_x * (tau_x + upsilon) / (lam * r**2)


def dictionary_sensitivity(
    *,
    clip_norm,
    bandwidth,
    n_components,
    learning_rate,
    coef_bound,
    dictionary_bound=None,
    max_distance=None,
):
    """l2 sensitivity of one client's dictionary after one gradient step.

    ``Delta = (2 eta sqrt(d) tau_C tau_X / r**2) (1 + (tau_X + tau_Z)(tau_X + Upsilon) / r**2)``,
    the bound of Qiao et al. (2023, Lemma J.2) for one local step
    ``Z - eta grad_Z f_p`` with a fixed step size ``eta``.

    Parameters
    ----------
    clip_norm : float
        Bound ``tau_X`` on every sample norm (> 0).
    bandwidth : float
        Public kernel bandwidth ``r`` (> 0).
    n_components : int
        Dictionary size ``d``.
    learning_rate : float
        The fixed step size ``eta`` (> 0). A data-dependent step is not covered.
    coef_bound : float
        Bound ``tau_C`` on every coefficient column norm (> 0); ``sqrt(d) / lam``
        always holds.
    dictionary_bound : float, default=None
        Bound ``tau_Z`` on the spectral norm of every dictionary. ``None`` takes
        ``sqrt(d) tau_X``, which holds when every atom is clipped to norm
        ``tau_X``.
    max_distance : float, default=None
        Bound ``Upsilon`` on every atom-to-sample distance; ``None`` takes
        ``2 tau_X``.

    Returns
    -------
    sensitivity : float

    Examples
    --------
    >>> from skfedclust.secure import dictionary_sensitivity
    >>> delta = dictionary_sensitivity(clip_norm=1.0, bandwidth=1.0, n_components=10,
    ...                                learning_rate=0.1, coef_bound=10**0.5 / 0.01)
    >>> round(delta, 2)
    2697.37
    """
    tau_x = _check_clip_norm(clip_norm)
    r = _check_positive(bandwidth, "bandwidth")
    d = _check_n_components(n_components)
    eta = _check_learning_rate(learning_rate)
    tau_c = _check_positive(coef_bound, "coef_bound")
    tau_z = (
        math.sqrt(d) * tau_x
        if dictionary_bound is None
        else _check_positive(dictionary_bound, "dictionary_bound")
    )
    upsilon = 2.0 * tau_x if max_distance is None else _check_positive(max_distance, "max_distance")
    prefactor = 2.0 * eta * math.sqrt(d) * tau_c * tau_x / r**2
    return prefactor * (1.0 + (tau_x + tau_z) * (tau_x + upsilon) / r**2)


def _check_n_components(n_components):
    if (
        not isinstance(n_components, numbers.Integral)
        or isinstance(n_components, bool)
        or n_components < 1
    ):
        raise ValueError(f"n_components must be an integer >= 1, got {n_components!r}.")
    return int(n_components)


def _check_learning_rate(learning_rate):
    if not isinstance(learning_rate, numbers.Real) or isinstance(learning_rate, bool):
        raise ValueError(
            "The privacy guarantee covers one gradient step of a fixed, data-independent "
            f"size: learning_rate must be a float > 0, got {learning_rate!r}."
        )
    return _check_positive(learning_rate, "learning_rate")


class FactorNoiseScales(NamedTuple):
    """Calibrated noise of FedSC with perturbed factors (see :func:`factor_noise_scales`)."""

    #: Standard deviation of the noise on every uploaded dictionary, every round.
    dictionary: float
    #: Standard deviation of the noise on the final coefficients.
    coef: float
    #: (epsilon, delta) spent on the dictionaries, all rounds together.
    dictionary_budget: tuple
    #: (epsilon, delta) spent on the coefficients.
    coef_budget: tuple
    #: Total (epsilon, delta), by basic composition.
    total_budget: tuple


def factor_noise_scales(
    epsilon,
    delta,
    *,
    clip_norm,
    bandwidth,
    n_components,
    lam,
    n_rounds,
    learning_rate,
    epsilon_split=0.5,
    coef_clip=None,
):
    """Noise scales of ``(epsilon, delta)``-DP FedSC with perturbed factors.

    Calibrates Theorem 3.9 of Qiao et al. (2023) under the clipping protocol
    that makes its assumptions hold with public constants only:

    * every client clips its samples and the atoms it receives to norm
      ``clip_norm = tau_X``, so every atom-to-sample distance is at most
      ``Upsilon = 2 tau_X``; it clips the atoms again after its local step,
      so each uploaded dictionary has spectral norm at most
      ``tau_Z = sqrt(d) tau_X``;
    * every coefficient column satisfies ``||c|| <= sqrt(d) / lam``; with
      ``coef_clip`` the columns used in the gradient are clipped further and
      ``tau_C = min(coef_clip, sqrt(d) / lam)``;
    * the local step is one gradient step of fixed size ``learning_rate``.

    The budget is split as ``epsilon_Z = epsilon_split * epsilon``,
    ``epsilon_C = (1 - epsilon_split) * epsilon``, and ``delta`` likewise. The
    dictionaries get the noise of ``n_rounds`` composed releases
    (:func:`composed_gaussian_scale`), the final coefficients one classical
    Gaussian release (:func:`gaussian_noise_scale`), and the two budgets add up.

    Parameters
    ----------
    epsilon : float
        Total privacy parameter (> 0).
    delta : float
        Total privacy parameter in (0, 1).
    clip_norm : float
        Public sample and atom norm bound ``tau_X`` (> 0). Required.
    bandwidth : float
        Public kernel bandwidth ``r`` (> 0). A bandwidth computed from the
        private data is not covered by the guarantee.
    n_components : int
        Dictionary size ``d``.
    lam : float
        Ridge penalty (> 0).
    n_rounds : int
        Number of rounds in which every client uploads a dictionary.
    learning_rate : float
        Fixed step size of the local gradient step (> 0).
    epsilon_split : float, default=0.5
        Share of the budget spent on the dictionaries, in (0, 1).
    coef_clip : float, default=None
        Column-norm bound of the coefficients used in the gradient.

    Returns
    -------
    scales : FactorNoiseScales
        Named tuple ``(dictionary, coef, dictionary_budget, coef_budget,
        total_budget)``: the two standard deviations and the budgets they
        spend.

    Examples
    --------
    >>> import warnings
    >>> from skfedclust.secure import factor_noise_scales
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # epsilon_C = 1 is outside the proof's range
    ...     s = factor_noise_scales(2.0, 2e-5, clip_norm=1.0, bandwidth=1.0,
    ...                             n_components=10, lam=0.01, n_rounds=20,
    ...                             learning_rate=0.1)
    >>> round(s.dictionary, 1), round(s.coef, 2)
    (115769.3, 9192.37)
    >>> s.total_budget
    (2.0, 2e-05)
    """
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    if (
        not isinstance(epsilon_split, numbers.Real)
        or isinstance(epsilon_split, bool)
        or not 0 < epsilon_split < 1
    ):
        raise ValueError(f"epsilon_split must lie in (0, 1), got {epsilon_split!r}.")
    tau_x = _check_clip_norm(clip_norm)
    d = _check_n_components(n_components)
    lam = _check_positive(lam, "lam")
    tau_c = math.sqrt(d) / lam
    if coef_clip is not None:
        tau_c = min(tau_c, _check_positive(coef_clip, "coef_clip"))

    budget_z = (epsilon_split * epsilon, epsilon_split * delta)
    budget_c = ((1.0 - epsilon_split) * epsilon, (1.0 - epsilon_split) * delta)
    sensitivity_z = dictionary_sensitivity(
        clip_norm=tau_x,
        bandwidth=bandwidth,
        n_components=d,
        learning_rate=learning_rate,
        coef_bound=tau_c,
    )
    sensitivity_c = coef_sensitivity(clip_norm=tau_x, bandwidth=bandwidth, n_components=d, lam=lam)
    sigma_z = composed_gaussian_scale(sensitivity_z, *budget_z, n_rounds)
    sigma_c = gaussian_noise_scale(sensitivity_c, *budget_c)
    return FactorNoiseScales(
        dictionary=sigma_z,
        coef=sigma_c,
        dictionary_budget=budget_z,
        coef_budget=budget_c,
        total_budget=basic_composition(budget_z, budget_c),
    )


def relative_noise_scale(X, ratio):
    """Noise scale relative to the spread of a matrix: ``ratio * std(X)``.

    The "noise ratio" of the FedSC experiments (Qiao et al. 2023, Appendix
    D.4): a client perturbs its dictionary (every round) or its coefficients
    (once) with noise proportional to the population standard deviation
    (``ddof=0``) over all entries of its own matrix. It gives no formal
    differential-privacy guarantee.

    Parameters
    ----------
    X : array-like
        The client's own matrix.
    ratio : float
        Noise-to-spread ratio (>= 0).

    Returns
    -------
    sigma : float

    Examples
    --------
    >>> from skfedclust.secure import relative_noise_scale
    >>> float(relative_noise_scale([[0.0, 2.0], [0.0, 2.0]], 0.1))
    0.1
    """
    ratio = _check_positive(ratio, "ratio", allow_zero=True)
    return ratio * float(np.std(np.asarray(X, dtype=np.float64)))
