"""The ledger: every message that crosses a party boundary, and its byte size.

The runtime records each message here as it is delivered; ``communication_``
is derived from these records only, so it cannot disagree with the protocol.
"""

from __future__ import annotations

import array
import contextlib
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["SERVER", "Ledger", "Message", "payload_nbytes"]

#: Name of the coordinating server in the ledger. Clients are named by integers.
SERVER = "server"


def payload_nbytes(payload):
    """Number of bytes a payload takes on the wire.

    Arrays count their buffer, sparse matrices their three arrays, scalars
    eight bytes (one machine word), booleans one, strings their UTF-8 length,
    and containers the sum of their items. An object with an ``nbytes``
    attribute (a streamed message that is never materialised at once) counts
    that.
    """
    if payload is None:
        return 0
    kind = type(payload)
    # The common kinds first, by exact type: abstract-class checks cost
    # microseconds each, and a secure sum records hundreds of messages.
    if kind is np.ndarray:
        return int(payload.nbytes)
    if kind is tuple or kind is list:
        return sum(payload_nbytes(v) for v in payload)
    if kind is str:
        return len(payload.encode())
    if kind is int or kind is float:
        return 8
    if isinstance(payload, np.ndarray):
        return int(payload.nbytes)
    if sp.issparse(payload):
        payload = payload.tocsr()
        return int(payload.data.nbytes + payload.indices.nbytes + payload.indptr.nbytes)
    if isinstance(payload, np.generic):
        return int(payload.itemsize)
    if isinstance(payload, (bool, np.bool_)):
        return 1
    if isinstance(payload, numbers.Number):
        return 8
    if isinstance(payload, (str, bytes)):
        return len(payload.encode() if isinstance(payload, str) else payload)
    if isinstance(payload, dict):
        return sum(payload_nbytes(v) for v in payload.values())
    if isinstance(payload, (list, tuple)):
        return sum(payload_nbytes(v) for v in payload)
    if hasattr(payload, "nbytes"):
        return int(payload.nbytes)
    raise TypeError(f"Cannot measure a message payload of type {type(payload).__name__}")


@dataclass(frozen=True)
class Message:
    """One recorded message.

    ``phase`` numbers the exchange it belongs to (one client step on the
    clients, or one server send); ``round`` is the communication round it is
    counted in.
    """

    sender: object
    receiver: object
    round: int
    nbytes: int
    tag: str
    phase: int


class Ledger:
    """Record of every message of one protocol run.

    A *round* is one exchange in which clients send: a client step whose
    messages go to the server (an upload) or to other parties (a peer
    exchange, such as secret shares). The server's downloads belong to the
    round they answer, so a one-shot method reports one round. An upload
    streamed in several exchanges (blocks of one matrix the server asks for
    in turn) is one round: its later exchanges are opened with
    ``same_round=True``. Exchanges
    marked as set-up (agreeing on public parameters before the protocol
    proper, such as shared anchors) are counted apart, in ``setup_rounds``.

    Parameters
    ----------
    n_parties : int
        Number of parties named by integers ``0 .. n_parties - 1`` (data-holding
        clients, and, for secret sharing, parties that hold no data).
    """

    def __init__(self, n_parties):
        self.n_parties = int(n_parties)
        # Columns, one entry per message (the server is -1, tags by number): a
        # fit of thousands of clients records millions of messages (the shares
        # of every secure sum), a few tens of bytes each instead of an object each.
        self._senders = array.array("i")
        self._receivers = array.array("i")
        self._rounds = array.array("i")
        self._nbytes = array.array("q")
        self._tags = array.array("i")
        self._phases = array.array("i")
        self._tag_ids = {}
        self._tag_names = []
        self._phase = -1
        self._phase_setup = {}
        self._phase_evaluation = {}
        self._round = -1
        self._setup_round = -1
        self._evaluation_round = -1
        self._evaluating = 0
        self._counted = set()

    @contextlib.contextmanager
    def evaluating(self):
        """Count the exchanges made inside the block as evaluation rounds.

        An estimator that reports a diagnostic of its result (its inertia)
        after the protocol proper computes it in evaluation exchanges: their
        messages are recorded and their bytes counted like any other, but
        their rounds (set-up included) go to ``evaluation_rounds``, so
        ``rounds`` stays the method's own.
        """
        self._evaluating += 1
        try:
            yield self
        finally:
            self._evaluating -= 1

    # -- recording (called by the runtime) -------------------------------------
    def open_phase(self, *, setup=False, same_round=False):
        """Start a new exchange; return its phase number.

        With ``same_round=True`` the exchange continues the round (or set-up
        round) of the previous client exchange instead of opening a new one.
        """
        self._phase += 1
        self._phase_setup[self._phase] = bool(setup)
        self._phase_evaluation[self._phase] = self._evaluating > 0
        if self._evaluating:
            current = self._evaluation_round
        else:
            current = self._setup_round if setup else self._round
        if same_round and current >= 0:
            self._counted.add(self._phase)
        return self._phase

    def record(self, payload, *, sender, receiver, tag="", nbytes=None):
        """Record one message in the current phase and return its byte size.

        ``nbytes``: the payload's size where the caller measured it already
        (one payload sent to many receivers).
        """
        self._check_party(sender)
        self._check_party(receiver)
        if sender == receiver:
            raise ValueError(f"a party cannot send a message to itself ({sender!r})")
        if self._phase < 0:
            self.open_phase()
        nbytes = payload_nbytes(payload) if nbytes is None else nbytes
        self._append(sender, receiver, self._round_of(sender), nbytes, tag)
        return nbytes

    def record_to_peers(self, payloads, *, sender, tag=""):
        """Record the messages ``{receiver: payload}`` one party sends its peers; their sizes."""
        self._check_party(sender)
        if self._phase < 0:
            self.open_phase()
        sizes = []
        if payloads:
            round_ = self._round_of(sender)
            for receiver, payload in payloads.items():
                self._check_party(receiver)
                if sender == receiver:
                    raise ValueError(f"a party cannot send a message to itself ({sender!r})")
                nbytes = payload_nbytes(payload)
                self._append(sender, receiver, round_, nbytes, tag)
                sizes.append(nbytes)
        return sizes

    def _append(self, sender, receiver, round_, nbytes, tag):
        tag = str(tag)
        tag_id = self._tag_ids.get(tag)
        if tag_id is None:
            tag_id = self._tag_ids[tag] = len(self._tag_names)
            self._tag_names.append(tag)
        self._senders.append(-1 if sender == SERVER else int(sender))
        self._receivers.append(-1 if receiver == SERVER else int(receiver))
        self._rounds.append(round_)
        self._nbytes.append(nbytes)
        self._tags.append(tag_id)
        self._phases.append(self._phase)

    def _round_of(self, sender):
        phase = self._phase
        if sender == SERVER:
            # A download belongs to the round it answers (or opens the first).
            return max(self._round, 0)
        if self._phase_evaluation[phase]:
            if phase not in self._counted:
                self._counted.add(phase)
                self._evaluation_round += 1
            return self._evaluation_round
        if phase not in self._counted:
            self._counted.add(phase)
            if self._phase_setup[phase]:
                self._setup_round += 1
            else:
                self._round += 1
        return self._setup_round if self._phase_setup[phase] else self._round

    def _check_party(self, party):
        if type(party) is int and 0 <= party < self.n_parties:
            return
        if party == SERVER:
            return
        if (
            isinstance(party, bool)
            or not isinstance(party, numbers.Integral)
            or not 0 <= party < self.n_parties
        ):
            raise ValueError(
                f"unknown party {party!r}: parties are {SERVER!r} and 0..{self.n_parties - 1}"
            )

    # -- reading -----------------------------------------------------------------
    @property
    def messages(self):
        """Every recorded :class:`Message`, in order."""

        def party(p):
            return SERVER if p < 0 else p

        names = self._tag_names
        return [
            Message(party(s), party(r), rnd, nb, names[t], ph)
            for s, r, rnd, nb, t, ph in zip(
                self._senders, self._receivers, self._rounds, self._nbytes, self._tags, self._phases
            )
        ]

    def report(self):
        """Summarise the ledger as the ``communication_`` dictionary.

        Returns
        -------
        report : dict
            ``rounds`` (exchanges in which clients sent, set-up and
            evaluation excluded), ``setup_rounds``, ``evaluation_rounds``
            (see :meth:`evaluating`), ``bytes_up``, ``bytes_down``, ``bytes_peer``
            (client-to-client), ``bytes_total``, ``n_messages``, and
            ``per_client``: a dict of arrays of length ``n_parties`` with
            ``bytes_up``, ``bytes_down``, ``bytes_peer_sent`` and
            ``bytes_peer_received``.
        """
        n = self.n_parties
        # Copies (astype): a view left alive would keep the columns from growing.
        senders = np.frombuffer(self._senders, dtype=np.int32).astype(np.int64)
        receivers = np.frombuffer(self._receivers, dtype=np.int32).astype(np.int64)
        nbytes = np.frombuffer(self._nbytes, dtype=np.int64).astype(np.int64)
        up, down = receivers < 0, senders < 0
        peer = ~(up | down)

        def per_party(parties, where):
            return np.bincount(parties[where], weights=nbytes[where], minlength=n).astype(np.int64)

        per = {
            "bytes_up": per_party(senders, up),
            "bytes_down": per_party(receivers, down),
            "bytes_peer_sent": per_party(senders, peer),
            "bytes_peer_received": per_party(receivers, peer),
        }
        up = int(per["bytes_up"].sum())
        down = int(per["bytes_down"].sum())
        peer = int(per["bytes_peer_sent"].sum())
        return {
            "rounds": self._round + 1,
            "setup_rounds": self._setup_round + 1,
            "evaluation_rounds": self._evaluation_round + 1,
            "bytes_up": up,
            "bytes_down": down,
            "bytes_peer": peer,
            "bytes_total": up + down + peer,
            "n_messages": len(self._nbytes),
            "per_client": per,
        }
