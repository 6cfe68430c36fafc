"""A node's identity-key rotation: the old key signs the new one, and ledgers count one node.

A node's privacy ledger is keyed by its identity (the fingerprint of its
identity key), and so are the participants its peers' ledgers record. A node
that replaces its identity key would otherwise be a new node: a fresh budget
and count of fits for itself, and, to its peers, another participant, so an
honest re-fit over the same nodes would be refused (rule
``one-sum-per-input``) until the operators reset their ledgers.

``python -m skfedclust.flower keygen NEW.pem --rotate-from OLD.pem`` writes the
new key and, beside it, ``NEW.pem.rotation``: the chain of rotations from the
node's first key, each link signed by the key it replaces. It prints the
trust-file line of the new key with its link
(``name ed25519:<new> rotated-from=ed25519:<old> rotation-signature=<hex>``):

* the node keys its own ledger by the **first** key of its chain
  (:func:`ledger_identity`), after checking every link's signature, so its
  budget and count of fits go on;
* a peer whose trust file carries the line (its link checked when the file is
  read, :func:`load_rotations`) counts the new key as the participant the old
  one was (:func:`canonical_identities`), so an honest re-fit needs no reset.

A link is accepted only with the old key's signature over both public keys:
nobody but the holder of a node's key can make another key count as that
node.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import _crypto

__all__ = [
    "RotationError",
    "canonical_identities",
    "ledger_identity",
    "load_rotations",
    "rotate",
]

_STATEMENT = "skfedclust identity rotation v1"
#: Trust-file options of a rotated key's line.
ROTATED_FROM = "rotated-from"
SIGNATURE = "rotation-signature"


class RotationError(PermissionError, ValueError):
    """A rotation link whose signature, keys or chain the node cannot verify."""


def _statement(old_public, new_public):
    return json.dumps(
        {"statement": _STATEMENT, "old": bytes(old_public).hex(), "new": bytes(new_public).hex()},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()


def verify_link(old_public, new_public, signature, where):
    """Check that the key ``old_public`` signed its replacement by ``new_public``."""
    c = _crypto._primitives()
    try:
        key = c["Ed25519PublicKey"].from_public_bytes(bytes(old_public))
        key.verify(bytes(signature), _statement(old_public, new_public))
    except (c["InvalidSignature"], ValueError, TypeError):
        raise RotationError(
            f"{where}: the rotation to identity {_crypto.fingerprint(new_public)} is not signed "
            f"by the key it replaces, {_crypto.fingerprint(old_public)}"
        ) from None


def _sidecar(key_path):
    return Path(f"{key_path}.rotation")


def _chain(key_path):
    """The rotation links of the key at ``key_path`` (``[]`` for a first key)."""
    path = _sidecar(key_path)
    if not path.exists():
        return []
    try:
        links = json.loads(path.read_text())
        return [
            (bytes.fromhex(x["old"]), bytes.fromhex(x["new"]), bytes.fromhex(x["signature"]))
            for x in links
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise RotationError(f"{path}: not a rotation chain ({exc})") from None


def rotate(old_path, new_path):
    """Write a new identity key at ``new_path`` signed by the one at ``old_path``.

    Returns
    -------
    key : IdentityKey
        The new key (its chain is written to ``new_path + ".rotation"``).
    line : str
        Its trust-file options: ``rotated-from=ed25519:<old>
        rotation-signature=<hex>``.
    """
    old = _crypto.IdentityKey.load(old_path)
    chain = _chain(old_path)
    new = _crypto.IdentityKey()
    signature = old._private.sign(_statement(old.public_bytes, new.public_bytes))
    chain.append((old.public_bytes, new.public_bytes, signature))
    new.save(new_path)
    _sidecar(new_path).write_text(
        json.dumps([{"old": o.hex(), "new": n.hex(), "signature": s.hex()} for o, n, s in chain])
    )
    options = f"{ROTATED_FROM}=ed25519:{old.public_bytes.hex()} {SIGNATURE}={signature.hex()}"
    return new, options


def ledger_identity(identity, key_path):
    """The identity a node's own ledger is keyed by: the first key of its rotation chain.

    Every link is checked (signed by the key it replaces, each link from the
    previous one's new key, the last to ``identity``); a chain that fails is
    refused rather than read as a new node.
    """
    chain = _chain(key_path)
    if not chain:
        return identity.fingerprint
    where = str(_sidecar(key_path))
    for (old, new, signature), following in zip(chain, [*chain[1:], None]):
        verify_link(old, new, signature, where)
        if following is not None and following[0] != new:
            raise RotationError(f"{where}: the chain is broken after {_crypto.fingerprint(new)}")
    if chain[-1][1] != identity.public_bytes:
        raise RotationError(f"{where}: the chain does not end at {identity.fingerprint}")
    return _crypto.fingerprint(chain[0][0])


def load_rotations(path):
    """The rotations a trust file vouches for, each link checked: ``{new: old}`` fingerprints.

    A line ``name ed25519:<new> rotated-from=ed25519:<old>
    rotation-signature=<hex>`` (as ``keygen --rotate-from`` prints it).
    """
    rotations = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            options = dict(w.split("=", 1) for w in words if "=" in w)
            if ROTATED_FROM not in options:
                continue
            keys = [w for w in words if "=" not in w and w.startswith("ed25519:")]
            old = options[ROTATED_FROM].partition(":")[2]
            try:
                new_public, old_public = bytes.fromhex(keys[-1][8:]), bytes.fromhex(old)
                signature = bytes.fromhex(options.get(SIGNATURE, ""))
            except (IndexError, ValueError):
                raise RotationError(
                    f"{path}, line {number}: a rotation needs 'ed25519:<new>', "
                    f"'{ROTATED_FROM}=ed25519:<old>' and '{SIGNATURE}=<hex>'"
                ) from None
            verify_link(old_public, new_public, signature, f"{path}, line {number}")
            rotations[_crypto.fingerprint(new_public)] = _crypto.fingerprint(old_public)
    return rotations


def canonical_identities(identities, rotations):
    """``identities`` with each rotated key replaced by the first key of its chain."""
    if identities is None or not rotations:
        return identities
    out = []
    for identity in identities:
        seen = set()
        while identity in rotations and identity not in seen:
            seen.add(identity)
            identity = rotations[identity]
        out.append(identity)
    return out
