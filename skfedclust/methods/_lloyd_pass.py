"""The Lloyd pass of a client: labels, per-cluster statistics and changed labels, in one pass.

A client of :class:`~skfedclust.FederatedKMeans` labels its rows by their nearest
center and adds up, per cluster, the count, the sum of deviations from the
center and their squares. The pass runs compiled (numba, without the GIL) over
blocks of rows added in a fixed order, so that its floats do not depend on the
number of threads; small inputs take a NumPy twin of the same operations
(bit-identical, tested), which needs no compilation on a first run.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import scipy.sparse as sp

from ..clusterers import nearest_center, normalized_frame
from ..federation._runtime import thread_pool

__all__ = ["labelled_inertia", "lloyd_pass"]


#: Up to this many rows, ``np.add.at`` adds the cluster sums faster than
#: building a sparse one-hot matrix (about 4 against 56 microseconds at 20 rows).
_ADD_AT_MAX_ROWS = 256


def _cluster_sums(values, labels, n_clusters):
    # A sparse one-hot product: O(n d) in one pass, and a fixed summation order
    # (unlike a BLAS product, whose order may depend on its threads), so every
    # runtime adds up the same floats. np.add.at adds in the same row order.
    n = len(labels)
    if n <= _ADD_AT_MAX_ROWS:
        sums = np.zeros((n_clusters, values.shape[1]))
        np.add.at(sums, labels, values)
        return sums
    onehot = sp.csr_matrix((np.ones(n), (labels, np.arange(n))), shape=(n_clusters, n))
    return np.asarray(onehot @ values)


def _lloyd_pass_numpy(data, centers, previous, inertia=True):
    """One Lloyd pass in NumPy: labels, deviation sums, counts, inertia, changed labels."""
    k = centers.shape[0]
    labels = nearest_center(data, centers)
    deviations = data - centers[labels]
    sums = _cluster_sums(deviations, labels, k)
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    squared = None
    if inertia:
        squared = np.bincount(
            labels, weights=np.einsum("ij,ij->i", deviations, deviations), minlength=k
        )
    changed = data.shape[0] if previous is None else np.count_nonzero(previous != labels)
    return labels, sums, counts, squared, int(changed)


#: Rows scored per BLAS product in the compiled pass (scikit-learn's chunk):
#: the chunk stays in cache while its rows are labelled and added up.
_CHUNK = 256
#: Rows per block of the pass: each block adds up its own statistics, and the
#: blocks' statistics are then added in block order, so the floats do not
#: depend on how many threads share the blocks.
_BLOCK = 8 * _CHUNK
#: Rows may lie up to ``2**_HEADROOM`` times farther from the centers' midpoint
#: than the centers before the compiled pass hands over to ``nearest_center``
#: (which then scales by the rows); the same threshold as ``nearest_center``.
_HEADROOM = 500
#: Clients with fewer rows take the NumPy pass: one block's statistics are the
#: same floats either way, and a small fit does not wait seconds for the
#: compilation (the first fit of a fresh install otherwise spends them here).
_COMPILED_MIN_ROWS = _BLOCK


def _lloyd_pass_loops(
    data, centers, reference, factor, previous, labels, sums, counts, squares, first, stop, check
):
    """Blocks ``first`` to ``stop - 1`` of a Lloyd pass, fused, in ``nearest_center``'s frame.

    Rows and centers are translated to ``reference`` and scaled by the power
    of two ``factor``; a row goes to the center of least ``||c||^2/2 - x.c``
    (ties to the lowest index), scored a chunk at a time by one BLAS product.
    In the same pass, while the chunk is in cache, each row's deviation from
    its center (in the data's units, so a large offset costs no precision) is
    added to its cluster's sums and squares of its block (``sums[b]``,
    ``counts[b]``, ``squares[b]`` for block ``b`` of :data:`_BLOCK` rows), in
    row order; ``squares`` with a last axis of length 0 skips the squares (about
    a tenth of the pass). Returns the number of the blocks' rows whose label differs
    from ``previous`` (every row if ``previous[0] < 0``), or -1 when a
    translated row is not finite or lies beyond the headroom: the caller then
    labels the rows by ``nearest_center``, which rescales by the rows. The
    caller that knows every row is within the headroom passes ``check=False``
    (the check costs a fifth of the pass).
    """
    n, d = data.shape
    k = centers.shape[0]
    scaled = np.empty((d, k))
    half = np.zeros(k)
    for c in range(k):
        for j in range(d):
            v = (centers[c, j] - reference[j]) * factor
            scaled[j, c] = v
            half[c] += v * v
    for c in range(k):
        half[c] *= 0.5
    limit = 2.0**_HEADROOM
    rows = np.empty((_CHUNK, d))
    scores = np.empty((_CHUNK, k))
    deviation = np.empty(d)
    # A caller that needs no inertia passes squares with a last axis of length 0.
    want_squares = squares.shape[2] > 0
    fresh = n > 0 and previous[0] < 0
    changed = 0
    for b in range(first, min(stop, (n + _BLOCK - 1) // _BLOCK)):
        block_sums = sums[b]
        block_counts = counts[b]
        block_squares = squares[b]
        for start in range(b * _BLOCK, min(n, (b + 1) * _BLOCK), _CHUNK):
            m = min(_CHUNK, n - start)
            if check:
                within = True
                for i in range(m):
                    for j in range(d):
                        v = (data[start + i, j] - reference[j]) * factor
                        rows[i, j] = v
                        # False for NaN too.
                        within &= abs(v) < limit
                if not within:
                    return -1
            else:
                for i in range(m):
                    for j in range(d):
                        rows[i, j] = (data[start + i, j] - reference[j]) * factor
            if m == _CHUNK:
                np.dot(rows, scaled, scores)
            else:
                scores[:m] = np.dot(rows[:m], scaled)
            for i in range(m):
                best = 0
                low = half[0] - scores[i, 0]
                for c in range(1, k):
                    s = half[c] - scores[i, c]
                    if s < low:
                        low = s
                        best = c
                labels[start + i] = best
                if fresh or previous[start + i] != best:
                    changed += 1
                block_counts[best] += 1
                # Three loops over a buffer vectorise where one loop does not.
                for j in range(d):
                    deviation[j] = data[start + i, j] - centers[best, j]
                for j in range(d):
                    block_sums[best, j] += deviation[j]
                if want_squares:
                    for j in range(d):
                        block_squares[best, j] += deviation[j] * deviation[j]
    return changed


# nogil: clients, and the blocks of one client, run side by side on threads.
_lloyd_pass_compiled = numba.njit(cache=True, nogil=True)(_lloyd_pass_loops)


#: Blocks per task when threads share a pass: a task lasts about half a
#: millisecond, so a thread that starts late takes fewer tasks instead of
#: leaving the others waiting for its share.
_BLOCKS_PER_TASK = 4


def _run_pass(arguments, check, n_blocks, n_threads):
    """The compiled pass over every block, on up to ``n_threads`` threads."""
    n_threads = max(1, min(int(n_threads), n_blocks))
    if n_threads == 1:
        return _lloyd_pass_compiled(*arguments, 0, n_blocks, check)
    # Threads take the next task of consecutive blocks as they come free: on a
    # virtual machine a woken pool thread may start a fraction of a millisecond
    # late, as long as a static share of a client's pass. Each block writes its
    # own statistics, so which thread ran it changes no float.
    tasks = iter(range(0, n_blocks, _BLOCKS_PER_TASK))

    def work():
        changed = 0
        for first in tasks:  # next() on a range iterator holds the GIL: atomic
            result = _lloyd_pass_compiled(*arguments, first, first + _BLOCKS_PER_TASK, check)
            if result < 0:
                return -1
            changed += result
        return changed

    pool = thread_pool(n_threads - 1)
    others = [pool.submit(work) for _ in range(1, n_threads)]
    results = [work()] + [future.result() for future in others]
    return -1 if min(results) < 0 else sum(results)


def lloyd_pass(data, centers, previous=None, n_threads=1, column_range=None, inertia=True):
    """Labels and per-cluster statistics of one Lloyd iteration on a client's rows.

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_features)
    centers : ndarray of shape (n_clusters, n_features)
    previous : ndarray of shape (n_samples,) or None
        The labels of the last iteration (``None``: every row counts as changed).
    n_threads : int, default=1
        Threads sharing the blocks of rows. The statistics are added up per
        block of 2,048 rows and the blocks' in block order, so they are the
        same floats for any number of threads.
    column_range : tuple of two ndarray of shape (n_features,), default=None
        The least and greatest value of each column of ``data`` (finite),
        which a client computes once: when they show every row within the
        headroom of the centers' frame, the pass skips its per-value check.
    inertia : bool, default=True
        Whether to add up the squared distances; without them (``inertia``
        is then returned as ``None``) the pass does about a tenth less work.

    Returns
    -------
    labels : ndarray of shape (n_samples,)
        Nearest center of each row (ties to the lowest index), compared in the
        frame of :func:`~skfedclust.clusterers.nearest_center`; the two can
        differ only where rounding decides a near-tie.
    sums : ndarray of shape (n_clusters, n_features)
        Per cluster, the sum of its rows' deviations from its center.
    counts : ndarray of shape (n_clusters,)
    inertia : ndarray of shape (n_clusters,) or None
        Per cluster, the sum of its rows' squared distances to its center
        (``None`` with ``inertia=False``).
    changed : int
        Rows whose label differs from ``previous``.
    """
    data = np.ascontiguousarray(data, dtype=np.float64)
    # Writable copies of the small arguments: every read-only combination
    # would be compiled apart (seconds each).
    centers = np.array(centers, dtype=np.float64, order="C")
    n, d = data.shape
    k = centers.shape[0]
    if _lloyd_pass_compiled is not None and n >= max(_COMPILED_MIN_ROWS, 1) and k >= 2:
        # The frame of nearest_center when the rows lie within the headroom.
        reference, _ = normalized_frame(centers)
        with np.errstate(over="ignore", invalid="ignore"):
            extent = np.abs(centers - reference).max()
        exponent = int(np.frexp(extent)[1]) if np.isfinite(extent) and extent > 0 else None
        # A subnormal extent would need a factor beyond the float range.
        if exponent is not None and exponent > -1000:
            factor = math.ldexp(1.0, -exponent)
            n_blocks = -(-n // _BLOCK)
            labels = np.empty(n, dtype=np.intp)
            sums = np.zeros((n_blocks, k, d))
            counts = np.zeros((n_blocks, k), dtype=np.int64)
            squares = np.zeros((n_blocks, k, d if inertia else 0))
            if previous is None:
                before = np.full(1, -1, dtype=np.intp)
            else:
                before = np.require(previous, dtype=np.intp, requirements=["C", "W"])
            arguments = (data, centers, reference, factor, before, labels, sums, counts, squares)
            check = column_range is None or not _within_headroom(column_range, reference, factor)
            changed = _run_pass(arguments, check, n_blocks, n_threads)
            if changed >= 0:
                return (
                    labels,
                    _add_blocks(sums),
                    counts.sum(axis=0),
                    _add_blocks(squares).sum(axis=1) if inertia else None,
                    int(changed),
                )
    return _lloyd_pass_numpy(data, centers, previous, inertia)


def _within_headroom(column_range, reference, factor):
    """Whether rows within ``column_range`` lie within the headroom of the frame."""
    lower, upper = column_range
    with np.errstate(over="ignore", invalid="ignore"):
        extent = np.maximum(np.abs(lower - reference), np.abs(upper - reference)).max() * factor
    # Half the headroom: rounding of the translated values stays far from it.
    return bool(extent < 2.0 ** (_HEADROOM - 1))


def _add_blocks(per_block):
    """The blocks' statistics added in block order (one block: itself, bit for bit)."""
    total = per_block[0].copy()
    for block in per_block[1:]:
        total += block
    return total


def _labelled_squares(data, centers, labels):
    """The rows' squared distances to their labelled centers, added block by block."""
    total = 0.0
    n = data.shape[0]
    # Partial sums of a block each, then their total: the rounding error grows
    # with the number of blocks, not of rows.
    for start in range(0, n, _BLOCK):
        block = 0.0
        for i in range(start, min(n, start + _BLOCK)):
            c = labels[i]
            for j in range(data.shape[1]):
                v = data[i, j] - centers[c, j]
                block += v * v
        total += block
    return total


_labelled_squares_compiled = numba.njit(cache=True, nogil=True)(_labelled_squares)


def labelled_inertia(data, centers, labels):
    """Sum of the squared distances of the rows to their labelled centers.

    Deviations are taken in the data's units (a large common offset costs no
    precision). Compiled, in one pass without the two temporaries of the
    rows' size NumPy needs (the labelled centers and the deviations); small
    inputs take NumPy, which needs no compilation on a first run.
    """
    data = np.ascontiguousarray(data, dtype=np.float64)
    centers = np.array(centers, dtype=np.float64, order="C")
    if data.shape[0] < _COMPILED_MIN_ROWS:
        deviations = data - centers[labels]
        return float(np.einsum("ij,ij->", deviations, deviations))
    labels = np.require(labels, dtype=np.intp, requirements=["C", "W"])
    # One compiled signature: the runtime's blocks are read-only.
    view = data.view()
    view.flags.writeable = False
    return float(_labelled_squares_compiled(view, centers, labels))
