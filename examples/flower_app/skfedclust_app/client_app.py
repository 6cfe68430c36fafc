"""ClientApp: what every organisation's SuperNode runs (Flower loads this module).

The node's protocol is ``node_app.app`` (its rows, its identity, its policy:
see ``node_app.py``). This module only hands each message to it: Flower starts
a new process for every message a SuperNode receives, and a node whose config
sets ``step-worker=true`` runs ``node_app`` in one long-lived worker process of
its own instead of importing scikit-learn and the methods in each of them
(:func:`skfedclust.flower.make_worker_client_app`). Without it, each message's
process imports ``node_app`` and runs it itself.
"""

from skfedclust.flower import make_worker_client_app

app = make_worker_client_app("skfedclust_app.node_app:app")
