"""Tests of skfedclust.secure: field arithmetic and Lagrange-coded distances."""

import itertools
import tracemalloc
import warnings
from fractions import Fraction

import numpy as np
import pytest
from _byte_formulas import offset_sum_bytes
from scipy import stats

from skfedclust.clusterers._memory import AVAILABLE_MEMORY_ENV
from skfedclust.federation import Federation, InProcessRuntime
from skfedclust.secure import (
    DEFAULT_PRIME,
    _lcc,
    _lcc_offset,
    encoding_matrix,
    evaluation_points,
    lagrange_matrix,
    lcc_encode,
    lcc_squared_distances,
    max_safe_precision,
    modular_matmul,
    quantize,
    server_decoding_weights,
)
from skfedclust.secure._field import FAST_PRIME, ModularProduct, centred
from skfedclust.secure._lcc import (
    decode_squared_distances,
    party_tiles,
    tile_elements,
    tile_exchanges,
)
from skfedclust.secure._lcc_coding import MAX_PRECISION, precision_is_safe
from skfedclust.secure._secure_sum import TAG_UNMASK
from skfedclust.secure._secure_sum import TAG_UPLOAD as TAG_SUM_UPLOAD
from skfedclust.utils.protocol_checks import RecordingRuntime, remove_self_masks

MERSENNE = 2**31 - 1


def exact_sq_distances(X, q):
    """Integer squared distances of rint(2**q X), with Python-exact int64."""
    Xi = np.rint(np.ldexp(np.asarray(X, dtype=float), q)).astype(np.int64)
    return ((Xi[:, None, :] - Xi[None, :, :]) ** 2).sum(-1)


def as_int(D, q):
    scaled = D * 4.0**q
    assert np.array_equal(scaled, np.rint(scaled))
    return scaled.astype(np.int64)


def auto_precision(X, p):
    """The precision "auto" picks: from the bounds of the rows around their mean."""
    centred_rows = X - X.mean(axis=0)
    return max_safe_precision(
        np.abs(centred_rows).max() * (1 + 1e-9),
        np.linalg.norm(centred_rows, axis=1).max() * (1 + 1e-9),
        X.shape[1],
        p,
    )


def distance_uploaders(ledger):
    return {m.sender for m in ledger.messages if m.tag == "encoded distances"}


def rational_mod(f, p):
    return f.numerator * pow(f.denominator, -1, p) % p


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    # Small blocks exercise the block tiling and mirroring on small data.
    monkeypatch.setattr(_lcc, "BLOCK_SIZE", 16)


# --------------------------------------------------------------------------- #
# Field arithmetic
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("p", [101, FAST_PRIME, DEFAULT_PRIME, MERSENNE])
@pytest.mark.parametrize("width", [1, 7, 300, 511, 1100])
def test_modular_matmul_is_exact(p, width):
    rng = np.random.default_rng(width)
    a = rng.integers(0, p, size=(6, width))
    b = rng.integers(0, p, size=(5, width))
    # worst cases: all entries at the extremes of the centred range
    a[0] = (p - 1) // 2
    b[0] = (p + 1) // 2
    expected = np.array([[sum(int(x) * int(y) for x, y in zip(r, s)) % p for s in b] for r in a])
    assert np.array_equal(modular_matmul(a, b, p), expected)


def test_product_plan_uses_fewest_products():
    # the fast prime: one product of the inner width per block, up to width 512
    assert ModularProduct.plan(FAST_PRIME, 784 // 2).n_limbs == 1
    assert ModularProduct.plan(FAST_PRIME, 512).n_limbs == 1
    # the default prime: two limbs stacked into one product, up to width 511
    plan = ModularProduct.plan(DEFAULT_PRIME, 784 // 2)
    assert (plan.n_limbs, len(plan.chunks(392))) == (2, 1)
    assert len(ModularProduct.plan(DEFAULT_PRIME, 511).chunks(511)) == 1
    assert len(ModularProduct.plan(MERSENNE, 1100).chunks(1100)) > 1


def test_modular_matmul_rejects_bad_input():
    with pytest.raises(ValueError, match="not a prime"):
        modular_matmul(np.ones((2, 2), int), np.ones((2, 2), int), 100)
    with pytest.raises(ValueError, match=r"\[0, p\)"):
        modular_matmul(np.full((2, 2), 200), np.ones((2, 2), int), 101)
    with pytest.raises(TypeError, match="integers"):
        modular_matmul(np.ones((2, 2)), np.ones((2, 2), int), 101)


# --------------------------------------------------------------------------- #
# Public parameters and a worked example (l = t = 1, p = 101)
# --------------------------------------------------------------------------- #
def test_encoding_matrix_matches_paper_defaults():
    U = encoding_matrix(2, 2, 7, MERSENNE)
    rationals = [
        [35, 5, -1, 1, -5, -35, -105],
        [-35, 15, 9, -5, 21, 135, 385],
        [21, -5, 9, 15, -35, -189, -495],
        [-5, 1, -1, 5, 35, 105, 231],
    ]
    expected = [[rational_mod(Fraction(v, 16), MERSENNE) for v in row] for row in rationals]
    assert np.array_equal(U, expected)


def test_decoding_weights_match_paper_defaults():
    w = server_decoding_weights(list(range(7)), 2, 2, MERSENNE)
    rationals = [(105, 512), (441, 256), (-105, 512), (63, 128), (-153, 512), (25, 256), (-7, 512)]
    assert w.tolist() == [rational_mod(Fraction(*f), MERSENNE) for f in rationals]


@pytest.mark.parametrize("m, l, t", [(7, 2, 2), (10, 2, 2), (9, 3, 1), (5, 1, 2), (20, 4, 3)])
def test_decoding_weights_sum_to_l(m, l, t):
    p = DEFAULT_PRIME
    for parties in (list(range(m)), list(range(m))[-(2 * l + 2 * t - 1) :]):
        assert int(server_decoding_weights(parties, l, t, p).sum()) % p == l


def test_worked_test_vector():
    p, q, l, t = 101, 0, 1, 1
    alphas, betas = evaluation_points(l, t, 3)
    assert (alphas, betas) == ([1, 3], [0, 2, 4])
    U = encoding_matrix(l, t, 3, p)
    assert U.tolist() == [[52, 51, 50], [50, 51, 52]]
    x = quantize(np.array([[2.0, 3.0], [5.0, -1.0]]), q, p, l)
    assert x.tolist() == [[2, 3], [5, 100]]
    noise = np.array([[7, 11], [13, 17]])
    shares = (U[0][:, None, None] * x[None] + U[1][:, None, None] * noise[None]) % p
    assert shares[:, 0].tolist() == [[50, 100], [55, 7], [60, 15]]
    assert shares[:, 1].tolist() == [[1, 91], [9, 8], [17, 26]]
    G = [int(((s[0] - s[1]) ** 2).sum() % p) for s in shares]
    assert G == [58, 97, 51]
    w = server_decoding_weights([0, 1, 2], l, t, p)
    assert w.tolist() == [13, 26, 63]
    assert int((w * np.array(G)).sum() % p) == 25 == (2 - 5) ** 2 + (3 + 1) ** 2
    # the streamed party/server path decodes the same value from the same shares
    D = decode_squared_distances([s.astype(np.uint32) for s in shares], w, q, p)
    assert D[0, 1] == D[1, 0] == 25.0


# --------------------------------------------------------------------------- #
# Exactness
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("n_features, n_segments", [(6, 2), (5, 2), (7, 3), (1, 2)])
@pytest.mark.parametrize("prime, q", [(FAST_PRIME, 4), (DEFAULT_PRIME, 9), (MERSENNE, 10)])
def test_distances_are_bit_exact(n_features, n_segments, prime, q):
    rng = np.random.RandomState(n_features)
    X = rng.randn(41, n_features) * 3.0  # negative values, several blocks
    clients = np.array_split(X, 7)
    D, _ = lcc_squared_distances(
        clients, n_segments=n_segments, n_colluders=1, precision=q, prime=prime, random_state=0
    )
    assert np.array_equal(as_int(D, q), exact_sq_distances(X, q))
    assert np.array_equal(D, D.T)
    assert np.all(np.diag(D) == 0)


def test_mersenne_prime_and_auto_precision_are_exact():
    rng = np.random.RandomState(1)
    X = rng.rand(30, 9)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    D, _ = lcc_squared_distances(np.array_split(X, 7), prime=MERSENNE, random_state=0)
    assert max_safe_precision(1.0, 1.0, 9, MERSENNE) >= 13
    # "auto" chooses q from the spread around the mean, which beats the raw bounds
    q = auto_precision(X, MERSENNE)
    assert q > max_safe_precision(1.0, 1.0, 9, MERSENNE)
    assert np.array_equal(as_int(D, q), exact_sq_distances(X, q))


def test_distances_identical_for_every_partition_seed_and_parameters():
    rng = np.random.RandomState(2)
    X = rng.randn(36, 6)
    reference = exact_sq_distances(X, 6)
    configs = [(7, 2, 2), (10, 2, 2), (9, 3, 1), (5, 1, 2), (3, 1, 1), (20, 4, 3)]
    for seed, (m, l, t) in enumerate(configs):
        # a different split of the rows each time, including empty clients
        cuts = np.sort(np.random.RandomState(seed).choice(37, m - 1))
        clients = np.split(X, cuts)
        D, _ = lcc_squared_distances(
            clients, n_segments=l, n_colluders=t, precision=6, random_state=seed
        )
        assert np.array_equal(as_int(D, 6), reference), (m, l, t)


def test_distances_identical_for_every_surviving_subset():
    X = np.random.RandomState(3).randn(20, 4)
    clients = np.array_split(X, 9)
    reference = exact_sq_distances(X, 7)
    for n_dropped in (0, 1, 2):
        for dropped in itertools.combinations(range(9), n_dropped):
            D, ledger = lcc_squared_distances(
                clients, precision=7, dropped=dropped, random_state=n_dropped
            )
            assert np.array_equal(as_int(D, 7), reference), dropped
            assert distance_uploaders(ledger) == set(range(9)) - set(dropped)


def test_too_many_stragglers_or_parties_below_threshold_raise():
    clients = np.array_split(np.random.RandomState(0).randn(20, 4), 8)
    with pytest.raises(ValueError, match="only 6 parties answered"):
        lcc_squared_distances(clients, dropped=[0, 5])
    with pytest.raises(ValueError, match="unknown parties"):
        lcc_squared_distances(clients, dropped=[8])
    with pytest.raises(ValueError, match="1 = 7 share-holding parties, but there are 6"):
        lcc_squared_distances(clients[:6])
    D, ledger = lcc_squared_distances(clients[:3], n_parties=7, precision=6)
    assert ledger.n_parties == 7
    assert np.array_equal(as_int(D, 6), exact_sq_distances(np.vstack(clients[:3]), 6))


def test_decoding_below_threshold_is_wrong():
    """Six answers cannot decode a degree-6 polynomial (l = t = 2; Theorem 1)."""
    p, q = DEFAULT_PRIME, 6
    X = np.random.RandomState(4).randn(30, 4)
    res = quantize(X, q, p, 2)
    U = encoding_matrix(2, 2, 7, p)
    shares = lcc_encode(res, 0, encoding=U, n_segments=2, p=p)
    parties = [shares[j] for j in range(7)]
    ok = decode_squared_distances(parties, server_decoding_weights(range(7), 2, 2, p), q, p)
    assert np.array_equal(as_int(ok, q), exact_sq_distances(X, q))
    # the public helper refuses to build weights that cannot decode
    with pytest.raises(ValueError, match="too few parties answered: 6 answered .* needs 7"):
        server_decoding_weights(range(6), 2, 2, p)
    # the same interpolation through 6 points gives garbage residues, caught by the lift
    alphas, betas = evaluation_points(2, 2, 6)
    weights = lagrange_matrix(betas, alphas[:2], p).sum(axis=1) % p
    with pytest.raises(ArithmeticError, match="wrapped.*fewer than"):
        decode_squared_distances(parties[:6], weights, q, p)


# --------------------------------------------------------------------------- #
# Privacy
# --------------------------------------------------------------------------- #
def _coalition_cells(secret, coalition, *, p=13, l=2, t=2, m=7, n_rows=12000, seed=0):
    """Flattened joint value of the coalition's shares of one coordinate, per row."""
    residues = np.tile(np.asarray(secret, dtype=np.int64), (n_rows, 1))
    shares = lcc_encode(residues, seed, encoding=encoding_matrix(l, t, m, p), n_segments=l, p=p)
    values = shares[list(coalition), :, 0].astype(np.int64)
    return np.ravel_multi_index(tuple(values), (p,) * len(coalition))


def test_t_colluders_see_uniform_shares_independent_of_the_data():
    p = 13
    for coalition in [(0, 1), (2, 6), (3, 5)]:
        counts = []
        for seed, secret in enumerate(([0, 0], [5, 11], [12, 1])):
            cells = _coalition_cells(secret, coalition, seed=seed)
            c = np.bincount(cells, minlength=p**2)
            assert stats.chisquare(c).pvalue > 1e-3, (coalition, secret)
            counts.append(c)
        # same distribution whatever the secret
        assert stats.chi2_contingency(np.array(counts)).pvalue > 1e-3


def test_the_uniformity_test_detects_a_leak():
    """t + 1 parties see a data-dependent subspace: the same test rejects uniformity."""
    p = 13
    cells = _coalition_cells([5, 11], (0, 1, 2))
    c = np.bincount(cells, minlength=p**3)
    assert stats.chisquare(c).pvalue < 1e-12


@pytest.mark.parametrize("coalition", [(0, 1, 2, 3), (1, 3, 4, 6)])
def test_l_plus_t_parties_decode_the_segments(coalition):
    p, l, t, m = DEFAULT_PRIME, 2, 2, 7
    X = np.random.RandomState(5).randn(5, 6)
    res = quantize(X, 10, p, l)
    shares = lcc_encode(res, 3, encoding=encoding_matrix(l, t, m, p), n_segments=l, p=p)
    alphas, betas = evaluation_points(l, t, m)
    # interpolate each row's polynomial from the coalition and evaluate it at alpha_1..alpha_l
    lam = lagrange_matrix([betas[j] for j in coalition], alphas[:l], p)
    stacked = shares[list(coalition)].astype(object)
    segments = [
        sum(int(lam[k, o]) * stacked[k] for k in range(len(coalition))) % p for o in range(l)
    ]
    assert np.array_equal(np.hstack(segments).astype(np.int64), res)


def test_privacy_structure_matrices_are_invertible():
    """Every t-subset's noise-to-share map is invertible (the privacy of Theorem 2)."""
    for m, l, t in [(7, 2, 2), (10, 2, 2), (12, 3, 2)]:
        p = DEFAULT_PRIME
        U = encoding_matrix(l, t, m, p)
        for C in itertools.combinations(range(m), t):
            block = [[int(U[l + o, j]) for j in C] for o in range(t)]
            assert _det_mod(block, p) != 0


def _det_mod(M, p):
    M = [row[:] for row in M]
    n, det = len(M), 1
    for c in range(n):
        pivot = next((r for r in range(c, n) if M[r][c] % p), None)
        if pivot is None:
            return 0
        if pivot != c:
            M[c], M[pivot] = M[pivot], M[c]
            det = -det
        det = det * M[c][c] % p
        inv = pow(M[c][c], -1, p)
        for r in range(c + 1, n):
            f = M[r][c] * inv % p
            M[r] = [(a - f * b) % p for a, b in zip(M[r], M[c])]
    return det % p


# --------------------------------------------------------------------------- #
# Precision and overflow guard
# --------------------------------------------------------------------------- #
def test_auto_precision_is_the_largest_safe_one():
    X = np.random.RandomState(6).rand(20, 16)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    q = max_safe_precision(X.max(), 1.0, 16, MERSENNE)
    assert precision_is_safe(q, X.max(), 1.0, 16, MERSENNE)
    assert not precision_is_safe(q + 1, X.max(), 1.0, 16, MERSENNE)


def test_precision_that_could_wrap_raises():
    X = np.random.RandomState(7).rand(21, 4)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    with pytest.raises(ValueError, match="could wrap around"):
        lcc_squared_distances(np.array_split(X, 7), precision=16, prime=MERSENNE)
    with pytest.raises(TypeError, match="precision"):
        lcc_squared_distances(np.array_split(X, 7), precision=1.5)


def test_wrap_is_detected_not_silently_returned():
    # the guard is bypassed on purpose: a true distance of 100 >= p/2 must not decode quietly
    p = 101
    res = quantize(np.array([[0.0], [10.0]]), 0, p, 1)
    U = encoding_matrix(1, 1, 3, p)
    shares = lcc_encode(res, 0, encoding=U, n_segments=1, p=p)
    parties = [shares[j] for j in range(3)]
    with pytest.raises(ArithmeticError, match="wrapped"):
        decode_squared_distances(parties, server_decoding_weights(range(3), 1, 1, p), 0, p)


def test_bad_input_raises():
    X = np.random.RandomState(8).rand(21, 4)
    clients = np.array_split(X, 7)
    bad = [c.copy() for c in clients]
    bad[2][0, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        lcc_squared_distances(bad)
    with pytest.raises(ValueError, match="same features"):
        lcc_squared_distances(clients[:6] + [np.ones((3, 5))])
    with pytest.raises(ValueError, match="n_colluders must be >= 1"):
        lcc_squared_distances(clients, n_colluders=0)
    with pytest.raises(ValueError, match="prime"):
        lcc_squared_distances(clients, prime=2**31 + 11)
    with pytest.raises(TypeError, match="list"):
        lcc_squared_distances(X)


# --------------------------------------------------------------------------- #
# Protocol bookkeeping and streaming
# --------------------------------------------------------------------------- #


def test_ledger_counts_shares_and_uploads():
    sizes = [3, 5, 4, 6, 2, 3, 7]
    clients = [np.random.RandomState(i).rand(s, 9) for i, s in enumerate(sizes)]
    n, m, w = sum(sizes), 7, 5  # 9 features padded to 2 segments of 5
    _, ledger = lcc_squared_distances(clients, precision=8)
    report = ledger.report()
    # set-up: the bounds on |x|, the secure sum's seeds, the bounds around the offset;
    # rounds: the secure sum of the offset (upload, unmasking), the shares, the
    # streamed uploads
    assert (report["setup_rounds"], report["rounds"]) == (3, 4)
    d = 9
    offset = offset_sum_bytes(m, d)
    # (m - 1) n_j w shares sent by client j, n(n-1)/2 elements uploaded per party;
    # plus the offset's secure sum and the bounds (one float64 |x|, two float64
    # around the offset)
    shares = [4 * (m - 1) * s * w for s in sizes]
    sent = [a + b for a, b in zip(shares, offset["peer"])]
    assert report["per_client"]["bytes_peer_sent"].tolist() == sent
    expected = 4 * n * (n - 1) // 2 + offset["up"] + 24
    assert report["per_client"]["bytes_up"].tolist() == [expected] * m
    # who dropped, and the mean, go back to every client
    assert report["per_client"]["bytes_down"].tolist() == [offset["down"] + 8 * d] * m


def test_n_jobs_invariance():
    X = np.random.RandomState(9).randn(50, 6)
    clients = np.array_split(X, 7)
    D1, l1 = lcc_squared_distances(clients, random_state=0, n_jobs=1)
    D2, l2 = lcc_squared_distances(clients, random_state=0, n_jobs=2)
    assert np.array_equal(D1, D2)
    assert l1.report()["bytes_total"] == l2.report()["bytes_total"]


def test_streaming_never_holds_the_party_matrices(monkeypatch):
    monkeypatch.setattr(_lcc, "BLOCK_SIZE", 128)
    n = 1200
    X = np.random.RandomState(10).rand(n, 4)
    clients = np.array_split(X, 7)
    # One-off work of a first call in this process (imports, compiled kernels)
    # is not the streaming's memory.
    lcc_squared_distances([c[:20] for c in clients], precision=8)
    tracemalloc.start()
    D, _ = lcc_squared_distances(clients, precision=8)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    one = n * n * 8
    # D itself plus the blocks in flight, whose number depends on how far the
    # producing thread runs ahead on a busy machine (2.56 * one measured there);
    # the seven party matrices would add 7 * one to D.
    assert peak < 4 * one
    assert np.array_equal(as_int(D, 8), exact_sq_distances(X, 8))


def test_centred_residues_roundtrip():
    p = DEFAULT_PRIME
    r = np.array([0, 1, p // 2, p // 2 + 1, p - 1])
    c = centred(r, p)
    assert np.all(np.abs(c) <= p // 2)
    assert np.array_equal(np.mod(c.astype(np.int64), p), r)


def test_chunked_wide_rows_are_exact():
    # width 300 > 256: with 2**31 - 1 every block product is cut into two chunks
    X = np.random.RandomState(11).rand(23, 600)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    D, _ = lcc_squared_distances(np.array_split(X, 7), precision=11, prime=MERSENNE)
    assert np.array_equal(as_int(D, 11), exact_sq_distances(X, 11))


def test_error_against_real_distances_is_bounded_by_quantization():
    """Quantization error: |D - ||dx||^2| <= 2 * 2**-q * ||dx||_1 + d * 4**-q for every pair."""
    X = np.random.RandomState(12).randn(40, 5)
    q = 5
    D, _ = lcc_squared_distances(np.array_split(X, 7), precision=q)
    diff = X[:, None, :] - X[None, :, :]
    true = (diff**2).sum(-1)
    bound = 2 * 2.0**-q * np.abs(diff).sum(-1) + X.shape[1] * 4.0**-q
    assert np.all(np.abs(D - true) <= bound + 1e-12)
    assert np.abs(D - true).max() > 0  # the quantization is real at q = 5


# --------------------------------------------------------------------------- #
# Common offset: data far from the origin, tiny and huge scales
# --------------------------------------------------------------------------- #
def true_sq_distances(X):
    return ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)


@pytest.mark.parametrize("shift", [1e5, -3e9, 1e12])
def test_offset_data_keep_their_distances(shift):
    X = np.random.RandomState(13).randn(35, 4)
    far = X + shift
    D, _ = lcc_squared_distances(np.array_split(far, 7), random_state=0)
    true = true_sq_distances(far)
    assert D.max() > 0
    # the field holds the spread, not the position: q comes from the centred rows
    q = auto_precision(far, DEFAULT_PRIME)
    assert q >= 8
    assert np.array_equal(as_int(D, q), exact_sq_distances(far, q))
    assert np.abs(D - true).max() <= 2 * 2.0**-q * 8 * 4 + 4 * 4.0**-q


@pytest.mark.parametrize("scale", [1e-12, 1e-100, 1e40, 1e145])
def test_tiny_and_huge_scales_are_resolved(scale):
    X = np.random.RandomState(14).randn(28, 3) * scale
    D, _ = lcc_squared_distances(np.array_split(X, 7), random_state=0)
    off_diagonal = ~np.eye(len(X), dtype=bool)
    assert np.all(D[off_diagonal] > 0)
    q = auto_precision(X, DEFAULT_PRIME)
    assert np.array_equal(as_int(D, q), exact_sq_distances(X, q))
    true = true_sq_distances(X)
    assert np.abs(D - true).max() <= 1e-2 * true.max()


@pytest.mark.parametrize("scale", [1e154, 1e300])
def test_distances_beyond_float64_raise_a_clear_error(scale):
    X = np.random.RandomState(15).randn(21, 3) * scale
    with pytest.raises(ValueError, match="too spread out for float64"):
        lcc_squared_distances(np.array_split(X, 7))


def test_largest_floats_raise_a_clear_error():
    X = np.array([[1.7e308, -1.7e308], [-1.7e308, 1.7e308], [0.0, 0.0]] * 7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning on the way
        with pytest.raises(ValueError, match="too spread out for float64"):
            lcc_squared_distances(np.array_split(X, 7))


def test_spread_below_the_resolution_raises():
    X = np.random.RandomState(16).randn(21, 3) * 1e-300
    with pytest.raises(ValueError, match="below what the field can resolve"):
        lcc_squared_distances(np.array_split(X, 7))
    # a user precision whose step hides the data is refused too, not decoded as D = 0
    Y = np.random.RandomState(16).randn(21, 3) * 1e-6
    with pytest.raises(ValueError, match="below what the field can resolve"):
        lcc_squared_distances(np.array_split(Y, 7), precision=8)


def test_identical_rows_far_from_the_origin_decode_as_zero():
    X = np.full((14, 3), 0.1) + 1e7
    D, _ = lcc_squared_distances(np.array_split(X, 7), precision=8)
    assert np.array_equal(D, np.zeros((14, 14)))


def test_precision_bounds_never_overflow():
    assert precision_is_safe(-400, 1e300, 1e300, 3, MERSENNE) is False
    assert precision_is_safe(500, 1e-300, 1e-300, 3, MERSENNE) is True
    assert max_safe_precision(1e-300, 1e-300, 3, MERSENNE) == MAX_PRECISION
    with pytest.raises(ValueError, match="too spread out"):
        max_safe_precision(1e300, 1e300, 3, MERSENNE)
    with pytest.raises(ValueError, match="larger prime"):
        max_safe_precision(1.0, 1.0, 60, 101)


def runtime_of(clients, n_parties=None, random_state=0):
    """An in-process runtime over the given client blocks, rows numbered client by client."""
    bounds = np.cumsum([0] + [len(c) for c in clients])
    rows = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    federation = Federation(np.vstack(clients), rows)
    federation.spawn_seeds(np.random.RandomState(random_state))
    return InProcessRuntime(federation, n_parties=n_parties)


def _offset_runtime(cls=RecordingRuntime, sizes=(4, 6, 5, 7, 3)):
    rng = np.random.RandomState(17)
    clients = [rng.randn(s, 3) + 50.0 for s in sizes]
    bounds = np.cumsum([0] + [len(c) for c in clients])
    rows = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    federation = Federation(np.vstack(clients), rows)
    federation.spawn_seeds(np.random.RandomState(0))
    return clients, cls(federation, private_entropy=[5])


def test_offset_is_the_mean_from_a_secure_sum():
    clients, runtime = _offset_runtime()
    n_clients, d = 5, 3
    offset = _lcc_offset.agree_offset(runtime)
    assert np.allclose(offset.values, np.vstack(clients).mean(axis=0), rtol=0, atol=1e-12)
    assert offset.clients == list(range(n_clients))
    messages = runtime.ledger.messages
    # the bound on |x|: one counted float64 per client, and the server takes the largest
    bounds_up = [m for m in messages if m.tag == "bound on |x|"]
    assert [(m.sender, m.nbytes) for m in bounds_up] == [(c, 8) for c in range(n_clients)]
    sent_bounds = [float(b) for b in runtime.received[0].values()]
    assert max(sent_bounds) >= np.abs(np.vstack(clients)).max()
    # the sums go up masked (d int64 and their 16-byte structure), the masks are
    # removed with the self-mask shares revealed in the unmasking
    uploads = [m for m in messages if m.tag == TAG_SUM_UPLOAD and m.receiver == "server"]
    assert [(m.sender, m.nbytes) for m in uploads] == [(c, 8 * d + 16) for c in range(n_clients)]
    assert {m.sender for m in messages if m.tag == TAG_UNMASK} == set(range(n_clients))
    offset_bytes = offset_sum_bytes(n_clients, d)
    report = runtime.ledger.report()
    # set-up: the bounds, the pairwise seeds; rounds: the masked upload, the unmasking
    assert (report["setup_rounds"], report["rounds"]) == (2, 2)
    assert report["per_client"]["bytes_up"].tolist() == [8 + offset_bytes["up"]] * n_clients
    assert report["per_client"]["bytes_peer_sent"].tolist() == offset_bytes["peer"]
    assert report["per_client"]["bytes_down"].tolist() == [offset_bytes["down"] + 8 * d] * 5


def test_the_server_cannot_see_one_clients_sums_for_the_offset():
    clients, runtime = _offset_runtime()
    offset = _lcc_offset.agree_offset(runtime)
    # What a curious server can do with all it received: rebuild every client's self
    # mask from the shares revealed in the unmasking and take it off its upload.
    ((_, (uploads, reveals), _),) = [i for i in runtime.server_inputs if i[0] == "unmask_sum"]
    shift = _lcc_offset.column_sum_exponent(
        max(float(b) for b in runtime.received[0].values()), 25 * 5
    )
    opened = remove_self_masks(uploads, reveals)
    plain = {
        c: _lcc_offset.fixed_point_column_sums(X_c, shift).view(np.uint64)
        for c, X_c in enumerate(clients)
    }
    for c in uploads:
        # the pairwise masks still hide every client's sums ...
        assert not np.any(opened[c] == plain[c])
    # ... and cancel only in the total, which is the mean the parties subtract
    np.testing.assert_array_equal(sum(opened.values()), sum(plain.values()))
    np.testing.assert_array_equal(
        _lcc_offset.offset_mean(sum(plain.values()).view(np.int64), 25, shift), offset.values
    )


def test_offset_sums_fit_the_secure_sum_when_one_client_holds_most_rows_at_the_bound():
    # Every row at the largest |x|, nearly all on one client: that client's sum is
    # the largest any client can have, and must still fit the secure sum's integers.
    clients = [np.full((40, 2), -63.75), np.full((1, 2), 63.75), np.full((2, 2), -63.75)]
    runtime = runtime_of(clients)
    offset = _lcc_offset.agree_offset(runtime)
    np.testing.assert_array_equal(offset.values, np.vstack(clients).mean(axis=0))


class LosingUpload(RecordingRuntime):
    """Loses client 1's masked upload of the offset's secure sum (a dropout after masking)."""

    def _lost(self, tag, party):
        return tag == TAG_SUM_UPLOAD and party == 1


def test_a_data_client_dropping_from_the_offset_sum_ends_the_protocol_clearly():
    clients, runtime = _offset_runtime(LosingUpload)
    # The secure sum itself recovers: its neighbours reveal their pairwise keys with
    # the dropped client, and the server gets the others' total exactly.
    offset = _lcc_offset.agree_offset(runtime, require_all=False)
    assert offset.clients == [0, 2, 3, 4]
    survivors = np.vstack([clients[c] for c in offset.clients])
    np.testing.assert_allclose(offset.values, survivors.mean(axis=0), rtol=0, atol=1e-12)
    offset_to = [m.receiver for m in runtime.ledger.messages if m.tag == "offset"]
    assert offset_to == [0, 2, 3, 4]
    # But the distances need every data holder's rows: the protocol stops before the
    # mean is sent, naming the client.
    clients, runtime = _offset_runtime(LosingUpload)
    with pytest.raises(_lcc_offset.DataHolderDroppedError, match=r"data clients \[1\] dropped"):
        _lcc_offset.agree_offset(runtime)
    assert not [m for m in runtime.ledger.messages if m.tag == "offset"]


def test_dropped_parties_must_be_integers():
    clients = np.array_split(np.random.RandomState(18).randn(21, 4), 8)
    with pytest.raises(TypeError, match="integer index"):
        lcc_squared_distances(clients, dropped=[1.5])
    with pytest.raises(TypeError, match="integer index"):
        lcc_squared_distances(clients, dropped=[True])
    with pytest.raises(TypeError, match="integer index"):
        server_decoding_weights([0, 1, 2, 3, 4, 5, 6.0], 2, 2, DEFAULT_PRIME)
    D, _ = lcc_squared_distances(clients, dropped=[np.int64(1)], precision=5)
    assert D.shape == (21, 21)


# --------------------------------------------------------------------------- #
# The fused party block: worst cases of the exactness budget
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("p", [FAST_PRIME, DEFAULT_PRIME, MERSENNE])
def test_party_block_is_exact_at_the_extremes_of_the_field(p):
    plan = ModularProduct.plan(p, 512)
    width = min(plan.chunk, 512)  # the widest inner dimension in one product
    h = (p - 1) // 2
    rng = np.random.default_rng(p % 1000)
    Z = rng.integers(0, p, size=(6, width))
    Z[0], Z[1], Z[2] = h, h + 1, p - 1  # largest centred magnitudes, both signs
    Z[3, ::2], Z[3, 1::2] = h, h + 1
    rows = (Z.astype(np.uint32), _lcc.encoded_row_norms(Z, p))
    (G,) = party_tiles(rows, rows, [(0, 6, 0, 6)], p, symmetric=False)
    # centred residues, up to the float reduction's slack of 3
    assert G.dtype == np.int32 and int(np.abs(G).max()) <= (p - 1) // 2 + 3
    exact = [[sum((int(a) - int(b)) ** 2 for a, b in zip(r, s)) % p for s in Z] for r in Z]
    assert np.array_equal(G.reshape(6, 6).astype(np.int64) % p, exact)
    # a diagonal tile of a symmetric matrix sends its strict upper triangle, row by row
    (upper,) = party_tiles(rows, rows, [(0, 6, 0, 6)], p, symmetric=True)
    assert np.array_equal(upper.astype(np.int64) % p, np.asarray(exact)[np.triu_indices(6, 1)])


@pytest.mark.parametrize("p, width", [(FAST_PRIME, 392), (DEFAULT_PRIME, 392), (MERSENNE, 1100)])
@pytest.mark.parametrize("factor", [1, -2, 3**20])
def test_operands_from_residues_match_the_two_step_operands(p, width, factor):
    # the compiled one-pass operands are the same float64 numbers, bit for bit
    from skfedclust.secure._field import centre_into

    plan = ModularProduct.plan(p, width)
    rng = np.random.default_rng(width)
    Z = rng.integers(0, p, size=(37, width))
    Z[0], Z[1], Z[2], Z[3] = 0, (p - 1) // 2, (p + 1) // 2, p - 1
    Z = Z.astype(np.uint32)
    extra = [rng.random(37), 1.0]
    centred_rows = centre_into(Z, p, np.empty(Z.shape))
    pairs = [
        (
            plan.left_operand(centred_rows, factor=factor, extra=extra),
            plan.left_operand_from_residues(Z, factor=factor, extra=extra),
        ),
        (
            plan.right_operand(centred_rows, extra=extra),
            plan.right_operand_from_residues(Z, extra=extra),
        ),
    ]
    for two_step, one_pass in pairs:
        assert len(two_step) == len(one_pass) == len(plan.chunks(width))
        for a, b in zip(two_step, one_pass):
            assert np.array_equal(a.view(np.int64), b.view(np.int64))


@pytest.mark.parametrize("p", [FAST_PRIME, DEFAULT_PRIME, MERSENNE])
@pytest.mark.parametrize("diagonal", [False, True])
def test_decoder_accumulates_many_parties_exactly(p, diagonal):
    from skfedclust.secure._kernels import decode_tile

    # 40 parties: the int64 accumulator is reduced on the way (every 16 parties
    # for the default prime, every 3 for 2**31 - 1); the decoded residues are
    # the exact weighted sums mod p
    n_parties, k = 40, 9
    rng = np.random.default_rng(p % 997)
    h = (p - 1) // 2
    weights = rng.integers(0, p, size=n_parties)
    weights[:4] = h, h + 1, p - 1, 1  # largest centred magnitudes
    size = k * (k - 1) // 2 if diagonal else k * k
    tiles = rng.integers(-h, h + 4, size=(n_parties, size))
    tiles[:6] = h + 3  # the largest residue a party sends
    tiles[6:12] = -h - 3
    decoder = _lcc.StreamingDecoder(weights, p, 0)
    assert decoder.flush_every == (2**62 - p) // (h * (h + 3))
    assert p == FAST_PRIME or decoder.flush_every < n_parties
    exact = [sum(int(w) * int(t[e]) for w, t in zip(weights, tiles)) % p for e in range(size)]
    # the kernel itself: most of these random sums are above (p - 1) / 2, which
    # the decoder refuses as wrapped
    out = np.empty((k, k))
    messages = tuple(t.astype(np.int32) for t in tiles)
    args = (decoder.weights, decoder.flush_every, p, 1.0, out, 0, 0, k, k, diagonal, False)
    assert decode_tile(messages, *args)
    with pytest.raises(ArithmeticError, match="wrapped"):
        decoder.decode_block([(m,) for m in messages], 0, (0, k, 0, k), diagonal, out)
    got = out[np.triu_indices(k, 1)] if diagonal else out.ravel()
    assert np.array_equal(got.astype(np.int64), exact)
    if diagonal:
        assert np.array_equal(out, out.T) and not np.diagonal(out).any()


@pytest.mark.parametrize("p", [FAST_PRIME, DEFAULT_PRIME, MERSENNE])
def test_shares_and_row_norms_are_the_exact_residues(p):
    # the compiled encoding and norms against Python integers, at the field's extremes
    l, t, m, w = 2, 2, 7, 5
    rng = np.random.default_rng(p % 991)
    residues = rng.integers(0, p, size=(6, l * w))
    residues[0], residues[1] = p - 1, (p - 1) // 2 + 1
    U = encoding_matrix(l, t, m, p)
    shares = lcc_encode(residues, 4, encoding=U, n_segments=l, p=p)
    noise = np.random.default_rng(4).integers(0, p, size=(t, 6, w), dtype=np.int64)
    segments = [residues[:, o * w : (o + 1) * w] for o in range(l)] + list(noise)
    for j in range(m):
        exact = sum(int(U[o, j]) * seg.astype(object) for o, seg in enumerate(segments)) % p
        assert shares.dtype == np.uint32 and np.array_equal(shares[j].astype(object), exact)
    norms = _lcc.encoded_row_norms(shares[0], p)
    exact = [sum(int(v) ** 2 for v in row) % p for row in shares[0]]
    assert np.array_equal(norms, centred(np.asarray(exact, dtype=np.int64), p))
    assert np.array_equal(norms, _lcc.encoded_row_norms(shares[0].astype(np.int64), p))


def test_decoding_takes_read_only_and_writable_messages_alike():
    # messages deserialized from bytes are read-only, in-process ones are not
    p, k = DEFAULT_PRIME, 6
    rng = np.random.default_rng(0)
    weights = server_decoding_weights(range(7), 2, 2, p)
    # the same tile from every party decodes to l = 2 times it: the decoding
    # weights of l = 2 data points sum to 2
    tiles = [rng.integers(0, 100, size=k * k).astype(np.int32)] * 7
    decoder = _lcc.StreamingDecoder(weights, p, 0)
    tile = (0, k, 0, k)
    expected = decoder.decode_block([(t,) for t in tiles], 0, tile, False, np.empty((k, k)))
    mixed = [
        (np.frombuffer(t.tobytes(), dtype=np.int32),) if j % 2 else (t,)
        for j, t in enumerate(tiles)
    ]
    assert not mixed[1][0].flags.writeable
    got = decoder.decode_block(mixed, 0, tile, False, np.empty((k, k)))
    assert np.array_equal(got, expected)
    assert np.array_equal(got.ravel(), 2 * tiles[0])


def test_tiles_count_their_wire_size():
    # BLOCK_SIZE is 16 here: 40 rows make 3 tile rows
    n, n_query = 40, 7
    for symmetric, n_cols, total in ((True, n, n * (n - 1) // 2), (False, n, n_query * n)):
        n_rows = n if symmetric else n_query
        exchanges = tile_exchanges(n_rows, n_cols, 7, symmetric=symmetric)
        tiles = [t for e in exchanges for t in e]
        # the upper triangle of a symmetric matrix, every entry of a query matrix
        assert sum(tile_elements(t, symmetric) for t in tiles) == total
    assert len(tiles) == 1 * 3


def test_streamed_upload_is_one_round_of_several_exchanges(monkeypatch):
    monkeypatch.setattr(_lcc, "MIN_EXCHANGE_BYTES", 4 * 7 * 600)
    X = np.random.RandomState(21).randn(70, 3)
    clients = np.array_split(X, 7)
    exchanges = tile_exchanges(70, 70, 7, symmetric=True)
    assert len(exchanges) > 2
    D, ledger = lcc_squared_distances(clients, precision=7, random_state=0)
    assert np.array_equal(as_int(D, 7), exact_sq_distances(X, 7))
    report = ledger.report()
    assert (report["setup_rounds"], report["rounds"]) == (3, 4)
    uploads = [m for m in ledger.messages if m.tag == "encoded distances"]
    # one message per party per exchange, all in the last round, 4 bytes per pair
    assert len(uploads) == 7 * len(exchanges)
    assert {m.round for m in uploads} == {3}
    assert {m.phase for m in uploads} == set(
        range(min(m.phase for m in uploads), max(m.phase for m in uploads) + 1)
    )
    for j in range(7):
        assert sum(m.nbytes for m in uploads if m.sender == j) == 4 * 70 * 69 // 2
    # no exchange brings more than the budget to the server
    for phase in {m.phase for m in uploads}:
        assert sum(m.nbytes for m in uploads if m.phase == phase) <= 4 * 7 * 600


def test_memory_guard_refuses_before_any_round(monkeypatch):
    monkeypatch.setenv(AVAILABLE_MEMORY_ENV, str(16 * 2**30))
    clients = np.array_split(np.zeros((200_000, 2)), 7)
    with pytest.raises(MemoryError, match="n=200000 rows need about"):
        lcc_squared_distances(clients, precision=0)


def test_stragglers_send_nothing_and_the_rest_decode():
    X = np.random.RandomState(19).randn(30, 4)
    clients = np.array_split(X, 4)
    D, ledger = lcc_squared_distances(
        clients, n_parties=9, dropped=[2, 7], precision=6, random_state=0
    )
    assert np.array_equal(as_int(D, 6), exact_sq_distances(X, 6))
    per = ledger.report()["per_client"]
    n_pairs = 30 * 29 // 2
    # the data client that dropped from the distance round still took part in the
    # offset's secure sum and sent its bounds and shares
    assert per["bytes_up"][2] == offset_sum_bytes(4, 4)["up"] + 8 + 16
    assert per["bytes_peer_sent"][2] > 0
    assert per["bytes_up"][7] == 0
    assert per["bytes_up"][8] == 4 * n_pairs
    assert distance_uploaders(ledger) == set(range(9)) - {2, 7}
