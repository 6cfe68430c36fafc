"""ServerApp: fits one skfedclust estimator on the SuperNodes' data.

It checks the run configuration, waits for the nodes (``n-nodes`` of them,
or the nodes in ``node-ids``, or with ``n-nodes = 0`` every node the
SuperLink lists, which is what a simulation wants), runs the estimator's
protocol on them with :func:`skfedclust.flower.fit_on_flower`, and saves what
the server learned (the fitted estimator, without labels) and a summary of
the bytes exchanged in ``output-dir``, a folder outside the app (whatever is
in the app folder is bundled into the next ``flwr run``).
"""

import json
import time
from pathlib import Path

import numpy as np
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

#: Methods of skfedclust that run on Flower, by the name the run config uses.
METHODS = {
    "kfed": "KFed",
    "feca": "FeCA",
    "mavg": "MAvg",
    "ffcm": "FederatedFuzzyCMeans",
    "kumar": "KumarFederatedKMeans",
    "gold": "GOLDClustering",
    "fedsc": "FedSpectralClustering",
    "dc": "DCClustering",
    "omnifc": "OmniFCClustering",
    "fedkmeans": "FederatedKMeans",
}

app = ServerApp()


def make_estimator(config):
    """The estimator the run config asks for; a wrong setting fails here, before any node."""
    method = str(config["method"]).strip().lower()
    if method not in METHODS:
        raise ValueError(
            f"unknown method {config['method']!r} in the run config; choose one of "
            f"{', '.join(METHODS)} (flwr run . --run-config \"method='feca'\")"
        )
    try:
        params = json.loads(str(config.get("params", "") or "{}"))
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"params must be a JSON object of estimator parameters, such as "
            f"'{{\"max_iter\": 50}}'; got {config['params']!r} ({exc})"
        ) from exc
    if not isinstance(params, dict):
        raise ValueError(f"params must be a JSON object, got {params!r}")
    import skfedclust

    cls = getattr(skfedclust, METHODS[method])
    params = {
        "n_clusters": int(config["n-clusters"]),
        "random_state": int(config["random-state"]),
        **params,
    }
    try:
        estimator = cls(**params)
    except TypeError as exc:
        raise ValueError(f"{cls.__name__} does not take these params: {exc}") from exc
    estimator._validate_params()
    return estimator


def node_ids(config):
    """The ``node-ids`` of the run config (``"12,34,56"``), or ``None``."""
    text = str(config.get("node-ids", "") or "").replace(",", " ").split()
    try:
        return [int(n) for n in text] or None
    except ValueError as exc:
        raise ValueError(f"node-ids must be node ids separated by commas: {exc}") from exc


def wait_for_any_node(grid, connect_timeout):
    """Every node the SuperLink lists, once there is at least one (``n-nodes = 0``)."""
    deadline = time.monotonic() + connect_timeout
    while not (nodes := sorted(grid.get_node_ids())):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no node connected within {connect_timeout:g} s")
        time.sleep(0.2)
    return nodes


def _plain(value):
    """JSON-friendly copy of the communication reports."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


@app.main()
def main(grid: Grid, context: Context) -> None:
    config = context.run_config
    estimator = make_estimator(config)
    chosen = node_ids(config)
    n_nodes = int(config["n-nodes"])
    connect_timeout = float(config["connect-timeout"])
    if chosen is None and n_nodes == 0:
        chosen = wait_for_any_node(grid, connect_timeout)
    out = Path(str(config["output-dir"])).expanduser()

    from skfedclust.flower import fit_on_flower

    started = time.perf_counter()
    fit_on_flower(
        estimator,
        grid,
        n_nodes=None if chosen is not None else n_nodes,
        node_ids=chosen,
        timeout=float(config["timeout"]),
        connect_timeout=connect_timeout,
        poll_interval=float(config["poll-interval"]),
    )
    seconds = time.perf_counter() - started
    out.mkdir(parents=True, exist_ok=True)
    import joblib

    joblib.dump(estimator, out / "estimator.joblib")
    summary = {
        "method": type(estimator).__name__,
        "cluster_centers": getattr(estimator, "cluster_centers_", None),
        "communication": estimator.communication_,
        "transport": estimator.transport_,
        "nodes": estimator.client_nodes_,
        "rows_written_by_each_node": estimator.client_outputs_,
        "fit_seconds": seconds,
    }
    (out / "summary.json").write_text(json.dumps(_plain(summary), indent=2))
    print(f"{summary['method']}: centers and ledger saved in {out.resolve()}")
