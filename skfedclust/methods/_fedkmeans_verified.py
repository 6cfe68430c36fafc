"""The coordinator adds, the nodes compute and verify (``coordinator="verified"``).

The coordinator-blind protocol (:mod:`._fedkmeans_blind`) relays every upload
to every node: each node's bytes and CPU per iteration grow with the
federation. Above the size where that stops paying, this variant keeps the
blind protocol's arithmetic and lets the coordinator add the uploads, as a
secure sum's server does, but not choose anything: every node checks that the
total it is sent is the sum of the uploads, and computes the next centers
itself. The check is a linear message authentication code (as the linearly
homomorphic hashes of VeriFL, Guo et al. 2021, but keyed by a secret the
nodes share): each node also uploads ``R_t x`` for a fresh random matrix
``R_t`` of the round that the coordinator does not know, so a total the
coordinator changed by any ``delta != 0`` passes with probability at most
``2**-64`` (:data:`MAC_ROWS` rows, each checked modulo ``2**64``).

Per node the cost does not grow with the federation: masks shared with
:func:`neighbours` (about ``2 log2 n`` of the other nodes), one upload to the
coordinator and the total and its code back per round, and a set-up in which
the coordinator announces the total rows, the largest binary order and the
nodes drawn for the start (at most :data:`START_NODES`). Before any statistic
leaves a node, every node checks that all were told the same (the masked sum
of their words of agreement); a coordinator that told nodes different scales
would otherwise isolate one node's statistics in the high bits of a total.
The lowest participant draws the key of the codes and sends it, sealed, to
every other: its cost is O(n), once.

Rounds: two set-up rounds, one per iteration (and two more in an iteration
that leaves a cluster empty), one for the result: as the blind protocol.

What the coordinator learns: every iteration's totals over all participants
(per-cluster sums of deviations, counts, presence, rows that changed
cluster), each node's row count and binary order, the local centers and sizes
of the drawn nodes (summaries, checked by each node's policy), and the
result. It chooses no center: the start comes from the drawn local centers
with a seed under the key, every later center from the nodes' own
arithmetic on totals they verified. A node colluding with the coordinator
can bias its own upload, as in the blind mode; the lowest participant, which
draws the key, could give it to the coordinator, and with it the power to
forge totals.
"""

from __future__ import annotations

import hashlib
import hmac
import math

import numpy as np

from ..federation import Reply, reads
from ..node._declarations import masked_sum, result, summary
from ..node._gate import LOCKED_TO
from ..node._refusal import NodeRefusal
from ..secure._secure_sum import keystream
from . import _fedkmeans_blind as blind
from ._ffcm import local_centers

TAG_PUBLIC = "verified set-up"
TAG_AGREEMENT = "verified agreement"
TAG_START = "verified start"
TAG_UPLOAD = "verified upload"
TAG_TOTAL = "verified total"
TAG_RESULT = "verified result"

#: Rows of the round's random matrix: a forged total passes each with probability
#: at most 1/2 (a change by a multiple of 2**63), all of them with at most 2**-64.
MAC_ROWS = 64
#: The fewest neighbours on each side of a node in the ring of participants.
_LEAST_NEIGHBOURS = 3
_MASK32 = np.uint64(0xFFFFFFFF)


def neighbours(participants, me):
    """The participants ``me`` shares masks with: ``h`` on each side in their sorted ring.

    ``h = max(3, ceil(log2 n))``; everyone when ``2 h`` covers the others. The
    relation is symmetric, so every pair's masks cancel in the total. An
    upload is hidden from the coordinator as long as one of its node's
    neighbours does not collude with it.
    """
    order = sorted(participants)
    n = len(order)
    h = max(_LEAST_NEIGHBOURS, math.ceil(math.log2(max(n, 2))))
    if 2 * h >= n - 1:
        return [p for p in order if p != me]
    at = order.index(me)
    return sorted({order[(at + s) % n] for s in range(-h, h + 1) if s != 0})


def to_limbs(words):
    """(high, low) words of ring elements as four 32-bit limbs each, in uint64 slots.

    Sums of fewer than ``2**32`` limbs stay below ``2**64``: adding uploads
    modulo ``2**64`` slot by slot loses no carry, so a code linear modulo
    ``2**64`` covers the ring's sums exactly.
    """
    words = np.asarray(words, dtype=np.uint64).reshape(-1, 2)
    high, low = words[:, 0], words[:, 1]
    return np.stack([low & _MASK32, low >> np.uint64(32), high & _MASK32, high >> np.uint64(32)], 1)


def from_limbs(limbs):
    """The (high, low) words of ring elements from sums of their limbs (carries propagated).

    Each limb sum is below ``2**64``; the element is ``L0 + L1 2**32 + L2 2**64
    + L3 2**96`` modulo ``2**128``, split into words with the one carry the low
    word can pass up.
    """
    limbs = np.asarray(limbs, dtype=np.uint64).reshape(-1, 4)
    l0, l1, l2, l3 = limbs.T
    middle = (l0 >> np.uint64(32)) + (l1 & _MASK32)
    low = (l0 & _MASK32) | ((middle & _MASK32) << np.uint64(32))
    high = (l1 >> np.uint64(32)) + (middle >> np.uint64(32)) + l2 + (l3 << np.uint64(32))
    return np.stack([high, low], axis=1)


def _mac_matrix(kept, length):
    """The round's random matrix, from the fit's key, the round and the agreement."""
    domain = f"verified code|{kept['round']}|".encode() + kept["agreement"].tobytes()
    return keystream(kept["key"], domain, MAC_ROWS * length).reshape(MAC_ROWS, length)


def _neighbour_mask(seed, domain, length):
    """A pairwise mask: SHAKE-128 (FIPS 202) for the short uploads of a round, where a
    ChaCha20 context costs more than its output; ChaCha20 for long ones."""
    if length > _SHAKE_WORDS:
        return keystream(seed, domain, length)
    return np.frombuffer(
        hashlib.shake_128(bytes(seed) + b"|" + domain).digest(8 * length), dtype=np.uint64
    )


#: Masks of at most this many words come from SHAKE-128.
_SHAKE_WORDS = 4096


def _slot_mask(length, pair_seeds, me, round_, what):
    """The sum of this node's masks of a round over ``length`` slots modulo 2**64."""
    total = np.zeros(length, dtype=np.uint64)
    domain = f"verified {what}|{round_}".encode()
    for other, seed in pair_seeds.items():
        stream = _neighbour_mask(seed, domain, length)
        total = total + stream if other > me else total - stream
    return total


def draw_digest(key):
    """What the lowest participant tells the coordinator: the draw of the start's nodes."""
    return hashlib.blake2b(b"verified draw", key=key, digest_size=32).digest()


def drawn_nodes(draw, participants):
    """The at most :data:`START_NODES` participants whose local centers make the start.

    Positions in the sorted participants drawn without replacement from a
    keystream under the draw (64-bit words modulo their number: a bias below
    ``n / 2**64``): the same on every machine, and each node checks the
    announced nodes at a cost that does not grow with the federation.
    """
    order = sorted(participants)
    n = len(order)
    if n <= START_NODES:
        return order
    chosen, batch = set(), 0
    while len(chosen) < START_NODES:
        words = keystream(bytes(draw), b"verified start nodes|%d" % batch, 2 * START_NODES)
        for position in (words % np.uint64(n)).tolist():
            chosen.add(position)
            if len(chosen) == START_NODES:
                break
        batch += 1
    return sorted(order[position] for position in chosen)


#: The most nodes whose local centers make the start of a verified fit: every
#: node computes the start, so its cost must not grow with the federation.
START_NODES = 50


def _keyed(key, what, *parts):
    """A keyed BLAKE2b digest (a MAC by design, RFC 7693) of length-prefixed parts."""
    h = hashlib.blake2b(what.encode(), key=key, digest_size=32)
    for part in parts:
        h.update(len(part).to_bytes(8, "big") + part)
    return h.digest()


def _agreement(kept, announced):
    """The four words every node computes alike when all agreed to the same fit.

    The parameters (the mode among them), the rows and binary order the
    coordinator announced, the draw and the nodes drawn: the scales of every
    upload follow from them, so no statistic leaves a node before all agree.
    """
    digest = _keyed(
        kept["key"],
        "verified agreement",
        kept["parameters"],
        int(announced["rows"]).to_bytes(8, "big", signed=True),
        int(announced["exponent"]).to_bytes(8, "big", signed=True),
        bytes(announced["draw"]),
        np.asarray(announced["drawn"], dtype=np.int64).tobytes(),
    )
    return np.frombuffer(digest, dtype=np.uint64).copy()


def _local_digest(centers, sizes):
    return (
        np.ascontiguousarray(centers, np.float64).tobytes()
        + np.ascontiguousarray(sizes, np.int64).tobytes()
    )


# --------------------------------------------------------------------------- #
# Client steps (the set-up is blind_setup_step with mode="verified")
def verified_setup(party, settings, attested):
    """The set-up of ``mode="verified"``: seeds to neighbours, the code key, the public part.

    ``settings`` are the fit's parameters as the node checked them and
    ``attested`` its row count and binary order (:func:`~._fedkmeans_blind.blind_setup_step`).
    Pair seeds go to the node's neighbours only (those of higher index draw
    them); the lowest participant draws the key of the fit's codes, sends it
    sealed to every other participant, and tells the coordinator the draw of
    the nodes whose local centers make the start (a hash of the key: the
    coordinator cannot choose it). The coordinator gets the row count and the
    binary order of the largest value; the local centers are computed only
    if the draw names the node.
    """
    me, participants = party.index, settings["participants"]
    near = neighbours(participants, me)
    seeds, to_peers = {}, {}
    for other in near:
        if other > me:
            seeds[other] = party.secret_bytes(32)
            to_peers[other] = {"pair seed": seeds[other]}
    key = None
    public = dict(attested)
    if me == participants[0]:
        key = party.secret_bytes(32)
        for other in participants[1:]:
            to_peers[other] = {**to_peers.get(other, {}), "code key": key}
        public["draw"] = draw_digest(key)
    state = {
        **settings,
        "mode": "verified",
        "neighbours": near,
        "seeds": seeds,
        "key": key,
        "own": public,
    }
    keep = {LOCKED_TO: (blind.__name__, __name__), blind._STATE: state}
    return Reply(to_peers=to_peers, keep=keep, send=public)


# --------------------------------------------------------------------------- #
@summary
@reads(blind.TAG_SETUP, TAG_PUBLIC)
def verified_reveal_step(data, inbox, state, party):
    """Round 2: check what the coordinator announced, agree on it, and send the drawn start.

    The coordinator announces the total row count, the largest binary order
    (the fixed point's scales), the lowest participant's draw and the nodes
    it draws. The node checks its own rows and order fit them and that the
    draw is the key's; it sends a masked word of agreement (equal on every
    node that was told the same), and, if drawn, its local centers with their
    code, a summary its policy checks as any.
    """
    kept = dict(blind._stage(state, "set up"))
    me, participants = party.index, kept["participants"]
    peers = inbox.get(blind.TAG_SETUP, {})
    seeds = dict(kept["seeds"])
    for sender in kept["neighbours"]:
        if sender < me:
            if sender not in peers or "pair seed" not in peers[sender]:
                raise NodeRefusal("consistent-view", f"no pair seed from participant {sender}")
            seeds[sender] = blind._as_bytes(peers[sender]["pair seed"])
    leader = participants[0]
    if me != leader:
        if leader not in peers or "code key" not in peers[leader]:
            raise NodeRefusal("consistent-view", f"no code key from participant {leader}")
        kept["key"] = blind._as_bytes(peers[leader]["code key"])
    announced = inbox.get(TAG_PUBLIC)
    if not isinstance(announced, dict) or not {"rows", "exponent", "draw", "drawn"} <= set(
        announced
    ):
        raise NodeRefusal("well-formed", "the coordinator announced no verified set-up")
    rows, exponent = int(announced["rows"]), int(announced["exponent"])
    own_rows, own_exponent = int(kept["own"]["rows"]), int(kept["own"]["exponent"])
    if rows < own_rows or rows < 1 or exponent < own_exponent:
        raise NodeRefusal(
            "well-formed",
            f"the coordinator announced {rows} rows and binary order {exponent}; this node "
            f"alone holds {own_rows} rows of order {own_exponent}",
        )
    if blind._as_bytes(announced["draw"]) != draw_digest(kept["key"]):
        raise NodeRefusal("sampling", "the draw announced is not the lowest participant's")
    drawn = [int(p) for p in np.asarray(announced["drawn"]).ravel()]
    if drawn != (drawn_nodes(announced["draw"], participants) if kept["init"] is None else []):
        raise NodeRefusal("sampling", "the nodes announced for the start are not the draw's")
    agreement = _agreement(kept, announced)
    kept.update(
        stage="revealed",
        seeds=seeds,
        n_rows=rows,
        # Only that some node holds rows: the coordinator adds the row counts.
        holders=1,
        exponents={"announced": exponent},
        n_features=data.shape[1],
        drawn=drawn,
        agreement=agreement,
        round=0,
    )
    message = {"agreement": agreement + _slot_mask(4, seeds, me, 0, "agreement")}
    if me in drawn:
        # A drawn node too small for local centers sends none, coded too: the
        # coordinator can leave out no drawn node's centers unnoticed.
        # Only a drawn node computes its local centers: at 10,000 nodes the
        # others' local k-means would cost more than the whole fit.
        local = local_centers(data, party, kept["n_clusters"])
        centers, sizes = local or (np.empty((0, data.shape[1])), np.empty(0, np.int64))
        message["local centers"], message["local sizes"] = centers, sizes
        message["code"] = _keyed(
            kept["key"], "verified local", me.to_bytes(8, "big"), _local_digest(centers, sizes)
        )
    return Reply(send=message, keep={blind._STATE: kept})


def _open_verified_start(kept, inbox):
    """Check that every node agreed, and the drawn local centers; the runs' starts."""
    shown = inbox.get(TAG_START)
    if not isinstance(shown, dict) or "agreement" not in shown or "local" not in shown:
        raise NodeRefusal("well-formed", "the coordinator sent no start of a verified fit")
    total = np.asarray(shown["agreement"])
    n = np.uint64(len(kept["participants"]))
    if total.dtype != np.uint64 or not np.array_equal(total, kept["agreement"] * n):
        raise NodeRefusal(
            "consistent-view",
            "the participants were not all told the same fit (parameters, rows, binary order "
            "or draw): their words of agreement do not add up",
        )
    local = shown["local"]
    if not isinstance(local, dict) or set(local) != set(kept["drawn"]):
        raise NodeRefusal(
            "sampling",
            "the local centers shown are not those of the nodes the draw named, each once",
        )
    checked = {}
    for p, message in local.items():
        centers = np.asarray(message["local centers"], dtype=np.float64)
        sizes = np.asarray(message["local sizes"], dtype=np.int64)
        code = _keyed(
            kept["key"], "verified local", int(p).to_bytes(8, "big"), _local_digest(centers, sizes)
        )
        if not hmac.compare_digest(blind._as_bytes(message["code"]), code):
            raise NodeRefusal(
                "consistent-view",
                f"participant {p}'s local centers were shown to this node altered (their code "
                "does not match)",
            )
        if len(centers):
            checked[int(p)] = (centers, sizes)
    kept["local"] = checked
    seed = _keyed(kept["key"], "verified start")
    return blind.open_start(kept, seed, view=None)


def _verified_total(kept, inbox):
    """The total the coordinator sent, checked against its code; decoded."""
    message = inbox.get(TAG_TOTAL)
    length = len(kept["scales"])
    if not isinstance(message, dict):
        raise NodeRefusal("consistent-view", "no total from the coordinator")
    total = np.asarray(message["total"])
    code = np.asarray(message["code"])
    if (
        total.dtype != np.uint64
        or total.shape != (length * 4,)
        or code.dtype != np.uint64
        or code.shape != (MAC_ROWS,)
    ):
        raise NodeRefusal("well-formed", "the total or its code is not of the round's shape")
    expected = _mac_matrix(kept, len(total)) @ total
    if not np.array_equal(expected, code):
        raise NodeRefusal(
            "consistent-view",
            "the total the coordinator sent is not the sum of the uploads (its code does not "
            "match)",
        )
    return blind.decode(from_limbs(total), kept["scales"])


def _upload(kept, values, scales, me):
    kept["round"] += 1
    kept["scales"] = scales
    limbs = to_limbs(blind.encode(values, scales)).ravel()
    code = _mac_matrix(kept, len(limbs)) @ limbs
    # One keystream per neighbour masks the upload and its code.
    masks = _slot_mask(len(limbs) + MAC_ROWS, kept["seeds"], me, kept["round"], "upload")
    masked, code = limbs + masks[: len(limbs)], code + masks[len(limbs) :]
    return {"upload": masked, "code": code, "final": np.int8(kept["final"])}


@masked_sum
@reads(TAG_START, TAG_TOTAL)
def verified_iteration_step(data, inbox, state, party):
    """One round per Lloyd iteration: check the total, move the centers, upload again.

    As :func:`~._fedkmeans_blind.blind_iteration_step`, except that the
    upload goes to the coordinator, masked with the node's neighbours only,
    with its code under the round's random matrix, and the next round starts
    from the total the coordinator sends back, which the node checks against
    the total of the codes before it uses it.
    """
    kept = blind._stage(state, "revealed", "iterating")
    me = party.index
    kept = dict(kept)
    if kept["stage"] == "revealed":
        kept = _open_verified_start(kept, inbox)
    else:
        if kept["final"]:
            raise NodeRefusal("stage", "this node has uploaded its final statistics already")
        blind.advance(kept, _verified_total(kept, inbox))
    values, scales = blind.round_statistics(kept, data, party)
    message = _upload(kept, values, scales, me)
    kept["stage"] = "iterating"
    return Reply(send=message, keep={blind._STATE: kept})


@result
@reads(TAG_TOTAL)
def verified_release_step(data, inbox, state, party):
    """The release: as the blind protocol's, from the verified final total."""
    kept = dict(blind._stage(state, "iterating"))
    if not kept["final"]:
        raise NodeRefusal("stage", "the final statistics have not been uploaded")
    totals = _verified_total(kept, inbox)
    return blind.release(kept, totals, party)


# --------------------------------------------------------------------------- #
# The coordinator's part
# --------------------------------------------------------------------------- #
def add_uploads(uploads):
    """Server step: the sum of the masked uploads and of their codes, modulo 2**64."""
    messages = uploads.list()
    finals = {int(np.asarray(m["final"])) for m in messages}
    total = np.zeros_like(np.asarray(messages[0]["upload"], dtype=np.uint64))
    code = np.zeros(MAC_ROWS, dtype=np.uint64)
    for message in messages:
        total = total + np.asarray(message["upload"], dtype=np.uint64)
        code = code + np.asarray(message["code"], dtype=np.uint64)
    return {"total": total, "code": code}, finals


def announce(public, *, participants, start_drawn):
    """Server step: the total rows, the largest binary order, the draw and the drawn nodes."""
    messages = {int(c): m for c, m in public.items()}
    leader = min(participants)
    draw = bytes(messages[leader]["draw"])
    return {
        "rows": np.int64(sum(int(m["rows"]) for m in messages.values())),
        "exponent": np.int64(max(int(m["exponent"]) for m in messages.values())),
        "draw": draw,
        "drawn": np.array(drawn_nodes(draw, participants) if start_drawn else [], dtype=np.int64),
    }


def start_message(replies):
    """Server step: the sum of the masked words of agreement, and the drawn local centers."""
    messages = {int(c): m for c, m in replies.items()}
    agreement = np.zeros(4, dtype=np.uint64)
    for message in messages.values():
        agreement = agreement + np.asarray(message["agreement"], dtype=np.uint64)
    local = {
        c: {k: m[k] for k in ("local centers", "local sizes", "code")}
        for c, m in messages.items()
        if "local centers" in m
    }
    return {"agreement": agreement, "local": local}


def run_verified_fit(runtime, *, n_clusters, n_init, max_iter, tol, init, error, **algorithm):
    """A verified fit over every client of ``runtime``; the nodes' agreed result.

    As :func:`~._fedkmeans_blind.run_blind_fit`; the coordinator also
    announces the total rows, the largest binary order and the start's drawn
    nodes, shows every node the drawn local centers, and adds the uploads of
    each round.
    """
    clients = list(range(runtime.n_clients))
    what = "fuzzy c-means" if algorithm.get("algorithm") == blind.FUZZY_V1 else "k-means"
    parameters = dict(n_clusters=n_clusters, n_init=n_init, max_iter=max_iter, tol=tol)
    public = blind.run_setup(
        runtime, clients, mode="verified", init=init, **parameters, **algorithm
    )
    announced = runtime.server(announce, public, participants=clients, start_drawn=init is None)
    runtime.broadcast(announced, tag=TAG_PUBLIC, clients=clients)
    replies = runtime.run(verified_reveal_step, tag=TAG_AGREEMENT, setup=True, clients=clients)
    runtime.broadcast(runtime.server(start_message, replies), tag=TAG_START, clients=clients)
    rounds = 3 * max_iter + 1
    for r in range(rounds):
        runtime.stage(f"round {r + 1} (at most {rounds}): a verified {what} step on the nodes")
        uploads = runtime.run(verified_iteration_step, tag=TAG_UPLOAD, clients=clients)
        runtime.stage("server step: the sum of the masked uploads")
        total, finals = runtime.server(add_uploads, uploads)
        runtime.broadcast(total, tag=TAG_TOTAL, clients=clients)
        if len(finals) != 1:
            raise error(
                f"the nodes disagree on the end of the fit ({sorted(finals)}): a node saw "
                "other totals than the others"
            )
        if finals == {1}:
            break
    runtime.stage("client step: the verified fit's result, from every node")
    results = runtime.run(verified_release_step, tag=TAG_RESULT, clients=clients).list()
    first = results[0]
    for other in results[1:]:
        if not all(np.array_equal(a, b) for a, b in zip(first, other)):
            raise error("the nodes released different results: one of them saw other totals")
    return first
