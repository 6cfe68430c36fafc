"""Public bounds from secure sums: the fixed-point scale of a sum, agreed without a value.

A secure sum encodes its floats in fixed point, which needs a public bound on
every client's values. The clients agree on one without revealing a value:
each sends a one-hot histogram of the binary order of its largest magnitude
(coarsened to ``coarseness`` orders per bin), the histograms are added up by
a secure sum, and the bound is the power of two above the highest non-empty
bin. The server learns how many clients' values reach each binary order, not
which client's. :func:`agree_column_bounds` does the same per column.

A node with a DP budget answers no bound agreement (rule ``dp-bounds``): a
histogram of binary orders of row-level values (distances to centers the
server chooses) is a count no noise covers, and its bounds are the public box
it clips to. The one exception is a bound on the rows it privatised itself
(input perturbation): post-processing of a release it already paid for.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..federation import Reply
from ..node._contract import resolve_client_step
from ..node._declarations import on_private_rows, sum_only
from ..node._policy import PRIVATE_ROWS
from ..node._sum_guard import SumRefusal, keyed_by_inputs, public_digest

__all__ = ["agree_bound", "agree_column_bounds"]

# --------------------------------------------------------------------------- #
# A public bound from a secure sum
# --------------------------------------------------------------------------- #
#: Binary exponents a bound may take: every finite float64 magnitude.
_MIN_EXPONENT, _MAX_EXPONENT = -1075, 1025


#: Why a bound agreement's histograms are keyed by their inputs alone.
_ONE_HOT = (
    "a one-hot of a binary order, the same few vectors for unrelated quantities; what the "
    "agreements reveal is counted by rule bound-queries"
)


@keyed_by_inputs(_ONE_HOT)
@on_private_rows
@sum_only
def exponent_histogram_step(data, inbox, state, party, *, inner, inner_public, coarseness=1):
    """Client step: one-hot of the binary exponent of the largest ``|x|`` ``inner`` sends.

    Added up by a secure sum, the histograms tell the server how many clients
    have their largest entry in each power-of-two range (of ``coarseness``
    binary orders), and not which ones.
    """
    # The node's gate checks a step named here against its policy and the agreed
    # method (resolve_client_step while the step is served), as any step.
    step = resolve_client_step(inner, role="bound")
    _refuse_on_a_budget(step, state, party, inner)
    reply = step(data, inbox, state, party, **inner_public)
    queries = _count_bound_query(state, party, inbox, inner, inner_public)
    values = np.abs(np.asarray(reply.send, dtype=np.float64))
    largest = float(values.max()) if values.size else 0.0
    if not np.isfinite(largest):
        raise ValueError(f"client {party.index}: the values to bound are not finite")
    exponent = math.frexp(largest)[1] if largest > 0 else _MIN_EXPONENT
    onehot = np.zeros(_n_bins(coarseness), dtype=np.int64)
    onehot[(exponent - _MIN_EXPONENT) // coarseness] = 1
    # What ``inner`` keeps or outputs is kept and output as usual: a later
    # step may need the messages this one consumed.
    return Reply(send=onehot, keep={**reply.keep, **queries}, output=reply.output)


def _refuse_on_a_budget(step, state, party, inner):
    """Refuse a bound agreement on a node with a DP budget (rule ``dp-bounds``).

    The histogram's count of binary orders is exact: asked for distances to
    centers the server moves, it locates a row, and no accountant covers it.
    A DP node's bounds are its public box. Allowed only for a step declared
    to compute on the rows the node privatised (``on_private_rows``) while it
    holds them: then the histogram is post-processing of a paid release
    (which is why the histogram steps carry that declaration).
    """
    if party.policy.dp_epsilon is None:
        return
    if getattr(step, "__skfedclust_on_private_rows__", False) and state.get(PRIVATE_ROWS) is True:
        return
    raise SumRefusal(
        "dp-bounds",
        f"a bound agreement on {inner}: this node has a DP budget "
        f"(dp-epsilon={party.policy.dp_epsilon:g}) and answers none, its bounds being "
        "the public box (a histogram of binary orders is a count no noise covers)",
    )


#: Where a node keeps, per step, the inputs of the bound agreements it answered.
BOUND_QUERIES = "secure sum: bound queries"


def _count_bound_query(state, party, inbox, inner, inner_public):
    """The node's record of bound agreements with this one; refused beyond its policy.

    A bound agreement is keyed on the step, its constants and the server
    messages it read; a repeat with the same inputs tells nothing new and is
    not counted. Beyond ``max-bound-queries`` distinct ones for one step in a
    fit, the node refuses (rule ``bound-queries``): the binary orders of a
    step's largest value for centers the server moves would locate a row.
    """
    read = getattr(inbox, "read", ())
    messages = {tag: inbox.get(tag) for tag in sorted(read)}
    key = public_digest(inner, inner_public, messages)
    record = dict(state.get(BOUND_QUERIES, {}))
    seen = tuple(record.get(inner, ()))
    if key in seen:
        return {}
    limit = party.policy.max_bound_queries
    if limit is not None and len(seen) >= limit:
        raise SumRefusal(
            "bound-queries",
            f"this node answered {len(seen)} bound agreements of {inner} with other inputs in "
            f"this fit; its policy answers {limit} (max-bound-queries): more would locate its "
            "rows from the binary orders of their distances",
        )
    record[inner] = (*seen, key)
    return {BOUND_QUERIES: record}


def _n_bins(coarseness):
    return -(-(_MAX_EXPONENT - _MIN_EXPONENT + 1) // coarseness)


def agree_bound(aggregator, step, *, tag, clients=None, coarseness=1, **public):
    """A public bound on what ``step`` sends on every client, from a secure sum.

    Each client adds a one-hot vector of the binary exponent of its largest
    entry; the server learns the histogram of those exponents (how many
    clients' largest entries fall in each power-of-two range, not whose) and
    takes the power of two above the largest. The bound is then at most twice
    the largest entry of any client. With ``coarseness=c`` the ranges span
    ``c`` binary orders: the server learns less, the vector is ``c`` times
    shorter (2101 int64 for ``c=1``), and the bound may be ``2**c`` times the
    largest entry, which costs ``c`` bits of the sum's fixed-point precision.

    Parameters
    ----------
    aggregator : SecureAggregator
        The fit's aggregator.
    step : callable
        A client step whose ``send`` is the array to bound.
    tag : str
        Name of the sum.
    clients : list of int, default=None
        Clients taking part.
    coarseness : int, default=1
        Binary orders per range of the histogram.
    **public
        Public constants of ``step``.

    Returns
    -------
    bound : float
        A power of two not below any client's largest ``|x|`` (0.0 when all
        are 0).
    """
    if isinstance(coarseness, bool) or not isinstance(coarseness, numbers.Integral):
        raise ValueError(f"coarseness must be an int >= 1, got {coarseness!r}")
    if coarseness < 1:
        raise ValueError(f"coarseness must be an int >= 1, got {coarseness!r}")
    from ..federation._runtime import client_step_name

    histogram, _ = aggregator.sum(
        exponent_histogram_step,
        tag=tag,
        clients=clients,
        inner=client_step_name(step),
        inner_public=public,
        coarseness=int(coarseness),
    )
    present = np.flatnonzero(histogram)
    if not present.size:
        return 0.0
    # The top of the highest range that holds a client's largest exponent.
    top = (int(present.max()) + 1) * coarseness - 1 + _MIN_EXPONENT
    if top <= _MIN_EXPONENT:
        return 0.0
    return math.ldexp(1.0, min(top, 1024 - 1)) * (2.0 if top >= 1024 else 1.0)


@keyed_by_inputs(_ONE_HOT)
@on_private_rows
@sum_only
def column_exponent_histogram_step(
    data, inbox, state, party, *, inner, inner_public, top, window, coarseness
):
    """Client step: per column, a one-hot of how far below ``2**top`` its largest ``|x|`` is.

    The distance ``top - e`` (``e`` the binary exponent of the column's largest
    entry) is clipped to ``[0, window - 1]`` and grouped by ``coarseness``.
    """
    # The node's gate checks a step named here against its policy and the agreed
    # method (resolve_client_step while the step is served), as any step.
    step = resolve_client_step(inner, role="bound")
    _refuse_on_a_budget(step, state, party, inner)
    reply = step(data, inbox, state, party, **inner_public)
    queries = _count_bound_query(state, party, inbox, inner, inner_public)
    values = np.abs(np.asarray(reply.send, dtype=np.float64))
    values = values.reshape(-1, values.shape[-1]) if values.ndim else values.reshape(1, 1)
    largest = values.max(axis=0) if values.shape[0] else np.zeros(values.shape[1])
    if not np.all(np.isfinite(largest)):
        raise ValueError(f"client {party.index}: the values to bound are not finite")
    _, exponents = np.frexp(largest)
    below = np.where(largest > 0, top - exponents, window - 1)
    if np.any(below < 0):
        raise ValueError(
            f"client {party.index}: values reach beyond the agreed bound 2**{top}: refusing"
        )
    bins = np.minimum(below, window - 1) // coarseness
    n_bins = -(-window // coarseness)
    onehot = np.zeros((largest.size, n_bins), dtype=np.int64)
    onehot[np.arange(largest.size), bins] = 1
    return Reply(send=onehot, keep={**reply.keep, **queries}, output=reply.output)


def agree_column_bounds(
    aggregator, step, *, tag, bound, window=64, coarseness=4, clients=None, **public
):
    """Public per-column bounds on what ``step`` sends, below an agreed overall ``bound``.

    The overall bound (a power of two from :func:`agree_bound`) serves the
    column with the largest entries; a column whose entries are far smaller
    gets its own, so its sums keep their precision in fixed point. Each client
    adds, per column, a one-hot of how many binary orders (grouped by
    ``coarseness``, at most ``window``) its largest entry lies below the
    overall bound; the server learns those histograms, not whose they are.

    Parameters
    ----------
    aggregator : SecureAggregator
        The fit's aggregator.
    step : callable
        A client step whose ``send`` is the array to bound (its last axis
        holds the columns).
    tag : str
        Name of the sum.
    bound : float
        The overall bound, from :func:`agree_bound`.
    window : int, default=64
        Binary orders below ``bound`` that the histograms cover.
    coarseness : int, default=4
        Binary orders per range of the histograms.
    clients : list of int, default=None
        Clients taking part.
    **public
        Public constants of ``step``.

    Returns
    -------
    bounds : ndarray of shape (n_columns,)
        Powers of two, each not below any client's largest entry of its column
        (columns more than ``window`` orders below the overall bound get
        ``bound * 2**-(window - coarseness)`` or so: they lose precision).
    """
    from ..federation._runtime import client_step_name

    top = math.frexp(float(bound))[1] - 1 if bound > 0 else _MIN_EXPONENT
    histogram, _ = aggregator.sum(
        column_exponent_histogram_step,
        tag=tag,
        clients=clients,
        inner=client_step_name(step),
        inner_public=public,
        top=int(top),
        window=int(window),
        coarseness=int(coarseness),
    )
    histogram = np.asarray(histogram)
    # The smallest distance any client has below the top: its bin's lower edge.
    nearest = np.array([np.flatnonzero(row).min() for row in histogram])
    return np.ldexp(1.0, top - nearest * coarseness)
