"""ClientApp: what every organisation's SuperNode runs.

A node started with ``data-path`` in its node config reads its own rows from
that file and writes its labels to ``labels-path``; its identity key, the
identities it trusts and its policy are fields of its node config too
(``prepare_data.py`` prints such commands)::

    flower-supernode --insecure --superlink 127.0.0.1:9093 --port 9101 \
        --node-config "data-path='org_a.npy' labels-path='org_a_labels.npy' client-name='a' \
        identity-key='org_a_identity.pem' trusted-identities='trusted_identities.txt' \
        min-rows-per-vector=2 refuse-raw-rows=true min-sum-participants=3"

A node without an identity key and a trust file refuses every fit (see
:func:`skfedclust.flower.make_client_app`). A node of Flower's simulation has
no ``data-path`` but a ``partition-id`` and ``num-partitions``: it takes its
share of the public demo data set (see ``demo.py``), writes its labels to
``~/skfedclust-flower-output/simulation`` and, since one person runs every
simulated node and the server in one process, takes part without
authentication (``simulation_defaults``). A node with neither holds no data
(a party without rows, for the methods that have such parties).

Its rows never leave the node; it answers the server with what the clustering
protocol sends (local centers, for k-FED) and nothing else.
"""

from pathlib import Path

from skfedclust.flower import FileWriter, load_node_data, make_client_app

from .demo import demo_share

#: Where a simulated node writes its labels (outside the app folder).
SIMULATION_OUTPUT = Path("~/skfedclust-flower-output/simulation")


def load_data(node_config):
    """The node's rows: its ``data-path`` file, else its share of the demo data."""
    if "data-path" in node_config:
        return load_node_data(node_config)
    if "partition-id" in node_config:
        return demo_share(int(node_config["partition-id"]), int(node_config["num-partitions"]))
    return None


def save_output(node_config, key, values):
    """Write an output to ``<key>-path`` (``labels-path``), else next to the demo data.

    An output of one of several methods, ``kfed-labels``, goes next to the
    file of its plain key with the method in front of the name:
    ``labels-path='/data/org_0_labels.npy'`` gives
    ``/data/kfed-org_0_labels.npy``.
    """
    # The method's name may hold dashes itself (fedkmeans-blind): the plain key is
    # the first tail of the key that has a path of its own.
    for i in (i for i, c in enumerate(key) if c == "-" and f"{key}-path" not in node_config):
        method, base = key[:i], key[i + 1 :]
        if f"{base}-path" in node_config:
            path = Path(str(node_config[f"{base}-path"]))
            target = str(path.with_name(f"{method}-{path.name}"))
            return FileWriter(target)(node_config, key, values)
    if f"{key}-path" in node_config or "partition-id" not in node_config:
        return FileWriter()(node_config, key, values)
    target = SIMULATION_OUTPUT.expanduser() / f"{key}_{node_config['partition-id']}.npy"
    return FileWriter(str(target))(node_config, key, values)


def simulation_defaults(node_config):
    """Defaults of a node of Flower's simulation, nothing for any other.

    A simulated node (``num-partitions``, no ``data-path``) holds a share of the
    public demo data, and every simulated node runs in the one process of the
    person who started the simulation: there is no other operator to
    authenticate (``allow-unauthenticated``), and DC may send the demo rows
    through the parties' private maps (``allow-row-release``). A deployed node
    must have its identity key and trust file, and its operator's policy.
    """
    if "num-partitions" in node_config and "data-path" not in node_config:
        return {"allow-unauthenticated": True, "allow-row-release": "DCClustering"}
    return {}


app = make_client_app(load_data, save_output=save_output, node_defaults=simulation_defaults)
