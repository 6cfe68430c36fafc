"""Write what every organisation's node needs for a local try of the app.

    python prepare_data.py ~/skfedclust-flower-data 3 [SUPERLINK_PORT [SHARE_HOLDERS]]

writes, in that folder:

* ``org_0.npy``, ``org_1.npy``, ``org_2.npy``: each organisation's rows (the
  shares of the demo data set a simulation's nodes take);
* ``org_<i>_identity.pem`` (and ``holder_<i>_identity.pem`` for the
  ``SHARE_HOLDERS`` nodes without data, the share-holding parties OmniFC adds
  to the data holders): every node's identity key, as
  ``python -m skfedclust.flower keygen`` writes it;
* ``trusted_identities.txt``: the identities of every node, which each node
  trusts (on a real federation each operator runs ``keygen`` on its own
  machine and sends the printed line to the others);

and prints the SuperNode command of each node: its data and labels files, its
identity key, the trust file and its policy (``DEFAULT_POLICY``). The
server side has no identity of its own: the nodes authenticate each other,
whatever the server relays. Keep the data outside this folder: whatever is in
it is bundled into the app that ``flwr run`` ships to every node.
"""

import sys
from pathlib import Path

import numpy as np
from skfedclust_app.demo import demo_share

from skfedclust.flower import IdentityKey

#: The policy every node of the local try is started with (node-config fields):
#: the methods it agrees to fit, the one whose release of rows by design it runs
#: (DC's rows through the party's private map), the fewest rows behind each
#: vector it sends, no row of its own sent verbatim, no secure sum of fewer than
#: three clients.
DEFAULT_POLICY = {
    "allowed-methods": "KFed,FeCA,MAvg,FederatedFuzzyCMeans,KumarFederatedKMeans,"
    "GOLDClustering,FedSpectralClustering,DCClustering,OmniFCClustering,FederatedKMeans",
    "allow-row-release": "DCClustering",
    "min-rows-per-vector": 2,
    "refuse-raw-rows": "true",
    "min-sum-participants": 3,
}


def node_config(fields):
    """A ``--node-config`` value: ``key='text'`` or ``key=number``, separated by spaces."""
    words = []
    for key, value in fields.items():
        if isinstance(value, (int, float)) or value in ("true", "false"):
            words.append(f"{key}={value}")
        else:
            words.append(f"{key}='{value}'")
    return " ".join(words)


def main(directory="~/skfedclust-flower-data", n_orgs=3, superlink_port=9093, share_holders=0):
    directory = Path(directory).expanduser().resolve()
    directory.mkdir(parents=True, exist_ok=True)
    nodes = []
    for i in range(n_orgs + share_holders):
        kind = "org" if i < n_orgs else "holder"
        key = IdentityKey()
        path = key.save(directory / f"{kind}_{i}_identity.pem")
        nodes.append((i, kind, key, path))
    trust = directory / "trusted_identities.txt"
    trust.write_text(
        "# The identities of the federation's nodes: one line each, as\n"
        "# 'python -m skfedclust.flower keygen' prints it.\n"
        + "".join(f"{kind}-{i} ed25519:{key.public_bytes.hex()}\n" for i, kind, key, _ in nodes)
    )
    for i, kind, _, identity in nodes:
        fields = {}
        if kind == "org":
            data = directory / f"org_{i}.npy"
            np.save(data, demo_share(i, n_orgs))
            fields["data-path"] = str(data)
            fields["labels-path"] = str(directory / f"org_{i}_labels.npy")
            # The node's privacy ledger: a DP budget (dp-epsilon) then holds across
            # every fit of the node, and it counts those fits (max-fits caps them).
            fields["privacy-ledger"] = str(directory / f"org_{i}_ledger")
        fields["client-name"] = i
        fields["identity-key"] = str(identity)
        fields["trusted-identities"] = str(trust)
        fields.update(DEFAULT_POLICY)
        # One long-lived process runs the node's steps: Flower starts a process per
        # message, which would otherwise import scikit-learn and the methods each time.
        fields["step-worker"] = "true"
        print(
            f"flower-supernode --insecure --superlink 127.0.0.1:{superlink_port} "
            f'--port {9101 + i} --node-config "{node_config(fields)}"'
        )


if __name__ == "__main__":
    main(*(sys.argv[1:2] or ["~/skfedclust-flower-data"]), *(int(a) for a in sys.argv[2:5]))
