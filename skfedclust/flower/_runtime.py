"""The server side: the protocol runtime over a Flower Grid, and ``fit_on_flower``.

:class:`FlowerRuntime` implements :class:`~skfedclust.federation.Runtime` with
Flower messages: ``run`` sends every target node one message naming the step,
carrying its inbox (the server's messages, and the sealed messages other
parties sent it) and the public constants, and gets back what the step sends.
The protocol code of an estimator runs on it unchanged.

Two byte counts are kept apart. The ledger (``communication_``) counts each
message as :func:`~skfedclust.federation.payload_nbytes` measures it, exactly
as in-process, so ``communication_`` is identical. What Flower's records
actually carry is counted in :class:`Transport` (``transport_``): it adds the
``.npy`` header of every array, the JSON structure of every message, the public
constants and step names, the handshake and the final write-out, and relays
every peer message twice (sender to server, server to recipient) as ciphertext.
"""

from __future__ import annotations

import time
import uuid
import warnings
import weakref

import numpy as np
from sklearn.utils import check_random_state

from .. import __version__
from ..federation import logger, progress
from ..federation._inputs import _check_client_sizes, _check_n_samples
from ..federation._ledger import SERVER, Ledger
from ..federation._runtime import Received, Runtime, step_reads
from ._codec import encode
from ._crypto import fingerprint
from ._wire import (
    DEFAULT_ALLOWED_MODULES,
    ERROR_REFUSED,
    FINISH,
    HELLO,
    STEP,
    content_nbytes,
    from_content,
    require_flwr,
    step_name,
    to_content,
)

try:
    from flwr.app import Message
except ImportError:  # pragma: no cover
    Message = None

__all__ = [
    "FlowerNodeError",
    "FlowerRuntime",
    "FlowerTimeoutError",
    "NotSupportedOnFlower",
    "FlowerSession",
    "Transport",
    "fit_on_flower",
    "predict_on_flower",
]


class FlowerNodeError(RuntimeError):
    """A node failed, refused a step, or sent a reply that is not what the step sends.

    Attributes
    ----------
    node_id : int
        Flower node id.
    party : int or None
        Party number of the node in the protocol.
    step : str
        What the node was asked to do.
    refused : bool
        Whether the node refused (its policy, its roster check, a sealed
        message that did not open): a refusal ends the fit even inside an
        exchange that tolerates dropouts.
    """

    def __init__(self, message, *, node_id, party, step, refused=False):
        super().__init__(message)
        self.node_id = node_id
        self.party = party
        self.step = step
        self.refused = bool(refused)


class FlowerTimeoutError(TimeoutError):
    """Nodes that did not answer in time (``node_ids``, ``parties``)."""

    def __init__(self, message, *, node_ids, parties, step):
        super().__init__(message)
        self.node_ids = node_ids
        self.parties = parties
        self.step = step


class NotSupportedOnFlower(NotImplementedError):
    """A protocol does something only a simulation can do."""


class _Sealed:
    """A relayed peer message as the server holds it: ciphertext and declared size."""

    __slots__ = ("ciphertext", "nbytes")

    def __init__(self, ciphertext, nbytes):
        self.ciphertext = ciphertext
        self.nbytes = int(nbytes)


class Transport:
    """Bytes that Flower's records actually carried, message by message.

    Every message is counted with ``content_nbytes`` (array buffers with
    their ``.npy`` headers, config values and record keys; Flower's own
    framing excluded), by direction, party and kind: ``handshake``, ``step``
    (the protocol's messages with their structure and public constants),
    ``relay`` (sealed peer messages, counted in both hops), ``outputs``
    (scalar diagnostics) and ``finish``.
    """

    KINDS = ("handshake", "step", "relay", "outputs", "finish")

    def __init__(self):
        self.records = []

    def add(self, *, direction, node_id, party, kind, nbytes):
        """Count ``nbytes`` carried to (``direction="to"``) or from a node."""
        self.records.append((direction, node_id, party, kind, int(nbytes)))

    def add_message(self, direction, message, party, kind):
        """Count a Flower message; the sealed peer messages it carries count as ``relay``."""
        node_id = (
            message.metadata.dst_node_id if direction == "to" else message.metadata.src_node_id
        )
        total = content_nbytes(message.content)
        sealed = 0
        for record in message.content.config_records.values():
            sealed += sum(len(k) + len(v) for k, v in record.items() if k.startswith("sealed."))
        self.add(
            direction=direction, node_id=node_id, party=party, kind=kind, nbytes=total - sealed
        )
        if sealed:
            self.add(direction=direction, node_id=node_id, party=party, kind="relay", nbytes=sealed)

    def report(self, n_parties):
        """Summarise what the records carried.

        Parameters
        ----------
        n_parties : int
            Number of parties of the protocol.

        Returns
        -------
        report : dict
            ``bytes_to_nodes``, ``bytes_from_nodes``, ``bytes_total``,
            ``n_messages``, ``by_kind`` (``{kind: {"to_nodes", "from_nodes"}}``)
            and ``per_party`` (arrays of length ``n_parties``: ``bytes_to``,
            ``bytes_from``; the handshake, made before parties are numbered,
            is left out of them).
        """
        per = {
            "bytes_to": np.zeros(n_parties, dtype=np.int64),
            "bytes_from": np.zeros(n_parties, dtype=np.int64),
        }
        by_kind = {kind: {"to_nodes": 0, "from_nodes": 0} for kind in self.KINDS}
        for direction, _, party, kind, nbytes in self.records:
            side = "to_nodes" if direction == "to" else "from_nodes"
            by_kind[kind][side] += nbytes
            if party is not None and party < n_parties:
                per["bytes_to" if direction == "to" else "bytes_from"][party] += nbytes
        to_nodes = sum(n for d, *_, n in self.records if d == "to")
        from_nodes = sum(n for d, *_, n in self.records if d == "from")
        return {
            "bytes_to_nodes": int(to_nodes),
            "bytes_from_nodes": int(from_nodes),
            "bytes_total": int(to_nodes + from_nodes),
            "n_messages": sum(1 for record in self.records if record[3] != "relay"),
            "by_kind": by_kind,
            "per_party": per,
        }


# --------------------------------------------------------------------------- #
# Exchanging messages with nodes
# --------------------------------------------------------------------------- #
#: Flower node id the SuperLink uses as the sender of the error replies it makes
#: itself (a destination node that stopped sending heartbeats, an expired message).
SUPERLINK_NODE_ID = 1

#: Seconds between two pulls of the replies; Flower's own ``send_and_receive``
#: sleeps 3 s between pulls, a large share of a protocol round on a deployment.
DEFAULT_POLL_INTERVAL = 0.1


#: Seconds an exchange that met an error waits for the other nodes' replies.
ERROR_GRACE = 30.0


def _replies(grid, messages, *, timeout, poll_interval):
    """Push ``messages`` and yield batches of replies as they arrive, until all are in.

    A grid without ``push_messages`` (a test double) falls back on its
    ``send_and_receive``.
    """
    try:
        accepted = set(grid.push_messages(messages))
    except NotImplementedError:
        yield list(grid.send_and_receive(messages, timeout=timeout))
        return
    pending = {m.metadata.message_id for m in messages if m.metadata.message_id in accepted}
    refused = [m for m in messages if m.metadata.message_id not in accepted]
    if refused:
        yield [_refusal(m) for m in refused]
    deadline = time.monotonic() + timeout
    while pending:
        batch = list(grid.pull_messages(pending))
        pending -= {reply.metadata.reply_to_message_id for reply in batch}
        yield batch
        if not pending or time.monotonic() >= deadline:
            return
        time.sleep(poll_interval)


def _refusal(message):
    """A stand-in error reply for a message the SuperLink did not accept."""
    from flwr.app import Error

    return Message(
        Error(
            NODE_UNAVAILABLE,
            "the SuperLink did not accept the message (is the node still connected?)",
        ),
        reply_to=message,
    )


#: Flower's error codes of a message or a node the SuperLink reports unavailable, and of a
#: ClientApp process that crashed: the node did not answer.
MESSAGE_UNAVAILABLE, REPLY_UNAVAILABLE, NODE_UNAVAILABLE, CLIENT_APP_CRASHED = 3, 4, 5, 8


def _no_answer(reply):
    """Whether an error reply says the node did not answer (rather than answered with an error)."""
    return reply.metadata.src_node_id == SUPERLINK_NODE_ID or reply.error.code in (
        MESSAGE_UNAVAILABLE,
        REPLY_UNAVAILABLE,
        NODE_UNAVAILABLE,
        CLIENT_APP_CRASHED,
    )


def _exchange(
    grid,
    messages,
    parties,
    *,
    what,
    timeout,
    transport,
    kind,
    poll_interval=DEFAULT_POLL_INTERVAL,
    may_drop=False,
):
    """Send ``messages`` (one per party in ``parties``) and return the replies in that order.

    With ``may_drop``, a node that does not answer (in time, or as the
    SuperLink reports: unavailable, its ClientApp crashed) is left out (its
    reply is ``None``) instead of ending the exchange: the protocol tolerates
    dropouts. A node that answers with an error (a refusal above all: its
    policy, its roster check, a sealed message that did not open) did not
    drop out: it ends the exchange as without ``may_drop``.

    Replies are matched to their message by ``reply_to_message_id``, not by
    sender: an error reply the SuperLink makes itself (a node that stopped
    sending heartbeats) comes from the SuperLink, not from the node. The first
    error ends the exchange once the other nodes have answered (or
    :data:`ERROR_GRACE` seconds have passed): a message left in flight would
    still be handled by its node after the fit has moved on, and a node's
    Context written back by that late handler can undo what a later fit's
    messages wrote (Flower's simulation runtime does this).
    """
    for message, party in zip(messages, parties):
        transport.add_message("to", message, party, kind)
    by_node = {m.metadata.dst_node_id: p for m, p in zip(messages, parties)}
    replies = {}
    started = time.monotonic()
    failure, failed_at = None, None
    for batch in _replies(grid, messages, timeout=timeout, poll_interval=poll_interval):
        for reply in batch:
            node_id = _destination(reply, messages)
            if node_id is None:
                continue
            if reply.has_error():
                if may_drop and _no_answer(reply):
                    logger.warning("%s dropped out of %s", _who(by_node[node_id], node_id), what)
                    continue
                if failure is None:
                    failure = _node_error(reply, node_id, by_node[node_id], what)
                    failed_at = time.monotonic()
                replies[node_id] = reply
                continue
            replies[node_id] = reply
        if failure is not None and time.monotonic() - failed_at >= ERROR_GRACE:
            break
    if failure is not None:
        raise failure
    missing = [n for n in by_node if n not in replies]
    if missing and not may_drop:
        parties_missing = [by_node[n] for n in missing]
        who = ", ".join(_who(p, n) for n, p in zip(missing, parties_missing))
        waited = time.monotonic() - started
        raise FlowerTimeoutError(
            f"{who} did not answer {what} within {timeout:g} s (waited {waited:.0f} s); "
            "a node that stopped is reported by the SuperLink once it misses its "
            "heartbeats, so a silent node is running but slow or stuck",
            node_ids=missing,
            parties=parties_missing,
            step=what,
        )
    out = []
    for message, party in zip(messages, parties):
        reply = replies.get(message.metadata.dst_node_id)
        if reply is not None:
            transport.add_message("from", reply, party, kind)
        out.append(reply)
    return out


def _destination(reply, messages):
    """The node a reply answers for, from the message it replies to (``None``: not ours)."""
    for message in messages:
        if message.metadata.message_id == reply.metadata.reply_to_message_id:
            return message.metadata.dst_node_id
    # Test doubles that do not set message ids: the sender is the node.
    sender = reply.metadata.src_node_id
    if sender != SUPERLINK_NODE_ID and any(m.metadata.dst_node_id == sender for m in messages):
        return sender
    return None


def _who(party, node_id):
    return f"party {party} (node {node_id})" if party is not None else f"node {node_id}"


def _node_error(reply, node_id, party, what):
    who = _who(party, node_id)
    reason = reply.error.reason
    refused = False
    if reply.metadata.src_node_id == SUPERLINK_NODE_ID or reply.error.code in (
        MESSAGE_UNAVAILABLE,
        REPLY_UNAVAILABLE,
        NODE_UNAVAILABLE,
    ):
        message = (
            f"{who} is unavailable in {what}, as the SuperLink reports: {reason} "
            "Restart its SuperNode (or leave it out with node_ids) and run the fit again."
        )
    elif reply.error.code == ERROR_REFUSED:
        refused = True
        message = f"{who} refused {what}: {reason}"
    else:
        message = f"{who} failed in {what}: {reason}"
    error = FlowerNodeError(message, node_id=node_id, party=party, step=what, refused=refused)
    error.code = int(reply.error.code)
    return error


def _decode_reply(reply, *, node_id, party, what, session):
    try:
        control, payload, sealed = from_content(reply.content, f"the reply to {what}")
    except TypeError as exc:  # CodecError
        raise FlowerNodeError(
            f"party {party} (node {node_id}) sent a malformed reply to {what}: {exc}",
            node_id=node_id,
            party=party,
            step=what,
        ) from exc
    if control.get("session") != session:
        raise FlowerNodeError(
            f"party {party} (node {node_id}) answered {what} for another fit "
            f"({control.get('session')!r})",
            node_id=node_id,
            party=party,
            step=what,
        )
    return control, payload, sealed


class _FederationInfo:
    """The public metadata of a deployed federation, for the estimators' hooks.

    It has what :class:`~skfedclust.federation.Federation` tells about who
    holds what, and no data.
    """

    def __init__(self, client_sizes, n_features, client_names, row_groups=None, client_cols=None):
        self.client_sizes = np.asarray(client_sizes, dtype=np.intp)
        self.n_features = int(n_features)
        self.client_names = list(client_names)
        self.row_groups = row_groups
        self.client_cols = client_cols
        self.is_horizontal = client_cols is None

    @property
    def n_clients(self):
        return len(self.client_sizes)

    @property
    def n_samples(self):
        if self.row_groups is None:
            return int(self.client_sizes.sum())
        return int(sum(self.client_sizes[group[0]] for group in self.row_groups))

    @property
    def client_widths(self):
        if self.client_cols is None:
            return np.full(self.n_clients, self.n_features, dtype=np.intp)
        return np.array([len(c) for c in self.client_cols], dtype=np.intp)


# --------------------------------------------------------------------------- #
# The runtime
# --------------------------------------------------------------------------- #
class FlowerRuntime(Runtime):
    """Runs a protocol's client steps on Flower nodes.

    Build it with :func:`fit_on_flower`, which makes the handshake; protocol
    code uses it exactly as an :class:`~skfedclust.federation.InProcessRuntime`.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The ServerApp's grid.
    node_ids : list of int
        Flower node of every party, in party order: data-holding clients
        first, then parties without data.
    session : str
        Id of this fit; nodes refuse messages of another fit.
    seeds : ndarray of int
        Public seed of every client.
    client_sizes : ndarray of int
        Rows held by every client (from the handshake).
    n_features : int
        Number of features (held by every client, or across the feature
        blocks of a row group).
    public_keys : list of str
        Every party's X25519 public key (hex), from the handshake.
    identities : list of (str or None, str or None), default=None
        Every party's identity key and its signature of the per-fit key
        (hex), from the handshake.
    nonces : list of str, default=None
        Every party's handshake nonce (hex), which its signature covers. The
        keys, identities, signatures and nonces make the roster every party
        receives with its first step and checks before it seals or opens
        anything.
    n_clients : int
        Number of data-holding clients.
    timeout : float, default=600
        Seconds to wait for the replies of one exchange.
    allowed_modules : tuple of str, default=("skfedclust",)
        Packages whose client steps may be named.
    name : str, default=""
        Name used in progress messages.
    row_groups : list of list of int, default=None
        For a vertical or hybrid federation, the clients of each row group
        (from the handshake).
    client_columns : list of ndarray of int, default=None
        For a vertical or hybrid federation, the global feature indices each
        client holds (from the handshake).

    Attributes
    ----------
    poll_interval : float
        Seconds between two pulls of the replies of an exchange.
    """

    poll_interval = DEFAULT_POLL_INTERVAL

    def __init__(
        self,
        grid,
        node_ids,
        *,
        session,
        seeds,
        client_sizes,
        n_features,
        public_keys,
        n_clients,
        identities=None,
        nonces=None,
        timeout=600.0,
        allowed_modules=DEFAULT_ALLOWED_MODULES,
        name="",
        row_groups=None,
        client_columns=None,
    ):
        require_flwr()
        self.grid = grid
        self.node_ids = [int(n) for n in node_ids]
        self.session = session
        self.n_clients = int(n_clients)
        self.n_parties = len(self.node_ids)
        self.client_sizes = np.asarray(client_sizes, dtype=np.intp)
        self.n_features = int(n_features)
        self.row_groups = row_groups
        self.client_columns = client_columns
        if client_columns is None:
            self.client_widths = np.full(self.n_clients, self.n_features, dtype=np.intp)
        else:
            self.client_widths = np.array([len(c) for c in client_columns], dtype=np.intp)
        self.seeds = np.asarray(seeds)
        self.public_keys = list(public_keys)
        self.identities = list(identities or [(None, None)] * len(self.public_keys))
        self.nonces = list(nonces or [None] * len(self.public_keys))
        self.timeout = timeout
        self.allowed_modules = tuple(allowed_modules)
        self.name = name
        self.ledger = Ledger(self.n_parties)
        self.transport = Transport()
        self.trace = []
        #: Per party, events waiting for its next step, in the order they happened.
        self._pending = [[] for _ in range(self.n_parties)]
        self._begun = [False] * self.n_parties
        self._exchange = -1
        self._delivered = weakref.WeakValueDictionary()
        #: Every sealed peer message the server relayed (what it holds of them).
        self.relayed = []
        self._t0 = time.perf_counter()

    @property
    def _federation(self):
        raise NotSupportedOnFlower(
            f"{self.name or 'this'} protocol reads the simulated Federation "
            "(runtime._federation), which does "
            "not exist on a deployed federation: the server knows only what the handshake "
            "and the protocol's messages told it"
        )

    def _targets(self, clients):
        if clients is None:
            return list(range(self.n_clients))
        targets = [int(c) for c in clients]
        for c in targets:
            if not 0 <= c < self.n_parties:
                raise ValueError(f"unknown party {c}: parties are 0..{self.n_parties - 1}")
        return targets

    def _begin(self, c):
        if self._begun[c]:
            return None
        self._begun[c] = True
        return {
            "party": c,
            "n_parties": self.n_parties,
            "n_clients": self.n_clients,
            "seed": int(self.seeds[c]) if c < self.n_clients else None,
            "roster": [
                {"key": key, "identity": identity, "signature": signature, "nonce": nonce}
                for key, (identity, signature), nonce in zip(
                    self.public_keys, self.identities, self.nonces
                )
            ],
        }

    # -- client steps --------------------------------------------------------------
    def run(
        self,
        step,
        *,
        tag,
        clients=None,
        setup=False,
        same_round=False,
        may_drop=False,
        per_client=None,
        **public,
    ):
        """Run a client step on the nodes of ``clients`` and deliver what it sends.

        Same contract as :meth:`InProcessRuntime.run
        <skfedclust.federation.InProcessRuntime.run>`; see there.
        """
        name = step_name(step, self.allowed_modules)
        targets = self._targets(clients)
        per_client = per_client or {}
        encode(public, f"the public constants of {name}")
        self._exchange += 1
        exchange = self._exchange
        messages = []
        wanted = step_reads(step)
        for c in targets:
            events, sealed, kept = [], {}, []
            for event in self._pending[c]:
                if wanted is not None and event[1] not in wanted:
                    # Not read by this step: it waits for the party's next one.
                    kept.append(event)
                elif event[0] == "server":
                    events.append(list(event))
                else:
                    _, ev_tag, sender, ev_exchange, blob = event
                    ref = str(len(sealed))
                    sealed[ref] = blob.ciphertext
                    events.append(["peer", ev_tag, sender, ev_exchange, ref])
            self._pending[c] = kept
            control = {
                "session": self.session,
                "step": name,
                "tag": tag,
                "exchange": exchange,
                "party": c,
                "begin": self._begin(c),
            }
            content = to_content(
                control,
                {"public": {**public, **per_client.get(c, {})}, "events": events},
                sealed=sealed,
                where=f"step {name} for party {c}",
            )
            messages.append(
                Message(
                    content,
                    dst_node_id=self.node_ids[c],
                    message_type=STEP,
                    group_id=f"{self.session}:{exchange}",
                )
            )
        what = f"step {name} (tag {tag!r})"
        replies = _exchange(
            self.grid,
            messages,
            targets,
            what=what,
            timeout=self.timeout,
            transport=self.transport,
            kind="step",
            poll_interval=self.poll_interval,
            may_drop=may_drop,
        )
        decoded = []
        for c, reply in zip(targets, replies):
            if reply is None:
                continue
            node_id = self.node_ids[c]
            control, send, sealed = _decode_reply(
                reply, node_id=node_id, party=c, what=what, session=self.session
            )
            self._check_reply(control, send, sealed, c, node_id, name, exchange, what)
            decoded.append((c, control, send, sealed))

        phase = self.ledger.open_phase(setup=setup, same_round=same_round)
        sent = {}
        for c, control, send, sealed in decoded:
            if control["has_send"]:
                self.ledger.record(send, sender=c, receiver=SERVER, tag=tag)
                sent[c] = send
            for peer in sorted(control["peers"], key=int):
                blob = _Sealed(sealed[peer], control["peers"][peer])
                self.ledger.record(blob, sender=c, receiver=int(peer), tag=tag)
                self._pending[int(peer)].append(("peer", tag, c, exchange, blob))
                self.relayed.append(blob)
        received = Received(tag, sent)
        self._delivered[id(received)] = received
        self.trace.append((phase, tag, "client step", step.__name__, tuple(received)))
        return received

    def _check_reply(self, control, send, sealed, c, node_id, name, exchange, what):
        def fail(problem):
            raise FlowerNodeError(
                f"party {c} (node {node_id}) sent a wrong reply to {what}: {problem}",
                node_id=node_id,
                party=c,
                step=what,
            )

        if control.get("step") != name or control.get("exchange") != exchange:
            fail(f"it answers {control.get('step')!r} of exchange {control.get('exchange')}")
        if control.get("party") != c:
            fail(f"it speaks as party {control.get('party')!r}")
        if not isinstance(control.get("has_send"), bool) or (
            not control["has_send"] and send is not None
        ):
            fail("its send flag does not match its payload")
        peers = control.get("peers")
        if not isinstance(peers, dict) or sorted(peers) != sorted(sealed):
            fail("its peer messages do not match their sizes")
        for peer, nbytes in peers.items():
            if not peer.isdigit() or not 0 <= int(peer) < self.n_parties or int(peer) == c:
                fail(f"it addresses a message to party {peer!r}")
            if not isinstance(nbytes, int) or nbytes < 0:
                fail(f"it declares {nbytes!r} bytes for its message to party {peer}")

    # -- server side -------------------------------------------------------------------
    def send(self, payloads, *, tag):
        phase = self.ledger.open_phase()
        for c, payload in payloads.items():
            c = int(c)
            if not 0 <= c < self.n_parties:
                raise ValueError(f"unknown party {c}: parties are 0..{self.n_parties - 1}")
            encode(payload, f"the server's message {tag!r} to party {c}")
            self.ledger.record(payload, sender=SERVER, receiver=c, tag=tag)
            self._pending[c].append(("server", tag, payload))
        self.trace.append((phase, tag, "server send", None, None))

    # -- the user's side --------------------------------------------------------------
    def hand_back(self, key):
        """``None``: on a deployed federation each node hands its own outputs to its user.

        Every output a client step declared stays on its node, which writes it
        when the fit ends (:meth:`finish`); the server never holds it.
        """
        return None

    def finish(self, *, keep=False, prefix=""):
        """Tell every node the fit is over: it writes its row outputs and drops its state.

        Parameters
        ----------
        keep : bool, default=False
            Ask the nodes to keep their keys and state of this session for a
            predict run later in the same Flower run.
        prefix : str, default=""
            Prepended to the key of every output the nodes write.

        Returns
        -------
        written : dict
            ``{key: array of rows written by each party}`` (0 where a node has
            no output path configured).
        """
        parties = list(range(self.n_parties))
        messages = [
            Message(
                to_content({"session": self.session, "keep": bool(keep), "prefix": prefix}),
                dst_node_id=self.node_ids[c],
                message_type=FINISH,
            )
            for c in parties
        ]
        replies = _exchange(
            self.grid,
            messages,
            parties,
            what="the end of the fit",
            timeout=self.timeout,
            transport=self.transport,
            kind="finish",
            poll_interval=self.poll_interval,
        )
        written = {}
        for c, reply in zip(parties, replies):
            control, _, _ = _decode_reply(
                reply,
                node_id=self.node_ids[c],
                party=c,
                what="the end of the fit",
                session=self.session,
            )
            for key, count in control.get("written", {}).items():
                written.setdefault(key, np.zeros(self.n_parties, dtype=np.intp))[c] = int(count)
        return written

    def transport_report(self):
        """:meth:`Transport.report` for this runtime's parties."""
        return self.transport.report(self.n_parties)

    def continued(self, session, client_sizes):
        """Resume the parties of ``session`` (a :class:`FlowerSession`) on new rows."""
        self._begun = [True] * self.n_parties
        self._exchange = session.last_exchange
        self.client_sizes = np.asarray(client_sizes, dtype=np.intp)
        return self


class FlowerSession:
    """What the server knows of a Flower fit whose nodes kept their state for predict runs.

    Set as ``flower_session_`` by :func:`fit_on_flower` with
    ``keep_for_predict=True``: the session id, the nodes of the parties, their
    public keys and the public layout, all public; the parties' state stays
    on the nodes, in their Flower Context, for the rest of the Flower run.

    Attributes
    ----------
    session : str
        Id of the fit.
    node_ids : list of int
        Flower node of every party.
    last_exchange : int
        Number of the last exchange run (a predict run numbers on from it).
    open : bool
        Whether the nodes still keep their state (a predict run with
        ``keep_for_predict=False`` ends the session).
    """

    def __init__(self, runtime):
        self.session = runtime.session
        self.node_ids = list(runtime.node_ids)
        self.n_clients = runtime.n_clients
        self.seeds = np.asarray(runtime.seeds)
        self.n_features = runtime.n_features
        self.public_keys = list(runtime.public_keys)
        self.identities = list(runtime.identities)
        self.nonces = list(runtime.nonces)
        self.row_groups = runtime.row_groups
        self.client_columns = runtime.client_columns
        self.allowed_modules = runtime.allowed_modules
        self.last_exchange = runtime._exchange
        self.open = True

    def __repr__(self):
        state = "open" if self.open else "closed"
        return f"FlowerSession({self.session!r}, {len(self.node_ids)} parties, {state})"


# --------------------------------------------------------------------------- #
# Handshake and fit
# --------------------------------------------------------------------------- #
def _wait_for_nodes(grid, n_nodes, node_ids, connect_timeout):
    """The nodes of the federation, once connected.

    With ``n_nodes``, more connected nodes than asked for is usually a SuperNode
    restarted a moment ago: the SuperLink lists its old node until that one
    misses its heartbeats (about a minute), so the wait goes on until the count
    comes down, and the error says what to do if it does not.
    """
    deadline = time.monotonic() + connect_timeout
    warned = False
    while True:
        connected = sorted(int(n) for n in grid.get_node_ids())
        if node_ids is not None:
            if set(node_ids) <= set(connected):
                return list(node_ids)
        elif len(connected) == n_nodes:
            return connected
        elif len(connected) > n_nodes and not warned:
            logger.warning(
                "%d nodes are connected but n_nodes=%d: waiting up to %g s for the "
                "SuperLink to drop nodes that stopped (a restarted SuperNode keeps its old "
                "node listed until it misses its heartbeats)",
                len(connected),
                n_nodes,
                connect_timeout,
            )
            warned = True
        if time.monotonic() > deadline:
            if node_ids is None and len(connected) > n_nodes:
                raise ValueError(
                    f"{len(connected)} nodes are connected ({connected}) but n_nodes={n_nodes}. "
                    "If a SuperNode was restarted less than about a minute ago, the SuperLink "
                    "still lists its old node until that node misses its heartbeats: run "
                    "again in a minute, or choose the nodes with node_ids (run config "
                    "node-ids of the example app). Otherwise set n_nodes to the number of "
                    "nodes of the federation."
                )
            wanted = len(node_ids) if node_ids is not None else n_nodes
            present = (
                len(set(node_ids) & set(connected)) if node_ids is not None else len(connected)
            )
            raise FlowerTimeoutError(
                f"only {present} of {wanted} nodes connected within {connect_timeout:g} s "
                f"(connected: {connected}); start the missing SuperNodes, or raise "
                "connect_timeout",
                node_ids=[n for n in (node_ids or []) if n not in connected],
                parties=[],
                step="connect",
            )
        time.sleep(0.2)


def _greet(grid, nodes, parties, control, *, what, timeout, transport, poll_interval):
    """Send every node the same handshake ``control``; their replies, in node order."""
    messages = [Message(to_content(control), dst_node_id=n, message_type=HELLO) for n in nodes]
    return _exchange(
        grid,
        messages,
        parties,
        what=what,
        timeout=timeout,
        transport=transport,
        kind="handshake",
        poll_interval=poll_interval,
    )


def _handshake(
    grid, nodes, session, timeout, transport, method=None, poll_interval=DEFAULT_POLL_INTERVAL
):
    # The method is named up front so that a node whose policy does not allow
    # it refuses before the fit starts.
    replies = _greet(
        grid,
        nodes,
        [None] * len(nodes),
        {"session": session, "method": method},
        what="the handshake",
        timeout=timeout,
        transport=transport,
        poll_interval=poll_interval,
    )
    hello = []
    for node_id, reply in zip(nodes, replies):
        control, _, _ = _decode_reply(
            reply, node_id=node_id, party=None, what="the handshake", session=session
        )
        for key, kind in (("n_rows", int), ("n_features", int), ("public_key", str)):
            if not isinstance(control.get(key), kind) or isinstance(control.get(key), bool):
                raise FlowerNodeError(
                    f"node {node_id} sent a handshake without a valid {key!r}",
                    node_id=node_id,
                    party=None,
                    step="the handshake",
                )
        row_group, columns = control.get("row_group"), control.get("columns")
        if (row_group is None) != (columns is None) or (
            row_group is not None
            and (
                not isinstance(row_group, int)
                or isinstance(row_group, bool)
                or not isinstance(columns, list)
                or not all(isinstance(c, int) and not isinstance(c, bool) for c in columns)
            )
        ):
            raise FlowerNodeError(
                f"node {node_id} sent a handshake with an invalid row group or columns",
                node_id=node_id,
                party=None,
                step="the handshake",
            )
        for key in ("identity", "key_signature", "nonce", "policy"):
            value = control.get(key)
            kind = dict if key == "policy" else str
            if value is not None and not isinstance(value, kind):
                raise FlowerNodeError(
                    f"node {node_id} sent a handshake with an invalid {key!r}",
                    node_id=node_id,
                    party=None,
                    step="the handshake",
                )
        hello.append({**control, "node_id": node_id})
    return hello


def _order(hello):
    """Data-holding nodes first, each group sorted by name (then node id)."""
    names = [h["name"] for h in hello if h["name"] is not None]
    if len({type(n) for n in names}) > 1:
        raise ValueError(
            "the nodes' client names mix types "
            f"({sorted({type(n).__name__ for n in names})}); give every node a name of "
            "one type (client-name in its node config)"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"two nodes have the same client name: {sorted(map(str, names))}")

    def key(h):
        return (h["n_rows"] == 0, h["name"] is None, h["name"] or 0, h["node_id"])

    return sorted(hello, key=key)


def _layout(data_nodes):
    """Row groups and columns the data nodes declared (public schema), or ``None``.

    ``data_nodes`` are in party order. A row group's parties are in party
    order, which is the order of its feature blocks.
    """
    declared = [h.get("row_group") is not None for h in data_nodes]
    if not any(declared):
        return None
    if not all(declared):
        missing = [h["node_id"] for h, d in zip(data_nodes, declared) if not d]
        raise ValueError(
            f"nodes {missing} declare no row group and columns but the others do; in a "
            "vertical or hybrid federation every node declares both (row-group and columns "
            "in its node config)"
        )
    columns = [np.asarray(h["columns"], dtype=np.intp) for h in data_nodes]
    for h, cols in zip(data_nodes, columns):
        if len(cols) != h["n_features"] or len(set(cols.tolist())) != len(cols) or cols.min() < 0:
            raise ValueError(
                f"node {h['node_id']} declares columns {cols.tolist()} for its "
                f"{h['n_features']} features; give one distinct non-negative index per feature"
            )
    n_features = int(max(c.max() for c in columns)) + 1
    values = sorted({h["row_group"] for h in data_nodes})
    row_groups = [[p for p, h in enumerate(data_nodes) if h["row_group"] == v] for v in values]
    for value, group in zip(values, row_groups):
        sizes = [data_nodes[p]["n_rows"] for p in group]
        if len(set(sizes)) != 1:
            raise ValueError(
                f"the nodes of row group {value} must hold the same samples in the same "
                f"order; they hold {sizes} rows"
            )
        held = np.sort(np.concatenate([columns[p] for p in group]))
        if not np.array_equal(held, np.arange(n_features)):
            raise ValueError(
                f"the nodes of row group {value} hold features {held.tolist()}; the nodes of a "
                f"row group must hold each of the {n_features} features exactly once"
            )
    return row_groups, columns, n_features


def _layout_feature_names(data_nodes, columns, n_features):
    """Feature names of a vertical or hybrid federation, joined from the nodes' columns."""
    names = [h.get("feature_names") for h in data_nodes]
    if all(n is None for n in names):
        return None
    if any(n is None for n in names):
        raise ValueError(
            "some nodes hold named columns and others do not; give every node named "
            "columns, or none"
        )
    joined = [None] * n_features
    for h, node_names, cols in zip(data_nodes, names, columns):
        for name, c in zip(node_names, cols):
            if joined[c] is not None and joined[c] != name:
                raise ValueError(
                    f"feature {c} is named {joined[c]!r} by one node and {name!r} by node "
                    f"{h['node_id']}; the nodes of a feature block must name its columns alike"
                )
            joined[c] = name
    return np.asarray(joined, dtype=object)


def _feature_names(data_nodes):
    names = [h.get("feature_names") for h in data_nodes]
    if all(n is None for n in names):
        return None
    if any(n != names[0] for n in names):
        raise ValueError(
            "the nodes hold different feature names (or some none); clients must hold the "
            "same features in the same order"
        )
    return np.asarray(names[0], dtype=object)


def _check_request(estimator, n_nodes, node_ids, timeout, connect_timeout, poll_interval):
    """Refuse, before any node is contacted, what cannot run; return ``node_ids`` as ints.

    An estimator may define ``_check_flower_support()``, raising
    :class:`NotSupportedOnFlower` for the parameters a deployment cannot run.
    """
    name = type(estimator).__name__
    if not hasattr(estimator, "_run_protocol"):
        raise NotSupportedOnFlower(
            f"{name} has no protocol on the runtime yet (_run_protocol); "
            "only estimators ported to the protocol runtime run on Flower"
        )
    if (n_nodes is None) == (node_ids is None):
        raise ValueError("pass exactly one of n_nodes and node_ids")
    if n_nodes is not None and (
        isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 1
    ):
        raise ValueError(f"n_nodes must be a positive integer, got {n_nodes!r}")
    if node_ids is not None:
        node_ids = [int(n) for n in node_ids]
        if not node_ids or len(set(node_ids)) != len(node_ids):
            raise ValueError(f"node_ids must be distinct node ids, got {node_ids}")
    for key, value in (
        ("timeout", timeout),
        ("connect_timeout", connect_timeout),
        ("poll_interval", poll_interval),
    ):
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"{key} must be a positive number of seconds, got {value!r}")
    estimator._validate_params()
    check = getattr(estimator, "_check_flower_support", None)
    if check is not None:
        check()
    return node_ids


def fit_on_flower(
    estimator,
    grid,
    *,
    n_nodes=None,
    node_ids=None,
    timeout=600.0,
    connect_timeout=120.0,
    allowed_modules=DEFAULT_ALLOWED_MODULES,
    poll_interval=DEFAULT_POLL_INTERVAL,
    keep_for_predict=False,
    idle_nodes="refuse",
    output_prefix="",
):
    """Fit ``estimator`` on the data of Flower nodes; call it in a ServerApp's ``main``.

    The nodes run a ClientApp from :func:`make_client_app`. The server makes a
    handshake (each node reports its number of rows and features, a name and a
    public key, and in a vertical or hybrid federation its row group and the
    global indices of its columns), orders the clients by name, draws one
    seed per client from the estimator's ``random_state`` as ``fit`` does,
    and runs the estimator's protocol on a :class:`FlowerRuntime`. With the
    clients' arrays in the same order, the result is that of
    ``estimator.fit([X_0, ..., X_m])`` (or of the grid
    ``[[X_00, X_01], [X_10, X_11]]``, row groups in order of their number and
    a row group's feature blocks in the order of its nodes' names): the same
    centers, the same ``communication_``; each node's labels are written on
    the node.

    Parameters
    ----------
    estimator : BaseFederatedClustering
        An estimator with a protocol on the runtime (``_run_protocol``).
    grid : flwr.serverapp.Grid
        The grid the ServerApp's ``main`` receives.
    n_nodes : int, default=None
        Number of nodes to wait for (all parties: data-holding clients and
        parties without data). Exactly one of ``n_nodes`` and ``node_ids``.
    node_ids : list of int, default=None
        The nodes of the federation, when more are connected.
    timeout : float, default=600
        Seconds to wait for the replies of one exchange; a node that does not
        answer in time is named in a :class:`FlowerTimeoutError`.
    connect_timeout : float, default=120
        Seconds to wait for the nodes to connect.
    allowed_modules : tuple of str, default=("skfedclust",)
        Packages whose client steps the protocol may name (the nodes have
        their own list).
    poll_interval : float, default=0.1
        Seconds between two pulls of the nodes' replies from the SuperLink
        (Flower's ``Grid.send_and_receive`` waits 3 s).
    keep_for_predict : bool, default=False
        Ask the nodes to keep their keys and protocol state after the fit,
        for :func:`predict_on_flower` later in the same ServerApp run (DC and
        OmniFC predict with state only the parties hold). Sets
        ``flower_session_``.
    idle_nodes : {"refuse", "leave out"}, default="refuse"
        Nodes without data beyond the parties the estimator has (a node
        whose loader returned ``None`` where the method has no party for it):
        ``"refuse"`` stops the fit after the handshake, naming them (a node
        whose data path is unset looks the same); ``"leave out"`` fits
        without them, for a ServerApp fitting several methods on one
        federation whose share-holding nodes only some methods use. A node
        left out answered the handshake only; it drops that handshake's
        record at the end of its next fit.
    output_prefix : str, default=""
        Prepended to the key of every output the nodes write at the end of
        the fit (``"kfed-"`` makes the labels ``"kfed-labels"``), so that
        the fits of several estimators on the same nodes keep their outputs
        apart.

    Returns
    -------
    estimator : BaseFederatedClustering
        The fitted estimator, with what the server learns (``cluster_centers_``,
        ``communication_``, ...) and no ``labels_``. Also set:
        ``transport_`` (bytes Flower's records carried, see
        :class:`Transport`), ``client_nodes_`` (the Flower node of every
        party), ``client_identities_`` (the fingerprint of every party's
        identity key, ``None`` for a node without one), ``client_policies_``
        (what every party's node said of its policy and authentication in
        its handshake: ``allowed_methods`` (``None``: any),
        ``min_rows_per_vector``, ``refuse_raw_rows``, ``min_sum_participants``,
        ``allow_clear_sums``, ``dp_epsilon`` (its own budget, ``None``: none),
        ``privacy_ledger`` (the budget holds across fits), ``max_fits``,
        ``max_bound_queries``,
        ``trusted_identities`` (it has a trust file) and
        ``allow_unauthenticated``; what a node says, for the operator to read:
        each node enforces its own) and ``client_outputs_`` (rows of each
        output every node wrote). The fingerprint and the policy of every
        party are also logged at the handshake (``verbose``).
    """
    require_flwr()
    node_ids = _check_request(estimator, n_nodes, node_ids, timeout, connect_timeout, poll_interval)
    if idle_nodes not in ("refuse", "leave out"):
        raise ValueError(f"idle_nodes must be 'refuse' or 'leave out', got {idle_nodes!r}")
    name = type(estimator).__name__
    session = uuid.uuid4().hex
    transport = Transport()

    nodes = _wait_for_nodes(grid, n_nodes, node_ids, connect_timeout)
    hello = _order(
        _handshake(
            grid, nodes, session, timeout, transport, method=name, poll_interval=poll_interval
        )
    )
    others = [h["node_id"] for h in hello if h.get("version") != __version__]
    if others:
        warnings.warn(
            f"nodes {others} run another skfedclust version than the server ({__version__}); "
            "their client steps may differ from the protocol's",
            UserWarning,
            stacklevel=2,
        )
    data_nodes = [h for h in hello if h["n_rows"] > 0]
    if not data_nodes:
        raise ValueError("no node holds data")
    layout = _layout(data_nodes)
    if layout is None:
        widths = {h["n_features"] for h in data_nodes}
        if len(widths) != 1:
            detail = ", ".join(f"node {h['node_id']}: {h['n_features']}" for h in data_nodes)
            raise ValueError(
                "clients must share the same features, or declare their row group and columns "
                f"(a vertical or hybrid federation); the nodes hold {detail}"
            )
        info = _FederationInfo(
            [h["n_rows"] for h in data_nodes], widths.pop(), [h["name"] for h in data_nodes]
        )
        names = _feature_names(data_nodes)
    else:
        if not estimator._supports_vertical:
            raise ValueError(
                f"{name} supports horizontal federations only (every client holds all "
                "features); the nodes declare row groups and columns"
            )
        row_groups, columns, n_features = layout
        info = _FederationInfo(
            [h["n_rows"] for h in data_nodes],
            n_features,
            [h["name"] for h in data_nodes],
            row_groups=row_groups,
            client_cols=columns,
        )
        names = _layout_feature_names(data_nodes, columns, n_features)
    _check_n_samples(estimator, info.n_samples)
    _check_client_sizes(estimator, info)

    random_state = check_random_state(estimator.random_state)
    seeds = random_state.randint(np.iinfo(np.int32).max, size=info.n_clients, dtype=np.int64)
    n_parties = max(info.n_clients, int(estimator._n_parties(info)))
    if len(hello) < n_parties:
        raise ValueError(
            f"{name} needs {n_parties} parties ({n_parties - info.n_clients} without data) "
            f"but only {len(hello)} nodes joined"
        )
    left_out = []
    if len(hello) > n_parties:
        # The data nodes come first: every node after the parties holds no data.
        idle = [h["node_id"] for h in hello[n_parties:]]
        if idle_nodes == "refuse":
            raise ValueError(
                f"nodes {idle} hold no data and {name} has no party for them (their loader "
                "returned None: is their data-path set? idle_nodes='leave out' fits without "
                "them)"
            )
        left_out, hello = idle, hello[:n_parties]

    runtime = FlowerRuntime(
        grid,
        [h["node_id"] for h in hello],
        session=session,
        seeds=seeds,
        client_sizes=info.client_sizes,
        n_features=info.n_features,
        public_keys=[h["public_key"] for h in hello],
        identities=[(h.get("identity"), h.get("key_signature")) for h in hello],
        nonces=[h.get("nonce") for h in hello],
        n_clients=info.n_clients,
        timeout=timeout,
        allowed_modules=allowed_modules,
        name=name,
        row_groups=info.row_groups,
        client_columns=info.client_cols,
    )
    runtime.transport = transport
    runtime.poll_interval = poll_interval
    estimator.__dict__.pop("labels_", None)
    estimator.n_features_in_ = info.n_features
    if names is not None:
        estimator.feature_names_in_ = names
    else:
        estimator.__dict__.pop("feature_names_in_", None)
    with progress(estimator.verbose):
        runtime.stage(
            f"Flower federation of {info.n_clients} clients ({n_parties} parties), "
            f"{info.n_samples} samples, {info.n_features} features"
        )
        policies = [h.get("policy") for h in hello]
        for party, (node_id, (identity, _), policy) in enumerate(
            zip(runtime.node_ids, runtime.identities, policies)
        ):
            # Printed so that a person can compare each party's identity with
            # the one its operator announced out of band, and see what each
            # node's operator agreed to.
            who = "no identity key" if identity is None else fingerprint(bytes.fromhex(identity))
            runtime.stage(f"party {party}: node {node_id}, {who}; {_describe_policy(policy)}")
            if not (isinstance(policy, dict) and policy.get("trusted_identities")):
                logger.warning(
                    "party %d (node %d) does not authenticate the other parties (no "
                    "trusted-identities file): its sealed messages resist a passive server only",
                    party,
                    node_id,
                )
        if left_out:
            runtime.stage(f"nodes {left_out}: no data and no party, left out")
        estimator._fit_runtime(runtime, random_state)
        written = runtime.finish(keep=keep_for_predict, prefix=output_prefix)
    if keep_for_predict:
        estimator.flower_session_ = FlowerSession(runtime)
    else:
        estimator.__dict__.pop("flower_session_", None)
    estimator.transport_ = runtime.transport_report()
    estimator.client_nodes_ = np.asarray(runtime.node_ids, dtype=np.uint64)
    estimator.client_identities_ = [
        None if identity is None else fingerprint(bytes.fromhex(identity))
        for identity, _ in runtime.identities
    ]
    estimator.client_policies_ = policies
    estimator.client_outputs_ = written
    return estimator


def _describe_policy(policy):
    """One line of what a node said of its policy and authentication in its handshake."""
    if not isinstance(policy, dict):
        return "no policy summary"
    methods = policy.get("allowed_methods")
    if policy.get("trusted_identities"):
        auth = "checks the roster against its trusted identities"
    elif policy.get("allow_unauthenticated"):
        auth = "UNAUTHENTICATED (no trusted identities, allow-unauthenticated)"
    else:
        auth = "no trusted identities"
    return (
        f"methods {'any' if methods is None else ', '.join(map(str, methods))}, "
        f"min rows per vector {policy.get('min_rows_per_vector') or 'none'}, "
        f"refuse raw rows {str(policy.get('refuse_raw_rows')).lower()}, "
        f"min sum participants {policy.get('min_sum_participants')}, "
        f"clear sums {'allowed' if policy.get('allow_clear_sums') else 'refused'}, "
        f"{_describe_budget(policy)}, {auth}"
    )


def _describe_budget(policy):
    epsilon = policy.get("dp_epsilon")
    if epsilon is None:
        budget = "no DP budget"
    else:
        span = "across fits (ledger)" if policy.get("privacy_ledger") else "per fit"
        budget = f"DP budget epsilon {epsilon:g} {span}"
    if policy.get("max_fits") is not None:
        budget += f", at most {policy['max_fits']} fits"
    return budget


def predict_on_flower(
    estimator,
    grid,
    *,
    timeout=600.0,
    poll_interval=DEFAULT_POLL_INTERVAL,
    keep_for_predict=False,
):
    """Label the new rows the nodes hold, with the parties of a Flower fit.

    For the estimators whose ``predict`` needs state only the parties hold
    (:class:`~skfedclust.DCClustering`: each party's private map;
    :class:`~skfedclust.OmniFCClustering`: the shares of the training rows),
    fitted by :func:`fit_on_flower` with ``keep_for_predict=True`` in the
    same ServerApp run. Each node loads its new rows (``load_new_data`` of
    :func:`make_client_app`, by default the ``new-data-path`` field of its
    node config) and the estimator's predict protocol runs with the parties
    of the fit; each node writes the labels of its new rows as output
    ``"predicted-labels"``. Nothing of the new rows reaches the server beyond
    what the protocol sends. Other estimators predict from what the server
    holds (``estimator.predict``) without the nodes.

    Parameters
    ----------
    estimator : DCClustering or OmniFCClustering
        Fitted by :func:`fit_on_flower` with ``keep_for_predict=True``.
    grid : flwr.serverapp.Grid
        The grid of the ServerApp run that fitted it.
    timeout : float, default=600
        Seconds to wait for the replies of one exchange.
    poll_interval : float, default=0.1
        Seconds between two pulls of the nodes' replies.
    keep_for_predict : bool, default=False
        Keep the parties' state for another predict run; otherwise the nodes
        drop it at the end of this one and the session is closed.

    Returns
    -------
    result : dict
        ``"written"``: rows of predicted labels each party wrote;
        ``"communication"``: the ledger report of the predict run;
        ``"labels"``: what the server learned of the labels (the analyst's
        labels for DC, whose server assigns them; the querier's labels for
        OmniFC, whose server decodes the distances), by party.
    """
    require_flwr()
    name = type(estimator).__name__
    predict = getattr(estimator, "_predict_runtime", None)
    if predict is None:
        raise NotSupportedOnFlower(
            f"{name} predicts from what the server holds: call estimator.predict(X); "
            "predict_on_flower is for DCClustering and OmniFCClustering, whose parties "
            "keep what predict needs"
        )
    session = getattr(estimator, "flower_session_", None)
    if session is None or not session.open:
        raise RuntimeError(
            f"{name} was not fitted on Flower with keep_for_predict=True, or its nodes "
            "already dropped their state (a predict run without keep_for_predict=True ends "
            "the session): fit again with fit_on_flower(..., keep_for_predict=True)"
        )
    transport = Transport()
    replies = _greet(
        grid,
        session.node_ids,
        list(range(len(session.node_ids))),
        {"session": session.session, "method": name, "predict": True},
        what="the predict handshake",
        timeout=timeout,
        transport=transport,
        poll_interval=poll_interval,
    )
    sizes = []
    for c, (node_id, reply) in enumerate(zip(session.node_ids, replies)):
        control, _, _ = _decode_reply(
            reply, node_id=node_id, party=c, what="the predict handshake", session=session.session
        )
        n_rows = control.get("n_rows")
        if not isinstance(n_rows, int) or isinstance(n_rows, bool) or n_rows < 0:
            raise FlowerNodeError(
                f"node {node_id} sent a predict handshake without a valid 'n_rows'",
                node_id=node_id,
                party=c,
                step="the predict handshake",
            )
        if c < session.n_clients and n_rows and control.get("n_features") != _width(session, c):
            raise ValueError(
                f"node {node_id} (party {c}) holds new rows of {control.get('n_features')} "
                f"features; it fitted with {_width(session, c)}"
            )
        sizes.append(n_rows)
    runtime = FlowerRuntime(
        grid,
        session.node_ids,
        session=session.session,
        seeds=session.seeds,
        client_sizes=sizes[: session.n_clients],
        n_features=session.n_features,
        public_keys=session.public_keys,
        identities=session.identities,
        nonces=session.nonces,
        n_clients=session.n_clients,
        timeout=timeout,
        allowed_modules=session.allowed_modules,
        name=f"{name}.predict",
        row_groups=session.row_groups,
        client_columns=session.client_columns,
    ).continued(session, sizes[: session.n_clients])
    runtime.transport = transport
    runtime.poll_interval = poll_interval
    with progress(estimator.verbose):
        labels = predict(runtime)
        written = runtime.finish(keep=keep_for_predict, prefix="predicted-")
    session.last_exchange = runtime._exchange
    session.open = bool(keep_for_predict)
    return {
        "written": written,
        "communication": runtime.ledger.report(),
        "labels": labels,
    }


def _width(session, c):
    if session.client_columns is None:
        return session.n_features
    return len(session.client_columns[c])
