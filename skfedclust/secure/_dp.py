"""Differential privacy by the Gaussian mechanism: FedSC's sensitivities and noise.

The privacy-enhanced variants of FedSC (Qiao, Ding & Fan, "Federated Spectral
Clustering via Secure Similarity Reconstruction", NeurIPS 2023, Section 3),
with sensitivities proved for the protocol as it runs and noise calibrated by
exact accounting:

* clipping of rows or columns to a norm bound (:func:`clip_rows`,
  :func:`clip_columns`) and Gaussian noise (:func:`add_gaussian_noise`);
* the L2 sensitivities of FedSC's releases between data sets that differ in
  one replaced row: a perturbed row (``2 tau_X``), a coefficient vector
  (:func:`coef_sensitivity`, ``2 tau_C`` with
  ``tau_C = min(1 / sqrt(lam), coef_clip)``) and a dictionary after one
  gradient step of size ``eta`` (:func:`dictionary_sensitivity`,
  ``eta / (r sqrt(lam))``, a per-sample bound that accounts for the
  coefficients being re-solved from the same rows);
* the calibrations (:func:`data_noise_scale`, :func:`factor_noise_scales`):
  the smallest noise whose releases, composed exactly as Gaussian mechanisms
  (``mu``-GDP, Dong, Roth & Su 2022; :func:`~skfedclust.secure.gaussian_sigma`),
  are ``(epsilon, delta)``-DP, at every ``epsilon``. The classical bound
  ``sigma = sqrt(2 ln(1.25 / delta)) Delta / epsilon`` of the paper holds only
  for ``epsilon < 1`` and is not used;
* the relative "noise ratio" of the paper's experiments, which has no formal
  guarantee (:func:`relative_noise_scale`).

The proofs are in the Privacy page of the user guide. Every function is pure:
scales are computed from public constants, and noise is drawn from a
caller-supplied ``random_state``.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np
from sklearn.utils import check_random_state

from ..node._accounting import gaussian_sigma

__all__ = [
    "FactorNoiseScales",
    "add_gaussian_noise",
    "clip_columns",
    "clip_rows",
    "coef_norm_bound",
    "coef_sensitivity",
    "data_noise_scale",
    "dictionary_sensitivity",
    "factor_noise_scales",
    "relative_noise_scale",
]


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
# Noise and clipping
# --------------------------------------------------------------------------- #
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
    # A zero row (norm below max_norm / huge) stays as it is, without overflow.
    with np.errstate(over="ignore"):
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
# FedSC: sensitivities and calibrations
# --------------------------------------------------------------------------- #
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


def coef_norm_bound(*, lam, n_components=None, coef_clip=None):
    """Bound ``tau_C`` on the norm of every coefficient vector FedSC computes.

    ``c = argmin_c 1/2 ||phi(x) - phi(Z) c||**2 + lam/2 ||c||**2``; the
    objective at ``c = 0`` is ``||phi(x)||**2 / 2 = 1/2`` (Gaussian kernel), so
    at the minimiser ``lam/2 ||c||**2 <= 1/2``: ``||c|| <= 1 / sqrt(lam)``,
    whatever the sample and the dictionary. Also
    ``||c|| <= ||(K(Z, Z) + lam I)^-1|| ||k(Z, x)|| <= sqrt(d) / lam``, smaller
    only when ``lam > d``. A ``coef_clip`` the coefficients are clipped to
    bounds them too.

    Parameters
    ----------
    lam : float
        Ridge penalty ``lambda`` (> 0).
    n_components : int, default=None
        Dictionary size ``d``; ``None`` leaves out the ``sqrt(d) / lam`` bound.
    coef_clip : float, default=None
        Norm the coefficient vectors are clipped to (> 0), if any.

    Returns
    -------
    tau_c : float

    Examples
    --------
    >>> from skfedclust.secure import coef_norm_bound
    >>> coef_norm_bound(lam=0.01), coef_norm_bound(lam=0.01, coef_clip=2.0)
    (10.0, 2.0)
    """
    lam = _check_positive(lam, "lam")
    bound = 1.0 / math.sqrt(lam)
    if n_components is not None:
        bound = min(bound, math.sqrt(_check_n_components(n_components)) / lam)
    if coef_clip is not None:
        bound = min(bound, _check_positive(coef_clip, "coef_clip"))
    return bound


def coef_sensitivity(*, lam, n_components=None, coef_clip=None):
    """L2 sensitivity of one sample's FedSC coefficient vector: ``2 tau_C``.

    Replacing a sample ``x`` by ``x'`` changes its coefficient vector (and no
    other: ``c_j`` depends on ``x_j`` and the public dictionary only) from
    ``c`` to ``c'``, and ``||c - c'|| <= ||c|| + ||c'|| <= 2 tau_C`` with
    ``tau_C`` of :func:`coef_norm_bound`. No clipping of the samples is
    needed. (The bound ``2 sqrt(d) tau_X (tau_X + Upsilon) / (lam r**2)`` of
    Qiao et al. 2023, Lemma J.1, is valid but 100 to 200 times larger at the
    usual settings.)

    Parameters
    ----------
    lam : float
        Ridge penalty ``lambda`` (> 0).
    n_components : int, default=None
        Dictionary size ``d``.
    coef_clip : float, default=None
        Norm the released coefficient vectors are clipped to, if any.

    Returns
    -------
    sensitivity : float

    Examples
    --------
    >>> from skfedclust.secure import coef_sensitivity
    >>> coef_sensitivity(lam=0.01)
    20.0
    """
    return 2.0 * coef_norm_bound(lam=lam, n_components=n_components, coef_clip=coef_clip)


def dictionary_sensitivity(*, bandwidth, learning_rate, lam, n_components=None, coef_clip=None):
    """L2 sensitivity of a client's dictionary after one gradient step.

    The client receives the public dictionary ``Z``, solves the coefficients
    ``c_j = (K(Z, Z) + lam I)^-1 k(Z, x_j)`` of its rows (clipped to
    ``coef_clip`` if given) and uploads ``Z - eta grad``. The gradient is a
    sum of per-sample terms, ``grad = sum_j g(x_j, c_j)``, and ``c_j`` is a
    function of ``x_j`` and ``Z`` alone, so replacing one sample changes one
    term, its coefficients included:
    ``Delta <= eta sup ||g(x, c(x)) - g(x', c(x'))||_F <= 2 eta sup ||g||_F``.

    The term of a sample is ``g_i = -c_i Dphi(z_i)^* e`` for atom ``i``, with
    ``e = phi(x) - phi(Z) c`` the sample's residual in the kernel's feature
    space: the gradient of ``1/2 ||e||**2``. For the Gaussian kernel
    ``||Dphi(z) v|| = ||v|| / r``, so ``||g||_F <= ||c|| ||e|| / r``. At the
    ridge minimiser ``||e||**2 + lam ||c||**2 <= 1`` (the objective at
    ``c = 0`` is ``1/2``), so ``||c|| ||e|| <= 1 / (2 sqrt(lam))``; a
    coefficient vector clipped to ``coef_clip`` scales ``c`` by ``s <= 1``,
    and ``||phi(x) - s phi(Z) c|| <= 1`` by convexity in ``s``, so
    ``||c|| ||e|| <= coef_clip`` then. Hence

    ``Delta = 2 eta min(1 / (2 sqrt(lam)), tau_C) / r``,

    with ``tau_C`` of :func:`coef_norm_bound`, for samples and atoms of any
    norm. Clipping the updated atoms afterwards is a projection, which does
    not increase it. (The bound of Qiao et al. 2023, Lemma J.2, holds the
    coefficients fixed, which they are not; it happens to exceed this one.)

    Parameters
    ----------
    bandwidth : float
        Public kernel bandwidth ``r`` (> 0).
    learning_rate : float
        The fixed step size ``eta`` (> 0). A data-dependent step is not covered.
    lam : float
        Ridge penalty ``lambda`` (> 0).
    n_components : int, default=None
        Dictionary size ``d`` (only through ``tau_C``).
    coef_clip : float, default=None
        Norm the coefficient vectors in the gradient are clipped to, if any.

    Returns
    -------
    sensitivity : float

    Examples
    --------
    >>> from skfedclust.secure import dictionary_sensitivity
    >>> dictionary_sensitivity(bandwidth=2.0, learning_rate=0.5, lam=0.01)
    2.5
    >>> dictionary_sensitivity(bandwidth=2.0, learning_rate=0.5, lam=0.01, coef_clip=2.0)
    1.0
    """
    r = _check_positive(bandwidth, "bandwidth")
    eta = _check_learning_rate(learning_rate)
    lam = _check_positive(lam, "lam")
    tau_c = coef_norm_bound(lam=lam, n_components=n_components, coef_clip=coef_clip)
    return 2.0 * eta * min(0.5 / math.sqrt(lam), tau_c) / r


def data_noise_scale(epsilon, delta, clip_norm):
    """Noise on the raw data for ``(epsilon, delta)``-DP FedSC (perturbed data).

    Every client clips its samples to norm ``clip_norm`` (``tau_X``) and adds
    ``N(0, sigma**2)`` noise to every entry once, before anything else. A
    replaced sample moves the release by at most ``2 tau_X`` in L2, and
    everything computed afterwards is post-processing (Qiao et al. 2023,
    Proposition 3.7). ``sigma`` is the smallest noise that makes this one
    Gaussian release ``(epsilon, delta)``-DP (exact calibration, valid at
    every ``epsilon``).

    Parameters
    ----------
    epsilon : float
        Privacy parameter (> 0).
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
    >>> round(data_noise_scale(1.0, 1e-5, 1.0), 4)
    7.4613
    """
    clip_norm = _check_clip_norm(clip_norm)
    return gaussian_sigma(2.0 * clip_norm, epsilon, delta)


class FactorNoiseScales(NamedTuple):
    """Calibrated noise of FedSC with perturbed factors (see :func:`factor_noise_scales`)."""

    #: Standard deviation of the noise on every uploaded dictionary, every round.
    dictionary: float
    #: Standard deviation of the noise on the final coefficients.
    coef: float
    #: L2 sensitivity of one dictionary upload.
    dictionary_sensitivity: float
    #: L2 sensitivity of one client's coefficients.
    coef_sensitivity: float


def factor_noise_scales(
    epsilon,
    delta,
    *,
    bandwidth,
    n_components,
    lam,
    n_rounds,
    learning_rate,
    coef_clip=None,
    dictionary_share=0.5,
):
    """Noise scales of ``(epsilon, delta)``-DP FedSC with perturbed factors.

    A client uploads ``n_rounds`` dictionaries (one gradient step of fixed size
    ``learning_rate`` each, sensitivity :func:`dictionary_sensitivity`) and one
    coefficient matrix (:func:`coef_sensitivity`); neighbouring data sets
    differ in one row of one client, so each release of that client is one
    Gaussian mechanism, and the releases compose exactly: with noise
    ``sigma_Z`` and ``sigma_C`` the whole fit is ``mu``-GDP with
    ``mu**2 = n_rounds (Delta_Z / sigma_Z)**2 + (Delta_C / sigma_C)**2``
    (Dong, Roth & Su 2022; each round's dictionary is chosen after the noisy
    releases of the rounds before, which adaptive composition allows). The
    scales spend ``dictionary_share`` of ``mu**2`` on the dictionaries and
    the rest on the coefficients, with ``mu`` the largest that is
    ``(epsilon, delta)``-DP.

    Parameters
    ----------
    epsilon : float
        Total privacy parameter (> 0).
    delta : float
        Total privacy parameter in (0, 1).
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
    coef_clip : float, default=None
        Norm the coefficient vectors are clipped to, in the gradient and in the
        release, if any.
    dictionary_share : float, default=0.5
        Share of ``mu**2`` spent on the dictionaries, in (0, 1).

    Returns
    -------
    scales : FactorNoiseScales
        Named tuple ``(dictionary, coef, dictionary_sensitivity,
        coef_sensitivity)``.

    Examples
    --------
    >>> from skfedclust.secure import factor_noise_scales
    >>> s = factor_noise_scales(2.0, 1e-5, bandwidth=1.0, n_components=10, lam=0.01,
    ...                         n_rounds=20, learning_rate=0.1)
    >>> round(s.dictionary, 2), round(s.coef, 2)
    (12.61, 56.39)
    """
    if (
        not isinstance(dictionary_share, numbers.Real)
        or isinstance(dictionary_share, bool)
        or not 0 < dictionary_share < 1
    ):
        raise ValueError(f"dictionary_share must lie in (0, 1), got {dictionary_share!r}.")
    if not isinstance(n_rounds, numbers.Integral) or isinstance(n_rounds, bool) or n_rounds < 1:
        raise ValueError(f"n_rounds must be an integer >= 1, got {n_rounds!r}.")
    delta_z = dictionary_sensitivity(
        bandwidth=bandwidth,
        n_components=n_components,
        learning_rate=learning_rate,
        lam=lam,
        coef_clip=coef_clip,
    )
    delta_c = coef_sensitivity(lam=lam, n_components=n_components, coef_clip=coef_clip)
    # gaussian_sigma(1, ...) is 1 / mu for the whole budget; a share s of mu**2
    # is a noise multiplier larger by 1 / sqrt(s).
    sigma_z = gaussian_sigma(delta_z, epsilon, delta, compositions=int(n_rounds))
    sigma_c = gaussian_sigma(delta_c, epsilon, delta)
    return FactorNoiseScales(
        dictionary=sigma_z / math.sqrt(dictionary_share),
        coef=sigma_c / math.sqrt(1.0 - dictionary_share),
        dictionary_sensitivity=delta_z,
        coef_sensitivity=delta_c,
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
