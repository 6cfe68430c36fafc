"""What the server and the nodes put in Flower messages, and how steps are named.

Both sides import this module: message types, record names, the codec between
payloads and Flower records, and the allow-list that turns a step name
(``module:qualname``) back into a function on a node.
"""

from __future__ import annotations

import json

import numpy as np

from ..federation._runtime import client_step_name, resolve_client_step
from ._actions import FINISH, HELLO, STEP
from ._codec import CodecError, decode, encode

try:
    from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
except ImportError:  # pragma: no cover - exercised when the extra is missing
    Array = ArrayRecord = ConfigRecord = RecordDict = None

__all__ = [
    "DEFAULT_ALLOWED_MODULES",
    "FINISH",
    "HELLO",
    "STEP",
    "content_nbytes",
    "from_content",
    "require_flwr",
    "resolve_step",
    "step_name",
    "to_content",
]

#: Message types: Flower routes ``query.<action>`` to the ClientApp function
#: registered for that action.

#: Names of the records inside a message's RecordDict.
CONTROL = "skfedclust"
ARRAYS = "skfedclust.arrays"

#: Packages whose module-level functions a node runs as client steps by default.
DEFAULT_ALLOWED_MODULES = ("skfedclust",)

#: Error codes of the replies a node sends when something fails.
ERROR_STEP = 1101
ERROR_REFUSED = 1102


def require_flwr():
    """Raise a clear ImportError when Flower is not installed."""
    if RecordDict is None:
        raise ImportError(
            "skfedclust.flower needs Flower; install skfedclust with the 'flower' extra: "
            "pip install 'skfedclust[flower]'"
        )


# --------------------------------------------------------------------------- #
# Step names and the allow-list
# --------------------------------------------------------------------------- #
def step_name(step, allowed_modules=DEFAULT_ALLOWED_MODULES):
    """``module:qualname`` of a client step, checked as a node would check it."""
    return client_step_name(step, allowed_modules)


def resolve_step(name, allowed_modules=DEFAULT_ALLOWED_MODULES):
    """The client step called ``name`` (``module:qualname``), if the node allows it.

    See :func:`skfedclust.federation.resolve_client_step`. The role the step may
    run in is the node gate's to check (:func:`skfedclust.node._gate.admit_step`),
    after the method, as in the in-process runtime.
    """
    return resolve_client_step(name, allowed_modules, role="bound")


# --------------------------------------------------------------------------- #
# Payloads in Flower records
# --------------------------------------------------------------------------- #
def to_content(control, payload=None, *, sealed=None, where="message"):
    """A RecordDict holding ``control`` (a JSON-able dict), ``payload`` (any message) and
    ``sealed`` (``{name: bytes}``, the sealed peer messages it carries)."""
    skeleton, arrays = encode(payload, where)
    config = {"control": json.dumps(control, separators=(",", ":")), "body": skeleton}
    for key, value in (sealed or {}).items():
        config[f"sealed.{key}"] = bytes(value)
    records = {CONTROL: ConfigRecord(config)}
    records[ARRAYS] = ArrayRecord({str(i): Array(np.asarray(a)) for i, a in enumerate(arrays)})
    return RecordDict(records)


def from_content(content, where="message"):
    """``(control, payload, sealed)`` from a RecordDict written by :func:`to_content`."""
    try:
        config = content.config_records[CONTROL]
        record = content.array_records[ARRAYS]
        control = json.loads(config["control"])
        skeleton = config["body"]
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(
            f"{where}: not a skfedclust message (missing or malformed records: {exc})"
        ) from exc
    if not isinstance(control, dict):
        raise CodecError(f"{where}: malformed control record")
    keys = [str(i) for i in range(len(record))]
    if sorted(record.keys()) != sorted(keys):
        raise CodecError(f"{where}: array names {sorted(record.keys())} are not 0..{len(keys)}")
    arrays = []
    for k in keys:
        item = record[k]
        try:
            array = item.numpy()
        except (ValueError, TypeError, OSError, EOFError) as exc:
            raise CodecError(f"{where}: array {k} does not load as a numpy array ({exc})") from exc
        if str(array.dtype) != str(item.dtype) or tuple(array.shape) != tuple(item.shape):
            raise CodecError(
                f"{where}: array {k} declares dtype {item.dtype} and shape "
                f"{tuple(item.shape)} but holds {array.dtype} {array.shape}"
            )
        arrays.append(array)
    sealed = {}
    for key in config.keys():
        if key.startswith("sealed."):
            value = config[key]
            if not isinstance(value, bytes):
                raise CodecError(f"{where}: sealed message {key!r} is not a byte string")
            sealed[key[len("sealed.") :]] = value
    return control, decode(skeleton, arrays, where), sealed


def content_nbytes(content):
    """Bytes a message's records carry: array buffers (with their .npy headers), config values
    and record keys, as Flower counts them (without the gRPC and protobuf framing)."""
    return int(sum(record.count_bytes() for record in content.values()))
