"""Lagrange coded computing (LCC) of the global squared-distance matrix.

The protocol of OmniFC (Yan, Liu & Zhang), as a standalone primitive written
against the protocol runtime (:mod:`skfedclust.federation`):

0. the clients agree on a common offset, the global mean, by secure
   aggregation (:func:`agree_offset`, a
   :class:`~skfedclust.secure.SecureAggregator` sum of exact fixed-point
   column sums; the mean down). Distances do not depend on the offset;
   subtracting it lets the field hold the spread of the data instead of its
   position. The public bounds the fixed-point scale and the precision are
   chosen from travel as counted set-up messages (one or two float64 per
   client; :func:`agree_scale`);
1. every data client quantizes its rows to F_p
   (``rint(2**q x) - rint(2**q offset) mod p``), cuts each row into ``l``
   segments, adds ``t`` uniformly random segments drawn from its private
   generator and sends every share-holding party the Lagrange polynomial of
   each row evaluated at the party's public point (:func:`lcc_share_step`,
   peer messages);
2. every party that answers computes the squared distances *mod p* between
   the encoded rows it holds and uploads them (:func:`lcc_tiles_step`);
3. the server combines the parties' matrices with public weights, which
   evaluates the degree-``2(l + t - 1)`` polynomial of every pair at the data
   points and sums the segments (:func:`server_decoding_weights`), then lifts
   the field values back to integers and divides by ``4**q``
   (:func:`lcc_decode_tiles_step`).

The upload of step 2 is streamed (:func:`streamed_exchange`): the server asks
every party for a few groups of tiles in turn (exchanges that count as one
round), each party computes them from the shares it holds and sends them as
centred int32 residues, and the server decodes every exchange tile by tile, folding
each party's tile into its weighted sum while it is in cache, before asking
for the next; the parties compute the next exchange while the server
decodes one. What the server keeps of the decoded tiles is a sink: the dense
matrix (:class:`DenseSink`), or per row only what a neighbour-graph
clusterer needs (:class:`NeighbourSink`: the nearest rows, the rows within a
radius, identical rows, the exact median), in ``O(n k)`` memory. No party's
full matrix is ever held by the server, and no share ever reaches it. Every
number is an exact integer, so the result does not depend on the partition,
the noise, the parameters ``(m, l, t)``, the surviving parties or
``n_jobs``.
"""

from __future__ import annotations

import functools
import math
import numbers
import threading
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from typing import NamedTuple

import numpy as np
from joblib import effective_n_jobs
from sklearn.utils import check_array, check_random_state
from threadpoolctl import threadpool_info

from ..clusterers._memory import check_dense_memory, release_free_heap
from ..federation import (
    Federation,
    InProcessRuntime,
    Received,
    Reply,
    logger,
    private_entropy,
    summand,
)
from ..federation._runtime import _thread_controller, thread_pool
from ._field import (
    DEFAULT_PRIME,
    ModularProduct,
    centred,
    check_prime,
    is_prime,
    mod_inverse,
    reduction_bound,
)
from ._moments import SumChannel

__all__ = [
    "decoding_threshold",
    "encoding_matrix",
    "evaluation_points",
    "lagrange_matrix",
    "lcc_encode",
    "lcc_squared_distances",
    "max_safe_precision",
    "quantize",
    "server_decoding_weights",
]

#: Range of the precision ``q``. A decoded squared distance is an integer below
#: ``2**30`` (``p < 2**31``) times ``4**-q``; it is an exact float64 (possibly
#: subnormal) down to ``2**-1074`` and finite below ``2**1024``.
MAX_PRECISION = 537
MIN_PRECISION = -496

#: Rows per block of the streamed distance computation. A block of float64 is
#: 2 MiB, so the few scratch blocks of one worker stay in a 2-core machine's
#: cache while BLAS still runs near peak.
BLOCK_SIZE = 512


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


# --------------------------------------------------------------------------- #
# Tags of the protocol's messages in the ledger
# --------------------------------------------------------------------------- #
TAG_ABS_BOUND = "bound on |x|"
TAG_OFFSET = "offset"
TAG_BOUNDS = "bounds around offset"
TAG_SHARE = "LCC share"
TAG_DISTANCES = "encoded distances"
TAG_QUERY_SHARE = "query share"
TAG_QUERY_DISTANCES = "encoded query distances"


def max_bound_step(bounds):
    """Server step: the largest of the bounds the clients sent (public metadata).

    Returns
    -------
    bound : ndarray of float64
        Element-wise maximum of the received bounds.
    """
    return np.max(np.vstack([np.atleast_1d(b) for b in bounds.list()]), axis=0)


# --------------------------------------------------------------------------- #
# Common offset: the global mean by secure aggregation
# --------------------------------------------------------------------------- #


class CommonOffset(NamedTuple):
    """The offset every party subtracts, and how finely it was aggregated.

    Attributes
    ----------
    values : ndarray of shape (n_features,)
        The global mean of the rows, as the server broadcast it.
    resolution : float
        Rounding of the aggregated mean: a spread of the rows around it that is
        not larger cannot be told from none.
    clients : list of int
        The data clients whose rows are in the mean (the survivors of the
        secure sum).
    """

    values: np.ndarray
    resolution: float
    clients: list


class DataHolderDroppedError(RuntimeError):
    """A data client dropped out of the protocol: the distances would miss its rows."""


def column_sum_exponent(max_abs, n_samples):
    """Exponent ``s`` of the fixed-point sums: entries become ``rint(x * 2**-s)``.

    (The secure sum's :func:`~skfedclust.secure.fixed_point_shift` counts the
    other way: entries become ``rint(x * 2**s)``.)

    With ``|x| < 2**E`` the scaled entries stay below ``2**(62 - bits(n))`` in
    magnitude, so the sum of ``n`` rows fits in int64 and decodes exactly.
    """
    exponent = math.frexp(max_abs)[1] if max_abs > 0 else 0
    return exponent - (62 - int(n_samples).bit_length())


def fixed_point_column_sums(X, shift):
    """The exact sum of the rows of ``X`` in fixed point, as int64."""
    scaled = np.rint(np.ldexp(np.asarray(X, dtype=np.float64), -shift)).astype(np.int64)
    return scaled.sum(axis=0, dtype=np.int64)


def offset_bound_step(data, inbox, state, party):
    """Set-up client step: the largest ``|x|`` of its rows up (one float64).

    The public bound that sets the fixed-point scale of the sums, the kind of
    bound parties agree before a protocol (e.g. 1 after per-row
    normalisation).
    """
    return Reply(send=np.float64(_data_bounds([data])[0]))


@summand
def offset_sum_step(data, inbox, state, party, *, shift):
    """Client step: the exact fixed-point column sums of its rows (int64), for a secure sum."""
    return Reply(send=fixed_point_column_sums(data, shift))


def offset_mean(total, n_samples, shift):
    """The mean from the summed fixed-point column sums."""
    total = np.asarray(total, dtype=np.int64)
    return np.ldexp(total.astype(np.float64) / max(n_samples, 1), shift)


def offset_bounds_step(data, inbox, state, party):
    """Set-up client step: keep the offset; send the bounds of the own rows around it.

    ``max |x - offset|`` and ``max ||x - offset||`` (two float64) are the
    public bounds the precision is chosen from; the server takes the largest.
    A party sends them once per fit: the distances of the farthest row from
    several server-chosen offsets would locate it.
    """
    offset = np.asarray(inbox[TAG_OFFSET], dtype=np.float64)
    if "offset" in state:
        # Distances from several server-chosen points would trilaterate the
        # farthest row: one offset per fit.
        raise PermissionError(
            "refused by rule 'one-offset': this party sent its bounds around the fit's "
            "offset already"
        )
    bounds = np.asarray(_data_bounds([data], offset), dtype=np.float64)
    return Reply(send=bounds, keep={"offset": offset})


def agree_offset(runtime, *, seed=None, require_all=True):
    """Protocol: secure aggregation of the global mean, the offset every party subtracts.

    Squared distances do not change when every row is shifted by the same
    vector, so the parties may quantize ``x - mean`` instead of ``x``: the
    field then only has to hold the spread of the data, not its position.
    Every data client sends the public bound on its ``|x|`` (a set-up
    exchange); the server takes the largest, which fixes a fixed-point scale
    at which every client's column sums are exact integers; a
    :class:`~skfedclust.secure.SecureAggregator` adds them (Bonawitz et al.,
    CCS 2017, on the graph of Bell et al., CCS 2020: the server learns the
    total and who took part, not a client's sums, and the sum survives
    clients that drop after masking), and the server sends the mean back to
    every data client.

    Parameters
    ----------
    runtime : Runtime
        The protocol runtime.
    seed : int, default=None
        Public seed of the secure-sum graph; ``None`` takes the first data
        client's public seed.
    require_all : bool, default=True
        Refuse a mean that misses a data client: the distance matrix needs
        every data holder's rows, so a dropped one ends the protocol
        (:class:`DataHolderDroppedError`) before the mean is sent. ``False``
        returns the mean of the survivors' rows, sent to them.

    Returns
    -------
    offset : CommonOffset
        The mean, its rounding and the clients in it.
    """
    sizes = np.asarray(runtime.client_sizes, dtype=np.int64)
    n_clients = runtime.n_clients
    runtime.stage("offset: bounds on |x| up (set-up)")
    bounds = runtime.run(offset_bound_step, tag=TAG_ABS_BOUND, setup=True)
    max_abs = float(runtime.server(max_bound_step, bounds)[0])
    _check_bound(max_abs, "the bound on |x|")
    # A secure sum adds integers below 2**62 / n_clients per client: rows scaled
    # below 2**62 / 2**bits(n n_clients) keep every client's sum, and the
    # total, within it.
    shift = column_sum_exponent(max_abs, int(sizes.sum()) * n_clients)
    if seed is None:
        seed = int(runtime.seeds[0])
    channel = SumChannel(runtime, secure=True, seed=int(seed))
    runtime.stage("offset: exact fixed-point column sums by secure aggregation")
    total, survivors = channel.sum(offset_sum_step, tag="common offset", bounds=None, shift=shift)
    dropped = sorted(set(range(n_clients)) - set(survivors))
    if dropped and require_all:
        raise DataHolderDroppedError(
            f"data clients {dropped} dropped out of the secure sum of the common offset. The "
            f"sum of the other {len(survivors)} was recovered, but the distance matrix needs "
            "every data holder's rows: the fit stops here, before any row is quantized or "
            "shared. Fit again when every data client can take part."
        )
    mean = offset_mean(total, int(sizes[survivors].sum()), shift)
    runtime.broadcast(mean, tag=TAG_OFFSET, clients=survivors)
    max_abs_exponent = math.frexp(max_abs)[1] if max_abs > 0 else 0
    resolution = math.ldexp(1.0, shift) + math.ldexp(1.0, max_abs_exponent - 51)
    return CommonOffset(mean, resolution, list(survivors))


class LCCScale(NamedTuple):
    """What the parties agree before the distance round.

    Attributes
    ----------
    offset : CommonOffset
        The common offset.
    precision : int
        The precision ``q``.
    bounds : tuple of float
        The public bounds ``(max |x - offset|, max ||x - offset||)``.
    """

    offset: CommonOffset
    precision: int
    bounds: tuple


def agree_scale(runtime, setup, precision, *, seed=None):
    """Protocol: the parties agree on the common offset and on the precision.

    After the offset (:func:`agree_offset`), every data client sends the
    bounds of its rows around it in a set-up exchange (two float64, counted
    in ``communication_``); the server takes the largest and chooses the
    precision from them. The bounds are public metadata: in a deployment
    they could as well be agreed in advance (e.g. unit-norm rows).

    Parameters
    ----------
    runtime : Runtime
        The protocol runtime.
    setup : LCCSetup
        The public parameters.
    precision : int or "auto"
        The requested precision.
    seed : int, default=None
        Public seed of the offset's secure-sum graph (see :func:`agree_offset`).

    Returns
    -------
    scale : LCCScale
        The offset, the precision ``q`` and the bounds it was chosen for.
    """
    offset = agree_offset(runtime, seed=seed)
    received = runtime.run(offset_bounds_step, tag=TAG_BOUNDS, setup=True)
    max_abs, max_norm = (float(b) for b in runtime.server(max_bound_step, received))
    bounds = (max_abs, max_norm)
    q = resolve_precision(
        precision, bounds, setup.p, runtime.n_features, resolution=offset.resolution
    )
    return LCCScale(offset, q, bounds)


# --------------------------------------------------------------------------- #
# Encoding and the share exchange
# --------------------------------------------------------------------------- #
def lcc_encode(residues, seed, *, encoding, n_segments, p):
    """The LCC shares of a client's own rows for every party.

    Parameters
    ----------
    residues : ndarray of int64 of shape (n_rows, l * w)
        The client's quantized rows in ``[0, p)``.
    seed : numpy.random.Generator or int
        The client's private generator (:attr:`Party.rng
        <skfedclust.federation.Party.rng>`; an int seeds one, for tests): the
        ``t`` noise segments of every row are drawn fresh and uniform on
        ``F_p`` from it.
    encoding : ndarray of shape (l + t, m)
        The public encoding matrix (:func:`encoding_matrix`).
    n_segments : int
        ``l``.
    p : int
        The prime.

    Returns
    -------
    shares : ndarray of uint32 of shape (m, n_rows, w)
        ``shares[j]`` is what party ``j`` receives: ``sum_o U[o, j] s_o mod p``.
    """
    n_rows = residues.shape[0]
    width = residues.shape[1] // n_segments
    n_noise = encoding.shape[0] - n_segments
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, p, size=(n_noise, n_rows, width), dtype=np.int64)
    shares = np.empty((encoding.shape[1], n_rows, width), dtype=np.uint32)
    residues = np.asarray(residues, dtype=np.int64)
    encoding = np.asarray(encoding, dtype=np.int64)
    in_field = [np.all((a >= 0) & (a < p)) for a in (residues, encoding)]
    if all(in_field) and residues.shape[1] == n_segments * width:
        from ._kernels import encode_shares

        # one compiled pass; the same canonical residues as the loop below
        encode_shares(residues, n_segments, noise, encoding, p, shares)
        return shares
    segments = [residues[:, o * width : (o + 1) * width] for o in range(n_segments)]
    segments += list(noise)
    for j in range(encoding.shape[1]):
        acc = np.zeros((n_rows, width), dtype=np.int64)
        for o, seg in enumerate(segments):
            # (p - 1)**2 < 2**62: one product fits in int64; reduce after each term.
            acc += seg * int(encoding[o, j])
            acc %= p
        shares[j] = acc
    return shares


def agreed_encoding(n_segments, n_colluders, n_parties, p):
    """The encoding matrix a party builds itself from the fit's public integers.

    Taken from the server as a matrix, its noise rows could be zero, and
    every share would then be the quantized rows themselves: one colluding
    party would read them. A party refuses fewer than one colluder's worth
    of noise and a modulus that is not prime.
    """
    n_segments, n_colluders, n_parties, p = (
        int(n_segments),
        int(n_colluders),
        int(n_parties),
        int(p),
    )
    if n_colluders < 1:
        raise PermissionError(
            f"refused by rule 'lcc-noise': {n_colluders} colluders; a share without noise "
            "is the rows themselves"
        )
    if n_segments < 1 or n_parties < n_segments + n_colluders or not is_prime(p) or p < 2**16:
        raise PermissionError(
            f"refused by rule 'lcc-noise': l={n_segments}, t={n_colluders}, m={n_parties}, "
            f"p={p} is no Lagrange code"
        )
    return _encoding_matrix_cached(n_segments, n_colluders, n_parties, p)


@functools.lru_cache(maxsize=8)
def _encoding_matrix_cached(n_segments, n_colluders, n_parties, p):
    matrix = encoding_matrix(n_segments, n_colluders, n_parties, p)
    matrix.flags.writeable = False
    return matrix


def lcc_share_step(data, inbox, state, party, *, precision, n_colluders, n_parties, n_segments, p):
    """Client step: quantize the own rows around the offset, send every party its shares.

    The share for party ``j`` goes to it as a peer message; the client's own
    share (it is a party too) stays with it. The encoding matrix is the
    client's own (:func:`agreed_encoding`), from the public ``l``, ``t``,
    ``m`` and ``p``.
    """
    encoding = agreed_encoding(n_segments, n_colluders, n_parties, p)
    residues = quantize(data, precision, p, n_segments, state["offset"])
    shares = lcc_encode(residues, party.rng, encoding=encoding, n_segments=n_segments, p=p)
    me = party.index
    others = {j: shares[j] for j in range(shares.shape[0]) if j != me}
    # a copy, so that the other parties' shares are not kept alive through it
    return Reply(to_peers=others, keep={"own share": shares[me].copy()})


# --------------------------------------------------------------------------- #
# Party side: encoded distances, tile by tile
# --------------------------------------------------------------------------- #
#: Bytes of one field element on the wire (residues below 2**31 fit 32 bits).
ELEMENT_BYTES = np.dtype(np.uint32).itemsize


def encoded_row_norms(shares, p):
    """Squared norms mod p of encoded rows, centred (the extra product columns)."""
    shares = np.asarray(shares)
    if shares.dtype == np.uint32 and shares.ndim == 2 and p < 2**31:
        from ._kernels import row_norms

        # one compiled pass; the same centred residues as below
        out = np.empty(shares.shape[0])
        row_norms(shares, p, out)
        return out
    sq = np.asarray(shares, dtype=np.int64)
    sq = sq * sq % p
    return centred(sq.sum(axis=1) % p, p)


class _Scratch:
    """Per-thread float64 scratch blocks of at most ``size x size``."""

    def __init__(self, keys):
        self.keys = keys
        self.local = threading.local()

    def get(self, size, shape):
        bufs = getattr(self.local, "bufs", None)
        if bufs is None or bufs[self.keys[0]].shape != (size, size):
            bufs = {k: np.empty((size, size)) for k in self.keys}
            self.local.bufs = bufs
        return {k: v[: shape[0], : shape[1]] for k, v in bufs.items()}


def _tile_shape(tile):
    a0, a1, b0, b1 = tile
    return a1 - a0, b1 - b0


def _is_diagonal(tile, symmetric):
    return symmetric and tile[0] == tile[2]


def tile_elements(tile, symmetric):
    """Field elements a party sends for one tile (the strict upper triangle of a diagonal one)."""
    ka, kb = _tile_shape(tile)
    return ka * (ka - 1) // 2 if _is_diagonal(tile, symmetric) else ka * kb


def party_tiles(left, right, tiles, p, *, symmetric, n_threads=1):
    """A party's tiles of ``G[a, b] = ||z_a - z_b||**2 mod p``, as centred int32 residues.

    Computed from the encoded rows the party holds and nothing else. Each
    tile is one exact float64 product (:class:`ModularProduct`) of
    ``[-2 z_a mod p, r_a, 1]`` against ``[z_b, 1, r_b]`` (``r`` the squared
    row norms), which gives ``r_a + r_b - 2 z_a . z_b``, and one reduction.
    The operands are prepared once per request, for the row and column
    blocks of its tiles only, and freed with it.

    Parameters
    ----------
    left, right : tuple of (ndarray of uint32 of shape (n, w), ndarray of shape (n,))
        Encoded rows and their :func:`encoded_row_norms`: the rows and the
        columns of ``G`` (the same for the training distances).
    tiles : list of tuple of int
        ``(a0, a1, b0, b1)``: rows ``a0:a1`` against columns ``b0:b1``.
    p : int
        The prime.
    symmetric : bool
        Whether ``G`` is symmetric with a zero diagonal: a diagonal tile then
        sends only its strict upper triangle, row by row.
    n_threads : int, default=1
        Threads over the tiles.

    Returns
    -------
    tiles : tuple of ndarray of int32
        One array per tile, congruent residues of magnitude at most ``(p -
        1)/2 + 3`` (a 32-bit field element each, centred so that the server
        folds them without another pass): the message.
    """
    from ._kernels import tile_residues

    (Z_a, r_a), (Z_b, r_b) = left, right
    plan = ModularProduct.plan(p, Z_a.shape[1])
    scratch = _Scratch(("g", "tmp", "tmp2"))
    size = max((max(_tile_shape(t)) for t in tiles), default=1)
    out = [None] * len(tiles)

    # the operands of every row and column block of this request, each built
    # once, by the first tile task that needs it: on the tiles' threads rather
    # than one after another before them
    def build(side, start, stop):
        if side == "left":
            rows, norms = Z_a[start:stop], r_a[start:stop]
            return plan.left_operand_from_residues(rows, factor=-2, extra=[norms, 1.0])
        return plan.right_operand_from_residues(Z_b[start:stop], extra=[1.0, r_b[start:stop]])

    operands = {}
    locks = {("left", *t[:2]): threading.Lock() for t in tiles}
    locks.update({("right", *t[2:]): threading.Lock() for t in tiles})

    def operand(key):
        with locks[key]:
            if key not in operands:
                operands[key] = build(*key)
            return operands[key]

    def task(k, tile):
        a0, a1, b0, b1 = tile
        work = scratch.get(size, _tile_shape(tile))
        lhs, rhs = operand(("left", a0, a1)), operand(("right", b0, b1))
        # the product's last reduction runs in the pass that packs the
        # message: |g| <= p/2 + 3 after it, a 32-bit residue as it is
        g = plan.product(lhs, rhs, work["g"], work["tmp"], work["tmp2"], reduce=False)
        diagonal = _is_diagonal(tile, symmetric)
        message = np.empty(tile_elements(tile, symmetric), dtype=np.int32)
        tile_residues(g, float(p), True, diagonal, message)
        out[k] = message

    _run_blocks(task, list(enumerate(tiles)), n_threads)
    return tuple(out)


def _assemble_encoded_rows(inbox, state, party, row_numbers, n_samples):
    held = dict(inbox.get(TAG_SHARE, {}))
    if state.get("own share") is not None:
        held[party.index] = state["own share"]
    width = next(iter(held.values())).shape[1]
    Z = np.empty((n_samples, width), dtype=np.uint32)
    for client, shares in held.items():
        Z[np.asarray(row_numbers[client])] = shares
    return Z


def lcc_tiles_step(
    data, inbox, state, party, *, tiles, p, row_numbers=None, n_samples=None, n_threads=1
):
    """Party step: the requested tiles of its encoded squared distances mod p, uploaded.

    Data clients and data-less parties alike. At the first request
    (``row_numbers`` given) the party stacks the shares it received, and its
    own, in the public row numbering and keeps them: its encoded rows, which
    stay with it (to answer later requests, and predict's queries). Every
    request is answered from them alone (:func:`party_tiles`).
    """
    keep = {}
    if row_numbers is not None:
        Z = _assemble_encoded_rows(inbox, state, party, row_numbers, n_samples)
        norms = encoded_row_norms(Z, p)
        keep = {"encoded rows": Z, "row norms": norms}
        if "own share" in state:
            keep["own share"] = None  # now a row of the encoded rows
    else:
        Z, norms = state["encoded rows"], state["row norms"]
    send = party_tiles((Z, norms), (Z, norms), tiles, p, symmetric=True, n_threads=n_threads)
    return Reply(send=send, keep=keep)


def lcc_query_share_step(
    data, inbox, state, party, *, precision, n_colluders, n_parties, n_segments, p
):
    """Client step of the querying party: Lagrange-encode its new rows, send every party its shares.

    ``data`` are the querying party's new rows. Quantized around the offset
    it kept, masked with fresh noise from its private generator; its own
    share stays with it.
    """
    encoding = agreed_encoding(n_segments, n_colluders, n_parties, p)
    residues = quantize(data, precision, p, n_segments, state["offset"])
    shares = lcc_encode(residues, party.rng, encoding=encoding, n_segments=n_segments, p=p)
    me = party.index
    others = {j: shares[j] for j in range(shares.shape[0]) if j != me}
    return Reply(to_peers=others, keep={"query share": shares[me].copy()})


def lcc_query_tiles_step(data, inbox, state, party, *, tiles, p, querier, first, last, n_threads=1):
    """Party step: tiles of the encoded distances of the query rows to its training rows.

    At the first request the party keeps the query share it received (or its
    own, for the querier); after the last one it drops it.
    """
    if first:
        received = inbox.get(TAG_QUERY_SHARE, {})
        Q = received[querier] if querier in received else state["query share"]
        query = (Q, encoded_row_norms(Q, p))
    else:
        query = state["query rows"]
    train = (state["encoded rows"], state["row norms"])
    send = party_tiles(query, train, tiles, p, symmetric=False, n_threads=n_threads)
    keep = {"query share": None, "query rows": None if last else query}
    return Reply(send=send, keep=keep)


# --------------------------------------------------------------------------- #
# Server side: streamed decoding
# --------------------------------------------------------------------------- #
class StreamingDecoder:
    """Server side of the decoding, tile by tile.

    The weighted sum ``sum_j w_j G_j`` of one tile is accumulated in int64
    row by row, reading every party's tile as it arrived (centred int32
    residues, only the strict upper triangle of a diagonal tile), and reduced
    to ``[0, p)`` once at the end, in the same pass that writes the decoded
    row out (``_kernels.decode_tile``). Every term is exact: with centred
    weights ``|w_j| <= (p - 1)/2`` and residues ``|g| <= (p - 1)/2 + 3``
    (:func:`reduction_bound`), a term is below ``2**60`` for any ``p <
    2**31`` (below ``2**58`` for the default prime). The accumulator is
    reduced every :attr:`flush_every` parties, so that it never exceeds
    ``2**62`` (``p`` left after a reduction plus that many terms): its sum is
    then exact in int64, and so is the float quotient that reduces it
    (``_kernels._canonical``). That is a reduction every 16 parties with the
    default prime, every 3 with ``2**31 - 1``.

    Parameters
    ----------
    weights : ndarray of int64
        The decoding weights, one per answering party.
    p : int
        The prime.
    precision : int
        The precision ``q``: the decoded integers are scaled by ``4**-q``.
    """

    def __init__(self, weights, p, precision):
        self.p = int(p)
        # ldexp: 2.0 ** (-2 q) raises OverflowError for q below about -512
        self.scale = math.ldexp(1.0, -2 * int(precision))
        self.weights = centred(np.asarray(weights, dtype=np.int64), p, np.int64)
        term = ((self.p - 1) // 2) * reduction_bound(self.p)
        self.flush_every = max(1, (2**62 - self.p) // term)

    def _decode(self, uploads, k, tile, symmetric, out, a0, b0, scale, mirror):
        from ._kernels import decode_tile

        messages = tuple(_read_only(u[k]) for u in uploads)
        n, m = _tile_shape(tile)
        wrapped = decode_tile(
            messages,
            self.weights,
            self.flush_every,
            self.p,
            scale,
            out,
            a0,
            b0,
            n,
            m,
            _is_diagonal(tile, symmetric),
            mirror,
        )
        if wrapped:
            raise ArithmeticError(
                "a decoded squared distance wrapped around modulo p: either the precision is "
                "too high for this data or prime (the overflow guard should have refused it), "
                "or the decoding weights come from fewer than 2*n_segments + 2*n_colluders - 1 "
                "answering parties"
            )

    def decode_block(self, uploads, k, tile, symmetric, out):
        """Decoded integer squared distances of tile ``k``, as float64 in ``out``.

        ``uploads`` holds every answering party's message (its tiles, in the
        order of the weights). The integers ``||rint(2**q x_a) - rint(2**q
        x_b)||**2``, exact in float64 (a diagonal tile mirrored, with a zero
        diagonal); :attr:`scale` (``4**-q``) turns them into real distances.
        """
        self._decode(uploads, k, tile, symmetric, out, 0, 0, 1.0, False)
        return out

    def decode_dense(self, uploads, k, tile, symmetric, dense):
        """Write decoded tile ``k``, times :attr:`scale`, into the matrix ``dense`` (mirrored).

        In the same pass as the decoding: the tile is never held apart.
        """
        a0, _, b0, _ = tile
        mirror = symmetric and not _is_diagonal(tile, symmetric)
        self._decode(uploads, k, tile, symmetric, dense, a0, b0, self.scale, mirror)


def _read_only(values):
    """A contiguous 1-D read-only view (a copy only if not contiguous).

    The decoding kernel takes the parties' messages as one tuple: read-only
    views give every party's message the same type, whether it arrived as
    a read-only buffer (deserialized) or as a writable array (in-process).
    """
    view = np.ascontiguousarray(values).reshape(-1).view()
    view.flags.writeable = False
    return view


def _check_tiles(received, tiles, symmetric):
    """Refuse an upload that is not the requested tiles (the party's own mistake).

    The values themselves are trusted: parties are honest-but-curious (a
    party that sends wrong residues corrupts ``D`` whatever is checked).
    """
    for party, payload in received.items():
        ok = isinstance(payload, (tuple, list)) and len(payload) == len(tiles)
        ok = ok and all(
            isinstance(v, np.ndarray)
            and v.dtype == np.int32
            and v.size == tile_elements(t, symmetric)
            for v, t in zip(payload, tiles)
        )
        if not ok:
            raise ValueError(
                f"party {party} did not send the {len(tiles)} requested tiles of residues mod p"
            )


def lcc_decode_tiles_step(
    received, *, tiles, weights, p, precision, sink, symmetric, progress, n_jobs=None
):
    """Server step: decode one exchange of tiles, tile by tile, into ``sink``.

    Parameters
    ----------
    received : Received
        The answering parties' tiles, in the order of ``weights``.
    tiles : list of tuple of int
        The tiles asked for in this exchange.
    weights : ndarray of int64
        The decoding weights of the answering parties.
    p : int
        The prime.
    precision : int
        The precision ``q``.
    sink : DenseSink or NeighbourSink
        What the server keeps of every decoded tile: the dense matrix
        (:class:`DenseSink`), or per row only what a clusterer needs
        (:class:`NeighbourSink`). Each tile is handed over as soon as it is
        decoded, as exact integers.
    symmetric : bool
        Training distances (upper block triangle) or query distances.
    progress : _BlockProgress
        Progress lines, one per tile.
    n_jobs : int, default=None
        Threads over the tiles.
    """
    _check_tiles(received, tiles, symmetric)
    uploads = received.list()
    decoder = StreamingDecoder(weights, p, precision)
    blocks = _Scratch(("block",))
    size = max(max(_tile_shape(t)) for t in tiles)

    def task(k, tile):
        a0, a1, b0, b1 = tile
        if isinstance(sink, DenseSink):
            # decoded, scaled and written (both triangles) in one pass
            decoder.decode_dense(uploads, k, tile, symmetric, sink.out)
        else:
            block = blocks.get(size, _tile_shape(tile))["block"]
            sink.add(tile, decoder.decode_block(uploads, k, tile, symmetric, block), decoder.scale)
        progress.tick(slice(a0, a1), slice(b0, b1))

    _run_blocks(task, list(enumerate(tiles)), n_jobs)


def decode_squared_distances(shares, weights, precision, p, *, n_jobs=None):
    """``D`` from the parties' encoded rows directly, with the protocol's tiles and decoder.

    The same party computation (:func:`party_tiles`) and server decoding
    (:func:`lcc_decode_tiles_step`) as the protocol, exchange by exchange,
    without a runtime: a reference for tests and for the algebra.

    Parameters
    ----------
    shares : list of ndarray of shape (n, w)
        Every answering party's encoded rows, residues in ``[0, p)``, in the
        order of ``weights``.
    weights : ndarray of int64
        The decoding weights (:func:`server_decoding_weights`).
    precision : int
        The precision ``q``.
    p : int
        The prime.
    n_jobs : int, default=None
        Threads over the tiles.

    Returns
    -------
    D : ndarray of shape (n, n)
        The decoded squared distances.
    """
    parts = [(np.asarray(z, dtype=np.uint32), encoded_row_norms(z, p)) for z in shares]
    n = parts[0][0].shape[0]
    exchanges = tile_exchanges(n, n, len(parts), symmetric=True)
    progress = _BlockProgress("decoding D", sum(len(tiles) for tiles in exchanges))
    out = np.empty((n, n))
    sink = DenseSink(out, symmetric=True)
    for tiles in exchanges:
        received = Received(
            TAG_DISTANCES,
            {j: party_tiles(z, z, tiles, p, symmetric=True) for j, z in enumerate(parts)},
        )
        lcc_decode_tiles_step(
            received,
            tiles=tiles,
            weights=weights,
            p=p,
            precision=precision,
            sink=sink,
            symmetric=True,
            progress=progress,
            n_jobs=n_jobs,
        )
    return sink.finish()


def _blocks(n, size):
    return [slice(a, min(a + size, n)) for a in range(0, n, size)]


def _block_workers(n_jobs):
    """Threads for the streamed blocks.

    ``n_jobs=None`` uses the cores BLAS would use anyway: one single-threaded
    BLAS per worker on small blocks beats one multi-threaded BLAS per block,
    and lets the reductions run in parallel too.
    """
    if n_jobs is not None:
        return effective_n_jobs(n_jobs)
    blas = [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]
    return max(blas, default=1)


def party_threads(n_jobs):
    """Threads each party uses for its tiles when the runtime runs it with ``n_jobs``.

    ``n_jobs=None`` runs the parties one after another in this process: each
    then uses the cores BLAS would use. Otherwise parties run side by side,
    one thread each.
    """
    if n_jobs is None or effective_n_jobs(n_jobs) == 1:
        return _block_workers(None)
    return 1


class _BlockProgress:
    """DEBUG lines of a long block stage: one per block done (thread-safe)."""

    def __init__(self, what, n_tasks):
        self.what = what
        self.n_tasks = n_tasks
        self.done = 0
        self._lock = threading.Lock()

    def tick(self, ra, rb):
        # Logged under the lock: the lines come in the order of their counts.
        with self._lock:
            self.done += 1
            logger.debug(
                "%s: block %d/%d (rows %d:%d x %d:%d)",
                self.what,
                self.done,
                self.n_tasks,
                ra.start,
                ra.stop,
                rb.start,
                rb.stop,
            )


def _run_blocks(task, tasks, n_jobs):
    """Run block tasks on threads (numpy and BLAS release the GIL)."""
    n_workers = min(_block_workers(n_jobs), max(len(tasks), 1))
    # One BLAS thread per worker: the workers occupy the cores, and a block is
    # too small for a multi-threaded BLAS to pay off.
    # the process-wide controller: scanning the libraries again for every
    # request would cost more than a small exchange
    with _thread_controller().limit(limits=1, user_api="blas"):
        if n_workers == 1:
            for args in tasks:
                task(*args)
            return
        # A long-lived pool: joblib's threading backend waits for its results
        # in 10 ms sleeps, a few percent of a round of many exchanges.
        for _ in thread_pool(n_workers).map(lambda arguments: task(*arguments), tasks):
            pass


#: Share of the decoded matrix's size that one exchange of a streamed upload
#: may bring to the server, all answering parties together (a quarter of
#: ``D``), and never less than :data:`MIN_EXCHANGE_BYTES`.
EXCHANGE_FRACTION = 0.25
MIN_EXCHANGE_BYTES = 8 * 2**20
#: Largest message one party sends in one exchange (well below gRPC's 2 GiB).
MAX_MESSAGE_BYTES = 256 * 2**20
#: Largest exchange, all parties together: the messages the server holds at
#: once stay bounded whatever ``n``.
MAX_EXCHANGE_BYTES = 128 * 2**20
#: Values the streaming median keeps before it counts them in a window, and
#: the widest window it counts every integer of.
MEDIAN_SAMPLE = 2**22
MEDIAN_WINDOW = 2**22


def _spread_order(n_items):
    """A fixed order that visits ``range(n_items)`` spread out (bit-reversed indices)."""
    bits = max(int(n_items - 1).bit_length(), 1)
    index = np.arange(2**bits)
    reversed_ = np.zeros_like(index)
    for b in range(bits):
        reversed_ |= ((index >> b) & 1) << (bits - 1 - b)
    return [int(i) for i in reversed_ if i < n_items]


def tile_exchanges(n_rows, n_cols, n_parties, *, symmetric):
    """The tiles of a streamed upload, grouped into exchanges.

    Tiles of at most :data:`BLOCK_SIZE` rows and columns, the upper block
    triangle for a symmetric matrix. An exchange takes tiles while every
    answering party's message stays within ``min(max(EXCHANGE_FRACTION * 8
    n_rows n_cols, MIN_EXCHANGE_BYTES), MAX_EXCHANGE_BYTES) / n_parties`` and
    :data:`MAX_MESSAGE_BYTES`: the server holds at most a quarter of ``D``,
    and never more than :data:`MAX_EXCHANGE_BYTES`, in messages at any time.
    The tiles of an exchange form a rectangle of row blocks against column
    blocks, so that a party prepares each block's operands once for several
    tiles, and the rectangles are visited spread over the matrix (bit-reversed
    order), so that the first exchanges are a fair sample of all pairs. The
    plan depends on public sizes only, so every runtime makes the same
    exchanges.

    Returns
    -------
    exchanges : list of list of tuple of int
        The ``(a0, a1, b0, b1)`` tiles of every exchange.
    """
    rows, cols = _blocks(n_rows, BLOCK_SIZE), _blocks(n_cols, BLOCK_SIZE)
    total = min(
        max(EXCHANGE_FRACTION * 8.0 * n_rows * n_cols, MIN_EXCHANGE_BYTES), MAX_EXCHANGE_BYTES
    )
    limit = min(total / max(n_parties, 1), MAX_MESSAGE_BYTES)
    per_message = max(1, int(limit // (ELEMENT_BYTES * BLOCK_SIZE * BLOCK_SIZE)))
    side = max(1, math.isqrt(per_message))
    bands = [range(a, min(a + side, len(rows))) for a in range(0, len(rows), side)]
    strips = [range(a, min(a + side, len(cols))) for a in range(0, len(cols), side)]
    rectangles = []
    for band in bands:
        for strip in strips:
            tiles = [
                (rows[i].start, rows[i].stop, cols[j].start, cols[j].stop)
                for i in band
                for j in strip
                if not symmetric or j >= i
            ]
            if tiles:
                rectangles.append(tiles)
    exchanges, current, size = [], [], 0
    for r in _spread_order(len(rectangles)):
        for tile in rectangles[r]:
            nbytes = ELEMENT_BYTES * tile_elements(tile, symmetric)
            if current and size + nbytes > limit:
                exchanges.append(current)
                current, size = [], 0
            current.append(tile)
            size += nbytes
    if current:
        exchanges.append(current)
    return exchanges


def streamed_exchange(
    runtime, step, *, parties, n_rows, n_cols, symmetric, decode, sink=None, **public
):
    """Protocol: ask ``parties`` for their tiles exchange by exchange; decode each at once.

    All exchanges count as one round (``same_round``): they are the blocks
    of one upload the server asks for in turn. While the server decodes one
    exchange, the parties already compute the next (a second thread asks
    for it): only these two exchanges' messages are alive on the server
    side. A :class:`NeighbourSink` may ask for the tiles once more (a second
    pass in the same round), when the first did not settle what it keeps.

    Parameters
    ----------
    runtime : Runtime
        The protocol runtime.
    step : callable
        The party step answering a request (:func:`lcc_tiles_step`,
        :func:`lcc_query_tiles_step`); gets ``tiles`` besides ``public``.
    parties : list of int
        The answering parties.
    n_rows, n_cols : int
        Shape of the decoded matrix.
    symmetric : bool
        Training distances or query distances.
    decode : dict
        Public constants of :func:`lcc_decode_tiles_step` (``weights``,
        ``p``, ``precision``, ``n_jobs``, ``tag``, ``what``).
    sink : DenseSink or NeighbourSink, default=None
        What the server keeps of the decoded tiles; ``None`` keeps the dense
        matrix.
    **public
        Public constants of ``step``; a callable value is called with
        ``(first, last)`` (whether the exchange is the first, the last) to
        give the constant of each exchange.

    Returns
    -------
    result : ndarray of shape (n_rows, n_cols) or NeighbourGraph
        What ``sink.finish()`` returns: the decoded matrix by default.
    """
    decode = dict(decode)
    tag, what = decode.pop("tag"), decode.pop("what")
    # resolved here: inside the single-threaded section below BLAS reports 1
    decode["n_jobs"] = _block_workers(decode.get("n_jobs"))
    if sink is None:
        sink = DenseSink(np.empty((n_rows, n_cols)), symmetric)
    exchanges = tile_exchanges(n_rows, n_cols, len(parties), symmetric=symmetric)
    progress = _BlockProgress(what, sum(len(tiles) for tiles in exchanges))

    def request(pass_, i):
        first = pass_ == 0 and i == 0
        last = i == len(exchanges) - 1
        constants = {k: (v(first, last) if callable(v) else v) for k, v in public.items()}
        return runtime.run(
            step, tag=tag, clients=parties, same_round=not first, tiles=exchanges[i], **constants
        )

    pass_ = 0
    # one process-wide limit around both threads: the limits each one sets and
    # lifts inside then never lift the other's
    with _thread_controller().limit(limits=1), ThreadPoolExecutor(1) as asker:
        while True:
            plan = [(pass_, i) for i in range(len(exchanges))]
            # The parties compute the next exchange while the server decodes one.
            pending = asker.submit(request, *plan[0])
            for k, (_, i) in enumerate(plan):
                received = pending.result()
                if k + 1 < len(plan):
                    pending = asker.submit(request, *plan[k + 1])
                runtime.server(
                    lcc_decode_tiles_step,
                    received,
                    tiles=exchanges[i],
                    sink=sink,
                    symmetric=symmetric,
                    progress=progress,
                    **decode,
                )
                # this exchange's messages are decoded: free them, and the
                # heap pages they leave behind
                del received
                release_free_heap()
            if not sink.another_pass():
                break
            pass_ += 1
            runtime.stage("server: a second pass over the tiles")
    return sink.finish()


# --------------------------------------------------------------------------- #
# What the server keeps of the decoded tiles
# --------------------------------------------------------------------------- #
class DenseSink:
    """Keeps every decoded tile: the dense matrix of real squared distances.

    Parameters
    ----------
    out : ndarray of shape (n_rows, n_cols)
        The matrix to fill.
    symmetric : bool
        Mirror every off-diagonal tile, and zero the diagonal at the end.
    """

    def __init__(self, out, symmetric):
        self.out = out
        self.symmetric = symmetric

    def add(self, tile, values, scale):
        """Write one tile of decoded integers ``values``, times ``scale``."""
        a0, a1, b0, b1 = tile
        block = self.out[a0:a1, b0:b1]
        np.multiply(values, scale, out=block)
        if self.symmetric and a0 != b0:
            self.out[b0:b1, a0:a1] = block.T

    def another_pass(self):
        return False

    def finish(self):
        if self.symmetric:
            np.fill_diagonal(self.out, 0.0)
        return self.out


class NeighbourGraph(NamedTuple):
    """What a :class:`NeighbourSink` kept of the decoded distances.

    Attributes
    ----------
    first : ndarray of int of shape (n,)
        The lowest row at squared distance 0 from every row (itself if none
        lower): groups of identical quantized rows.
    neighbours : ndarray of int of shape (n, capacity) or None
        Per row, the nearest other rows in increasing ``(distance, index)``
        order (ties go to the lower index); ``-1`` pads rows with fewer.
        When ``masked``, only the first row of every group of identical rows
        is listed, and only the rows' own group is left out.
    distances : ndarray of int64 of shape (n, capacity) or None
        Their integer squared distances (times ``scale``: real ones).
    masked : bool
        Whether ``neighbours`` list only the first rows of groups.
    median : float or None
        The median of the nonzero real squared distances of the upper
        triangle (every pair once), exactly as :func:`numpy.median` computes it.
    radius_graph : scipy.sparse.csr_array or None
        The Euclidean distance of every pair within ``radius`` (both
        directions, explicit zeros kept, no diagonal), sorted indices.
    dense : ndarray or None
        The dense matrix of real squared distances, when it was kept too.
    scale : float
        ``4**-q``.
    passes : int
        Passes over the tiles the server asked for (2 when the first did not
        settle the median or the neighbours among identical rows).
    """

    first: np.ndarray
    neighbours: np.ndarray
    distances: np.ndarray
    masked: bool
    median: float
    radius_graph: object
    dense: np.ndarray
    scale: float
    passes: int


_NO_KEY = np.iinfo(np.int64).max


class _StreamingMedian:
    """Exact median of the nonzero integers seen, in bounded memory.

    The first :data:`MEDIAN_SAMPLE` values are kept as they come; if there
    are no more, the median is theirs. Otherwise they fix a window around
    their median (:data:`MEDIAN_WINDOW` integers at most) in which every
    value is counted exactly; below and above it only counts are kept, and a
    coarse histogram of every value. If the median ranks fall outside the
    window, a second pass counts exactly within the coarse bins that hold
    them (the coarse histogram says which), which always settles it.
    """

    def __init__(self, value_bound):
        self.shift = max(0, int(value_bound).bit_length() - 16)
        self.coarse = np.zeros((int(value_bound) >> self.shift) + 1, dtype=np.int64)
        self.sample, self.n_sample = [], 0
        self.window = None  # (lo, hi)
        self.counts = None
        self.pending, self.n_pending = [], 0
        self.below = self.above = 0
        self.lock = threading.Lock()
        self.result = None
        self.recount = False

    def add(self, values):
        """Count a 1-D int64 array of nonzero values (any thread)."""
        coarse = np.bincount(values >> self.shift, minlength=self.coarse.size)
        with self.lock:
            if not self.recount:
                self.coarse += coarse
            if self.window is None:
                self.sample.append(values.astype(np.uint32))
                self.n_sample += values.size
                if self.n_sample > MEDIAN_SAMPLE and not self.recount:
                    self._open_window()
                return
            self._count(values)

    def _open_window(self):
        sample = np.concatenate(self.sample)
        self.sample, self.n_sample = [], 0
        lo, mid, hi = (int(v) for v in np.quantile(sample, [0.3, 0.5, 0.7], method="lower"))
        half = max(mid - lo, hi - mid) * 5 // 4 + 1
        half = min(half, MEDIAN_WINDOW // 2)
        self._set_window(max(mid - half, 0), mid + half)
        self._count(sample.astype(np.int64))

    def _set_window(self, lo, hi):
        self.window = (lo, hi)
        self.counts = np.zeros(hi - lo, dtype=np.int64)

    def _count(self, values):
        lo, hi = self.window
        inside = (values >= lo) & (values < hi)
        n_inside = int(np.count_nonzero(inside))
        n_below = int(np.count_nonzero(values < lo))
        self.below += n_below
        self.above += values.size - n_inside - n_below
        self.pending.append((values[inside] - lo).astype(np.uint32))
        self.n_pending += n_inside
        if self.n_pending > MEDIAN_SAMPLE:
            self._flush()

    def _flush(self):
        if self.pending:
            merged = np.concatenate(self.pending)
            self.counts += np.bincount(merged, minlength=self.counts.size)
        self.pending, self.n_pending = [], 0

    def _ranks(self):
        total = int(self.coarse.sum())
        return (total - 1) // 2, total // 2

    def settle(self, scale):
        """The median if this pass settled it, else prepare the recount and return None."""
        if self.window is None:
            values = np.concatenate(self.sample) if self.sample else np.empty(0, np.uint32)
            if values.size:
                self.result = float(np.median(values.astype(np.float64) * scale))
            return True
        self._flush()
        k1, k2 = self._ranks()
        inside = int(self.counts.sum())
        if self.below <= k1 and k2 < self.below + inside:
            cum = np.cumsum(self.counts)
            lo = self.window[0]
            v1 = lo + int(np.searchsorted(cum, k1 - self.below, side="right"))
            v2 = lo + int(np.searchsorted(cum, k2 - self.below, side="right"))
            # numpy's median: the mean of the two middle values, each exact
            self.result = (v1 * scale + v2 * scale) / 2.0
            return True
        # the coarse bins of the two middle ranks, counted exactly in a second pass
        cum = np.cumsum(self.coarse)
        b1 = int(np.searchsorted(cum, k1, side="right"))
        b2 = int(np.searchsorted(cum, k2, side="right"))
        self.below = self.above = 0
        self.recount = True
        self._set_window(b1 << self.shift, (b2 + 1) << self.shift)
        return False


class NeighbourSink:
    """Keeps, per row, only what a neighbour-graph clusterer needs.

    The decoded integer distances of every tile are folded into: the groups
    of identical rows (zero distances); the ``capacity`` nearest other rows
    of every row, as ``(distance << 32) | index`` keys so that ties go to
    the lower index; the pairs within a Euclidean ``radius``; the exact
    median of the nonzero distances. Memory ``O(n capacity)`` plus what the
    radius keeps, whatever ``n``; tiles may arrive on several threads.

    Parameters
    ----------
    n : int
        Rows.
    n_neighbors : int or None
        Nearest rows wanted per row (distinct rows: identical rows count once).
    radius : float or None
        Euclidean radius of the neighbourhoods kept (DBSCAN's ``eps``).
    median : bool
        Whether to compute the median of the nonzero distances.
    value_bound : int
        Bound on the decoded integers (``(p - 1) / 2``).
    dense : ndarray of shape (n, n), default=None
        Also keep the dense matrix here.
    """

    def __init__(self, n, *, n_neighbors=None, radius=None, median=False, value_bound, dense=None):
        self.n = int(n)
        self.k = None if n_neighbors is None else int(n_neighbors)
        self.capacity = 0 if self.k is None else min(2 * self.k, max(self.n - 1, 0))
        self.keys = np.full((self.n, self.capacity), _NO_KEY, dtype=np.int64)
        self.first = np.arange(self.n)
        self.radius = radius
        self.pairs = []
        self.median = _StreamingMedian(value_bound) if median else None
        self.dense = None if dense is None else DenseSink(dense, symmetric=True)
        self.masked = False
        self.passes = 1
        self.scale = None
        self._locks = {}
        self._lock = threading.Lock()

    def _rows_lock(self, start):
        with self._lock:
            return self._locks.setdefault(start, threading.Lock())

    def add(self, tile, values, scale):
        """Fold one decoded tile (integers as float64) into what is kept."""
        self.scale = scale
        a0, a1, b0, b1 = tile
        diagonal = a0 == b0
        second = self.passes > 1
        ints = values.astype(np.int64)
        if self.dense is not None and not second:
            self.dense.add(tile, values, scale)
        if not second:
            self._zeros(ints, a0, b0, diagonal)
            if self.radius is not None:
                self._within_radius(ints, a0, b0, diagonal, scale)
        if self.median is not None and self.median.result is None:
            upper = ints[np.triu_indices(a1 - a0, 1)] if diagonal else ints.ravel()
            self.median.add(upper[upper > 0])
        if self.capacity and (not second or self.masked):
            self._nearest(ints, a0, b0, a1, b1, diagonal)

    def _zeros(self, ints, a0, b0, diagonal):
        zero = ints == 0
        if not zero.any():
            return
        rows = np.flatnonzero(zero.any(axis=1))
        with self._rows_lock(("first", a0)):
            lowest = b0 + np.argmax(zero[rows], axis=1)
            np.minimum.at(self.first, a0 + rows, lowest)
        if not diagonal:
            cols = np.flatnonzero(zero.any(axis=0))
            with self._rows_lock(("first", b0)):
                lowest = a0 + np.argmax(zero[:, cols], axis=0)
                np.minimum.at(self.first, b0 + cols, lowest)

    def _within_radius(self, ints, a0, b0, diagonal, scale):
        # the same float64 operations as DBSCAN on sqrt(D): sqrt(int * scale) <= eps
        euclid = np.sqrt(ints * scale)
        inside = euclid <= self.radius
        if diagonal:
            np.fill_diagonal(inside, False)
        r, c = np.nonzero(inside)
        if not r.size:
            return
        d = euclid[r, c]
        parts = [(a0 + r, b0 + c, d)]
        if not diagonal:
            parts.append((b0 + c, a0 + r, d))
        with self._lock:
            self.pairs.extend(parts)

    def _nearest(self, ints, a0, b0, a1, b1, diagonal):
        keys = ints << 32
        keys |= np.arange(b0, b1, dtype=np.int64)[None, :]
        if diagonal:
            np.fill_diagonal(keys, _NO_KEY)
        if self.masked:
            keys[:, self.first[b0:b1] != np.arange(b0, b1)] = _NO_KEY
        self._merge(a0, keys)
        if not diagonal:
            keys = ints.T << 32
            keys |= np.arange(a0, a1, dtype=np.int64)[None, :]
            if self.masked:
                keys[:, self.first[a0:a1] != np.arange(a0, a1)] = _NO_KEY
            self._merge(b0, keys)

    def _merge(self, start, keys):
        cap = self.capacity
        if keys.shape[1] > cap:
            keys = np.partition(keys, cap - 1, axis=1)[:, :cap]
        rows = slice(start, start + keys.shape[0])
        with self._rows_lock(("keys", start)):
            both = np.concatenate([self.keys[rows], keys], axis=1)
            self.keys[rows] = np.partition(both, cap - 1, axis=1)[:, :cap]

    def another_pass(self):
        """Whether the server must ask for the tiles once more (then set up for it)."""
        if self.passes > 1:
            return False
        again = False
        if self.median is not None and not self.median.settle(self.scale or 1.0):
            again = True
        if self.capacity and not self._neighbours_settled():
            # identical rows crowd some row's list: list only the first row of
            # every group, from the start
            self.masked = True
            self.keys.fill(_NO_KEY)
            again = True
        if again:
            self.passes += 1
        return again

    def _neighbours_settled(self):
        distinct = self.first == np.arange(self.n)
        if distinct.all():
            return True
        self.keys.sort(axis=1)
        idx = (self.keys & 0xFFFFFFFF).astype(np.int64)
        valid = self.keys != _NO_KEY
        listed = valid & distinct[np.where(valid, idx, 0)]
        listed &= self.first[np.where(valid, idx, 0)] != self.first[:, None]
        needed = min(self.k, int(distinct.sum()) - 1)
        return bool(np.all(listed[distinct].sum(axis=1) >= needed))

    def finish(self):
        """The :class:`NeighbourGraph`."""
        if self.median is not None and self.median.result is None and self.passes > 1:
            self.median.settle(self.scale or 1.0)
        neighbours = distances = None
        if self.capacity or self.k is not None:
            keys = np.sort(self.keys, axis=1)
            valid = keys != _NO_KEY
            neighbours = np.where(valid, keys & 0xFFFFFFFF, -1)
            distances = np.where(valid, keys >> 32, -1)
        radius_graph = None
        if self.radius is not None:
            radius_graph = _pairs_to_csr(self.pairs, self.n)
            self.pairs = []
        dense = None if self.dense is None else self.dense.finish()
        return NeighbourGraph(
            first=self.first,
            neighbours=neighbours,
            distances=distances,
            masked=self.masked,
            median=None if self.median is None else self.median.result,
            radius_graph=radius_graph,
            dense=dense,
            scale=self.scale if self.scale is not None else 1.0,
            passes=self.passes,
        )


def neighbour_sink_bytes(n, *, n_neighbors=None, radius=None, median=False):
    """Bytes a :class:`NeighbourSink` keeps for ``n`` rows, its peak at the end included.

    The neighbour lists (``(distance, index)`` keys and their sorted copies),
    the identical-row groups and the streaming median's sample, window and
    coarse histogram. The pairs within a radius are not counted: they grow
    with the neighbourhoods (at least one entry per row is assumed).
    """
    n = int(n)
    capacity = 0 if n_neighbors is None else 2 * int(n_neighbors)
    total = 4 * 8 * n * capacity + 2 * 8 * n
    if median:
        pairs = n * (n - 1) // 2
        total += 3 * 4 * min(pairs, MEDIAN_SAMPLE) + 8 * 2**16
        if pairs > MEDIAN_SAMPLE:
            total += 2 * 8 * MEDIAN_WINDOW
    if radius is not None:
        total += 2 * 20 * n
    return total


def _pairs_to_csr(pairs, n):
    """A CSR matrix of ``(row, col, value)`` parts, explicit zeros kept, sorted indices."""
    import scipy.sparse as sp

    if pairs:
        rows = np.concatenate([r for r, _, _ in pairs])
        cols = np.concatenate([c for _, c, _ in pairs])
        vals = np.concatenate([v for _, _, v in pairs])
    else:
        rows = cols = np.empty(0, dtype=np.int64)
        vals = np.empty(0)
    order = np.lexsort((cols, rows))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return sp.csr_matrix((vals[order], cols[order], indptr), shape=(n, n))


# --------------------------------------------------------------------------- #
# The whole protocol
# --------------------------------------------------------------------------- #
class LCCSetup:
    """Validated public parameters of one LCC distance round."""

    def __init__(self, *, n_clients, n_features, n_segments, n_colluders, prime, n_parties):
        for name, value in (("n_segments", n_segments), ("n_colluders", n_colluders)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < 1:
                # t = 0 would send the data segments in the clear
                raise ValueError(f"{name} must be >= 1, got {value}")
        if n_parties is not None and (
            isinstance(n_parties, bool) or not isinstance(n_parties, numbers.Integral)
        ):
            raise TypeError(f"n_parties must be an int or None, got {type(n_parties).__name__}")
        self.l, self.t = int(n_segments), int(n_colluders)
        self.n_clients = n_clients
        self.m = max(n_clients, int(n_parties) if n_parties is not None else 0)
        self.threshold = decoding_threshold(self.l, self.t)
        if self.m < self.threshold:
            raise ValueError(
                f"LCC decoding needs at least 2*n_segments + 2*n_colluders - 1 = "
                f"{self.threshold} share-holding parties, but there are {self.m} "
                f"({n_clients} data-holding clients"
                + (f", n_parties={n_parties}" if n_parties is not None else "")
                + "). Add share-holding parties with n_parties="
                f"{self.threshold}, or lower n_segments / n_colluders."
            )
        self.p = check_prime(prime, min_value=2 * max(self.m, self.l + self.t) + 1)
        self.width = -(-n_features // self.l) if n_features else 1
        self.plan = ModularProduct.plan(self.p, self.width)
        self.encoding = encoding_matrix(self.l, self.t, self.m, self.p)

    def decoding_bytes(self, n_samples, n_columns=None, *, streamed=False):
        """Bytes alive besides what the server keeps while a simulation decodes.

        Every party's encoded rows (``n_samples x w`` uint32 and a float64
        norm per row; in a deployment they stay on the parties' machines),
        the messages of two exchanges of the streamed upload (the one being
        decoded and the next one, :func:`tile_exchanges`: each at most a
        quarter of the decoded matrix and :data:`MAX_EXCHANGE_BYTES`), and
        the parties' operands and scratch for one request. ``n_columns``
        gives the columns of a query matrix (``n_samples`` query rows against
        the training rows). ``streamed`` is accepted for clarity: the count
        is the same whatever the server keeps.
        """
        n_rows = int(n_samples)
        n_cols = n_rows if n_columns is None else int(n_columns)
        shares = self.m * max(n_rows, n_cols) * (ELEMENT_BYTES * self.width + 8)
        exchange = min(
            max(EXCHANGE_FRACTION * 8.0 * n_rows * n_cols, MIN_EXCHANGE_BYTES),
            MAX_EXCHANGE_BYTES,
            ELEMENT_BYTES * n_rows * n_cols * self.m,
        )
        # a request's operands (a rectangle of blocks, two float64 limbs wide)
        # and the per-thread scratch tiles
        block = min(BLOCK_SIZE, max(n_rows, n_cols))
        side = math.isqrt(max(1, int(exchange / self.m) // (ELEMENT_BYTES * block**2))) + 1
        operands = 2 * min(side * block, max(n_rows, n_cols)) * 8 * (2 * self.width + 2)
        scratch = 16 * 8 * block**2
        return int(shares + 2 * exchange + operands + scratch)

    def survivors(self, dropped):
        dropped = set(check_party_indices([] if dropped is None else dropped, "dropped"))
        bad = sorted(j for j in dropped if not 0 <= j < self.m)
        if bad:
            raise ValueError(f"dropped names unknown parties {bad}: parties are 0..{self.m - 1}")
        alive = [j for j in range(self.m) if j not in dropped]
        if len(alive) < self.threshold:
            raise ValueError(
                f"too few parties answered: only {len(alive)} parties answered but decoding "
                f"needs {self.threshold} = 2*n_segments + 2*n_colluders - 1"
            )
        return alive


def lcc_exchange(
    runtime, setup, precision, row_numbers, *, dropped=None, n_jobs=None, n_threads=None, sink=None
):
    """Protocol: the share exchange, then the parties' encoded distances, streamed and decoded.

    Two rounds: every data client sends each party its shares (peer
    messages); then the server asks every answering party for the tiles of
    its encoded squared distances, a few exchanges that count as the one
    upload round (:func:`streamed_exchange`), and decodes each exchange as
    it arrives. The parties must have agreed on the offset and the
    precision (:func:`agree_scale`).

    Parameters
    ----------
    runtime : Runtime
        The protocol runtime, with ``setup.m`` parties.
    setup : LCCSetup
        The public parameters.
    precision : int
        The precision ``q``.
    row_numbers : list of ndarray of int
        The public row numbering: the global index of every row of each
        client, in the order of the client's rows.
    dropped : iterable of int, default=None
        Parties whose answers never arrive (stragglers).
    n_jobs : int, default=None
        The runtime's ``n_jobs``: sets the threads of the server's decoding,
        and of each party unless ``n_threads`` is given
        (:func:`party_threads`).
    n_threads : int, default=None
        Threads of each party for its tiles.
    sink : NeighbourSink, default=None
        What the server keeps of the decoded tiles (:func:`streamed_exchange`);
        ``None`` keeps the dense matrix.

    Returns
    -------
    D : ndarray of shape (n, n) or NeighbourGraph
        Squared distances of the quantized rows, in the public row numbering
        (or what ``sink`` kept of them).
    """
    m = setup.m
    runtime.stage(
        f"share exchange: clients quantize (q={precision}), Lagrange-encode and send "
        f"each of the {m} parties its shares"
    )
    runtime.run(
        lcc_share_step,
        tag=TAG_SHARE,
        precision=precision,
        n_colluders=setup.t,
        n_parties=setup.m,
        n_segments=setup.l,
        p=setup.p,
    )
    alive = setup.survivors(dropped)
    n_samples = int(sum(len(r) for r in row_numbers))
    runtime.stage(
        f"parties: encoded squared distances mod p, streamed to the server tile by tile "
        f"({len(alive)} of {m} answer); server: Lagrange decoding of every exchange"
    )
    numbering = [np.asarray(r, dtype=np.int64) for r in row_numbers]
    return streamed_exchange(
        runtime,
        lcc_tiles_step,
        parties=alive,
        n_rows=n_samples,
        n_cols=n_samples,
        symmetric=True,
        decode={
            "weights": server_decoding_weights(alive, setup.l, setup.t, setup.p),
            "p": setup.p,
            "precision": precision,
            "n_jobs": n_jobs,
            "tag": TAG_DISTANCES,
            "what": "decoding D",
        },
        p=setup.p,
        row_numbers=lambda first, last: numbering if first else None,
        n_samples=n_samples,
        n_threads=party_threads(n_jobs) if n_threads is None else n_threads,
        sink=sink,
    )


def lcc_query_distances(runtime, setup, precision, *, querier, parties, n_train, n_jobs=None):
    """Protocol: squared distances of a querying party's new rows to the training rows.

    The querying party Lagrange-encodes its new rows with fresh private
    noise and sends every party its shares (peer messages); every answering
    party uploads the tiles of the encoded distances between the query
    shares and its training shares (streamed, as in the fit), and the
    server decodes them. Run on a runtime that continues the parties of the
    fit (:meth:`InProcessRuntime.party_session
    <skfedclust.federation.InProcessRuntime.party_session>`), which still hold
    their encoded training rows, with the new rows as the querier's data.

    Parameters
    ----------
    runtime : Runtime
        The runtime of the fit.
    setup : LCCSetup
        The public parameters of the fit.
    precision : int
        The precision ``q`` of the fit.
    querier : int
        The querying party (a data client: it holds the offset).
    parties : list of int
        The parties that answer.
    n_train : int
        Number of training rows.
    n_jobs : int, default=None
        As in :func:`lcc_exchange`.

    Returns
    -------
    D : ndarray of shape (n_query, n_train)
        Squared distances of the quantized rows.
    """
    runtime.run(
        lcc_query_share_step,
        tag=TAG_QUERY_SHARE,
        clients=[querier],
        precision=precision,
        n_colluders=setup.t,
        n_parties=setup.m,
        n_segments=setup.l,
        p=setup.p,
    )
    return streamed_exchange(
        runtime,
        lcc_query_tiles_step,
        parties=list(parties),
        n_rows=int(runtime.client_sizes[querier]),
        n_cols=n_train,
        symmetric=False,
        decode={
            "weights": server_decoding_weights(parties, setup.l, setup.t, setup.p),
            "p": setup.p,
            "precision": precision,
            "n_jobs": n_jobs,
            "tag": TAG_QUERY_DISTANCES,
            "what": "decoding query distances",
        },
        p=setup.p,
        querier=querier,
        first=lambda first, last: first,
        last=lambda first, last: last,
        n_threads=party_threads(n_jobs),
    )


def lcc_squared_distances(
    clients,
    *,
    n_segments=2,
    n_colluders=2,
    precision="auto",
    prime=DEFAULT_PRIME,
    n_parties=None,
    dropped=None,
    random_state=None,
    n_jobs=None,
):
    """Exact global squared-distance matrix from Lagrange-coded shares (OmniFC).

    The clients first agree on their global mean by secure aggregation
    (pairwise-cancelling masks: no client's rows or sums are revealed) and
    subtract it, which leaves every distance unchanged but lets the field hold
    data far from the origin. Each client then quantizes its rows to the prime
    field, cuts them into ``n_segments`` segments, masks them with
    ``n_colluders`` uniformly random segments and sends one Lagrange-coded
    share of every row to every share-holding party. Each party computes the
    squared distances mod p of the encoded rows it holds and uploads them; the
    server decodes the exact squared distances of the quantized data from any
    ``2 l + 2 t - 1`` parties.
    Any ``n_colluders`` parties together learn nothing about the data
    (information-theoretic), however they pool their shares.

    The protocol runs on an :class:`~skfedclust.federation.InProcessRuntime`:
    three set-up exchanges (the bounds on ``|x|``; the secure sum's pairwise
    seeds; the bounds around the offset) and four rounds (the secure sum of
    the column sums, masked up and unmasked, with the mean down; the shares
    between parties; the encoded distances up, as tiles in a few exchanges).
    The memory ``D`` and the parties' shares need is checked before any round.

    Read more in the :ref:`User Guide <omnifc>`.

    Parameters
    ----------
    clients : list of array-like of shape (n_i, n_features)
        The rows of each data-holding client. Rows are numbered client by
        client. A client may hold no rows.
    n_segments : int, default=2
        Segments ``l`` each row is cut into (features are zero-padded to a
        multiple of ``l``; padding changes no distance).
    n_colluders : int, default=2
        Noise segments ``t`` = the number of colluding parties tolerated.
    precision : int or "auto", default="auto"
        Fixed-point bits ``q``: values are scaled by ``2**q`` and rounded.
        ``"auto"`` takes the largest ``q`` for which no squared distance of the
        data minus the common offset can wrap modulo ``prime``; a given ``q``
        that could wrap, or whose step ``2**-q`` hides the whole spread of the
        data, raises. ``q`` ranges over ``[-496, 537]``, where every decoded
        distance is an exact float64.
    prime : int, default=2**30 - 35
        Field modulus, a prime below ``2**31``. The default gives about 13
        bits of precision on unit-norm rows (the RMSE of ``D`` on
        L2-normalised digits is 1e-4) with two limbs stacked into one float64
        product per block. ``prime=2**23 - 15``
        (:data:`~skfedclust.secure.FAST_PRIME`) is the fast option: one
        product of half the width per block, about half the work of the
        distance round, for about three bits less (RMSE 8e-4).
    n_parties : int, default=None
        Share-holding parties. Data clients are parties ``0 .. n_clients - 1``;
        a larger value adds parties that hold no data. ``None`` (or a value
        not above the number of clients) uses the clients only.
    dropped : iterable of int, default=None
        Indices of the parties whose results never arrive (stragglers).
        Decoding uses the others; at least ``2 l + 2 t - 1`` must answer.
    random_state : int, RandomState instance or None, default=None
        Seeds the clients' noise. ``D`` does not depend on it.
    n_jobs : int, default=None
        Workers for the client steps (joblib) and the streamed block
        computation (threads). ``None`` runs both on as many threads as BLAS
        would use.

    Returns
    -------
    D : ndarray of shape (n_samples, n_samples)
        Squared Euclidean distances of the quantized rows, exact: ``D * 4**q``
        is the integer ``||rint(2**q x_i) - rint(2**q x_j)||**2``.
    ledger : :class:`~skfedclust.federation.Ledger`
        The runtime's record of every message, with its byte size: the bounds
        on ``|x|`` and the secure sum's pairwise seeds (set-up), the secure sum
        of the clients' column sums and the mean down, the shares between
        parties and the encoded distance matrices up.

    Raises
    ------
    ValueError
        If too few parties answer, ``dropped`` names unknown parties, or the
        data cannot be represented: squared distances beyond float64's range,
        or a spread below the resolution of the field.

    See Also
    --------
    skfedclust.OmniFCClustering : Clustering on top of this matrix.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.secure import lcc_squared_distances
    >>> rng = np.random.RandomState(0)
    >>> clients = [rng.rand(4, 3) for _ in range(7)]
    >>> D, ledger = lcc_squared_distances(clients, precision=8, random_state=0)
    >>> X = np.rint(np.vstack(clients) * 2**8)
    >>> bool(np.array_equal(D * 4**8, ((X[:, None] - X[None]) ** 2).sum(-1)))
    True
    >>> report = ledger.report()
    >>> report["setup_rounds"], report["rounds"]
    (3, 4)
    """
    arrays = _check_clients(clients)
    n_features = arrays[0].shape[1]
    setup = LCCSetup(
        n_clients=len(arrays),
        n_features=n_features,
        n_segments=n_segments,
        n_colluders=n_colluders,
        prime=prime,
        n_parties=n_parties,
    )
    setup.survivors(dropped)
    n_samples = sum(a.shape[0] for a in arrays)
    check_dense_memory(
        n_samples,
        n_samples,
        n_copies=1.0 + setup.decoding_bytes(n_samples) / (8.0 * n_samples * n_samples),
        what="the decoded distance matrix D and the parties' encoded rows",
        advice="Compute the distances of fewer rows (e.g. a random subsample).",
    )
    bounds = np.cumsum([0] + [a.shape[0] for a in arrays])
    rows = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    federation = Federation(np.vstack(arrays), rows)
    random_state = check_random_state(random_state)
    federation.spawn_seeds(random_state)
    # The parties run one after another, each on every worker: seven parties
    # on two cores would leave one idle in every other wave.
    workers = _block_workers(n_jobs)
    runtime = InProcessRuntime(
        federation,
        n_parties=setup.m,
        n_jobs=1,
        name="lcc_squared_distances",
        private_entropy=private_entropy(random_state),
    )
    scale = agree_scale(runtime, setup, precision)
    D = lcc_exchange(
        runtime, setup, scale.precision, rows, dropped=dropped, n_jobs=workers, n_threads=workers
    )
    return D, runtime.ledger


def _check_clients(clients):
    if not isinstance(clients, (list, tuple)) or len(clients) == 0:
        raise TypeError("clients must be a non-empty list of 2-D arrays, one per client")
    arrays = []
    for i, Xi in enumerate(clients):
        try:
            Xi = check_array(Xi, dtype=np.float64, ensure_min_samples=0, input_name=f"client {i}")
        except ValueError as exc:
            raise ValueError(f"client {i}: {exc}") from exc
        arrays.append(Xi)
    widths = {a.shape[1] for a in arrays}
    if len(widths) != 1:
        raise ValueError(f"clients must share the same features; got widths {sorted(widths)}")
    if sum(a.shape[0] for a in arrays) < 1:
        raise ValueError("the clients hold no rows")
    return arrays
