"""Fitting and predicting on Flower: the handshake, the roster, the fit and its report.

:func:`fit_on_flower` waits for the nodes, greets them (each answers with the
public summary of its policy and, if it holds data, its rows' shape), lays the
data nodes out as clients and parties, runs the estimator's protocol on a
:class:`~skfedclust.flower.FlowerRuntime` and writes the outputs back through
the nodes; :func:`predict_on_flower` labels new rows where a fit's nodes kept
what prediction needs. The runtime itself (exchanges, sealing, the transport
report) is in :mod:`skfedclust.flower._runtime`.
"""

from __future__ import annotations

import time
import uuid
import warnings

import numpy as np
from sklearn.utils import check_random_state

from .. import __version__
from ..federation import logger, progress
from ..federation._inputs import _check_client_sizes, _check_n_samples
from ._crypto import fingerprint
from ._runtime import (
    DEFAULT_POLL_INTERVAL,
    FlowerNodeError,
    FlowerRuntime,
    FlowerSession,
    FlowerTimeoutError,
    NotSupportedOnFlower,
    Transport,
    _decode_reply,
    _exchange,
    _FederationInfo,
)
from ._wire import (
    DEFAULT_ALLOWED_MODULES,
    HELLO,
    require_flwr,
    to_content,
)

try:
    from flwr.app import Message
except ImportError:  # pragma: no cover
    Message = None

__all__ = ["fit_on_flower", "predict_on_flower"]


def _wait_for_nodes(grid, n_nodes, node_ids, connect_timeout):
    """The nodes of the federation, once connected.

    With ``n_nodes``, more connected nodes than asked for is usually a SuperNode
    restarted a moment ago: the SuperLink lists its old node until that one
    misses its heartbeats (about a minute), so the wait goes on until the count
    comes down, and the error says what to do if it does not.
    """
    deadline = time.monotonic() + connect_timeout
    warned = False
    while True:
        connected = sorted(int(n) for n in grid.get_node_ids())
        if node_ids is not None:
            if set(node_ids) <= set(connected):
                return list(node_ids)
        elif len(connected) == n_nodes:
            return connected
        elif len(connected) > n_nodes and not warned:
            logger.warning(
                "%d nodes are connected but n_nodes=%d: waiting up to %g s for the "
                "SuperLink to drop nodes that stopped (a restarted SuperNode keeps its old "
                "node listed until it misses its heartbeats)",
                len(connected),
                n_nodes,
                connect_timeout,
            )
            warned = True
        if time.monotonic() > deadline:
            if node_ids is None and len(connected) > n_nodes:
                raise ValueError(
                    f"{len(connected)} nodes are connected ({connected}) but n_nodes={n_nodes}. "
                    "If a SuperNode was restarted less than about a minute ago, the SuperLink "
                    "still lists its old node until that node misses its heartbeats: run "
                    "again in a minute, or choose the nodes with node_ids (run config "
                    "node-ids of the example app). Otherwise set n_nodes to the number of "
                    "nodes of the federation."
                )
            wanted = len(node_ids) if node_ids is not None else n_nodes
            present = (
                len(set(node_ids) & set(connected)) if node_ids is not None else len(connected)
            )
            raise FlowerTimeoutError(
                f"only {present} of {wanted} nodes connected within {connect_timeout:g} s "
                f"(connected: {connected}); start the missing SuperNodes, or raise "
                "connect_timeout",
                node_ids=[n for n in (node_ids or []) if n not in connected],
                parties=[],
                step="connect",
            )
        time.sleep(0.2)


def _greet(grid, nodes, parties, control, *, what, timeout, transport, poll_interval):
    """Send every node the same handshake ``control``; their replies, in node order."""
    messages = [Message(to_content(control), dst_node_id=n, message_type=HELLO) for n in nodes]
    return _exchange(
        grid,
        messages,
        parties,
        what=what,
        timeout=timeout,
        transport=transport,
        kind="handshake",
        poll_interval=poll_interval,
    )


def _handshake(
    grid, nodes, session, timeout, transport, method=None, poll_interval=DEFAULT_POLL_INTERVAL
):
    # The method is named up front so that a node whose policy does not allow
    # it refuses before the fit starts.
    replies = _greet(
        grid,
        nodes,
        [None] * len(nodes),
        {"session": session, "method": method},
        what="the handshake",
        timeout=timeout,
        transport=transport,
        poll_interval=poll_interval,
    )
    hello = []
    for node_id, reply in zip(nodes, replies):
        control, _, _ = _decode_reply(
            reply, node_id=node_id, party=None, what="the handshake", session=session
        )
        for key, kind in (("n_rows", int), ("n_features", int), ("public_key", str)):
            if not isinstance(control.get(key), kind) or isinstance(control.get(key), bool):
                raise FlowerNodeError(
                    f"node {node_id} sent a handshake without a valid {key!r}",
                    node_id=node_id,
                    party=None,
                    step="the handshake",
                )
        row_group, columns = control.get("row_group"), control.get("columns")
        if (row_group is None) != (columns is None) or (
            row_group is not None
            and (
                not isinstance(row_group, int)
                or isinstance(row_group, bool)
                or not isinstance(columns, list)
                or not all(isinstance(c, int) and not isinstance(c, bool) for c in columns)
            )
        ):
            raise FlowerNodeError(
                f"node {node_id} sent a handshake with an invalid row group or columns",
                node_id=node_id,
                party=None,
                step="the handshake",
            )
        for key in ("identity", "key_signature", "nonce", "policy"):
            value = control.get(key)
            kind = dict if key == "policy" else str
            if value is not None and not isinstance(value, kind):
                raise FlowerNodeError(
                    f"node {node_id} sent a handshake with an invalid {key!r}",
                    node_id=node_id,
                    party=None,
                    step="the handshake",
                )
        hello.append({**control, "node_id": node_id})
    return hello


def _order(hello):
    """Data-holding nodes first, each group sorted by name (then node id)."""
    names = [h["name"] for h in hello if h["name"] is not None]
    if len({type(n) for n in names}) > 1:
        raise ValueError(
            "the nodes' client names mix types "
            f"({sorted({type(n).__name__ for n in names})}); give every node a name of "
            "one type (client-name in its node config)"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"two nodes have the same client name: {sorted(map(str, names))}")

    def key(h):
        return (h["n_rows"] == 0, h["name"] is None, h["name"] or 0, h["node_id"])

    return sorted(hello, key=key)


def _layout(data_nodes):
    """Row groups and columns the data nodes declared (public schema), or ``None``.

    ``data_nodes`` are in party order. A row group's parties are in party
    order, which is the order of its feature blocks.
    """
    declared = [h.get("row_group") is not None for h in data_nodes]
    if not any(declared):
        return None
    if not all(declared):
        missing = [h["node_id"] for h, d in zip(data_nodes, declared) if not d]
        raise ValueError(
            f"nodes {missing} declare no row group and columns but the others do; in a "
            "vertical or hybrid federation every node declares both (row-group and columns "
            "in its node config)"
        )
    columns = [np.asarray(h["columns"], dtype=np.intp) for h in data_nodes]
    for h, cols in zip(data_nodes, columns):
        if len(cols) != h["n_features"] or len(set(cols.tolist())) != len(cols) or cols.min() < 0:
            raise ValueError(
                f"node {h['node_id']} declares columns {cols.tolist()} for its "
                f"{h['n_features']} features; give one distinct non-negative index per feature"
            )
    n_features = int(max(c.max() for c in columns)) + 1
    values = sorted({h["row_group"] for h in data_nodes})
    row_groups = [[p for p, h in enumerate(data_nodes) if h["row_group"] == v] for v in values]
    for value, group in zip(values, row_groups):
        sizes = [data_nodes[p]["n_rows"] for p in group]
        if len(set(sizes)) != 1:
            raise ValueError(
                f"the nodes of row group {value} must hold the same samples in the same "
                f"order; they hold {sizes} rows"
            )
        held = np.sort(np.concatenate([columns[p] for p in group]))
        if not np.array_equal(held, np.arange(n_features)):
            raise ValueError(
                f"the nodes of row group {value} hold features {held.tolist()}; the nodes of a "
                f"row group must hold each of the {n_features} features exactly once"
            )
    return row_groups, columns, n_features


def _layout_feature_names(data_nodes, columns, n_features):
    """Feature names of a vertical or hybrid federation, joined from the nodes' columns."""
    names = [h.get("feature_names") for h in data_nodes]
    if all(n is None for n in names):
        return None
    if any(n is None for n in names):
        raise ValueError(
            "some nodes hold named columns and others do not; give every node named "
            "columns, or none"
        )
    joined = [None] * n_features
    for h, node_names, cols in zip(data_nodes, names, columns):
        for name, c in zip(node_names, cols):
            if joined[c] is not None and joined[c] != name:
                raise ValueError(
                    f"feature {c} is named {joined[c]!r} by one node and {name!r} by node "
                    f"{h['node_id']}; the nodes of a feature block must name its columns alike"
                )
            joined[c] = name
    return np.asarray(joined, dtype=object)


def _feature_names(data_nodes):
    names = [h.get("feature_names") for h in data_nodes]
    if all(n is None for n in names):
        return None
    if any(n != names[0] for n in names):
        raise ValueError(
            "the nodes hold different feature names (or some none); clients must hold the "
            "same features in the same order"
        )
    return np.asarray(names[0], dtype=object)


def _check_request(estimator, n_nodes, node_ids, timeout, connect_timeout, poll_interval):
    """Refuse, before any node is contacted, what cannot run; return ``node_ids`` as ints.

    An estimator may define ``_check_flower_support()``, raising
    :class:`NotSupportedOnFlower` for the parameters a deployment cannot run.
    """
    name = type(estimator).__name__
    if not hasattr(estimator, "_run_protocol"):
        raise NotSupportedOnFlower(
            f"{name} has no protocol on the runtime yet (_run_protocol); "
            "only estimators ported to the protocol runtime run on Flower"
        )
    if (n_nodes is None) == (node_ids is None):
        raise ValueError("pass exactly one of n_nodes and node_ids")
    if n_nodes is not None and (
        isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 1
    ):
        raise ValueError(f"n_nodes must be a positive integer, got {n_nodes!r}")
    if node_ids is not None:
        node_ids = [int(n) for n in node_ids]
        if not node_ids or len(set(node_ids)) != len(node_ids):
            raise ValueError(f"node_ids must be distinct node ids, got {node_ids}")
    for key, value in (
        ("timeout", timeout),
        ("connect_timeout", connect_timeout),
        ("poll_interval", poll_interval),
    ):
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"{key} must be a positive number of seconds, got {value!r}")
    estimator._validate_params()
    check = getattr(estimator, "_check_flower_support", None)
    if check is not None:
        check()
    return node_ids


def fit_on_flower(
    estimator,
    grid,
    *,
    n_nodes=None,
    node_ids=None,
    timeout=600.0,
    connect_timeout=120.0,
    allowed_modules=DEFAULT_ALLOWED_MODULES,
    poll_interval=DEFAULT_POLL_INTERVAL,
    keep_for_predict=False,
    idle_nodes="refuse",
    output_prefix="",
):
    """Fit ``estimator`` on the data of Flower nodes; call it in a ServerApp's ``main``.

    The nodes run a ClientApp from :func:`make_client_app`. The server makes a
    handshake (each node reports its number of rows and features, a name and a
    public key, and in a vertical or hybrid federation its row group and the
    global indices of its columns), orders the clients by name, draws one
    seed per client from the estimator's ``random_state`` as ``fit`` does,
    and runs the estimator's protocol on a :class:`FlowerRuntime`. With the
    clients' arrays in the same order, the result is that of
    ``estimator.fit([X_0, ..., X_m])`` (or of the grid
    ``[[X_00, X_01], [X_10, X_11]]``, row groups in order of their number and
    a row group's feature blocks in the order of its nodes' names): the same
    centers, the same ``communication_``; each node's labels are written on
    the node.

    Parameters
    ----------
    estimator : BaseFederatedClustering
        An estimator with a protocol on the runtime (``_run_protocol``).
    grid : flwr.serverapp.Grid
        The grid the ServerApp's ``main`` receives.
    n_nodes : int, default=None
        Number of nodes to wait for (all parties: data-holding clients and
        parties without data). Exactly one of ``n_nodes`` and ``node_ids``.
    node_ids : list of int, default=None
        The nodes of the federation, when more are connected.
    timeout : float, default=600
        Seconds to wait for the replies of one exchange; a node that does not
        answer in time is named in a :class:`FlowerTimeoutError`.
    connect_timeout : float, default=120
        Seconds to wait for the nodes to connect.
    allowed_modules : tuple of str, default=("skfedclust",)
        Packages whose client steps the protocol may name (the nodes have
        their own list).
    poll_interval : float, default=0.1
        Seconds between two pulls of the nodes' replies from the SuperLink
        (Flower's ``Grid.send_and_receive`` waits 3 s).
    keep_for_predict : bool, default=False
        Ask the nodes to keep their keys and protocol state after the fit,
        for :func:`predict_on_flower` later in the same ServerApp run (DC and
        OmniFC predict with state only the parties hold). Sets
        ``flower_session_``.
    idle_nodes : {"refuse", "leave out"}, default="refuse"
        Nodes without data beyond the parties the estimator has (a node
        whose loader returned ``None`` where the method has no party for it):
        ``"refuse"`` stops the fit after the handshake, naming them (a node
        whose data path is unset looks the same); ``"leave out"`` fits
        without them, for a ServerApp fitting several methods on one
        federation whose share-holding nodes only some methods use. A node
        left out answered the handshake only; it drops that handshake's
        record at the end of its next fit.
    output_prefix : str, default=""
        Prepended to the key of every output the nodes write at the end of
        the fit (``"kfed-"`` makes the labels ``"kfed-labels"``), so that
        the fits of several estimators on the same nodes keep their outputs
        apart.

    Returns
    -------
    estimator : BaseFederatedClustering
        The fitted estimator, with what the server learns (``cluster_centers_``,
        ``communication_``, ...) and no ``labels_``. Also set:
        ``transport_`` (bytes Flower's records carried, see
        :class:`Transport`), ``client_nodes_`` (the Flower node of every
        party), ``client_identities_`` (the fingerprint of every party's
        identity key, ``None`` for a node without one), ``client_policies_``
        (what every party's node said of its policy and authentication in
        its handshake: ``allowed_methods`` (``None``: any),
        ``min_rows_per_vector``, ``refuse_raw_rows``, ``min_sum_participants``,
        ``allow_clear_sums``, ``dp_epsilon`` (its own budget, ``None``: none),
        ``dp_trusted_shares`` (the noise shares it counts on),
        ``privacy_ledger`` (the budget holds across fits), ``max_fits``,
        ``ledger`` (with a ledger, this fit counted: ``fits_used``,
        ``fits_left``, ``epsilon_spent``, ``epsilon_left``, ``None`` without
        a budget), ``max_bound_queries``,
        ``trusted_identities`` (it has a trust file) and
        ``allow_unauthenticated``; what a node says, for the operator to read:
        each node enforces its own) and ``client_outputs_`` (rows of each
        output every node wrote). The fingerprint and the policy of every
        party are also logged at the handshake (``verbose``).
    """
    require_flwr()
    node_ids = _check_request(estimator, n_nodes, node_ids, timeout, connect_timeout, poll_interval)
    if idle_nodes not in ("refuse", "leave out"):
        raise ValueError(f"idle_nodes must be 'refuse' or 'leave out', got {idle_nodes!r}")
    name = type(estimator).__name__
    session = uuid.uuid4().hex
    transport = Transport()

    nodes = _wait_for_nodes(grid, n_nodes, node_ids, connect_timeout)
    hello = _order(
        _handshake(
            grid, nodes, session, timeout, transport, method=name, poll_interval=poll_interval
        )
    )
    others = [h["node_id"] for h in hello if h.get("version") != __version__]
    if others:
        warnings.warn(
            f"nodes {others} run another skfedclust version than the server ({__version__}); "
            "their client steps may differ from the protocol's",
            UserWarning,
            stacklevel=2,
        )
    info, names = _federation_of(estimator, hello)
    _check_n_samples(estimator, info.n_samples)
    _check_client_sizes(estimator, info)

    random_state = check_random_state(estimator.random_state)
    seeds = random_state.randint(np.iinfo(np.int32).max, size=info.n_clients, dtype=np.int64)
    n_parties = max(info.n_clients, int(estimator._n_parties(info)))
    hello, left_out = _parties(hello, n_parties, info, name, idle_nodes)
    runtime = FlowerRuntime(
        grid,
        [h["node_id"] for h in hello],
        session=session,
        seeds=seeds,
        client_sizes=info.client_sizes,
        n_features=info.n_features,
        public_keys=[h["public_key"] for h in hello],
        identities=[(h.get("identity"), h.get("key_signature")) for h in hello],
        nonces=[h.get("nonce") for h in hello],
        n_clients=info.n_clients,
        timeout=timeout,
        allowed_modules=allowed_modules,
        name=name,
        row_groups=info.row_groups,
        client_columns=info.client_cols,
    )
    runtime.transport = transport
    runtime.poll_interval = poll_interval
    estimator.__dict__.pop("labels_", None)
    estimator.n_features_in_ = info.n_features
    if names is not None:
        estimator.feature_names_in_ = names
    else:
        estimator.__dict__.pop("feature_names_in_", None)
    with progress(estimator.verbose):
        runtime.stage(
            f"Flower federation of {info.n_clients} clients ({n_parties} parties), "
            f"{info.n_samples} samples, {info.n_features} features"
        )
        policies = [h.get("policy") for h in hello]
        _announce_parties(runtime, policies)
        if left_out:
            runtime.stage(f"nodes {left_out}: no data and no party, left out")
        estimator._fit_runtime(runtime, random_state)
        written = runtime.finish(keep=keep_for_predict, prefix=output_prefix)
    _keep_fit_report(estimator, runtime, policies, written, keep_for_predict)
    estimator.client_outputs_ = written
    return estimator


def _federation_of(estimator, hello):
    """The federation the data nodes' handshakes describe, and its feature names."""
    name = type(estimator).__name__
    data_nodes = [h for h in hello if h["n_rows"] > 0]
    if not data_nodes:
        raise ValueError("no node holds data")
    layout = _layout(data_nodes)
    if layout is None:
        widths = {h["n_features"] for h in data_nodes}
        if len(widths) != 1:
            detail = ", ".join(f"node {h['node_id']}: {h['n_features']}" for h in data_nodes)
            raise ValueError(
                "clients must share the same features, or declare their row group and columns "
                f"(a vertical or hybrid federation); the nodes hold {detail}"
            )
        info = _FederationInfo(
            [h["n_rows"] for h in data_nodes], widths.pop(), [h["name"] for h in data_nodes]
        )
        names = _feature_names(data_nodes)
    else:
        if not estimator._supports_vertical:
            raise ValueError(
                f"{name} supports horizontal federations only (every client holds all "
                "features); the nodes declare row groups and columns"
            )
        row_groups, columns, n_features = layout
        info = _FederationInfo(
            [h["n_rows"] for h in data_nodes],
            n_features,
            [h["name"] for h in data_nodes],
            row_groups=row_groups,
            client_cols=columns,
        )
        names = _layout_feature_names(data_nodes, columns, n_features)
    return info, names


def _parties(hello, n_parties, info, name, idle_nodes):
    """The handshakes of the fit's parties, and the nodes left out (no data, no party)."""
    if len(hello) < n_parties:
        raise ValueError(
            f"{name} needs {n_parties} parties ({n_parties - info.n_clients} without data) "
            f"but only {len(hello)} nodes joined"
        )
    left_out = []
    if len(hello) > n_parties:
        # The data nodes come first: every node after the parties holds no data.
        idle = [h["node_id"] for h in hello[n_parties:]]
        if idle_nodes == "refuse":
            raise ValueError(
                f"nodes {idle} hold no data and {name} has no party for them (their loader "
                "returned None: is their data-path set? idle_nodes='leave out' fits without "
                "them)"
            )
        left_out, hello = idle, hello[:n_parties]

    return hello, left_out


def _announce_parties(runtime, policies):
    """Print each party's node, identity and policy; warn of nodes that authenticate nobody."""
    for party, (node_id, (identity, _), policy) in enumerate(
        zip(runtime.node_ids, runtime.identities, policies)
    ):
        # Printed so that a person can compare each party's identity with
        # the one its operator announced out of band, and see what each
        # node's operator agreed to.
        who = "no identity key" if identity is None else fingerprint(bytes.fromhex(identity))
        runtime.stage(f"party {party}: node {node_id}, {who}; {_describe_policy(policy)}")
        if not (isinstance(policy, dict) and policy.get("trusted_identities")):
            logger.warning(
                "party %d (node %d) does not authenticate the other parties (no "
                "trusted-identities file): its sealed messages resist a passive server only",
                party,
                node_id,
            )


def _keep_fit_report(estimator, runtime, policies, written, keep_for_predict):
    """What the estimator keeps of a Flower fit: its session if asked, transport, nodes."""
    if keep_for_predict:
        estimator.flower_session_ = FlowerSession(runtime)
    else:
        estimator.__dict__.pop("flower_session_", None)
    estimator.transport_ = runtime.transport_report()
    estimator.client_nodes_ = np.asarray(runtime.node_ids, dtype=np.uint64)
    estimator.client_identities_ = [
        None if identity is None else fingerprint(bytes.fromhex(identity))
        for identity, _ in runtime.identities
    ]
    estimator.client_policies_ = policies
    estimator.client_outputs_ = written


def _describe_policy(policy):
    """One line of what a node said of its policy and authentication in its handshake."""
    if not isinstance(policy, dict):
        return "no policy summary"
    methods = policy.get("allowed_methods")
    if policy.get("trusted_identities"):
        auth = "checks the roster against its trusted identities"
    elif policy.get("allow_unauthenticated"):
        auth = "UNAUTHENTICATED (no trusted identities, allow-unauthenticated)"
    else:
        auth = "no trusted identities"
    return (
        f"methods {'any' if methods is None else ', '.join(map(str, methods))}, "
        f"min rows per vector {policy.get('min_rows_per_vector') or 'none'}, "
        f"refuse raw rows {str(policy.get('refuse_raw_rows')).lower()}, "
        f"min sum participants {policy.get('min_sum_participants')}, "
        f"clear sums {'allowed' if policy.get('allow_clear_sums') else 'refused'}, "
        f"{_describe_budget(policy)}, {auth}"
    )


def _describe_budget(policy):
    epsilon = policy.get("dp_epsilon")
    if epsilon is None:
        budget = "no DP budget"
    else:
        span = "across fits (ledger)" if policy.get("privacy_ledger") else "per fit"
        budget = f"DP budget epsilon {epsilon:g} {span}"
    if policy.get("max_fits") is not None:
        budget += f", at most {policy['max_fits']} fits"
    ledger = policy.get("ledger")
    if isinstance(ledger, dict):
        # What the node's ledger holds, this fit counted: the operator sees a
        # budget running out before a fit is refused for it.
        budget += f" ({ledger.get('fits_used')} used"
        if ledger.get("epsilon_left") is not None:
            budget += (
                f", epsilon {ledger.get('epsilon_spent', 0.0):.3g} spent, "
                f"{ledger['epsilon_left']:.3g} left"
            )
        budget += ")"
    return budget


def predict_on_flower(
    estimator,
    grid,
    *,
    timeout=600.0,
    poll_interval=DEFAULT_POLL_INTERVAL,
    keep_for_predict=False,
):
    """Label the new rows the nodes hold, with the parties of a Flower fit.

    For the estimators whose ``predict`` needs state only the parties hold
    (:class:`~skfedclust.DCClustering`: each party's private map;
    :class:`~skfedclust.OmniFCClustering`: the shares of the training rows),
    fitted by :func:`fit_on_flower` with ``keep_for_predict=True`` in the
    same ServerApp run. Each node loads its new rows (``load_new_data`` of
    :func:`make_client_app`, by default the ``new-data-path`` field of its
    node config) and the estimator's predict protocol runs with the parties
    of the fit; each node writes the labels of its new rows as output
    ``"predicted-labels"``. Nothing of the new rows reaches the server beyond
    what the protocol sends. Other estimators predict from what the server
    holds (``estimator.predict``) without the nodes.

    Parameters
    ----------
    estimator : DCClustering or OmniFCClustering
        Fitted by :func:`fit_on_flower` with ``keep_for_predict=True``.
    grid : flwr.serverapp.Grid
        The grid of the ServerApp run that fitted it.
    timeout : float, default=600
        Seconds to wait for the replies of one exchange.
    poll_interval : float, default=0.1
        Seconds between two pulls of the nodes' replies.
    keep_for_predict : bool, default=False
        Keep the parties' state for another predict run; otherwise the nodes
        drop it at the end of this one and the session is closed.

    Returns
    -------
    result : dict
        ``"written"``: rows of predicted labels each party wrote;
        ``"communication"``: the ledger report of the predict run;
        ``"labels"``: what the server learned of the labels (the analyst's
        labels for DC, whose server assigns them; the querier's labels for
        OmniFC, whose server decodes the distances), by party.
    """
    require_flwr()
    name = type(estimator).__name__
    predict = getattr(estimator, "_predict_runtime", None)
    if predict is None:
        raise NotSupportedOnFlower(
            f"{name} predicts from what the server holds: call estimator.predict(X); "
            "predict_on_flower is for DCClustering and OmniFCClustering, whose parties "
            "keep what predict needs"
        )
    session = getattr(estimator, "flower_session_", None)
    if session is None or not session.open:
        raise RuntimeError(
            f"{name} was not fitted on Flower with keep_for_predict=True, or its nodes "
            "already dropped their state (a predict run without keep_for_predict=True ends "
            "the session): fit again with fit_on_flower(..., keep_for_predict=True)"
        )
    transport = Transport()
    replies = _greet(
        grid,
        session.node_ids,
        list(range(len(session.node_ids))),
        {"session": session.session, "method": name, "predict": True},
        what="the predict handshake",
        timeout=timeout,
        transport=transport,
        poll_interval=poll_interval,
    )
    sizes = []
    for c, (node_id, reply) in enumerate(zip(session.node_ids, replies)):
        control, _, _ = _decode_reply(
            reply, node_id=node_id, party=c, what="the predict handshake", session=session.session
        )
        n_rows = control.get("n_rows")
        if not isinstance(n_rows, int) or isinstance(n_rows, bool) or n_rows < 0:
            raise FlowerNodeError(
                f"node {node_id} sent a predict handshake without a valid 'n_rows'",
                node_id=node_id,
                party=c,
                step="the predict handshake",
            )
        if c < session.n_clients and n_rows and control.get("n_features") != _width(session, c):
            raise ValueError(
                f"node {node_id} (party {c}) holds new rows of {control.get('n_features')} "
                f"features; it fitted with {_width(session, c)}"
            )
        sizes.append(n_rows)
    runtime = FlowerRuntime(
        grid,
        session.node_ids,
        session=session.session,
        seeds=session.seeds,
        client_sizes=sizes[: session.n_clients],
        n_features=session.n_features,
        public_keys=session.public_keys,
        identities=session.identities,
        nonces=session.nonces,
        n_clients=session.n_clients,
        timeout=timeout,
        allowed_modules=session.allowed_modules,
        name=f"{name}.predict",
        row_groups=session.row_groups,
        client_columns=session.client_columns,
    ).continued(session, sizes[: session.n_clients])
    runtime.transport = transport
    runtime.poll_interval = poll_interval
    with progress(estimator.verbose):
        labels = predict(runtime)
        written = runtime.finish(keep=keep_for_predict, prefix="predicted-")
    session.last_exchange = runtime._exchange
    session.open = bool(keep_for_predict)
    return {
        "written": written,
        "communication": runtime.ledger.report(),
        "labels": labels,
    }


def _width(session, c):
    if session.client_columns is None:
        return session.n_features
    return len(session.client_columns[c])
