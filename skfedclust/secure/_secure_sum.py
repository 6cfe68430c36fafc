"""Secure aggregation: the server learns the sum of the clients' vectors and nothing else.

A protocol step that needs only a sum (per-cluster sums and counts, moments,
a mean) asks a :class:`SecureAggregator` for it. Each client's vector is
encoded in fixed point, masked and uploaded; the masks cancel in the total,
so every upload on its own is uniformly random to the server. The scheme is
that of Bonawitz et al. (CCS 2017) on the sparse communication graph of
SecAgg+ (Bell et al., CCS 2020), so the cost per client grows with the log of
the number of clients:

1. **Set-up, once per fit** (counted in ``setup_rounds``): the clients are
   placed on a random ``k``-regular graph (a Harary graph over a public random
   order); every client sends each neighbour after it a fresh 128-bit seed
   as a peer message. On Flower peer messages are sealed under pairwise keys
   signed by the nodes' identity keys, so this is key agreement over the
   authenticated identities; in-process the runtime delivers them.
2. **Upload** (one round): every participating client encodes its vector,
   adds one pairwise mask per participating neighbour (``+`` towards later
   neighbours, ``-`` towards earlier ones, keyed by the seed and the sum's
   index) and a fresh self mask, and uploads the result. It secret-shares the
   self mask's 120-bit seed and each of its per-sum pair keys (126 bits) among
   its neighbours (Shamir, threshold ``t``) in the same exchange.
3. **Unmasking** (one round; with dropouts, after a round in which the
   survivors attest the announcement to each other): the server announces
   who uploaded. Each surviving client reveals, for every neighbour that
   uploaded, its share of that neighbour's self-mask seed and its shares of
   that neighbour's pair keys with the clients announced as dropped, and for
   every neighbour that dropped, the per-sum key of their pairwise mask. The
   server rebuilds each survivor's self mask from ``t`` shares, removes the
   dropped clients' pairwise masks (from the keys, or, for a survivor that
   missed the unmasking, from ``t`` shares of them, as SecAgg+ does), and
   obtains the sum over the clients that uploaded.

A client that drops after masking (its upload lost, or sent but declared
lost) is left out of the sum; its masks are removed with what its neighbours
reveal. A client that uploads and then misses the unmasking stays in the sum
as long as ``t`` of its neighbours reveal. A server that claims a client
dropped while holding its upload learns nothing: it then gets the pairwise
keys but not the self mask, whose shares are revealed only for clients
announced as survivors. What the server
learns is the sum, the set of clients that uploaded, and the encoding's
public parameters (the shapes of the vectors and their fixed-point scales).

Trust model: an honest-but-curious server, or an active server that may lie
about who dropped, colluding with fewer than ``t`` clients of any neighbourhood.
Masks come from cryptographic generators (SHAKE-128 for short vectors,
ChaCha20 for long ones) keyed by secrets drawn
from each party's private generator; a server that knows every public seed
cannot replay them.

Fixed point: a float component with public bound ``B`` on every client's
entries is encoded as ``rint(x * 2**s)`` with ``s`` the largest exponent for
which ``n_clients * B * 2**s < 2**62``; the sum is then exact in
``Z_{2**64}`` and decodes to within ``n_clients * 2**-(s+1)`` of the true sum.
A client whose entries exceed the bound refuses to upload (a clear error, no
silent wrap-around). Integer components are summed exactly.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import numbers
import pickle

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from ..federation import Reply
from ..federation._runtime import Inbox, reads
from ..node._contract import client_step_name, resolve_client_step
from ..node._declarations import data_independent, masked_sum
from ..node._dp import MIN_SURVIVORS, inside_secure_sum
from ..node._policy import DEFAULT_MIN_SUM_PARTICIPANTS, PAID_SUMMAND, charged_to_node
from ..node._sum_guard import (
    RECORD,
    ClientSet,
    OpenSum,
    SumRefusal,
    check_announcement,
    check_repeat_survivors,
    check_statistic,
    check_upload,
    decoded_values,
    harary_neighbours_of,
    joined,
    ldexp_exponents,
    open_sum_of,
    public_digest,
    record_of,
    server_messages,
    threshold_floor,
    value_keys,
)
from ._sampling import SAMPLED_PARTICIPANTS

__all__ = [
    "MERSENNE_127",
    "SecureAggregator",
    "SecureSumError",
    "decode_sum",
    "default_degree",
    "fixed_point_shift",
    "harary_neighbours",
    "keystream",
    "shamir_combine",
    "shamir_split",
]

#: The prime of the Shamir shares of the self-mask seeds.
MERSENNE_127 = 2**127 - 1
#: Bits of a self-mask seed (below the prime).
_SEED_BITS = 120

TAG_SEEDS = "secure sum: pairwise seeds"
TAG_UPLOAD = "secure sum: masked vectors"
TAG_SURVIVORS = "secure sum: who uploaded"
TAG_UNMASK = "secure sum: unmasking"
TAG_ATTEST = "secure sum: announcement seen"
#: The sum's own messages: not inputs of the summed step.
_OWN_TAGS = frozenset({TAG_SEEDS, TAG_UPLOAD, TAG_SURVIVORS, TAG_UNMASK, TAG_ATTEST})


class SecureSumError(RuntimeError):
    """A secure sum that cannot be completed: too few shares, or a refused unmasking."""


# --------------------------------------------------------------------------- #
# Building blocks
# --------------------------------------------------------------------------- #
def shamir_split(secret, n_shares, threshold, rng):
    """Shares of ``secret`` at the points ``1 .. n_shares``; any ``threshold`` rebuild it.

    Parameters
    ----------
    secret : int
        In ``[0, MERSENNE_127)``.
    n_shares, threshold : int
        ``1 <= threshold <= n_shares``.
    rng : numpy.random.Generator
        The dealer's private generator (the polynomial's coefficients).

    Returns
    -------
    shares : list of int

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.secure import shamir_combine, shamir_split
    >>> shares = shamir_split(123456789, 5, 3, np.random.default_rng(0))
    >>> shamir_combine({1: shares[0], 3: shares[2], 5: shares[4]})
    123456789
    """
    shares = shamir_split_many([secret], n_shares, threshold, _GeneratorBytes(rng))
    return [int(y) for y in shares[0]]


class _GeneratorBytes:
    """A numpy generator as a dealer of :func:`shamir_split_many`'s random bytes."""

    def __init__(self, rng):
        self.secret_bytes = rng.bytes


def shamir_split_many(secrets, n_shares, threshold, party):
    """Shamir shares of several secrets at the points ``1 .. n_shares``, one draw of randomness.

    Returns an object array of shape ``(len(secrets), n_shares)``: row ``s``
    holds the shares of ``secrets[s]``. The polynomials' coefficients come
    from the party's cryptographic generator, in one call.
    """
    words = _shamir_share_words(secrets, n_shares, threshold, party)
    values = [(int(hi) << 64) | int(lo) for hi, lo in words.reshape(-1, 2).tolist()]
    return np.array(values, dtype=object).reshape(n_shares, len(secrets)).T


#: Bits of a slot of the packed evaluation (:func:`_shamir_share_words`).
_SLOT_BITS = 256


def _shamir_share_words(secrets, n_shares, threshold, party):
    """The shares of :func:`shamir_split_many` as (high, low) 64-bit words, shape (n_shares, n, 2).

    The coefficients are drawn as in :func:`shamir_split_many` (128 random bits
    each, taken modulo ``2**127 - 1``). The polynomials are evaluated at the
    small points ``x = 1 .. n_shares`` all at once: every coefficient of
    degree ``e`` of every secret is packed into one integer, in slots of 256
    bits, and Horner's rule on those integers evaluates every secret's
    polynomial at ``x`` in ``threshold`` multiplications by a small number
    (Kronecker substitution). Each slot holds the exact value, below
    ``threshold * 2**128 * x**(threshold - 1)``; it is reduced modulo the
    Mersenne prime in numpy. ``O(threshold * n_shares)`` operations on
    integers of ``256 n`` bits, instead of ``n * threshold * n_shares``
    products of field elements.
    """
    if not 1 <= threshold <= n_shares:
        raise ValueError(f"threshold={threshold} must be in [1, n_shares={n_shares}]")
    n_secrets = len(secrets)
    raw = party.secret_bytes(16 * n_secrets * (threshold - 1)) if threshold > 1 else b""
    bound_bits = 128 + (threshold - 1) * int(n_shares).bit_length() + int(threshold).bit_length()
    if bound_bits >= _SLOT_BITS - 2:
        # Beyond a few million clients' degrees: the products of field elements.
        return _shamir_share_words_exact(secrets, raw, n_shares, threshold)
    slot = _SLOT_BITS // 64
    packed = np.zeros((threshold, n_secrets, slot), dtype=np.uint64)
    values = [int(v) for v in secrets]
    if any(not 0 <= v < MERSENNE_127 for v in values):
        raise ValueError("a Shamir secret must be in [0, 2**127 - 1)")
    packed[0, :, 0] = [v & _LOW_64 for v in values]
    packed[0, :, 1] = [v >> 64 for v in values]
    if threshold > 1:
        # Coefficient e of secret s: bytes [16 (s (t - 1) + e - 1), +16), little-endian.
        random = np.frombuffer(raw, dtype="<u8").reshape(n_secrets, threshold - 1, 2)
        packed[1:, :, :2] = random.transpose(1, 0, 2)
    coefficients = [int.from_bytes(packed[e].tobytes(), "little") for e in range(threshold)]
    size = n_secrets * slot * 8
    evaluated = []
    for x in range(1, n_shares + 1):
        value = coefficients[-1]
        for e in range(threshold - 2, -1, -1):
            value = value * x + coefficients[e]
        evaluated.append(value.to_bytes(size, "little"))
    w = np.frombuffer(b"".join(evaluated), dtype="<u8").reshape(n_shares, n_secrets, slot)
    return _mod_mersenne_127(w)


_LOW_64 = (1 << 64) - 1
_M63 = np.uint64((1 << 63) - 1)
_M64 = np.uint64(_LOW_64)


def _mod_mersenne_127(w):
    """Values below ``2**254`` as little-endian 64-bit words (last axis, 4 words) modulo
    ``2**127 - 1``, as (high, low) words: ``2**127`` is 1 modulo the prime, so the value is
    its low 127 bits plus the rest, folded twice."""
    w = w.astype(np.uint64, copy=False)
    one, s63 = np.uint64(1), np.uint64(63)
    lo, hi = w[..., 0], w[..., 1] & _M63
    # The bits from 127 up: below 2**127 (two words, the high one below 2**63).
    r0 = (w[..., 1] >> s63) | (w[..., 2] << one)
    r1 = (w[..., 2] >> s63) | (w[..., 3] << one)
    s_lo = lo + r0
    s_hi = hi + r1 + (s_lo < lo).astype(np.uint64)
    # Below 2**128 - 1: fold bit 127 once more.
    top = s_hi >> s63
    s_hi &= _M63
    t_lo = s_lo + top
    s_hi += (t_lo < s_lo).astype(np.uint64)
    # At most the prime itself, which is 0.
    prime = (s_hi == _M63) & (t_lo == _M64)
    s_hi[prime] = 0
    t_lo[prime] = 0
    return np.stack([s_hi, t_lo], axis=-1)


def _shamir_share_words_exact(secrets, raw, n_shares, threshold):
    n_secrets = len(secrets)
    coefficients = np.empty((n_secrets, threshold), dtype=object)
    coefficients[:, 0] = [int(v) for v in secrets]
    # 128 random bits reduced modulo 2**127 - 1: a bias below 2**-126.
    coefficients[:, 1:] = np.array(
        [int.from_bytes(raw[i : i + 16], "little") % MERSENNE_127 for i in range(0, len(raw), 16)],
        dtype=object,
    ).reshape(n_secrets, threshold - 1)
    # The polynomials at x = 1 .. n_shares: a product with the Vandermonde
    # matrix, in exact integers (below 2**254 * threshold before the reduction).
    shares = (coefficients @ _vandermonde(n_shares, threshold)) % MERSENNE_127
    return _words_of(shares.T.ravel()).reshape(n_shares, n_secrets, 2)


@functools.lru_cache(maxsize=256)
def _vandermonde(n_shares, threshold):
    # The same few shapes at every sum of a fit: built once.
    matrix = np.array(
        [[pow(x, e, MERSENNE_127) for x in range(1, n_shares + 1)] for e in range(threshold)],
        dtype=object,
    )
    matrix.flags.writeable = False
    return matrix


def shamir_combine(points):
    """The secret of Shamir shares ``{x: y}`` (Lagrange interpolation at 0)."""
    xs = tuple(points)
    weights = _lagrange_at_zero(xs)
    return sum(points[x] * w for x, w in zip(xs, weights)) % MERSENNE_127


@functools.lru_cache(maxsize=4096)
def _lagrange_at_zero(xs):
    # The server rebuilds every survivor's self mask from shares at the same
    # few points (1 .. t as a rule): the weights are computed once per set.
    weights = []
    for x in xs:
        num, den = 1, 1
        for other in xs:
            if other != x:
                num = num * (-other) % MERSENNE_127
                den = den * (x - other) % MERSENNE_127
        weights.append(num * pow(den, -1, MERSENNE_127) % MERSENNE_127)
    return tuple(weights)


#: ChaCha20's nonce (its counter starts at 0): every keystream has a key of its own.
_NONCE = bytes(16)


def keystream(key, domain, n, dtype=np.uint64):
    """``n`` pseudo-random values of ``dtype`` from ChaCha20 keyed by SHA-256(key, domain).

    A cryptographic keystream: without ``key`` the values are uniformly
    random, and seeing some of them tells nothing of the others.
    """
    digest = hashlib.sha256(bytes(key) + b"|" + domain).digest()
    dtype = np.dtype(dtype)
    encryptor = Cipher(algorithms.ChaCha20(digest, _NONCE), mode=None).encryptor()
    return np.frombuffer(encryptor.update(bytes(n * dtype.itemsize)), dtype=dtype)


#: Masks of at most this many words come from SHAKE-128, longer ones from ChaCha20.
_SHORT_MASK = 256


def _mask(key, domain, n):
    """A secure sum's mask of ``n`` words keyed by ``key``: a cryptographic XOF's output.

    SHAKE-128 (FIPS 202) in one call for short vectors (a Lloyd iteration's
    sums: a few microseconds, where setting up a ChaCha20 context costs more
    than its output), :func:`keystream` (ChaCha20) for long ones, whose
    throughput is higher. Both ends of a pairwise mask derive it alike: the
    choice depends only on ``n``.
    """
    if n > _SHORT_MASK:
        return keystream(key, domain, n)
    return np.frombuffer(
        hashlib.shake_128(bytes(key) + b"|" + domain).digest(8 * n), dtype=np.uint64
    )


def harary_neighbours(n_clients, degree, seed):
    """The neighbours of every client on a random ``degree``-regular Harary graph.

    Clients are placed in a random cyclic order drawn from the public
    ``seed``; each is linked to the ``degree // 2`` clients on either side.
    With ``degree >= n_clients - 1`` the graph is complete.

    Returns
    -------
    neighbours : list of list of int
        Sorted neighbours of each client.
    """
    if degree >= n_clients - 1:
        return [[j for j in range(n_clients) if j != i] for i in range(n_clients)]
    order = np.random.RandomState(seed).permutation(n_clients)
    position = np.empty(n_clients, dtype=np.intp)
    position[order] = np.arange(n_clients)
    half = degree // 2
    out = []
    for i in range(n_clients):
        p = position[i]
        links = {int(order[(p + s) % n_clients]) for s in range(-half, half + 1) if s}
        out.append(sorted(links))
    return out


def default_degree(n_clients):
    """SecAgg+'s logarithmic degree: ``2 ceil(log2 n)``, at least 4, at most ``n - 1``."""
    if n_clients <= 1:
        return 0
    return int(min(n_clients - 1, max(4, 2 * math.ceil(math.log2(n_clients)))))


def fixed_point_shift(bound, n_clients):
    """Exponent ``s`` such that ``n_clients * bound * 2**s < 2**62`` (the sum fits int64)."""
    if not np.isfinite(bound) or bound < 0:
        raise ValueError(f"the bound of a secure sum must be finite and >= 0, got {bound!r}")
    if bound == 0:
        return 0
    exponent = math.frexp(float(bound))[1]  # bound < 2**exponent
    return 62 - int(n_clients).bit_length() - exponent


def _entry_shifts(shift, shape):
    """The shift of each entry of an array of ``shape`` (flattened), shared or per entry.

    A per-entry shift (a list) covers the last axis and repeats over the
    others: bounds per feature of a matrix of per-feature sums. A shared shift
    stays one number; both as :func:`ldexp_exponents` gives them.
    """
    shift = ldexp_exponents(shift)
    if shift.ndim == 0:
        return shift
    if not len(shape):
        return shift.ravel()
    # np.broadcast_to's result, ravelled: an assignment broadcasts in one call.
    entries = np.empty(shape, dtype=shift.dtype)
    entries[...] = shift
    return entries.ravel()


# --------------------------------------------------------------------------- #
# Client steps
# --------------------------------------------------------------------------- #
def _structure(payload):
    """A flat list of arrays and the description to rebuild the payload."""
    if isinstance(payload, tuple):
        arrays, spec = [], []
        for item in payload:
            sub_arrays, sub_spec = _structure(item)
            arrays += sub_arrays
            spec.append(sub_spec)
        return arrays, ["tuple", spec]
    array = np.asarray(payload)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"a secure sum adds numbers; got an array of dtype {array.dtype}")
    return [array], ["array", list(array.shape), "int" if array.dtype.kind in "biu" else "float"]


def _leaves(spec):
    if spec[0] == "tuple":
        return [leaf for sub in spec[1] for leaf in _leaves(sub)]
    return [spec]


def _encode(arrays, spec, shifts, n_clients, who):
    """Fixed-point (or exact integer) encoding of the flattened arrays in Z_{2**64}."""
    limit = 2.0**62 / max(n_clients, 1)
    pieces = []
    for k, (array, leaf, shift) in enumerate(zip(arrays, _leaves(spec), shifts)):
        if leaf[2] == "int":
            values = np.asarray(array, dtype=np.int64).ravel()
            if values.size and np.abs(values).max() >= limit:
                raise ValueError(
                    f"{who}: component {k} of the secure sum holds integers beyond "
                    f"{limit:.3g}, which the sum of {n_clients} clients could not hold"
                )
            pieces.append(values)
            continue
        values = np.asarray(array, dtype=np.float64).ravel()
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{who}: component {k} of the secure sum is not finite")
        shift = _entry_shifts(shift, np.shape(array))
        scaled = np.rint(np.ldexp(values, shift))
        if scaled.size and np.abs(scaled).max() >= limit:
            worst = int(np.argmax(np.abs(scaled)))
            raise ValueError(
                f"{who}: component {k} of the secure sum exceeds its public bound "
                f"(|x| = {abs(values[worst]):.6g} at entry {worst}, encoded at "
                f"2**{int(np.broadcast_to(shift, scaled.shape)[worst])}): refusing to "
                "upload rather than wrap around"
            )
        pieces.append(scaled.astype(np.int64))
    flat = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return flat.view(np.uint64)


class _NotesReads:
    """Mixin for a mapping that notes the keys a step reads (iterating reads them all)."""

    __slots__ = ()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)

    def __iter__(self):
        self.read.update(super().keys())
        return super().__iter__()

    def keys(self):
        self.read.update(super().keys())
        return super().keys()

    def items(self):
        self.read.update(super().keys())
        return super().items()

    def values(self):
        self.read.update(super().keys())
        return super().values()


class _ReadingState(_NotesReads, dict):
    """A copy of a node's kept state that notes the keys a step reads.

    Steps return what they keep (``Reply.keep``) and never write their state,
    so a shallow copy serves; the sum's own record is not an input.
    """

    __slots__ = ("read",)

    def __init__(self, state):
        super().__init__(state)
        self.read = set()

    def digest(self):
        """Digest of the kept values read (``b""`` when none was)."""
        keys = sorted(
            (k for k in self.read if k != RECORD and dict.__contains__(self, k)), key=repr
        )
        if not keys:
            return b""
        return public_digest([_value_digest(dict.__getitem__(self, k)) for k in keys])


def _value_digest(value):
    try:
        return public_digest(value)
    except TypeError:
        # A kept object (a fitted map, a record): its pickle stands for it.
        return hashlib.sha256(pickle.dumps(value)).digest()


class _ReadingInbox(_NotesReads, Inbox):
    """An inbox that notes the tags a step reads (iterating over it reads them all)."""

    __slots__ = ("read",)

    def __init__(self, inbox):
        super().__init__(inbox, getattr(inbox, "server_tags", ()))
        self.read = set()


#: Bits of a per-sum pair key (below the prime, so that it can be Shamir-shared).
_PAIR_KEY_BITS = 126


def _pair_key_int(seed, sum_id, key_digest=b""):
    # The sum's public inputs are part of the key: two neighbours told
    # different inputs (different centers, participants or graph) mask with
    # different keys, so their masks do not cancel and the server gets noise.
    digest = hashlib.sha256(
        bytes(seed) + b"|pair|" + str(int(sum_id)).encode() + b"|" + bytes(key_digest)
    ).digest()
    return int.from_bytes(digest[:16], "little") >> (128 - _PAIR_KEY_BITS)


def _key_bytes(key_int):
    return int(key_int).to_bytes(16, "little")


def _self_mask(seed_int, n):
    return _mask(int(seed_int).to_bytes(16, "little"), b"self mask", n)


def _seeds_key(graph_seed):
    return f"secure sum: seeds of graph {int(graph_seed)}"


@data_independent
@reads()
def secure_sum_seed_step(data, inbox, state, party, *, graph):
    """Set-up client step: a fresh pairwise seed to every later neighbour (peer messages).

    The node computes its neighbours from the graph's public parameters
    (``seed``, ``degree``, ``n_clients``); the seeds come from its
    cryptographic generator.
    """
    me = party.index
    neighbours = harary_neighbours_of(
        me, int(graph["n_clients"]), int(graph["degree"]), graph["seed"]
    )
    seeds = {j: party.secret_bytes(16) for j in neighbours if j > me}
    return Reply(to_peers=seeds, keep={_seeds_key(graph["seed"]): seeds})


def _pairwise_seeds(inbox, state, graph_seed):
    seeds = dict(state.get(_seeds_key(graph_seed), {}))
    seeds.update({int(j): s for j, s in inbox.get(TAG_SEEDS, {}).items()})
    return seeds


@masked_sum
def secure_sum_upload_step(
    data,
    inbox,
    state,
    party,
    *,
    inner,
    inner_public,
    sum_id,
    participants,
    graph,
    threshold,
    shifts,
    n_clients,
):
    """Client step: run ``inner``, mask its vector, upload it; share the self-mask seed.

    ``inner`` names a client step (``module:function``) whose ``send`` is the
    vector (an array, or a tuple of arrays) to add up; what it keeps and
    outputs is kept and output as usual. Before anything is computed the node
    checks the request against its rules (:mod:`skfedclust.node._sum_guard`):
    enough participants, its own neighbours and threshold floor derived from
    the graph's public parameters, a fresh sum id, a statistic it has not
    added before.
    """

    me = party.index
    record = record_of(state)
    participants, mine = check_upload(
        record,
        party,
        sum_id=sum_id,
        participants=participants,
        graph=graph,
        threshold=threshold,
        n_clients=n_clients,
    )
    summand, reply, messages, kept = _run_summand(
        inner, inner_public, data, inbox, state, party, participants
    )
    # The masks' keys bind the public inputs of the sum, the same on every
    # client: the server's messages the step read, else those of the node's
    # previous sum (a second sum over what an earlier one kept, such as the
    # centers), and the fixed-point bounds (clients told other bounds than
    # the rest cannot be read apart in the sum's bits).
    inputs = public_digest(messages) if messages else record.inputs
    public_statistic = public_digest(inner, inner_public, inputs)
    key_digest = public_digest(
        public_statistic, shifts, participants, graph, int(threshold), int(sum_id)
    )
    # one-sum-per-input keys the statistic on what the step computes from:
    # its name, constants and the messages it read, or, for a step that read
    # none, the kept values it read (a step that reads nothing is a function of
    # the rows alone; keying it on the previous sum would let an interleaved sum
    # make it look new). Never the fixed-point bounds: other bounds encode the
    # same values, and a second sum over other clients under other bounds
    # would give away the difference. The key stays on the node.
    # A declared fixed-point shift is left out too: it sets how finely the
    # values are encoded, not which values (the same column sums at another
    # shift are the same statistic).
    encoding = getattr(summand, "__skfedclust_fixed_point__", None)
    keyed_public = {k: v for k, v in inner_public.items() if k != encoding}
    minimum = party.policy.min_sum_participants
    if messages:
        statistic = public_digest(inner, keyed_public, inputs)
    else:
        statistic = public_digest(inner, keyed_public, kept.digest())
    check_statistic(record, statistic, participants, minimum)
    seeds = _pairwise_seeds(inbox, state, graph["seed"])
    missing = [j for j in mine if j not in seeds]
    if missing:
        raise SecureSumError(f"client {me} holds no pairwise seed with its neighbours {missing}")
    keep = {**reply.keep, _seeds_key(graph["seed"]): seeds}
    if reply.send is None:
        return Reply(keep=keep, output=reply.output)
    # The plaintext passes the node's policy as if it were sent in the clear:
    # per-cluster sums of clusters of one row add up to rows in the total.
    paid = charged_to_node(reply, summand, state)
    party.policy.check_outgoing(data, reply.send, None, summand, charged=paid)
    # The masked upload is this summand's: paid for exactly when the summand is.
    keep[PAID_SUMMAND] = paid
    arrays, spec = _structure(reply.send)
    # one-sum-per-input on the values too, by what they reveal: an array this
    # node already added in a sum over other clients, sent again under another
    # step or other constants (column sums as raw moments, then as moments
    # around a zero mean), at another fixed-point shift or in another dtype,
    # would give the server the difference of the two sums.
    plaintexts = _plaintext_keys(summand, arrays, inner_public)
    for key in plaintexts:
        check_statistic(record, key, participants, minimum)
    if shifts is None:
        shifts = [0] * len(arrays)
    vector = _encode(arrays, spec, shifts, n_clients, f"client {me}")
    self_seed = int.from_bytes(party.secret_bytes(16), "little") >> (128 - _SEED_BITS)
    pair_keys = {j: _pair_key_int(seeds[j], sum_id, key_digest) for j in mine}
    masked = _masked(vector, me, pair_keys, self_seed)
    to_peers = _shares_for_neighbours(self_seed, pair_keys, sum_id, int(threshold), party)
    if party.ledger is not None:
        # Across fits, before the masked upload leaves the node: the record
        # is on disk even if the fit ends before this sum is unmasked.
        ledger = party.ledger
        ledger.join_sum(
            (statistic, *plaintexts), ledger.identities(party, participants), minimum=minimum
        )
    keep[RECORD] = record.replace(
        last_id=int(sum_id),
        open=OpenSum(
            int(sum_id),
            key_digest,
            participants,
            mine,
            int(threshold),
            int(graph["seed"]),
            statistic=statistic,
            # A noisy step's share of the noise: the sum must hold that many.
            min_survivors=int(reply.keep.get(MIN_SURVIVORS, 0)),
            graph_degree=int(graph["degree"]),
            graph_size=int(graph["n_clients"]),
            plaintexts=plaintexts,
        ),
        statistics=joined(record, statistic, participants, plaintexts),
        inputs=inputs,
    )
    return Reply(send=(masked, spec), keep=keep, to_peers=to_peers, output=reply.output)


def _run_summand(inner, inner_public, data, inbox, state, party, participants):
    """Run the summed step on an inbox and a state that note what it reads.

    The step runs first (nothing leaves the node before the checks that
    follow): the statistic is keyed on the messages the step reads, so an
    extra message it never reads cannot make a second sum of the same
    statistic over fewer clients look new. Returns ``(step, reply, messages
    it read, its state view)``.
    """
    # The node's gate checks a step named here against its policy and the agreed
    # method (resolve_client_step while the step is served), as any step.
    summand = resolve_client_step(inner, role="summand")
    messages = server_messages(inbox, _OWN_TAGS | _per_client_tags(summand, inner_public))
    reading = _ReadingInbox(inbox)
    kept = _ReadingState(state)
    # Only inside this sum do other clients' noise shares join the node's
    # (node_noise_share): the same step run on its own adds the whole noise.
    with inside_secure_sum():
        reply = summand(data, reading, kept, party, **inner_public)
    sampled = reply.keep.get(SAMPLED_PARTICIPANTS)
    if sampled is not None and tuple(sampled) != tuple(participants):
        raise SumRefusal(
            "sampling",
            f"the sum's participants {list(participants)} are not the sample "
            f"{list(sampled)} the clients' seed draws",
        )
    messages = {tag: payload for tag, payload in messages.items() if tag in reading.read}
    return summand, reply, messages, kept


def _masked(vector, me, pair_keys, self_seed):
    """``vector`` plus the pairwise masks (added towards higher indices) and the self mask.

    ``pair_keys`` maps each participating neighbour to the sum's pair key with it.
    """
    n = vector.size
    # Added in place one mask at a time (modulo 2**64): no stack of every
    # neighbour's mask is formed.
    masked = vector + _self_mask(self_seed, n)
    for j, key in pair_keys.items():
        mask = _mask(_key_bytes(key), b"pairwise mask", n)
        if j > me:
            masked += mask
        else:
            masked -= mask
    return masked


def _shares_for_neighbours(self_seed, pair_keys, sum_id, threshold, party):
    """Each neighbour's Shamir shares of the self-mask seed and of every per-sum pair key.

    SecAgg+ (Bell et al. 2020): if this node uploads and then misses the
    unmasking, ``threshold`` of its neighbours still rebuild its pair keys
    with the clients announced as dropped, and the sum completes.
    """
    mine = list(pair_keys)
    secrets = [self_seed, *pair_keys.values()]
    words = _shamir_share_words(secrets, len(mine), threshold, party)
    # Row k: (sum id, x = k + 1, each secret's share at x as (high, low) words).
    rows = np.empty((len(mine), 2 + 2 * len(secrets)), dtype=np.uint64)
    rows[:, 0] = sum_id
    rows[:, 1] = np.arange(1, len(mine) + 1)
    rows[:, 2:] = words.reshape(len(mine), -1)
    return {j: rows[k].copy() for k, j in enumerate(mine)}


def _plaintext_keys(step, arrays, public):
    """The keys of what the arrays a node adds reveal (``_sum_guard.value_keys``).

    Real values are keyed by what they are, whatever their dtype: floats of
    any width as they are, integers the step declares as fixed point
    (:func:`~skfedclust.node._sum_guard.fixed_point`) decoded at their public
    shift, so the same values in float64, float32 or fixed point at any shift
    get the same keys. Other integers and booleans are counts (rows per
    cluster, a row count): keyed by their step and inputs only, since the same
    small counts recur across unrelated sums and iterations (a cluster keeps
    its count while its center moves), and keying them by value would refuse
    honest protocols (client sampling). All-zero arrays carry nothing of the
    rows and get no key; a step declared
    :func:`~skfedclust.node._sum_guard.keyed_by_inputs` is keyed by its inputs alone.
    """
    if getattr(step, "__skfedclust_keyed_by_inputs__", None) is not None:
        return ()
    encoding = getattr(step, "__skfedclust_fixed_point__", None)
    shift = None if encoding is None else public.get(encoding)
    keys = []
    for array in arrays:
        kind = np.asarray(array).dtype.kind
        if kind != "f" and (kind not in "iu" or encoding is None):
            continue
        for key in value_keys(decoded_values(array, shift)):
            if key not in keys:
                keys.append(key)
    return tuple(keys)


def _per_client_tags(step, public):
    """Server messages ``step`` (or the step it wraps, by name) declares as per client."""
    tags = set(getattr(step, "__skfedclust_per_client__", ()))
    wrapped = public.get("inner") if isinstance(public, dict) else None
    if isinstance(wrapped, str):
        tags |= getattr(
            resolve_client_step(wrapped, role="bound"), "__skfedclust_per_client__", set()
        )
    return frozenset(tags)


def _words_of(values):
    """Field elements as (high, low) 64-bit words, in order: one conversion of their bytes."""
    raw = b"".join([int(v).to_bytes(16, "big") for v in values])
    return np.frombuffer(raw, dtype=">u8").astype(np.uint64)


def _split_words(values):
    """:func:`_words_of` as a list of Python ints."""
    return _words_of(values).tolist()


def _received_shares(current, inbox):
    """The shares of this sum that neighbours sent this node: {neighbour: (x, words)}.

    ``words`` are the (high, low) 64-bit words of the self-mask share and of
    the share of the pair key with each of the neighbour's participating
    neighbours, in order, as sent: a sum without dropouts reveals the
    self-mask share's words alone, and joins none of them into field elements.
    """
    shares = dict(current.shares)
    active = current.participants
    for j, share in inbox.get(TAG_UPLOAD, {}).items():
        if type(share) is not np.ndarray or share.dtype != np.uint64 or share.ndim != 1:
            share = np.asarray(share, dtype=np.uint64).ravel()
        head = share[:2].tolist()
        if share.size < 4 or head[0] != current.sum_id:
            raise SecureSumError(f"client {j}'s share belongs to another sum")
        expected = 4 + 2 * len(current.neighbours_of(int(j), active))
        if share.size != expected:
            raise SecureSumError(
                f"client {j}'s share holds {share.size} words, not the {expected} of a "
                "self-mask share and its pair keys' shares"
            )
        # The words as received (an array): a sum without dropouts reads two of them.
        shares[int(j)] = (head[1], share[2:])
    return shares


def _announcement(inbox):
    """``(survivors or None, dropped)``: the server announces who dropped (``O(dropped)``)."""
    announced = inbox[TAG_SURVIVORS]
    if not isinstance(announced, dict) or "dropped" not in announced:
        raise SumRefusal("well-formed", "the announcement names no dropped clients")
    return announced.get("survivors"), announced["dropped"]


@data_independent
def secure_sum_attest_step(data, inbox, state, party):
    """Client step of a sum with dropouts: tell each surviving neighbour what was announced.

    The node checks the announcement, binds itself to it (it will unmask by
    this one and no other) and sends each surviving neighbour a digest of it
    as a peer message, sealed and authenticated on a deployment: the server
    cannot forge one. Before it reveals any pair key, a node counts the
    neighbours that attested the same announcement (Bonawitz et al.'s
    consistency check, between neighbours as in Bell et al.).
    """
    me = party.index
    record = record_of(state)
    current = open_sum_of(record, ("uploaded",), "attesting an announcement")
    survivors, dropped = check_announcement(
        current, me, *_announcement(inbox), party.policy.min_sum_participants
    )
    seen = public_digest(current.sum_id, survivors, dropped)
    shares = _received_shares(current, inbox)
    attested = dataclasses.replace(
        current,
        stage="attested",
        shares=tuple(sorted(shares.items())),
        announcement=seen,
        survivors=survivors,
        dropped=tuple(dropped),
    )
    words = np.frombuffer(seen, dtype=np.uint64)
    to_peers = {
        j: np.concatenate([[np.uint64(current.sum_id)], words])
        for j in current.neighbours
        if j in survivors
    }
    return Reply(to_peers=to_peers, keep={RECORD: record.replace(open=attested)})


@data_independent
def secure_sum_unmask_step(data, inbox, state, party):
    """Client step: reveal survivors' self-mask shares and dropped neighbours' pair keys.

    Who uploaded and who dropped is the server's announcement. The node
    unmasks only the sum it uploaded to, once; for a single announcement;
    for a neighbour announced as dropped, its pair key and no self-mask
    share; for a surviving neighbour, its self-mask share and the shares of
    its pair keys with dropped clients only (what that neighbour reveals
    itself); pair keys and their shares only against ``threshold`` matching
    attestations of its surviving neighbours.
    """
    me = party.index
    record = record_of(state)
    current = open_sum_of(record, ("uploaded", "attested"), "unmasking")
    minimum = party.policy.min_sum_participants
    if current.stage == "attested":
        if TAG_SURVIVORS in inbox:
            survivors, dropped = check_announcement(current, me, *_announcement(inbox), minimum)
            if public_digest(current.sum_id, survivors, dropped) != current.announcement:
                raise SumRefusal(
                    "consistent-view",
                    "the announcement to unmask differs from the one this node attested",
                )
        survivors, dropped = current.survivors, list(current.dropped)
    else:
        survivors, dropped = check_announcement(current, me, *_announcement(inbox), minimum)
        if dropped:
            raise SumRefusal(
                "stage",
                f"clients {dropped} announced as dropped without the attestation round: pair "
                "keys are revealed only against the surviving neighbours' attestations",
            )
    shares = _received_shares(current, inbox)
    if dropped:
        _check_attestations(current, inbox, survivors)
    seeds = dict(state.get(_seeds_key(current.graph_seed), {}))
    b_shares, pair_keys, key_shares = [], [], []
    dropped = set(dropped)
    active = current.participants
    for j in current.neighbours:
        if j in survivors and j in shares:
            x, words = shares[j]
            b_shares.append((j, x, int(words[0]), int(words[1])))
            if not dropped:
                continue
            # The surviving neighbour's pair keys with the dropped clients only,
            # as it reveals them itself: the sum completes without it.
            for k, d in enumerate(current.neighbours_of(j, active), start=1):
                if d in dropped:
                    key_shares.append([j, d, x, int(words[2 * k]), int(words[2 * k + 1])])
        elif j in dropped:
            if j in shares:
                raise SumRefusal(
                    "stage",
                    f"client {j} is announced as dropped but its share of this sum reached "
                    "this client: refusing to reveal its pairwise key",
                )
            key = _pair_key_int(seeds[j], current.sum_id, current.key_digest)
            pair_keys.append([j, *_split_words([key])])
    statistics = check_repeat_survivors(record, current, survivors, minimum)
    if party.ledger is not None:
        ledger = party.ledger
        ledger.unmask_sum(
            (current.statistic, *current.plaintexts),
            ledger.identities(party, sorted(survivors)),
            participants=ledger.identities(party, current.participants),
            minimum=minimum,
        )
    return Reply(
        send=(
            np.array(b_shares, dtype=np.uint64).reshape(-1, 4),
            np.array(pair_keys, dtype=np.uint64).reshape(-1, 3),
            np.array(key_shares, dtype=np.uint64).reshape(-1, 5),
        ),
        keep={RECORD: record.replace(open=None, statistics=statistics)},
    )


def _check_attestations(current, inbox, survivors):
    """At least ``threshold`` surviving neighbours attested this node's announcement."""
    expected = np.frombuffer(current.announcement, dtype=np.uint64)
    matching = 0
    for j, message in inbox.get(TAG_ATTEST, {}).items():
        message = np.asarray(message, dtype=np.uint64).ravel()
        if (
            int(j) in current.neighbours
            and int(j) in survivors
            and message.size == expected.size + 1
            and int(message[0]) == current.sum_id
            and np.array_equal(message[1:], expected)
        ):
            matching += 1
    if matching < current.threshold:
        raise SumRefusal(
            "consistent-view",
            f"{matching} surviving neighbours attested this node's announcement; revealing "
            f"pair keys needs {current.threshold} (the threshold)",
        )


# --------------------------------------------------------------------------- #
# Server side
# --------------------------------------------------------------------------- #
def unmask_sum(uploads, reveals, *, sum_id, neighbours, participants, threshold):
    """Server step: the sum of the survivors' vectors from masked uploads and reveals.

    Returns
    -------
    total : ndarray of uint64
        The encoded sum.
    spec : list
        The structure of the summed payload.
    """
    survivors = sorted(uploads)
    specs = {repr(uploads[c][1]) for c in survivors}
    if len(specs) != 1:
        raise SecureSumError("the clients' vectors have different shapes; they cannot be added")
    spec = uploads[survivors[0]][1]
    total = np.zeros_like(np.asarray(uploads[survivors[0]][0], dtype=np.uint64))
    for c in survivors:
        total += np.asarray(uploads[c][0], dtype=np.uint64)
    n = total.size
    shares = {c: {} for c in survivors}
    keys, key_shares = {}, {}
    for j, (b_shares, pair_keys, pair_key_shares) in reveals.items():
        for owner, x, hi, lo in np.asarray(b_shares, dtype=np.uint64).tolist():
            if owner in shares:
                shares[owner][int(x)] = (int(hi) << 64) | int(lo)
        for dropped_client, hi, lo in np.asarray(pair_keys, dtype=np.uint64).tolist():
            keys[(int(dropped_client), j)] = _key_bytes((int(hi) << 64) | int(lo))
        for owner, dropped_client, x, hi, lo in np.asarray(
            pair_key_shares, dtype=np.uint64
        ).tolist():
            key_shares.setdefault((int(dropped_client), int(owner)), {})[int(x)] = (
                int(hi) << 64
            ) | int(lo)
    participants = set(participants)
    for c in survivors:
        needed = threshold
        if len(shares[c]) < needed:
            raise SecureSumError(
                f"only {len(shares[c])} of client {c}'s neighbours revealed its self-mask "
                f"share; {needed} are needed (threshold): too many clients dropped"
            )
        points = dict(list(sorted(shares[c].items()))[:needed])
        total -= _self_mask(shamir_combine(points), n)
    dropped = sorted(set(participants) - set(survivors))
    for i in dropped:
        for j in neighbours[i]:
            if j not in uploads:
                continue
            key = keys.get((i, j))
            if key is None:
                # j missed the unmasking: its neighbours' shares of the key.
                points = key_shares.get((i, j), {})
                if len(points) < threshold:
                    raise SecureSumError(
                        f"client {j} uploaded but neither revealed its pairwise key with the "
                        f"dropped client {i} nor left {threshold} neighbours (threshold) to "
                        f"reveal its shares ({len(points)} did): the sum cannot be unmasked"
                    )
                key = _key_bytes(shamir_combine(dict(sorted(points.items())[:threshold])))
            mask = _mask(key, b"pairwise mask", n)
            # j added +mask towards a later neighbour i, -mask towards an earlier one.
            if i > j:
                total -= mask
            else:
                total += mask
    return total, spec


def decode_sum(total, spec, shifts):
    """The summed payload from its encoding: integers as they are, floats from fixed point."""
    signed = total.view(np.int64)
    parts, position = [], 0
    for leaf, shift in zip(_leaves(spec), shifts):
        size = int(np.prod(leaf[1], dtype=np.int64))
        part = signed[position : position + size]
        if leaf[2] == "int":
            parts.append(part.copy())
        else:
            shift = _entry_shifts(shift, tuple(leaf[1]))
            parts.append(np.ldexp(part.astype(np.float64), -shift))
        position += size
    return _rebuild_parts(spec, parts)[0]


def _refuse_if_lost_below_resolution(total, spec, shifts, tag, bounds):
    """Refuse a float part that added up to exactly 0 at a resolution coarser than 1.

    The fixed-point step is the public bound's: a bound far above the values
    (``1e300`` for values of a few units) rounds every value to 0 on every
    client, and the sum is 0 without an error. A float total that is exactly
    0 under such a step is that case, or values below it; the nodes cannot
    tell (a client does not know the others' values). The bounds the package
    agrees (:func:`agree_bound`) sit within a factor of two of the values.
    """
    signed = total.view(np.int64)
    position = 0
    for leaf, shift in zip(_leaves(spec), shifts):
        size = int(np.prod(leaf[1], dtype=np.int64))
        part = signed[position : position + size]
        position += size
        if leaf[2] == "int" or not size or np.any(part):
            continue
        coarsest = float(np.max(np.ldexp(1.0, -np.asarray(shift, dtype=np.int64))))
        if coarsest > 1.0:
            raise ValueError(
                f"secure sum {tag!r}: a float part added up to exactly 0 in fixed point with "
                f"a step of {coarsest:.3g}, from the public bounds {bounds!r}: values below "
                "the step vanish. Give bounds near the values (agree_bound agrees one)."
            )


def _rebuild_parts(spec, parts, position=0):
    if spec[0] == "tuple":
        items = []
        for sub in spec[1]:
            item, position = _rebuild_parts(sub, parts, position)
            items.append(item)
        return tuple(items), position
    return parts[position].reshape(tuple(spec[1])), position + 1


# --------------------------------------------------------------------------- #
# The aggregator a protocol uses
# --------------------------------------------------------------------------- #
class SecureAggregator:
    """Secure sums over the clients of one runtime (see the module docstring).

    Parameters
    ----------
    runtime : Runtime
        The protocol runtime.
    seed : int
        Public seed of the communication graph (drawn by the server).
    degree : int, default=None
        Neighbours per client; ``None`` uses :func:`default_degree`.
    threshold : int, default=None
        Self-mask shares needed to unmask a client: the sum survives as long
        as every surviving client keeps at least this many surviving
        neighbours. ``None`` uses a majority of the neighbours
        (``degree // 2 + 1``). Colluding with ``threshold`` of a client's
        neighbours, the server could unmask that client.

    Attributes
    ----------
    n_sums : int
        Secure sums made so far.
    """

    def __init__(self, runtime, *, seed, degree=None, threshold=None):
        self.runtime = runtime
        n = runtime.n_clients
        if n < DEFAULT_MIN_SUM_PARTICIPANTS:
            raise ValueError(
                f"secure sums need at least {DEFAULT_MIN_SUM_PARTICIPANTS} clients (a sum of two "
                f"tells each client the other's vector; nodes refuse it); this federation has "
                f"{n}: use more clients, or switch the estimator's secure sums off where it "
                "offers it (secure_aggregation=False)"
            )
        self.degree = default_degree(n) if degree is None else int(degree)
        if not 0 <= self.degree <= max(n - 1, 0):
            raise ValueError(f"degree={degree} must be in [0, n_clients - 1 = {n - 1}]")
        self.seed = int(seed)
        self.neighbours = harary_neighbours(n, self.degree, self.seed)
        full = min(len(nb) for nb in self.neighbours) if n > 1 else 0
        if threshold is not None and not 1 <= int(threshold) <= max(full, 1):
            raise ValueError(
                f"threshold={threshold} must be between 1 and the number of neighbours "
                f"of a client ({full})"
            )
        self._requested_threshold = None if threshold is None else int(threshold)
        self.threshold = self._threshold(list(range(n))) if n > 1 else 1
        self.n_sums = 0
        self._set_up = False

    @property
    def graph(self):
        """The graph's public parameters, from which each node derives its own neighbours."""
        return {"seed": self.seed, "degree": self.degree, "n_clients": self.runtime.n_clients}

    def _threshold(self, participants):
        """The sum's threshold: the request, raised to every participant's floor.

        Each node refuses a threshold below a strict majority of its
        participating neighbours (and below ``min-sum-participants - 1``); the
        server asks for one that every participant accepts, or stops here.
        """
        active = set(participants)
        degrees = [sum(j in active for j in self.neighbours[c]) for c in participants]
        floor = max(threshold_floor(d, DEFAULT_MIN_SUM_PARTICIPANTS) for d in degrees)
        threshold = max(floor, self._requested_threshold or 0)
        if min(degrees) < threshold:
            raise SecureSumError(
                f"a client of this secure sum has {min(degrees)} participating neighbours on the "
                f"degree-{self.degree} graph, fewer than the threshold {threshold} its nodes "
                "require: take part with more clients, or build the aggregator with a larger "
                "degree"
            )
        return threshold

    def setup(self):
        """Agree on the pairwise seeds now (one set-up exchange; later calls do nothing).

        The first :meth:`sum` does it otherwise. Its client step reads no
        message (:func:`~skfedclust.federation.reads`), so the server may
        send what the first sum's step reads before or after it.
        """
        if self._set_up:
            return
        self.runtime.stage("secure sum: pairwise seeds between neighbours (set-up)")
        self.runtime.run(secure_sum_seed_step, tag=TAG_SEEDS, setup=True, graph=self.graph)
        self._set_up = True

    def sum(self, step, *, tag, bounds=None, clients=None, **public):
        """Securely add what ``step`` sends on every client of ``clients``.

        Parameters
        ----------
        step : callable
            A module-level client step whose ``send`` is an array or a tuple
            of arrays (the same shapes on every client).
        tag : str
            Name of the sum in progress messages.
        bounds : float, sequence or None, default=None
            Public bound on the absolute entries of each float component on
            any one client (one per component, ``None`` for an integer one,
            or one number for all); integer components need none. Required
            when the payload has float components. A client refuses (a
            ``ValueError``) a value above its bound. The fixed-point step grows
            with the bound: a float part that adds up to exactly 0 under a step
            coarser than 1 (a bound far above the values) raises a
            ``ValueError`` rather than return 0.
        clients : list of int, default=None
            Clients taking part; all by default.
        **public
            Public constants of ``step``.

        Returns
        -------
        total : object
            The sum, with the structure of one client's payload.
        survivors : list of int
            The clients whose vectors are in the sum.
        """

        self.setup()
        runtime = self.runtime
        participants = list(range(runtime.n_clients)) if clients is None else sorted(clients)
        if len(participants) < DEFAULT_MIN_SUM_PARTICIPANTS:
            raise SecureSumError(
                f"the secure sum {tag!r} would add {len(participants)} clients; nodes refuse "
                f"sums of fewer than {DEFAULT_MIN_SUM_PARTICIPANTS} (a sum of two tells each "
                "the other's vector): run it with more clients"
            )
        threshold = self._threshold(participants)
        # A fresh id for every sum of the fit, increasing over the fit (each
        # node refuses one that does not): the runtime's next exchange.
        sum_id = max(self.n_sums, getattr(runtime, "_exchange", -1) + 1)
        self.n_sums += 1
        shifts = None
        if bounds is not None:
            bounds = [bounds] if isinstance(bounds, numbers.Real) else list(bounds)
            # None: an integer component, summed exactly.
            shifts = [
                0
                if b is None
                else fixed_point_shift(b, len(participants))
                if np.ndim(b) == 0
                else [fixed_point_shift(v, len(participants)) for v in np.ravel(b)]
                for b in bounds
            ]
        runtime.stage(f"secure sum {tag!r}: masked vectors up")
        # Who takes part, as the roster's size and who is left out: what a node
        # needs (its participating neighbours, the set for its rules) in
        # O(1 + left out), not a list of everyone at every sum.
        roster = ClientSet.of(participants, runtime.n_clients)
        uploads = runtime.run(
            secure_sum_upload_step,
            tag=TAG_UPLOAD,
            clients=participants,
            may_drop=True,
            inner=client_step_name(step),
            inner_public=public,
            sum_id=sum_id,
            participants=roster.wire(),
            graph=self.graph,
            threshold=threshold,
            shifts=shifts,
            n_clients=len(participants),
        )
        if not uploads:
            raise SecureSumError(f"no client uploaded its vector for the secure sum {tag!r}")
        survivors = sorted(uploads)
        share = public.get("noise_share")
        if isinstance(share, numbers.Integral) and len(survivors) < share:
            # The nodes would refuse to unmask it (each added 1/share of the noise).
            raise SecureSumError(
                f"only {len(survivors)} of the {len(participants)} clients of the noisy sum "
                f"{tag!r} uploaded; its noise needs the shares of {share}"
            )
        dropped = sorted(set(participants) - set(survivors))
        spec = next(iter(uploads.values()))[1]
        n_components = len(_leaves(spec))
        if shifts is None:
            if any(leaf[2] == "float" for leaf in _leaves(spec)):
                raise ValueError(
                    f"the secure sum {tag!r} adds floats: give public bounds on their entries"
                )
            shifts = [0] * n_components
        elif len(shifts) == 1 and n_components > 1:
            shifts = shifts * n_components
        # Who dropped, not who uploaded: each node knows the participants, so the
        # survivors are the rest. O(dropped) bytes per node, not O(participants).
        runtime.broadcast(
            {"dropped": np.array(dropped, dtype=np.int64)},
            tag=TAG_SURVIVORS,
            clients=survivors,
        )
        if dropped:
            # Nodes reveal pair keys only against their neighbours' attestations
            # of one announcement: one more round, only when someone dropped.
            runtime.stage(f"secure sum {tag!r}: survivors attest the announcement")
            runtime.run(secure_sum_attest_step, tag=TAG_ATTEST, clients=survivors, may_drop=True)
        runtime.stage(f"secure sum {tag!r}: unmasking ({len(dropped)} dropped)")
        reveals = runtime.run(
            secure_sum_unmask_step,
            tag=TAG_UNMASK,
            clients=survivors,
            may_drop=True,
        )
        total, spec = runtime.server(
            unmask_sum,
            uploads,
            reveals,
            sum_id=sum_id,
            neighbours=self.neighbours,
            participants=participants,
            threshold=threshold,
        )
        _refuse_if_lost_below_resolution(total, spec, shifts, tag, bounds)
        return decode_sum(total, spec, shifts), survivors
