"""Per-column statistics of a client's rows in one pass: extremes, sums, centred moments.

A fit reads each client's extremes for the magnitude check, the bounds of the
secure sums and the Lloyd pass's headroom test, and its column sums and
centred moments for the pooled mean and variance. NumPy takes one pass over
the rows per statistic, each allocating a temporary of the rows' size for the
centred ones; compiled, all of them come out of one pass without a temporary.
Both forms add the rows in row order, column by column (NumPy's order for a
reduction over the first axis), so the floats are the same either way
(tested); small blocks take NumPy, which needs no compilation on a first run.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["column_extremes_and_sums", "centered_column_moments"]

#: Rows from which the compiled pass runs: below, NumPy is as fast and a small
#: first fit does not wait for a compilation.
_COMPILED_MIN_ROWS = 2048


@numba.njit(cache=True, nogil=True)
def _extremes_and_sums(data, low, high, sums):  # pragma: no cover - compiled
    n, d = data.shape
    for j in range(d):
        low[j] = data[0, j]
        high[j] = data[0, j]
    for i in range(n):
        for j in range(d):
            v = data[i, j]
            # NaN never compares: the caller checks finiteness on the sums.
            if v < low[j]:
                low[j] = v
            if v > high[j]:
                high[j] = v
            sums[j] += v


@numba.njit(cache=True, nogil=True)
def _centered_moments(data, mean, first, second):  # pragma: no cover - compiled
    n, d = data.shape
    for i in range(n):
        for j in range(d):
            v = data[i, j] - mean[j]
            first[j] += v
            second[j] += v * v


def _read_only(data):
    # One compiled signature: the runtime hands steps read-only blocks, and a
    # writable array would be compiled apart (seconds on a first run).
    view = data.view()
    view.flags.writeable = False
    return view


def _compiled(data):
    return (
        data.shape[0] >= _COMPILED_MIN_ROWS
        and data.dtype == np.float64
        and data.flags.c_contiguous
        # One column is contiguous: NumPy adds it pairwise, not in row order.
        and data.shape[1] >= 2
    )


def column_extremes_and_sums(data):
    """Per column: the least and the greatest value, and the sum, of a 2-D float64 array.

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_features), n_samples >= 1

    Returns
    -------
    low, high, sums : ndarray of shape (n_features,)
        ``data.min(axis=0)``, ``data.max(axis=0)`` and ``data.sum(axis=0)``,
        the same floats (a value that is not finite propagates to the sums,
        not necessarily to the extremes: check the sums).
    """
    if not _compiled(data):
        return data.min(axis=0), data.max(axis=0), data.sum(axis=0)
    d = data.shape[1]
    low, high, sums = np.empty(d), np.empty(d), np.zeros(d)
    _extremes_and_sums(_read_only(data), low, high, sums)
    return low, high, sums


def centered_column_moments(data, mean):
    """Per column, the sums of the deviations from ``mean`` and of their squares.

    The floats of ``(data - mean).sum(axis=0)`` and
    ``np.einsum("ij,ij->j", data - mean, data - mean)``, without the
    temporary of the rows' size.
    """
    mean = np.ascontiguousarray(mean, dtype=np.float64)
    if not _compiled(data):
        deviations = data - mean
        return deviations.sum(axis=0), np.einsum("ij,ij->j", deviations, deviations)
    d = data.shape[1]
    first, second = np.zeros(d), np.zeros(d)
    _centered_moments(_read_only(data), mean, first, second)
    return first, second
