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

The per-fit keys are authenticated: every node has a long-term Ed25519
identity key (:class:`IdentityKey`, the ``identity-key`` field of its node
config) and signs its per-fit X25519 key, bound to the fit's session id. Each
node is told out of band which identities belong to the federation (the
``trusted-identities`` file of its node config, see
:func:`load_trusted_identities`) and refuses any peer key that is not signed
by one of them (:func:`verify_peer_key`). A server (or anyone on the path)
that swaps the keys in transit then fails the fit instead of reading the
sealed messages. A node without a trust file cannot tell a swapped key from a
genuine one: its sealed messages resist a passive server only.
"""

from __future__ import annotations

import hashlib
import json
import os

__all__ = [
    "IdentityKey",
    "KeyPair",
    "PeerKeyError",
    "fingerprint",
    "load_trusted_identities",
    "open_sealed",
    "seal",
    "verify_peer_key",
]

_INFO = b"skfedclust peer message key v1"
_STATEMENT = b"skfedclust per-fit key v1"
_NONCE = 12


def _primitives():
    try:
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
    except ImportError as exc:  # pragma: no cover - cryptography comes with flwr
        raise ImportError(
            "sealing peer messages needs the 'cryptography' package; install "
            "skfedclust with the 'flower' extra: pip install 'skfedclust[flower]'"
        ) from exc
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
    """A sealed message that does not open: wrong key, altered, or misdirected."""


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


class PeerKeyError(ValueError):
    """A peer's per-fit key that this node cannot verify: it refuses to use it."""


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

    def sign_fit_key(self, fit_public_bytes, *, session):
        """Signature binding this node's per-fit key to the fit ``session``."""
        return self._private.sign(_key_statement(fit_public_bytes, session))

    def __repr__(self):
        return f"IdentityKey({self.fingerprint})"


def _key_statement(fit_public_bytes, session):
    return _STATEMENT + b"|" + str(session).encode() + b"|" + bytes(fit_public_bytes)


def load_trusted_identities(path):
    """The identities a node trusts, from a text file: their fingerprints.

    One identity per line, optionally after a name: ``ed25519:<64 hex>`` (the
    public key) or ``sha256:<64 hex>`` (its :func:`fingerprint`, as
    ``python -m skfedclust.flower keygen`` prints it). Blank lines and lines
    starting with ``#`` are ignored.

    Returns
    -------
    trusted : dict
        ``{fingerprint: name}`` (the name is ``None`` where none is given).
    """
    trusted = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
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


def verify_peer_key(party, fit_public_bytes, identity_bytes, signature, *, session, trusted):
    """Check that ``party``'s per-fit key is signed by an identity in ``trusted``.

    Raises
    ------
    PeerKeyError
        Naming the party, when its identity is missing or not trusted, or its
        signature does not match its per-fit key and this fit.
    """
    if identity_bytes is None or signature is None:
        raise PeerKeyError(
            f"party {party} sent no identity key with its per-fit key: this node trusts only "
            "keys signed by the identities of its trusted-identities file"
        )
    print_ = fingerprint(identity_bytes)
    if print_ not in trusted:
        raise PeerKeyError(
            f"party {party} signs with identity {print_}, which is not in this node's "
            "trusted identities: its key may have been swapped in transit"
        )
    c = _primitives()
    identity = c["Ed25519PublicKey"].from_public_bytes(bytes(identity_bytes))
    try:
        identity.verify(bytes(signature), _key_statement(fit_public_bytes, session))
    except c["InvalidSignature"]:
        name = trusted[print_]
        raise PeerKeyError(
            f"party {party}'s per-fit key is not the one identity {print_}"
            f"{f' ({name})' if name else ''} signed for this fit: it was swapped or "
            "altered in transit"
        ) from None
    return print_


def _associated_data(session, exchange, tag, sender, recipient):
    return json.dumps(
        {"session": session, "exchange": exchange, "tag": tag, "from": sender, "to": recipient},
        sort_keys=True,
    ).encode()


def seal(key, plaintext, *, session, exchange, tag, sender, recipient):
    """Encrypt ``plaintext`` for ``recipient``: ``nonce || ciphertext || tag``."""
    c = _primitives()
    nonce = os.urandom(_NONCE)
    aad = _associated_data(session, exchange, tag, sender, recipient)
    return nonce + c["ChaCha20Poly1305"](key).encrypt(nonce, plaintext, aad)


def open_sealed(key, sealed, *, session, exchange, tag, sender, recipient):
    """Decrypt a message sealed by :func:`seal`; raise :class:`SealError` if it does not open."""
    c = _primitives()
    aad = _associated_data(session, exchange, tag, sender, recipient)
    try:
        return c["ChaCha20Poly1305"](key).decrypt(sealed[:_NONCE], sealed[_NONCE:], aad)
    except c["InvalidTag"] as exc:
        raise SealError(
            f"the message from party {sender} (exchange {exchange}, tag {tag!r}) does not "
            "open: it was altered, misdirected, or sealed under another key"
        ) from exc
