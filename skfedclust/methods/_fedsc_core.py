"""Federated kernel factorisation of FedSC: the clients' and the server's math.

FedSC (Qiao, Ding & Fan, "Federated Spectral Clustering via Secure Similarity
Reconstruction", NeurIPS 2023) factorises the data in the feature space of the
Gaussian kernel ``k(x, y) = exp(-||x - y||**2 / (2 r**2))`` as
``phi(X) ~ phi(Z) C``: a dictionary ``Z`` of ``d`` atoms shared by everybody and
one private coefficient vector per sample. The server then clusters the
reconstructed kernel ``C^T K(Z, Z) C`` without ever seeing a sample.

Layout: samples and atoms are rows (``X_p`` is ``(n_p, n_features)``, ``Z`` is
``(d, n_features)``), and coefficient matrices store one sample per column,
``C_p`` of shape ``(d, n_p)``, as in the paper.

Client side (a client's own data, what the server sent, a seed):

* :func:`solve_coefficients`, the closed-form C-step (Eq. 14), also the
  coefficients of any new point;
* :func:`dictionary_gradient` (Eq. 15), and the two Z-steps:
  :func:`preconditioned_dictionary_step` (the step behind the paper's experiments) and
  :func:`gradient_dictionary_step` (Eq. 16);
* :func:`client_update`, one round of a client: C-step, Z-step, objective;
* :func:`client_objective`, the local objective ``f_p`` (Eq. 13);
* the bandwidth and dictionary-size rules on the client's own data are in
  :mod:`skfedclust.methods._fedsc_hyperparameters`.

Server side (uploaded messages and public constants):

* :func:`aggregate_dictionaries` (Eq. 11, or weighted by sample counts);
* :func:`initial_dictionaries`, :func:`federated_bandwidth` (Eq. 42),
  :func:`pair_sum_bandwidth`, :func:`combine_n_components` and
  :func:`combine_feature_sums`;
* :func:`trilateration_attack`, the exact recovery of raw samples from
  noiseless coefficients when ``d > n_features``, which shows what the
  coefficient upload reveals.

The bandwidth rules (Eqs. 40-42) and the dictionary size (Eq. 43), federated and
pooled, are in :mod:`skfedclust.methods._fedsc_hyperparameters`.

The client functions work on matrices with ``d`` rows, where BLAS threads cost
more than they bring (a client round on 150 samples takes about 1.5 ms on one
thread and 10 ms on two threads of a busy machine): run them under
``threadpoolctl.threadpool_limits(1)``, with clients in parallel if anything.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import NamedTuple

import numpy as np
from scipy import linalg
from sklearn.utils import check_array, check_random_state

from ..secure._dp import clip_columns

__all__ = [
    "ClientUpdate",
    "aggregate_dictionaries",
    "client_objective",
    "client_update",
    "combine_feature_sums",
    "dictionary_gradient",
    "gaussian_kernel",
    "gradient_dictionary_step",
    "initial_dictionaries",
    "preconditioned_dictionary_step",
    "relative_coefficients",
    "relative_kernel",
    "solve_coefficients",
    "squared_distances",
    "trilateration_attack",
]

#: Subsample size of the pooled bandwidth and dictionary-size rules, as in the
#: paper's experiments. The dictionary-size rule holds a dense kernel of this many
#: rows: 8000**2 float64 is 512 MB.
MAX_SAMPLES = 8000

#: Below this largest kernel value a client's samples are out of reach of every
#: atom, and the coefficients, hence the dictionary step, are 0 / 0.
UNDERFLOW = 1e-12

#: Bandwidths whose ``2 r**2`` is a normal float64 (the kernels divide by it).
MIN_BANDWIDTH = math.sqrt(np.finfo(np.float64).tiny / 2.0)
MAX_BANDWIDTH = math.sqrt(np.finfo(np.float64).max / 2.0)

#: Above this value everywhere the kernel is 1 to working precision: the bandwidth
#: dwarfs every distance and the kernel carries no information about the samples.
SATURATION = 1.0 - 1e-12

#: Relative singular-value cutoff of the least-squares dictionary step: the
#: directions below it are the atoms the client's samples do not pull on.
SINGULAR_CUTOFF = 1e-12

#: Rows per block when streaming pairwise distances (each block is
#: ``BLOCK_ROWS x n`` float64).
BLOCK_ROWS = 1024


# --------------------------------------------------------------------------- #
# Validation helpers
# --------------------------------------------------------------------------- #
def _as_rows(X, name):
    return check_array(X, dtype=np.float64, input_name=name)


def _check_bandwidth(bandwidth):
    if (
        not isinstance(bandwidth, numbers.Real)
        or isinstance(bandwidth, bool)
        or not math.isfinite(bandwidth)
        or bandwidth <= 0
    ):
        raise ValueError(f"bandwidth must be a finite number > 0, got {bandwidth!r}.")
    bandwidth = float(bandwidth)
    # Every kernel divides by 2 r**2: it must be a normal float64, neither 0 nor inf.
    if not MIN_BANDWIDTH <= bandwidth <= MAX_BANDWIDTH:
        raise ValueError(
            f"bandwidth={bandwidth:g} is outside [{MIN_BANDWIDTH:.3g}, {MAX_BANDWIDTH:.3g}]: "
            f"the kernels divide by 2 bandwidth**2, which "
            f"{'underflows to 0' if bandwidth < 1 else 'overflows to inf'} in float64. "
            "Standardise the features, or give a bandwidth on their scale."
        )
    return bandwidth


def _check_lam(lam):
    if not isinstance(lam, numbers.Real) or isinstance(lam, bool) or not lam >= 0:
        raise ValueError(f"lam must be a number >= 0, got {lam!r}.")
    return float(lam)


def _check_coef(coef, n_components, n_samples):
    coef = check_array(coef, dtype=np.float64, input_name="coef")
    if coef.shape != (n_components, n_samples):
        raise ValueError(
            f"coef must have shape (n_components, n_samples) = ({n_components}, {n_samples}), "
            f"got {coef.shape}."
        )
    return coef


# --------------------------------------------------------------------------- #
# Kernel
# --------------------------------------------------------------------------- #
def squared_distances(A, B=None):
    """Squared Euclidean distances between the rows of ``A`` and ``B``.

    Translation invariant and accurate at any magnitude of the data: both sets
    are centred on their common mean before the inner-product expansion, so
    the rounding error scales with the spread of the data, not with its
    distance from the origin. Tiny negative values from rounding are clipped
    to 0, and ``squared_distances(A)`` is exactly symmetric with a zero
    diagonal.

    Parameters
    ----------
    A : array-like of shape (n_a, n_features)
    B : array-like of shape (n_b, n_features), default=None
        ``None`` means ``A``.

    Returns
    -------
    D : ndarray of shape (n_a, n_b)

    Examples
    --------
    >>> from skfedclust.methods._fedsc_core import squared_distances
    >>> squared_distances([[1e9, 0.0]], [[1e9 + 3.0, 4.0]])
    array([[25.]])
    """
    A = _as_rows(A, "A")
    same = B is None
    B = A if same else _as_rows(B, "B")
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"A has {A.shape[1]} features but B has {B.shape[1]}.")
    if same:
        shift = A.mean(axis=0)
    else:
        shift = (A.sum(axis=0) + B.sum(axis=0)) / (len(A) + len(B))
    Ac = A - shift
    Bc = Ac if same else B - shift
    D = Ac @ Bc.T
    D *= -2.0
    D += np.einsum("ij,ij->i", Ac, Ac)[:, None]
    D += np.einsum("ij,ij->i", Bc, Bc)[None, :]
    np.maximum(D, 0.0, out=D)
    if same:
        # BLAS does not return an exactly symmetric A A^T.
        D += D.T
        D *= 0.5
        np.fill_diagonal(D, 0.0)
    return D


def gaussian_kernel(A, B=None, *, bandwidth):
    """Gaussian kernel matrix ``exp(-||a_i - b_j||**2 / (2 r**2))`` between row sets.

    Parameters
    ----------
    A : array-like of shape (n_a, n_features)
    B : array-like of shape (n_b, n_features), default=None
        ``None`` means ``A``; the diagonal is then exactly 1.
    bandwidth : float
        The bandwidth ``r`` (> 0).

    Returns
    -------
    K : ndarray of shape (n_a, n_b)
        Entries in (0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.methods._fedsc_core import gaussian_kernel
    >>> K = gaussian_kernel([[0.0, 0.0], [3.0, 4.0]], bandwidth=5.0)
    >>> np.round(K, 4)
    array([[1.    , 0.6065],
           [0.6065, 1.    ]])
    """
    r = _check_bandwidth(bandwidth)
    K = squared_distances(A, B)
    K *= -1.0 / (2.0 * r * r)
    return np.exp(K, out=K)


def relative_kernel(dictionary, X, *, bandwidth):
    """Kernel columns ``K(Z, x)`` divided by their largest entry, exact at any distance.

    ``K(Z, x) / max_j k(z_j, x) = exp(-(D_j - min_j D_j) / (2 r**2))`` with
    ``D_j = ||z_j - x||**2``. The common term ``||x - mean(Z)||**2`` cancels in
    the difference and is never formed, so a point ``1e200`` away from the
    atoms neither overflows nor loses the differences between its atom
    distances to rounding: every column keeps a largest entry of 1 where
    :func:`gaussian_kernel` underflows to 0 everywhere.

    Parameters
    ----------
    dictionary : array-like of shape (n_components, n_features)
        The atoms ``Z``.
    X : array-like of shape (n_samples, n_features)
        The points.
    bandwidth : float
        Kernel bandwidth ``r``.

    Returns
    -------
    K : ndarray of shape (n_components, n_samples)
        Entries in (0, 1], the largest of every column exactly 1.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.methods._fedsc_core import relative_kernel
    >>> Z = np.array([[0.0], [1.0]])
    >>> relative_kernel(Z, [[1e200]], bandwidth=1.0)
    array([[0.],
           [1.]])
    """
    Z = _as_rows(dictionary, "dictionary")
    X = _as_rows(X, "X")
    r = _check_bandwidth(bandwidth)
    if Z.shape[1] != X.shape[1]:
        raise ValueError(f"dictionary has {Z.shape[1]} features but X has {X.shape[1]}.")
    center = Z.mean(axis=0)
    Zc = Z - center
    # ||z_j - x||^2 - ||x - center||^2 = ||z_j - center||^2 - 2 (x - center) . (z_j - center),
    # in units of s = max(1, |x - center|_inf) per point, so that no product overflows.
    Xc = X - center
    scale = np.maximum(np.abs(Xc).max(axis=1, initial=1.0), 1.0)[None, :]
    Xs = Xc / scale.T
    D = (Zc @ Xs.T) * -2.0
    D += np.einsum("ij,ij->i", Zc, Zc)[:, None] / scale
    D -= D.min(axis=0, keepdims=True)
    # Back to squared distances over 2 r^2; beyond the float range a difference is
    # infinite and its kernel 0, and the nearest atom's stays exactly 0 (kernel 1).
    with np.errstate(over="ignore"):
        D *= scale / (2.0 * r) / r
    np.negative(D, out=D)
    return np.exp(D, out=D)


# --------------------------------------------------------------------------- #
# Client: C-step, gradient, Z-steps, objective
# --------------------------------------------------------------------------- #
def _solve_ridge(kernel_zz, rhs, lam):
    """``(K(Z, Z) + lam I)^-1 rhs``, symmetric positive definite for ``lam > 0``."""
    A = kernel_zz + lam * np.eye(len(kernel_zz))
    try:
        # One Cholesky factorisation and two triangular solves: a quarter faster than
        # solve(assume_a="pos") on a client's thousands of right-hand sides.
        return linalg.cho_solve(linalg.cho_factor(A, check_finite=False), rhs, check_finite=False)
    except linalg.LinAlgError:
        # lam = 0 with coinciding atoms: the minimum-norm minimiser.
        return linalg.lstsq(A, rhs)[0]


def solve_coefficients(X, dictionary, *, bandwidth, lam):
    """Closed-form coefficients ``C = (K(Z, Z) + lam I)^-1 K(Z, X)`` (C-step).

    The exact minimiser of the local objective over the coefficients for a
    fixed dictionary (Qiao et al. 2023, Eq. 14). Column ``j`` depends only on
    ``x_j`` and ``Z``, so the same function gives the coefficients of any new
    (out-of-sample) point.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The client's samples (or new points).
    dictionary : array-like of shape (n_components, n_features)
        The dictionary ``Z``, one atom per row.
    bandwidth : float
        Kernel bandwidth ``r``.
    lam : float
        Ridge penalty (>= 0).

    Returns
    -------
    coef : ndarray of shape (n_components, n_samples)
        One coefficient vector per column.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.methods._fedsc_core import solve_coefficients
    >>> Z = np.array([[0.0, 0.0], [1.0, 1.0]])
    >>> C = solve_coefficients(Z, Z, bandwidth=1.0, lam=0.0)
    >>> np.allclose(C, np.eye(2))  # every atom is its own best reconstruction
    True
    """
    X = _as_rows(X, "X")
    Z = _as_rows(dictionary, "dictionary")
    lam = _check_lam(lam)
    kernel_zz = gaussian_kernel(Z, bandwidth=bandwidth)
    kernel_zx = gaussian_kernel(Z, X, bandwidth=bandwidth)
    return _solve_ridge(kernel_zz, kernel_zx, lam)


def relative_coefficients(X, dictionary, *, bandwidth, lam):
    """Coefficients of :func:`solve_coefficients` up to a positive factor per column.

    ``(K(Z, Z) + lam I)^-1 K(Z, x) / max_j k(z_j, x)`` from
    :func:`relative_kernel`: the same direction as ``x``'s coefficients, for
    points at any distance from the atoms, where the exact coefficients
    underflow to 0.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    dictionary : array-like of shape (n_components, n_features)
    bandwidth : float
    lam : float

    Returns
    -------
    coef : ndarray of shape (n_components, n_samples)
    """
    Z = _as_rows(dictionary, "dictionary")
    lam = _check_lam(lam)
    kernel_zz = gaussian_kernel(Z, bandwidth=bandwidth)
    return _solve_ridge(kernel_zz, relative_kernel(Z, X, bandwidth=bandwidth), lam)


def _objective_from_kernels(coef, kernel_zx, kernel_zz, lam, gram=None):
    # Tr K(X_p, X_p) = n_p for the Gaussian kernel, so no sample pair is needed, and
    # Tr(C^T K C) = <K, C C^T> reuses the Gram matrix the dictionary step needs too.
    if gram is None:
        gram = coef @ coef.T
    n_samples = coef.shape[1]
    fit = n_samples - 2.0 * np.vdot(coef, kernel_zx) + np.vdot(kernel_zz, gram)
    return 0.5 * fit + 0.5 * lam * np.trace(gram)


def client_objective(X, dictionary, coef, *, bandwidth, lam):
    """Local objective ``f_p = 1/2 ||phi(X_p) - phi(Z) C_p||_F**2 + lam/2 ||C_p||_F**2``.

    Computed from ``K(Z, X_p)``, ``K(Z, Z)`` and ``C_p`` alone, since the
    Gaussian kernel has ``k(x, x) = 1`` (Qiao et al. 2023, Eq. 13).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    dictionary : array-like of shape (n_components, n_features)
    coef : array-like of shape (n_components, n_samples)
    bandwidth : float
    lam : float

    Returns
    -------
    objective : float

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.methods._fedsc_core import client_objective
    >>> Z = np.array([[0.0, 0.0], [5.0, 5.0]])
    >>> client_objective(Z, Z, np.eye(2), bandwidth=1.0, lam=0.0) < 1e-12  # exact fit
    True
    """
    X = _as_rows(X, "X")
    Z = _as_rows(dictionary, "dictionary")
    coef = _check_coef(coef, len(Z), len(X))
    lam = _check_lam(lam)
    kernel_zx = gaussian_kernel(Z, X, bandwidth=bandwidth)
    kernel_zz = gaussian_kernel(Z, bandwidth=bandwidth)
    return float(_objective_from_kernels(coef, kernel_zx, kernel_zz, lam))


def _step_matrices(coef, kernel_zx, kernel_zz, gram=None):
    """``W`` (n_p, d) and the symmetric ``M`` (d, d) with ``grad = (M Z - W^T X) / r**2``.

    ``W = C^T * K(X, Z)`` weighs each sample's pull on each atom;
    ``M = diag(1^T W) + 2 Q - 2 diag(1^T Q)``, ``Q = (C C^T / 2) * K(Z, Z)``,
    collects the atoms' own terms (Eq. 15 of Qiao et al. 2023).
    """
    W = coef.T * kernel_zx.T
    Q = 0.5 * (coef @ coef.T if gram is None else gram) * kernel_zz
    M = 2.0 * Q
    M[np.diag_indices_from(M)] += W.sum(axis=0) - 2.0 * Q.sum(axis=0)
    return W, M


def dictionary_gradient(X, dictionary, coef, *, bandwidth):
    """Gradient of the local objective with respect to the dictionary, coefficients fixed.

    ``grad = (M Z - W^T X) / r**2`` in row layout, the transpose of Eq. (15)
    of Qiao et al. (2023) with its signs restored: ``W = C^T * K(X, Z)``,
    ``Q = (C C^T / 2) * K(Z, Z)``, ``M = diag(1^T W) + 2 Q - 2 diag(1^T Q)``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    dictionary : array-like of shape (n_components, n_features)
    coef : array-like of shape (n_components, n_samples)
    bandwidth : float

    Returns
    -------
    gradient : ndarray of shape (n_components, n_features)
        Same layout as ``dictionary``.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.methods._fedsc_core import dictionary_gradient
    >>> X = np.array([[0.0, 0.0], [2.0, 0.0]])
    >>> # An atom that sits on one sample and reconstructs only it is stationary.
    >>> g = dictionary_gradient(X, X[:1], np.array([[1.0, 0.0]]), bandwidth=1.0)
    >>> np.allclose(g, 0.0)
    True
    """
    X = _as_rows(X, "X")
    Z = _as_rows(dictionary, "dictionary")
    coef = _check_coef(coef, len(Z), len(X))
    r = _check_bandwidth(bandwidth)
    W, M = _step_matrices(coef, gaussian_kernel(Z, X, bandwidth=r), gaussian_kernel(Z, bandwidth=r))
    Xc, Zc, _ = _centred(X, Z)
    return (M @ Zc - W.T @ Xc) / (r * r)


def _centred(X, Z):
    """``X`` and ``Z`` relative to the mean of ``X``, and that mean.

    ``M 1 = W^T 1`` (the column sums of ``W`` are the diagonal of ``M`` and the
    ``Q`` terms cancel), so the gradient and both steps commute with a common
    translation. Computing them relative to the data mean keeps the cancelling
    products ``M Z`` and ``W^T X`` at the scale of the data's spread, not of
    its distance from the origin.
    """
    shift = X.mean(axis=0) if len(X) else np.zeros(X.shape[1])
    return X - shift, Z - shift, shift


def _preconditioned_step(X, Z, W, M):
    """Solve ``M Z_new = W^T X``; keep ``Z`` (and warn) if the system is hopeless."""
    Xc, Zc, shift = _centred(X, Z)
    rhs = W.T @ Xc
    Z_new = None
    if np.all(np.isfinite(M)) and np.all(np.isfinite(rhs)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", linalg.LinAlgWarning)
                Z_new = linalg.solve(M, rhs, assume_a="sym") + shift
        except (linalg.LinAlgError, linalg.LinAlgWarning):
            # M is (nearly) singular when some atoms receive no weight, e.g. when
            # n_p < d: move along the directions M determines and leave the
            # undetermined ones where they are, rather than at the origin.
            Z_new = Z + linalg.lstsq(M, rhs - M @ Zc, cond=SINGULAR_CUTOFF)[0]
    if Z_new is None or not np.all(np.isfinite(Z_new)):
        warnings.warn(
            "The preconditioned dictionary step is undefined (non-finite system); "
            "the received dictionary is kept for this round.",
            RuntimeWarning,
            stacklevel=3,
        )
        return Z.copy()
    return Z_new


def preconditioned_dictionary_step(X, dictionary, coef, *, bandwidth):
    """Preconditioned dictionary step ``Z - (M / r**2)^-1 grad = M^-1 W^T X``.

    The step behind the paper's experiments: a Newton-like step preconditioned
    by the ``d x d`` matrix ``M`` of :func:`dictionary_gradient`. The new atoms
    are weighted combinations of the client's own samples. It is meant to
    follow a fresh C-step: repeating it with the coefficients frozen diverges.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    dictionary : array-like of shape (n_components, n_features)
    coef : array-like of shape (n_components, n_samples)
        Usually ``solve_coefficients(X, dictionary, ...)``.
    bandwidth : float

    Returns
    -------
    dictionary : ndarray of shape (n_components, n_features)
        The updated dictionary. If ``M`` is (nearly) singular, the
        undetermined directions keep their received value (least-squares
        step); if the system is not finite, the input dictionary is returned
        with a ``RuntimeWarning``.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.methods._fedsc_core import (
    ...     preconditioned_dictionary_step,
    ...     solve_coefficients,
    ... )
    >>> X = np.array([[0.0, 0.0], [0.2, 0.0], [3.0, 3.0], [3.2, 3.0]])
    >>> Z = np.array([[0.5, 0.5], [2.5, 2.5]])
    >>> C = solve_coefficients(X, Z, bandwidth=1.0, lam=0.01)
    >>> preconditioned_dictionary_step(X, Z, C, bandwidth=1.0).shape
    (2, 2)
    """
    X = _as_rows(X, "X")
    Z = _as_rows(dictionary, "dictionary")
    coef = _check_coef(coef, len(Z), len(X))
    r = _check_bandwidth(bandwidth)
    W, M = _step_matrices(coef, gaussian_kernel(Z, X, bandwidth=r), gaussian_kernel(Z, bandwidth=r))
    return _preconditioned_step(X, Z, W, M)


def _check_learning_rate(learning_rate):
    if isinstance(learning_rate, str):
        if learning_rate != "auto":
            raise ValueError(f"learning_rate must be 'auto' or a float > 0, got {learning_rate!r}.")
        return None
    if (
        not isinstance(learning_rate, numbers.Real)
        or isinstance(learning_rate, bool)
        or not math.isfinite(learning_rate)
        or learning_rate <= 0
    ):
        raise ValueError(f"learning_rate must be 'auto' or a float > 0, got {learning_rate!r}.")
    return float(learning_rate)


def _check_n_steps(n_steps, name):
    if not isinstance(n_steps, numbers.Integral) or isinstance(n_steps, bool) or n_steps < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {n_steps!r}.")
    return int(n_steps)


def gradient_dictionary_step(X, dictionary, coef, *, bandwidth, learning_rate="auto", n_steps=1):
    """The paper's dictionary update: ``n_steps`` gradient steps, coefficients frozen.

    ``Z <- Z - eta grad_Z f_p(Z, C_p)`` repeated ``Q = n_steps`` times with the
    kernels recomputed at every step (Qiao et al. 2023, Eq. 16). With
    ``learning_rate='auto'`` the step size is ``eta = r**2 / ||M||_2``, the
    inverse of the spectral norm of the preconditioner ``M / r**2``,
    recomputed at every step.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    dictionary : array-like of shape (n_components, n_features)
    coef : array-like of shape (n_components, n_samples)
    bandwidth : float
    learning_rate : 'auto' or float, default='auto'
        A fixed float is what the differential-privacy accounting requires.
    n_steps : int, default=1

    Returns
    -------
    dictionary : ndarray of shape (n_components, n_features)

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.methods._fedsc_core import (
    ...     client_objective, gradient_dictionary_step, solve_coefficients)
    >>> rng = np.random.default_rng(0)
    >>> X, Z = rng.normal(size=(20, 2)), rng.normal(size=(3, 2))
    >>> C = solve_coefficients(X, Z, bandwidth=1.0, lam=0.01)
    >>> Z2 = gradient_dictionary_step(X, Z, C, bandwidth=1.0, n_steps=5)
    >>> bool(client_objective(X, Z2, C, bandwidth=1.0, lam=0.01)
    ...      < client_objective(X, Z, C, bandwidth=1.0, lam=0.01))
    True
    """
    X = _as_rows(X, "X")
    Z = _as_rows(dictionary, "dictionary").copy()
    coef = _check_coef(coef, len(Z), len(X))
    r = _check_bandwidth(bandwidth)
    eta = _check_learning_rate(learning_rate)
    for _ in range(_check_n_steps(n_steps, "n_steps")):
        Z = _gradient_step(X, Z, coef, r, eta)
    return Z


def _gradient_step(X, Z, coef, r, eta):
    W, M = _step_matrices(coef, gaussian_kernel(Z, X, bandwidth=r), gaussian_kernel(Z, bandwidth=r))
    Xc, Zc, _ = _centred(X, Z)
    grad = (M @ Zc - W.T @ Xc) / (r * r)
    if eta is None:
        curvature = np.linalg.norm(M, 2) / (r * r)
        # No curvature means no weight on any atom: there is nothing to move.
        if curvature == 0 or not np.isfinite(curvature):
            return Z
        eta = 1.0 / curvature
    return Z - eta * grad


class ClientUpdate(NamedTuple):
    """Result of one client round (see :func:`client_update`)."""

    #: Updated local dictionary Z_p, shape (n_components, n_features): the upload.
    dictionary: np.ndarray
    #: Coefficients C_p from the received dictionary, shape (n_components, n_samples).
    coef: np.ndarray
    #: Local objective f_p at the received dictionary and these coefficients.
    objective: float


def client_update(
    X,
    dictionary,
    *,
    bandwidth,
    lam,
    z_update="preconditioned",
    n_local_steps=1,
    learning_rate="auto",
    coef_clip=None,
    check_underflow=False,
):
    """One round of a FedSC client: C-step, local Z-step, objective.

    The client receives the global dictionary ``Z``, computes its coefficients
    in closed form (:func:`solve_coefficients`), then updates its own copy of
    the dictionary (Algorithm 1 of Qiao et al. 2023):

    * ``'preconditioned'`` (the paper's experiments): the step of
      :func:`preconditioned_dictionary_step`. With ``n_local_steps > 1`` the
      coefficients are re-solved before every repeated step, because the step
      diverges when repeated with frozen coefficients;
    * ``'gradient'`` (the paper's Eq. 16): ``n_local_steps`` gradient steps
      with the coefficients frozen (:func:`gradient_dictionary_step`).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The client's own samples.
    dictionary : array-like of shape (n_components, n_features)
        The dictionary broadcast by the server.
    bandwidth : float
        Kernel bandwidth ``r``.
    lam : float
        Ridge penalty.
    z_update : {'preconditioned', 'gradient'}, default='preconditioned'
    n_local_steps : int, default=1
    learning_rate : 'auto' or float, default='auto'
        Step size of the ``'gradient'`` update.
    coef_clip : float, default=None
        If set, the coefficient columns used by the dictionary step are clipped
        to this norm (a sensitivity bound for differential privacy); the
        returned coefficients are not clipped.
    check_underflow : bool, default=False
        Raise if the kernel between the dictionary and every sample underflows
        (the atoms are far from the client's data, e.g. a random initialisation
        near the origin for data far from it), which makes the step 0 / 0, or
        is 1 to working precision everywhere (a bandwidth that dwarfs the
        data's distances).

    Returns
    -------
    update : ClientUpdate
        Named tuple ``(dictionary, coef, objective)``: the local dictionary to
        upload, the coefficients ``C_p`` of the received dictionary, and
        ``f_p`` at the received dictionary and ``C_p``.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.methods._fedsc_core import client_update
    >>> rng = np.random.default_rng(0)
    >>> X, Z = rng.normal(size=(30, 2)), rng.normal(size=(4, 2))
    >>> first = client_update(X, Z, bandwidth=1.0, lam=0.01)
    >>> second = client_update(X, first.dictionary, bandwidth=1.0, lam=0.01)
    >>> bool(second.objective < first.objective)
    True
    """
    X = _as_rows(X, "X")
    Z = _as_rows(dictionary, "dictionary")
    r = _check_bandwidth(bandwidth)
    lam = _check_lam(lam)
    if z_update not in ("preconditioned", "gradient"):
        raise ValueError(f"z_update must be 'preconditioned' or 'gradient', got {z_update!r}.")
    n_steps = _check_n_steps(n_local_steps, "n_local_steps")
    eta = _check_learning_rate(learning_rate)

    kernel_zx = gaussian_kernel(Z, X, bandwidth=r)
    kernel_zz = gaussian_kernel(Z, bandwidth=r)
    if check_underflow and kernel_zx.max() < UNDERFLOW:
        raise ValueError(
            f"The kernel between the dictionary and this client's samples is below "
            f"{UNDERFLOW:g} everywhere: the atoms are too far from the data for the "
            f"bandwidth {r:g}. Initialise the dictionary around the data mean or "
            f"standardise the features."
        )
    if check_underflow and kernel_zx.min() > SATURATION:
        raise ValueError(
            f"The kernel between the dictionary and this client's samples is above "
            f"1 - {1 - SATURATION:.0e} everywhere: the bandwidth {r:g} dwarfs every distance "
            f"in the data, and the kernel carries no information. Give a bandwidth on the "
            f"scale of the data (or standardise the features)."
        )
    coef = _solve_ridge(kernel_zz, kernel_zx, lam)
    gram = coef @ coef.T
    objective = float(_objective_from_kernels(coef, kernel_zx, kernel_zz, lam, gram))

    def step_coef(C):
        return C if coef_clip is None else clip_columns(C, coef_clip)

    if z_update == "gradient":
        Z_new = Z.copy()
        for _ in range(n_steps):
            Z_new = _gradient_step(X, Z_new, step_coef(coef), r, eta)
    else:
        W, M = _step_matrices(
            step_coef(coef), kernel_zx, kernel_zz, gram if coef_clip is None else None
        )
        Z_new = _preconditioned_step(X, Z, W, M)
        for _ in range(n_steps - 1):
            kernel_zx = gaussian_kernel(Z_new, X, bandwidth=r)
            kernel_zz = gaussian_kernel(Z_new, bandwidth=r)
            C = _solve_ridge(kernel_zz, kernel_zx, lam)
            W, M = _step_matrices(step_coef(C), kernel_zx, kernel_zz)
            Z_new = _preconditioned_step(X, Z_new, W, M)
    return ClientUpdate(dictionary=Z_new, coef=coef, objective=objective)


# --------------------------------------------------------------------------- #
# Server: initialisation and aggregation
# --------------------------------------------------------------------------- #
def initial_dictionaries(
    n_clients, n_components, n_features, *, center=None, scale=1.0, random_state=None
):
    """Random initial dictionaries, one per client slot, drawn by the server.

    Every entry is ``N(0, scale**2)`` (plus ``center``), so their mean, the
    first broadcast dictionary, has entries ``N(0, scale**2 / n_clients)``
    around ``center``; ``scale=1`` and no center are the paper's experiments.
    Data far from the origin relative to the bandwidth need a ``center`` (see
    :func:`combine_feature_sums`), data of another scale than 1 a ``scale``.

    Parameters
    ----------
    n_clients : int
    n_components : int
    n_features : int
    center : array-like of shape (n_features,), default=None
        Location of the atoms; ``None`` is the origin.
    scale : float, default=1.0
        Standard deviation of every entry around ``center`` (> 0).
    random_state : int, RandomState instance or None, default=None

    Returns
    -------
    dictionaries : ndarray of shape (n_clients, n_components, n_features)

    Examples
    --------
    >>> from skfedclust.methods._fedsc_core import initial_dictionaries
    >>> initial_dictionaries(8, 3, 2, center=[10.0, 0.0], random_state=0).shape
    (8, 3, 2)
    """
    rng = check_random_state(random_state)
    Z = rng.standard_normal((n_clients, n_components, n_features))
    if not isinstance(scale, numbers.Real) or not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}.")
    if scale != 1.0:
        Z *= scale
    if center is not None:
        center = np.asarray(center, dtype=np.float64)
        if center.shape != (n_features,):
            raise ValueError(f"center must have shape ({n_features},), got {center.shape}.")
        Z += center
    return Z


def aggregate_dictionaries(dictionaries, *, sample_counts=None):
    """Server aggregation of the uploaded dictionaries.

    The plain mean of the uploads (Qiao et al. 2023, Eq. 11), or, given the
    clients' sample counts ``n_p``, the mean weighted by ``n_p / n``, the
    weights of the paper's objective and convergence theorem.

    Parameters
    ----------
    dictionaries : sequence of array-like of shape (n_components, n_features)
        The uploads of the participating clients.
    sample_counts : sequence of int, default=None
        ``n_p`` of each upload, for the weighted mean.

    Returns
    -------
    dictionary : ndarray of shape (n_components, n_features)

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.methods._fedsc_core import aggregate_dictionaries
    >>> uploads = [np.zeros((1, 2)), np.ones((1, 2))]
    >>> aggregate_dictionaries(uploads)
    array([[0.5, 0.5]])
    >>> aggregate_dictionaries(uploads, sample_counts=[1, 3])
    array([[0.75, 0.75]])
    """
    stack = np.asarray([np.asarray(Z, dtype=np.float64) for Z in dictionaries])
    if stack.ndim != 3 or len(stack) == 0:
        raise ValueError("dictionaries must be a non-empty sequence of 2D arrays of one shape.")
    if sample_counts is None:
        return stack.mean(axis=0)
    weights = np.asarray(sample_counts, dtype=np.float64)
    if weights.shape != (len(stack),) or np.any(weights < 0) or weights.sum() <= 0:
        raise ValueError("sample_counts must hold one non-negative count per dictionary.")
    return np.tensordot(weights / weights.sum(), stack, axes=1)


def combine_feature_sums(statistics):
    """Server: global feature mean from feature sums and row counts.

    Parameters
    ----------
    statistics : sequence of (ndarray of shape (n_features,), int)
        Sums of rows and their counts (the clients', or their total from a sum).

    Returns
    -------
    mean : ndarray of shape (n_features,)

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.methods._fedsc_core import combine_feature_sums
    >>> combine_feature_sums([(np.array([4.0, 6.0]), 2), (np.array([0.0, 0.0]), 2)])
    array([1. , 1.5])
    """
    total = sum(np.asarray(s, dtype=np.float64) for s, _ in statistics)
    count = sum(int(c) for _, c in statistics)
    if count <= 0:
        raise ValueError("The clients hold no samples.")
    return total / count


# --------------------------------------------------------------------------- #
# What the coefficients reveal
# --------------------------------------------------------------------------- #
def trilateration_attack(coef, dictionary, *, bandwidth, lam):
    """Recover raw samples from their noiseless coefficients (a server-side attack).

    The server knows the dictionary ``Z`` it broadcast, so from a client's
    ``C = (K(Z, Z) + lam I)^-1 K(Z, X)`` it recovers ``K(Z, X)`` exactly, hence
    every squared distance ``||z_i - x||**2 = -2 r**2 ln k(z_i, x)``.
    Subtracting the mean over the atoms leaves the linear system
    ``2 (z_i - z_mean) . x = (||z_i||**2 - mean ||z||**2) - (D_i - mean D)``,
    which determines ``x`` whenever the ``d`` atoms affinely span the feature
    space (``d > n_features`` in general position). FedSC without noise on the
    coefficients therefore does not hide the data from the server.

    Parameters
    ----------
    coef : array-like of shape (n_components, n_samples)
        Uploaded coefficients, one sample per column.
    dictionary : array-like of shape (n_components, n_features)
        The dictionary they were computed from.
    bandwidth : float
    lam : float

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        The least-squares reconstruction of the samples. Non-positive kernel
        values (noisy coefficients) are treated as underflow.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.methods._fedsc_core import solve_coefficients, trilateration_attack
    >>> rng = np.random.default_rng(0)
    >>> X, Z = rng.normal(size=(5, 2)), rng.normal(size=(4, 2))
    >>> C = solve_coefficients(X, Z, bandwidth=2.0, lam=0.01)
    >>> np.allclose(trilateration_attack(C, Z, bandwidth=2.0, lam=0.01), X)
    True
    """
    Z = _as_rows(dictionary, "dictionary")
    coef = check_array(coef, dtype=np.float64, input_name="coef")
    if coef.shape[0] != len(Z):
        raise ValueError(f"coef has {coef.shape[0]} rows but the dictionary {len(Z)} atoms.")
    d, m = Z.shape
    if d < m + 1:
        raise ValueError(
            f"Trilateration needs at least n_features + 1 = {m + 1} atoms, got {d}: "
            f"the distances to {d} anchors leave the samples undetermined."
        )
    r = _check_bandwidth(bandwidth)
    lam = _check_lam(lam)
    kernel_zx = (gaussian_kernel(Z, bandwidth=r) + lam * np.eye(d)) @ coef
    tiny = np.finfo(np.float64).tiny
    sq_dist = -2.0 * r * r * np.log(np.maximum(kernel_zx, tiny))
    # Work relative to the atoms' centroid so the norms below stay small.
    center = Z.mean(axis=0)
    Zc = Z - center
    sq_norms = np.einsum("ij,ij->i", Zc, Zc)
    A = 2.0 * (Zc - Zc.mean(axis=0))
    b = (sq_norms - sq_norms.mean())[:, None] - (sq_dist - sq_dist.mean(axis=0))
    return linalg.lstsq(A, b)[0].T + center
