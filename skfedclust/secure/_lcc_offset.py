"""The common offset and the fixed-point scale of Lagrange coded computing (OmniFC, step 0).

Before any row is quantized, the parties agree on a common offset, the global
mean, by secure aggregation of exact fixed-point column sums
(:func:`agree_offset`; Bonawitz et al., CCS 2017): distances do not depend on
the offset, and subtracting it lets the field hold the spread of the data
instead of its position. Then every data client sends its per-feature bound
around the offset, public metadata from which the precision is chosen
(:func:`agree_scale`). The protocol that follows is in
:mod:`skfedclust.secure._lcc`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..federation import Reply, summand
from ..node._declarations import summary
from ..node._sum_guard import fixed_point
from ._lcc_coding import _check_bound, _data_bounds, resolve_precision
from ._moments import SumChannel

__all__ = ["CommonOffset", "LCCScale", "agree_offset", "agree_scale"]

# Tags of the set-up's messages in the ledger.
TAG_ABS_BOUND = "bound on |x|"
TAG_OFFSET = "offset"
TAG_BOUNDS = "bounds around offset"


def max_bound_step(bounds):
    """Server step: the largest of the bounds the clients sent (public metadata).

    Returns
    -------
    bound : ndarray of float64
        Element-wise maximum of the received bounds.
    """
    return np.max(np.vstack([np.atleast_1d(b) for b in bounds.list()]), axis=0)


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


# An order statistic of the party's rows (its largest |x|): a per-client summary.
@summary
def offset_bound_step(data, inbox, state, party):
    """Set-up client step: the largest ``|x|`` of its rows up (one float64).

    The public bound that sets the fixed-point scale of the sums, the kind of
    bound parties agree before a protocol (e.g. 1 after per-row
    normalisation).
    """
    return Reply(send=np.float64(_data_bounds([data])[0]))


@fixed_point("shift")
@summand
def offset_sum_step(data, inbox, state, party, *, shift):
    """Client step: the exact fixed-point column sums of its rows (int64), for a secure sum.

    Declared fixed point at ``2**shift``: the node keys the sum by the column
    sums it reveals, not by ``shift``, so that the same sums asked at another
    shift (another precision of the same values) are the same statistic (rule
    ``one-sum-per-input``).
    """
    return Reply(send=fixed_point_column_sums(data, shift))


def offset_mean(total, n_samples, shift):
    """The mean from the summed fixed-point column sums."""
    total = np.asarray(total, dtype=np.int64)
    return np.ldexp(total.astype(np.float64) / max(n_samples, 1), shift)


@summary
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
