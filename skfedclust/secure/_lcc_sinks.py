"""What the server keeps of the decoded distance tiles of LCC: the dense matrix or a graph.

A sink receives the decoded tiles of the streamed distance exchange of
``skfedclust.secure._lcc`` one by one: :class:`DenseSink` keeps the dense
matrix, :class:`NeighbourSink` per row only what a neighbour-graph clusterer
needs (the nearest rows, the rows within a radius, identical rows, the exact
median), in ``O(n k)`` memory.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

#: Values the streaming median keeps before it counts them in a window, and
#: the widest window it counts every integer of.
MEDIAN_SAMPLE = 2**22
MEDIAN_WINDOW = 2**22


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

    def add_tile(self, ints, diagonal):
        """Count a tile's positive entries (the strict upper triangle of a diagonal one)."""
        from ._kernels import count_window

        if self.window is not None:
            # One compiled pass once the window is set (all but the first
            # MEDIAN_SAMPLE values): the same counts as add() gives.
            with self.lock:
                lo, hi = self.window
                counted = count_window(
                    ints, diagonal, self.shift, self.coarse, not self.recount, lo, hi, self.counts
                )
                if counted is not None:
                    self.below += int(counted[0])
                    self.above += int(counted[1])
                    return
        upper = ints[np.triu_indices(ints.shape[0], 1, ints.shape[1])] if diagonal else ints.ravel()
        self.add(upper[upper > 0])

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
        """Fold one decoded tile (integers, as int64 or float64) into what is kept."""
        self.scale = scale
        a0, a1, b0, b1 = tile
        diagonal = a0 == b0
        second = self.passes > 1
        ints = values.astype(np.int64, copy=False)
        if self.dense is not None and not second:
            self.dense.add(tile, values, scale)
        if not second:
            self._zeros(ints, a0, b0, diagonal)
            if self.radius is not None:
                self._within_radius(ints, a0, b0, diagonal, scale)
        if self.median is not None and self.median.result is None:
            self.median.add_tile(ints, diagonal)
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
        from ._kernels import merge_nearest

        with self._rows_lock(("keys", a0)):
            merged = merge_nearest(self.keys, ints, a0, b0, diagonal, self.first, self.masked)
        if merged:
            if not diagonal:
                with self._rows_lock(("keys", b0)):
                    merge_nearest(
                        self.keys, ints, a0, b0, False, self.first, self.masked, columns=True
                    )
            return
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
