"""Tests of the dense-memory guard."""

import subprocess
import sys

import numpy as np
import pytest

from skfedclust.clusterers import _memory
from skfedclust.clusterers._memory import (
    AVAILABLE_MEMORY_ENV,
    InsufficientMemoryError,
    available_memory,
    check_dense_memory,
)


def test_estimate_counts_copies_and_dtype():
    assert check_dense_memory(100, 50, n_copies=2, what="D", available=10**9) == 80_000
    assert (
        check_dense_memory(100, 50, n_copies=1.5, what="D", dtype=np.float32, available=10**9)
        == 30_000
    )


def test_too_large_raises_a_clear_error_naming_n_and_the_sizes():
    with pytest.raises(InsufficientMemoryError) as info:
        check_dense_memory(
            70_000, 70_000, n_copies=2.5, what="the distance matrix", available=2 * 1024**3
        )
    message = str(info.value)
    assert "n=70000" in message
    assert "91.3 GiB" in message  # 2.5 * 70000**2 * 8 bytes
    assert "2.0 GiB" in message
    assert "subsample" in message
    # callers that handle either kind of error catch it
    assert isinstance(info.value, MemoryError) and isinstance(info.value, ValueError)


def test_advice_is_passed_through():
    with pytest.raises(MemoryError, match="use kmeans"):
        check_dense_memory(10, 10, n_copies=1, what="D", available=1, advice="use kmeans")


def test_environment_variable_overrides_the_detected_memory(monkeypatch):
    monkeypatch.setenv(AVAILABLE_MEMORY_ENV, "1234")
    assert available_memory() == 1234
    with pytest.raises(MemoryError, match="1.2 KiB of memory"):
        check_dense_memory(100, 100, n_copies=1, what="D")
    monkeypatch.setenv(AVAILABLE_MEMORY_ENV, "lots")
    with pytest.raises(ValueError, match=AVAILABLE_MEMORY_ENV):
        available_memory()


def test_reads_meminfo_and_falls_back(monkeypatch, tmp_path):
    monkeypatch.delenv(AVAILABLE_MEMORY_ENV, raising=False)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  100 kB\nMemFree:  10 kB\nMemAvailable:   2048 kB\n")
    assert _memory._meminfo_available(str(meminfo)) == 2048 * 1024
    assert _memory._meminfo_available(str(tmp_path / "missing")) is None
    monkeypatch.setattr(_memory, "_meminfo_available", lambda: None)
    fallback = available_memory()
    assert fallback is None or fallback > 0


def test_unknown_memory_lets_the_allocation_proceed(monkeypatch):
    monkeypatch.delenv(AVAILABLE_MEMORY_ENV, raising=False)
    monkeypatch.setattr(_memory, "available_memory", lambda: None)
    assert check_dense_memory(10**6, 10**6, n_copies=3, what="D") == 24 * 10**12


# --------------------------------------------------------------------------- #
# Limits besides the system's free memory: resource limits and control groups.
# --------------------------------------------------------------------------- #
def test_the_smallest_limit_wins(monkeypatch):
    monkeypatch.delenv(AVAILABLE_MEMORY_ENV, raising=False)
    monkeypatch.setattr(_memory, "_meminfo_available", lambda: 64 * 1024**3)
    monkeypatch.setattr(_memory, "_rlimit_available", lambda: 3 * 1024**3)
    monkeypatch.setattr(_memory, "_cgroup_available", lambda: 5 * 1024**3)
    assert available_memory() == 3 * 1024**3
    monkeypatch.setattr(_memory, "_cgroup_available", lambda: 1024**3)
    assert available_memory() == 1024**3
    with pytest.raises(InsufficientMemoryError, match="1.0 GiB of memory"):
        check_dense_memory(20_000, 20_000, n_copies=1, what="D")
    # a limit already exceeded leaves nothing, not a negative amount
    monkeypatch.setattr(_memory, "_rlimit_available", lambda: -5)
    assert available_memory() == 0
    # no limit and no system figure: unknown
    monkeypatch.setattr(_memory, "_meminfo_available", lambda: None)
    monkeypatch.setattr(_memory, "_free_physical_pages", lambda: None)
    monkeypatch.setattr(_memory, "_rlimit_available", lambda: None)
    monkeypatch.setattr(_memory, "_cgroup_available", lambda: None)
    assert available_memory() is None


def test_rlimit_headroom_subtracts_what_the_process_maps(tmp_path):
    resource = pytest.importorskip("resource")
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmSize:\t  1048576 kB\nVmData:\t   524288 kB\n")
    limits = {resource.RLIMIT_AS: (4 * 1024**3, resource.RLIM_INFINITY)}
    limits.setdefault(resource.RLIMIT_DATA, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    def getrlimit(which):
        return limits[which]

    # 4 GiB of address space, 1 GiB already mapped
    assert _memory._rlimit_available(str(status), getrlimit) == 3 * 1024**3
    limits[resource.RLIMIT_DATA] = (1024**3, resource.RLIM_INFINITY)
    assert _memory._rlimit_available(str(status), getrlimit) == 512 * 1024**2
    limits[resource.RLIMIT_AS] = limits[resource.RLIMIT_DATA] = (resource.RLIM_INFINITY,) * 2
    assert _memory._rlimit_available(str(status), getrlimit) is None


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_limits_of_the_group_and_its_ancestors(tmp_path):
    mount = tmp_path / "cgroup"
    proc_cgroup = tmp_path / "proc_cgroup"
    proc_cgroup.write_text("0::/batch.slice/job-7\n")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        f"30 23 0:26 / {mount} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n"
    )
    job = mount / "batch.slice" / "job-7"
    # the job: 4 GiB limit, 3 GiB charged of which 1 GiB is reclaimable file cache
    _write(job / "memory.max", f"{4 * 1024**3}\n")
    _write(job / "memory.current", f"{3 * 1024**3}\n")
    _write(job / "memory.stat", f"anon 123\ninactive_file {1024**3}\nactive_file 5\n")
    # its parent has no limit of its own; the root has no memory files at all
    _write(mount / "batch.slice" / "memory.max", "max\n")
    _write(mount / "batch.slice" / "memory.current", f"{10 * 1024**3}\n")
    found = _memory._cgroup_available(str(proc_cgroup), str(mountinfo))
    assert found == 2 * 1024**3
    # a tighter limit higher up applies to the job too
    _write(mount / "batch.slice" / "memory.max", f"{11 * 1024**3}\n")
    assert _memory._cgroup_available(str(proc_cgroup), str(mountinfo)) == 1024**3
    # no limit anywhere: unknown
    for directory in (job, mount / "batch.slice"):
        (directory / "memory.max").write_text("max\n")
    assert _memory._cgroup_available(str(proc_cgroup), str(mountinfo)) is None


def test_cgroup_v2_in_a_namespace_reads_the_mount_point(tmp_path):
    # In a container the mount shows the container's own group, whatever path
    # /proc/self/cgroup names.
    mount = tmp_path / "sys_fs_cgroup"
    proc_cgroup = tmp_path / "proc_cgroup"
    proc_cgroup.write_text("0::/../../kubepods/pod1\n")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"30 23 0:26 / {mount} rw - cgroup2 cgroup2 rw\n")
    _write(mount / "memory.max", "1000000\n")
    _write(mount / "memory.current", "400000\n")
    assert _memory._cgroup_available(str(proc_cgroup), str(mountinfo)) == 600000


def test_cgroup_v1_memory_controller(tmp_path):
    mount = tmp_path / "memory"
    proc_cgroup = tmp_path / "proc_cgroup"
    proc_cgroup.write_text("5:cpu,cpuacct:/\n4:memory:/process_api/abc\n0::/\n")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        f"40 30 0:35 / {tmp_path / 'cpu'} rw - cgroup cgroup rw,cpu,cpuacct\n"
        f"41 30 0:36 / {mount} rw,relatime - cgroup cgroup rw,memory\n"
    )
    _write(mount / "memory.limit_in_bytes", "9223372036854771712\n")  # no limit
    _write(mount / "memory.usage_in_bytes", f"{50 * 1024**3}\n")
    group = mount / "process_api" / "abc"
    _write(group / "memory.limit_in_bytes", f"{2 * 1024**3}\n")
    _write(group / "memory.usage_in_bytes", f"{1024**3}\n")
    _write(group / "memory.stat", f"inactive_file 1\ntotal_inactive_file {512 * 1024**2}\n")
    found = _memory._cgroup_available(str(proc_cgroup), str(mountinfo))
    assert found == 1536 * 1024**2
    # unreadable or absent files: unknown, not an error
    assert _memory._cgroup_available(str(tmp_path / "none"), str(mountinfo)) is None
    assert _memory._cgroup_available(str(proc_cgroup), str(tmp_path / "none")) is None


_UNDER_ULIMIT = """
import resource
import numpy as np
from skfedclust.clusterers._memory import InsufficientMemoryError, available_memory
from skfedclust.clusterers._memory import check_dense_memory

mapped = [l.split()[1] for l in open("/proc/self/status") if l.startswith("VmSize:")]
mapped = int(mapped[0]) * 1024  # the kernel reports kB
headroom = 400 * 1024**2
hard = resource.getrlimit(resource.RLIMIT_AS)[1]
resource.setrlimit(resource.RLIMIT_AS, (mapped + headroom, hard))
available = available_memory()
assert 0 < available <= headroom, available
# 800 MB would pass a guard that reads only the system's free memory, then fail in numpy
try:
    check_dense_memory(10_000, 10_000, n_copies=1, what="D")
except InsufficientMemoryError as exc:
    assert "n=10000" in str(exc), exc
else:
    raise AssertionError("the guard let an allocation beyond ulimit -v through")
try:
    np.ones((10_000, 10_000))
except MemoryError:
    pass
else:
    raise AssertionError("the allocation the guard refused would have fitted")
# what the guard accepts does fit
check_dense_memory(3_000, 3_000, n_copies=1, what="D")
np.ones((3_000, 3_000))
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_address_space_limit_under_ulimit_v(monkeypatch):
    monkeypatch.delenv(AVAILABLE_MEMORY_ENV, raising=False)
    result = subprocess.run(
        [sys.executable, "-c", _UNDER_ULIMIT], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


_OMNIFC_UNDER_ULIMIT = """
import resource
import numpy as np
from skfedclust import OmniFCClustering
from skfedclust.clusterers._memory import InsufficientMemoryError

X = np.random.default_rng(0).normal(size=(6000, 4))
mapped = [l.split()[1] for l in open("/proc/self/status") if l.startswith("VmSize:")]
mapped = int(mapped[0]) * 1024  # the kernel reports kB
hard = resource.getrlimit(resource.RLIMIT_AS)[1]
resource.setrlimit(resource.RLIMIT_AS, (mapped + 300 * 1024**2, hard))
try:
    # k-medoids needs the whole matrix D (the default spectral streams a graph).
    OmniFCClustering(
        n_clusters=3, n_parties=7, clusterer="kmedoids", random_state=0
    ).fit([X[:3000], X[3000:]])
except InsufficientMemoryError as exc:
    print("refused:", exc)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_dense_method_refuses_before_running_out_under_ulimit_v(monkeypatch):
    # Two 6000 x 6000 matrices do not fit in 300 MB of address space: the method must
    # say so before its protocol, not die in numpy half-way.
    monkeypatch.delenv(AVAILABLE_MEMORY_ENV, raising=False)
    result = subprocess.run(
        [sys.executable, "-c", _OMNIFC_UNDER_ULIMIT], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("refused:"), result.stdout
    # The available memory it names is the address space left under the limit:
    # 300 MiB less what the fit mapped before its check (modules it imports).
    import re

    available = float(re.search(r"only ([0-9.]+) MiB of memory are available", result.stdout)[1])
    assert 280.0 <= available <= 300.0, result.stdout


def test_release_free_heap_trims_with_glibc_and_is_a_no_op_without(monkeypatch):
    import skfedclust.clusterers._memory as memory

    calls = []
    monkeypatch.setattr(memory, "_malloc_trim", lambda: calls.append)
    memory.release_free_heap()
    assert calls == [0]  # malloc_trim(0): every arena, no padding kept
    monkeypatch.setattr(memory, "_malloc_trim", lambda: None)
    assert memory.release_free_heap() is None
