"""Refuse dense allocations that cannot fit in memory, before making them.

Methods that build an ``n x n`` matrix (a distance matrix, an affinity, a
Gram matrix) need ``8 n**2`` bytes per copy: 800 MB at ``n = 10_000``, 39 GB
at ``n = 70_000``. Running out of memory half-way through a protocol is slow
and, on Linux, often ends with the process killed rather than a Python error.
:func:`check_dense_memory` compares the estimated peak with the memory the
system reports as available and raises a clear error instead.
"""

from __future__ import annotations

import os

import numpy as np

__all__ = [
    "AVAILABLE_MEMORY_ENV",
    "InsufficientMemoryError",
    "available_memory",
    "check_dense_memory",
]

#: Environment variable that overrides the detected available memory (bytes).
AVAILABLE_MEMORY_ENV = "SKFEDCLUST_AVAILABLE_MEMORY"


class InsufficientMemoryError(MemoryError, ValueError):
    """The estimated peak memory of a dense allocation exceeds the available memory.

    A :class:`MemoryError` (nothing was allocated because it would not fit)
    and a :class:`ValueError` (the input is too large for the method), so
    callers that handle either catch it.
    """


def available_memory():
    """Bytes of memory available to new allocations, or None if unknown.

    The environment variable ``SKFEDCLUST_AVAILABLE_MEMORY`` (an integer
    number of bytes) takes precedence. On Linux the kernel's ``MemAvailable``
    estimate is read from ``/proc/meminfo`` (it counts reclaimable caches,
    unlike the free pages); elsewhere the free physical pages reported by
    ``os.sysconf`` are used.

    Returns
    -------
    n_bytes : int or None
        Available bytes, or None when the platform does not say.
    """
    override = os.environ.get(AVAILABLE_MEMORY_ENV)
    if override is not None:
        try:
            return int(override)
        except ValueError:
            raise ValueError(
                f"{AVAILABLE_MEMORY_ENV} must be an integer number of bytes, got {override!r}"
            ) from None
    from_proc = _meminfo_available()
    if from_proc is not None:
        return from_proc
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def _meminfo_available(path="/proc/meminfo"):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _format_bytes(n_bytes):
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop always returns


def check_dense_memory(
    n_rows, n_cols, *, n_copies, what, dtype=np.float64, available=None, advice=None
):
    """Raise before allocating dense matrices that would not fit in memory.

    Parameters
    ----------
    n_rows, n_cols : int
        Shape of one matrix.
    n_copies : float
        Peak number of such matrices alive at once (a fraction counts a
        smaller temporary, e.g. ``0.5`` for a condensed triangle).
    what : str
        What is being allocated, for the message (e.g. ``"the distance
        matrix and its affinity"``).
    dtype : dtype, default=np.float64
        Element type of the matrices.
    available : int, default=None
        Available bytes; None reads them with :func:`available_memory`.
    advice : str, default=None
        What the caller can do instead; the default suggests fewer rows or a
        subsample.

    Returns
    -------
    estimate : int
        The estimated peak in bytes.

    Raises
    ------
    InsufficientMemoryError
        If the estimate exceeds the available memory. It derives from both
        :class:`MemoryError` and :class:`ValueError`.

    Examples
    --------
    >>> from skfedclust.clusterers._memory import check_dense_memory
    >>> check_dense_memory(1000, 1000, n_copies=2, what="D", available=10**9)
    16000000
    """
    estimate = int(np.ceil(float(n_rows) * float(n_cols) * np.dtype(dtype).itemsize * n_copies))
    if available is None:
        available = available_memory()
    if available is None or estimate <= available:
        return estimate
    advice = advice or "Use fewer rows (e.g. a random subsample)."
    raise InsufficientMemoryError(
        f"{what} for n={n_rows} rows need about {_format_bytes(estimate)} at peak "
        f"({n_copies:g} dense {n_rows} x {n_cols} {np.dtype(dtype).name} matrices), but only "
        f"{_format_bytes(available)} of memory are available. {advice}"
    )
