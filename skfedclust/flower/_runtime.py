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
import weakref

import numpy as np

from ..federation import logger
from ..federation._ledger import SERVER, Ledger
from ..federation._runtime import Received, Runtime, step_reads
from ._codec import encode
from ._wire import (
    DEFAULT_ALLOWED_MODULES,
    ERROR_REFUSED,
    FINISH,
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
        self.waits = []

    def add_wait(self, seconds):
        """Count the seconds the server waited for one exchange's replies."""
        self.waits.append(float(seconds))

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
            is left out of them), ``n_exchanges`` and ``seconds_waiting``
            (the exchanges' wall time from sending to the last reply: the
            rest of a fit's time is the server's own work).
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
            "n_exchanges": len(self.waits),
            "seconds_waiting": float(sum(self.waits)),
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
    transport.add_wait(time.monotonic() - started)
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
