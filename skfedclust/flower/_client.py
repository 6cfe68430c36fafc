"""The node side: a Flower ClientApp that serves the client steps of any protocol.

Each SuperNode is one party. It loads the data it holds with a function of its
node config, answers the server's handshake with public metadata only (row and
feature counts, a name, a fresh public key signed by its identity key, the
public summary of its policy), checks the roster of the fit's parties before
it seals or opens anything, runs the client steps the server
names (allow-listed functions of skfedclust) on that data, keeps its private
state in its Flower Context between steps, seals what it sends to other
parties, and at the end writes its declared outputs (its labels) where its
operator said. Its rows, its state, its outputs and its private randomness
(drawn from the operating system, or from the ``private-seed`` field of the
node config for reproducible tests) never leave the node.
"""

from __future__ import annotations

import json
import logging
import pickle
import string
import traceback
from pathlib import Path

import numpy as np

from .. import __version__
from ..federation import payload_nbytes
from ..federation._inputs import _feature_names, check_client_array
from ..federation._runtime import (
    Inbox,
    Party,
    _call_step_limited,
    allowed_step_modules,
    threads_per_step,
)
from ..node._gate import admit_step, serve_step
from ..node._node_config import node_config_value
from . import _crypto
from ._codec import decode, encode, from_bytes, to_bytes
from ._policy import NodePolicy, method_step_modules
from ._wire import (
    DEFAULT_ALLOWED_MODULES,
    ERROR_REFUSED,
    ERROR_STEP,
    FINISH,
    HELLO,
    STEP,
    from_content,
    require_flwr,
    resolve_step,
    to_content,
)

try:
    from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message
    from flwr.clientapp import ClientApp
except ImportError:  # pragma: no cover
    ClientApp = None

__all__ = [
    "FileLoader",
    "FileWriter",
    "load_node_data",
    "make_client_app",
    "node_layout",
    "save_node_output",
]

logger = logging.getLogger("skfedclust.flower")

#: Records of the node's private state in its Flower Context.
NODE = "skfedclust.node"
STATE = "skfedclust.state"
OUTPUTS = "skfedclust.outputs"

#: Node-config field that fixes a node's private randomness (tests only: a
#: deployed node draws it from the operating system).
PRIVATE_SEED = "private-seed"
#: Node-config fields of the node's long-term identity key (a PEM file written
#: by ``python -m skfedclust.flower keygen``) and of the identities it trusts.
IDENTITY_KEY = "identity-key"
TRUSTED_IDENTITIES = "trusted-identities"
#: Node-config field that lets a node take part without a trust file (its
#: sealed messages then resist a passive server only).
ALLOW_UNAUTHENTICATED = "allow-unauthenticated"
#: Node-config field of the threads a node's steps may use (default: its cores).
N_THREADS = "n-threads"


def _identity(node_config):
    path = node_config.get(IDENTITY_KEY)
    return None if path is None else _crypto.IdentityKey.load(path)


def _allows_unauthenticated(node_config):
    return node_config_value(node_config, ALLOW_UNAUTHENTICATED)


def _authentication(node_config):
    """The node's identity key and trusted identities; refuse a fit it cannot authenticate.

    A node without a ``trusted-identities`` file (or without an
    ``identity-key``) refuses, unless its node config sets
    ``allow-unauthenticated=true``: then it warns and goes on (its sealed
    messages resist a passive server only, and ``trusted`` is ``None``).

    Returns
    -------
    identity : IdentityKey or None
    trusted : dict or None
    """
    allowed = _allows_unauthenticated(node_config)
    identity = _identity(node_config)
    path = node_config.get(TRUSTED_IDENTITIES)
    missing = [f for f, v in ((IDENTITY_KEY, identity), (TRUSTED_IDENTITIES, path)) if v is None]
    if missing and not allowed:
        raise PermissionError(
            f"this node has no {' and no '.join(missing)} in its node config, so it cannot "
            "authenticate the fit's parties (a server could swap their keys and read its "
            "sealed messages): it refuses to take part. Make an identity on every node with "
            "'python -m skfedclust.flower keygen node.pem', list the printed lines of every "
            "node in a file, and start the node with --node-config \"identity-key='node.pem' "
            "trusted-identities='trusted_identities.txt'\"; or set allow-unauthenticated=true "
            "to accept unauthenticated peers"
        )
    if path is None:
        logger.warning(
            "node has no %s file and %s=true: the peers' keys are not authenticated, so a "
            "server that swaps them can read this node's sealed messages",
            TRUSTED_IDENTITIES,
            ALLOW_UNAUTHENTICATED,
        )
        return identity, None
    return identity, _crypto.load_trusted_identities(path)


def policy_summary(policy, node_config, ledger=None):
    """The public summary of a node's policy and authentication, sent in its handshake.

    With its ``ledger``, what the node has spent and has left of its budget
    and of its fits (``ledger``: ``fits_used``, ``fits_left``,
    ``epsilon_spent``, ``epsilon_left``), this fit counted.
    """
    return {
        "allowed_methods": policy.allowed_methods,
        "min_rows_per_vector": policy.min_rows_per_vector,
        "refuse_raw_rows": "strict" if policy.strict_rows else bool(policy.refuse_raw_rows),
        "min_sum_participants": int(policy.min_sum_participants),
        "allow_clear_sums": bool(policy.allow_clear_sums),
        "dp_epsilon": policy.dp_epsilon,
        "privacy_ledger": policy.privacy_ledger is not None,
        "max_fits": None if ledger is None else ledger.max_fits,
        "ledger": None if ledger is None else ledger.status(policy.dp_epsilon, policy.dp_delta),
        "max_bound_queries": policy.max_bound_queries,
        "dp_trusted_shares": int(policy.dp_trusted_shares),
        "allow_row_release": list(policy.allow_row_release),
        "allow_coordinator_centers": list(policy.allow_coordinator_centers),
        "trusted_identities": node_config.get(TRUSTED_IDENTITIES) is not None,
        "allow_unauthenticated": _allows_unauthenticated(node_config),
    }


def _check_roster(begin, node_config, record):
    """Check the roster of ``begin`` (:func:`~skfedclust.flower._crypto.verify_roster`).

    Run before the node seals or opens anything; a failure is a
    :class:`PermissionError` naming the rule and the slot.

    Returns
    -------
    identities : list of str or None
        Each slot's identity fingerprint as this node verified it: ``None``
        for a slot without one, and for every slot when the node checks no
        signature (``allow-unauthenticated`` without trusted identities: the
        server may put anyone's public identity in a slot it controls).
    """
    if not isinstance(begin, dict):
        raise _crypto.RosterError("roster-format", None, f"malformed begin record {begin!r}")
    _, trusted = _authentication(node_config)
    party, n_parties, n_clients = begin.get("party"), begin.get("n_parties"), begin.get("n_clients")
    for value in (party, n_parties, n_clients):
        if isinstance(value, bool) or not isinstance(value, int):
            raise _crypto.RosterError(
                "slot-count", None, "the party, parties and clients must be integers"
            )
    if not 0 < n_clients <= n_parties:
        raise _crypto.RosterError(
            "slot-count", None, f"{n_clients} data-holding clients among {n_parties} parties"
        )
    own = {
        "key": _crypto.KeyPair(record["private_key"]).public_bytes,
        "identity": bytes.fromhex(record["identity"]) if record["identity"] else None,
        "nonce": bytes.fromhex(record["nonce"]),
    }
    prints = _crypto.verify_roster(
        begin.get("roster"),
        party=party,
        n_parties=n_parties,
        own=own,
        session=record["session"],
        method=record["method"] or None,
        trusted=trusted,
    )
    if trusted is None:
        return [None] * len(prints)
    return prints


# --------------------------------------------------------------------------- #
# Data in, outputs out
# --------------------------------------------------------------------------- #
def _read(path):
    path = Path(path)
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    if path.suffix in (".csv", ".txt"):
        return np.loadtxt(path, delimiter="," if path.suffix == ".csv" else None, ndmin=2)
    raise ValueError(f"cannot read {path}: use a .npy, .csv or .txt file, or your own loader")


def _write(path, values):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    values = np.asarray(values)
    if path.suffix in (".csv", ".txt"):
        fmt = "%d" if values.dtype.kind in "biu" else "%.17g"
        np.savetxt(path, values, fmt=fmt, delimiter=",")
    else:
        np.save(path, values, allow_pickle=False)
    return str(path)


def _pattern_fields(pattern, skip=()):
    """The names of the fields a format pattern reads (``"{data-path}"``: ``data-path``)."""
    names = []
    for _, field, _, _ in string.Formatter().parse(pattern):
        if field:
            name = field.split(".", 1)[0].split("[", 1)[0]
            if name not in skip and name not in names:
                names.append(name)
    return tuple(names)


class FileLoader:
    """Load a node's rows from a file named by its node config.

    Parameters
    ----------
    pattern : str, default="{data-path}"
        Path of the file, formatted with the node config: ``"{data-path}"``
        reads the ``data-path`` a SuperNode was started with
        (``--node-config "data-path='clinic_a.npy'"``);
        ``"/data/client_{partition-id}.npy"`` suits Flower's simulation,
        whose nodes have a ``partition-id``. ``.npy``, ``.csv`` and ``.txt``
        files are read. A node whose config lacks the field holds no data (a
        party of the protocol without rows).
    """

    def __init__(self, pattern="{data-path}"):
        self.pattern = pattern

    @property
    def node_config_fields(self):
        """The node-config fields the pattern names (the node accepts them)."""
        return _pattern_fields(self.pattern)

    def __call__(self, node_config):
        try:
            path = self.pattern.format_map(dict(node_config))
        except KeyError:
            return None
        return _read(path)

    def __repr__(self):
        return f"FileLoader({self.pattern!r})"


class FileWriter:
    """Write what a node keeps for its user (its labels) to a file named by its node config.

    Parameters
    ----------
    pattern : str, default=None
        Path pattern formatted with the node config and ``key`` (the name of
        the output, ``"labels"``), such as ``"/out/{key}_{partition-id}.npy"``.
        ``None`` writes output ``key`` to the path in the node-config field
        ``<key>-path`` (``labels-path``). ``.npy`` files are written with
        :func:`numpy.save`, ``.csv`` and ``.txt`` files as text. When a field
        is missing nothing is written.
    """

    def __init__(self, pattern=None):
        self.pattern = pattern

    @property
    def node_config_fields(self):
        """The node-config fields the pattern names (``<key>-path`` fields are known anyway)."""
        return () if self.pattern is None else _pattern_fields(self.pattern, skip=("key",))

    def __call__(self, node_config, key, values):
        config = dict(node_config)
        if self.pattern is None:
            target = config.get(f"{key}-path")
        else:
            try:
                target = self.pattern.format_map({**config, "key": key})
            except KeyError:
                target = None
        return None if target is None else _write(target, values)

    def __repr__(self):
        return f"FileWriter({self.pattern!r})"


load_node_data = FileLoader()
#: The default loader of a node's new rows for a predict run (node-config
#: field ``new-data-path``).
load_node_new_data = FileLoader("{new-data-path}")
save_node_output = FileWriter()


#: Node-config fields of a vertical or hybrid federation: the node's row group
#: and the global indices of the features it holds.
ROW_GROUP = "row-group"
COLUMNS = "columns"


def node_layout(node_config):
    """The node's place in a vertical or hybrid federation, from its node config.

    Reads ``row-group`` (an int: nodes with the same value hold the same
    samples, in the same order) and ``columns`` (the global indices of the
    node's features, in the order of its data's columns, as ``"0,1,2"``).
    Both or neither: a node without them holds every feature of its own rows
    (a horizontal federation).

    Parameters
    ----------
    node_config : mapping
        The node's config.

    Returns
    -------
    layout : tuple of (int, str or list of int) or None
        ``(row_group, columns)``, or ``None`` for a horizontal node.
    """
    config = dict(node_config)
    if ROW_GROUP not in config and COLUMNS not in config:
        return None
    if ROW_GROUP not in config or COLUMNS not in config:
        raise ValueError(
            f"the node config sets only one of {ROW_GROUP!r} and {COLUMNS!r}; a node of a "
            "vertical or hybrid federation declares both (e.g. row-group=0 columns='0,1,2')"
        )
    return node_config_value(config, ROW_GROUP), node_config_value(config, COLUMNS)


def _checked_layout(layout, n_features):
    """``(row_group, columns)`` as an int and a list of distinct non-negative ints."""
    row_group, columns = layout
    if isinstance(row_group, bool) or not isinstance(row_group, (int, np.integer)):
        raise ValueError(f"{ROW_GROUP} must be an int, got {row_group!r}")
    if isinstance(columns, str):
        try:
            columns = [int(c) for c in columns.replace(" ", "").split(",") if c]
        except ValueError as exc:
            raise ValueError(
                f"{COLUMNS} must list feature indices such as '0,1,2', got {columns!r}"
            ) from exc
    columns = [int(c) for c in np.atleast_1d(columns)]
    if len(columns) != n_features:
        raise ValueError(
            f"{COLUMNS} names {len(columns)} features but the node's data has {n_features}"
        )
    if min(columns, default=0) < 0 or len(set(columns)) != len(columns):
        raise ValueError(f"{COLUMNS} must be distinct non-negative indices, got {columns}")
    return int(row_group), columns


def _default_name(node_config):
    for key in ("client-name", "partition-id"):
        if key in node_config:
            return node_config[key]
    return None


# --------------------------------------------------------------------------- #
# The node's private state in its Context
# --------------------------------------------------------------------------- #
def _key(which, session):
    # Every fit keeps its records under its own session id: a message of an
    # aborted fit still in flight (its handshake, say) cannot overwrite the
    # records of the fit that follows it.
    return f"{which}:{session}"


def _nested_step_modules(allowed_modules, method):
    """The modules whose steps a step may name (a secure sum's summand) during a fit of ``method``.

    The package's part of the node's allow-list narrows to the agreed method's
    modules; packages the operator allowed besides are kept.
    """
    agreed = method_step_modules(method or None)
    nested = []
    for module in allowed_modules:
        if module == "skfedclust":
            nested.extend(agreed)
        elif module.startswith("skfedclust."):
            if any(module == m or module.startswith(m + ".") for m in agreed):
                nested.append(module)
            nested.extend(m for m in agreed if m.startswith(module + "."))
        else:
            nested.append(module)
    return tuple(nested)


def _node_record(context, session):
    key = _key(NODE, session)
    if key not in context.state.config_records:
        raise RuntimeError(
            f"this node holds no handshake of fit {session!r} (the fit ended, or the node "
            "restarted, or another fit was started on the same nodes)"
        )
    return context.state.config_records[key]


def _drop_records(context, keep=None):
    """Forget the records of every fit (the one ending, and any that was aborted).

    ``keep``: a session whose handshake and state stay (for a later predict
    run in the same Flower run); its outputs go, once written.
    """
    kept = set() if keep is None else {_key(NODE, keep), _key(STATE, keep)}
    for store in (context.state.config_records, context.state.array_records):
        for key in [k for k in store.keys() if k.split(":", 1)[0] in (NODE, STATE, OUTPUTS)]:
            if key not in kept:
                del context.state[key]


def _ledger_node(identity, name, key_path=None):
    """Whose ledger a node keeps: its identity key's fingerprint, else its name, else "node".

    Never its rows: a node's budget and count of fits are the node's, and a
    changed row does not make it another node. A node without an identity key
    or a name is the one node of its ledger directory. A rotated identity key
    (``keygen --rotate-from``) keeps the ledger of the node's first key.
    """
    if identity is not None:
        if key_path is not None:
            from ._rotation import ledger_identity

            return ledger_identity(identity, key_path)
        return identity.fingerprint
    if name is not None:
        return f"name:{name}"
    return "node"


def _ledger_identities(identities, node_config):
    """The peers' identities as the node's ledger records them: a key its trust file says was
    rotated from another (each link signed by the key it replaces) is that key's node."""
    path = node_config.get(TRUSTED_IDENTITIES)
    if path is None or identities is None:
        return identities
    from ._rotation import canonical_identities, load_rotations

    return canonical_identities(identities, load_rotations(path))


def _node_ledger(policy, record, session):
    """The node's privacy ledger for this fit, of the node its handshake named.

    The handshake wrote it: from here on a missing file is damage.
    """
    if policy.privacy_ledger is None or "ledger" not in record:
        return None
    from ..node._ledger import NodeLedger
    from ..node._policy import DEFAULT_MAX_FITS

    max_fits = DEFAULT_MAX_FITS if policy.max_fits is None else policy.max_fits
    return NodeLedger(
        policy.privacy_ledger, record["ledger"], session, max_fits=max_fits, written=True
    )


def _load_state(context, session, which=STATE):
    record = _node_record(context, session)
    arrays = context.state.array_records[_key(which, session)]
    # The objects were pickled by this node into its own Context (below); nothing
    # another party sent is ever unpickled.
    objects = [
        pickle.loads(record[f"{which}.object.{i}"]) for i in range(record[f"{which}.n_objects"])
    ]
    arrays = [arrays[str(i)].numpy() for i in range(len(arrays))]
    return decode(record[which], arrays, "state", objects=objects)


def _save_state(context, session, state, which=STATE):
    objects = []
    skeleton, arrays = encode(state, "the client's state", objects=objects)
    record = _node_record(context, session)
    for key in [k for k in record.keys() if k.startswith(f"{which}.object.")]:
        del record[key]
    # What a step keeps may be any object (a fitted transformer); it stays in
    # this node's Context and never travels, so it may be pickled.
    for i, obj in enumerate(objects):
        record[f"{which}.object.{i}"] = pickle.dumps(obj)
    record[f"{which}.n_objects"] = len(objects)
    record[which] = skeleton
    context.state[_key(which, session)] = ArrayRecord(
        {str(i): Array(np.asarray(a)) for i, a in enumerate(arrays)}
    )


def node_threads(node_config):
    """Threads the node's client steps may use: its ``n-threads``, else the cores it may use."""
    threads = node_config_value(node_config, N_THREADS)
    return threads_per_step(None) if threads is None else threads


def _private_entropy(node_config):
    """The node's private entropy: its ``private-seed``, else fresh OS entropy (as text)."""
    seed = node_config_value(node_config, PRIVATE_SEED)
    return str(np.random.SeedSequence().entropy if seed is None else seed)


def _open_inbox(body, sealed, keys, begin, record, party, last):
    """The step's inbox: the server's messages, and the peers' messages opened.

    A peer message is refused when its sender is not a party of the roster (or
    is this node), when it comes out of order (replayed or reordered by the
    relay, ``last`` holds each sender's last exchange and is updated), or when
    it does not open (altered, swapped or misdirected).
    """
    session, roster, digest = record["session"], begin["roster"], record["roster"]
    n_parties = int(begin["n_parties"])
    inbox, server_tags = {}, set()
    for event in body["events"]:
        if event[0] == "server":
            _, tag, payload = event
            inbox[tag] = payload
            server_tags.add(tag)
            continue
        _, tag, sender, exchange, ref = event
        sender, exchange = int(sender), int(exchange)
        if not 0 <= sender < n_parties or sender == party:
            raise PermissionError(
                f"the relay delivers a message from party {sender}: parties are "
                f"0..{n_parties - 1} and this node is party {party}"
            )
        if exchange <= last.get(sender, -1):
            raise RuntimeError(
                f"a message from party {sender} of exchange {exchange} arrived after one "
                f"of exchange {last[sender]}: replayed or reordered by the relay"
            )
        last[sender] = exchange
        pair = keys.pair_key(
            bytes.fromhex(roster[sender]["key"]), salt=session, parties=(sender, party)
        )
        try:
            plain = _crypto.open_sealed(
                pair,
                sealed[ref],
                session=session,
                exchange=exchange,
                tag=tag,
                sender=sender,
                recipient=party,
                roster=digest,
            )
        except _crypto.SealError as exc:
            # A refusal, not a failure: the relay altered, swapped or misdirected it.
            raise PermissionError(
                f"could not open the sealed message from party {sender}: {exc}"
            ) from None
        inbox.setdefault(tag, {})[sender] = from_bytes(plain, f"message from party {sender}")
    # Which messages are the server's is what the relay's events say, as in
    # process: a step (a secure sum keying its statistic) never guesses it.
    return Inbox(inbox, server_tags)


def _seal_to_peers(to_peers, keys, begin, record, party, control):
    """Each peer message sealed for its recipient; returns ``(sizes, sealed)`` by recipient."""
    session, roster, digest = record["session"], begin["roster"], record["roster"]
    n_parties = int(begin["n_parties"])
    peers, out = {}, {}
    for recipient, payload in sorted(to_peers.items()):
        recipient = int(recipient)
        if not 0 <= recipient < n_parties:
            raise ValueError(f"unknown party {recipient}: parties are 0..{n_parties - 1}")
        if recipient == party:
            raise ValueError(f"a party cannot send a message to itself ({party})")
        peers[str(recipient)] = payload_nbytes(payload)
        pair = keys.pair_key(
            bytes.fromhex(roster[recipient]["key"]),
            salt=session,
            parties=(party, recipient),
        )
        out[str(recipient)] = _crypto.seal(
            pair,
            to_bytes(payload, f"message to party {recipient}"),
            session=session,
            exchange=int(control["exchange"]),
            tag=control["tag"],
            sender=party,
            recipient=recipient,
            roster=digest,
        )
    return peers, out


class _Service:
    """The four message handlers of a node (see :func:`make_client_app`)."""

    def __init__(
        self,
        load_data,
        save_output,
        allowed_modules,
        client_name,
        layout=node_layout,
        load_new_data=load_node_new_data,
        node_defaults=None,
        node_config_fields=(),
    ):
        self.load_data = load_data
        self.load_new_data = load_new_data
        self.save_output = save_output
        self.allowed_modules = tuple(allowed_modules)
        self.client_name = client_name
        self.layout = layout
        self.node_defaults = node_defaults
        #: Fields the app's own functions read, besides the package's: explicit,
        #: or named by the patterns of its FileLoader and FileWriter.
        self.node_config_fields = tuple(
            dict.fromkeys(
                [
                    *node_config_fields,
                    *(
                        field
                        for function in (load_data, load_new_data, save_output, layout, client_name)
                        for field in getattr(function, "node_config_fields", ())
                    ),
                ]
            )
        )
        self._cache = {}

    def apply_defaults(self, context):
        """Add the ``node_defaults`` fields the node's config lacks (its own fields win)."""
        if not self.node_defaults:
            return
        config = dict(context.node_config)
        if callable(self.node_defaults):
            defaults = dict(self.node_defaults(config) or {})
        else:
            defaults = {}
            for key, value in self.node_defaults.items():
                if isinstance(value, str):
                    try:
                        value = value.format_map(config)
                    except KeyError as exc:
                        raise ValueError(
                            f"node_defaults[{key!r}] = {value!r} names the node-config field "
                            f"{exc}, which this node's config lacks"
                        ) from None
                defaults[key] = value
        for key, value in defaults.items():
            if key not in context.node_config:
                context.node_config[key] = value

    # -- data ------------------------------------------------------------------
    def data(self, context):
        key = (context.run_id, context.node_id)
        if key not in self._cache:
            raw = self.load_data(context.node_config)
            names = None
            if raw is not None:
                names = _feature_names(raw)
                raw = np.ascontiguousarray(
                    check_client_array(raw, f"the data of node {context.node_id}")
                )
                # Read-only, as in process: no step changes what a later step
                # sees, and the node's row checks keep their index of the rows.
                raw.flags.writeable = False
            if len(self._cache) >= 8:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = (raw, names)
        return self._cache[key]

    def new_data(self, context, session):
        """The node's new rows for a predict run of ``session`` (``None``: it has none)."""
        key = (context.run_id, context.node_id, session, "new")
        if key not in self._cache:
            raw = self.load_new_data(context.node_config)
            if raw is not None:
                raw = np.ascontiguousarray(
                    check_client_array(raw, f"the new rows of node {context.node_id}")
                )
            if len(self._cache) >= 8:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = raw
        return self._cache[key]

    # -- handlers ----------------------------------------------------------------
    def hello(self, message, context):
        control, _, _ = from_content(message.content, "handshake")
        # Refused here, before the node loads or reveals anything of its data: the
        # whole node config is checked, each unknown field and malformed value named.
        policy = NodePolicy.from_node_config(context.node_config, self.node_config_fields)
        method = control.get("method")
        policy.check_method(str(method))
        if control.get("predict"):
            return self.hello_predict(control, context)
        identity, _ = _authentication(context.node_config)
        data, names = self.data(context)
        keys = _crypto.KeyPair()
        nonce = _crypto.new_nonce()
        session = str(control["session"])
        method = "" if method is None else str(method)
        context.state[_key(NODE, session)] = ConfigRecord(
            {
                "session": session,
                "method": method,
                "private_key": keys.private_bytes,
                "nonce": nonce.hex(),
                "identity": "" if identity is None else identity.public_bytes.hex(),
                "private_entropy": _private_entropy(context.node_config),
                "begin": "",
                "roster": "",
                "last": "{}",
            }
        )
        name = self.client_name(context.node_config)
        ledger = policy.ledger(
            data,
            session,
            node=_ledger_node(identity, name, context.node_config.get(IDENTITY_KEY)),
            source=context.node_config.get("data-path"),
            # The node's own directory: its ledgers keyed by rows are all its.
            adopt="all",
        )
        if ledger is not None:
            # Refused here (max-fits, ledger-damaged), before the node sends
            # anything of this fit.
            ledger.enter_fit()
            context.state[_key(NODE, session)]["ledger"] = ledger.node
        _save_state(context, session, {})
        _save_state(context, session, {}, OUTPUTS)
        layout = self.layout(context.node_config) if data is not None else None
        if layout is not None:
            layout = _checked_layout(layout, data.shape[1])
        signature = None
        if identity is not None:
            # Binds the key to this fit, the method agreed to and this node's nonce;
            # every node checks at the start of its steps that its slot holds them.
            signature = identity.sign_fit_key(
                keys.public_bytes, session=session, nonce=nonce, method=method or None
            )
            logger.info("node %s: identity %s", context.node_id, identity.fingerprint)
        reply = {
            "session": control["session"],
            "n_rows": 0 if data is None else int(data.shape[0]),
            "n_features": 0 if data is None else int(data.shape[1]),
            "name": name if isinstance(name, (int, str)) or name is None else str(name),
            "feature_names": None if names is None else [str(n) for n in names],
            "public_key": keys.public_bytes.hex(),
            "identity": None if identity is None else identity.public_bytes.hex(),
            "key_signature": None if signature is None else signature.hex(),
            "nonce": nonce.hex(),
            "policy": policy_summary(policy, context.node_config, ledger),
            "version": __version__,
            "row_group": None if layout is None else layout[0],
            "columns": None if layout is None else layout[1],
        }
        return to_content(reply)

    def hello_predict(self, control, context):
        """Handshake of a predict run: the fit's parties go on, with the node's new rows."""
        session = str(control["session"])
        record = _node_record(context, session)
        fitted = self.data(context)[0]
        new = self.new_data(context, session) if fitted is not None else None
        if new is not None and new.shape[1] != fitted.shape[1]:
            raise ValueError(
                f"the node's new rows have {new.shape[1]} features; it fitted with "
                f"{fitted.shape[1]}"
            )
        record["phase"] = "predict"
        _save_state(context, session, {}, OUTPUTS)
        return to_content(
            {
                "session": session,
                "n_rows": 0 if new is None else int(new.shape[0]),
                "n_features": 0 if new is None else int(new.shape[1]),
            }
        )

    def _session(self, context, control):
        return _node_record(context, str(control.get("session")))

    def step(self, message, context):
        control, body, sealed = from_content(message.content, "step message")
        record = self._session(context, control)
        if control.get("begin"):
            # The whole roster is checked before this node seals or opens anything.
            identities = _check_roster(control["begin"], context.node_config, record)
            record["identities"] = json.dumps(_ledger_identities(identities, context.node_config))
            record["begin"] = json.dumps(control["begin"])
            record["roster"] = _crypto.roster_digest(control["begin"]["roster"])
        if not record["begin"]:
            raise RuntimeError("this node got a step before learning its party number")
        begin = json.loads(record["begin"])
        party = int(begin["party"])
        if int(control["party"]) != party:
            raise RuntimeError(f"a step for party {control['party']} reached party {party}")
        step = resolve_step(control["step"], self.allowed_modules)
        policy = NodePolicy.from_node_config(context.node_config, self.node_config_fields)
        # Admitted before the node opens its inbox; admitted again by the gate below.
        admit_step(step, policy, record["method"] or None, name=control["step"])
        keys = _crypto.KeyPair(record["private_key"])
        session = record["session"]
        last = {int(k): v for k, v in json.loads(record["last"]).items()}

        inbox = _open_inbox(body, sealed, keys, begin, record, party, last)

        data = None
        if party < int(begin["n_clients"]):
            predicting = "phase" in record and record["phase"] == "predict"
            data = self.new_data(context, session) if predicting else self.data(context)[0]
        me = Party(
            party,
            begin["seed"],
            int(record["private_entropy"]),
            stream=(int(control["exchange"]),),
            n_threads=node_threads(context.node_config),
            policy=policy,
            ledger=_node_ledger(policy, record, session),
            # The ledger compares sums of different fits by who took part, not
            # by slot: a slot it could not authenticate is of this fit alone.
            identities=json.loads(record["identities"]) if "identities" in record else None,
        )
        state = _load_state(context, session)
        with allowed_step_modules(_nested_step_modules(self.allowed_modules, record["method"])):
            # The node's one gate, as in the in-process runtime.
            reply = serve_step(
                step,
                data,
                inbox,
                state,
                me,
                body["public"],
                method=record["method"] or None,
                run=_call_step_limited,
            )
        state.update(reply.keep)
        _save_state(context, session, state)
        if reply.output:
            outputs = _load_state(context, session, OUTPUTS)
            outputs.update(reply.output)
            _save_state(context, session, outputs, OUTPUTS)
        record["last"] = json.dumps({str(k): v for k, v in last.items()})

        peers, out = _seal_to_peers(reply.to_peers, keys, begin, record, party, control)
        reply_control = {
            "session": session,
            "step": control["step"],
            "exchange": control["exchange"],
            "party": party,
            "has_send": reply.send is not None,
            "peers": peers,
        }
        return to_content(reply_control, reply.send, sealed=out, where="the step's reply")

    def finish(self, message, context):
        control, _, _ = from_content(message.content, "finish message")
        record = self._session(context, control)
        outputs = _load_state(context, record["session"], OUTPUTS)
        prefix = str(control.get("prefix", ""))
        written = {}
        for key, values in outputs.items():
            key = prefix + key
            where = self.save_output(context.node_config, key, values)
            written[key] = 0 if where is None else int(np.shape(values)[0])
            if where is None:
                logger.warning(
                    "node %s: %r not written (no output path configured)", context.node_id, key
                )
            else:
                logger.info("node %s: %r written to %s", context.node_id, key, where)
        # The fit is over: its keys, state and outputs leave the node's Context,
        # with what any aborted fit left there; unless the server asks the node
        # to keep its keys and state for a predict run of this Flower run.
        _drop_records(context, keep=record["session"] if control.get("keep") else None)
        return to_content({"session": control["session"], "written": written})

    # -- dispatch ----------------------------------------------------------------
    def handle(self, handler, message, context):
        try:
            self.apply_defaults(context)
            return Message(handler(message, context), reply_to=message)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the server
            logger.error("node %s failed:\n%s", context.node_id, traceback.format_exc())
            code = ERROR_REFUSED if isinstance(exc, PermissionError) else ERROR_STEP
            # Only the exception's type and message go back, not the traceback,
            # whose frames could show local values.
            reason = f"{type(exc).__name__}: {exc}"
            return Message(Error(code, reason), reply_to=message)


def make_client_app(
    load_data=load_node_data,
    *,
    save_output=save_node_output,
    client_name=_default_name,
    allowed_modules=DEFAULT_ALLOWED_MODULES,
    layout=node_layout,
    app=None,
    load_new_data=load_node_new_data,
    node_defaults=None,
    node_config_fields=(),
):
    """A Flower ClientApp that runs skfedclust client steps on the node's own data.

    Parameters
    ----------
    load_data : callable, default=load_node_data
        ``load_data(node_config) -> array of shape (n_rows, n_features)`` or
        ``None`` (a party without data). The default reads the file named by
        the ``data-path`` field of the node config. The rows are checked as
        ``fit`` checks a client array (finite, 2-D, float64).
    save_output : callable, default=save_node_output
        ``save_output(node_config, key, values) -> path or None``: where the
        node writes each output the protocol's steps declared for its user
        (``key="labels"``: one label per row it holds). The default writes
        the labels to the ``labels-path`` field of the node config, if any.
    client_name : callable, default=None
        ``client_name(node_config)``: the name that orders the clients (as
        ``client_ids`` does in ``fit``). The default uses the ``client-name``
        field, else Flower's ``partition-id`` (simulation).
    allowed_modules : tuple of str, default=("skfedclust",)
        Packages whose module-level client steps the node runs.
    layout : callable, default=node_layout
        ``layout(node_config) -> (row_group, columns) or None``: the node's
        place in a vertical or hybrid federation, sent in the handshake as
        public schema. The default reads the ``row-group`` and ``columns``
        fields of the node config (:func:`node_layout`); ``None`` means the
        node holds every feature of its rows.
    app : ClientApp, default=None
        Add the handlers to this ClientApp instead of a new one.
    load_new_data : callable, default=load_node_new_data
        ``load_new_data(node_config) -> array or None``: the node's new rows
        for a predict run (:func:`~skfedclust.flower.predict_on_flower`),
        checked as ``load_data``'s. The default reads the file named by the
        ``new-data-path`` field of the node config; its labels are written
        as output ``"predicted-labels"``.
    node_defaults : dict or callable, default=None
        Node-config fields a node uses where its own config lacks them (a
        field the node's operator set always wins). A dict's string values
        are formatted with the node config, as :class:`FileLoader`'s
        pattern: ``{"identity-key": "/keys/node_{partition-id}.pem",
        "trusted-identities": "/keys/trusted.txt"}`` gives the nodes of
        Flower's simulation, whose config holds only ``partition-id`` and
        ``num-partitions``, their identities. A callable
        ``node_defaults(node_config) -> dict`` may choose by node.
    node_config_fields : iterable of str, default=()
        Node-config fields the app's own functions read (``load_data``,
        ``save_output``, ...) besides those of the package
        (``NODE_CONFIG_FIELDS`` of ``skfedclust.node``, the Flower
        guide's node-config reference). The node refuses, at its first
        message and naming the field, any other field (a misspelt one) and
        any value a field of the package cannot take; the fields named here
        are accepted as they are. The fields named by the patterns of a
        :class:`FileLoader` or :class:`FileWriter` passed as ``load_data``,
        ``load_new_data`` or ``save_output`` are added.

    Notes
    -----
    Besides what ``load_data`` and ``save_output`` read, the node config may
    hold:

    * ``identity-key`` (the node's Ed25519 identity key file, from ``python -m
      skfedclust.flower keygen``) and ``trusted-identities`` (a file of the
      identities of the federation's nodes,
      ``load_trusted_identities``). The node signs its
      per-fit key with its identity, bound to the fit, the method and a fresh
      nonce of its own; before it seals or opens anything it checks the whole
      roster the server sends: one slot per party, distinct identities and
      keys, every peer's key signed by a trusted identity over its slot's
      nonce, its own slot holding its own key, identity and nonce. A failure
      is a refusal naming the rule and the slot.
    * ``allow-unauthenticated`` (default ``false``): a node without an
      ``identity-key`` or a ``trusted-identities`` file refuses every fit at
      the handshake, saying how to make them. With ``true`` it takes part
      with a warning, its roster checked except for the signatures: its
      sealed messages then resist a passive server only.
    * ``allowed-methods``, ``min-rows-per-vector``, ``refuse-raw-rows``,
      ``min-sum-participants`` and the other policy fields of the Flower
      guide's node-config reference: the node's policy (``NodePolicy`` of
      ``skfedclust.node._policy``), checked before it
      answers any request and, through its :class:`~skfedclust.federation.Party`,
      inside the client steps (a secure sum's minimum of participants). Its
      handshake tells the server a summary of it (with whether the node has
      a trust file or allows unauthenticated peers), which ``fit_on_flower``
      prints and keeps in ``client_policies_``.
    * ``n-threads``: the threads the node's steps may use (default: its
      cores).
    * ``private-seed``: fixes the node's private randomness (tests only).

    Returns
    -------
    app : flwr.clientapp.ClientApp
    """
    require_flwr()
    service = _Service(
        load_data,
        save_output,
        allowed_modules,
        client_name,
        layout,
        load_new_data,
        node_defaults,
        node_config_fields,
    )
    app = ClientApp() if app is None else app
    for message_type, handler in (
        (HELLO, service.hello),
        (STEP, service.step),
        (FINISH, service.finish),
    ):
        action = message_type.split(".", 1)[1]
        app.query(action)(_Handler(service, handler.__name__))
    return app


class _Handler:
    """A picklable ClientApp function calling one handler of a service."""

    def __init__(self, service, name):
        self.service = service
        self.name = name
        self.__name__ = f"skfedclust_{name}"

    def __call__(self, message, context):
        return self.service.handle(getattr(self.service, self.name), message, context)
