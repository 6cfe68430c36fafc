"""Tests of the dense-memory guard."""

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
