"""End-to-end encryption of client-to-client messages relayed by the server.

Flower nodes talk to the server only, so a message from party ``s`` to party
``r`` (a secret share, an anchor slice) is relayed by the server. It is sealed
for ``r`` before it leaves ``s``:

* every party makes a fresh X25519 key pair for each fit and publishes the
  public key in the handshake;
* ``s`` and ``r`` agree on a pairwise key by X25519 and HKDF-SHA256 (salted
  with the fit's session id);
* the message is encrypted with ChaCha20-Poly1305 under a fresh random nonce;
  the associated data binds the session, the exchange, the tag, the sender and
  the recipient, so the server can neither read nor alter it, nor pass it off
  as another exchange's or another party's message.

The server learns who sends to whom, when, and how many bytes.

The per-fit keys are authenticated and bound to the roster: every node has a
long-term Ed25519 identity key (:class:`IdentityKey`, the ``identity-key``
field of its node config) and, in its handshake, signs a statement binding the
fit's session id, the method it agreed to, a fresh nonce of its own and its
per-fit X25519 key. Each node is told out of band which identities belong to
the federation (the ``trusted-identities`` file of its node config, see
:func:`load_trusted_identities`). Before it seals or opens anything, it checks
the whole roster the server sends (:func:`verify_roster`): one slot per party,
pairwise distinct identities and keys, every peer's key signed by a trusted
identity over that slot's nonce, and its own slot holding exactly its own key,
identity and nonce. A server (or anyone on the path) that swaps keys, or puts
one insider's genuine key into other parties' slots, then fails the fit
instead of reading the sealed messages. Sealed messages are also bound to a
digest of the roster, so two nodes shown different rosters cannot read each
other. A node without a trust file cannot tell a swapped key from a genuine
one: it refuses the fit unless its operator allows that
(``allow-unauthenticated``), and then its sealed messages resist a passive
server only.
"""

from __future__ import annotations

import hashlib
import json
import os

__all__ = [
    "IdentityKey",
    "KeyPair",
    "PeerKeyError",
    "RosterError",
    "fingerprint",
    "load_trusted_identities",
    "new_nonce",
    "open_sealed",
    "roster_digest",
    "seal",
    "verify_peer_key",
    "verify_roster",
]

_INFO = b"skfedclust peer message key v1"
_STATEMENT = "skfedclust roster entry v2"
_NONCE = 12
#: Bytes of a node's handshake nonce.
ROSTER_NONCE_BYTES = 32


def _primitives():
    # cryptography is a dependency of the package; imported on first use.
    from cryptography.exceptions import InvalidSignature, InvalidTag
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )
    from cryptography.hazmat.primitives.asymmetric.x25519 import (
        X25519PrivateKey,
        X25519PublicKey,
    )
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return {
        "InvalidSignature": InvalidSignature,
        "Ed25519PrivateKey": Ed25519PrivateKey,
        "Ed25519PublicKey": Ed25519PublicKey,
        "InvalidTag": InvalidTag,
        "hashes": hashes,
        "serialization": serialization,
        "X25519PrivateKey": X25519PrivateKey,
        "X25519PublicKey": X25519PublicKey,
        "ChaCha20Poly1305": ChaCha20Poly1305,
        "HKDF": HKDF,
    }


class SealError(ValueError):
    """A sealed message that does not open: wrong key, altered, or misdirected.

    A node that meets one refuses the step (a :class:`PermissionError` naming
    the sender).
    """


class KeyPair:
    """An X25519 key pair of one party for one fit.

    Parameters
    ----------
    private_bytes : bytes, default=None
        Raw 32-byte private key to restore; ``None`` draws a new one.
    """

    def __init__(self, private_bytes=None):
        c = _primitives()
        if private_bytes is None:
            self._private = c["X25519PrivateKey"].generate()
        else:
            self._private = c["X25519PrivateKey"].from_private_bytes(bytes(private_bytes))
        raw = c["serialization"].Encoding.Raw
        self.private_bytes = self._private.private_bytes(
            raw, c["serialization"].PrivateFormat.Raw, c["serialization"].NoEncryption()
        )
        self.public_bytes = self._private.public_key().public_bytes(
            raw, c["serialization"].PublicFormat.Raw
        )

    def pair_key(self, peer_public_bytes, *, salt, parties):
        """The symmetric key this party shares with the owner of ``peer_public_bytes``."""
        c = _primitives()
        peer = c["X25519PublicKey"].from_public_bytes(bytes(peer_public_bytes))
        shared = self._private.exchange(peer)
        low, high = sorted(int(p) for p in parties)
        info = _INFO + f" parties {low} {high}".encode()
        return c["HKDF"](
            algorithm=c["hashes"].SHA256(), length=32, salt=salt.encode(), info=info
        ).derive(shared)


def fingerprint(public_bytes):
    """Fingerprint of a public key, to compare out of band: ``sha256:`` and 64 hex digits.

    The whole SHA-256 digest: a shorter one could be matched by a key made to
    collide with it.
    """
    return "sha256:" + hashlib.sha256(bytes(public_bytes)).hexdigest()


class PeerKeyError(PermissionError, ValueError):
    """A peer's per-fit key that this node cannot verify: it refuses to use it."""


class RosterError(PeerKeyError):
    """A roster that breaks one of the node's rules (:func:`verify_roster`).

    Attributes
    ----------
    rule : str
        The rule: ``roster-format``, ``slot-count``, ``own-slot``,
        ``distinct-keys``, ``distinct-identities`` or ``signed-key``.
    slot : int or None
        The party slot that breaks it.
    """

    def __init__(self, rule, slot, detail):
        where = "" if slot is None else f" slot {slot}:"
        super().__init__(f"roster rule {rule}:{where} {detail}")
        self.rule = rule
        self.slot = slot


def new_nonce():
    """A fresh nonce for a node's handshake (from ``os.urandom``)."""
    return os.urandom(ROSTER_NONCE_BYTES)


class IdentityKey:
    """A node's long-term Ed25519 identity key, which signs its per-fit keys.

    Parameters
    ----------
    private_bytes : bytes, default=None
        Raw 32-byte private key; ``None`` draws a new one.

    Examples
    --------
    >>> from skfedclust.flower import IdentityKey
    >>> key = IdentityKey()
    >>> key.fingerprint.startswith("sha256:")
    True
    """

    def __init__(self, private_bytes=None):
        c = _primitives()
        if private_bytes is None:
            self._private = c["Ed25519PrivateKey"].generate()
        else:
            self._private = c["Ed25519PrivateKey"].from_private_bytes(bytes(private_bytes))
        raw = c["serialization"].Encoding.Raw
        self.public_bytes = self._private.public_key().public_bytes(
            raw, c["serialization"].PublicFormat.Raw
        )

    @property
    def fingerprint(self):
        """:func:`fingerprint` of the public key."""
        return fingerprint(self.public_bytes)

    @classmethod
    def load(cls, path):
        """Read a key written by :meth:`save` (PEM, PKCS#8)."""
        c = _primitives()
        with open(path, "rb") as f:
            key = c["serialization"].load_pem_private_key(f.read(), password=None)
        if not isinstance(key, c["Ed25519PrivateKey"]):
            raise ValueError(f"{path} does not hold an Ed25519 private key")
        raw = key.private_bytes(
            c["serialization"].Encoding.Raw,
            c["serialization"].PrivateFormat.Raw,
            c["serialization"].NoEncryption(),
        )
        return cls(raw)

    def save(self, path):
        """Write the private key (PEM, PKCS#8), readable by its owner only."""
        c = _primitives()
        pem = self._private.private_bytes(
            c["serialization"].Encoding.PEM,
            c["serialization"].PrivateFormat.PKCS8,
            c["serialization"].NoEncryption(),
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        return path

    def sign_fit_key(self, fit_public_bytes, *, session, nonce, method=None):
        """Signature binding this node's per-fit key to the fit, the method and its nonce.

        Parameters
        ----------
        fit_public_bytes : bytes
            The node's per-fit X25519 public key.
        session : str
            The fit's session id.
        nonce : bytes
            A fresh nonce of the node's own (:func:`new_nonce`): its slot in
            the roster must carry it.
        method : str, default=None
            The method the node agreed to in the handshake.
        """
        return self._private.sign(_key_statement(fit_public_bytes, session, nonce, method))

    def __repr__(self):
        return f"IdentityKey({self.fingerprint})"


def _key_statement(fit_public_bytes, session, nonce, method):
    return json.dumps(
        {
            "statement": _STATEMENT,
            "session": str(session),
            "method": None if method is None else str(method),
            "nonce": bytes(nonce).hex(),
            "key": bytes(fit_public_bytes).hex(),
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()


def load_trusted_identities(path):
    """The identities a node trusts, from a text file: their fingerprints.

    One identity per line, optionally after a name: ``ed25519:<64 hex>`` (the
    public key) or ``sha256:<64 hex>`` (its :func:`fingerprint`, as
    ``python -m skfedclust.flower keygen`` prints it). Blank lines and lines
    starting with ``#`` are ignored, and so are ``option=value`` words (a
    rotated key's link, read by :func:`~skfedclust.flower._rotation.load_rotations`).

    Returns
    -------
    trusted : dict
        ``{fingerprint: name}`` (the name is ``None`` where none is given).
    """
    trusted = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            words = [w for w in line.split("#", 1)[0].split() if "=" not in w]
            if not words:
                continue
            entry, name = words[-1], " ".join(words[:-1]) or None
            kind, _, digits = entry.partition(":")
            ok = len(digits) == 64 and all(ch in "0123456789abcdef" for ch in digits.lower())
            if kind not in ("ed25519", "sha256") or not ok:
                raise ValueError(
                    f"{path}, line {number}: expected 'ed25519:<64 hex digits>' or "
                    f"'sha256:<64 hex digits>', optionally after a name; got {entry!r}"
                )
            if kind == "ed25519":
                entry = fingerprint(bytes.fromhex(digits))
            trusted[entry.lower()] = name
    if not trusted:
        raise ValueError(f"{path} lists no trusted identity")
    return trusted


def verify_peer_key(
    party, fit_public_bytes, identity_bytes, signature, *, session, nonce, trusted, method=None
):
    """Check that ``party``'s per-fit key is signed by an identity in ``trusted``.

    The signature must cover this fit's ``session``, the ``method`` and the
    ``nonce`` of the party's slot (see :meth:`IdentityKey.sign_fit_key`).

    Raises
    ------
    PeerKeyError
        Naming the party, when its identity is missing or not trusted, or its
        signature does not match its per-fit key, this fit and its nonce.
    """
    if identity_bytes is None or signature is None or nonce is None:
        raise PeerKeyError(
            f"party {party} sent no identity key, signature or nonce with its per-fit key: "
            "this node trusts only keys signed by the identities of its trusted-identities file"
        )
    print_ = fingerprint(identity_bytes)
    if print_ not in trusted:
        raise PeerKeyError(
            f"party {party} signs with identity {print_}, which is not in this node's "
            "trusted identities: its key may have been swapped in transit"
        )
    c = _primitives()
    try:
        identity = c["Ed25519PublicKey"].from_public_bytes(bytes(identity_bytes))
        identity.verify(bytes(signature), _key_statement(fit_public_bytes, session, nonce, method))
    except (c["InvalidSignature"], ValueError):
        name = trusted[print_]
        raise PeerKeyError(
            f"party {party}'s per-fit key is not the one identity {print_}"
            f"{f' ({name})' if name else ''} signed for this fit and this slot's nonce: it "
            "was swapped, moved from another slot or altered in transit"
        ) from None
    return print_


#: Fields of a roster slot, all hex strings (``identity``, ``signature`` and
#: ``nonce`` may be ``None`` for a node without an identity key).
_SLOT_FIELDS = {"key": 32, "identity": 32, "signature": 64, "nonce": ROSTER_NONCE_BYTES}


def _slot_bytes(roster, slot):
    entry = roster[slot]
    if not isinstance(entry, dict) or set(entry) != set(_SLOT_FIELDS):
        raise RosterError(
            "roster-format", slot, f"expected the fields {sorted(_SLOT_FIELDS)}, got {entry!r}"
        )
    out = {}
    for field, size in _SLOT_FIELDS.items():
        value = entry[field]
        if value is None and field != "key":
            out[field] = None
            continue
        try:
            raw = bytes.fromhex(value)
        except (TypeError, ValueError):
            raw = None
        if raw is None or len(raw) != size:
            raise RosterError(
                "roster-format", slot, f"its {field} is not {size} bytes in hex: {value!r}"
            )
        out[field] = raw
    return out


def verify_roster(roster, *, party, n_parties, own, session, method=None, trusted=None):
    """Check the roster a node receives before it seals or opens anything.

    Parameters
    ----------
    roster : list of dict
        One slot per party, in party order: ``{"key", "identity",
        "signature", "nonce"}`` in hex (the per-fit X25519 key, the Ed25519
        identity, its signature of :meth:`IdentityKey.sign_fit_key`'s
        statement, the nonce it signed).
    party : int
        The slot the server assigned to this node.
    n_parties : int
        Number of parties the server announced.
    own : dict
        This node's own ``key``, ``identity`` and ``nonce`` (bytes; identity
        ``None`` for a node without an identity key), from its handshake.
    session, method : str
        The fit and the method this node agreed to in its handshake.
    trusted : dict or None
        This node's trusted identities (:func:`load_trusted_identities`);
        ``None`` for a node that allows unauthenticated peers (signatures are
        then not checked, the other rules are).

    Returns
    -------
    fingerprints : list of str or None
        The fingerprint of every slot's identity.

    Raises
    ------
    RosterError
        A :class:`PermissionError` naming the rule and the slot:

        ``roster-format``
            A slot without the four fields, or a value that is not hex of the
            right length.
        ``slot-count``
            Not ``n_parties`` slots, or this node's slot is not one of them.
        ``own-slot``
            This node's slot does not hold exactly its own key, identity and
            nonce.
        ``distinct-keys``, ``distinct-identities``
            Two slots with the same per-fit key, or the same identity (one
            party in two slots: it would open the messages meant for both).
        ``signed-key``
            A peer's key without an identity, signature or nonce, signed by an
            identity this node does not trust, or whose signature does not
            cover this fit, the method, the slot's nonce and the key.
    """
    if not isinstance(roster, list):
        raise RosterError("roster-format", None, f"expected a list of slots, got {roster!r}")
    if isinstance(n_parties, bool) or not isinstance(n_parties, int) or len(roster) != n_parties:
        raise RosterError(
            "slot-count",
            None,
            f"the roster has {len(roster)} slots but the server announced {n_parties!r} parties",
        )
    if not 0 <= int(party) < len(roster):
        raise RosterError(
            "slot-count", party, f"this node's slot is not one of the roster's {len(roster)}"
        )
    slots = [_slot_bytes(roster, p) for p in range(len(roster))]
    mine = slots[party]
    for field in ("key", "identity", "nonce"):
        expected = None if own.get(field) is None else bytes(own[field])
        if mine[field] != expected:
            raise RosterError(
                "own-slot",
                party,
                f"this node's slot holds another {field} than the one it sent in its handshake",
            )
    for field, rule in (("key", "distinct-keys"), ("identity", "distinct-identities")):
        seen = {}
        for p, slot in enumerate(slots):
            value = slot[field]
            if value is None:
                continue
            if value in seen:
                raise RosterError(
                    rule,
                    p,
                    f"it holds the same {field} as slot {seen[value]}: one party in two slots "
                    "would open the messages meant for both",
                )
            seen[value] = p
    prints = [None if s["identity"] is None else fingerprint(s["identity"]) for s in slots]
    if trusted is None:
        return prints
    for p, slot in enumerate(slots):
        if p == party:
            continue
        try:
            verify_peer_key(
                p,
                slot["key"],
                slot["identity"],
                slot["signature"],
                session=session,
                nonce=slot["nonce"],
                method=method,
                trusted=trusted,
            )
        except PeerKeyError as exc:
            raise RosterError("signed-key", p, str(exc)) from None
    return prints


def roster_digest(roster):
    """SHA-256 (hex) of every slot's key, identity and nonce: sealed messages are bound to it."""
    entries = [[slot.get("key"), slot.get("identity"), slot.get("nonce")] for slot in roster]
    return hashlib.sha256(json.dumps(entries, separators=(",", ":")).encode()).hexdigest()


def _associated_data(session, exchange, tag, sender, recipient, roster):
    fields = {"session": session, "exchange": exchange, "tag": tag, "from": sender, "to": recipient}
    if roster is not None:
        fields["roster"] = roster
    return json.dumps(fields, sort_keys=True).encode()


def seal(key, plaintext, *, session, exchange, tag, sender, recipient, roster=None):
    """Encrypt ``plaintext`` for ``recipient``: ``nonce || ciphertext || tag``.

    ``roster``: the :func:`roster_digest` both parties checked; a recipient
    shown another roster cannot open the message.
    """
    c = _primitives()
    nonce = os.urandom(_NONCE)
    aad = _associated_data(session, exchange, tag, sender, recipient, roster)
    return nonce + c["ChaCha20Poly1305"](key).encrypt(nonce, plaintext, aad)


def open_sealed(key, sealed, *, session, exchange, tag, sender, recipient, roster=None):
    """Decrypt a message sealed by :func:`seal`; raise :class:`SealError` if it does not open."""
    c = _primitives()
    aad = _associated_data(session, exchange, tag, sender, recipient, roster)
    try:
        return c["ChaCha20Poly1305"](key).decrypt(sealed[:_NONCE], sealed[_NONCE:], aad)
    except c["InvalidTag"] as exc:
        raise SealError(
            f"the message from party {sender} (exchange {exchange}, tag {tag!r}) does not "
            "open: it was altered, misdirected, or sealed under another key"
        ) from exc
