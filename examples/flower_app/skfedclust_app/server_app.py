"""ServerApp: fits skfedclust estimators on the SuperNodes' data.

It checks the run configuration, waits for the nodes (``n-nodes`` of them,
or the nodes in ``node-ids``, or with ``n-nodes = 0`` every node the
SuperLink lists, which is what a simulation wants), runs each chosen
estimator's protocol on them with :func:`skfedclust.flower.fit_on_flower`,
one after the other, and saves what the server learned (the fitted
estimator, without labels) and a summary of the bytes exchanged in
``output-dir``, a folder outside the app (whatever is in the app folder is
bundled into the next ``flwr run``). With several methods, every file of a
method, on the server and on the nodes, starts with its name (``kfed-``).
"""

import json
import time
from pathlib import Path

import numpy as np
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

#: Methods of skfedclust that run on Flower, by the name the run config uses: an
#: estimator class name, or the class name and the parameters that make the variant.
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
    # Lloyd run by the nodes: the coordinator relays sealed uploads, gets the result.
    "fedkmeans-blind": ("FederatedKMeans", {"coordinator": "blind"}),
}

app = ServerApp()


def chosen_methods(config):
    """The run config's ``method``: one name, names separated by commas, or ``all``."""
    text = str(config["method"]).strip().lower()
    names = list(METHODS) if text == "all" else [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise ValueError(
            f"unknown method {config['method']!r} in the run config; choose one of "
            f"{', '.join(METHODS)}, several separated by commas, or all "
            "(flwr run . --run-config \"method='feca'\")"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"method names a method twice: {config['method']!r}")
    return names


def method_params(config, methods):
    """Each method's estimator parameters from the run config's ``params`` (JSON).

    One method takes an object of its parameters, ``{"max_iter": 50}``. An
    object keyed by method names, ``{"kumar": {"n_rounds": 2}}``, gives each
    method its own (a method without a key takes the defaults, a key of a
    method the run does not fit is ignored); several methods take that form
    only.
    """
    try:
        params = json.loads(str(config.get("params", "") or "{}"))
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"params must be a JSON object of estimator parameters, such as "
            f"'{{\"max_iter\": 50}}'; got {config['params']!r} ({exc})"
        ) from exc
    if not isinstance(params, dict):
        raise ValueError(f"params must be a JSON object, got {params!r}")
    keyed = bool(params) and all(k in METHODS and isinstance(v, dict) for k, v in params.items())
    if not keyed and len(methods) == 1:
        return {methods[0]: params}
    if params and not keyed:
        raise ValueError(
            "with several methods, params is an object of parameter objects keyed by method "
            f'name, such as \'{{"kumar": {{"n_rounds": 2}}}}\'; got {config["params"]!r}'
        )
    return params


def make_estimators(config):
    """``[(method, estimator)]`` the run config asks for, in its order.

    A wrong setting fails here, before any node is contacted.
    """
    methods = chosen_methods(config)
    params = method_params(config, methods)
    import skfedclust

    estimators = []
    for method in methods:
        name, variant = (
            METHODS[method] if isinstance(METHODS[method], tuple) else (METHODS[method], {})
        )
        cls = getattr(skfedclust, name)
        kwargs = {
            "n_clusters": int(config["n-clusters"]),
            "random_state": int(config["random-state"]),
            **variant,
            **params.get(method, {}),
        }
        try:
            estimator = cls(**kwargs)
        except TypeError as exc:
            raise ValueError(f"{cls.__name__} does not take these params: {exc}") from exc
        estimator._validate_params()
        estimators.append((method, estimator))
    return estimators


def make_estimator(config):
    """The estimator of a run config naming one method."""
    estimators = make_estimators(config)
    if len(estimators) != 1:
        raise ValueError(f"the run config names {len(estimators)} methods, not one")
    return estimators[0][1]


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
    estimators = make_estimators(config)
    chosen = node_ids(config)
    n_nodes = int(config["n-nodes"])
    connect_timeout = float(config["connect-timeout"])
    if chosen is None and n_nodes == 0:
        chosen = wait_for_any_node(grid, connect_timeout)
    out = Path(str(config["output-dir"])).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    several = len(estimators) > 1
    for method, estimator in estimators:
        # Several methods on one federation: each one's files and the nodes'
        # outputs carry its name, and the share-holding nodes only OmniFC has
        # parties for sit out the other fits.
        prefix = f"{method}-" if several else ""
        fit(estimator, grid, config, chosen, n_nodes, out, prefix)


def fit(estimator, grid, config, chosen, n_nodes, out, prefix):
    """Fit one estimator on the nodes; save it and its summary in ``out``."""
    import joblib

    from skfedclust.flower import fit_on_flower

    started = time.perf_counter()
    fit_on_flower(
        estimator,
        grid,
        n_nodes=None if chosen is not None else n_nodes,
        node_ids=chosen,
        timeout=float(config["timeout"]),
        connect_timeout=float(config["connect-timeout"]),
        poll_interval=float(config["poll-interval"]),
        idle_nodes="leave out" if prefix else "refuse",
        output_prefix=prefix,
    )
    seconds = time.perf_counter() - started
    for party, (node, identity, policy) in enumerate(
        zip(estimator.client_nodes_, estimator.client_identities_, estimator.client_policies_)
    ):
        # What each node's operator agreed to, to compare with what they announced.
        print(f"party {party}: node {node}, identity {identity}, policy {json.dumps(policy)}")
    joblib.dump(estimator, out / f"{prefix}estimator.joblib")
    summary = {
        "method": type(estimator).__name__,
        "cluster_centers": getattr(estimator, "cluster_centers_", None),
        "communication": estimator.communication_,
        "transport": estimator.transport_,
        "nodes": estimator.client_nodes_,
        "identities": estimator.client_identities_,
        "policies": estimator.client_policies_,
        "rows_written_by_each_node": estimator.client_outputs_,
        "fit_seconds": seconds,
    }
    (out / f"{prefix}summary.json").write_text(json.dumps(_plain(summary), indent=2))
    print(f"{summary['method']}: centers and ledger saved in {out.resolve()} ({seconds:.0f} s)")
