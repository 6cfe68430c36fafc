"""The client steps of federated k-means: what a client computes and sends.

A client of :class:`~skfedclust.FederatedKMeans` labels its rows by the
centers the server broadcasts and sends, per cluster, its count, sum of
deviations and squares (to be added up by the secure sum); with empty
clusters, the statistics of its rows far from their centers or, where its
policy lets rows out, its farthest rows; its inertia; and, with
``privacy="dp"``, the same statistics of its rows clipped to a public box
with its share of the noise. The server side is in
:mod:`skfedclust.methods._fedkmeans` and :mod:`skfedclust.methods._fedkmeans_dp`.
"""

from __future__ import annotations

import math

import numpy as np

from ..clusterers import nearest_center, squared_distances
from ..federation import (
    Reply,
    bound_only,
    releases_nothing,
    releases_rows,
    summand,
    summary,
)
from ..federation._column_stats import centered_column_moments, column_extremes_and_sums
from ..node._declarations import coordinator_centers, dp_release
from ..node._dp import (
    charge_node,
    node_noise_share,
    private_normal,
    project_into_box,
    public_box,
)
from ..secure._moments import _one_mean
from ..secure._sampling import check_sampled
from ._centroid_steps import cluster_means
from ._lloyd_pass import labelled_inertia, lloyd_pass

TAG_CENTERS = "centers"
TAG_RELOCATE = "relocation request"
TAG_FARTHEST = "farthest rows request"
TAG_FARTHEST_PICK = "farthest rows picked"
#: Key of a client's labels of the last Lloyd iteration in its private state.
_LABELS = "fedkmeans: labels"
_FARTHEST = "fedkmeans: farthest rows"
#: Key of a client's per-column least and greatest values (its own, kept).
_COLUMN_RANGE = "fedkmeans: column range"
#: Key of a client's column sums, from the same pass as its column range.
_COLUMN_SUMS = "fedkmeans: column sums"
#: Key of the centers a client labelled its rows by in its last Lloyd iteration.
_LABELLED_BY = "fedkmeans: centers of the labels"


@summary
def fedkmeans_callable_local_centers(data, inbox, state, party, *, init, n_clusters):
    """Client step of a callable ``init``: its centers of the client's own rows.

    Called as scikit-learn's ``KMeans`` calls it, ``init(X, n_clusters,
    random_state)``, on the client's rows, with ``min(n_clusters, n_rows)``
    clusters and the client's public seed; the server aggregates the local
    centers as ``init="k-fed-weighted"`` does. Sent as ``(centers, sizes, 0)``,
    the sizes those of the centers' local clusters on the client's rows.
    """
    k = min(int(n_clusters), data.shape[0])
    centers = np.asarray(init(data, k, np.random.RandomState(party.seed)), dtype=np.float64)
    if centers.shape != (k, data.shape[1]) or not np.all(np.isfinite(centers)):
        raise ValueError(
            f"the callable init returned an array of shape {centers.shape} on client "
            f"{party.index}; expected ({k}, {data.shape[1]}) finite centers"
        )
    sizes = np.bincount(nearest_center(data, centers), minlength=k).astype(np.int64)
    return Reply(send=(centers, sizes, np.int64(0)))


def _column_summary(data, state):
    """The client's per-column least and greatest values and sums, and what it keeps of them.

    One pass over its rows, the first time a step asks (the bounds of the
    moments, the column sums, the Lloyd pass's headroom test); later steps
    read what it kept.
    """
    column_range, sums = state.get(_COLUMN_RANGE), state.get(_COLUMN_SUMS)
    if column_range is None or sums is None:
        if not data.shape[0]:
            return None, np.zeros(data.shape[1]), {}
        low, high, sums = column_extremes_and_sums(data)
        column_range = (low, high)
    return column_range, sums, {_COLUMN_RANGE: column_range, _COLUMN_SUMS: sums}


@bound_only
def fedkmeans_row_extremes(data, inbox, state, party):
    """Client step for bound agreement: per column, the least and the greatest value of the rows.

    Their largest ``|x|`` (all a bound agreement reads) is that of the rows,
    per column too, from one pass the client keeps for its later steps.
    """
    column_range, _, keep = _column_summary(data, state)
    if column_range is None:
        return Reply(send=np.zeros((0, data.shape[1])))
    return Reply(send=np.stack(column_range), keep=keep)


@summand
def fedkmeans_column_sums(data, inbox, state, party):
    """Client step: column sums and the number of rows (a rough mean of the pooled rows)."""
    _, sums, keep = _column_summary(data, state)
    return Reply(send=(sums, np.array([data.shape[0]], dtype=np.int64)), keep=keep)


@bound_only
def fedkmeans_deviation_extremes(data, inbox, state, party, *, mean):
    """Client step for bound agreement: per column, the extreme deviations from the public ``mean``.

    Rounding keeps order (``x <= y`` gives ``x - m <= y - m`` in floating
    point), so the largest ``|x - m|`` of a column is that of its least or
    greatest value: the same bound as the rows' deviations, without a pass
    over them.
    """
    mean = _one_mean(mean, data.shape[1])
    column_range, _, keep = _column_summary(data, state)
    if column_range is None:
        return Reply(send=np.zeros((0, data.shape[1])))
    low, high = column_range
    return Reply(send=np.stack([high - mean, low - mean]), keep=keep)


@summand
def fedkmeans_centered_moments(data, inbox, state, party, *, mean):
    """Client step: per column, the sums of the deviations from ``mean`` and of their squares."""
    return Reply(send=centered_column_moments(data, _one_mean(mean, data.shape[1])))


@coordinator_centers
@summand
def fedkmeans_lloyd_statistics(data, inbox, state, party):
    """Client step of one Lloyd iteration: per-cluster statistics of the client's rows.

    Each row goes to its nearest center among those the server sent. Sent:
    per cluster the sum of the rows' deviations from their center (so a
    large common offset costs no precision) and the number of rows, and how
    many of the client's rows changed cluster since its last iteration (all
    of them the first time). The clusters' squared distances are sent only
    when the server asks for them (:func:`fedkmeans_cluster_inertia`), in an
    iteration that left a cluster empty.
    """
    sampled = check_sampled(inbox, state, party)
    column_range, _, kept = _column_summary(data, state)
    centers = np.asarray(inbox[TAG_CENTERS], dtype=np.float64)
    labels, sums, counts, _, changed = lloyd_pass(
        data,
        centers,
        state.get(_LABELS),
        n_threads=party.n_threads,
        column_range=column_range,
        inertia=False,
    )
    return Reply(
        send=(sums, counts, np.array([changed], dtype=np.int64)),
        keep={_LABELS: labels, _LABELLED_BY: centers, **kept, **sampled},
        # In the clear, a center the server placed to catch one row gives it
        # that row back: the node's policy searches the means for its rows.
        reveals=lambda: cluster_means(inbox[TAG_CENTERS], sums, counts),
    )


@coordinator_centers
@summand
def fedkmeans_cluster_inertia(data, inbox, state, party):
    """Client step of the empty-cluster rule: per cluster, its rows' squared distances.

    The squared distances of the client's rows to their centers of its last
    Lloyd iteration (labels and centers it kept), added up per cluster. The
    server asks for them only in an iteration that left a cluster empty, to
    pick the donor clusters; they are a function of the rows and of that
    iteration's centers alone, whatever the server sends now.
    """
    labels, centers = state[_LABELS], state[_LABELLED_BY]
    deviations = data - centers[labels]
    squared = np.einsum("ij,ij->i", deviations, deviations)
    return Reply(send=np.bincount(labels, weights=squared, minlength=len(centers)))


@coordinator_centers
@summand
def fedkmeans_far_rows(data, inbox, state, party):
    """Client step of the empty-cluster rule: statistics of the far rows of donor clusters.

    The server names donor clusters, their centers of the last iteration and
    a squared-distance threshold each (the donor's mean squared distance);
    the client sends, per donor, the sum of the deviations from the donor's
    center of its rows in that cluster lying beyond the threshold, and how
    many there are.
    """
    request = inbox[TAG_RELOCATE]
    labels = state[_LABELS]
    donors = np.asarray(request["donors"], dtype=np.intp)
    centers = np.asarray(request["centers"], dtype=np.float64)
    thresholds = np.asarray(request["thresholds"], dtype=np.float64)
    sums = np.zeros((len(donors), data.shape[1]))
    counts = np.zeros(len(donors), dtype=np.int64)
    for i, j in enumerate(donors):
        deviations = data[labels == j] - centers[i]
        far = np.einsum("ij,ij->i", deviations, deviations) > thresholds[i]
        sums[i] = deviations[far].sum(axis=0)
        counts[i] = np.count_nonzero(far)
    return Reply(send=(sums, counts), reveals=lambda: cluster_means(centers, sums, counts))


def _own_farthest(data, centers, labels, n):
    """The ``n`` rows farthest from their centers: largest first, later rows first on ties."""
    deviations = data - centers[labels]
    squared = np.einsum("ij,ij->i", deviations, deviations)
    order = np.lexsort((-np.arange(len(squared)), -squared))[:n]
    return order, squared[order]


#: Why the steps of scikit-learn's empty-cluster rule release rows.
_FARTHEST_ROW_RELEASE = (
    "FederatedKMeans(empty_clusters='farthest-row') moves an empty cluster onto a "
    "client's farthest row, as scikit-learn's KMeans does"
)


def _check_rows_may_leave(party):
    """scikit-learn's relocation sends rows and row-level distances: only where rows may leave.

    The coordinator chooses how many distances and rows it asks for (any of
    the node's), so a node whose policy refuses raw rows refuses both steps,
    whatever their arguments.
    """
    if party.policy.refuse_raw_rows:
        raise PermissionError(
            "refuse-raw-rows: empty_clusters='farthest-row' sends this node's largest "
            "distances and farthest rows; its policy keeps rows in"
        )


@releases_rows(_FARTHEST_ROW_RELEASE)
def fedkmeans_largest_distances(data, inbox, state, party):
    """Client step of scikit-learn's empty-cluster rule: the client's largest squared distances.

    Sends the ``n_empty`` largest squared distances of its rows to their
    centers (of this iteration, sent with the request), largest first.
    """
    _check_rows_may_leave(party)
    request = inbox[TAG_FARTHEST]
    centers = np.asarray(request["centers"], dtype=np.float64)
    order, squared = _own_farthest(data, centers, state[_LABELS], int(request["n_empty"]))
    return Reply(send=squared, keep={_FARTHEST: order})


@releases_rows(_FARTHEST_ROW_RELEASE)
def fedkmeans_farthest_rows(data, inbox, state, party):
    """Client step: the rows the server picked among the client's farthest, with their clusters.

    The rows themselves leave the client (scikit-learn's rule moves an
    empty cluster onto a row); a deployed node's default policy refuses.
    """
    _check_rows_may_leave(party)
    m = int(inbox[TAG_FARTHEST_PICK])
    order = state[_FARTHEST][:m]
    return Reply(send=(data[order], state[_LABELS][order].astype(np.int64)))


@coordinator_centers
@summand
def fedkmeans_inertia(data, inbox, state, party, *, output):
    """Client step: squared distances of the rows to their nearest center, summed.

    With ``output`` the client also hands its user the labels of its rows
    (the final labelling of the fit).
    """
    centers = np.asarray(inbox[TAG_CENTERS], dtype=np.float64)
    # nearest_center, as predict: labels_ and predict agree on the training rows.
    labels = nearest_center(data, centers)
    inertia = np.array([labelled_inertia(data, centers, labels)])
    return Reply(send=inertia, output={"labels": labels} if output else None)


@coordinator_centers
@bound_only
def fedkmeans_nearest_distances(data, inbox, state, party, *, centers):
    """Client step for bound agreement: each row's squared distance to its nearest center."""
    return Reply(send=squared_distances(data, np.asarray(centers)).min(axis=1))


@coordinator_centers
@summand
def fedkmeans_score_inertia(data, inbox, state, party, *, centers):
    """Client step of ``score``: the squared distances of the rows to the model's centers."""
    centers = np.asarray(centers)
    deviations = data - centers[nearest_center(data, centers)]
    return Reply(send=np.array([np.einsum("ij,ij->", deviations, deviations)]))


@releases_nothing
def fedkmeans_final_labels(data, inbox, state, party):
    """Client step: label the rows by the nearest of the kept centers; output the labels."""
    return Reply(output={"labels": nearest_center(data, inbox[TAG_CENTERS])})


# --------------------------------------------------------------------------- #
# Differentially private Lloyd (privacy="dp"): the rows clipped to a public box
# --------------------------------------------------------------------------- #
def dp_moments_exact(data, lower, upper):
    """The column sums of the rows clipped to the box and centred on its midpoint, and of their
    squares (before any noise)."""
    lower, upper = public_box(lower, upper)
    centred = np.clip(data, lower, upper) - (lower + upper) / 2
    return centred.sum(axis=0), np.einsum("ij,ij->j", centred, centred)


def dp_lloyd_exact(data, centers, lower, upper):
    """Per-cluster sums (around the box's midpoint) and counts of the clipped rows, no noise.

    The server's centers are projected into the box first
    (:func:`~skfedclust.node._dp.project_into_box`): they decide only which
    cluster a row joins, and in the box the deviations the Lloyd pass sums
    keep the precision of the box's scale (a center at ``1e300`` would round
    the sums away).
    """
    lower, upper = public_box(lower, upper)
    centers = project_into_box(centers, lower, upper)
    _, sums, counts, _, _ = lloyd_pass(np.clip(data, lower, upper), centers, inertia=False)
    # Deviations from the centers, moved to the midpoint: every row then adds
    # at most half the box's diagonal, whatever the centers.
    return sums + counts[:, None] * (centers - (lower + upper) / 2), counts


def dp_inertia_exact(data, centers, lower, upper):
    """The clipped rows' squared distances to their nearest center, summed (no noise).

    The server's centers are projected into the box first: a row and a center
    both in the box are at most ``||w||`` apart, so each row adds at most
    ``||w||^2``, the sensitivity the node charges, whatever centers it was sent.
    """
    lower, upper = public_box(lower, upper)
    centers = project_into_box(centers, lower, upper)
    clipped = np.clip(data, lower, upper)
    deviations = clipped - centers[nearest_center(clipped, centers)]
    # Rounding may carry a squared distance a few ulps past ||w||^2: capped there.
    squared = np.minimum(
        np.einsum("ij,ij->i", deviations, deviations), _box_diagonal(lower, upper) ** 2
    )
    return np.array([squared.sum()])


def _box_diagonal(lower, upper):
    return float(np.linalg.norm(np.asarray(upper, dtype=np.float64) - np.asarray(lower)))


@summary
def fedkmeans_dp_extremes(data, inbox, state, party):
    """Client step: per-feature minimum and maximum of the rows (bounds from the data)."""
    return Reply(send=(data.min(axis=0), data.max(axis=0)))


@dp_release
@summand
def fedkmeans_dp_moments(
    data, inbox, state, party, *, lower, upper, sigma_sums, sigma_squares, noise_share
):
    """Client step of the private ``"random"`` start: noisy first and second moments.

    Rows are clipped to the public box ``[lower, upper]`` and centred on its
    midpoint; sent are the column sums of the centred rows and of their
    squares. ``sigma_sums`` and ``sigma_squares`` are the noise each released
    total holds: the node charges both releases to its own accountant
    (sensitivities from the box), then adds its share ``sigma / sqrt(s)``
    from its cryptographic generator, ``s`` the shares it counts on
    (:func:`~skfedclust.node._dp.node_noise_share`: at most its policy's
    ``dp-trusted-shares``, whatever ``noise_share`` the server announces).
    """
    lower, upper = public_box(lower, upper)
    share = node_noise_share(party, noise_share)
    width = upper - lower
    keep = charge_node(
        state,
        party,
        [
            ("column sums", _box_diagonal(lower, upper), sigma_sums),
            (
                "column sums of squares",
                max(float(np.linalg.norm(width**2)) / 4.0, np.finfo(float).tiny),
                sigma_squares,
            ),
        ],
        share,
    )
    sums, squares = dp_moments_exact(data, lower, upper)
    factor = 1.0 / math.sqrt(share)
    d = data.shape[1]
    return Reply(
        send=(
            sums + private_normal(party, factor * sigma_sums, d),
            squares + private_normal(party, factor * sigma_squares, d),
        ),
        keep=keep,
    )


@dp_release
@summand
def fedkmeans_dp_lloyd_statistics(data, inbox, state, party, *, lower, upper, sigma, noise_share):
    """Client step of one private Lloyd iteration: noisy per-cluster sums and counts.

    Rows are clipped to the public box and the server's centers projected
    into it; each row is assigned to its nearest center and summed per
    cluster around the box's midpoint. The released sums hold Gaussian noise
    of standard deviation ``sigma``, the counts ``2 sigma / ||w||`` (``w``
    the box's width), so the pair is one release of ``mu = ||w|| / sigma``:
    the node charges it to its own accountant and adds its share of both
    noises (:func:`~skfedclust.node._dp.node_noise_share`) from its
    cryptographic generator.
    """
    sampled = check_sampled(inbox, state, party)
    lower, upper = public_box(lower, upper)
    share = node_noise_share(party, noise_share)
    diagonal = _box_diagonal(lower, upper)
    keep = charge_node(state, party, [("cluster sums and counts", diagonal, sigma)], share)
    keep.update(sampled)
    sums, counts = dp_lloyd_exact(data, inbox[TAG_CENTERS], lower, upper)
    factor = 1.0 / math.sqrt(share)
    return Reply(
        send=(
            sums + private_normal(party, factor * sigma, sums.shape),
            counts + private_normal(party, factor * 2.0 * sigma / diagonal, counts.shape),
        ),
        keep=keep,
    )


@dp_release
@summand
def fedkmeans_dp_inertia(data, inbox, state, party, *, lower, upper, sigma, noise_share, output):
    """Client step: noisy sum of the clipped rows' squared distances to the nearest center.

    The server's centers are projected into the box before anything is
    computed, so the release's sensitivity ``||w||^2`` holds for any centers;
    it is charged to the node's own accountant before its share of the noise
    is drawn. With ``output`` the client also hands its user the labels of
    its rows (nearest projected center of the rows as they are, as
    ``predict`` gives).
    """
    lower, upper = public_box(lower, upper)
    share = node_noise_share(party, noise_share)
    keep = charge_node(state, party, [("inertia", _box_diagonal(lower, upper) ** 2, sigma)], share)
    centers = project_into_box(inbox[TAG_CENTERS], lower, upper)
    inertia = dp_inertia_exact(data, centers, lower, upper)
    labels = nearest_center(data, centers) if output else None
    return Reply(
        send=inertia + private_normal(party, sigma / math.sqrt(share), 1),
        keep=keep,
        output={"labels": labels} if output else None,
    )
