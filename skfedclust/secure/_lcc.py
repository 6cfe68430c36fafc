"""Lagrange coded computing (LCC) of the global squared-distance matrix.

The protocol of OmniFC (Yan, Liu & Zhang), as a standalone primitive written
against the protocol runtime (:mod:`skfedclust.federation`):

0. the clients agree on a common offset, the global mean, by secure
   aggregation (:func:`agree_offset`, a
   :class:`~skfedclust.secure.SecureAggregator` sum of exact fixed-point
   column sums; the mean down). Distances do not depend on the offset;
   subtracting it lets the field hold the spread of the data instead of its
   position. The public bounds the fixed-point scale and the precision are
   chosen from travel as counted set-up messages (one or two float64 per
   client; :func:`agree_scale`);
1. every data client quantizes its rows to F_p
   (``rint(2**q x) - rint(2**q offset) mod p``), cuts each row into ``l``
   segments, adds ``t`` uniformly random segments drawn from its private
   generator and sends every share-holding party the Lagrange polynomial of
   each row evaluated at the party's public point (:func:`lcc_share_step`,
   peer messages);
2. every party that answers computes the squared distances *mod p* between
   the encoded rows it holds and uploads them (:func:`lcc_tiles_step`);
3. the server combines the parties' matrices with public weights, which
   evaluates the degree-``2(l + t - 1)`` polynomial of every pair at the data
   points and sums the segments (:func:`server_decoding_weights`), then lifts
   the field values back to integers and divides by ``4**q``
   (:func:`lcc_decode_tiles_step`).

The upload of step 2 is streamed (:func:`streamed_exchange`): the server asks
every party for a few groups of tiles in turn (exchanges that count as one
round), each party computes them from the shares it holds and sends them as
centred int32 residues, and the server decodes every exchange tile by tile, folding
each party's tile into its weighted sum while it is in cache, before asking
for the next; the parties compute the next exchange while the server
decodes one. What the server keeps of the decoded tiles is a sink: the dense
matrix (:class:`DenseSink`), or per row only what a neighbour-graph
clusterer needs (:class:`NeighbourSink`: the nearest rows, the rows within a
radius, identical rows, the exact median), in ``O(n k)`` memory. No party's
full matrix is ever held by the server, and no share ever reaches it. The
coding mathematics (points, encoding and decoding weights, precision,
quantization) are in ``_lcc_coding``, the sinks in ``_lcc_sinks``, step 0 in
``_lcc_offset``, the threads in ``_lcc_blocks``; this module is the protocol. Every
number is an exact integer, so the result does not depend on the partition, the
noise, the parameters ``(m, l, t)``, the surviving parties or ``n_jobs``.
"""

from __future__ import annotations

import functools
import math
import numbers
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from sklearn.utils import check_array, check_random_state

from ..clusterers._memory import check_dense_memory, release_free_heap
from ..federation import (
    Federation,
    InProcessRuntime,
    Received,
    Reply,
    private_entropy,
)
from ..federation._runtime import _thread_controller
from ..node._declarations import coded_shares
from ._field import (
    DEFAULT_PRIME,
    ModularProduct,
    centred,
    check_prime,
    is_prime,
    reduction_bound,
)
from ._lcc_blocks import _block_workers, _BlockProgress, _blocks, _run_blocks, party_threads
from ._lcc_coding import (
    check_party_indices,
    decoding_threshold,
    encoding_matrix,
    evaluation_points,
    lagrange_matrix,
    max_safe_precision,
    quantize,
    server_decoding_weights,
)
from ._lcc_offset import agree_scale
from ._lcc_sinks import (
    DenseSink,
)

__all__ = [
    "decoding_threshold",
    "encoding_matrix",
    "evaluation_points",
    "lagrange_matrix",
    "lcc_encode",
    "lcc_squared_distances",
    "max_safe_precision",
    "quantize",
    "server_decoding_weights",
]

#: Rows per block of the streamed distance computation. A block of float64 is
#: 2 MiB, so the few scratch blocks of one worker stay in a 2-core machine's
#: cache while BLAS still runs near peak.
BLOCK_SIZE = 512

# --------------------------------------------------------------------------- #
# Tags of the protocol's messages in the ledger
# --------------------------------------------------------------------------- #
TAG_SHARE = "LCC share"
TAG_DISTANCES = "encoded distances"
TAG_QUERY_SHARE = "query share"
TAG_QUERY_DISTANCES = "encoded query distances"


# --------------------------------------------------------------------------- #
# Encoding and the share exchange
# --------------------------------------------------------------------------- #
def lcc_encode(residues, seed, *, encoding, n_segments, p):
    """The LCC shares of a client's own rows for every party.

    Parameters
    ----------
    residues : ndarray of int64 of shape (n_rows, l * w)
        The client's quantized rows in ``[0, p)``.
    seed : numpy.random.Generator or int
        The client's private generator (:attr:`Party.rng
        <skfedclust.federation.Party.rng>`; an int seeds one, for tests): the
        ``t`` noise segments of every row are drawn fresh and uniform on
        ``F_p`` from it.
    encoding : ndarray of shape (l + t, m)
        The public encoding matrix (:func:`encoding_matrix`).
    n_segments : int
        ``l``.
    p : int
        The prime.

    Returns
    -------
    shares : ndarray of uint32 of shape (m, n_rows, w)
        ``shares[j]`` is what party ``j`` receives: ``sum_o U[o, j] s_o mod p``.
    """
    n_rows = residues.shape[0]
    width = residues.shape[1] // n_segments
    n_noise = encoding.shape[0] - n_segments
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, p, size=(n_noise, n_rows, width), dtype=np.int64)
    shares = np.empty((encoding.shape[1], n_rows, width), dtype=np.uint32)
    residues = np.asarray(residues, dtype=np.int64)
    encoding = np.asarray(encoding, dtype=np.int64)
    in_field = [np.all((a >= 0) & (a < p)) for a in (residues, encoding)]
    if all(in_field) and residues.shape[1] == n_segments * width:
        from ._kernels import encode_shares

        # one compiled pass; the same canonical residues as the loop below
        encode_shares(residues, n_segments, noise, encoding, p, shares)
        return shares
    segments = [residues[:, o * width : (o + 1) * width] for o in range(n_segments)]
    segments += list(noise)
    for j in range(encoding.shape[1]):
        acc = np.zeros((n_rows, width), dtype=np.int64)
        for o, seg in enumerate(segments):
            # (p - 1)**2 < 2**62: one product fits in int64; reduce after each term.
            acc += seg * int(encoding[o, j])
            acc %= p
        shares[j] = acc
    return shares


def agreed_encoding(n_segments, n_colluders, n_parties, p):
    """The encoding matrix a party builds itself from the fit's public integers.

    Taken from the server as a matrix, its noise rows could be zero, and
    every share would then be the quantized rows themselves: one colluding
    party would read them. A party refuses fewer than one colluder's worth
    of noise and a modulus that is not prime.
    """
    n_segments, n_colluders, n_parties, p = (
        int(n_segments),
        int(n_colluders),
        int(n_parties),
        int(p),
    )
    if n_colluders < 1:
        raise PermissionError(
            f"refused by rule 'lcc-noise': {n_colluders} colluders; a share without noise "
            "is the rows themselves"
        )
    if n_segments < 1 or n_parties < n_segments + n_colluders or not is_prime(p) or p < 2**16:
        raise PermissionError(
            f"refused by rule 'lcc-noise': l={n_segments}, t={n_colluders}, m={n_parties}, "
            f"p={p} is no Lagrange code"
        )
    return _encoding_matrix_cached(n_segments, n_colluders, n_parties, p)


@functools.lru_cache(maxsize=8)
def _encoding_matrix_cached(n_segments, n_colluders, n_parties, p):
    matrix = encoding_matrix(n_segments, n_colluders, n_parties, p)
    matrix.flags.writeable = False
    return matrix


@coded_shares
def lcc_share_step(data, inbox, state, party, *, precision, n_colluders, n_parties, n_segments, p):
    """Client step: quantize the own rows around the offset, send every party its shares.

    The share for party ``j`` goes to it as a peer message; the client's own
    share (it is a party too) stays with it. The encoding matrix is the
    client's own (:func:`agreed_encoding`), from the public ``l``, ``t``,
    ``m`` and ``p``.
    """
    encoding = agreed_encoding(n_segments, n_colluders, n_parties, p)
    residues = quantize(data, precision, p, n_segments, state["offset"])
    shares = lcc_encode(residues, party.rng, encoding=encoding, n_segments=n_segments, p=p)
    me = party.index
    others = {j: shares[j] for j in range(shares.shape[0]) if j != me}
    # a copy, so that the other parties' shares are not kept alive through it
    return Reply(to_peers=others, keep={"own share": shares[me].copy()})


# --------------------------------------------------------------------------- #
# Party side: encoded distances, tile by tile
# --------------------------------------------------------------------------- #
#: Bytes of one field element on the wire (residues below 2**31 fit 32 bits).
ELEMENT_BYTES = np.dtype(np.uint32).itemsize


def encoded_row_norms(shares, p):
    """Squared norms mod p of encoded rows, centred (the extra product columns)."""
    shares = np.asarray(shares)
    if shares.dtype == np.uint32 and shares.ndim == 2 and p < 2**31:
        from ._kernels import row_norms

        # one compiled pass; the same centred residues as below
        out = np.empty(shares.shape[0])
        row_norms(shares, p, out)
        return out
    sq = np.asarray(shares, dtype=np.int64)
    sq = sq * sq % p
    return centred(sq.sum(axis=1) % p, p)


class _Scratch:
    """Per-thread scratch blocks of at most ``size x size`` (float64 unless told)."""

    def __init__(self, keys, dtype=np.float64):
        self.keys = keys
        self.dtype = dtype
        self.local = threading.local()

    def get(self, size, shape):
        bufs = getattr(self.local, "bufs", None)
        if bufs is None or bufs[self.keys[0]].shape != (size, size):
            bufs = {k: np.empty((size, size), dtype=self.dtype) for k in self.keys}
            self.local.bufs = bufs
        return {k: v[: shape[0], : shape[1]] for k, v in bufs.items()}


def _tile_shape(tile):
    a0, a1, b0, b1 = tile
    return a1 - a0, b1 - b0


def _is_diagonal(tile, symmetric):
    return symmetric and tile[0] == tile[2]


def tile_elements(tile, symmetric):
    """Field elements a party sends for one tile (the strict upper triangle of a diagonal one)."""
    ka, kb = _tile_shape(tile)
    return ka * (ka - 1) // 2 if _is_diagonal(tile, symmetric) else ka * kb


def party_tiles(left, right, tiles, p, *, symmetric, n_threads=1):
    """A party's tiles of ``G[a, b] = ||z_a - z_b||**2 mod p``, as centred int32 residues.

    Computed from the encoded rows the party holds and nothing else. Each
    tile is one exact float64 product (:class:`ModularProduct`) of
    ``[-2 z_a mod p, r_a, 1]`` against ``[z_b, 1, r_b]`` (``r`` the squared
    row norms), which gives ``r_a + r_b - 2 z_a . z_b``, and one reduction.
    The operands are prepared once per request, for the row and column
    blocks of its tiles only, and freed with it.

    Parameters
    ----------
    left, right : tuple of (ndarray of uint32 of shape (n, w), ndarray of shape (n,))
        Encoded rows and their :func:`encoded_row_norms`: the rows and the
        columns of ``G`` (the same for the training distances).
    tiles : list of tuple of int
        ``(a0, a1, b0, b1)``: rows ``a0:a1`` against columns ``b0:b1``.
    p : int
        The prime.
    symmetric : bool
        Whether ``G`` is symmetric with a zero diagonal: a diagonal tile then
        sends only its strict upper triangle, row by row.
    n_threads : int, default=1
        Threads over the tiles.

    Returns
    -------
    tiles : tuple of ndarray of int32
        One array per tile, congruent residues of magnitude at most ``(p -
        1)/2 + 3`` (a 32-bit field element each, centred so that the server
        folds them without another pass): the message.
    """
    from ._kernels import tile_residues

    (Z_a, r_a), (Z_b, r_b) = left, right
    plan = ModularProduct.plan(p, Z_a.shape[1])
    scratch = _Scratch(("g", "tmp", "tmp2"))
    size = max((max(_tile_shape(t)) for t in tiles), default=1)
    out = [None] * len(tiles)

    # the operands of every row and column block of this request, each built
    # once, by the first tile task that needs it: on the tiles' threads rather
    # than one after another before them
    def build(side, start, stop):
        if side == "left":
            rows, norms = Z_a[start:stop], r_a[start:stop]
            return plan.left_operand_from_residues(rows, factor=-2, extra=[norms, 1.0])
        return plan.right_operand_from_residues(Z_b[start:stop], extra=[1.0, r_b[start:stop]])

    operands = {}
    locks = {("left", *t[:2]): threading.Lock() for t in tiles}
    locks.update({("right", *t[2:]): threading.Lock() for t in tiles})

    def operand(key):
        with locks[key]:
            if key not in operands:
                operands[key] = build(*key)
            return operands[key]

    def task(k, tile):
        a0, a1, b0, b1 = tile
        work = scratch.get(size, _tile_shape(tile))
        lhs, rhs = operand(("left", a0, a1)), operand(("right", b0, b1))
        # the product's last reduction runs in the pass that packs the
        # message: |g| <= p/2 + 3 after it, a 32-bit residue as it is
        g = plan.product(lhs, rhs, work["g"], work["tmp"], work["tmp2"], reduce=False)
        diagonal = _is_diagonal(tile, symmetric)
        message = np.empty(tile_elements(tile, symmetric), dtype=np.int32)
        tile_residues(g, float(p), True, diagonal, message)
        out[k] = message

    _run_blocks(task, list(enumerate(tiles)), n_threads)
    return tuple(out)


def _assemble_encoded_rows(inbox, state, party, row_numbers, n_samples):
    held = dict(inbox.get(TAG_SHARE, {}))
    if state.get("own share") is not None:
        held[party.index] = state["own share"]
    width = next(iter(held.values())).shape[1]
    Z = np.empty((n_samples, width), dtype=np.uint32)
    for client, shares in held.items():
        Z[np.asarray(row_numbers[client])] = shares
    return Z


@coded_shares
def lcc_tiles_step(
    data, inbox, state, party, *, tiles, p, row_numbers=None, n_samples=None, n_threads=1
):
    """Party step: the requested tiles of its encoded squared distances mod p, uploaded.

    Data clients and data-less parties alike. At the first request
    (``row_numbers`` given) the party stacks the shares it received, and its
    own, in the public row numbering and keeps them: its encoded rows, which
    stay with it (to answer later requests, and predict's queries). Every
    request is answered from them alone (:func:`party_tiles`).
    """
    keep = {}
    if row_numbers is not None:
        Z = _assemble_encoded_rows(inbox, state, party, row_numbers, n_samples)
        norms = encoded_row_norms(Z, p)
        keep = {"encoded rows": Z, "row norms": norms}
        if "own share" in state:
            keep["own share"] = None  # now a row of the encoded rows
    else:
        Z, norms = state["encoded rows"], state["row norms"]
    send = party_tiles((Z, norms), (Z, norms), tiles, p, symmetric=True, n_threads=n_threads)
    return Reply(send=send, keep=keep)


@coded_shares
def lcc_query_share_step(
    data, inbox, state, party, *, precision, n_colluders, n_parties, n_segments, p
):
    """Client step of the querying party: Lagrange-encode its new rows, send every party its shares.

    ``data`` are the querying party's new rows. Quantized around the offset
    it kept, masked with fresh noise from its private generator; its own
    share stays with it.
    """
    encoding = agreed_encoding(n_segments, n_colluders, n_parties, p)
    residues = quantize(data, precision, p, n_segments, state["offset"])
    shares = lcc_encode(residues, party.rng, encoding=encoding, n_segments=n_segments, p=p)
    me = party.index
    others = {j: shares[j] for j in range(shares.shape[0]) if j != me}
    return Reply(to_peers=others, keep={"query share": shares[me].copy()})


@coded_shares
def lcc_query_tiles_step(data, inbox, state, party, *, tiles, p, querier, first, last, n_threads=1):
    """Party step: tiles of the encoded distances of the query rows to its training rows.

    At the first request the party keeps the query share it received (or its
    own, for the querier); after the last one it drops it.
    """
    if first:
        received = inbox.get(TAG_QUERY_SHARE, {})
        Q = received[querier] if querier in received else state["query share"]
        query = (Q, encoded_row_norms(Q, p))
    else:
        query = state["query rows"]
    train = (state["encoded rows"], state["row norms"])
    send = party_tiles(query, train, tiles, p, symmetric=False, n_threads=n_threads)
    keep = {"query share": None, "query rows": None if last else query}
    return Reply(send=send, keep=keep)


# --------------------------------------------------------------------------- #
# Server side: streamed decoding
# --------------------------------------------------------------------------- #
class StreamingDecoder:
    """Server side of the decoding, tile by tile.

    The weighted sum ``sum_j w_j G_j`` of one tile is accumulated in int64
    row by row, reading every party's tile as it arrived (centred int32
    residues, only the strict upper triangle of a diagonal tile), and reduced
    to ``[0, p)`` once at the end, in the same pass that writes the decoded
    row out (``_kernels.decode_tile``). Every term is exact: with centred
    weights ``|w_j| <= (p - 1)/2`` and residues ``|g| <= (p - 1)/2 + 3``
    (:func:`reduction_bound`), a term is below ``2**60`` for any ``p <
    2**31`` (below ``2**58`` for the default prime). The accumulator is
    reduced every :attr:`flush_every` parties, so that it never exceeds
    ``2**62`` (``p`` left after a reduction plus that many terms): its sum is
    then exact in int64, and so is the float quotient that reduces it
    (``_kernels._canonical``). That is a reduction every 16 parties with the
    default prime, every 3 with ``2**31 - 1``.

    Parameters
    ----------
    weights : ndarray of int64
        The decoding weights, one per answering party.
    p : int
        The prime.
    precision : int
        The precision ``q``: the decoded integers are scaled by ``4**-q``.
    """

    def __init__(self, weights, p, precision):
        self.p = int(p)
        # ldexp: 2.0 ** (-2 q) raises OverflowError for q below about -512
        self.scale = math.ldexp(1.0, -2 * int(precision))
        self.weights = centred(np.asarray(weights, dtype=np.int64), p, np.int64)
        term = ((self.p - 1) // 2) * reduction_bound(self.p)
        self.flush_every = max(1, (2**62 - self.p) // term)

    def _decode(self, uploads, k, tile, symmetric, out, a0, b0, scale, mirror):
        from ._kernels import decode_tile

        messages = tuple(_read_only(u[k]) for u in uploads)
        n, m = _tile_shape(tile)
        wrapped = decode_tile(
            messages,
            self.weights,
            self.flush_every,
            self.p,
            scale,
            out,
            a0,
            b0,
            n,
            m,
            _is_diagonal(tile, symmetric),
            mirror,
        )
        if wrapped:
            raise ArithmeticError(
                "a decoded squared distance wrapped around modulo p: either the precision is "
                "too high for this data or prime (the overflow guard should have refused it), "
                "or the decoding weights come from fewer than 2*n_segments + 2*n_colluders - 1 "
                "answering parties"
            )

    def decode_block(self, uploads, k, tile, symmetric, out):
        """Decoded integer squared distances of tile ``k``, in ``out`` (int64 or float64).

        ``uploads`` holds every answering party's message (its tiles, in the
        order of the weights). The integers ``||rint(2**q x_a) - rint(2**q
        x_b)||**2``, exact in float64 (a diagonal tile mirrored, with a zero
        diagonal); :attr:`scale` (``4**-q``) turns them into real distances.
        """
        self._decode(uploads, k, tile, symmetric, out, 0, 0, 1.0, False)
        return out

    def decode_dense(self, uploads, k, tile, symmetric, dense):
        """Write decoded tile ``k``, times :attr:`scale`, into the matrix ``dense`` (mirrored).

        In the same pass as the decoding: the tile is never held apart.
        """
        a0, _, b0, _ = tile
        mirror = symmetric and not _is_diagonal(tile, symmetric)
        self._decode(uploads, k, tile, symmetric, dense, a0, b0, self.scale, mirror)


def _read_only(values):
    """A contiguous 1-D read-only view (a copy only if not contiguous).

    The decoding kernel takes the parties' messages as one tuple: read-only
    views give every party's message the same type, whether it arrived as
    a read-only buffer (deserialized) or as a writable array (in-process).
    """
    view = np.ascontiguousarray(values).reshape(-1).view()
    view.flags.writeable = False
    return view


def _check_tiles(received, tiles, symmetric):
    """Refuse an upload that is not the requested tiles (the party's own mistake).

    The values themselves are trusted: parties are honest-but-curious (a
    party that sends wrong residues corrupts ``D`` whatever is checked).
    """
    for party, payload in received.items():
        ok = isinstance(payload, (tuple, list)) and len(payload) == len(tiles)
        ok = ok and all(
            isinstance(v, np.ndarray)
            and v.dtype == np.int32
            and v.size == tile_elements(t, symmetric)
            for v, t in zip(payload, tiles)
        )
        if not ok:
            raise ValueError(
                f"party {party} did not send the {len(tiles)} requested tiles of residues mod p"
            )


def lcc_decode_tiles_step(
    received, *, tiles, weights, p, precision, sink, symmetric, progress, n_jobs=None
):
    """Server step: decode one exchange of tiles, tile by tile, into ``sink``.

    Parameters
    ----------
    received : Received
        The answering parties' tiles, in the order of ``weights``.
    tiles : list of tuple of int
        The tiles asked for in this exchange.
    weights : ndarray of int64
        The decoding weights of the answering parties.
    p : int
        The prime.
    precision : int
        The precision ``q``.
    sink : DenseSink or NeighbourSink
        What the server keeps of every decoded tile: the dense matrix
        (:class:`DenseSink`), or per row only what a clusterer needs
        (:class:`NeighbourSink`). Each tile is handed over as soon as it is
        decoded, as exact integers.
    symmetric : bool
        Training distances (upper block triangle) or query distances.
    progress : _BlockProgress
        Progress lines, one per tile.
    n_jobs : int, default=None
        Threads over the tiles.
    """
    _check_tiles(received, tiles, symmetric)
    uploads = received.list()
    decoder = StreamingDecoder(weights, p, precision)
    # a sink takes the decoded integers as they are (int64: no conversion of its own)
    blocks = _Scratch(("block",), dtype=np.int64)
    size = max(max(_tile_shape(t)) for t in tiles)

    def task(k, tile):
        a0, a1, b0, b1 = tile
        if isinstance(sink, DenseSink):
            # decoded, scaled and written (both triangles) in one pass
            decoder.decode_dense(uploads, k, tile, symmetric, sink.out)
        else:
            block = blocks.get(size, _tile_shape(tile))["block"]
            sink.add(tile, decoder.decode_block(uploads, k, tile, symmetric, block), decoder.scale)
        progress.tick(slice(a0, a1), slice(b0, b1))

    _run_blocks(task, list(enumerate(tiles)), n_jobs)


def decode_squared_distances(shares, weights, precision, p, *, n_jobs=None):
    """``D`` from the parties' encoded rows directly, with the protocol's tiles and decoder.

    The same party computation (:func:`party_tiles`) and server decoding
    (:func:`lcc_decode_tiles_step`) as the protocol, exchange by exchange,
    without a runtime: a reference for tests and for the algebra.

    Parameters
    ----------
    shares : list of ndarray of shape (n, w)
        Every answering party's encoded rows, residues in ``[0, p)``, in the
        order of ``weights``.
    weights : ndarray of int64
        The decoding weights (:func:`server_decoding_weights`).
    precision : int
        The precision ``q``.
    p : int
        The prime.
    n_jobs : int, default=None
        Threads over the tiles.

    Returns
    -------
    D : ndarray of shape (n, n)
        The decoded squared distances.
    """
    parts = [(np.asarray(z, dtype=np.uint32), encoded_row_norms(z, p)) for z in shares]
    n = parts[0][0].shape[0]
    exchanges = tile_exchanges(n, n, len(parts), symmetric=True)
    progress = _BlockProgress("decoding D", sum(len(tiles) for tiles in exchanges))
    out = np.empty((n, n))
    sink = DenseSink(out, symmetric=True)
    for tiles in exchanges:
        received = Received(
            TAG_DISTANCES,
            {j: party_tiles(z, z, tiles, p, symmetric=True) for j, z in enumerate(parts)},
        )
        lcc_decode_tiles_step(
            received,
            tiles=tiles,
            weights=weights,
            p=p,
            precision=precision,
            sink=sink,
            symmetric=True,
            progress=progress,
            n_jobs=n_jobs,
        )
    return sink.finish()


#: Share of the decoded matrix's size that one exchange of a streamed upload
#: may bring to the server, all answering parties together (a quarter of
#: ``D``), and never less than :data:`MIN_EXCHANGE_BYTES`.
EXCHANGE_FRACTION = 0.25
MIN_EXCHANGE_BYTES = 8 * 2**20
#: Largest message one party sends in one exchange (well below gRPC's 2 GiB).
MAX_MESSAGE_BYTES = 256 * 2**20
#: Largest exchange, all parties together: the messages the server holds at
#: once stay bounded whatever ``n``.
MAX_EXCHANGE_BYTES = 128 * 2**20


def _spread_order(n_items):
    """A fixed order that visits ``range(n_items)`` spread out (bit-reversed indices)."""
    bits = max(int(n_items - 1).bit_length(), 1)
    index = np.arange(2**bits)
    reversed_ = np.zeros_like(index)
    for b in range(bits):
        reversed_ |= ((index >> b) & 1) << (bits - 1 - b)
    return [int(i) for i in reversed_ if i < n_items]


def tile_exchanges(n_rows, n_cols, n_parties, *, symmetric):
    """The tiles of a streamed upload, grouped into exchanges.

    Tiles of at most :data:`BLOCK_SIZE` rows and columns, the upper block
    triangle for a symmetric matrix. An exchange takes tiles while every
    answering party's message stays within ``min(max(EXCHANGE_FRACTION * 8
    n_rows n_cols, MIN_EXCHANGE_BYTES), MAX_EXCHANGE_BYTES) / n_parties`` and
    :data:`MAX_MESSAGE_BYTES`: the server holds at most a quarter of ``D``,
    and never more than :data:`MAX_EXCHANGE_BYTES`, in messages at any time.
    The tiles of an exchange form a rectangle of row blocks against column
    blocks, so that a party prepares each block's operands once for several
    tiles, and the rectangles are visited spread over the matrix (bit-reversed
    order). A symmetric matrix first sends tiles picked over the whole
    matrix (bit-reversed positions in its list of tiles), as many as hold the
    streaming median's sample (:data:`._lcc_sinks.MEDIAN_SAMPLE` values): the
    window in which the median is counted is set from that sample, and a
    rectangle is no fair sample of all pairs when the rows come in client
    order and the clients differ (Non-IID rows meet only their own kind
    there: the window missed the median, and a second pass over every tile
    doubled the fit). The plan depends on public sizes only, so every
    runtime makes the same exchanges.

    Returns
    -------
    exchanges : list of list of tuple of int
        The ``(a0, a1, b0, b1)`` tiles of every exchange.
    """
    rows, cols = _blocks(n_rows, BLOCK_SIZE), _blocks(n_cols, BLOCK_SIZE)
    total = min(
        max(EXCHANGE_FRACTION * 8.0 * n_rows * n_cols, MIN_EXCHANGE_BYTES), MAX_EXCHANGE_BYTES
    )
    limit = min(total / max(n_parties, 1), MAX_MESSAGE_BYTES)
    per_message = max(1, int(limit // (ELEMENT_BYTES * BLOCK_SIZE * BLOCK_SIZE)))
    side = max(1, math.isqrt(per_message))
    bands = [range(a, min(a + side, len(rows))) for a in range(0, len(rows), side)]
    strips = [range(a, min(a + side, len(cols))) for a in range(0, len(cols), side)]
    rectangles = []
    for band in bands:
        for strip in strips:
            tiles = [
                (rows[i].start, rows[i].stop, cols[j].start, cols[j].stop)
                for i in band
                for j in strip
                if not symmetric or j >= i
            ]
            if tiles:
                rectangles.append(tiles)
    first = _sample_tiles(rectangles, symmetric)
    ordered = list(first)
    for r in _spread_order(len(rectangles)):
        ordered += [tile for tile in rectangles[r] if tile not in first]
    exchanges, current, size = [], [], 0
    for tile in ordered:
        nbytes = ELEMENT_BYTES * tile_elements(tile, symmetric)
        if current and size + nbytes > limit:
            exchanges.append(current)
            current, size = [], 0
        current.append(tile)
        size += nbytes
    if current:
        exchanges.append(current)
    return exchanges


def _sample_tiles(rectangles, symmetric):
    """Tiles spread over a symmetric matrix that hold the streaming median's sample.

    Bit-reversed positions in the list of all tiles (row-major), taken until
    their entries reach ``MEDIAN_SAMPLE``; none for a query matrix (no
    median). Returns a dict (ordered, fast membership).
    """
    from . import _lcc_sinks

    if not symmetric:
        return {}
    tiles = sorted(tile for rectangle in rectangles for tile in rectangle)
    picked, values = {}, 0
    for k in _spread_order(len(tiles)):
        if values >= _lcc_sinks.MEDIAN_SAMPLE:
            break
        picked[tiles[k]] = None
        values += tile_elements(tiles[k], symmetric)
    return picked


def streamed_exchange(
    runtime, step, *, parties, n_rows, n_cols, symmetric, decode, sink=None, **public
):
    """Protocol: ask ``parties`` for their tiles exchange by exchange; decode each at once.

    All exchanges count as one round (``same_round``): they are the blocks
    of one upload the server asks for in turn. While the server decodes one
    exchange, the parties already compute the next (a second thread asks
    for it): only these two exchanges' messages are alive on the server
    side. A :class:`NeighbourSink` may ask for the tiles once more (a second
    pass in the same round), when the first did not settle what it keeps.

    Parameters
    ----------
    runtime : Runtime
        The protocol runtime.
    step : callable
        The party step answering a request (:func:`lcc_tiles_step`,
        :func:`lcc_query_tiles_step`); gets ``tiles`` besides ``public``.
    parties : list of int
        The answering parties.
    n_rows, n_cols : int
        Shape of the decoded matrix.
    symmetric : bool
        Training distances or query distances.
    decode : dict
        Public constants of :func:`lcc_decode_tiles_step` (``weights``,
        ``p``, ``precision``, ``n_jobs``, ``tag``, ``what``).
    sink : DenseSink or NeighbourSink, default=None
        What the server keeps of the decoded tiles; ``None`` keeps the dense
        matrix.
    **public
        Public constants of ``step``; a callable value is called with
        ``(first, last)`` (whether the exchange is the first, the last) to
        give the constant of each exchange.

    Returns
    -------
    result : ndarray of shape (n_rows, n_cols) or NeighbourGraph
        What ``sink.finish()`` returns: the decoded matrix by default.
    """
    decode = dict(decode)
    tag, what = decode.pop("tag"), decode.pop("what")
    # resolved here: inside the single-threaded section below BLAS reports 1
    decode["n_jobs"] = _block_workers(decode.get("n_jobs"))
    if sink is None:
        sink = DenseSink(np.empty((n_rows, n_cols)), symmetric)
    exchanges = tile_exchanges(n_rows, n_cols, len(parties), symmetric=symmetric)
    progress = _BlockProgress(what, sum(len(tiles) for tiles in exchanges))

    def request(pass_, i):
        first = pass_ == 0 and i == 0
        last = i == len(exchanges) - 1
        constants = {k: (v(first, last) if callable(v) else v) for k, v in public.items()}
        return runtime.run(
            step, tag=tag, clients=parties, same_round=not first, tiles=exchanges[i], **constants
        )

    pass_ = 0
    # one process-wide limit around both threads: the limits each one sets and
    # lifts inside then never lift the other's
    with _thread_controller().limit(limits=1), ThreadPoolExecutor(1) as asker:
        while True:
            plan = [(pass_, i) for i in range(len(exchanges))]
            # The parties compute the next exchange while the server decodes one.
            pending = asker.submit(request, *plan[0])
            for k, (_, i) in enumerate(plan):
                received = pending.result()
                if k + 1 < len(plan):
                    pending = asker.submit(request, *plan[k + 1])
                runtime.server(
                    lcc_decode_tiles_step,
                    received,
                    tiles=exchanges[i],
                    sink=sink,
                    symmetric=symmetric,
                    progress=progress,
                    **decode,
                )
                # this exchange's messages are decoded: free them (their heap
                # pages serve the next exchanges' messages)
                del received
            # The pages the messages leave go back to the system once per pass,
            # not after every exchange: handed back and taken again, every page
            # of every message was a fault (19.8 million at 70,000 rows, 44 s of
            # system time), with the same peak memory.
            release_free_heap()
            if not sink.another_pass():
                break
            pass_ += 1
            runtime.stage("server: a second pass over the tiles")
    return sink.finish()


# --------------------------------------------------------------------------- #
# The whole protocol
# --------------------------------------------------------------------------- #
class LCCSetup:
    """Validated public parameters of one LCC distance round."""

    def __init__(self, *, n_clients, n_features, n_segments, n_colluders, prime, n_parties):
        for name, value in (("n_segments", n_segments), ("n_colluders", n_colluders)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < 1:
                # t = 0 would send the data segments in the clear
                raise ValueError(f"{name} must be >= 1, got {value}")
        if n_parties is not None and (
            isinstance(n_parties, bool) or not isinstance(n_parties, numbers.Integral)
        ):
            raise TypeError(f"n_parties must be an int or None, got {type(n_parties).__name__}")
        self.l, self.t = int(n_segments), int(n_colluders)
        self.n_clients = n_clients
        self.m = max(n_clients, int(n_parties) if n_parties is not None else 0)
        self.threshold = decoding_threshold(self.l, self.t)
        if self.m < self.threshold:
            raise ValueError(
                f"LCC decoding needs at least 2*n_segments + 2*n_colluders - 1 = "
                f"{self.threshold} share-holding parties, but there are {self.m} "
                f"({n_clients} data-holding clients"
                + (f", n_parties={n_parties}" if n_parties is not None else "")
                + "). Add share-holding parties with n_parties="
                f"{self.threshold}, or lower n_segments / n_colluders."
            )
        self.p = check_prime(prime, min_value=2 * max(self.m, self.l + self.t) + 1)
        self.width = -(-n_features // self.l) if n_features else 1
        self.plan = ModularProduct.plan(self.p, self.width)
        self.encoding = encoding_matrix(self.l, self.t, self.m, self.p)

    def decoding_bytes(self, n_samples, n_columns=None, *, streamed=False):
        """Bytes alive besides what the server keeps while a simulation decodes.

        Every party's encoded rows (``n_samples x w`` uint32 and a float64
        norm per row; in a deployment they stay on the parties' machines),
        the messages of two exchanges of the streamed upload (the one being
        decoded and the next one, :func:`tile_exchanges`: each at most a
        quarter of the decoded matrix and :data:`MAX_EXCHANGE_BYTES`), and
        the parties' operands and scratch for one request. ``n_columns``
        gives the columns of a query matrix (``n_samples`` query rows against
        the training rows). ``streamed`` is accepted for clarity: the count
        is the same whatever the server keeps.
        """
        n_rows = int(n_samples)
        n_cols = n_rows if n_columns is None else int(n_columns)
        shares = self.m * max(n_rows, n_cols) * (ELEMENT_BYTES * self.width + 8)
        exchange = min(
            max(EXCHANGE_FRACTION * 8.0 * n_rows * n_cols, MIN_EXCHANGE_BYTES),
            MAX_EXCHANGE_BYTES,
            ELEMENT_BYTES * n_rows * n_cols * self.m,
        )
        # a request's operands (a rectangle of blocks, two float64 limbs wide)
        # and the per-thread scratch tiles
        block = min(BLOCK_SIZE, max(n_rows, n_cols))
        side = math.isqrt(max(1, int(exchange / self.m) // (ELEMENT_BYTES * block**2))) + 1
        operands = 2 * min(side * block, max(n_rows, n_cols)) * 8 * (2 * self.width + 2)
        scratch = 16 * 8 * block**2
        return int(shares + 2 * exchange + operands + scratch)

    def survivors(self, dropped):
        dropped = set(check_party_indices([] if dropped is None else dropped, "dropped"))
        bad = sorted(j for j in dropped if not 0 <= j < self.m)
        if bad:
            raise ValueError(f"dropped names unknown parties {bad}: parties are 0..{self.m - 1}")
        alive = [j for j in range(self.m) if j not in dropped]
        if len(alive) < self.threshold:
            raise ValueError(
                f"too few parties answered: only {len(alive)} parties answered but decoding "
                f"needs {self.threshold} = 2*n_segments + 2*n_colluders - 1"
            )
        return alive


def lcc_exchange(
    runtime, setup, precision, row_numbers, *, dropped=None, n_jobs=None, n_threads=None, sink=None
):
    """Protocol: the share exchange, then the parties' encoded distances, streamed and decoded.

    Two rounds: every data client sends each party its shares (peer
    messages); then the server asks every answering party for the tiles of
    its encoded squared distances, a few exchanges that count as the one
    upload round (:func:`streamed_exchange`), and decodes each exchange as
    it arrives. The parties must have agreed on the offset and the
    precision (:func:`agree_scale`).

    Parameters
    ----------
    runtime : Runtime
        The protocol runtime, with ``setup.m`` parties.
    setup : LCCSetup
        The public parameters.
    precision : int
        The precision ``q``.
    row_numbers : list of ndarray of int
        The public row numbering: the global index of every row of each
        client, in the order of the client's rows.
    dropped : iterable of int, default=None
        Parties whose answers never arrive (stragglers).
    n_jobs : int, default=None
        The runtime's ``n_jobs``: sets the threads of the server's decoding,
        and of each party unless ``n_threads`` is given
        (:func:`party_threads`).
    n_threads : int, default=None
        Threads of each party for its tiles.
    sink : NeighbourSink, default=None
        What the server keeps of the decoded tiles (:func:`streamed_exchange`);
        ``None`` keeps the dense matrix.

    Returns
    -------
    D : ndarray of shape (n, n) or NeighbourGraph
        Squared distances of the quantized rows, in the public row numbering
        (or what ``sink`` kept of them).
    """
    m = setup.m
    runtime.stage(
        f"share exchange: clients quantize (q={precision}), Lagrange-encode and send "
        f"each of the {m} parties its shares"
    )
    runtime.run(
        lcc_share_step,
        tag=TAG_SHARE,
        precision=precision,
        n_colluders=setup.t,
        n_parties=setup.m,
        n_segments=setup.l,
        p=setup.p,
    )
    alive = setup.survivors(dropped)
    n_samples = int(sum(len(r) for r in row_numbers))
    runtime.stage(
        f"parties: encoded squared distances mod p, streamed to the server tile by tile "
        f"({len(alive)} of {m} answer); server: Lagrange decoding of every exchange"
    )
    numbering = [np.asarray(r, dtype=np.int64) for r in row_numbers]
    return streamed_exchange(
        runtime,
        lcc_tiles_step,
        parties=alive,
        n_rows=n_samples,
        n_cols=n_samples,
        symmetric=True,
        decode={
            "weights": server_decoding_weights(alive, setup.l, setup.t, setup.p),
            "p": setup.p,
            "precision": precision,
            "n_jobs": n_jobs,
            "tag": TAG_DISTANCES,
            "what": "decoding D",
        },
        p=setup.p,
        row_numbers=lambda first, last: numbering if first else None,
        n_samples=n_samples,
        n_threads=party_threads(n_jobs) if n_threads is None else n_threads,
        sink=sink,
    )


def lcc_query_distances(runtime, setup, precision, *, querier, parties, n_train, n_jobs=None):
    """Protocol: squared distances of a querying party's new rows to the training rows.

    The querying party Lagrange-encodes its new rows with fresh private
    noise and sends every party its shares (peer messages); every answering
    party uploads the tiles of the encoded distances between the query
    shares and its training shares (streamed, as in the fit), and the
    server decodes them. Run on a runtime that continues the parties of the
    fit (:meth:`InProcessRuntime.party_session
    <skfedclust.federation.InProcessRuntime.party_session>`), which still hold
    their encoded training rows, with the new rows as the querier's data.

    Parameters
    ----------
    runtime : Runtime
        The runtime of the fit.
    setup : LCCSetup
        The public parameters of the fit.
    precision : int
        The precision ``q`` of the fit.
    querier : int
        The querying party (a data client: it holds the offset).
    parties : list of int
        The parties that answer.
    n_train : int
        Number of training rows.
    n_jobs : int, default=None
        As in :func:`lcc_exchange`.

    Returns
    -------
    D : ndarray of shape (n_query, n_train)
        Squared distances of the quantized rows.
    """
    runtime.run(
        lcc_query_share_step,
        tag=TAG_QUERY_SHARE,
        clients=[querier],
        precision=precision,
        n_colluders=setup.t,
        n_parties=setup.m,
        n_segments=setup.l,
        p=setup.p,
    )
    return streamed_exchange(
        runtime,
        lcc_query_tiles_step,
        parties=list(parties),
        n_rows=int(runtime.client_sizes[querier]),
        n_cols=n_train,
        symmetric=False,
        decode={
            "weights": server_decoding_weights(parties, setup.l, setup.t, setup.p),
            "p": setup.p,
            "precision": precision,
            "n_jobs": n_jobs,
            "tag": TAG_QUERY_DISTANCES,
            "what": "decoding query distances",
        },
        p=setup.p,
        querier=querier,
        first=lambda first, last: first,
        last=lambda first, last: last,
        n_threads=party_threads(n_jobs),
    )


def lcc_squared_distances(
    clients,
    *,
    n_segments=2,
    n_colluders=2,
    precision="auto",
    prime=DEFAULT_PRIME,
    n_parties=None,
    dropped=None,
    random_state=None,
    n_jobs=None,
):
    """Exact global squared-distance matrix from Lagrange-coded shares (OmniFC).

    The clients first agree on their global mean by secure aggregation
    (pairwise-cancelling masks: no client's rows or sums are revealed) and
    subtract it, which leaves every distance unchanged but lets the field hold
    data far from the origin. Each client then quantizes its rows to the prime
    field, cuts them into ``n_segments`` segments, masks them with
    ``n_colluders`` uniformly random segments and sends one Lagrange-coded
    share of every row to every share-holding party. Each party computes the
    squared distances mod p of the encoded rows it holds and uploads them; the
    server decodes the exact squared distances of the quantized data from any
    ``2 l + 2 t - 1`` parties.
    Any ``n_colluders`` parties together learn nothing about the data
    (information-theoretic), however they pool their shares.

    The protocol runs on an :class:`~skfedclust.federation.InProcessRuntime`:
    three set-up exchanges (the bounds on ``|x|``; the secure sum's pairwise
    seeds; the bounds around the offset) and four rounds (the secure sum of
    the column sums, masked up and unmasked, with the mean down; the shares
    between parties; the encoded distances up, as tiles in a few exchanges).
    The memory ``D`` and the parties' shares need is checked before any round.

    Read more in the :ref:`User Guide <omnifc>`.

    Parameters
    ----------
    clients : list of array-like of shape (n_i, n_features)
        The rows of each data-holding client. Rows are numbered client by
        client. A client may hold no rows.
    n_segments : int, default=2
        Segments ``l`` each row is cut into (features are zero-padded to a
        multiple of ``l``; padding changes no distance).
    n_colluders : int, default=2
        Noise segments ``t`` = the number of colluding parties tolerated.
    precision : int or "auto", default="auto"
        Fixed-point bits ``q``: values are scaled by ``2**q`` and rounded.
        ``"auto"`` takes the largest ``q`` for which no squared distance of the
        data minus the common offset can wrap modulo ``prime``; a given ``q``
        that could wrap, or whose step ``2**-q`` hides the whole spread of the
        data, raises. ``q`` ranges over ``[-496, 537]``, where every decoded
        distance is an exact float64.
    prime : int, default=2**30 - 35
        Field modulus, a prime below ``2**31``. The default gives about 13
        bits of precision on unit-norm rows (the RMSE of ``D`` on
        L2-normalised digits is 1e-4) with two limbs stacked into one float64
        product per block. ``prime=2**23 - 15``
        (:data:`~skfedclust.secure.FAST_PRIME`) is the fast option: one
        product of half the width per block, about half the work of the
        distance round, for about three bits less (RMSE 8e-4).
    n_parties : int, default=None
        Share-holding parties. Data clients are parties ``0 .. n_clients - 1``;
        a larger value adds parties that hold no data. ``None`` (or a value
        not above the number of clients) uses the clients only.
    dropped : iterable of int, default=None
        Indices of the parties whose results never arrive (stragglers).
        Decoding uses the others; at least ``2 l + 2 t - 1`` must answer.
    random_state : int, RandomState instance or None, default=None
        Seeds the clients' noise. ``D`` does not depend on it.
    n_jobs : int, default=None
        Workers for the client steps (joblib) and the streamed block
        computation (threads). ``None`` runs both on as many threads as BLAS
        would use.

    Returns
    -------
    D : ndarray of shape (n_samples, n_samples)
        Squared Euclidean distances of the quantized rows, exact: ``D * 4**q``
        is the integer ``||rint(2**q x_i) - rint(2**q x_j)||**2``.
    ledger : :class:`~skfedclust.federation.Ledger`
        The runtime's record of every message, with its byte size: the bounds
        on ``|x|`` and the secure sum's pairwise seeds (set-up), the secure sum
        of the clients' column sums and the mean down, the shares between
        parties and the encoded distance matrices up.

    Raises
    ------
    ValueError
        If too few parties answer, ``dropped`` names unknown parties, or the
        data cannot be represented: squared distances beyond float64's range,
        or a spread below the resolution of the field.

    See Also
    --------
    skfedclust.OmniFCClustering : Clustering on top of this matrix.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.secure import lcc_squared_distances
    >>> rng = np.random.RandomState(0)
    >>> clients = [rng.rand(4, 3) for _ in range(7)]
    >>> D, ledger = lcc_squared_distances(clients, precision=8, random_state=0)
    >>> X = np.rint(np.vstack(clients) * 2**8)
    >>> bool(np.array_equal(D * 4**8, ((X[:, None] - X[None]) ** 2).sum(-1)))
    True
    >>> report = ledger.report()
    >>> report["setup_rounds"], report["rounds"]
    (3, 4)
    """
    arrays = _check_clients(clients)
    n_features = arrays[0].shape[1]
    setup = LCCSetup(
        n_clients=len(arrays),
        n_features=n_features,
        n_segments=n_segments,
        n_colluders=n_colluders,
        prime=prime,
        n_parties=n_parties,
    )
    setup.survivors(dropped)
    n_samples = sum(a.shape[0] for a in arrays)
    check_dense_memory(
        n_samples,
        n_samples,
        n_copies=1.0 + setup.decoding_bytes(n_samples) / (8.0 * n_samples * n_samples),
        what="the decoded distance matrix D and the parties' encoded rows",
        advice="Compute the distances of fewer rows (e.g. a random subsample).",
    )
    bounds = np.cumsum([0] + [a.shape[0] for a in arrays])
    rows = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    federation = Federation(np.vstack(arrays), rows)
    random_state = check_random_state(random_state)
    federation.spawn_seeds(random_state)
    # The parties run one after another, each on every worker: seven parties
    # on two cores would leave one idle in every other wave.
    workers = _block_workers(n_jobs)
    runtime = InProcessRuntime(
        federation,
        n_parties=setup.m,
        n_jobs=1,
        name="lcc_squared_distances",
        private_entropy=private_entropy(random_state),
    )
    scale = agree_scale(runtime, setup, precision)
    D = lcc_exchange(
        runtime, setup, scale.precision, rows, dropped=dropped, n_jobs=workers, n_threads=workers
    )
    return D, runtime.ledger


def _check_clients(clients):
    if not isinstance(clients, (list, tuple)) or len(clients) == 0:
        raise TypeError("clients must be a non-empty list of 2-D arrays, one per client")
    arrays = []
    for i, Xi in enumerate(clients):
        try:
            Xi = check_array(Xi, dtype=np.float64, ensure_min_samples=0, input_name=f"client {i}")
        except ValueError as exc:
            raise ValueError(f"client {i}: {exc}") from exc
        arrays.append(Xi)
    widths = {a.shape[1] for a in arrays}
    if len(widths) != 1:
        raise ValueError(f"clients must share the same features; got widths {sorted(widths)}")
    if sum(a.shape[0] for a in arrays) < 1:
        raise ValueError("the clients hold no rows")
    return arrays
