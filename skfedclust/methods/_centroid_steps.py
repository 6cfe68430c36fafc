"""Client steps shared by the centroid methods.

Each is a client step of the protocol runtime: ``step(data, inbox, state, party,
**public) -> Reply``. It sees the client's own rows and what the server sent it.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

from ..clusterers import nearest_center
from ..federation import Reply, bound_only, releases_nothing, summand
from ..node._policy import DEFAULT_MIN_SUM_PARTICIPANTS
from ..secure import SecureAggregator, SumChannel, agree_bound, default_degree

#: Binary orders per range of the histogram that bounds the clients' inertias:
#: the bound may exceed the largest inertia by up to 2**16, which leaves the
#: secure sum more than 40 bits of precision, and the histogram is 132 values.
INERTIA_BOUND_COARSENESS = 16

__all__ = [
    "inertia_message",
    "label_and_inertia",
    "label_by_nearest_center",
    "lloyd_statistics",
    "nearest_center_inertia",
    "pooled_inertia",
    "secure_inertia",
    "final_labels",
    "secure_inertia_communication",
]


@releases_nothing
def label_by_nearest_center(data, inbox, state, party, *, centers_tag="global centers"):
    """Label the client's rows by the nearest center the server sent; output the labels.

    Nothing is sent: the labels are the client's own output, for its own user.
    """
    return Reply(output={"labels": nearest_center(data, inbox[centers_tag])})


@summand
def lloyd_statistics(data, inbox, state, party, *, centers_tag="global centers"):
    """One federated Lloyd iteration, client side: send per-center sums and counts.

    Sums are taken relative to the first center, so a large common offset
    costs no precision; the server adds it back
    (:func:`lloyd_server_update`).
    """
    centers = inbox[centers_tag]
    labels = nearest_center(data, centers)
    sums = np.zeros_like(centers)
    np.add.at(sums, labels, data - centers[0])
    counts = np.bincount(labels, minlength=len(centers))
    return Reply(
        send=(sums, counts),
        keep={"labels": labels},
        reveals=lambda: cluster_means(centers[0], sums, counts),
    )


# ---------------------------------------------------------------- inertia
def pooled_inertia(X, centers):
    """Sum of squared distances of the rows of ``X`` to their nearest center.

    Each distance is taken from the difference of the row and its center, so
    a large common offset costs no precision; it is ``inf`` only when a
    squared distance overflows float64.
    """
    X = np.asarray(X, dtype=np.float64)
    centers = np.asarray(centers, dtype=np.float64)
    if X.shape[0] == 0:
        return 0.0
    labels = nearest_center(X, centers)
    with np.errstate(over="ignore"):
        diff = X - centers[labels]
        return float(np.einsum("ij,ij->", diff, diff))


def inertia_message(data, centers):
    """``(inertia, overflowed)`` of ``data`` on ``centers``, the message of the inertia sums."""
    inertia = pooled_inertia(data, centers)
    overflow = not np.isfinite(inertia)
    # A non-finite value cannot be encoded in fixed point: it is flagged as
    # an integer and counted as 0, and the total becomes inf.
    value = np.array([0.0 if overflow else inertia])
    return value, np.array([int(overflow)], dtype=np.int64)


@summand
def nearest_center_inertia(data, inbox, state, party, *, centers_tag="final centers"):
    """Client step: the client's squared distances to its nearest centers, summed.

    Sends ``(inertia, overflowed)``: one float64, and one int64 that is 1 when
    a squared distance overflows float64 (the float is then 0). The centers
    are those received under ``centers_tag``, or kept under it by an earlier
    step (:func:`label_and_inertia`).
    """
    centers = inbox[centers_tag] if centers_tag in inbox else state[centers_tag]
    return Reply(send=inertia_message(data, centers))


@summand
def label_and_inertia(data, inbox, state, party, *, centers_tag="final centers"):
    """Client step: label the rows by nearest center (output) and send their inertia.

    The labels are the client's output, as in :func:`label_by_nearest_center`;
    it sends :func:`nearest_center_inertia`'s message and keeps the centers
    for the next step of the secure sum.
    """
    centers = inbox[centers_tag]
    return Reply(
        send=inertia_message(data, centers),
        keep={centers_tag: centers},
        output={"labels": nearest_center(data, centers)},
    )


def cluster_means(origins, sums, counts):
    """The means the server computes from per-cluster sums of deviations and counts.

    ``origins`` are the points the deviations were taken from (the centers
    the server sent, or one of them for every cluster): a cluster of one row
    gives that row back. A client step returns them as its reply's
    ``reveals``, so that the node's policy searches them for its rows.
    """
    filled = np.asarray(counts) > 0
    origins = np.broadcast_to(np.asarray(origins, dtype=np.float64), np.shape(sums))
    return origins[filled] + np.asarray(sums)[filled] / np.asarray(counts)[filled, None]


@bound_only
def lloyd_deviations(data, inbox, state, party, *, centers_tag="global centers"):
    """Client step for a bound: the rows' deviations from the first center; keep the centers."""
    centers = np.asarray(inbox[centers_tag])
    return Reply(send=data - centers[0], keep={"lloyd centers": centers})


@summand
def lloyd_kept_statistics(data, inbox, state, party):
    """:func:`lloyd_statistics` for the centers a previous step kept (a secure sum's step)."""
    centers = state["lloyd centers"]
    labels = nearest_center(data, centers)
    sums = np.zeros_like(centers)
    np.add.at(sums, labels, data - centers[0])
    counts = np.bincount(labels, minlength=len(centers))
    return Reply(send=(sums, counts), reveals=lambda: cluster_means(centers[0], sums, counts))


def secure_lloyd_step(runtime, random_state, centers, *, centers_tag="global centers"):
    """One federated Lloyd iteration whose per-center sums and counts are secure sums.

    The server broadcasts ``centers``, agrees a public bound on the clients'
    deviations from the first center (the histogram of their binary orders,
    4 orders per range), then adds every client's per-center sums of those
    deviations and counts; it learns the totals, not a client's. Empty
    centers stay where they are. One set-up round and four rounds.

    Returns
    -------
    centers : ndarray of shape (n_centers, n_features)
        The moved centers.
    """
    seed = int(random_state.randint(np.iinfo(np.int32).max))
    channel = SumChannel(runtime, secure=True, seed=seed)
    runtime.broadcast(centers, tag=centers_tag)
    # The set-up step reads no message: the centers wait for the first sum.
    channel.aggregator.setup()
    runtime.stage("one federated Lloyd step: a bound, then secure per-center sums and counts")
    bound = channel.bound(
        lloyd_deviations, tag="Lloyd bound", coarseness=4, centers_tag=centers_tag
    )
    largest = float(np.max(runtime.client_sizes))
    (sums, counts), _ = channel.sum(
        lloyd_kept_statistics, tag="Lloyd sums and counts", bounds=[2.0 * largest * bound, None]
    )
    new = np.array(centers, dtype=np.float64, copy=True)
    filled = counts > 0
    new[filled] = centers[0] + sums[filled] / counts[filled, None]
    return new


def secure_inertia(
    runtime,
    random_state,
    centers,
    *,
    centers_tag="final centers",
    step=label_and_inertia,
    messages=None,
    **public,
):
    """Send the final centers, label the rows, and get their inertia from secure sums.

    Each client sums the squared distances of its rows to their nearest
    center; the server learns the total and nothing else of a client's share:

    1. set-up of a :class:`~skfedclust.secure.SecureAggregator` (pairwise
       seeds between neighbours), then the centers (and ``messages``) down;
    2. a public bound on a client's inertia, from
       :func:`~skfedclust.secure.agree_bound` (the server learns how many
       clients' inertias fall in each binary range, not whose). Its client
       step, ``step``, also hands the client's labels to its user: the final
       labelling costs no round of its own;
    3. a secure sum of the inertias under that bound.

    Communication: one set-up round and four rounds (two per secure sum),
    all counted as ``evaluation_rounds`` (the method's ``rounds`` are its
    own), plus the centers' download; bytes in
    :func:`secure_inertia_communication`. The bound's histogram spans
    :data:`INERTIA_BOUND_COARSENESS` binary orders per range: the server
    learns less, and the inertia keeps more than 40 bits of precision.

    Parameters
    ----------
    runtime : Runtime
        The protocol runtime.
    random_state : numpy.random.RandomState
        The server's generator: draws the public seed of the aggregation graph.
    centers : ndarray of shape (n_centers, n_features)
        The final centers, broadcast under ``centers_tag``.
    centers_tag : str, default="final centers"
        Tag of the centers' message.
    step : callable, default=label_and_inertia
        Client step of the bound's exchange: sends ``(inertia, overflowed)``
        as :func:`nearest_center_inertia` does, keeps the centers under
        ``centers_tag`` and outputs the client's labels.
    messages : dict, default=None
        Further server messages the step reads, ``{tag: {client: payload}}``,
        sent after the set-up and before the step.
    **public
        Further public constants of ``step``.

    Returns
    -------
    inertia : float
        Sum of squared distances of every row to its nearest center; ``inf``
        if a client's squared distances overflow float64.
    """
    seed = int(random_state.randint(np.iinfo(np.int32).max))
    if runtime.n_clients < DEFAULT_MIN_SUM_PARTICIPANTS:
        return _labels_without_inertia(runtime, centers, centers_tag, step, messages, public)
    aggregator = SecureAggregator(runtime, seed=seed)
    with runtime.evaluation():
        aggregator.setup()
    runtime.broadcast(centers, tag=centers_tag)
    for tag, payloads in (messages or {}).items():
        runtime.send(payloads, tag=tag)
    runtime.stage("client step: labels; secure sums: a bound on the inertia, the inertia")
    with runtime.evaluation():
        bound = agree_bound(
            aggregator,
            step,
            tag="inertia bound",
            coarseness=INERTIA_BOUND_COARSENESS,
            centers_tag=centers_tag,
            **public,
        )
        (total, overflowed), _ = aggregator.sum(
            nearest_center_inertia,
            tag="inertia",
            bounds=[bound or 1.0, None],
            centers_tag=centers_tag,
        )
    return float("inf") if overflowed[0] else float(total[0])


def final_labels(
    estimator,
    runtime,
    random_state,
    centers,
    *,
    centers_tag="final centers",
    step=label_and_inertia,
    messages=None,
    **public,
):
    """The clients label their rows by the final centers; ``inertia_`` when asked.

    The last stage of every centroid method: the final centers (and
    ``messages``) go down and each client labels its rows, which it keeps
    (its output). With the estimator's ``compute_inertia=True``,
    :func:`secure_inertia` also sums the clients' inertias into
    ``estimator.inertia_`` (five evaluation rounds); otherwise no client
    sends anything more and ``inertia_`` is not set, so that a one-shot
    method stays one round.
    """
    estimator.__dict__.pop("inertia_", None)
    if estimator.compute_inertia:
        estimator.inertia_ = secure_inertia(
            runtime,
            random_state,
            centers,
            centers_tag=centers_tag,
            step=step,
            messages=messages,
            **public,
        )
        return
    _labels_without_inertia(runtime, centers, centers_tag, step, messages, public, asked=False)


@releases_nothing
def labels_only_step(data, inbox, state, party, *, inner, inner_public):
    """Client step: what ``inner`` keeps and outputs (the client's labels), sending nothing."""
    from ..federation._runtime import resolve_client_step

    reply = resolve_client_step(inner, role="summand")(data, inbox, state, party, **inner_public)
    return Reply(keep=reply.keep, output=reply.output)


def _labels_without_inertia(runtime, centers, centers_tag, step, messages, public, asked=True):
    """The clients label their rows; no inertia (not asked, or too few clients to sum it).

    The labelling is the method's last stage when no inertia is asked; when
    one is asked but cannot be summed, it stays counted as evaluation.
    """
    from ..federation._runtime import client_step_name

    if asked:
        warnings.warn(
            f"inertia_ needs a secure sum of at least {DEFAULT_MIN_SUM_PARTICIPANTS} clients "
            f"(with {runtime.n_clients} it would tell each client the others' inertia); it is "
            "nan. score(X) gives the inertia of rows you hold.",
            UserWarning,
            stacklevel=4,
        )
    runtime.broadcast(centers, tag=centers_tag)
    for tag, payloads in (messages or {}).items():
        runtime.send(payloads, tag=tag)
    runtime.stage(
        "client step: labels"
        + (" (no inertia: too few clients for a secure sum)" if asked else " by the final centers")
    )
    with runtime.evaluation() if asked else contextlib.nullcontext():
        runtime.run(
            labels_only_step,
            tag="labels",
            inner=client_step_name(step),
            inner_public={"centers_tag": centers_tag, **public},
        )
    return float("nan")


def secure_inertia_communication(n_clients):
    """What :func:`secure_inertia` sends with every client answering.

    With ``q`` neighbours per client on the aggregation graph (``n_clients -
    1`` up to 5 clients, else the even degree of
    :func:`~skfedclust.secure.default_degree`), ``m = n_clients``: set-up
    (none for one client), ``16 m q / 2`` peer bytes (one seed per edge);
    each of the two secure sums sends, per client, its masked vector and its
    description up, a 32-byte self-mask share and a 16-byte share of each of
    its ``q`` pair keys to each neighbour and, when unmasking, the ``q``
    self-mask shares it holds up (``32 q``), and the server
    announces who dropped to every client (no one: 0 bytes). The
    bound's vector is ``ceil(2101 / c)`` int64 (one per range of ``c =``
    :data:`INERTIA_BOUND_COARSENESS` binary exponents of a float64; described
    in 16 bytes), the inertia's one float64 and one int64 (described in 39
    bytes). Every round is an evaluation round. The centers' download is not
    included.

    Parameters
    ----------
    n_clients : int
        Number of clients.

    Returns
    -------
    communication : dict
        ``rounds`` and ``setup_rounds`` (none: the inertia's exchanges do not
        count as the method's), ``evaluation_rounds``, ``bytes_up``,
        ``bytes_down``, ``bytes_peer``.
    """
    m = int(n_clients)
    degree = default_degree(m)
    q = m - 1 if degree >= m - 1 else degree - degree % 2
    bins = -(-2101 // INERTIA_BOUND_COARSENESS)
    vectors = (8 * bins + 16) + (8 * 2 + 39)
    return {
        "rounds": 0,
        "setup_rounds": 0,
        "evaluation_rounds": 4 + int(m > 1),
        "bytes_up": m * vectors + 2 * m * 32 * q,
        "bytes_down": 0,
        "bytes_peer": 16 * m * q // 2 + 2 * m * (32 + 16 * q) * q,
    }
