"""Compiled element-wise passes of the LCC distance round (numba).

Every kernel here does, element by element, exactly the float64 or int64
operations of the NumPy code it replaces (the same products, roundings and
reductions, in the same order), so its results are bit-identical; it only
fuses what NumPy would run as several passes over a block into one. The
kernels release the GIL, so the block threads of :mod:`._lcc` keep both cores
busy. This module is imported on first use: importing numba costs a fraction
of a second that a process which never computes distances need not pay.
"""

from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(nogil=True, cache=True)

#: Calls on fewer elements take the NumPy twin of a kernel (the same
#: operations, so the same bits): a small fit does not wait for the
#: compilation of the kernels (seconds on a fresh install).
COMPILED_MIN_ELEMENTS = 1 << 16


@_jit
def _reduced(x, pf, pinv):
    # the operations of _field.reduce_inplace, on one element
    return x - pf * np.rint(x * pinv)


@_jit
def _left_chunk_compiled(z, pf, factor, shift_factor, out, plain_col, shifted_col):
    """Left operand columns from residues ``z`` (uint32 in ``[0, p)``), in one pass.

    ``out[:, plain_col + j] = factor * centred(z[:, j]) mod p`` and, when
    ``shift_factor`` is not 0, ``out[:, shifted_col + j]`` that times
    ``shift_factor`` mod p: :func:`._field.centre_into` then
    :func:`._field._mulmod_into` twice, on their float path (the caller
    checks that every product is below ``2**52``).
    """
    pinv = 1.0 / pf
    n, w = z.shape
    for i in range(n):
        for j in range(w):
            c = _reduced(np.float64(z[i, j]), pf, pinv)
            if factor != 1.0:
                c = _reduced(c * factor, pf, pinv)
            out[i, plain_col + j] = c
            if shift_factor != 0.0:
                out[i, shifted_col + j] = _reduced(c * shift_factor, pf, pinv)


@_jit
def _right_chunk_compiled(z, pf, shift, out, hi_col, lo_col):
    """Right operand columns from residues ``z``, in one pass.

    The centred residue, cut into the limbs of :meth:`._field.ModularProduct.right_operand`
    (``hi = rint(c * 2**-shift)``, ``lo = c - hi * 2**shift``) when ``shift``
    is positive, else as it is at ``hi_col``.
    """
    pinv = 1.0 / pf
    down = 2.0**-shift
    up = 2.0**shift
    n, w = z.shape
    for i in range(n):
        for j in range(w):
            c = _reduced(np.float64(z[i, j]), pf, pinv)
            if shift > 0:
                hi = np.rint(c * down)
                out[i, hi_col + j] = hi
                out[i, lo_col + j] = c - hi * up
            else:
                out[i, hi_col + j] = c


@_jit
def _tile_residues_compiled(x, pf, reduce, diagonal, out):
    """A party's tile as the int32 message: ``x`` reduced (if asked), packed.

    ``x`` holds the exact product (``|x| <= 2**53 - p``); the reduction is
    :func:`._field.reduce_inplace`'s, so the residues are those the NumPy
    code sends. A diagonal tile sends its strict upper triangle row by row
    (the order of :func:`numpy.triu_indices`).
    """
    pinv = 1.0 / pf
    n, m = x.shape
    k = 0
    for i in range(n):
        start = i + 1 if diagonal else 0
        for j in range(start, m):
            v = x[i, j]
            if reduce:
                v = _reduced(v, pf, pinv)
            out[k] = np.int32(v)
            k += 1


@_jit
def _canonical(v, p):
    # v mod p in [0, p) for |v| < 2**62, without an integer division: the
    # float quotient is within 1 of the exact one (|v| / p < 2**32, and
    # float64 rounds v and v / p to within 2**-20 of them), so one correction
    # each way at most
    q = np.int64(np.rint(np.float64(v) * (1.0 / np.float64(p))))
    r = v - q * p
    if r < 0:
        r += p
    if r < 0:
        r += p
    if r >= p:
        r -= p
    if r >= p:
        r -= p
    return r


@_jit
def _decode_tile_compiled(
    uploads, weights, flush_every, p, scale, out, a0, b0, n, m, diagonal, mirror
):
    """Decode one tile from every party's message and write it; whether any value wrapped.

    ``uploads`` holds the answering parties' messages for the tile (centred
    int32 residues, row by row; the strict upper triangle only for a
    ``diagonal`` tile), ``weights`` their centred decoding weights (int64).
    Row by row, ``sum_j w_j g_j`` is accumulated in int64 in a row buffer
    that stays in cache, reduced every ``flush_every`` parties (the caller
    bounds the sum below ``2**62``) and at the end to ``[0, p)``; the
    decoded integer times ``scale`` goes to ``out[a0 + i, b0 + j]``. A
    diagonal tile is mirrored with a zero diagonal; an off-diagonal one is
    also written transposed at ``(b0, a0)`` when ``mirror``, in bands of
    rows so that both sides stay in cache. A value at or above ``(p - 1) /
    2`` has wrapped around (the caller raises).
    """
    limit = (p - 1) // 2
    n_parties = len(uploads)
    row = np.empty(m, dtype=np.int64)
    wrapped = False
    band = 32
    offset = 0
    for i0 in range(0, n, band):
        i1 = min(i0 + band, n)
        for i in range(i0, i1):
            start = i + 1 if diagonal else 0
            width = m - start
            for k in range(n_parties):
                values = uploads[k]
                w = weights[k]
                if k == 0:
                    for j in range(width):
                        row[j] = w * np.int64(values[offset + j])
                else:
                    for j in range(width):
                        row[j] += w * np.int64(values[offset + j])
                if (k + 1) % flush_every == 0 and k + 1 < n_parties:
                    for j in range(width):
                        row[j] = _canonical(row[j], p)
            offset += width
            if diagonal:
                out[a0 + i, b0 + i] = 0.0
            for j in range(width):
                r = _canonical(row[j], p)
                if r >= limit:
                    wrapped = True
                out[a0 + i, b0 + start + j] = np.float64(r) * scale
        if mirror or diagonal:
            for j in range(m):
                for i in range(i0, min(i1, j) if diagonal else i1):
                    out[b0 + j, a0 + i] = out[a0 + i, b0 + j]
    return wrapped


@_jit
def _encode_shares_compiled(residues, n_segments, noise, encoding, p, out):
    """``out[j] = sum_o encoding[o, j] * s_o mod p``, canonical (uint32).

    The segments ``s_o`` are the ``n_segments`` column blocks of
    ``residues`` (``(n, l w)``, in ``[0, p)``), then the ``noise`` segments
    (``(t, n, w)``, in ``[0, p)``). A product is below ``(p - 1)**2``; the
    sum is reduced after as many products as keep it below ``2**62`` (four
    with the default prime, one with ``2**31 - 1``), so every reduction is
    exact and the result is the canonical residue of the exact sum, whatever
    the order of the reductions.
    """
    n_noise, n, w = noise.shape
    m = encoding.shape[1]
    per = max(1, (2**62 - p) // ((p - 1) * (p - 1)))
    n_terms = n_segments + n_noise
    for i in range(n):
        for j in range(m):
            for c in range(w):
                acc = np.int64(0)
                for o in range(n_terms):
                    if o < n_segments:
                        acc += residues[i, o * w + c] * encoding[o, j]
                    else:
                        acc += noise[o - n_segments, i, c] * encoding[o, j]
                    if (o + 1) % per == 0 or o + 1 == n_terms:
                        acc = _canonical(acc, p)
                out[j, i, c] = np.uint32(acc)


@_jit
def _row_norms_compiled(z, p, out):
    """Squared norms mod p of the rows of ``z`` (residues), centred to ``(-p/2, p/2]``.

    Each square is reduced (``< p``) before the row sum, which stays below
    ``2**62`` for rows of fewer than ``2**31`` columns.
    """
    n, w = z.shape
    half = p // 2
    for i in range(n):
        s = np.int64(0)
        for c in range(w):
            v = np.int64(z[i, c])
            s += _canonical(v * v, p)
        r = _canonical(s, p)
        out[i] = np.float64(r - p if r > half else r)


# --------------------------------------------------------------------------- #
# NumPy twins (the same operations element by element) and the dispatch
# --------------------------------------------------------------------------- #
def _reduced_numpy(x, pf):
    return x - pf * np.rint(x * (1.0 / pf))


def _compiled(n_elements):
    return n_elements >= COMPILED_MIN_ELEMENTS


def left_chunk(z, pf, factor, shift_factor, out, plain_col, shifted_col):
    """See :func:`_left_chunk_compiled`; NumPy below :data:`COMPILED_MIN_ELEMENTS`."""
    if _compiled(z.size):
        return _left_chunk_compiled(z, pf, factor, shift_factor, out, plain_col, shifted_col)
    w = z.shape[1]
    c = _reduced_numpy(z.astype(np.float64), pf)
    if factor != 1.0:
        c = _reduced_numpy(c * factor, pf)
    out[:, plain_col : plain_col + w] = c
    if shift_factor != 0.0:
        out[:, shifted_col : shifted_col + w] = _reduced_numpy(c * shift_factor, pf)
    return None


def right_chunk(z, pf, shift, out, hi_col, lo_col):
    """See :func:`_right_chunk_compiled`; NumPy below :data:`COMPILED_MIN_ELEMENTS`."""
    if _compiled(z.size):
        return _right_chunk_compiled(z, pf, shift, out, hi_col, lo_col)
    w = z.shape[1]
    c = _reduced_numpy(z.astype(np.float64), pf)
    if shift > 0:
        hi = np.rint(c * 2.0**-shift)
        out[:, hi_col : hi_col + w] = hi
        out[:, lo_col : lo_col + w] = c - hi * 2.0**shift
    else:
        out[:, hi_col : hi_col + w] = c
    return None


def _upper_values(x, diagonal):
    """The tile's entries in message order: row by row, the strict upper triangle if diagonal."""
    if not diagonal:
        return x.ravel()
    rows, cols = np.triu_indices(x.shape[0], 1, x.shape[1])
    return x[rows, cols]


def tile_residues(x, pf, reduce, diagonal, out):
    """See :func:`_tile_residues_compiled`; NumPy below :data:`COMPILED_MIN_ELEMENTS`."""
    if _compiled(x.size):
        return _tile_residues_compiled(x, pf, reduce, diagonal, out)
    values = _upper_values(x, diagonal)
    if reduce:
        values = _reduced_numpy(values, pf)
    out[: len(values)] = values.astype(np.int32)
    return None


def decode_tile(uploads, weights, flush_every, p, scale, out, a0, b0, n, m, diagonal, mirror):
    """See :func:`_decode_tile_compiled`; NumPy below :data:`COMPILED_MIN_ELEMENTS`."""
    if _compiled(n * m):
        return _decode_tile_compiled(
            uploads, weights, flush_every, p, scale, out, a0, b0, n, m, diagonal, mirror
        )
    acc = None
    for k, (values, w) in enumerate(zip(uploads, weights)):
        term = np.int64(w) * np.asarray(values, dtype=np.int64)
        acc = term if acc is None else acc + term
        if (k + 1) % flush_every == 0 and k + 1 < len(uploads):
            acc = np.mod(acc, p)
    residues = np.mod(acc, p)
    wrapped = bool(np.any(residues >= (p - 1) // 2))
    decoded = residues.astype(np.float64) * scale
    if diagonal:
        rows, cols = np.triu_indices(n, 1, m)
        block = np.zeros((n, m))
        block[rows, cols] = decoded
        block[cols, rows] = decoded
        out[a0 : a0 + n, b0 : b0 + m] = block
    else:
        block = decoded.reshape(n, m)
        out[a0 : a0 + n, b0 : b0 + m] = block
        if mirror:
            out[b0 : b0 + m, a0 : a0 + n] = block.T
    return wrapped


def encode_shares(residues, n_segments, noise, encoding, p, out):
    """See :func:`_encode_shares_compiled`; NumPy below :data:`COMPILED_MIN_ELEMENTS`."""
    if _compiled(out.size):
        return _encode_shares_compiled(residues, n_segments, noise, encoding, p, out)
    n_noise, n, w = noise.shape
    per = max(1, (2**62 - p) // ((p - 1) * (p - 1)))
    segments = [residues[:, o * w : (o + 1) * w] for o in range(n_segments)] + list(noise)
    for j in range(encoding.shape[1]):
        acc = np.zeros((n, w), dtype=np.int64)
        for o, segment in enumerate(segments):
            acc += segment.astype(np.int64) * np.int64(encoding[o, j])
            if (o + 1) % per == 0 or o + 1 == len(segments):
                acc = np.mod(acc, p)
        out[j] = acc.astype(np.uint32)
    return None


def row_norms(z, p, out):
    """See :func:`_row_norms_compiled`; NumPy below :data:`COMPILED_MIN_ELEMENTS`."""
    if _compiled(z.size):
        return _row_norms_compiled(z, p, out)
    v = z.astype(np.int64)
    r = np.mod(np.mod(v * v, p).sum(axis=1), p)
    out[:] = np.where(r > p // 2, r - p, r).astype(np.float64)
    return None


# --------------------------------------------------------------------------- #
# The neighbour sink's passes over a decoded tile (``_lcc_sinks``)
# --------------------------------------------------------------------------- #
@_jit
def _largest(row):
    # position and value of the largest key kept for a row
    worst, value = 0, row[0]
    for c in range(1, row.size):
        if row[c] > value:
            worst, value = c, row[c]
    return worst, value


@_jit
def _nearest_rows_compiled(kept, ints, row0, col0, diagonal, first, masked):
    n, m = ints.shape
    for i in range(n):
        row = kept[row0 + i]
        worst, value = _largest(row)
        for j in range(m):
            col = col0 + j
            if (diagonal and j == i) or (masked and first[col] != col):
                continue
            key = (ints[i, j] << 32) | col
            if key < value:
                row[worst] = key
                worst, value = _largest(row)


@_jit
def _nearest_columns_compiled(kept, ints, row0, col0, first, masked):
    n, m = ints.shape
    worst = np.empty(m, dtype=np.int64)
    value = np.empty(m, dtype=np.int64)
    for j in range(m):
        worst[j], value[j] = _largest(kept[col0 + j])
    # row by row through the tile (in cache), each column's largest key at hand
    for i in range(n):
        source = row0 + i
        if masked and first[source] != source:
            continue
        for j in range(m):
            key = (ints[i, j] << 32) | source
            if key < value[j]:
                row = kept[col0 + j]
                row[worst[j]] = key
                worst[j], value[j] = _largest(row)


def merge_nearest(kept, ints, row0, col0, diagonal, first, masked, *, columns=False):
    """Fold a tile's ``(distance << 32) | index`` keys into the rows' smallest ``kept`` keys.

    ``columns=False``: row ``row0 + i`` of ``kept`` takes the keys of the
    tile's row ``i`` (index ``col0 + j``; the diagonal left out of a
    ``diagonal`` tile); ``columns=True``: row ``col0 + j`` takes those of the
    tile's column ``j`` (index ``row0 + i``). With ``masked``, indices whose
    ``first`` is not themselves are left out. Every kept row then holds the
    ``kept.shape[1]`` smallest of its old and new keys, in no order: the
    same set as a partition of both (the keys of a row are distinct), in one
    pass over the tile instead of a partition of every row.
    Returns False when the tile is too small for the compiled kernel (the
    caller partitions).
    """
    if not _compiled(ints.size):
        return False
    if columns:
        _nearest_columns_compiled(kept, ints, row0, col0, first, masked)
    else:
        _nearest_rows_compiled(kept, ints, row0, col0, diagonal, first, masked)
    return True


@_jit
def _count_window_compiled(ints, diagonal, shift, coarse, add_coarse, lo, hi, counts):
    n, m = ints.shape
    below = 0
    above = 0
    for i in range(n):
        for j in range(i + 1 if diagonal else 0, m):
            v = ints[i, j]
            if v <= 0:
                continue
            if add_coarse:
                coarse[v >> shift] += 1
            if v < lo:
                below += 1
            elif v >= hi:
                above += 1
            else:
                counts[v - lo] += 1
    return below, above


def count_window(ints, diagonal, shift, coarse, add_coarse, lo, hi, counts):
    """Count a tile's positive entries (upper triangle of a ``diagonal`` one) in one pass.

    ``coarse[v >> shift] += 1`` (if ``add_coarse``), ``counts[v - lo] += 1``
    inside ``[lo, hi)``; returns ``(below, above)`` the window, or None when
    the tile is too small for the compiled kernel.
    """
    if not _compiled(ints.size):
        return None
    return _count_window_compiled(ints, diagonal, shift, coarse, add_coarse, lo, hi, counts)
