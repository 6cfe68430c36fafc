"""The protocols of skfedclust across processes and machines, with Flower.

An estimator's protocol runs unchanged on a :class:`FlowerRuntime`, a second
implementation of :class:`~skfedclust.federation.Runtime` whose client steps
run on Flower SuperNodes, each holding its own data:

* on the server, :func:`fit_on_flower` inside a ServerApp's ``main`` fits an
  estimator on the nodes connected to the grid;
* on every node, :func:`make_client_app` builds the ClientApp that loads the
  node's rows, runs the client steps the server names, keeps the node's state
  in its Flower Context and writes its labels for its own user.

Client-to-client messages are sealed for their recipient (X25519 and
ChaCha20-Poly1305), so the server relays ciphertext only; each node signs its
per-fit key with its long-term identity key and checks the peers' keys against
the identities it trusts (``python -m skfedclust.flower keygen`` makes one). Requires the
``flower`` extra: ``pip install 'skfedclust[flower]'``. See the user guide's
"Deploying with Flower".
"""

from ._client import (
    FileLoader,
    FileWriter,
    load_node_data,
    load_node_new_data,
    make_client_app,
    node_layout,
    save_node_output,
)
from ._codec import CodecError
from ._crypto import (
    IdentityKey,
    PeerKeyError,
    SealError,
    fingerprint,
    load_trusted_identities,
)
from ._fit import fit_on_flower, predict_on_flower
from ._runtime import (
    FlowerNodeError,
    FlowerRuntime,
    FlowerSession,
    FlowerTimeoutError,
    NotSupportedOnFlower,
    Transport,
)

__all__ = [
    "CodecError",
    "FileLoader",
    "FileWriter",
    "FlowerNodeError",
    "FlowerRuntime",
    "FlowerSession",
    "FlowerTimeoutError",
    "IdentityKey",
    "NotSupportedOnFlower",
    "PeerKeyError",
    "SealError",
    "Transport",
    "fingerprint",
    "fit_on_flower",
    "load_node_data",
    "load_node_new_data",
    "load_trusted_identities",
    "make_client_app",
    "node_layout",
    "predict_on_flower",
    "save_node_output",
]
