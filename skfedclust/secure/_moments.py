"""Sums a protocol needs, secure or in the clear, and the pooled moments built on them.

:class:`SumChannel` is what a protocol asks for a sum of the clients'
vectors: with ``secure=True`` a :class:`~skfedclust.secure.SecureAggregator`
(the server learns the sum and who took part), with ``secure=False`` every
client's vector goes to the server, which adds them (for comparison, or where
the sum's terms are public anyway). :func:`pooled_moments` gives the pooled
mean and per-feature variance of the clients' rows through such a channel,
exact at any offset: the variance comes from deviations around a first,
rough mean, not from raw sums of squares.
"""

from __future__ import annotations

import numpy as np

from ..federation import Reply, bound_only, summand
from ._secure_sum import SecureAggregator, SecureSumError
from ._sum_bounds import agree_bound, agree_column_bounds

__all__ = ["SumChannel", "pooled_moments"]

#: Headroom on the bounds derived from an agreed one: ``n`` rows of ``|x| <=
#: B`` add up to at most ``n B``; a factor 2 covers the rounding of the sums.
_MARGIN = 2.0
#: Binary orders below the rows' bound within which a feature's deviations get
#: a bound of their own (a feature 2**-128 times narrower than the widest is
#: bounded as if it were that wide).
_WINDOW = 128


@bound_only
def moments_rows(data, inbox, state, party):
    """Client step for bound agreement: the rows themselves (only their largest ``|x|`` is used)."""
    return Reply(send=data)


@bound_only
def moments_deviations(data, inbox, state, party, *, mean):
    """Client step for bound agreement: the rows' deviations from the public ``mean``.

    ``mean`` is one row of the node's width: a mean per row would let the
    coordinator shift each row apart and read it off the bound.
    """
    return Reply(send=data - _one_mean(mean, data.shape[1]))


def _one_mean(mean, width):
    mean = np.asarray(mean, dtype=np.float64)
    if mean.shape != (width,):
        raise PermissionError(
            f"the public mean has shape {mean.shape}; this node takes one mean of its "
            f"{width} features, shape ({width},)"
        )
    return mean


@summand
def moments_raw(data, inbox, state, party):
    """Client step: column sums and the number of rows."""
    return Reply(send=(data.sum(axis=0), np.array([data.shape[0]], dtype=np.int64)))


@summand
def moments_centered(data, inbox, state, party, *, mean):
    """Client step: per feature, the sums of the deviations from ``mean`` and of their squares."""
    deviations = data - _one_mean(mean, data.shape[1])
    return Reply(send=(deviations.sum(axis=0), np.einsum("ij,ij->j", deviations, deviations)))


def add_up(received):
    """Server step without secure aggregation: the sum of the clients' payloads."""
    payloads = received.list()

    def add(items):
        if isinstance(items[0], tuple):
            return tuple(add([p[i] for p in items]) for i in range(len(items[0])))
        total = np.array(items[0], copy=True)
        for item in items[1:]:
            total = total + np.asarray(item)
        return total

    return add(payloads)


class SumChannel:
    """The sums of one fit: secure aggregation, or each client's vector to the server.

    Parameters
    ----------
    runtime : Runtime
        The protocol runtime.
    secure : bool
        Add the vectors by secure aggregation.
    seed : int
        Public seed of the aggregation graph.
    degree : int, default=None
        Neighbours per client on the graph (see
        :class:`~skfedclust.secure.SecureAggregator`).
    """

    def __init__(self, runtime, *, secure, seed, degree=None):
        self.runtime = runtime
        self.secure = bool(secure)
        self.aggregator = SecureAggregator(runtime, seed=seed, degree=degree) if secure else None

    def sum(self, step, *, tag, bounds, clients=None, **public):
        """The sum of what ``step`` sends on ``clients``, and who is in it."""
        if self.secure:
            return self.aggregator.sum(step, tag=tag, bounds=bounds, clients=clients, **public)
        self.runtime.stage(f"client step: {tag} (each client's vector to the server)")
        received = self.runtime.run(step, tag=tag, clients=clients, may_drop=True, **public)
        if not received:
            raise SecureSumError(f"no client answered the sum {tag!r}")
        return self.runtime.server(add_up, received), sorted(received)

    def bound(self, step, *, tag, clients=None, coarseness=1, **public):
        """A public power-of-two bound on what ``step`` sends (``None`` without secure sums).

        See :func:`~skfedclust.secure.agree_bound` for ``coarseness``.
        """
        if not self.secure:
            return None
        return agree_bound(
            self.aggregator, step, tag=tag, clients=clients, coarseness=coarseness, **public
        )

    def column_bounds(self, step, *, tag, bound, clients=None, **public):
        """Public per-column bounds below ``bound`` (``None`` without secure sums).

        See :func:`~skfedclust.secure.agree_column_bounds`: a feature whose
        values are far smaller than another's gets a bound of its own, so its
        sums keep their digits in fixed point.
        """
        if not self.secure or bound is None:
            return None
        return agree_column_bounds(
            self.aggregator,
            step,
            tag=tag,
            bound=bound if bound > 0 else 1.0,
            window=_WINDOW,
            coarseness=4,
            clients=clients,
            **public,
        )


def pooled_moments(channel, *, clients=None, tag="moments"):
    """Pooled row count, mean and per-feature variance of the clients' rows.

    Four sums through ``channel`` when it is secure: a bound on the rows,
    their column sums and counts (a rough mean), a bound per feature on the
    deviations from that mean, and the sums of the deviations and of their
    squares; the variance is taken around the rough mean, so a large common
    offset costs no precision, and each feature's bound is its own, so a
    narrow feature next to a wide one keeps its precision. In the clear, two
    sums.

    Parameters
    ----------
    channel : SumChannel
        The fit's sums.
    clients : list of int, default=None
        Clients taking part; all by default.
    tag : str, default="moments"
        Prefix of the sums' names.

    Returns
    -------
    n : int
        Rows in the sums.
    mean : ndarray of shape (n_features,)
    variance : ndarray of shape (n_features,)
        Population variance (``ddof=0``).
    survivors : list of int
        Clients whose rows are in both sums.
    """
    runtime = channel.runtime
    if clients is None:
        clients = list(range(runtime.n_clients))
    largest = float(np.max(np.asarray(runtime.client_sizes)[clients]))
    # The first mean only centres the second pass, which corrects it; but its
    # error enters the second pass squared, so its bound is kept within 4
    # binary orders (526 values per client).
    raw = channel.bound(
        moments_rows, tag=f"{tag}: bound on the rows", clients=clients, coarseness=4
    )
    bounds = None if raw is None else [_MARGIN * largest * raw, None]
    (sums, count), survivors = channel.sum(
        moments_raw, tag=f"{tag}: sums and counts", bounds=bounds, clients=clients
    )
    n = int(count[0])
    rough = sums / n
    # The deviations' bounds set the variance's precision: one per feature
    # (a feature a million times narrower than another keeps its digits),
    # each within 4 binary orders, below 2 |x| <= 2 raw.
    spread = None
    if channel.secure:
        spread = agree_column_bounds(
            channel.aggregator,
            moments_deviations,
            tag=f"{tag}: bounds on the deviations",
            bound=2.0 * raw if raw > 0 else 1.0,
            window=_WINDOW,
            coarseness=4,
            clients=survivors,
            mean=rough,
        )
    bounds = None if spread is None else [_MARGIN * largest * spread, _MARGIN * largest * spread**2]
    (first, second), final = channel.sum(
        moments_centered,
        tag=f"{tag}: centered sums",
        bounds=bounds,
        clients=survivors,
        mean=rough,
    )
    if len(final) != len(survivors):
        raise SecureSumError(
            f"clients {sorted(set(survivors) - set(final))} dropped between the two sums of "
            f"{tag!r}: the moments would mix different rows"
        )
    shift = first / n
    variance = np.maximum(second / n - shift**2, 0.0)
    return n, rough + shift, variance, final
