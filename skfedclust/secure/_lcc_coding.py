"""The mathematics of Lagrange coded computing: points, encoding and decoding weights, precision.

Field arithmetic and public choices only, no protocol: the evaluation points
and Lagrange matrices of the encoding (Yu et al., AISTATS 2019, as OmniFC
uses them), the server's decoding weights, and the fixed-point precision and
quantization of the rows. ``skfedclust.secure._lcc`` runs the protocol on
top of it.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

from ._field import (
    mod_inverse,
)

#: Range of the precision ``q``. A decoded squared distance is an integer below
#: ``2**30`` (``p < 2**31``) times ``4**-q``; it is an exact float64 (possibly
#: subnormal) down to ``2**-1074`` and finite below ``2**1024``.
MAX_PRECISION = 537
MIN_PRECISION = -496


# --------------------------------------------------------------------------- #
# Public parameters
# --------------------------------------------------------------------------- #
def decoding_threshold(n_segments, n_colluders):
    """Number of parties needed to decode: ``2 l + 2 t - 1`` (OmniFC Theorem 1)."""
    return 2 * n_segments + 2 * n_colluders - 1


def check_party_indices(parties, name):
    """Parties named by integer index (``1.5`` or ``True`` name no party); as a list of int."""
    try:
        parties = list(parties)
    except TypeError:
        raise TypeError(f"{name} must be an iterable of party indices (ints)") from None
    for j in parties:
        if isinstance(j, (bool, np.bool_)) or not isinstance(j, numbers.Integral):
            raise TypeError(
                f"{name} must name parties by integer index 0, 1, ...; got {j!r} "
                f"({type(j).__name__})"
            )
    return [int(j) for j in parties]


def evaluation_points(n_segments, n_colluders, n_parties):
    """Public LCC points of OmniFC (Appendix C.2).

    Returns
    -------
    alphas : list of int
        Interpolation nodes ``1, 3, 5, ...`` (``l`` data segments then ``t`` noise).
    betas : list of int
        Party points ``0, 2, 4, ...``, one per share-holding party.
    """
    alphas = [2 * o + 1 for o in range(n_segments + n_colluders)]
    betas = [2 * j for j in range(n_parties)]
    return alphas, betas


def lagrange_matrix(nodes, points, p):
    """``M[a, b] = ell_a(points[b]) mod p`` for the Lagrange basis over ``nodes``.

    Exact modular arithmetic on Python ints (the matrices are tiny and public).
    """
    nodes = [int(v) % p for v in nodes]
    if len(set(nodes)) != len(nodes):
        raise ValueError("Lagrange nodes must be distinct modulo p")
    out = np.empty((len(nodes), len(points)), dtype=np.int64)
    for a, node in enumerate(nodes):
        others = [v for v in nodes if v != node]
        denom = 1
        for v in others:
            denom = denom * (node - v) % p
        inv = mod_inverse(denom, p)
        for b, z in enumerate(points):
            num = 1
            for v in others:
                num = num * (int(z) - v) % p
            out[a, b] = num * inv % p
    return out


def encoding_matrix(n_segments, n_colluders, n_parties, p):
    """Public encoding matrix ``U`` of shape ``(l + t, m)``: ``U[o, j] = ell_o(beta_j)``."""
    alphas, betas = evaluation_points(n_segments, n_colluders, n_parties)
    return lagrange_matrix(alphas, betas, p)


def server_decoding_weights(parties, n_segments, n_colluders, p):
    """Weights ``w_j = sum_{o <= l} lambda_j(alpha_o)`` over the parties that answered.

    ``sum_j w_j G_j mod p`` evaluates each pair's distance polynomial at the
    ``l`` data nodes and adds the segment distances.

    Parameters
    ----------
    parties : iterable of int
        Indices of the parties whose encoded distances arrived (distinct).
    n_segments : int
        ``l``.
    n_colluders : int
        ``t``.
    p : int
        The prime.

    Returns
    -------
    weights : ndarray of int64 of shape (len(parties),)
        One weight per answering party, in the order given.

    Raises
    ------
    ValueError
        If fewer than ``2 l + 2 t - 1`` parties answered: the degree
        ``2 (l + t - 1)`` polynomial of every pair is then not determined and
        any weights would decode garbage.
    """
    parties = check_party_indices(parties, "parties")
    needed = decoding_threshold(n_segments, n_colluders)
    if len(set(parties)) != len(parties) or min(parties, default=0) < 0:
        raise ValueError(f"parties must be distinct non-negative indices, got {parties}")
    if len(parties) < needed:
        raise ValueError(
            f"too few parties answered: {len(parties)} answered but decoding needs "
            f"{needed} = 2*n_segments + 2*n_colluders - 1"
        )
    alphas, betas = evaluation_points(n_segments, n_colluders, max(parties) + 1)
    nodes = [betas[j] for j in parties]
    lam = lagrange_matrix(nodes, alphas[:n_segments], p)
    return lam.sum(axis=1) % p


# --------------------------------------------------------------------------- #
# Quantization and the overflow guard
# --------------------------------------------------------------------------- #
def _ceil_sqrt(n):
    root = math.isqrt(n)
    return root if root * root == n else root + 1


def _wrap_bound(q, max_abs, max_norm, n_features):
    """Exact a priori bound on every integer squared distance at precision ``q``.

    Every coordinate of ``rint(2**q x_i) - rint(2**q x_j)`` is at most
    ``2**(q + 1) M + 1`` in magnitude (``M`` bounds ``|x - offset|``), and every
    row difference has norm at most ``2**(q + 1) N + sqrt(d)`` (``N`` bounds
    ``||x - offset||``); the smaller of the two squared bounds holds. Rational
    arithmetic keeps it exact and free of overflow for any finite bounds and
    any integer ``q``.
    """
    scale = Fraction(2) ** int(q)
    by_entry = n_features * (2 * scale * Fraction(max_abs) + 1) ** 2
    by_norm = (2 * scale * Fraction(max_norm) + _ceil_sqrt(n_features)) ** 2
    return min(by_entry, by_norm)


def precision_is_safe(q, max_abs, max_norm, n_features, p):
    """Whether no squared distance of data within these bounds can wrap modulo ``p``."""
    return 2 * _wrap_bound(q, max_abs, max_norm, n_features) < p - 1


def max_safe_precision(max_abs, max_norm, n_features, p):
    """Largest precision ``q`` for which no squared distance can wrap modulo ``p``.

    Parameters
    ----------
    max_abs : float
        Bound on ``|x|`` over all entries (public; of the centred data when
        the parties subtract a common offset).
    max_norm : float
        Bound on ``||x||_2`` over all rows (public, likewise).
    n_features : int
        Number of features.
    p : int
        The prime.

    Returns
    -------
    q : int
        Largest safe ``q`` in ``[MIN_PRECISION, MAX_PRECISION]``, the range in
        which every decoded squared distance ``integer * 4**-q`` is an exact
        float64.

    Raises
    ------
    ValueError
        If no ``q`` in that range is safe: the prime is too small for this
        many features, or the data are too spread out for float64.
    """
    _check_bound(max_abs, "max_abs")
    _check_bound(max_norm, "max_norm")
    if not precision_is_safe(MIN_PRECISION, max_abs, max_norm, n_features, p):
        if 2 * n_features >= p - 1:
            raise ValueError(
                f"no precision keeps the squared distances of {n_features} features below "
                f"p/2 with prime {p}: even one unit per feature wraps around. Use a larger "
                "prime."
            )
        raise ValueError(
            f"the data are too spread out for float64 squared distances: values reach "
            f"{max_abs:.3g} away from the common offset, so squared distances could exceed "
            f"the largest float64 ({np.finfo(np.float64).max:.3g}). Rescale the data "
            "(e.g. divide it by a constant)."
        )
    # the safe precisions are the integers up to the answer: bisect them
    lo, hi = MIN_PRECISION, MAX_PRECISION
    if precision_is_safe(hi, max_abs, max_norm, n_features, p):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if precision_is_safe(mid, max_abs, max_norm, n_features, p):
            lo = mid
        else:
            hi = mid
    return lo


def _check_bound(value, name):
    if not (isinstance(value, numbers.Real) and math.isfinite(value) and value >= 0):
        raise ValueError(
            f"{name} must be a finite non-negative bound, got {value!r}: the data's spread "
            "exceeds the float64 range; rescale the data (e.g. divide it by a constant)."
        )


def _data_bounds(arrays, offset=None):
    """``max |x - offset|`` and ``max ||x - offset||`` over the clients' rows.

    Computed by scaling with the largest entry so that no square overflows,
    then widened by a few rounding errors so that they bound the exact values.
    """
    max_abs, max_norm = 0.0, 0.0
    for a in arrays:
        if not a.size:
            continue
        centred_rows = a - offset if offset is not None else a
        with np.errstate(over="ignore", invalid="ignore"):
            largest = float(np.max(np.abs(centred_rows)))
        if not math.isfinite(largest):
            raise ValueError(
                "the data are too spread out for float64: the differences between the "
                "rows and their common offset overflow. Rescale the data (e.g. divide it "
                "by a constant)."
            )
        if largest == 0.0:
            continue
        unit = centred_rows / largest
        norm = largest * float(np.sqrt(np.einsum("ij,ij->i", unit, unit).max()))
        if not math.isfinite(norm):
            raise ValueError(
                f"the data are too spread out for float64: rows reach a norm above "
                f"{np.finfo(np.float64).max:.3g} around their common offset. Rescale the data "
                "(e.g. divide it by a constant)."
            )
        max_abs, max_norm = max(max_abs, largest), max(max_norm, norm)
    # float subtraction, division and summation round; the widening covers them
    widen = 1.0 + 64 * np.finfo(np.float64).eps * (1 + arrays[0].shape[1])
    return max_abs * widen, max_norm * widen


def check_resolution(precision, max_abs, resolution=0.0):
    """Refuse a precision whose quantization step hides the spread of the data.

    With ``2**q * max|x - offset| < 1/2`` every value rounds to the offset and
    the decoded distances are all zero. A spread not above ``resolution`` (the
    rounding of the common offset itself) is indistinguishable from none.
    """
    if max_abs <= resolution or math.ldexp(max_abs, int(precision)) >= 0.5:
        return
    raise ValueError(
        f"the spread of the data, max |x - offset| = {max_abs:.3g}, is below what the field "
        f"can resolve at precision q={precision} (quantization step 2**-q = "
        f"{math.ldexp(1.0, -int(precision)):.3g}): every squared distance would decode as 0. "
        + (
            f"q={precision} is the most float64 allows (squared distances below "
            f"{math.ldexp(1.0, -2 * MAX_PRECISION):.3g} are not representable): rescale the "
            "data (e.g. multiply it by a constant)."
            if precision >= MAX_PRECISION
            else "Use a larger precision (or precision='auto'), a larger prime, or rescale "
            "the data."
        )
    )


def resolve_precision(precision, bounds, p, n_features, *, resolution=0.0):
    """Pick ``q`` for ``"auto"`` or validate a user ``q`` against the wrap-around bound.

    Parameters
    ----------
    precision : int or "auto"
        The requested precision.
    bounds : tuple of float
        ``(max |x - offset|, max ||x - offset||)``: the public bounds of the
        rows minus the common offset. Distances do not depend on the offset;
        the field only has to hold the spread.
    p : int
        The prime.
    n_features : int
        Number of features.
    resolution : float, default=0.0
        Rounding of the common offset (:class:`CommonOffset`).

    Returns
    -------
    q : int
        The precision.
    """
    max_abs, max_norm = bounds
    if isinstance(precision, str):
        if precision != "auto":
            raise ValueError(f"precision must be 'auto' or an int, got {precision!r}")
        q = max_safe_precision(max_abs, max_norm, n_features, p)
        if max_abs <= resolution:
            # no spread to resolve (identical rows): every q decodes D = 0, so
            # take a plain one rather than the largest the bounds allow
            q = min(q, 0)
    elif isinstance(precision, bool) or not isinstance(precision, numbers.Integral):
        raise TypeError(f"precision must be 'auto' or an int, got {type(precision).__name__}")
    else:
        q = int(precision)
        _check_precision_range(q)
        if not precision_is_safe(q, max_abs, max_norm, n_features, p):
            raise ValueError(
                f"precision={q} could wrap around modulo p={p}: squared distances of this "
                f"data (max |x - offset| = {max_abs:.4g}, max row norm = {max_norm:.4g}) may "
                f"reach {float(_wrap_bound(q, max_abs, max_norm, n_features)):.4g} >= "
                f"(p - 1) / 2. Use precision <= "
                f"{max_safe_precision(max_abs, max_norm, n_features, p)}, precision='auto' "
                "or a larger prime."
            )
    check_resolution(q, max_abs, resolution)
    return q


def _check_precision_range(q):
    if not MIN_PRECISION <= q <= MAX_PRECISION:
        raise ValueError(
            f"precision={q} is outside [{MIN_PRECISION}, {MAX_PRECISION}]: the decoded "
            "squared distances (integers times 4**-q) would not be exact float64 numbers"
        )


def quantize(X, precision, p, n_segments, offset=None):
    """Fixed-point field image of ``X``: ``rint(2**q X) - rint(2**q offset) mod p``.

    Zero-padded to ``l`` segments: zero columns change no distance, so padding
    makes any ``d`` divisible by ``l``. Subtracting the rounded offset shifts
    every integer row by the same vector, so the squared distances are those
    of ``rint(2**q X)`` whatever the offset; it only keeps the integers small.
    The difference of the two rounded values is exact in float64 because it
    is small (both are small, or within a factor 2 of each other).
    """
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    width = -(-d // n_segments) if d else 1
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = np.rint(np.ldexp(X, precision))
        if offset is not None:
            scaled -= np.rint(np.ldexp(np.asarray(offset, dtype=np.float64), precision))
    if not np.all(np.abs(scaled) < 2.0**62):
        raise ValueError(
            f"at precision q={precision} the rows do not fit the fixed-point range: "
            "choose the precision from bounds that cover these rows"
        )
    out = np.zeros((n, width * n_segments), dtype=np.int64)
    out[:, :d] = np.mod(scaled.astype(np.int64), p)
    return out
