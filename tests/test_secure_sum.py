"""Secure aggregation: the server gets the sum, not a client's vector; dropouts; fixed point."""

import numpy as np
import pytest

from skfedclust.federation import Federation, InProcessRuntime, Reply, bound_only, summand
from skfedclust.secure import (
    MERSENNE_127,
    SecureAggregator,
    SecureSumError,
    default_degree,
    fixed_point_shift,
    harary_neighbours,
    shamir_combine,
    shamir_split,
)
from skfedclust.secure._secure_sum import (
    TAG_SURVIVORS,
    TAG_UNMASK,
    TAG_UPLOAD,
    _encode,
    _structure,
    shamir_split_many,
    unmask_sum,
)
from skfedclust.utils.protocol_checks import RecordingRuntime, remove_self_masks


@summand
def column_sums_and_count(data, inbox, state, party):
    return Reply(send=(data.sum(axis=0), np.array([data.shape[0]], dtype=np.int64)))


@summand
def counts_only(data, inbox, state, party):
    return Reply(send=np.array([data.shape[0], 1], dtype=np.int64))


def _runtime(n_clients=6, n=120, d=3, offset=0.0, entropy=(1,), cls=InProcessRuntime, **kw):
    X = np.random.RandomState(0).normal(size=(n, d)) + offset
    rows = np.array_split(np.random.RandomState(1).permutation(n), n_clients)
    fed = Federation(X, rows)
    fed.spawn_seeds(np.random.RandomState(2))
    return X, rows, cls(fed, private_entropy=list(entropy), **kw)


class Losing(InProcessRuntime):
    """Loses the replies of some parties in some exchanges (a network that drops them)."""

    lose: dict = {}

    def _lost(self, tag, party):
        return party in self.lose.get(tag, ())


# --------------------------------------------------------------------------- #
# Building blocks
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "n_secrets, n_shares, threshold",
    [(1, 4, 1), (1, 5, 3), (21, 20, 11), (29, 28, 15), (3, 62, 32)],
)
def test_shares_evaluated_on_packed_integers_are_the_field_products(n_secrets, n_shares, threshold):
    # The packed evaluation (Kronecker substitution) gives the shares of the
    # polynomials evaluated in the field, for the same coefficients, including
    # secrets at the top of the field; beyond its slot it takes the products.
    from skfedclust.secure._secure_sum import (
        _shamir_share_words,
        _shamir_share_words_exact,
    )

    class Dealer:
        def __init__(self, seed):
            self.secret_bytes = np.random.default_rng(seed).bytes

    rng = np.random.default_rng(n_secrets)
    secrets = [int.from_bytes(rng.bytes(16), "little") % MERSENNE_127 for _ in range(n_secrets)]
    secrets[0] = MERSENNE_127 - 1
    packed = _shamir_share_words(secrets, n_shares, threshold, Dealer(3))
    raw = Dealer(3).secret_bytes(16 * n_secrets * (threshold - 1))
    exact = _shamir_share_words_exact(secrets, raw, n_shares, threshold)
    np.testing.assert_array_equal(packed, exact)
    shares = shamir_split_many(secrets, n_shares, threshold, Dealer(3))
    for k, secret in enumerate(secrets):
        points = {x: int(shares[k, x - 1]) for x in range(n_shares, n_shares - threshold, -1)}
        assert shamir_combine(points) == secret


def test_shamir_rebuilds_from_any_threshold_shares_only():
    rng = np.random.default_rng(0)
    secret = int(rng.integers(0, 2**62)) << 50
    shares = shamir_split(secret, 7, 4, rng)
    for subset in ([1, 2, 3, 4], [7, 5, 3, 1], [2, 4, 6, 7]):
        assert shamir_combine({x: shares[x - 1] for x in subset}) == secret
    assert shamir_combine({x: shares[x - 1] for x in (1, 2, 3)}) != secret
    assert all(0 <= s < MERSENNE_127 for s in shares)
    with pytest.raises(ValueError, match="threshold=8"):
        shamir_split(secret, 7, 8, rng)


class _Dealer:
    """A party's cryptographic generator, as shamir_split_many draws from it."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def secret_bytes(self, n):
        return self.rng.bytes(n)


def test_shamir_split_many_shares_each_secret_with_its_own_polynomial():
    secrets = [0, 5, MERSENNE_127 - 1, 2**126 + 3]
    shares = shamir_split_many(secrets, 7, 4, _Dealer(0))
    assert shares.shape == (4, 7)
    for row, secret in zip(shares, secrets):
        for subset in ([1, 2, 3, 4], [7, 5, 3, 1]):
            assert shamir_combine({x: int(row[x - 1]) for x in subset}) == secret
        assert shamir_combine({x: int(row[x - 1]) for x in (1, 2, 3)}) != secret
    # Fresh coefficients per secret: equal secrets get unrelated shares.
    twins = shamir_split_many([7, 7], 5, 3, _Dealer(1))
    assert not np.array_equal(twins[0], twins[1])


@pytest.mark.parametrize("n", [2, 5, 10, 100, 1000])
def test_the_graph_is_symmetric_regular_and_logarithmic(n):
    k = default_degree(n)
    neighbours = harary_neighbours(n, k, seed=3)
    for i, nb in enumerate(neighbours):
        assert i not in nb
        assert all(i in neighbours[j] for j in nb)
        assert len(nb) == min(k - k % 2, n - 1) or len(nb) == n - 1
    assert k <= max(4, 2 * int(np.ceil(np.log2(n))))


def test_fixed_point_shift_keeps_the_sum_in_int64():
    for bound, n in [(1.0, 10), (1.7e9 * 200, 7), (1e-12, 3), (1e300, 2)]:
        s = fixed_point_shift(bound, n)
        assert n * bound * 2.0**s < 2.0**62
        assert n * bound * 2.0 ** (s + 2) >= 2.0**62


# --------------------------------------------------------------------------- #
# The sum, and nothing else
# --------------------------------------------------------------------------- #
def test_secure_sum_is_the_sum_at_a_large_offset_and_counts_its_messages():
    X, rows, runtime = _runtime(offset=1.7e9)
    aggregator = SecureAggregator(runtime, seed=0)
    bound = np.abs(X).max() * max(len(r) for r in rows)
    (sums, count), survivors = aggregator.sum(
        column_sums_and_count, tag="moments", bounds=[bound, None]
    )
    exact = np.array([np.sum(X[r], axis=0) for r in rows]).sum(axis=0)
    # Fixed point at 2**-s with n * bound * 2**s < 2**62: error below n * 2**-(s+1).
    s = fixed_point_shift(bound, len(rows))
    np.testing.assert_allclose(sums, exact, rtol=0, atol=len(rows) * 2.0 ** -(s + 1) + 1e-3)
    assert count.tolist() == [len(X)] and survivors == list(range(6))
    report = runtime.ledger.report()
    assert report["setup_rounds"] == 1 and report["rounds"] == 2
    # Set-up: one 16-byte seed per edge of the graph, as peer bytes.
    edges = sum(len(nb) for nb in aggregator.neighbours) // 2
    setup = [m for m in runtime.ledger.messages if m.tag == "secure sum: pairwise seeds"]
    assert sum(m.nbytes for m in setup) == 16 * edges


@summand
def scaled_counts(data, inbox, state, party, *, factor):
    return Reply(send=np.array([data.shape[0], 1], dtype=np.int64) * factor)


def test_a_second_sum_reuses_the_set_up():
    _, _, runtime = _runtime()
    aggregator = SecureAggregator(runtime, seed=0)
    first, _ = aggregator.sum(scaled_counts, tag="a", factor=1)
    second, _ = aggregator.sum(scaled_counts, tag="b", factor=2)
    np.testing.assert_array_equal(2 * first, second)
    np.testing.assert_array_equal(first, [120, 6])
    assert runtime.ledger.report()["setup_rounds"] == 1
    assert runtime.ledger.report()["rounds"] == 4


def _server_view(entropy=(1,)):
    """An honest sum of the row counts; what its server step received."""
    _, rows, runtime = _runtime(entropy=entropy, cls=RecordingRuntime)
    total, _ = SecureAggregator(runtime, seed=0).sum(counts_only, tag="counts")
    ((_, (uploads, reveals), _),) = [i for i in runtime.server_inputs if i[0] == "unmask_sum"]
    return rows, total, uploads, reveals


def test_the_server_never_gets_what_opens_one_clients_upload():
    rows, total, uploads, reveals = _server_view()
    np.testing.assert_array_equal(total, [120, 6])
    plain = {
        c: _encode(*_structure(np.array([len(r), 1])), [0, 0], 6, "t") for c, r in enumerate(rows)
    }
    # Nobody dropped: no pairwise key is revealed, only self-mask shares.
    assert all(np.asarray(pair_keys).shape[0] == 0 for _, pair_keys, _ in reveals.values())
    assert all(np.asarray(key_shares).shape[0] == 0 for *_, key_shares in reveals.values())
    # The server can rebuild every self mask, and opening one upload with it
    # still leaves that client's pairwise masks on its vector...
    opened = remove_self_masks(uploads, reveals)
    for c in uploads:
        assert not np.array_equal(opened[c], plain[c])
    # ... which cancel only in the sum of all of them.
    np.testing.assert_array_equal(sum(opened.values()), sum(plain.values()))


def test_uploads_are_masked_by_the_parties_private_draws():
    _, first, uploads_a, _ = _server_view(entropy=(1,))
    _, second, uploads_b, _ = _server_view(entropy=(2,))
    np.testing.assert_array_equal(first, second)
    for c in uploads_a:
        assert not np.array_equal(uploads_a[c][0], uploads_b[c][0])
    _, _, again, _ = _server_view(entropy=(1,))
    for c in uploads_a:
        np.testing.assert_array_equal(uploads_a[c][0], again[c][0])


def test_a_server_that_calls_a_client_dropped_after_its_upload_is_refused():
    # The attack: keep client 0's masked upload, announce it as dropped to get
    # its pairwise keys. Its neighbours received its self-mask shares in the
    # same exchange, so they know it uploaded and refuse.
    _, _, runtime = _runtime()

    def lying_broadcast(payload, *, tag, clients=None):
        if tag == TAG_SURVIVORS:
            # The server announces who dropped; the nodes take the others as survivors.
            payload = {"dropped": [0]}
        return InProcessRuntime.broadcast(runtime, payload, tag=tag, clients=clients)

    runtime.broadcast = lying_broadcast
    # Client 0 refuses its own false announcement; its neighbours refuse to
    # reveal pair keys for a dropout announced without the attestation round.
    with pytest.raises(PermissionError, match="refused by rule"):
        SecureAggregator(runtime, seed=0).sum(counts_only, tag="attack")


# --------------------------------------------------------------------------- #
# Dropouts and bounds
# --------------------------------------------------------------------------- #
def test_a_client_dropping_after_masking_is_left_out_of_the_sum():
    X, rows, runtime = _runtime(cls=Losing)
    Losing.lose = {TAG_UPLOAD: {2}}
    try:
        aggregator = SecureAggregator(runtime, seed=0)
        total, survivors = aggregator.sum(counts_only, tag="counts")
    finally:
        Losing.lose = {}
    assert survivors == [0, 1, 3, 4, 5]
    np.testing.assert_array_equal(total, [120 - len(rows[2]), 5])
    # The neighbours revealed their per-sum pairwise keys with client 2.
    unmask = [m for m in runtime.ledger.messages if m.tag == TAG_UNMASK]
    assert {m.sender for m in unmask} == {0, 1, 3, 4, 5}


def _losing_sum(lose, n_clients=6, **kw):
    _, rows, runtime = _runtime(n_clients=n_clients, cls=Losing)
    Losing.lose = lose
    try:
        return rows, runtime, SecureAggregator(runtime, seed=0, **kw).sum(counts_only, tag="c")
    finally:
        Losing.lose = {}


def test_the_announcement_names_who_dropped_only():
    # Every survivor learns who dropped, not the list of everyone who uploaded:
    # one int64 per dropped client, whatever the number of clients.
    rows, runtime, (total, survivors) = _losing_sum({TAG_UPLOAD: {2}})
    assert survivors == [0, 1, 3, 4, 5]
    announced = [m for m in runtime.ledger.messages if m.tag == TAG_SURVIVORS]
    assert sorted(m.receiver for m in announced) == survivors
    assert all(m.nbytes == 8 for m in announced)


def test_a_survivor_missing_the_unmasking_after_a_dropout_is_rebuilt_from_shares():
    # Client 2 drops before uploading; client 3 uploads, then misses the
    # unmasking. Its pair key with client 2 is rebuilt from the shares its
    # neighbours hold (SecAgg+): the sum completes, with client 3's vector in it.
    rows, runtime, (total, survivors) = _losing_sum({TAG_UPLOAD: {2}, TAG_UNMASK: {3}})
    assert survivors == [0, 1, 3, 4, 5]
    np.testing.assert_array_equal(total, [120 - len(rows[2]), 5])
    unmask = [m for m in runtime.ledger.messages if m.tag == TAG_UNMASK]
    assert {m.sender for m in unmask} == {0, 1, 4, 5}


def test_shares_reveal_only_pair_keys_with_dropped_clients():
    # What the server gets when client 3 misses the unmasking: the survivors'
    # self masks and every pair key with the dropped client 2, nothing more.
    # Opening every upload with all of it still leaves the survivors' pairwise
    # masks between them, which cancel only in their total.
    _, rows, runtime = _runtime(n_clients=6, cls=type("R", (RecordingRuntime, Losing), {}))
    Losing.lose = {TAG_UPLOAD: {2}, TAG_UNMASK: {3}}
    try:
        total, survivors = SecureAggregator(runtime, seed=0).sum(counts_only, tag="c")
    finally:
        Losing.lose = {}
    ((_, (uploads, reveals), _),) = [i for i in runtime.server_inputs if i[0] == "unmask_sum"]
    assert all(
        set(np.asarray(key_shares)[:, 1].tolist()) <= {2} for *_, key_shares in reveals.values()
    )
    plain = {
        c: _encode(*_structure(np.array([len(rows[c]), 1])), [0, 0], 5, "t") for c in survivors
    }
    opened = remove_self_masks(uploads, reveals)
    for c in survivors:
        assert not np.array_equal(opened[c], plain[c])
    # The missing pair key needs threshold shares: with one fewer the server
    # step stops with a clear error rather than add a wrong key.
    public = dict(runtime.server_inputs[-1][2])
    threshold = public["threshold"]
    holders = [j for j, (*_, ks) in reveals.items() if np.asarray(ks).shape[0]]
    assert len(holders) >= threshold
    fewer = dict(reveals)
    for j in holders[threshold - 1 :]:
        b_shares, pair_keys, _ = fewer[j]
        fewer[j] = (b_shares, pair_keys, np.zeros((0, 5), dtype=np.uint64))
    with pytest.raises(SecureSumError, match=r"client 3 uploaded .* \(threshold\)"):
        unmask_sum(uploads, fewer, **public)


def test_too_many_dropouts_in_unmasking_is_a_clear_error():
    _, _, runtime = _runtime(n_clients=8, cls=Losing)
    aggregator = SecureAggregator(runtime, seed=0, threshold=5)
    Losing.lose = {TAG_UNMASK: {1, 2, 3, 4}}
    try:
        with pytest.raises(SecureSumError, match=r"neighbours revealed .* needed \(threshold\)"):
            aggregator.sum(counts_only, tag="counts")
    finally:
        Losing.lose = {}


def test_entries_beyond_the_public_bound_are_refused_not_wrapped():
    X, _, runtime = _runtime(offset=1.7e9)
    with pytest.raises(ValueError, match="exceeds its public bound.*refusing to upload"):
        SecureAggregator(runtime, seed=0).sum(
            column_sums_and_count, tag="moments", bounds=[1.0, None]
        )


def test_float_payloads_need_bounds_and_parameters_are_checked():
    _, _, runtime = _runtime()
    with pytest.raises(ValueError, match="adds floats: give public bounds"):
        SecureAggregator(runtime, seed=0).sum(column_sums_and_count, tag="moments")
    with pytest.raises(ValueError, match="threshold=9"):
        SecureAggregator(runtime, seed=0, threshold=9)
    with pytest.raises(ValueError, match="degree=6"):
        SecureAggregator(runtime, seed=0, degree=6)


def test_peer_bytes_per_client_grow_with_the_degree_not_the_clients():
    # Per sum, a client sends each of its k neighbours a self-mask share and a
    # share of each of its k pair keys: O(k^2) words, k = O(log n).
    per_client = {}
    for n in (10, 100):
        _, _, runtime = _runtime(n_clients=n, n=4 * n, d=2)
        SecureAggregator(runtime, seed=0).sum(counts_only, tag="counts")
        peer = runtime.ledger.report()["bytes_peer"]
        per_client[n] = peer / n
    degree_ratio = default_degree(100) / default_degree(10)
    assert per_client[100] / per_client[10] <= degree_ratio**2 * 1.01
    assert per_client[100] / per_client[10] < 100 / 10


@bound_only
def deviations(data, inbox, state, party, *, center):
    return Reply(send=data - np.asarray(center))


def test_agree_bound_is_a_power_of_two_above_every_clients_largest_entry():
    from skfedclust.secure import agree_bound

    X, rows, runtime = _runtime(offset=1.7e9)
    aggregator = SecureAggregator(runtime, seed=0)
    center = X.mean(axis=0)
    bound = agree_bound(aggregator, deviations, tag="spread", center=center)
    largest = np.abs(X - center).max()
    assert largest <= bound < 2 * largest
    assert np.log2(bound) == int(np.log2(bound))
    # What the server learned is a histogram of exponents (one count per client).
    assert runtime.ledger.report()["rounds"] == 2


@pytest.mark.parametrize("clients", [None, [3], [3, 4]])
def test_a_sum_over_fewer_than_three_clients_is_refused_before_anything_is_sent(clients):
    # A sum of one client is its vector; of two, each learns the other's.
    X, rows, runtime = _runtime(n_clients=1 if clients is None else 6)
    with pytest.raises((SecureSumError, ValueError), match="(fewer than|at least) 3"):
        SecureAggregator(runtime, seed=0).sum(counts_only, tag="counts", clients=clients)
    assert not [m for m in runtime.ledger.messages if m.tag == TAG_UPLOAD]


@bound_only
def deviations_kept(data, inbox, state, party):
    center = inbox["center"]
    return Reply(send=data - center, keep={"center": center}, output={"seen": len(data)})


@summand
def summed_deviations_from_kept(data, inbox, state, party):
    return Reply(send=(data - state["center"]).sum(axis=0))


def test_set_up_before_a_message_and_a_bound_keeps_what_its_step_keeps():
    # Every client step takes the messages delivered since its party's last
    # step: set-up first, then the message; the bound's step keeps the
    # center for the sum's step, and its output reaches the party's user.
    from skfedclust.secure import agree_bound

    X, rows, runtime = _runtime()
    aggregator = SecureAggregator(runtime, seed=0)
    aggregator.setup()
    aggregator.setup()
    assert runtime.ledger.report()["setup_rounds"] == 1
    center = X.mean(axis=0)
    runtime.broadcast(center, tag="center")
    bound = agree_bound(aggregator, deviations_kept, tag="bound")
    total, _ = aggregator.sum(
        summed_deviations_from_kept, tag="sum", bounds=bound * max(len(r) for r in rows)
    )
    np.testing.assert_allclose(total, (X - center).sum(axis=0), atol=1e-9)
    assert bound >= np.abs(X - center).max()
    assert [o["seen"] for o in runtime.party_outputs()] == [len(r) for r in rows]


def test_the_survivors_announcement_costs_linear_work(monkeypatch):
    # The server announces who dropped to every survivor (the nodes know the
    # participants): without dropouts an empty array, counted at once; O(dropped)
    # bytes per node, not O(n).
    import skfedclust.federation._ledger as ledger

    calls = []
    counted = ledger.payload_nbytes

    def counting(payload):
        calls.append(1)
        return counted(payload)

    monkeypatch.setattr(ledger, "payload_nbytes", counting)
    n = 200
    _, _, runtime = _runtime(n_clients=n, n=2 * n, d=2)
    aggregator = SecureAggregator(runtime, seed=0)
    aggregator.sum(scaled_counts, tag="set-up", factor=2)
    calls.clear()
    total, _ = aggregator.sum(scaled_counts, tag="counts", factor=1)
    np.testing.assert_array_equal(total, [2 * n, n])
    assert len(calls) < 40 * n
    announced = [m for m in runtime.ledger.messages if m.tag == TAG_SURVIVORS]
    assert len(announced) == 2 * n and all(m.nbytes == 0 for m in announced)


def test_a_participant_with_too_few_participating_neighbours_is_refused_by_the_server_first():
    _, _, runtime = _runtime(n_clients=12)
    aggregator = SecureAggregator(runtime, seed=0, degree=2)
    # Three clients of which one has no neighbour among the others.
    a = 0
    others = [c for c in range(12) if c != a and c not in aggregator.neighbours[a]][:2]
    with pytest.raises(SecureSumError, match="participating neighbours"):
        aggregator.sum(counts_only, tag="counts", clients=[a, *others])
    assert not [m for m in runtime.ledger.messages if m.tag == TAG_UPLOAD]


def test_a_bound_so_loose_that_every_value_rounds_to_zero_is_refused():
    # Values 1, 2, 3 under a public bound of 1e300: the fixed-point step is 2**937,
    # every client encodes 0, and the sum would be 0; the server refuses it.
    import warnings

    from skfedclust.federation import Federation, InProcessRuntime
    from skfedclust.secure._moments import moments_raw

    X = np.array([[1.0], [2.0], [3.0]])
    federation = Federation(X, [np.array([0]), np.array([1]), np.array([2])])
    federation.spawn_seeds(np.random.RandomState(0))
    aggregator = SecureAggregator(InProcessRuntime(federation), seed=0)
    with pytest.raises(ValueError, match="added up to exactly 0 in fixed point"):
        aggregator.sum(moments_raw, tag="loose", bounds=[1e300, None])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (sums, _), _ = aggregator.sum(moments_raw, tag="tight", bounds=[4.0, None])
    assert sums[0] == 6.0


def test_per_feature_shifts_encode_each_column_at_its_own_scale():
    # A per-entry shift covers the last axis and repeats over the rows: the
    # fixed-point value of entry (i, j) is rint(x[i, j] * 2**shift[j]).
    values = np.array([[1.25, -3.5], [0.5, 2.0], [-7.0, 0.125]])
    arrays, spec = _structure(values)
    encoded = _encode(arrays, spec, [[1, 4]], n_clients=3, who="client 0")
    expected = np.rint(values * np.array([2.0**1, 2.0**4])).astype(np.int64).ravel()
    np.testing.assert_array_equal(encoded.view(np.int64), expected)
