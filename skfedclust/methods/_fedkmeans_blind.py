"""Federated k-means the coordinator can neither steer nor watch (``coordinator="blind"``).

Lloyd's server step is a deterministic function of sums: the next centers
are the per-cluster means, the convergence test compares counts and shifts.
So the nodes run it themselves. So is fuzzy c-means' v1 aggregation
(Stallmann and Wilbik, 2022): the next centers are the global centers moved
by the total mass-weighted moves of the clients' local centers, divided by
the total masses; the same protocol runs it (``algorithm="fuzzy c-means
v1"``: one round per FFCM round, a fixed number of them). Every iteration each node sends its
per-cluster statistics, under pairwise masks, to every other node as sealed
peer messages (the coordinator relays ciphertext it cannot read or forge on
Flower); each node adds every upload, the masks cancel, and it computes the
next centers from the exact integer totals, the same bits on every node. The
coordinator chooses nothing (the start comes from local centers the nodes
share with each other and a seed from their committed nonces) and receives a
one-byte status per round and, at the end, the result: the centers, the
cluster sizes, ``n_iter_`` and the inertia, which every node sends and the
coordinator checks agree.

Rounds: two set-up rounds, then one per Lloyd iteration, and one for the
final labels' inertia and sizes. Each node checks, every round, that every
participant sent exactly one message of the round, that all of them saw the
same transcript of the previous round (rule ``consistent-view``), and that
the totals can be right (the counts add up to the row counts the nodes told
each other; rule ``well-formed``).

What each party learns:

* the coordinator: the final centers and sizes, ``n_iter_`` and the
  inertia, of the parameters the nodes accepted, and when each round ends;
* a node (or peers colluding with the coordinator, short of all but one):
  the other nodes' row counts, the binary order of each node's largest
  absolute value, their local centers and sizes (the k-FED start) and every
  iteration's totals over all nodes (per-cluster sums, counts, rows that
  changed cluster, the pooled per-feature variance), never another node's
  own statistics: its uploads are masked by a pair seed shared with each
  other node.

Totals are added in the ring of integers modulo 2**128: each float is
encoded in fixed point with a scale that leaves room for the sum of every
row (:func:`fixed_point_scales`), so the totals are exact and every node
decodes the same floats.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..clusterers import nearest_center
from ..federation import Reply, reads
from ..node._declarations import data_independent, peer_masked, result, summary
from ..node._gate import LOCKED_TO
from ..node._policy import DEFAULT_MIN_SUM_PARTICIPANTS
from ..node._refusal import NodeRefusal
from ..node._sum_guard import value_keys
from ..secure._secure_sum import keystream
from ._fedkmeans_relocation import donor_clusters, relocate_empty
from ._ffcm import fuzzy_local_update, local_centers
from ._kfed import weighted_kmeans_on_centers
from ._lloyd_pass import lloyd_pass

TAG_SETUP = "blind set-up"
TAG_REVEAL = "blind start"
TAG_ROUND = "blind iteration"
TAG_RESULT = "blind result"

_STATE = "blind k-means: state"
#: Below any float64's binary exponent: the scales of rows without spread stay finite.
_LEAST_EXPONENT = -1000
#: The most clients ``coordinator="auto"`` runs blind: every node receives every
#: other node's upload each iteration, so a node's cost grows with the federation;
#: at 50 clients (k=8, d=64) a node spends 2.5x the CPU and 59x the bytes of the
#: mode where the coordinator adds the sums (``benchmarks/results/fedkmeans_blind.md``); above
#: it ``"auto"`` runs the verified mode (:mod:`._fedkmeans_verified`).
BLIND_MAX_CLIENTS = 50
#: The restarts of the weighted k-means++ every node runs on the local centers.
START_RESTARTS = 10
#: The server steps the nodes can run: Lloyd's, and fuzzy c-means' v1 aggregation.
KMEANS, FUZZY_V1 = "k-means", "fuzzy c-means v1"
#: Iterations of the weighted k-means of a fuzzy fit's start (FFCM has no max_iter).
_FUZZY_START_MAX_ITER = 300


# --------------------------------------------------------------------------- #
# The ring: integers modulo 2**128, as (high, low) 64-bit words
# --------------------------------------------------------------------------- #
_TWO_32 = 2.0**32
_TWO_64 = 2.0**64


def ring_add(a, b):
    """``a + b`` modulo 2**128, element-wise, for arrays of (high, low) uint64 words."""
    low = a[:, 1] + b[:, 1]
    carry = (low < a[:, 1]).astype(np.uint64)
    return np.stack([a[:, 0] + b[:, 0] + carry, low], axis=1)


def ring_neg(a):
    """``-a`` modulo 2**128 (two's complement), element-wise."""
    low = ~a[:, 1] + np.uint64(1)
    carry = (low == 0).astype(np.uint64)
    return np.stack([~a[:, 0] + carry, low], axis=1)


def encode(values, scales):
    """``values`` in fixed point, ``round(v * 2**scale)`` modulo 2**128, as (high, low) words.

    Scaling by a power of two and rounding a float to an integer are exact,
    and so is splitting the integer into words (``fmod`` by a power of two).
    """
    scaled = np.rint(np.ldexp(np.asarray(values, dtype=np.float64), scales))
    magnitude = np.abs(scaled)
    low = np.fmod(magnitude, _TWO_64)
    high = (magnitude - low) / _TWO_64
    low_high = np.floor(low / _TWO_32)
    low_low = low - low_high * _TWO_32
    words = np.stack(
        [
            high.astype(np.uint64),
            (low_high.astype(np.uint64) << np.uint64(32)) | low_low.astype(np.uint64),
        ],
        axis=1,
    )
    negative = scaled < 0
    words[negative] = ring_neg(words[negative])
    return words


def decode(words, scales):
    """The floats of ring elements encoded with ``scales`` (signed, centred on 0).

    The same float operations on the same words: every node decodes the same
    bits from the same totals.
    """
    words = np.asarray(words, dtype=np.uint64).reshape(-1, 2)
    negative = words[:, 0] >= np.uint64(1 << 63)
    words = words.copy()
    words[negative] = ring_neg(words[negative])
    magnitude = words[:, 0].astype(np.float64) * _TWO_64 + words[:, 1].astype(np.float64)
    return np.ldexp(np.where(negative, -magnitude, magnitude), -np.asarray(scales))


def mask(length, pair_seeds, me, round_):
    """The sum of this node's pairwise masks of a round (added towards higher indices)."""
    total = np.zeros((length, 2), dtype=np.uint64)
    domain = f"blind k-means mask|{round_}".encode()
    for other, seed in pair_seeds.items():
        stream = keystream(seed, domain, 2 * length).reshape(length, 2)
        total = ring_add(total, stream if other > me else ring_neg(stream))
    return total


def fixed_point_scales(exponent, n_rows, n_features, n_clusters, n_runs, first):
    """The fixed-point scale of each entry of an upload (see :func:`upload_layout`).

    Every row and every center lie within ``2**exponent`` of 0 in each
    feature (the largest binary order of the nodes' values and of the start),
    so a deviation from a center is below ``2**(exponent + 1)`` and a squared
    distance below ``n_features * 2**(2 * exponent + 2)``; ``n_rows`` of them
    stay below ``2**126`` at these scales (one bit is the sign). The
    encoding's resolution, ``2**(exponent + 1 - room)``, is finer than a
    float64's at that magnitude by the room's margin: a common offset of the
    rows costs no precision the float arithmetic keeps.
    """
    room = 126 - int(n_rows).bit_length()
    per_run = np.concatenate(
        [
            np.full(n_clusters * n_features, room - (exponent + 1)),
            np.zeros(2 * n_clusters + 1, dtype=np.int64),
        ]
    )
    scales = [np.tile(per_run, n_runs)]
    if first:
        scales.append(np.full(n_features, room - (2 * exponent + 2)))
    return np.concatenate(scales).astype(np.int64)


def inertia_scales(exponent, n_rows, n_features, n_clusters):
    """Scales of a run's per-cluster inertia (squared distances, as the final inertia's)."""
    room = 126 - int(n_rows).bit_length() - int(n_features).bit_length()
    return np.full(n_clusters, room - (2 * exponent + 2), dtype=np.int64)


def far_row_scales(exponent, n_rows, n_features, n_donors):
    """Scales of a run's far rows: per donor a sum of deviations (as Lloyd's), then counts.

    The counts: per donor its far rows, the clients holding far rows, and
    the clients holding its other rows.
    """
    room = 126 - int(n_rows).bit_length()
    return np.concatenate(
        [
            np.full(n_donors * n_features, room - (exponent + 1)),
            np.zeros(3 * n_donors, dtype=np.int64),
        ]
    ).astype(np.int64)


def final_scales(exponent, n_rows, n_features, n_clusters, n_runs):
    """Scales of the final upload: per run the inertia, then the sizes and client counts."""
    room = 126 - int(n_rows).bit_length() - int(n_features).bit_length()
    per_run = np.concatenate([[room - (2 * exponent + 2)], np.zeros(2 * n_clusters, np.int64)])
    return np.tile(per_run, n_runs).astype(np.int64)


def _digest(*parts):
    h = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else np.ascontiguousarray(part).tobytes()
        h.update(len(data).to_bytes(8, "big") + data)
    return h.digest()


def _as_bytes(value):
    """Bytes as sent (a codec may hand back a bytes-like value)."""
    return bytes(value)


# --------------------------------------------------------------------------- #
# What a node keeps between rounds
# --------------------------------------------------------------------------- #
class _Run:
    """One Lloyd run of a node (``n_init`` runs move in the same rounds)."""

    __slots__ = ("centers", "labels", "n_iter", "done", "strict", "phase", "pending", "backing")

    def __init__(self, centers, phase="lloyd"):
        self.centers = np.array(centers, dtype=np.float64)
        self.labels = None
        self.n_iter = 0
        self.done = False
        self.strict = False
        #: What the run uploads next: Lloyd statistics (``"lloyd"``), or, in an
        #: iteration that left a cluster empty, its clusters' inertia
        #: (``"inertia"``) and then the donors' far rows (``"far"``); a fuzzy
        #: c-means run always its mass-weighted moves (``"fuzzy"``).
        self.phase = phase
        #: The iteration being finished while an empty cluster is relocated.
        self.pending = None
        #: Per cluster, the rows and the clients whose values made its center.
        self.backing = None


def _peer_messages(inbox, tag, participants, me):
    """The message of each other participant of the round, refusing a missing or extra one."""
    got = inbox.get(tag, {})
    senders = set(got)
    expected = set(participants) - {me}
    if senders != expected:
        missing = sorted(expected - senders)
        raise NodeRefusal(
            "consistent-view",
            f"round {tag!r}: no message from participant(s) {missing}"
            if missing
            else f"round {tag!r}: messages from outside the fit: {sorted(senders - expected)}",
        )
    return {p: got[p] for p in sorted(got)}


def _check_views(messages, own_view, tag):
    """Every participant saw the same transcript of the previous round as this node."""
    for sender, message in messages.items():
        if _as_bytes(message["view"]) != own_view:
            raise NodeRefusal(
                "consistent-view",
                f"round {tag!r}: participant {sender} saw another transcript of the previous "
                "round than this node (an upload that differs between receivers)",
            )


def _check_parameters(party, n_clusters, n_init, max_iter, tol, participants):
    """The fit's parameters against the node's policy, before anything is computed.

    ``participants`` is sorted (the set-up sorts it).
    """
    policy = party.policy
    if party.index not in participants:
        raise NodeRefusal("well-formed", f"party {party.index} is not among the participants")
    ids = np.asarray(participants)
    if np.any(ids[1:] == ids[:-1]):  # sorted: a repeat is next to itself
        # A party named twice would count twice towards min-sum-participants.
        raise NodeRefusal("well-formed", f"participants {participants} name a party more than once")
    if len(participants) < policy.min_sum_participants:
        raise NodeRefusal(
            "min-sum-participants",
            f"{len(participants)} participants; this node adds totals over at least "
            f"{policy.min_sum_participants}",
        )
    for name, value in (("n_clusters", n_clusters), ("n_init", n_init), ("max_iter", max_iter)):
        if isinstance(value, bool) or int(value) != value or int(value) < 1:
            raise NodeRefusal("well-formed", f"{name}={value!r} is not an int >= 1")
    if not (np.isfinite(tol) and tol >= 0):
        raise NodeRefusal("well-formed", f"tol={tol!r} is not a finite number >= 0")


def _check_algorithm(algorithm, fuzzifier, n_local_iter, n_init):
    """The server step the nodes run, and its own parameters, as public numbers."""
    if algorithm == KMEANS:
        if fuzzifier is not None or n_local_iter is not None:
            raise NodeRefusal("well-formed", "k-means takes no fuzzifier nor local iterations")
        return None, None
    if algorithm != FUZZY_V1:
        raise NodeRefusal(
            "well-formed", f"algorithm={algorithm!r}; the nodes run {KMEANS!r} or {FUZZY_V1!r}"
        )
    if isinstance(fuzzifier, bool) or not (np.isfinite(float(fuzzifier)) and fuzzifier > 1):
        raise NodeRefusal("well-formed", f"fuzzifier={fuzzifier!r} is not a finite number > 1")
    if isinstance(n_local_iter, bool) or int(n_local_iter) != n_local_iter or n_local_iter < 1:
        raise NodeRefusal("well-formed", f"n_local_iter={n_local_iter!r} is not an int >= 1")
    if n_init != 1:
        raise NodeRefusal("well-formed", f"fuzzy c-means runs one start (n_init={n_init!r})")
    return float(fuzzifier), int(n_local_iter)


# --------------------------------------------------------------------------- #
# Client steps
# --------------------------------------------------------------------------- #
@summary
@reads()
def blind_setup_step(
    data,
    inbox,
    state,
    party,
    *,
    n_clusters,
    n_init,
    max_iter,
    tol,
    participants,
    init=None,
    algorithm=KMEANS,
    fuzzifier=None,
    n_local_iter=None,
    mode="blind",
):
    """Round 1: pair seeds, a nonce commitment, the row count, the scale and the local centers.

    The parameters are fixed here, once: every later round reads none from the
    coordinator. ``algorithm`` names the server step the nodes run: Lloyd's
    (``max_iter`` iterations at most, ``tol``) or fuzzy c-means' v1
    aggregation (``max_iter`` rounds of ``n_local_iter`` local iterations
    with ``fuzzifier``; ``tol`` 0). ``mode="verified"``
    (:mod:`._fedkmeans_verified`): pair seeds go to the node's neighbours only,
    the lowest participant also sends every other the key of the fit's codes,
    and the public part goes to the coordinator, which shows it to every
    node. A pair seed is drawn from the node's private generator for
    each participant of higher index and sealed to it; the row count, the
    binary order of the node's largest absolute value (the fixed-point
    scales) and the local centers and their sizes (the k-FED start, means of
    local clusters, checked by the node's policy as any summary) go to every
    peer, never to the coordinator. An array ``init`` is a start the
    coordinator chose: a node runs it only for a method its operator names in
    ``allow-coordinator-centers`` (rule ``coordinator-centers``).
    """
    if _STATE in state:
        raise NodeRefusal("stage", "this node has set up a blind k-means fit already")
    if init is not None:
        party.policy.check_coordinator_centers(
            blind_setup_step,
            what="starts a blind fit from centers the coordinator chose (an array init)",
        )
    # int() returns a Python int itself: in a simulation the nodes' lists share
    # the coordinator's int objects (new ones would cost n^2 of them).
    participants = sorted(map(int, participants))
    _check_parameters(party, n_clusters, n_init, max_iter, tol, participants)
    fuzzifier, n_local_iter = _check_algorithm(algorithm, fuzzifier, n_local_iter, n_init)
    if mode not in ("blind", "verified"):
        raise NodeRefusal("well-formed", f"mode={mode!r}; the nodes run 'blind' or 'verified'")
    me = party.index
    # Drawn first in both modes, so that the rest of the private stream does
    # not depend on the mode's branch below.
    nonce = party.secret_bytes(32)
    public = (int(n_clusters), int(n_init), int(max_iter), float(tol))
    if algorithm == FUZZY_V1:
        public += (algorithm, fuzzifier, n_local_iter)
    if mode != "blind":
        public += (mode,)
    parameters = _digest(
        repr(public).encode(),
        np.asarray(participants, dtype=np.int64),
        b"" if init is None else np.asarray(init, dtype=np.float64),
    )
    settings = {
        "stage": "set up",
        "parameters": parameters,
        "n_clusters": int(n_clusters),
        "n_init": int(n_init),
        "max_iter": int(max_iter),
        "tol": float(tol),
        "algorithm": algorithm,
        "fuzzifier": fuzzifier,
        "n_local_iter": n_local_iter,
        "init": None if init is None else np.asarray(init, dtype=np.float64),
        "participants": participants,
    }
    attested = {
        "rows": np.int64(data.shape[0]),
        # The binary order of the node's largest value fixes the fixed-point
        # scales; sent here, so that every node checks all saw the same before
        # any statistic leaves it (a peer telling nodes different orders would
        # make some uploads round to nothing and isolate the others).
        "exponent": np.int64(_binary_order(np.abs(data).max() if data.size else 0.0)),
    }
    if mode == "verified":
        from ._fedkmeans_verified import verified_setup

        return verified_setup(party, settings, attested)
    common = {"parameters": parameters, "commitment": _digest(b"nonce", nonce), **attested}
    if init is None:
        start = local_centers(data, party, n_clusters)
        if start is not None:
            common["local centers"], common["local sizes"] = start
    seeds = {}
    to_peers = {}
    for other in participants:
        if other == me:
            continue
        message = dict(common)
        if other > me:
            seeds[other] = party.secret_bytes(32)
            message["pair seed"] = seeds[other]
        to_peers[other] = message
    state = {**settings, "nonce": nonce, "seeds": seeds, "own": common}
    keep = {LOCKED_TO: (__name__,), _STATE: state}
    return Reply(to_peers=to_peers, keep=keep, send=np.int8(0))


# The nonce and the digest of the set-up round (a commitment to what the
# peers already received) move with no row of this node.
@data_independent
@reads(TAG_SETUP)
def blind_reveal_step(data, inbox, state, party):
    """Round 2: check the set-up and reveal the nonce, with the digest of the set-up as seen.

    Every participant must have announced the same parameters. Each node
    sends its nonce and the digest of every set-up message it received (the
    row counts, the binary orders of the largest values, the local centers):
    the next round checks that all saw the same set-up before any statistic
    leaves a node.
    """
    kept = _stage(state, "set up")
    me, participants = party.index, kept["participants"]
    messages = _peer_messages(inbox, TAG_SETUP, participants, me)
    for sender, message in messages.items():
        if _as_bytes(message["parameters"]) != kept["parameters"]:
            raise NodeRefusal(
                "consistent-view",
                f"participant {sender} agreed to other parameters than this node",
            )
    seeds = dict(kept["seeds"])
    for sender, message in messages.items():
        if sender < me:
            seeds[sender] = _as_bytes(message["pair seed"])
    everyone = {**messages, me: kept["own"]}
    rows = {p: int(m["rows"]) for p, m in everyone.items()}
    n_rows = sum(rows.values())
    view = _setup_view(everyone)
    new = {
        **kept,
        "stage": "revealed",
        "seeds": seeds,
        "rows": rows,
        "n_rows": n_rows,
        "holders": sum(1 for count in rows.values() if count > 0),
        "n_features": data.shape[1],
        "exponents": {p: int(m["exponent"]) for p, m in everyone.items()},
        "commitments": {p: _as_bytes(m["commitment"]) for p, m in everyone.items()},
        "local": {
            p: (np.asarray(m["local centers"]), np.asarray(m["local sizes"]))
            for p, m in everyone.items()
            if "local centers" in m
        },
        "view": view,
    }
    message = {"nonce": kept["nonce"], "view": view}
    new["own"] = message
    return Reply(
        to_peers={p: message for p in participants if p != me},
        keep={_STATE: new},
        send=np.int8(0),
    )


def _setup_view(everyone):
    parts = []
    for p in sorted(everyone):
        m = everyone[p]
        parts += [np.int64(p), m["parameters"], m["commitment"], np.int64(m["rows"])]
        parts.append(np.int64(m["exponent"]))
        if "local centers" in m:
            parts += [np.asarray(m["local centers"], np.float64), np.asarray(m["local sizes"])]
    return _digest(*parts)


def _binary_order(value):
    """The binary exponent of a float (``value < 2**order``), very negative for 0."""
    return int(np.frexp(value)[1]) if value > 0 else -1074


def _stage(state, *expected):
    kept = state.get(_STATE)
    if kept is None or kept["stage"] not in expected:
        raise NodeRefusal(
            "stage",
            f"blind k-means step out of order (this node is at "
            f"{None if kept is None else kept['stage']!r}, the step needs {expected})",
        )
    return kept


def _starts(kept, seed):
    """The starting centers of every run, computed alike on every node."""
    if kept["init"] is not None:
        return [kept["init"]]
    local = kept.get("start local", kept["local"])
    pooled = [local[p] for p in sorted(local)]
    n_local = sum(len(centers) for centers, _ in pooled)
    if n_local < kept["n_clusters"]:
        raise ValueError(
            f"the participants shared {n_local} local centers (each backed by enough rows "
            f"of its node), fewer than n_clusters={kept['n_clusters']}: fit fewer clusters "
            "or pass an array init"
        )
    max_iter = kept["max_iter"] if kept["algorithm"] == KMEANS else _FUZZY_START_MAX_ITER
    key = _digest(
        seed,
        np.array([kept["n_clusters"], kept["n_init"], max_iter], dtype=np.int64),
        *[
            part
            for centers, sizes in pooled
            for part in (np.asarray(centers, np.float64), np.asarray(sizes, np.int64))
        ],
    )
    if key not in _STARTS_COMPUTED:
        if len(_STARTS_COMPUTED) >= _STARTS_KEPT:
            _STARTS_COMPUTED.pop(next(iter(_STARTS_COMPUTED)))
        _STARTS_COMPUTED[key] = [
            weighted_kmeans_on_centers(
                pooled,
                n_clusters=kept["n_clusters"],
                n_init=START_RESTARTS,
                seed=int.from_bytes(_digest(seed, np.int64(r))[:4], "big") >> 1,
                max_iter=max_iter,
            )
            for r in range(kept["n_init"])
        ]
    return [start.copy() for start in _STARTS_COMPUTED[key]]


#: The starts of this process by the digest of all their inputs. Every node
#: computes the start from the same inputs; in a simulation, where every party
#: runs in one process, the first party's computation serves the others: the
#: value of a deterministic function of inputs each of them holds (nothing any
#: party keeps), the arithmetic of a fit of many clients done once, not once
#: per client. Across processes (deployed nodes) nothing is shared.
_STARTS_COMPUTED = {}
_STARTS_KEPT = 8


@peer_masked
@reads(TAG_REVEAL, TAG_ROUND)
def blind_iteration_step(data, inbox, state, party):
    """One round per Lloyd iteration: add the peers' uploads, move the centers, upload again.

    The first round opens the nonces (each must match its commitment), draws
    the starts from them and fixes the fixed-point scales. Every round then
    adds this node's upload to every peer's, takes the masks off, and moves
    each run's centers as scikit-learn's Lloyd does: the new centers are
    the means of their clusters (an empty cluster keeps its center), a run
    stops on no row changing cluster, on a squared center shift of at most
    ``tol`` times the pooled per-feature variance, or at ``max_iter``. Then
    it uploads, masked, the statistics of the runs still going (or, when all
    have stopped, its final labels' inertia, sizes and presence per cluster).
    The coordinator gets one byte: whether this node has uploaded its final
    statistics.
    """
    kept = _stage(state, "revealed", "iterating")
    me, participants = party.index, kept["participants"]
    kept = dict(kept)
    if kept["stage"] == "revealed":
        kept = _open_start(kept, _peer_messages(inbox, TAG_REVEAL, participants, me), me)
    else:
        messages = _peer_messages(inbox, TAG_ROUND, participants, me)
        _check_views(messages, kept["view"], TAG_ROUND)
        totals = _add_uploads(kept, messages)
        kept["view"] = _round_view(kept, messages, me)
        if kept["final"]:
            raise NodeRefusal("stage", "this node has uploaded its final statistics already")
        advance(kept, totals)
    values, scales = round_statistics(kept, data, party)
    kept["round"] += 1
    kept["scales"] = scales
    upload = ring_add(encode(values, scales), mask(len(values), kept["seeds"], me, kept["round"]))
    message = {
        "upload": upload,
        "view": kept["view"],
    }
    kept["own"] = message
    kept["stage"] = "iterating"
    return Reply(
        to_peers={p: message for p in participants if p != me},
        keep={_STATE: kept},
        send=np.int8(kept["final"]),
    )


def round_statistics(kept, data, party):
    """This node's statistics of the round and their fixed-point scales.

    The active runs' (:func:`_iteration_statistics`), or, once every run has
    stopped, the final labels' (and ``kept["final"]`` is set). The first
    iteration's statistics join the node's ledger (:func:`_join_first_totals`).
    """
    if all(run.done for run in kept["runs"]):
        kept["final"] = True
        return _final_statistics(kept, data)
    first = kept["round"] == 0
    values, scales = _iteration_statistics(kept, data)
    if first:
        _join_first_totals(party, kept)
    return values, scales


def _open_start(kept, messages, me):
    """The runs' starts and the fixed-point exponent, from the revealed nonces and exponents."""
    _check_views(messages, kept["view"], TAG_REVEAL)
    nonces = {me: kept["nonce"]}
    for sender, message in messages.items():
        nonce = _as_bytes(message["nonce"])
        if _digest(b"nonce", nonce) != kept["commitments"][sender]:
            raise NodeRefusal(
                "sampling", f"participant {sender}'s nonce does not open its commitment"
            )
        nonces[sender] = nonce
    order = kept["participants"]
    view = _digest(kept["view"], *[nonces[p] for p in order])
    return open_start(kept, _digest(*[nonces[p] for p in order]), view)


def open_start(kept, seed, view):
    """The runs' starts, from ``seed`` (the hash of the opened nonces), and the fixed point.

    ``view``: the transcript so far, kept for the next round's check.
    """
    starts = _starts(kept, seed)
    # Starting centers outside the rows' hull (an array init) widen the bound.
    extent = max(float(np.abs(np.asarray(s)).max()) for s in starts)
    exponent = max(max(kept["exponents"].values()), _binary_order(extent))
    return {
        **kept,
        # Identical rows (no spread) still get scales a float can hold.
        "exponent": max(exponent, _LEAST_EXPONENT),
        "runs": [_started_run(kept, s) for s in starts],
        "round": 0,
        "final": False,
        # Lloyd's tol needs the pooled variance (from the first totals); fuzzy
        # c-means runs its rounds without a convergence test.
        "variance": None if kept["algorithm"] == KMEANS else np.zeros(kept["n_features"]),
        "reference": np.asarray(starts[0], dtype=np.float64).mean(axis=0),
        "view": view,
    }


def _started_run(kept, start):
    """A run from ``start``, its centers backed by the local centers nearest them.

    An array start is the coordinator's choice, run only where the node's
    operator allows it: its centers stand for no row (every row and client
    back them). A start computed from the local centers stands for the rows
    and clients of the local centers nearest each of its centers.
    """
    run = _Run(start, phase="lloyd" if kept["algorithm"] == KMEANS else "fuzzy")
    k = len(run.centers)
    if kept["init"] is not None or not kept["local"]:
        run.backing = np.tile([kept["n_rows"], len(kept["participants"])], (k, 1)).astype(float)
        return run
    local = kept["local"]
    owners = np.concatenate([np.full(len(local[p][0]), p) for p in local])
    centers = np.vstack([np.asarray(local[p][0], dtype=np.float64) for p in local])
    sizes = np.concatenate([np.asarray(local[p][1], dtype=np.float64) for p in local])
    nearest = nearest_center(centers, run.centers)
    rows = np.bincount(nearest, weights=sizes, minlength=k)
    # The clients holding a local center nearest each start center, each once.
    pairs = np.unique(np.column_stack([owners, nearest]), axis=0)
    clients = np.bincount(pairs[:, 1], minlength=k).astype(np.float64)
    run.backing = np.column_stack([rows, clients])
    return run


def _round_view(kept, messages, me):
    """The transcript so far: the last view and every participant's upload, in order."""
    uploads = {**{p: m["upload"] for p, m in messages.items()}, me: kept["own"]["upload"]}
    return _digest(kept["view"], *[np.asarray(uploads[p]) for p in sorted(uploads)])


def _add_uploads(kept, messages):
    total = kept["own"]["upload"]
    for message in messages.values():
        words = np.asarray(message["upload"])
        if words.shape != total.shape or words.dtype != np.uint64:
            raise NodeRefusal(
                "well-formed",
                f"an upload of shape {words.shape} and dtype {words.dtype}; expected "
                f"{total.shape} uint64 words",
            )
        total = ring_add(total, words)
    return decode(total, kept["scales"])


def _active(kept):
    return [run for run in kept["runs"] if not run.done]


def _iteration_statistics(kept, data):
    """This node's upload for the active runs, each by its phase, and their scales."""
    k, d = kept["n_clusters"], data.shape[1]
    active = _active(kept)
    first = kept["round"] == 0
    exponent, n_rows = kept["exponent"], kept["n_rows"]
    parts, scales = [], []
    for run in active:
        if run.phase == "fuzzy":
            moves, masses, squares, present = _fuzzy_statistics(kept, data, run)
            parts += [moves.ravel(), masses, squares, present]
            if first:
                kept.setdefault("first statistics", []).append((masses, moves))
            scales.append(fuzzy_scales(exponent, n_rows, d, k))
        elif run.phase == "lloyd":
            labels, sums, counts, _, changed = lloyd_pass(
                data, run.centers, run.labels, inertia=False
            )
            run.labels = labels
            # The clients holding rows of each cluster: the backing of its next center.
            present = (counts > 0).astype(np.float64)
            parts += [sums.ravel(), counts.astype(np.float64), present, [float(changed)]]
            if first:
                kept.setdefault("first statistics", []).append((counts, sums))
            scales.append(fixed_point_scales(exponent, n_rows, d, k, 1, False))
        elif run.phase == "inertia":
            deviations = data - run.centers[run.labels]
            squared = np.einsum("ij,ij->i", deviations, deviations)
            parts.append(np.bincount(run.labels, weights=squared, minlength=k))
            scales.append(inertia_scales(exponent, n_rows, d, k))
        else:
            far_sums, far_counts, near_counts = _far_rows(data, run)
            parts += [far_sums.ravel(), far_counts, far_counts > 0, near_counts > 0]
            scales.append(far_row_scales(exponent, n_rows, d, len(far_counts)))
    if kept["variance"] is None:
        # The pooled variance (for tol) from squared deviations from a point all
        # nodes know, near the rows: the first start's mean.
        parts.append(((data - kept["reference"]) ** 2).sum(axis=0))
        scales.append(np.full(d, 126 - int(n_rows).bit_length() - (2 * exponent + 2), np.int64))
    values = np.concatenate(parts)
    scales = np.concatenate(scales).astype(np.int64)
    _check_bounds(values, scales)
    return values, scales


def _join_first_totals(party, kept):
    """Record the first iteration's statistics in the node's ledger, refusing a re-run.

    A second fit whose first totals differ from an earlier fit's by one or two
    clients (the same start over a federation short of one node, or a start
    nudged so that every row keeps its cluster) gives peers colluding with
    the coordinator the difference: those clients' statistics. The node's
    privacy ledger keys the statistic by what it reveals (its per-cluster
    counts, which a nudged start does not move, and its sums) and refuses,
    across fits, a sum over participants that would isolate fewer than
    ``min-sum-participants`` clients (rule ``one-sum-per-input``, as for
    every secure sum).
    """
    ledger = party.ledger
    if ledger is None:
        return
    keys = []
    for counts, sums in kept.pop("first statistics", ()):
        keys += [*value_keys(counts), *value_keys(sums)]
    if keys:
        ledger.join_sum(
            tuple(keys),
            ledger.identities(party, kept["participants"]),
            minimum=party.policy.min_sum_participants,
        )


def _far_rows(data, run):
    """Per donor cluster, the sum of its rows' deviations beyond the threshold, and their count.

    The far-rows rule of ``empty_clusters="far-rows"``: the deviations from
    the donor's center of the iteration, the threshold its mean squared
    distance.
    """
    donors, thresholds = run.pending["donors"], run.pending["thresholds"]
    centers = run.pending["centers"]
    sums = np.zeros((len(donors), data.shape[1]))
    counts = np.zeros(len(donors))
    near = np.zeros(len(donors))
    for i, j in enumerate(donors):
        deviations = data[run.labels == j] - centers[j]
        far = np.einsum("ij,ij->i", deviations, deviations) > thresholds[i]
        sums[i] = deviations[far].sum(axis=0)
        counts[i] = np.count_nonzero(far)
        near[i] = len(far) - counts[i]
    return sums, counts, near


def _final_statistics(kept, data):
    k, d = kept["n_clusters"], data.shape[1]
    parts = []
    for run in kept["runs"]:
        if not run.strict:
            # scikit-learn relabels with the final centers unless no row moved.
            run.labels, _, _, _, _ = lloyd_pass(data, run.centers, run.labels, inertia=False)
        deviations = data - run.centers[run.labels]
        counts = np.bincount(run.labels, minlength=k).astype(np.float64)
        parts += [[float(np.einsum("ij,ij->", deviations, deviations))], counts]
        parts.append((counts > 0).astype(np.float64))
    values = np.concatenate(parts)
    scales = final_scales(kept["exponent"], kept["n_rows"], d, k, len(kept["runs"]))
    _check_bounds(values, scales)
    return values, scales


def _check_bounds(values, scales):
    # An honest node's values always fit (the scales leave room for every row);
    # a value that does not would wrap around the ring and corrupt the totals.
    if not np.all(np.isfinite(values)) or np.any(np.abs(np.ldexp(values, scales)) >= 2.0**126):
        raise NodeRefusal("well-formed", "a statistic exceeds the fit's fixed-point bounds")


def advance(kept, totals):
    """Move every active run by the totals of its last upload, as the coordinator's Lloyd would.

    The same arithmetic as ``coordinator="sees-totals"``: new centers are the
    clusters' means; an iteration that leaves a cluster empty relocates it
    to the far rows of the cluster of largest inertia (two more rounds, for
    the clusters' inertia and the donors' far rows, as the coordinator's two
    more sums); then the run stops on no row changing cluster, on a squared
    center shift of at most ``tol`` times the pooled per-feature variance,
    or at ``max_iter``.
    """
    k, d = kept["n_clusters"], kept["n_features"]
    active = _active(kept)
    offset = 0
    for run in active:
        length = _block_length(run, k, d)
        block = totals[offset : offset + length]
        offset += length
        if run.phase == "fuzzy":
            _fuzzy_totals(kept, run, block, k, d)
        elif run.phase == "lloyd":
            _lloyd_totals(kept, run, block, k, d)
        elif run.phase == "inertia":
            _inertia_totals(kept, run, block)
        else:
            _far_row_totals(kept, run, block, d)
    if kept["variance"] is None:
        kept["variance"] = _pooled_variance(kept, active[0], totals[offset:])
        kept["tol_scaled"] = float(np.mean(kept["variance"])) * kept["tol"]
    for run in active:
        if run.pending is not None and run.pending.get("finish"):
            _finish_iteration(kept, run)


def _pooled_variance(kept, run, squares):
    """Per feature, the pooled variance from the first iteration's totals.

    ``squares`` adds ``(x - a)**2`` over every row, ``a`` the reference
    point; the first run's Lloyd totals give ``sum(x - a)``: per cluster its
    sum of deviations plus its count times its center's offset from ``a``.
    """
    pending = run.pending
    n = kept["n_rows"]
    offsets = pending["sums"] + pending["counts"][:, None] * (
        pending["centers"] - kept["reference"]
    )
    first_moment = offsets.sum(axis=0) / n
    return np.maximum(squares / n - first_moment**2, 0.0)


def _block_length(run, k, d):
    if run.phase == "fuzzy":
        return k * d + 3 * k
    if run.phase == "lloyd":
        return k * d + 2 * k + 1
    if run.phase == "inertia":
        return k
    return len(run.pending["donors"]) * (d + 3)


def _lloyd_totals(kept, run, block, k, d):
    sums = block[: k * d].reshape(k, d)
    counts = block[k * d : k * d + k]
    present = block[k * d + k : k * d + 2 * k]
    changed = block[-1]
    if round(counts.sum()) != kept["n_rows"]:
        raise NodeRefusal(
            "well-formed",
            f"the clusters' counts add up to {counts.sum():g} rows; the participants "
            f"hold {kept['n_rows']}",
        )
    _check_counts(counts, present, len(kept["participants"]), "the clusters'")
    filled = counts > 0
    new = run.centers.copy()
    new[filled] = run.centers[filled] + sums[filled] / counts[filled, None]
    run.n_iter += 1
    backing = run.backing.copy()
    backing[filled] = np.column_stack([counts, present])[filled]
    run.pending = {
        "centers": run.centers,
        "new": new,
        "backing": backing,
        "sums": sums,
        "counts": counts,
        "changed": changed,
        "relocated": False,
        "finish": bool(filled.all()),
    }
    if not filled.all():
        run.phase = "inertia"


def _fuzzy_statistics(kept, data, run):
    """A fuzzy c-means round's upload: mass-weighted moves, masses, squared weights, presence.

    The moves and masses are those of ``coordinator="sees-totals"`` (their
    totals move the centers as v1's mass-weighted average does); the sum of
    the squared weights ``u_ij^m`` gives each center's effective number of
    rows (Kish), and the presence flags the clients holding rows nearest
    each center: a release backs its centers by both.
    """
    local, masses, weights = fuzzy_local_update(
        data, run.centers, fuzzifier=kept["fuzzifier"], n_local_iter=kept["n_local_iter"]
    )
    moves = masses[:, None] * (local - run.centers)
    squares = np.einsum("ij,ij->j", weights, weights)
    nearest = nearest_center(data, run.centers)
    present = np.bincount(nearest, minlength=len(run.centers)) > 0
    return moves, masses, squares, present.astype(np.float64)


def fuzzy_scales(exponent, n_rows, n_features, n_clusters):
    """Scales of a fuzzy round: the moves as Lloyd's sums, the masses and squares as fractions.

    A weight ``u_ij^m`` is at most 1 and a row's weights add up to at most 1,
    so the masses and the squared weights add up to at most ``n_rows``; a
    local center is a weighted mean of rows, so a move is below
    ``2**(exponent + 1)`` times its mass.
    """
    room = 126 - int(n_rows).bit_length()
    return np.concatenate(
        [
            np.full(n_clusters * n_features, room - (exponent + 1)),
            np.full(2 * n_clusters, room),
            np.zeros(n_clusters, dtype=np.int64),
        ]
    ).astype(np.int64)


def _fuzzy_totals(kept, run, block, k, d):
    """Move a fuzzy run by v1's rule: ``c_j + sum(w_j (c'_j - c_j)) / sum(w_j)``."""
    moves = block[: k * d].reshape(k, d)
    masses, squares, present = block[k * d :].reshape(3, k)
    n_rows, participants = kept["n_rows"], len(kept["participants"])
    # Rounding of each node's float sums and of the encoding: far below these.
    slack = 1e-9 * n_rows
    if (
        np.any(masses < 0)
        or np.any(squares < 0)
        or np.any(squares > masses + slack)
        or masses.sum() > n_rows + slack
    ):
        raise NodeRefusal("well-formed", "the clusters' fuzzy masses cannot be right")
    if (
        np.any(present != np.rint(present))
        or np.any(present < 0)
        or np.any(present > participants)
        # Every node holding rows has a nearest center for each.
        or present.sum() < kept["holders"]
    ):
        raise NodeRefusal("well-formed", "the clusters' client counts cannot be right")
    filled = masses > 0
    new = run.centers.copy()
    new[filled] = run.centers[filled] + moves[filled] / masses[filled, None]
    effective = np.zeros(k)
    positive = squares > 0
    effective[positive] = masses[positive] ** 2 / squares[positive]
    run.centers = new
    run.backing = np.column_stack([effective, present])
    run.n_iter += 1
    run.done = run.n_iter >= kept["max_iter"]


def _inertia_totals(kept, run, inertia):
    pending = run.pending
    counts = pending["counts"]
    if np.any(inertia < 0) or np.any((counts == 0) & (inertia != 0)):
        raise NodeRefusal("well-formed", "the clusters' inertia cannot be right")
    donors = donor_clusters(counts, inertia)
    if not donors:
        pending["finish"] = True
        return
    pending["inertia"] = inertia
    pending["donors"] = np.array(donors, dtype=np.intp)
    pending["thresholds"] = inertia[donors] / counts[donors]
    run.phase = "far"


def _far_row_totals(kept, run, block, d):
    pending = run.pending
    n_donors = len(pending["donors"])
    far_sums = block[: n_donors * d].reshape(n_donors, d)
    far_counts, far_present, near_present = block[n_donors * d :].reshape(3, n_donors)
    donor_counts = pending["counts"][pending["donors"]]
    participants = len(kept["participants"])
    _check_counts(far_counts, far_present, participants, "the far rows'", donor_counts)
    _check_counts(donor_counts - far_counts, near_present, participants, "the near rows'")
    _relocated_backing(pending, far_counts, far_present, near_present)
    new = relocate_empty(
        pending["centers"],
        pending["new"].copy(),
        pending["sums"],
        pending["counts"],
        pending["inertia"],
        (pending["donors"], far_sums, far_counts),
    )
    pending["relocated"] = not np.array_equal(new, pending["new"])
    pending["new"] = new
    pending["finish"] = True


def _check_counts(counts, present, participants, what, most=None):
    """Counts and client counts that honest nodes' uploads can add up to.

    Row counts are whole numbers from 0 (to ``most``); a cluster holds rows
    of between one client and as many as it has rows, and of no more clients
    than take part. A colluder's own upload still shifts them within these
    bounds (no node can verify another's statistics).
    """
    counts, present = np.asarray(counts), np.asarray(present)
    bad = (
        np.any(counts < 0)
        or np.any(counts != np.rint(counts))
        or np.any(present < 0)
        or np.any(present > participants)
        or np.any(present > counts)
        or np.any((counts > 0) & (present < 1))
        or (most is not None and np.any(counts > most))
    )
    if bad:
        raise NodeRefusal("well-formed", f"{what} counts or client counts cannot be right")


def _relocated_backing(pending, far_counts, far_present, near_present):
    """The backing of relocated centers, by the rule of :func:`relocate_empty`."""
    counts, backing = pending["counts"], pending["backing"]
    empty = np.flatnonzero(counts == 0)
    for e, j, m, far, near in zip(empty, pending["donors"], far_counts, far_present, near_present):
        if m == 0 or m >= counts[j]:
            continue
        backing[e] = (m, far)
        backing[j] = (counts[j] - m, near)


def _finish_iteration(kept, run):
    """The end of an iteration: the new centers, and whether the run stops."""
    pending, run.pending, run.phase = run.pending, None, "lloyd"
    new = pending["new"]
    shift = float(((new - run.centers) ** 2).sum())
    run.centers = new
    run.backing = pending["backing"]
    if pending["changed"] == 0:
        run.done = True
        # scikit-learn keeps the last assignment when no row moved; a relocated
        # center moved, so the final labels are computed again.
        run.strict = not pending["relocated"]
    elif shift <= kept["tol_scaled"] or run.n_iter >= kept["max_iter"]:
        run.done = True


@result
@reads(TAG_ROUND)
def blind_release_step(data, inbox, state, party):
    """The release: the final centers, sizes, ``n_iter`` and inertia, to the coordinator.

    Each node opens the final totals and releases the run of least inertia,
    only if every released cluster holds at least the node policy's
    ``min-rows-per-vector`` rows and ``min-sum-participants`` clients (an
    empty cluster releases its center with size 0). Every node sends the
    same result; the coordinator checks they agree.
    """
    kept = dict(_stage(state, "iterating"))
    if not kept["final"]:
        raise NodeRefusal("stage", "the final statistics have not been uploaded")
    me, participants = party.index, kept["participants"]
    messages = _peer_messages(inbox, TAG_ROUND, participants, me)
    _check_views(messages, kept["view"], TAG_ROUND)
    totals = _add_uploads(kept, messages)
    return release(kept, totals, party)


def release(kept, totals, party):
    """The reply of the release step from the final totals (see :func:`blind_release_step`)."""
    k = kept["n_clusters"]
    best = None
    for r, run in enumerate(kept["runs"]):
        block = totals[r * (2 * k + 1) : (r + 1) * (2 * k + 1)]
        inertia, sizes, clients = block[0], block[1 : k + 1], block[k + 1 :]
        if round(sizes.sum()) != kept["n_rows"]:
            raise NodeRefusal("well-formed", "the final sizes do not add up to the rows")
        if best is None or inertia < best[0]:
            best = (inertia, run, sizes, clients)
    inertia, run, sizes, clients = best
    _check_release(party.policy, sizes, clients)
    # The released centers are the means the last iteration computed: their
    # own clusters must be backed too, not only the final relabelling's.
    backing_rows, backing_clients = run.backing.T
    _check_release(party.policy, backing_rows, backing_clients, "the last iteration")
    labels = run.labels
    kept["stage"] = "released"
    return Reply(
        send=(
            run.centers,
            np.rint(sizes).astype(np.int64),
            np.array([run.n_iter], dtype=np.int64),
            np.array([inertia]),
        ),
        keep={_STATE: {"stage": "released"}},
        output={"labels": labels},
    )


def _check_release(policy, sizes, clients, whose="the result"):
    rows, members = policy.min_rows_per_vector, policy.min_sum_participants
    for j in np.flatnonzero(sizes > 0):
        if rows is not None and sizes[j] < rows:
            raise NodeRefusal(
                "min-rows-per-vector",
                f"cluster {j} of {whose} holds {sizes[j]:g} rows (fewer than "
                f"min-rows-per-vector={rows}): its center would be a near-row",
            )
        if policy.refuse_raw_rows and clients[j] < members:
            raise NodeRefusal(
                "min-sum-participants",
                f"cluster {j} of {whose} holds rows of {clients[j]:g} clients (fewer "
                f"than min-sum-participants={members})",
            )


# --------------------------------------------------------------------------- #
# The coordinator's part: relay, count rounds, compare the results
# --------------------------------------------------------------------------- #
def coordinator_mode(requested, unsupported, n_clients):
    """The mode a fit runs: ``requested``, or for ``"auto"`` the nodes' where they can.

    ``unsupported``: ``{option: whether the fit sets it}`` for the options the
    nodes' protocols do not run; any set, or fewer clients than a sum takes,
    runs ``"sees-totals"``. Otherwise ``"blind"`` up to
    :data:`BLIND_MAX_CLIENTS` clients and ``"verified"`` above.
    """
    if requested != "auto":
        return requested
    if any(unsupported.values()) or n_clients < DEFAULT_MIN_SUM_PARTICIPANTS:
        return "sees-totals"
    return "blind" if n_clients <= BLIND_MAX_CLIENTS else "verified"


def run_setup(runtime, clients, *, mode, **parameters):
    """The set-up round of a fit the nodes run (``mode``: blind or verified); its replies."""
    what = "fuzzy c-means" if parameters.get("algorithm") == FUZZY_V1 else "k-means"
    runtime.stage(f"client step: {mode} {what} set-up (pair seeds, the start's local centers)")
    return runtime.run(
        blind_setup_step,
        tag=TAG_SETUP,
        setup=True,
        clients=clients,
        participants=clients,
        mode=mode,
        **parameters,
    )


def run_blind_fit(runtime, *, n_clusters, n_init, max_iter, tol, init, error, **algorithm):
    """Run a blind fit over every client of ``runtime``; the nodes' agreed result.

    The coordinator fixes the parameters once, at the set-up, relays the
    rounds and reads one byte of each node per round (whether it uploaded
    its final statistics); then every node releases its result, and the
    results must be the same bits (``error`` otherwise). ``algorithm``:
    ``algorithm``, ``fuzzifier`` and ``n_local_iter`` of a fuzzy c-means fit
    (see :func:`blind_setup_step`). Returns the centers, the sizes, the
    number of iterations and the inertia.
    """
    clients = list(range(runtime.n_clients))
    what = "fuzzy c-means" if algorithm.get("algorithm") == FUZZY_V1 else "k-means"
    parameters = dict(n_clusters=n_clusters, n_init=n_init, max_iter=max_iter, tol=tol)
    run_setup(runtime, clients, mode="blind", init=init, **parameters, **algorithm)
    runtime.run(blind_reveal_step, tag=TAG_REVEAL, setup=True, clients=clients)
    # At most three rounds an iteration (Lloyd's, and the clusters' inertia and
    # far rows where one went empty), and the final upload.
    rounds = 3 * max_iter + 1
    for r in range(rounds):
        # The coordinator sees no center: only that the nodes go on.
        runtime.stage(f"round {r + 1} (at most {rounds}): a blind {what} step on the nodes")
        final = [bool(s) for s in runtime.run(blind_iteration_step, tag=TAG_ROUND).list()]
        if any(final) != all(final):
            raise error(
                f"the nodes disagree on the end of the fit ({final}): a node saw "
                "other totals than the others"
            )
        if all(final):
            break
    runtime.stage("client step: the blind fit's result, from every node")
    results = runtime.run(blind_release_step, tag=TAG_RESULT, clients=clients).list()
    runtime.stage("server step: the nodes' results must agree")
    first = results[0]
    for other in results[1:]:
        if not all(np.array_equal(a, b) for a, b in zip(first, other)):
            raise error("the nodes released different results: one of them saw other totals")
    return first
