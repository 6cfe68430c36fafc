"""Client sampling from randomness the clients contribute (commit, then reveal).

A coordinator that picks which clients join each sampled secure sum can put
one honest client among clients it controls, and the sum of that sample is
then the honest client's vector. Bonawitz et al. (CCS 2017) and Bell et al.
(CCS 2020) take the sample from randomness the server cannot steer; here the
clients make it:

1. every active client sends a commitment ``SHA-256(domain, slot, horizon,
   nonce)`` to a 32-byte nonce from its cryptographic generator
   (:meth:`~skfedclust.federation.Party.secret_bytes`); ``horizon``, the most
   sampled iterations of the fit, is bound before any nonce is known;
2. the server relays every commitment with its slot; each client finds its
   own in its slot and only then reveals its nonce;
3. the seed of the fit's samples is the SHA-256 of the slots and nonces.
   A client checks the relayed nonces against the commitments it saw the
   first time it is sampled: its own nonce, unknown to the server when the
   other commitments were fixed, is in the seed.

The sample of iteration ``t`` is the first ``m`` clients of a permutation of
the active clients drawn from ``(seed, t)`` (:func:`public_sample`). A client
asked to add its vector checks (:func:`check_sampled`) that it is in that
sample, that the sum's participants are exactly the sample, that ``t`` grows
over the fit and does not pass the horizon, and that the active clients only
shrink. No client can steer the seed: its nonce is fixed before it sees the
others'. The server still chooses ``m`` (the node's ``min-sum-participants``
bounds it from below), which clients it calls active (dropping one is for the
rest of the fit) and which of the horizon's iterations it runs: the Security
page states this residue.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..federation import Reply
from ..federation._runtime import reads
from ..node._declarations import data_independent
from ..node._refusal import NodeRefusal

__all__ = [
    "TAG_COMMITS",
    "TAG_REVEALS",
    "TAG_SAMPLE",
    "SAMPLED_PARTICIPANTS",
    "check_sampled",
    "public_sample",
    "sampling_commit_step",
    "sampling_reveal_step",
    "sampling_seed",
]

TAG_COMMITS = "sampling commitments"
TAG_REVEALS = "sampling nonces"
TAG_SAMPLE = "sample"
#: Kept by a sampled step: the participants its sum must have (checked by the upload).
SAMPLED_PARTICIPANTS = "sampled participants"
_NONCE = "sampling nonce"
_RELAYED = "sampling commitments relayed"
_AGREED = "sampling agreement"
_DOMAIN = b"skfedclust client sampling v1"
_NONCE_BYTES = 32


def _commitment(nonce, slot, horizon):
    h = hashlib.sha256(_DOMAIN)
    h.update(int(slot).to_bytes(8, "little"))
    h.update(int(horizon).to_bytes(8, "little"))
    h.update(bytes(nonce))
    return np.frombuffer(h.digest(), dtype=np.uint8).copy()


def sampling_seed(slots, nonces):
    """The fit's sampling seed: SHA-256 of the committing clients' slots and nonces."""
    slots = np.asarray(slots, dtype=np.int64)
    nonces = np.asarray(nonces, dtype=np.uint8)
    return hashlib.sha256(_DOMAIN + slots.tobytes() + nonces.tobytes()).digest()


def public_sample(seed, iteration, active, size):
    """The clients of iteration ``iteration``: ``size`` of ``active``, from the public seed."""
    active = sorted(int(c) for c in active)
    if not 0 < int(size) <= len(active):
        raise ValueError(f"a sample of {size} from {len(active)} active clients")
    digest = hashlib.sha256(bytes(seed) + int(iteration).to_bytes(8, "little")).digest()
    generator = np.random.Generator(np.random.PCG64(int.from_bytes(digest, "little")))
    order = generator.permutation(len(active))[: int(size)]
    return sorted(active[i] for i in order)


@data_independent
@reads()
def sampling_commit_step(data, inbox, state, party, *, horizon):
    """Client step: commit to a fresh nonce (and the fit's horizon) for the sampling seed."""
    if _NONCE in state:
        raise NodeRefusal(
            "sampling",
            "this node has committed to the fit's sampling seed "
            "already; a second commitment would let the server choose between seeds",
        )
    horizon = int(horizon)
    if horizon < 1:
        raise NodeRefusal("sampling", f"a horizon of {horizon} iterations")
    nonce = party.secret_bytes(_NONCE_BYTES)
    return Reply(
        send=_commitment(nonce, party.index, horizon),
        keep={_NONCE: (nonce, horizon)},
    )


@data_independent
@reads(TAG_COMMITS)
def sampling_reveal_step(data, inbox, state, party):
    """Client step: find its commitment among those relayed, then reveal its nonce."""
    if _NONCE not in state:
        raise NodeRefusal("sampling", "this node has not committed")
    if _RELAYED in state:
        raise NodeRefusal("sampling", "a second reveal")
    nonce, horizon = state[_NONCE]
    relayed = inbox[TAG_COMMITS]
    slots = [int(c) for c in np.ravel(relayed["slots"])]
    commitments = np.asarray(relayed["commitments"], dtype=np.uint8)
    me = party.index
    if (
        sorted(set(slots)) != slots
        or commitments.shape != (len(slots), 32)
        or me not in slots
        or not np.array_equal(commitments[slots.index(me)], _commitment(nonce, me, horizon))
    ):
        raise NodeRefusal("sampling", "the relayed commitments do not hold this node's in its slot")
    return Reply(
        send=np.frombuffer(nonce, dtype=np.uint8).copy(),
        keep={_RELAYED: (tuple(slots), commitments)},
    )


def _agreed_seed(state, nonces):
    agreed = state.get(_AGREED)
    if agreed is not None:
        return agreed
    _, horizon = state[_NONCE]
    if _RELAYED not in state:
        raise NodeRefusal("sampling", "the nonces were never revealed")
    slots, commitments = state[_RELAYED]
    nonces = np.asarray(nonces, dtype=np.uint8)
    if nonces.shape != (len(slots), _NONCE_BYTES) or not all(
        np.array_equal(commitments[i], _commitment(nonces[i], slot, horizon))
        for i, slot in enumerate(slots)
    ):
        raise NodeRefusal("sampling", "the relayed nonces do not open the commitments")
    return {
        "seed": sampling_seed(slots, nonces),
        "horizon": horizon,
        "last": 0,
        "active": slots,
    }


def check_sampled(inbox, state, party):
    """Check the server's sample announcement; the state update (``keep``) that records it.

    Read without noting the read (the sample is not part of the statistic:
    the sum's participants are, and they must equal the sample). Returns
    ``{}`` when the fit samples no clients (no agreement in the state).
    """
    announcement = dict.get(inbox, TAG_SAMPLE)
    if announcement is None:
        if _NONCE in state:
            raise NodeRefusal(
                "sampling",
                "this fit samples its clients and the server sent no sample announcement",
            )
        return {}
    if _NONCE not in state:
        raise NodeRefusal("sampling", "no sampling seed was agreed")
    agreed = _agreed_seed(state, announcement["nonces"])
    iteration = int(announcement["iteration"])
    active = sorted(int(c) for c in np.ravel(announcement["active"]))
    participants = sorted(int(c) for c in np.ravel(announcement["participants"]))
    if not agreed["last"] < iteration <= agreed["horizon"]:
        raise NodeRefusal(
            "sampling",
            f"iteration {iteration} after {agreed['last']} "
            f"(the fit's horizon is {agreed['horizon']})",
        )
    if not set(active) <= set(agreed["active"]):
        raise NodeRefusal("sampling", "a client counted out of the fit is active again")
    if (
        party.index not in participants
        or len(participants) > len(active)
        or participants != public_sample(agreed["seed"], iteration, active, len(participants))
    ):
        raise NodeRefusal(
            "sampling",
            f"the participants of iteration {iteration} are not the sample the clients' seed draws",
        )
    return {
        _AGREED: {**agreed, "last": iteration, "active": tuple(active)},
        SAMPLED_PARTICIPANTS: tuple(participants),
    }
