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

# The names load their modules on first use: a ClientApp process that imports
# only the thin step-worker app (``make_worker_client_app``) does not pay for
# scikit-learn and the methods.
_HOMES = {
    "FileLoader": "_client",
    "FileWriter": "_client",
    "load_node_data": "_client",
    "load_node_new_data": "_client",
    "make_client_app": "_client",
    "node_layout": "_client",
    "save_node_output": "_client",
    "CodecError": "_codec",
    "IdentityKey": "_crypto",
    "PeerKeyError": "_crypto",
    "SealError": "_crypto",
    "fingerprint": "_crypto",
    "load_trusted_identities": "_crypto",
    "fit_on_flower": "_fit",
    "predict_on_flower": "_fit",
    "FlowerNodeError": "_runtime",
    "FlowerRuntime": "_runtime",
    "FlowerSession": "_runtime",
    "FlowerTimeoutError": "_runtime",
    "NotSupportedOnFlower": "_runtime",
    "Transport": "_runtime",
    "make_worker_client_app": "_step_worker",
}


def __getattr__(name):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


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
    "make_worker_client_app",
    "node_layout",
    "predict_on_flower",
    "save_node_output",
]
