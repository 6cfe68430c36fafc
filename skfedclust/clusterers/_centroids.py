"""Centroid building blocks: nearest-center labels, center updates, fuzzy memberships.

Every label, center update and membership of the package goes through these
functions, which are translation invariant and stable at any float64
magnitude: rows and centers are first moved to a common reference and scaled
to unit range, so adding 1.7e9 (a Unix timestamp) to every value, or
multiplying by 1e200, changes no label. The expanded form
``||x||^2 - 2 x.c + ||c||^2`` on raw data cancels catastrophically far from
the origin and overflows at large magnitudes; on the normalised data it is
exact enough and keeps BLAS speed. Labels compare ``||c||^2 - 2 x.c`` only:
the row's own norm is common to all centers, and for a row far from all of
them it would round their distances to one value.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.utils.extmath import row_norms

__all__ = [
    "center_means",
    "fuzzy_memberships",
    "nearest_center",
    "normalized_frame",
    "squared_distances",
]


def normalized_frame(centers, X=None):
    """Reference point and scale that bring ``centers`` (and ``X``) near the unit ball.

    Returns
    -------
    reference : ndarray of shape (n_features,)
        Midpoint of the centers' bounding box.
    scale : float
        Largest absolute coordinate after subtracting ``reference`` (1 if 0).
    """
    centers = np.asarray(centers, dtype=np.float64)
    reference = _midpoint(centers)
    spread = np.abs(centers - reference).max() if centers.size else 0.0
    if X is not None and X.size:
        spread = max(spread, np.abs(X - reference).max())
    scale = float(spread) if np.isfinite(spread) and spread > 0 else 1.0
    return reference, scale


def _midpoint(centers):
    """Midpoint of the centers' bounding box, per column."""
    high, low = centers.max(axis=0), centers.min(axis=0)
    with np.errstate(over="ignore"):
        reference = (high + low) / 2.0
    if not np.isfinite(reference).all():
        # The midpoint of two values near the float64 limit overflows; the
        # halves do not.
        reference = high / 2.0 + low / 2.0
    return reference


def _normalize(X, reference, scale):
    return (np.asarray(X, dtype=np.float64) - reference) / scale


def squared_distances(X, centers):
    """Squared Euclidean distances of rows to centers, in the units of the data.

    Computed in the normalised frame and scaled back, so it is translation
    invariant; entries overflow to ``inf`` only when the true distance does.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    centers : ndarray of shape (n_centers, n_features)

    Returns
    -------
    d2 : ndarray of shape (n_samples, n_centers)
    """
    reference, scale = normalized_frame(centers, X)
    Xn, Cn = _normalize(X, reference, scale), _normalize(centers, reference, scale)
    d2 = row_norms(Xn, squared=True)[:, None] - 2.0 * (Xn @ Cn.T)
    d2 += row_norms(Cn, squared=True)[None, :]
    np.maximum(d2, 0.0, out=d2)
    try:
        factor = scale**2
    except OverflowError:  # a Python float raises where numpy would give inf
        factor = np.inf
    with np.errstate(over="ignore", invalid="ignore"):
        d2 = d2 * factor
    # 0 * inf: a row on a center at a scale whose square overflows
    d2[np.isnan(d2)] = 0.0
    return d2


# Rows may lie this many times farther from the reference than the centers
# before the scale follows the rows: products of normalised rows and centers
# stay far from overflow, and the centers' squared norms far from underflow.
_ROW_HEADROOM_EXPONENT = 500

# Rows labelled per block: bounds the temporaries at a few MB whatever n.
_BLOCK_ELEMENTS = 2**18


def _power_of_two_exponent(extent):
    """Exponent ``e`` with ``2**(e-1) <= extent < 2**e`` (None for 0 or non-finite)."""
    extent = float(extent)
    if not (math.isfinite(extent) and extent > 0):
        return None
    return math.frexp(extent)[1]


def _centered(X, reference):
    """``X - reference``, or its halves when the difference overflows.

    Returns the difference, the exponent it was shifted by (0 or -1) and its
    largest absolute value; halving is exact for normal floats, so it
    changes no comparison.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        D = X - reference
        # NaN and inf propagate to the extent: one reduction checks both.
        extent = _largest_magnitude(D)
        if np.isfinite(extent):
            return D, 0, extent
        D = X * 0.5 - reference * 0.5
        return D, -1, _largest_magnitude(D)


def _largest_magnitude(D):
    """``np.abs(D).max()`` (NaN propagates), without a temporary of ``D``'s size."""
    if not D.size:
        return 0.0
    return np.maximum(D.max(), -D.min())


def nearest_center(X, centers):
    """Index of the nearest center of each row (ties: the lowest index).

    Each row is compared through ``||c||^2 - 2 x.c``, its squared distances
    less the term ``||x||^2`` common to all centers, which decides nothing
    but, far from the centers, would swamp the differences between them.
    Rows and centers are first translated to the midpoint of the centers and
    divided by a power of two (exact in floating point), chosen so that
    neither the products overflow nor the centers' norms underflow; the
    labels are those of the exact distances at any finite magnitude, as
    with :meth:`sklearn.cluster.KMeans.predict`, including for rows
    ``1e17`` times the spread of the centers away, where the expanded
    distances of all centers round to one value.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    centers : ndarray of shape (n_centers, n_features)

    Returns
    -------
    labels : ndarray of shape (n_samples,)

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.clusterers import nearest_center
    >>> C = np.array([[0.0, 0.0], [10.0, 0.0]]) + 1.7e9
    >>> nearest_center(C + [[1.0, 0.0], [-1.0, 0.0]], C).tolist()
    [0, 1]
    >>> nearest_center([[1e20, 1.0], [-1e20, 1.0]], [[-1.0, 0.0], [1.0, 0.0]]).tolist()
    [1, 0]
    """
    X = np.asarray(X, dtype=np.float64)
    centers = np.asarray(centers, dtype=np.float64)
    labels = np.zeros(X.shape[0], dtype=np.intp)
    if X.shape[0] == 0 or centers.shape[0] < 2:
        return labels
    reference = _midpoint(centers)
    C, c_shift, center_extent = _centered(centers, reference)
    center_exponent = _power_of_two_exponent(center_extent)
    block = max(1, _BLOCK_ELEMENTS // max(X.shape[1], centers.shape[0], 1))
    for start in range(0, X.shape[0], block):
        D, shift, row_extent = _centered(X[start : start + block], reference)
        Cb = C
        if shift > c_shift:
            D = D * 0.5
            row_extent = row_extent * 0.5
        elif shift < c_shift:
            Cb = C * 0.5
        exponents = [center_exponent, _power_of_two_exponent(row_extent)]
        if exponents[1] is not None:
            exponents[1] -= _ROW_HEADROOM_EXPONENT
        exponent = max((e for e in exponents if e is not None), default=0)
        # Powers of two scale exactly: the labels do not depend on the choice.
        factor = np.ldexp(1.0, -exponent)
        # D is this block's own temporary: scaled in place.
        Dn, Cn = np.multiply(D, factor, out=D), Cb * factor
        scores = Dn @ Cn.T
        scores *= -2.0
        # row_norms(Cn, squared=True), without its input checks.
        scores += np.einsum("ij,ij->i", Cn, Cn)[None, :]
        labels[start : start + block] = np.argmin(scores, axis=1)
    return labels


def center_means(X, labels, n_centers, *, weights=None, previous=None):
    """Weighted mean of the rows of each center; an empty center keeps ``previous``.

    The sums are taken relative to a reference row, so a large common offset
    costs no precision.

    Returns
    -------
    centers : ndarray of shape (n_centers, n_features)
    mass : ndarray of shape (n_centers,)
        Total weight of each center.
    """
    X = np.asarray(X, dtype=np.float64)
    weights = np.ones(X.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    reference = X[0] if X.shape[0] else np.zeros(X.shape[1])
    mass = np.bincount(labels, weights=weights, minlength=n_centers)
    sums = np.zeros((n_centers, X.shape[1]))
    np.add.at(sums, labels, (X - reference) * weights[:, None])
    if previous is None:
        centers = np.zeros((n_centers, X.shape[1]))
    else:
        centers = np.array(previous, dtype=np.float64, copy=True)
    filled = mass > 0
    centers[filled] = sums[filled] / mass[filled, None] + reference
    return centers, mass


def fuzzy_memberships(X, centers, fuzzifier=2.0):
    """Fuzzy c-means memberships ``u_ij = 1 / sum_h (d_ij / d_ih)^(2/(m-1))``.

    A point lying exactly on one or more centers is shared equally by them.
    Distances are computed by :func:`squared_distances` (translation
    invariant), and dividing by the row minimum keeps the powers in [0, 1]
    whatever the scale or the fuzzifier, so they never overflow or give 0/0.

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
    reference, scale = normalized_frame(centers, X)
    Xn, Cn = _normalize(X, reference, scale), _normalize(centers, reference, scale)
    d2 = row_norms(Xn, squared=True)[:, None] - 2.0 * (Xn @ Cn.T)
    d2 += row_norms(Cn, squared=True)[None, :]
    np.maximum(d2, 0.0, out=d2)
    nearest = d2.min(axis=1, keepdims=True)
    on_center = nearest[:, 0] == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = (nearest / d2) ** (1.0 / (fuzzifier - 1.0))
    inv[on_center] = d2[on_center] == 0
    return inv / inv.sum(axis=1, keepdims=True)
