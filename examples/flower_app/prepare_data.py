"""Write one data file per organisation for a local try of the app.

    python prepare_data.py ~/skfedclust-flower-data 3 [SUPERLINK_PORT [SHARE_HOLDERS]]

writes org_0.npy, org_1.npy, org_2.npy in that folder (the shares of the demo
data set a simulation's nodes take) and prints the SuperNode command of each
organisation, then of ``SHARE_HOLDERS`` nodes without data (the share-holding
parties OmniFC adds to the data holders, ``n_parties`` in all). Keep the data
outside this folder: whatever is in it is bundled into the app that
``flwr run`` ships to every node.
"""

import sys
from pathlib import Path

import numpy as np
from skfedclust_app.demo import demo_share


def main(directory="~/skfedclust-flower-data", n_orgs=3, superlink_port=9093, share_holders=0):
    directory = Path(directory).expanduser().resolve()
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(n_orgs + share_holders):
        config = f"client-name={i}"
        if i < n_orgs:
            path = directory / f"org_{i}.npy"
            np.save(path, demo_share(i, n_orgs))
            labels = directory / f"org_{i}_labels.npy"
            config = f"data-path='{path}' labels-path='{labels}' {config}"
        print(
            f"flower-supernode --insecure --superlink 127.0.0.1:{superlink_port} "
            f'--port {9101 + i} --node-config "{config}"'
        )


if __name__ == "__main__":
    main(*(sys.argv[1:2] or ["~/skfedclust-flower-data"]), *(int(a) for a in sys.argv[2:5]))
