"""The LCC kernels' NumPy twins (small calls) give the bits of the compiled kernels."""

import numpy as np
import pytest

from skfedclust.secure import _kernels
from skfedclust.secure._field import DEFAULT_PRIME, FAST_PRIME

PRIMES = [FAST_PRIME, DEFAULT_PRIME, 2**31 - 1]


@pytest.fixture
def numpy_twins(monkeypatch):
    """Every call takes the NumPy twin, whatever its size."""
    monkeypatch.setattr(_kernels, "COMPILED_MIN_ELEMENTS", 1 << 62)


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("p", PRIMES)
def test_operand_chunks(p, numpy_twins):
    rng = np.random.default_rng(p % 101)
    z = rng.integers(0, p, size=(37, 5)).astype(np.uint32)
    for factor, shift_factor in ((1.0, 0.0), (3.0, 0.0), (5.0, 2.0**11)):
        if (p // 2 + 3) * max(factor, shift_factor) > 2**52:
            continue
        outs = [np.full((37, 12), np.nan) for _ in range(2)]
        _kernels._left_chunk_compiled(z, float(p), factor, shift_factor, outs[0], 0, 5)
        _kernels.left_chunk(z, float(p), factor, shift_factor, outs[1], 0, 5)
        _same(*outs)
    for shift in (0, 16):
        outs = [np.full((37, 12), np.nan) for _ in range(2)]
        _kernels._right_chunk_compiled(z, float(p), shift, outs[0], 1, 6)
        _kernels.right_chunk(z, float(p), shift, outs[1], 1, 6)
        _same(*outs)


@pytest.mark.parametrize("p", PRIMES)
@pytest.mark.parametrize("diagonal", [False, True])
def test_tile_residues(p, diagonal, numpy_twins):
    rng = np.random.default_rng(7)
    x = rng.integers(-(2**52), 2**52, size=(9, 9)).astype(np.float64)
    outs = [np.full(81, -7, dtype=np.int32) for _ in range(2)]
    _kernels._tile_residues_compiled(x, float(p), True, diagonal, outs[0])
    _kernels.tile_residues(x, float(p), True, diagonal, outs[1])
    _same(*outs)


@pytest.mark.parametrize("p", PRIMES)
@pytest.mark.parametrize("diagonal, mirror", [(False, False), (False, True), (True, False)])
def test_decode_tile(p, diagonal, mirror, numpy_twins):
    rng = np.random.default_rng(3)
    h = (p - 1) // 2
    n, m = (6, 6) if diagonal else (5, 7)
    size = n * (n - 1) // 2 if diagonal else n * m
    weights = rng.integers(-h, h + 1, size=20)
    uploads = tuple(rng.integers(-h, h + 4, size=size).astype(np.int32) for _ in range(20))
    flush = max(1, (2**62 - p) // (h * (h + 3)))
    results = []
    for kernel in (_kernels._decode_tile_compiled, _kernels.decode_tile):
        out = np.full((16, 16), np.nan)
        wrapped = kernel(uploads, weights, flush, p, 0.25, out, 2, 2 if diagonal else 8, n, m,
                         diagonal, mirror)  # fmt: skip
        results.append((bool(wrapped), out))
    assert results[0][0] == results[1][0]
    _same(results[0][1], results[1][1])


@pytest.mark.parametrize("p", PRIMES)
def test_encode_shares_and_row_norms(p, numpy_twins):
    rng = np.random.default_rng(11)
    residues = rng.integers(0, p, size=(8, 6))
    noise = rng.integers(0, p, size=(2, 8, 3))
    encoding = rng.integers(0, p, size=(4, 7))
    outs = [np.zeros((7, 8, 3), dtype=np.uint32) for _ in range(2)]
    _kernels._encode_shares_compiled(residues, 2, noise, encoding, p, outs[0])
    _kernels.encode_shares(residues, 2, noise, encoding, p, outs[1])
    _same(*outs)
    z = rng.integers(0, p, size=(10, 13)).astype(np.uint32)
    norms = [np.empty(10) for _ in range(2)]
    _kernels._row_norms_compiled(z, p, norms[0])
    _kernels.row_norms(z, p, norms[1])
    _same(*norms)


def test_large_calls_take_the_compiled_kernels(monkeypatch):
    called = []
    monkeypatch.setattr(_kernels, "_row_norms_compiled", lambda *a: called.append(a))
    z = np.zeros((_kernels.COMPILED_MIN_ELEMENTS, 1), dtype=np.uint32)
    _kernels.row_norms(z, FAST_PRIME, np.empty(len(z)))
    assert called


def test_large_operand_chunks_take_the_compiled_kernels(monkeypatch):
    called = []
    for name in ("_left_chunk_compiled", "_right_chunk_compiled"):
        monkeypatch.setattr(_kernels, name, lambda *a, name=name: called.append(name))
    z = np.zeros((_kernels.COMPILED_MIN_ELEMENTS, 1), dtype=np.uint32)
    out = np.full((len(z), 2), np.nan)
    _kernels.left_chunk(z, float(FAST_PRIME), 1.0, 0.0, out, 0, 1)
    _kernels.right_chunk(z, float(FAST_PRIME), 0, out, 0, 1)
    assert called == ["_left_chunk_compiled", "_right_chunk_compiled"]
    # The NumPy twins did not run: nothing was written.
    assert np.isnan(out).all()


def _sink_graph(D, tile, capacity_k, monkeypatch, compiled):
    """Feed a NeighbourSink the upper block triangle of ``D``, both passes; its graph."""
    from skfedclust.secure import _lcc_sinks

    monkeypatch.setattr(_kernels, "COMPILED_MIN_ELEMENTS", 0 if compiled else 1 << 62)
    # a small sample and window: the window is set after a few tiles, and
    # misses the median (a second pass that recounts)
    monkeypatch.setattr(_lcc_sinks, "MEDIAN_SAMPLE", 40)
    monkeypatch.setattr(_lcc_sinks, "MEDIAN_WINDOW", 6)
    n = len(D)
    sink = _lcc_sinks.NeighbourSink(n, n_neighbors=capacity_k, median=True, value_bound=2**20)
    starts = range(0, n, tile)
    while True:
        for a0 in starts:
            for b0 in starts:
                if b0 >= a0:
                    a1, b1 = min(a0 + tile, n), min(b0 + tile, n)
                    sink.add((a0, a1, b0, b1), D[a0:a1, b0:b1].astype(np.float64), 0.5)
        if not sink.another_pass():
            return sink.finish()


@pytest.mark.parametrize("copies", [0, 6])
def test_neighbour_sink_compiled_passes_keep_what_the_numpy_passes_keep(copies, monkeypatch):
    rng = np.random.default_rng(copies)
    n = 53
    X = rng.integers(0, 60, size=(n, 3))
    # copies of the first row: zero distances and crowded lists (the masked pass)
    X[n - copies :] = X[0]
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
    graphs = [_sink_graph(D, 8, 2, monkeypatch, compiled) for compiled in (False, True)]
    for field in ("first", "neighbours", "distances"):
        _same(getattr(graphs[0], field), getattr(graphs[1], field))
    assert graphs[0].median == graphs[1].median == np.median(D[np.triu_indices(n, 1)][
        D[np.triu_indices(n, 1)] > 0] * 0.5)  # fmt: skip
    assert graphs[0].masked == graphs[1].masked == (copies > 0)
    assert graphs[0].passes == graphs[1].passes == 2
    # the lists are the nearest (distance, index) pairs, ties to the lower index
    for i in range(n):
        listed = graphs[1].neighbours[i][graphs[1].neighbours[i] >= 0]
        if not graphs[1].masked:
            order = sorted((D[i, j], j) for j in range(n) if j != i)
            assert listed.tolist() == [j for _, j in order[: len(listed)]]


def test_large_tiles_take_the_compiled_sink_passes(monkeypatch):
    called = []
    monkeypatch.setattr(_kernels, "_nearest_rows_compiled", lambda *a: called.append("rows"))
    monkeypatch.setattr(_kernels, "_nearest_columns_compiled", lambda *a: called.append("cols"))
    big = np.zeros((_kernels.COMPILED_MIN_ELEMENTS, 1), dtype=np.int64)
    keys = np.full((len(big), 2), 5, dtype=np.int64)
    first = np.arange(len(big))
    assert _kernels.merge_nearest(keys, big, 0, 0, False, first, False)
    assert _kernels.merge_nearest(keys, big, 0, 0, False, first, False, columns=True)
    assert called == ["rows", "cols"]
    assert not _kernels.merge_nearest(keys, big[:10], 0, 0, False, first, False)
    assert (keys == 5).all()
