"""Write one data file per organisation for a local try of the app.

    python prepare_data.py ~/skfedclust-flower-data 3 [SUPERLINK_PORT]

writes org_0.npy, org_1.npy, org_2.npy in that folder (the shares of the demo
data set a simulation's nodes take) and prints the SuperNode command of each
organisation. Keep the data outside this folder: whatever is in it is bundled
into the app that ``flwr run`` ships to every node.
"""

import sys
from pathlib import Path

import numpy as np
from skfedclust_app.demo import demo_share


def main(directory="~/skfedclust-flower-data", n_orgs=3, superlink_port=9093):
    directory = Path(directory).expanduser().resolve()
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(n_orgs):
        path = directory / f"org_{i}.npy"
        np.save(path, demo_share(i, n_orgs))
        labels = directory / f"org_{i}_labels.npy"
        print(
            f"flower-supernode --insecure --superlink 127.0.0.1:{superlink_port} "
            f"--port {9101 + i} "
            f"--node-config \"data-path='{path}' labels-path='{labels}' client-name={i}\""
        )


if __name__ == "__main__":
    main(*(sys.argv[1:2] or ["~/skfedclust-flower-data"]), *(int(a) for a in sys.argv[2:4]))
