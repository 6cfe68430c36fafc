"""Refuse dense allocations that cannot fit in memory, before making them.

Methods that build an ``n x n`` matrix (a distance matrix, an affinity, a
Gram matrix) need ``8 n**2`` bytes per copy: 800 MB at ``n = 10_000``, 39 GB
at ``n = 70_000``. Running out of memory half-way through a protocol is slow
and, on Linux, often ends with the process killed rather than a Python error.
:func:`check_dense_memory` compares the estimated peak with the memory
available to the process (the system's free memory, the process's resource
limits and its control group's limit, whichever is smallest) and raises a
clear error instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re

import numpy as np

__all__ = [
    "AVAILABLE_MEMORY_ENV",
    "InsufficientMemoryError",
    "available_memory",
    "check_dense_memory",
    "release_free_heap",
]

#: Environment variable that overrides the detected available memory (bytes).
AVAILABLE_MEMORY_ENV = "SKFEDCLUST_AVAILABLE_MEMORY"


class InsufficientMemoryError(MemoryError, ValueError):
    """The estimated peak memory of a dense allocation exceeds the available memory.

    A :class:`MemoryError` (nothing was allocated because it would not fit)
    and a :class:`ValueError` (the input is too large for the method), so
    callers that handle either catch it.
    """


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to do
        return None


def release_free_heap():
    """Hand the C heap's free pages back to the operating system (glibc only).

    Why: a streamed exchange allocates and frees messages of a megabyte or
    more on several threads. glibc then raises its threshold for serving
    allocations from fresh mappings and serves them from per-thread heaps,
    whose freed pages stay with the process: at 20,000 rows the resident
    memory of OmniFC's distance round grew from 1.2 to 1.7 GiB that way,
    with nothing alive. ``malloc_trim(0)`` after each pass over the tiles
    returns those pages without changing the process's allocator settings
    (not after each exchange: the next exchange's messages would take every
    page again, one fault each). Elsewhere a no-op.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def available_memory():
    """Bytes of memory available to new allocations, or None if unknown.

    The environment variable ``SKFEDCLUST_AVAILABLE_MEMORY`` (an integer
    number of bytes) takes precedence. Otherwise the smallest of the limits
    that apply to this process:

    * the system's free memory: on Linux the kernel's ``MemAvailable``
      estimate from ``/proc/meminfo`` (it counts reclaimable caches, unlike
      the free pages); elsewhere the free physical pages of ``os.sysconf``;
    * the address-space and data-segment limits (``ulimit -v``, ``ulimit
      -d``: ``RLIMIT_AS``, ``RLIMIT_DATA``) less what the process already
      maps;
    * the memory limit of the process's control group and of each group
      above it (cgroup v2 ``memory.max``, v1 ``memory.limit_in_bytes``,
      as set by containers and batch schedulers) less its usage, not
      counting the reclaimable inactive file cache.

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
    system = _meminfo_available()
    if system is None:
        system = _free_physical_pages()
    limits = [system, _rlimit_available(), _cgroup_available()]
    known = [n for n in limits if n is not None]
    return max(min(known), 0) if known else None


def _free_physical_pages():
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def _meminfo_available(path="/proc/meminfo"):
    return _read_kb_field(path, "MemAvailable:")


def _read_kb_field(path, key):
    """A ``key: value kB`` field of a ``/proc`` status file, in bytes."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        return None
    return None


# (resource limit, field of /proc/self/status with the usage it caps)
_RLIMITS = (("RLIMIT_AS", "VmSize:"), ("RLIMIT_DATA", "VmData:"))


def _rlimit_available(status="/proc/self/status", getrlimit=None):
    """Headroom under the soft address-space and data limits, or None if unlimited.

    An allocation beyond it fails in ``malloc``/``mmap`` (numpy's
    ``MemoryError``) whatever the free memory of the system.
    """
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    getrlimit = getrlimit or resource.getrlimit
    headroom = []
    for name, field in _RLIMITS:
        which = getattr(resource, name, None)
        if which is None:
            continue
        try:
            soft, _ = getrlimit(which)
        except (OSError, ValueError):
            continue
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        used = _read_kb_field(status, field)
        headroom.append(soft - (used or 0))
    return min(headroom) if headroom else None


# A v1 limit this large means "no limit" (the kernel reports about 2**63 rounded to pages).
_UNLIMITED = 2**60

# (cgroup version, limit file, usage file, memory.stat key of the reclaimable file cache)
_CGROUP_FILES = {
    2: ("memory.max", "memory.current", "inactive_file"),
    1: ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
}


def _cgroup_available(cgroup="/proc/self/cgroup", mountinfo="/proc/self/mountinfo"):
    """Smallest headroom under the memory limits of the process's cgroups, or None.

    The group's own limit and those of its ancestors all apply, so the whole
    path up to the mount point is read.
    """
    paths = _cgroup_paths(cgroup)
    headroom = []
    for version, mount_point, root in _cgroup_mounts(mountinfo):
        path = paths.get(version)
        if path is None:
            continue
        limit_file, usage_file, cache_key = _CGROUP_FILES[version]
        for directory in _cgroup_directories(mount_point, root, path):
            limit = _read_int(os.path.join(directory, limit_file))
            if limit is None or limit >= _UNLIMITED:
                continue
            usage = _read_int(os.path.join(directory, usage_file)) or 0
            cache = _read_stat(os.path.join(directory, "memory.stat"), cache_key) or 0
            headroom.append(limit - max(usage - cache, 0))
    return min(headroom) if headroom else None


def _cgroup_paths(path):
    """``{2: path}`` of the unified hierarchy and ``{1: path}`` of the v1 memory controller."""
    paths = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) != 3:
                    continue
                _, controllers, group = parts
                if controllers == "":
                    paths[2] = group
                elif "memory" in controllers.split(","):
                    paths[1] = group
    except OSError:
        return {}
    return paths


def _cgroup_mounts(path):
    """``(version, mount point, root)`` of the cgroup2 and v1 memory mounts."""
    mounts = []
    try:
        with open(path) as f:
            for line in f:
                fields = line.split()
                if "-" not in fields:
                    continue
                sep = fields.index("-")
                if len(fields) < sep + 3 or len(fields) < 5:
                    continue
                fstype, options = fields[sep + 1], fields[sep + 3].split(",")
                root, mount_point = _unescape(fields[3]), _unescape(fields[4])
                if fstype == "cgroup2":
                    mounts.append((2, mount_point, root))
                elif fstype == "cgroup" and "memory" in options:
                    mounts.append((1, mount_point, root))
    except OSError:
        return []
    return mounts


def _unescape(field):
    # mountinfo escapes blanks and backslashes as octal: "\040" is a space.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _cgroup_directories(mount_point, root, group):
    """The group's directory under the mount and its ancestors up to the mount point.

    In a cgroup namespace (containers) the mount shows the group itself while
    ``/proc/self/cgroup`` may name a path that does not exist under it; the
    mount point then stands for the group.
    """
    relative = group
    if root not in ("", "/") and (group == root or group.startswith(root.rstrip("/") + "/")):
        relative = group[len(root.rstrip("/")) :]
    leaf = os.path.normpath(os.path.join(mount_point, relative.lstrip("/")))
    if not os.path.isdir(leaf):
        leaf = mount_point
    directories = [leaf]
    while os.path.normpath(leaf) != os.path.normpath(mount_point):
        parent = os.path.dirname(leaf)
        if parent == leaf:
            break
        leaf = parent
        directories.append(leaf)
    return directories


def _read_int(path):
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    if text == "max":
        return _UNLIMITED
    try:
        return int(text)
    except ValueError:
        return None


def _read_stat(path, key):
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def _format_bytes(n_bytes):
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


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
