"""Federated k-means: Lloyd's algorithm on per-cluster sums added up by secure aggregation.

Every Lloyd iteration needs, per cluster, the number of rows and their sum: both
are sums over the clients, so a secure sum gives the server the pooled
statistics and nothing else, and the iterations are those of centralized
k-means on the pooled rows (Lloyd, 1982; the federated baseline of NVIDIA
FLARE, TensorFlow Federated, FATE and vantage6).
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
import scipy.sparse as sp
from joblib import parallel_config
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..clusterers import nearest_center, normalized_frame, squared_distances
from ..federation import Federation, InProcessRuntime, Reply, bound_only, summand
from ..federation._inputs import MAX_MAGNITUDE, float32_input, input_form
from ..federation._policy import DEFAULT_MIN_SUM_PARTICIPANTS
from ..federation._runtime import thread_pool
from ..secure import PrivacyAccountant, PrivacyLeakWarning, SumChannel, gaussian_sigma
from ..secure._accounting import MAX_EPSILON
from ..secure._moments import moments_centered, moments_deviations, moments_raw, moments_rows
from ..secure._node_dp import charge_node, private_normal
from ..secure._sampling import (
    TAG_COMMITS,
    TAG_REVEALS,
    TAG_SAMPLE,
    check_sampled,
    public_sample,
    sampling_commit_step,
    sampling_reveal_step,
    sampling_seed,
)
from ._base import BaseFederatedClustering, CentroidPredictMixin
from ._centroid_steps import cluster_means
from ._kfed import kfed_local_centers, kfed_server_step, kfed_server_weighted_kmeans

try:  # the fused Lloyd pass runs compiled, without the GIL
    import numba
except ImportError:  # pragma: no cover - exercised only without numba
    numba = None

__all__ = ["FederatedKMeans"]

TAG_CENTERS = "centers"
TAG_RELOCATE = "relocation request"
TAG_FARTHEST = "farthest rows request"
TAG_FARTHEST_PICK = "farthest rows picked"
#: Key of a client's labels of the last Lloyd iteration in its private state.
_LABELS = "fedkmeans: labels"
_FARTHEST = "fedkmeans: farthest rows"
#: Key of a client's per-column least and greatest values (its own, kept).
_COLUMN_RANGE = "fedkmeans: column range"
#: Safety factor of every public bound: covers the rounding of the clients'
#: floating-point sums and near-ties of the nearest center (one bit of 62).
_MARGIN = 2.0


class FederatedKMeansError(RuntimeError):
    """A federated k-means fit that cannot go on (too few clients answered)."""


# --------------------------------------------------------------------------- #
# Client steps
# --------------------------------------------------------------------------- #
def _cluster_sums(values, labels, n_clusters):
    # A sparse one-hot product: O(n d) in one pass, and a fixed summation order
    # (unlike a BLAS product, whose order may depend on its threads), so every
    # runtime adds up the same floats.
    n = len(labels)
    onehot = sp.csr_matrix((np.ones(n), (labels, np.arange(n))), shape=(n_clusters, n))
    return np.asarray(onehot @ values)


def _lloyd_pass_numpy(data, centers, previous):
    """One Lloyd pass in NumPy: labels, deviation sums, counts, inertia, changed labels."""
    k = centers.shape[0]
    labels = nearest_center(data, centers)
    deviations = data - centers[labels]
    sums = _cluster_sums(deviations, labels, k)
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    inertia = np.bincount(
        labels, weights=np.einsum("ij,ij->i", deviations, deviations), minlength=k
    )
    changed = data.shape[0] if previous is None else np.count_nonzero(previous != labels)
    return labels, sums, counts, inertia, int(changed)


#: Rows scored per BLAS product in the compiled pass (scikit-learn's chunk):
#: the chunk stays in cache while its rows are labelled and added up.
_CHUNK = 256
#: Rows per block of the pass: each block adds up its own statistics, and the
#: blocks' statistics are then added in block order, so the floats do not
#: depend on how many threads share the blocks.
_BLOCK = 8 * _CHUNK
#: Rows may lie up to ``2**_HEADROOM`` times farther from the centers' midpoint
#: than the centers before the compiled pass hands over to ``nearest_center``
#: (which then scales by the rows); the same threshold as ``nearest_center``.
_HEADROOM = 500
#: Clients with fewer rows take the NumPy pass: one block's statistics are the
#: same floats either way, and a small fit does not wait seconds for the
#: compilation (the first fit of a fresh install otherwise spends them here).
_COMPILED_MIN_ROWS = _BLOCK


def _lloyd_pass_loops(
    data, centers, reference, factor, previous, labels, sums, counts, squares, first, step, check
):
    """Blocks ``first, first + step, ...`` of a Lloyd pass, fused, in ``nearest_center``'s frame.

    Rows and centers are translated to ``reference`` and scaled by the power
    of two ``factor``; a row goes to the center of least ``||c||^2/2 - x.c``
    (ties to the lowest index), scored a chunk at a time by one BLAS product.
    In the same pass, while the chunk is in cache, each row's deviation from
    its center (in the data's units, so a large offset costs no precision) is
    added to its cluster's sums and squares of its block (``sums[b]``,
    ``counts[b]``, ``squares[b]`` for block ``b`` of :data:`_BLOCK` rows), in
    row order. Returns the number of the blocks' rows whose label differs
    from ``previous`` (every row if ``previous[0] < 0``), or -1 when a
    translated row is not finite or lies beyond the headroom: the caller then
    labels the rows by ``nearest_center``, which rescales by the rows. The
    caller that knows every row is within the headroom passes ``check=False``
    (the check costs a fifth of the pass).
    """
    n, d = data.shape
    k = centers.shape[0]
    scaled = np.empty((d, k))
    half = np.zeros(k)
    for c in range(k):
        for j in range(d):
            v = (centers[c, j] - reference[j]) * factor
            scaled[j, c] = v
            half[c] += v * v
    for c in range(k):
        half[c] *= 0.5
    limit = 2.0**_HEADROOM
    rows = np.empty((_CHUNK, d))
    scores = np.empty((_CHUNK, k))
    deviation = np.empty(d)
    fresh = n > 0 and previous[0] < 0
    changed = 0
    n_blocks = (n + _BLOCK - 1) // _BLOCK
    for b in range(first, n_blocks, step):
        block_sums = sums[b]
        block_counts = counts[b]
        block_squares = squares[b]
        for start in range(b * _BLOCK, min(n, (b + 1) * _BLOCK), _CHUNK):
            m = min(_CHUNK, n - start)
            if check:
                within = True
                for i in range(m):
                    for j in range(d):
                        v = (data[start + i, j] - reference[j]) * factor
                        rows[i, j] = v
                        # False for NaN too.
                        within &= abs(v) < limit
                if not within:
                    return -1
            else:
                for i in range(m):
                    for j in range(d):
                        rows[i, j] = (data[start + i, j] - reference[j]) * factor
            if m == _CHUNK:
                np.dot(rows, scaled, scores)
            else:
                scores[:m] = np.dot(rows[:m], scaled)
            for i in range(m):
                best = 0
                low = half[0] - scores[i, 0]
                for c in range(1, k):
                    s = half[c] - scores[i, c]
                    if s < low:
                        low = s
                        best = c
                labels[start + i] = best
                if fresh or previous[start + i] != best:
                    changed += 1
                block_counts[best] += 1
                # Three loops over a buffer vectorise where one loop does not.
                for j in range(d):
                    deviation[j] = data[start + i, j] - centers[best, j]
                for j in range(d):
                    block_sums[best, j] += deviation[j]
                for j in range(d):
                    block_squares[best, j] += deviation[j] * deviation[j]
    return changed


if numba is not None:
    # nogil: clients, and the blocks of one client, run side by side on threads.
    _lloyd_pass_compiled = numba.njit(cache=True, nogil=True)(_lloyd_pass_loops)
else:  # pragma: no cover - exercised only without numba
    _lloyd_pass_compiled = None


def _run_pass(arguments, check, n_blocks, n_threads):
    """The compiled pass over every block, on up to ``n_threads`` threads."""
    n_threads = max(1, min(int(n_threads), n_blocks))
    if n_threads == 1:
        return _lloyd_pass_compiled(*arguments, 0, 1, check)
    # The calling thread takes the first share itself: a pool thread woken for
    # it would start a fraction of a millisecond late, as long as a client's pass.
    pool = thread_pool(n_threads - 1)
    others = [
        pool.submit(_lloyd_pass_compiled, *arguments, first, n_threads, check)
        for first in range(1, n_threads)
    ]
    results = [_lloyd_pass_compiled(*arguments, 0, n_threads, check)]
    results += [future.result() for future in others]
    return -1 if min(results) < 0 else sum(results)


def lloyd_pass(data, centers, previous=None, n_threads=1, column_range=None):
    """Labels and per-cluster statistics of one Lloyd iteration on a client's rows.

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_features)
    centers : ndarray of shape (n_clusters, n_features)
    previous : ndarray of shape (n_samples,) or None
        The labels of the last iteration (``None``: every row counts as changed).
    n_threads : int, default=1
        Threads sharing the blocks of rows. The statistics are added up per
        block of 2,048 rows and the blocks' in block order, so they are the
        same floats for any number of threads.
    column_range : tuple of two ndarray of shape (n_features,), default=None
        The least and greatest value of each column of ``data`` (finite),
        which a client computes once: when they show every row within the
        headroom of the centers' frame, the pass skips its per-value check.

    Returns
    -------
    labels : ndarray of shape (n_samples,)
        Nearest center of each row (ties to the lowest index), compared in the
        frame of :func:`~skfedclust.clusterers.nearest_center`; the two can
        differ only where rounding decides a near-tie.
    sums : ndarray of shape (n_clusters, n_features)
        Per cluster, the sum of its rows' deviations from its center.
    counts : ndarray of shape (n_clusters,)
    inertia : ndarray of shape (n_clusters,)
        Per cluster, the sum of its rows' squared distances to its center.
    changed : int
        Rows whose label differs from ``previous``.
    """
    data = np.ascontiguousarray(data, dtype=np.float64)
    # Writable copies of the small arguments: every read-only combination
    # would be compiled apart (seconds each).
    centers = np.array(centers, dtype=np.float64, order="C")
    n, d = data.shape
    k = centers.shape[0]
    if _lloyd_pass_compiled is not None and n >= max(_COMPILED_MIN_ROWS, 1) and k >= 2:
        # The frame of nearest_center when the rows lie within the headroom.
        reference, _ = normalized_frame(centers)
        with np.errstate(over="ignore", invalid="ignore"):
            extent = np.abs(centers - reference).max()
        exponent = int(np.frexp(extent)[1]) if np.isfinite(extent) and extent > 0 else None
        # A subnormal extent would need a factor beyond the float range.
        if exponent is not None and exponent > -1000:
            factor = math.ldexp(1.0, -exponent)
            n_blocks = -(-n // _BLOCK)
            labels = np.empty(n, dtype=np.intp)
            sums = np.zeros((n_blocks, k, d))
            counts = np.zeros((n_blocks, k), dtype=np.int64)
            squares = np.zeros((n_blocks, k, d))
            if previous is None:
                before = np.full(1, -1, dtype=np.intp)
            else:
                before = np.require(previous, dtype=np.intp, requirements=["C", "W"])
            arguments = (data, centers, reference, factor, before, labels, sums, counts, squares)
            check = column_range is None or not _within_headroom(column_range, reference, factor)
            changed = _run_pass(arguments, check, n_blocks, n_threads)
            if changed >= 0:
                return (
                    labels,
                    _add_blocks(sums),
                    counts.sum(axis=0),
                    _add_blocks(squares).sum(axis=1),
                    int(changed),
                )
    return _lloyd_pass_numpy(data, centers, previous)


def _within_headroom(column_range, reference, factor):
    """Whether rows within ``column_range`` lie within the headroom of the frame."""
    lower, upper = column_range
    with np.errstate(over="ignore", invalid="ignore"):
        extent = np.maximum(np.abs(lower - reference), np.abs(upper - reference)).max() * factor
    # Half the headroom: rounding of the translated values stays far from it.
    return bool(extent < 2.0 ** (_HEADROOM - 1))


def _add_blocks(per_block):
    """The blocks' statistics added in block order (one block: itself, bit for bit)."""
    total = per_block[0].copy()
    for block in per_block[1:]:
        total += block
    return total


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


@summand
def fedkmeans_lloyd_statistics(data, inbox, state, party):
    """Client step of one Lloyd iteration: per-cluster statistics of the client's rows.

    Each row goes to its nearest center among those the server sent. Sent:
    per cluster the sum of the rows' deviations from their center (so a
    large common offset costs no precision), the number of rows and their
    squared distances, and how many of the client's rows changed cluster
    since its last iteration (all of them the first time).
    """
    sampled = check_sampled(inbox, state, party)
    column_range = state.get(_COLUMN_RANGE)
    if column_range is None and data.shape[0]:
        column_range = (data.min(axis=0), data.max(axis=0))
    labels, sums, counts, inertia, changed = lloyd_pass(
        data,
        inbox[TAG_CENTERS],
        state.get(_LABELS),
        n_threads=party.n_threads,
        column_range=column_range,
    )
    return Reply(
        send=(sums, counts, inertia, np.array([changed], dtype=np.int64)),
        keep={_LABELS: labels, _COLUMN_RANGE: column_range, **sampled},
        # In the clear, a center the server placed to catch one row gives it
        # that row back: the node's policy searches the means for its rows.
        reveals=lambda: cluster_means(inbox[TAG_CENTERS], sums, counts),
    )


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


def fedkmeans_farthest_rows(data, inbox, state, party):
    """Client step: the rows the server picked among the client's farthest, with their clusters.

    The rows themselves leave the client (scikit-learn's rule moves an
    empty cluster onto a row); a deployed node's default policy refuses.
    """
    _check_rows_may_leave(party)
    m = int(inbox[TAG_FARTHEST_PICK])
    order = state[_FARTHEST][:m]
    return Reply(send=(data[order], state[_LABELS][order].astype(np.int64)))


def _farthest_picks(distances, *, n_empty):
    """Server step: how many of the ``n_empty`` farthest rows each client holds.

    Ties go to the later client, as within a client to the later row.
    """
    candidates = [
        (float(value), client, -rank)
        for client, values in zip(list(distances), distances.list())
        for rank, value in enumerate(np.atleast_1d(values))
    ]
    candidates.sort(reverse=True)
    picks = {}
    for _, client, _ in candidates[:n_empty]:
        picks[client] = picks.get(client, 0) + 1
    return picks


def _move_to_farthest_rows(rows, *, centers, sums, counts, empty):
    """Server step: each empty cluster becomes a far row, which leaves its cluster (as KMeans)."""
    sums, counts = np.array(sums, dtype=np.float64), np.array(counts, dtype=np.int64)
    picked = [
        (float(np.sum((row - centers[label]) ** 2)), client, -i, row, int(label))
        for client, (client_rows, labels) in zip(list(rows), rows.list())
        for i, (row, label) in enumerate(zip(client_rows, labels))
    ]
    picked.sort(key=lambda p: p[:3], reverse=True)
    new = np.array(centers, dtype=np.float64, copy=True)
    for e, (_, _, _, row, old) in zip(empty, picked):
        sums[old] -= row - centers[old]
        counts[old] -= 1
        new[e] = row
    # The relocated clusters hold no counted row: only the others are means again.
    filled = counts > 0
    new[filled] = centers[filled] + sums[filled] / counts[filled, None]
    return new


@summand
def fedkmeans_inertia(data, inbox, state, party, *, output):
    """Client step: squared distances of the rows to their nearest center, summed.

    With ``output`` the client also hands its user the labels of its rows
    (the final labelling of the fit).
    """
    centers = np.asarray(inbox[TAG_CENTERS])
    labels = nearest_center(data, centers)
    deviations = data - centers[labels]
    inertia = np.array([np.einsum("ij,ij->", deviations, deviations)])
    return Reply(send=inertia, output={"labels": labels} if output else None)


@bound_only
def fedkmeans_nearest_distances(data, inbox, state, party, *, centers):
    """Client step for bound agreement: each row's squared distance to its nearest center."""
    return Reply(send=squared_distances(data, np.asarray(centers)).min(axis=1))


@summand
def fedkmeans_score_inertia(data, inbox, state, party, *, centers):
    """Client step of ``score``: the squared distances of the rows to the model's centers."""
    centers = np.asarray(centers)
    deviations = data - centers[nearest_center(data, centers)]
    return Reply(send=np.array([np.einsum("ij,ij->", deviations, deviations)]))


# --------------------------------------------------------------------------- #
# Differentially private Lloyd (privacy="dp")
# --------------------------------------------------------------------------- #
def fedkmeans_dp_extremes(data, inbox, state, party):
    """Client step: per-feature minimum and maximum of the rows (bounds from the data)."""
    return Reply(send=(data.min(axis=0), data.max(axis=0)))


def dp_moments_exact(data, lower, upper):
    """The column sums of the rows clipped to the box and centred on its midpoint, and of their
    squares (before any noise)."""
    lower, upper = np.asarray(lower), np.asarray(upper)
    centred = np.clip(data, lower, upper) - (lower + upper) / 2
    return centred.sum(axis=0), np.einsum("ij,ij->j", centred, centred)


def dp_lloyd_exact(data, centers, lower, upper):
    """Per-cluster sums (around the box's midpoint) and counts of the clipped rows, no noise."""
    lower, upper = np.asarray(lower), np.asarray(upper)
    _, sums, counts, _, _ = lloyd_pass(np.clip(data, lower, upper), centers)
    # Deviations from the centers, moved to the midpoint: every row then adds
    # at most half the box's diagonal, whatever the centers.
    return sums + counts[:, None] * (centers - (lower + upper) / 2), counts


def dp_inertia_exact(data, centers, lower, upper):
    """The clipped rows' squared distances to their nearest center, summed (no noise)."""
    clipped = np.clip(data, np.asarray(lower), np.asarray(upper))
    deviations = clipped - centers[nearest_center(clipped, centers)]
    return np.array([np.einsum("ij,ij->", deviations, deviations)])


def _box_diagonal(lower, upper):
    return float(np.linalg.norm(np.asarray(upper, dtype=np.float64) - np.asarray(lower)))


@summand
def fedkmeans_dp_moments(
    data, inbox, state, party, *, lower, upper, sigma_sums, sigma_squares, noise_share
):
    """Client step of the private ``"random"`` start: noisy first and second moments.

    Rows are clipped to the public box ``[lower, upper]`` and centred on its
    midpoint; sent are the column sums of the centred rows and of their
    squares. ``sigma_sums`` and ``sigma_squares`` are the noise each released
    total holds, made of ``noise_share`` clients' shares: the node charges both
    releases to its own accountant (sensitivities from the box), then adds its
    share ``sigma / sqrt(noise_share)`` from its cryptographic generator.
    """
    width = np.asarray(upper, dtype=np.float64) - np.asarray(lower)
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
        noise_share,
    )
    sums, squares = dp_moments_exact(data, lower, upper)
    share = 1.0 / math.sqrt(noise_share)
    d = data.shape[1]
    return Reply(
        send=(
            sums + private_normal(party, share * sigma_sums, d),
            squares + private_normal(party, share * sigma_squares, d),
        ),
        keep=keep,
    )


@summand
def fedkmeans_dp_lloyd_statistics(data, inbox, state, party, *, lower, upper, sigma, noise_share):
    """Client step of one private Lloyd iteration: noisy per-cluster sums and counts.

    Rows are clipped to the public box, assigned to the nearest of the
    server's centers, and summed per cluster around the box's midpoint. The
    released sums hold Gaussian noise of standard deviation ``sigma``, the
    counts ``2 sigma / ||w||`` (``w`` the box's width), so the pair is one
    release of ``mu = ||w|| / sigma``: the node charges it to its own
    accountant and adds its share of both noises (``noise_share`` clients'
    shares make them up) from its cryptographic generator.
    """
    sampled = check_sampled(inbox, state, party)
    diagonal = _box_diagonal(lower, upper)
    keep = charge_node(state, party, [("cluster sums and counts", diagonal, sigma)], noise_share)
    keep.update(sampled)
    centers = np.asarray(inbox[TAG_CENTERS])
    sums, counts = dp_lloyd_exact(data, centers, lower, upper)
    share = 1.0 / math.sqrt(noise_share)
    return Reply(
        send=(
            sums + private_normal(party, share * sigma, sums.shape),
            counts + private_normal(party, share * 2.0 * sigma / diagonal, counts.shape),
        ),
        keep=keep,
    )


@summand
def fedkmeans_dp_inertia(data, inbox, state, party, *, lower, upper, sigma, noise_share, output):
    """Client step: noisy sum of the clipped rows' squared distances to the nearest center.

    The release (sensitivity ``||w||^2``) is charged to the node's own
    accountant before its share of the noise is drawn. With ``output`` the
    client also hands its user the labels of its rows (nearest center of the
    rows as they are, as ``predict`` gives).
    """
    keep = charge_node(
        state, party, [("inertia", _box_diagonal(lower, upper) ** 2, sigma)], noise_share
    )
    centers = np.asarray(inbox[TAG_CENTERS])
    inertia = dp_inertia_exact(data, centers, lower, upper)
    labels = nearest_center(data, centers) if output else None
    return Reply(
        send=inertia + private_normal(party, sigma / math.sqrt(noise_share), 1),
        keep=keep,
        output={"labels": labels} if output else None,
    )


#: Lloyd iterations of the private fit at most, and at least, under
#: Restarts of the server's weighted k-means++ on the local centers
#: (``init="k-fed-weighted"``): server work only, no message.
SERVER_RESTARTS = 10

#: ``dp_max_iter="auto"`` (the rule of Su et al. 2016, as diffprivlib uses).
_DP_ITER_RANGE = (2, 7)
#: Standard deviations of a client's noise within its fixed-point bound: the
#: bound is exceeded with probability below 1e-340.
_NOISE_HEADROOM = 40.0


def sphere_packing_centers(lower, upper, n_clusters, random_state, *, retries=100):
    """Centers spread in the box ``[lower, upper]``, chosen without looking at the data.

    The initialisation of Su et al. (2016) that diffprivlib's ``KMeans``
    uses: centers are drawn uniformly at least ``r`` inside the box and at
    least ``2 r`` from each other, starting from ``r`` half the narrowest
    width and halving ``r`` until ``retries`` draws in a row no longer fail
    to place the next center. It reads no row, so it costs no privacy.
    """
    lower = np.asarray(lower, dtype=np.float64)
    width = np.asarray(upper, dtype=np.float64) - lower
    radius = float(width.min()) / 2.0
    while radius > 0:
        centers, failures = [], 0
        while len(centers) < n_clusters and failures < retries:
            step = random_state.random_sample(len(width)) * (width - 2 * radius)
            candidate = lower + radius + step
            nearest = (
                np.sqrt(((np.array(centers) - candidate) ** 2).sum(axis=1).min()) if centers else 0
            )
            if centers and nearest < 2 * radius:
                failures += 1
                continue
            centers.append(candidate)
            failures = 0
        if len(centers) == n_clusters:
            return np.array(centers)
        radius /= 2.0
    # A box flat in some feature: uniform draws within it.
    return lower + random_state.random_sample((n_clusters, len(width))) * width


def su_iterations(epsilon, n_samples, n_features, n_clusters, rho=0.225):
    """Lloyd iterations for a private k-means at ``epsilon``: Su et al.'s rule.

    Su, Cao, Li, Bertino and Jin ("Differentially private k-means
    clustering", CODASPY 2016) estimate the budget one iteration needs,
    ``epsilon_m = sqrt(500 k^3 / n^2 (d + (4 d rho^2)^(1/3))^3)``, and run
    ``epsilon / epsilon_m`` iterations, between 2 and 7 (diffprivlib's
    ``KMeans`` uses the same rule).
    """
    k, n, d = n_clusters, max(n_samples, 1), n_features
    per_iteration = math.sqrt(500 * k**3 / n**2 * (d + (4 * d * rho**2) ** (1 / 3)) ** 3)
    low, high = _DP_ITER_RANGE
    return int(max(min(epsilon / per_iteration, high), low))


class DPPlan:
    """Noise of every release of a private federated k-means fit (replace-one neighbours).

    Rows are clipped to the public box ``[lower, upper]`` of width ``w``;
    every release is a Gaussian mechanism, and the ``compositions`` releases
    of the fit share the budget equally (each is ``mu``-GDP with the same
    ``mu``), so the fit is ``(epsilon, delta)``-DP exactly.

    - Per Lloyd iteration, the per-cluster sums of the rows centred on the
      box's midpoint, noise ``sigma``, and the counts, noise ``2 sigma /
      ||w||``: replacing a row moves a sum by at most ``||w||`` (same
      cluster, counts unchanged) or two sums by ``||w|| / 2`` each and two
      counts by one (another cluster), ``||w||^2 / (2 sigma^2) + 2 ||w||^2 /
      (4 sigma^2)``; both cases give ``mu = ||w|| / sigma``.
    - The inertia, noise ``sigma_inertia``: each row adds at most ``||w||^2``
      (the centers stay in the box).
    - With the ``"random"`` start, the column sums of the centred rows
      (sensitivity ``||w||``) and of their squares (``||w^2|| / 4``), each
      taking half of one release's ``mu^2``.
    """

    def __init__(self, lower, upper, *, epsilon, delta, n_starts, n_iter, moments):
        self.lower = np.asarray(lower, dtype=np.float64)
        self.upper = np.asarray(upper, dtype=np.float64)
        width = self.upper - self.lower
        self.diagonal = float(np.linalg.norm(width))
        self.n_iter = int(n_iter)
        self.moments = bool(moments)
        self.compositions = n_starts * (self.n_iter + 1) + int(self.moments)
        c = self.compositions
        self.sigma = gaussian_sigma(self.diagonal, epsilon, delta, c)
        self.sigma_counts = 2.0 * self.sigma / self.diagonal
        self.sigma_inertia = gaussian_sigma(self.diagonal**2, epsilon, delta, c)
        self.squares_sensitivity = float(np.linalg.norm(width**2)) / 4.0
        self.sigma_moment_sums = gaussian_sigma(self.diagonal, epsilon, delta, 2 * c)
        self.sigma_moment_squares = gaussian_sigma(
            max(self.squares_sensitivity, np.finfo(float).tiny), epsilon, delta, 2 * c
        )

    @property
    def midpoint(self):
        return (self.lower + self.upper) / 2

    def noisy_sum(self, adder, step, **public):
        """The sum of a noisy client ``step`` on rows clipped to the box."""
        return adder.sum(step, lower=self.lower, upper=self.upper, **public)

    def clip_centers(self, centers):
        """Centers back in the box (post-processing: costs no privacy)."""
        return np.clip(centers, self.lower, self.upper)

    def scales(self):
        """The standard deviations of the noise in every released sum."""
        scales = {
            "sums": self.sigma,
            "counts": self.sigma_counts,
            "inertia": self.sigma_inertia,
        }
        if self.moments:
            scales["moment sums"] = self.sigma_moment_sums
            scales["moment squares"] = self.sigma_moment_squares
        return scales


# --------------------------------------------------------------------------- #
# Server side
# --------------------------------------------------------------------------- #
def nearest_radius(centers, mean, spread):
    """A distance within which every row lies of its nearest center.

    Every row ``x`` satisfies ``|x_i - mean_i| <= spread`` (the agreed bound),
    so ``||x - c|| <= ||spread + |mean - c| ||`` for every center ``c``; the
    nearest center is no farther than the smallest of these.
    """
    gaps = spread + np.abs(np.asarray(centers) - np.asarray(mean))
    return float(np.sqrt(np.einsum("ij,ij->i", gaps, gaps)).min())


def _warn_if_fewer_clusters(n_filled, n_clusters):
    """scikit-learn's warning when the rows fill fewer clusters than asked."""
    if n_filled < n_clusters:
        warnings.warn(
            f"Number of distinct clusters ({n_filled}) found smaller than n_clusters "
            f"({n_clusters}). Possibly due to duplicate points in the clients' rows.",
            ConvergenceWarning,
            stacklevel=4,
        )


def feature_radius(centers, mean, spread, radius):
    """Per feature, a bound on ``|x_f - c_f|`` for every row ``x`` and its nearest center ``c``.

    ``|x_f - c_f| <= spread_f + |mean_f - c_f|`` for any center, and no
    more than the distance ``radius`` to the nearest center: the smaller of
    the two, so that the per-cluster sums of a narrow feature get a bound of
    their own scale.
    """
    gaps = np.asarray(spread) + np.abs(np.asarray(centers) - np.asarray(mean)).max(axis=0)
    return np.minimum(gaps, radius)


def _relocate_empty(centers, new, sums, counts, inertia, far):
    """Move each empty cluster to the mean of a donor cluster's far rows.

    ``far`` is ``(donors, far_sums, far_counts)``; the far rows leave their
    donor cluster, as scikit-learn's relocated row leaves its cluster.
    """
    empty = np.flatnonzero(counts == 0)
    donors, far_sums, far_counts = far
    for e, j, s, m in zip(empty, donors, far_sums, far_counts):
        if m == 0 or m >= counts[j]:
            continue
        new[e] = centers[j] + s / m
        new[j] = centers[j] + (sums[j] - s) / (counts[j] - m)
    return new


def _combine_extremes(received):
    """Server step: the box of the pooled rows from the clients' extremes."""
    uploads = received.list()
    lower = np.min([u[0] for u in uploads], axis=0)
    upper = np.max([u[1] for u in uploads], axis=0)
    return lower, upper


def _dp_centers(centers, sums, counts, plan, noise):
    """New centers from noisy per-cluster sums and counts, kept in the box.

    A cluster whose noisy count is below ``max(1, 3 noise)`` (``noise`` the
    standard deviation of the counts' noise) keeps its center: its mean would
    be mostly noise.
    """
    new = np.array(centers, dtype=np.float64, copy=True)
    reliable = counts >= max(1.0, 3.0 * noise)
    new[reliable] = plan.midpoint + sums[reliable] / counts[reliable, None]
    return plan.clip_centers(new)


def _relocate_unreliable(new, counts, noise, plan):
    """Move the centers of clusters lost in the noise next to the largest clusters' centers.

    A cluster whose noisy count is below ``max(1, 3 noise)`` would keep its
    center for good (an empty cluster). Each takes the place of a split of
    the cluster with the largest noisy count that is not split yet: the
    donor's new center moved by a sixteenth of the box's widest side
    divided by the number of clusters, the donor's moved back as far. Only
    released values (noisy counts, the new centers) and the public box are
    read: post-processing, at no privacy cost.

    Returns
    -------
    centers : ndarray
    relocated : int
        How many centers moved.
    """
    unreliable = np.flatnonzero(counts < max(1.0, 3.0 * noise))
    if not unreliable.size:
        return new, 0
    widest = int(np.argmax(plan.upper - plan.lower))
    step = np.zeros(new.shape[1])
    step[widest] = (plan.upper[widest] - plan.lower[widest]) / (16.0 * len(new))
    donors = [int(j) for j in np.argsort(-counts, kind="stable") if j not in set(unreliable)]
    out = new.copy()
    for empty, donor in zip(unreliable, donors):
        out[empty] = new[donor] + step
        out[donor] = new[donor] - step
    return plan.clip_centers(out), int(min(len(unreliable), len(donors)))


def _donors(counts, inertia):
    """Donor clusters for the empty ones: the largest inertia first, two rows at least."""
    n_empty = int(np.count_nonzero(counts == 0))
    order = np.argsort(-inertia, kind="stable")
    able = [int(j) for j in order if counts[j] >= 2 and inertia[j] > 0]
    return able[:n_empty]


# --------------------------------------------------------------------------- #
# Estimator
# --------------------------------------------------------------------------- #
class FederatedKMeans(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, CentroidPredictMixin, BaseFederatedClustering
):
    """Federated k-means: Lloyd's algorithm on securely aggregated cluster sums.

    Every iteration the server sends the centers; each client assigns its
    rows to the nearest center and contributes, per cluster, the sum of the
    rows' deviations from the center, their number and their squared
    distances; a secure sum (:class:`~skfedclust.secure.SecureAggregator`)
    gives the server the totals and nothing else, from which it computes the
    new centers. Given the same initial centers the iterations are those of
    :class:`sklearn.cluster.KMeans` (``algorithm="lloyd"``) on the pooled
    rows, with the same stopping rule.

    Read more in the :ref:`User Guide <fedkmeans>`.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    init : {"auto", "k-fed", "random", "sphere-packing"}, callable or array-like of \
            shape (n_clusters, n_features), default="auto"
        Initial centers. ``"auto"``: ``"k-fed-weighted"`` in the clear,
        ``"sphere-packing"`` under ``privacy="dp"`` (the starts that measured
        best, see ``benchmarks/results/fedkmeans_defaults.md`` and
        ``benchmarks/results/dp_fedkmeans.md``). ``"k-fed-weighted"``: every
        client uploads the centers of a local k-means and their cluster sizes;
        the server runs k-means++ with 10 restarts on them, each center
        weighted by its size. ``"k-fed"``: the one-shot k-FED centers (the
        local centers without sizes, clustered by k-FED's server step: a seed
        client's centers, farthest points, Lloyd; see
        :class:`~skfedclust.KFed`); its restarts differ in the seed client,
        so ``n_init`` gives at most one start per client. ``"random"``: centers drawn from
        a Gaussian with the securely aggregated mean and per-feature variance
        of the pooled rows (not scikit-learn's ``"random"``, which picks rows);
        under ``privacy="dp"`` from noisy moments, at a share of the budget.
        ``"sphere-packing"``: centers spread in a box without reading a row
        (Su et al., 2016, as diffprivlib's ``KMeans``); the box is ``bounds``
        under ``privacy="dp"`` (no privacy cost: the start to use there),
        else two standard deviations around the pooled mean. An array: these
        centers. A callable: called as scikit-learn's ``KMeans`` calls it,
        ``init(X, n_clusters, random_state)``, on each client's own rows
        (in a simulation), the local centers (with their sizes on the
        client's rows) aggregated as ``"k-fed-weighted"``'s. Under
        ``privacy="dp"`` a cluster whose noisy count is lost in
        the noise is moved next to the largest cluster's center (a split,
        computed from released values only), with a ``ConvergenceWarning`` if
        that happens in the last iteration.
    n_init : int, default=1
        Restarts (server seeds of the weighted k-means++, k-FED seed
        clients, Gaussian draws or packings), each a federated Lloyd run from
        its start; the fit of lowest federated inertia is kept (under ``privacy="dp"``
        each restart takes its share of the budget). An array ``init`` runs once.
    max_iter : int, default=300
        Lloyd iterations at most.
    tol : float, default=1e-4
        Stop when the squared center shift of an iteration is at most ``tol``
        times the mean per-feature variance of the pooled rows (from secure
        moments), as scikit-learn does; Lloyd also stops when no row changes
        cluster.
    empty_clusters : {"far-rows", "farthest-row"}, default="far-rows"
        Where an empty cluster goes (without DP). ``"far-rows"``: to the mean
        of the far rows of the cluster with the largest inertia, through a
        secure sum (no row leaves a client; the Notes). ``"farthest-row"``:
        scikit-learn's rule, which moves it to the row farthest from its
        center: every client sends its largest distances and the client of
        the farthest row sends that row, so the result equals
        :class:`~sklearn.cluster.KMeans`' from the same start. A deployed
        node's default policy refuses to send the row (``refuse-raw-rows``).
    secure_aggregation : bool, default=True
        Add the clients' statistics by secure aggregation (the server learns
        only their totals). ``False`` sends every client's statistics to the
        server in the clear, for comparison.
    client_fraction : float in (0, 1], default=1.0
        Fraction of the clients sampled for each Lloyd iteration; below 1 an
        iteration uses the sampled clients' rows only (a stochastic variant,
        like mini-batch k-means). The samples are drawn from nonces the
        clients commit to and then reveal, once per fit (two rounds), so that
        the server cannot choose whom a sum adds; each sampled client checks
        it was drawn.
    min_clients : int, default=None
        Fewest clients whose statistics must reach a sum; fewer raises
        ``FederatedKMeansError``. ``None`` asks for a majority of the
        clients taking part.
    privacy : {None, "dp"}, default=None
        ``"dp"``: differentially private Lloyd. Every iteration each client
        clips its rows to ``bounds`` and adds Gaussian noise from its private
        generator to its per-cluster sums and counts before the secure sum;
        the fit is ``(epsilon, delta)``-differentially private for data sets
        that differ in one replaced row, with exact accounting over the
        iterations (see Notes and the :ref:`Privacy <privacy>` page).
        Needs ``init="sphere-packing"`` (bounds that fit the data closely),
        ``"random"`` (a loose box) or an array: the k-FED start uploads local
        centers, which no noise covers.
    epsilon : float, default=1.0
        Privacy budget of the whole fit under ``privacy="dp"`` (> 0).
    delta : float, default=1e-5
        The ``delta`` of the guarantee under ``privacy="dp"``, in (0, 1).
    bounds : tuple (lower, upper) or None, default=None
        Public box of the rows under ``privacy="dp"``: numbers or arrays of
        shape (n_features,); rows are clipped to it, and the noise grows with
        its diagonal. ``None`` takes the box from the data (each client
        sends its extremes) with a
        :class:`~skfedclust.secure.PrivacyLeakWarning`.
    dp_max_iter : int or "auto", default="auto"
        Lloyd iterations under ``privacy="dp"`` (``max_iter`` is not used
        there): the budget is split over them in advance. ``"auto"``: the
        rule of Su et al. (2016), between 2 and 7 iterations, more for a
        larger budget or more rows per cluster, as diffprivlib's ``KMeans``.
    partition : int, partition specification or None, default=None
        How to simulate clients from a pooled ``X``; ``None`` gives three IID
        clients.
    n_jobs : int, default=None
        Number of clients run side by side on threads (joblib's
        ``n_jobs``). With ``None`` the clients run one after another and
        each client's Lloyd pass shares its blocks of rows among the cores
        OpenMP would use; the result is the same for every ``n_jobs``.
    random_state : int, RandomState instance or None, default=None
        Seeds the partition, the k-FED local k-means, the random centers, the
        client sampling and the secure-sum graph (all public), and, in a
        simulation, the parties' private masks.
    verbose : int, default=0
        Print progress per protocol stage.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Centers.
    labels_ : ndarray of shape (n_samples,)
        Nearest-center label of each input row (each client's own output).
    inertia_ : float
        Sum of the squared distances of the rows to their center (a secure sum).
    n_iter_ : int
        Lloyd iterations of the kept run.
    n_clients_ : int
        Number of clients.
    client_sizes_ : ndarray of shape (n_clients,)
        Rows held by each client.
    communication_ : dict
        Rounds and bytes, secure-sum set-up included; see :class:`~skfedclust.federation.Ledger`.
    n_features_in_ : int
        Number of features seen during fit.
    privacy_spent_ : tuple of (float, float) or None
        ``(epsilon, delta)`` spent under ``privacy="dp"``, read from
        ``privacy_accountant_``; None otherwise, and None with ``bounds=None``
        (the box read from the data is outside the guarantee).
    privacy_accountant_ : PrivacyAccountant or None
        Every release of the private fit, charged before it was made.
    noise_scales_ : dict
        Standard deviations of the noise in each released sum under
        ``privacy="dp"`` (``"sums"``, ``"counts"``, ``"inertia"``, and with
        the random start ``"moment sums"``, ``"moment squares"``); empty
        otherwise.
    bounds_ : tuple of ndarray
        The box the rows were clipped to (``privacy="dp"`` only).

    See Also
    --------
    skfedclust.KFed : One-shot federated k-means (the default initialisation).
    sklearn.cluster.KMeans : The centralized algorithm this one reproduces.

    Notes
    -----
    **What the server learns.** With secure aggregation: per iteration the
    number of rows of every cluster, the sum of their deviations from the
    center and of their squared distances, and how many rows changed cluster,
    all totals over the clients; once per fit the pooled mean and per-feature
    variance, and two histograms of binary exponents (how many clients have
    their largest value, and their largest deviation from the mean, in each
    power-of-two range) that fix the public bounds of the fixed-point sums.
    The centers are means of clusters: a cluster of one row has that row as
    its center, as in any k-means. With ``init="k-fed-weighted"`` (the default
    in the clear) the server also receives each client's local centers and
    their cluster sizes, with ``init="k-fed"`` the local centers (the k-FED
    upload): means of local clusters. With ``secure_aggregation=False`` every client's
    statistics reach the server.

    **Bounds.** Fixed point needs a public bound on each client's entries.
    The clients agree once per fit, per feature, on powers of two ``D_i``
    above every ``|x_i - m_i|`` (``m`` the securely aggregated mean). Every
    row then lies within ``R = min_c ||D + |m - c| ||`` of its nearest
    center, and within ``R_i = min(R, D_i + max_c |m_i - c_i|)`` of it in
    feature ``i``, so a client of ``n_c`` rows has per-cluster sums below
    ``n_c R_i`` in feature ``i`` and squared distances below ``n_c R^2`` in
    absolute value; the bounds are twice these. Features of any mix of scales
    keep their digits. A client whose values exceed them refuses to upload.

    **Empty clusters.** scikit-learn moves an empty cluster to the row
    farthest from its center, which would send that row to the server. Here
    an empty cluster goes to the mean of the rows of the cluster with the
    largest inertia that lie farther from its center than its mean squared
    distance, which leave that cluster (one more secure sum, only in the
    iterations that have empty clusters; further empty clusters take the next
    clusters by inertia). In an iteration with sampled or dropped clients an
    empty cluster keeps its center. This private rule can differ from
    KMeans' (far rows on opposite sides average back to the donor's
    center); ``empty_clusters="farthest-row"`` applies scikit-learn's rule
    exactly, at the price of the farthest row leaving its client.

    **Dropouts.** A client that drops during a sum is left out of it; the
    iteration uses the others' rows. Strict convergence (no row changed
    cluster) is only declared in iterations every client answered.

    **Differential privacy** (``privacy="dp"``). The server learns noisy
    sums only: per iteration the per-cluster sums of the clipped rows
    (centred on the box's midpoint) with noise ``sigma`` per entry and the
    counts with noise ``2 sigma / ||w||`` (``w`` the box's widths); at the
    end a noisy inertia; with ``init="random"`` once noisy column sums and
    sums of squares. Replacing one row moves the sums and counts by a
    Gaussian sensitivity of ``||w|| / sigma`` whichever clusters it leaves
    and joins, so each iteration is ``mu``-GDP, and the fit composes exactly
    (:func:`~skfedclust.secure.gaussian_sigma` splits ``(epsilon, delta)``
    equally over its releases). The number of rows is public (the runtime
    reports each client's size), which is why the relation is replace-one.
    Each client adds ``1 / t`` of the noise variance, ``t`` the fewest
    clients a sum accepts (``min_clients``), so a sum that is released holds
    at least the whole noise, and the guarantee holds against the server
    colluding with all but ``t`` of the clients that answered; without
    secure aggregation each client adds the whole noise to what it sends
    (its upload is then private on its own). A cluster whose noisy count is
    below ``max(1, 3 x`` its noise) keeps its center; centers are clipped to
    the box. The guarantee is that of the real-valued Gaussian mechanism:
    the fixed-point rounding of the secure sum and floating point are not
    covered by the proof. ``labels_`` are each client's own output;
    ``score`` on new data is an exact secure sum, outside the budget.

    References
    ----------
    .. [1] S. P. Lloyd, "Least squares quantization in PCM", IEEE Transactions
       on Information Theory, 1982.
    .. [2] K. Bonawitz et al., "Practical secure aggregation for
       privacy-preserving machine learning", ACM CCS 2017.
    .. [3] D. K. Dennis, T. Li and V. Smith, "Heterogeneity for the win:
       one-shot federated clustering", ICML 2021.
    .. [4] D. Su, J. Cao, N. Li, E. Bertino and H. Jin, "Differentially
       private k-means clustering", CODASPY 2016.
    .. [5] J. Dong, A. Roth and W. J. Su, "Gaussian differential privacy",
       JRSS-B 2022.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfedclust import FederatedKMeans
    >>> X, _ = make_blobs(300, centers=3, random_state=0)
    >>> km = FederatedKMeans(n_clusters=3, random_state=0).fit([X[:100], X[100:200], X[200:]])
    >>> km.cluster_centers_.shape
    (3, 2)

    Differentially private, with public bounds:

    >>> dp = FederatedKMeans(
    ...     n_clusters=3, init="sphere-packing", privacy="dp", epsilon=5.0,
    ...     bounds=(-15.0, 15.0), random_state=0,
    ... ).fit([X[:100], X[100:200], X[200:]])
    >>> epsilon, delta = dp.privacy_spent_
    >>> round(epsilon, 6), delta
    (5.0, 1e-05)
    """

    #: Its k-FED starts ("k-fed-weighted", "k-fed") run k-FED's local step on the nodes.
    _client_step_modules = ("skfedclust.methods._kfed",)

    _parameter_constraints: dict = {
        **BaseFederatedClustering._parameter_constraints,
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "init": [
            StrOptions({"auto", "k-fed", "k-fed-weighted", "random", "sphere-packing"}),
            "array-like",
            callable,
        ],
        "n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "empty_clusters": [StrOptions({"far-rows", "farthest-row"})],
        "secure_aggregation": ["boolean"],
        "client_fraction": [Interval(numbers.Real, 0, 1, closed="right")],
        "min_clients": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "privacy": [StrOptions({"dp"}), None],
        "epsilon": [Interval(numbers.Real, 0, MAX_EPSILON, closed="right")],
        "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
        "bounds": [tuple, list, None],
        "dp_max_iter": [StrOptions({"auto"}), Interval(numbers.Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        init="auto",
        n_init=1,
        max_iter=300,
        tol=1e-4,
        empty_clusters="far-rows",
        secure_aggregation=True,
        client_fraction=1.0,
        min_clients=None,
        privacy=None,
        epsilon=1.0,
        delta=1e-5,
        bounds=None,
        dp_max_iter="auto",
        partition=None,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.empty_clusters = empty_clusters
        self.secure_aggregation = secure_aggregation
        self.client_fraction = client_fraction
        self.min_clients = min_clients
        self.privacy = privacy
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.dp_max_iter = dp_max_iter
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------ protocol
    def _check_survivors(self, tag, participants, survivors):
        needed = len(participants) // 2 + 1 if self.min_clients is None else self.min_clients
        if len(survivors) < needed:
            raise FederatedKMeansError(
                f"only {len(survivors)} of the {len(participants)} clients taking part in "
                f"{tag!r} answered; min_clients={self.min_clients} needs {needed}"
            )

    def _agree_sampling(self, runtime, active, horizon):
        """The seed of the fit's client samples, from the clients' commitments and nonces.

        Only when the fit samples clients: each active client commits to a
        nonce of its own, sees every commitment, then reveals it; the samples
        are drawn from all the nonces (:mod:`skfedclust.secure._sampling`),
        so the server cannot choose whom a sum adds.
        """
        self._sampling = None
        if self.client_fraction >= 1.0:
            return
        runtime.stage("client sampling: every client commits to a nonce, then reveals it")
        slots = sorted(int(c) for c in active)
        commitments = runtime.run(
            sampling_commit_step, tag=TAG_COMMITS, clients=slots, horizon=horizon
        )
        runtime.broadcast(
            {"slots": np.array(slots), "commitments": np.stack([commitments[c] for c in slots])},
            tag=TAG_COMMITS,
            clients=slots,
        )
        nonces = runtime.run(sampling_reveal_step, tag=TAG_REVEALS, clients=slots)
        nonces = np.stack([nonces[c] for c in slots])
        self._sampling = {"seed": sampling_seed(slots, nonces), "nonces": nonces, "t": 0}

    def _sample(self, runtime, active):
        """The clients of the next iteration, announced to them with the centers."""
        if self._sampling is None:
            return list(active)
        n = max(math.ceil(self.client_fraction * len(active)), self.min_clients or 1)
        n = min(n, len(active))
        self._sampling["t"] += 1
        t = self._sampling["t"]
        participants = public_sample(self._sampling["seed"], t, active, n)
        runtime.broadcast(
            {
                "nonces": self._sampling["nonces"],
                "iteration": t,
                "active": np.array(sorted(active)),
                "participants": np.array(participants),
            },
            tag=TAG_SAMPLE,
            clients=participants,
        )
        return participants

    def _max_size(self, runtime, clients):
        return float(np.max(np.asarray(runtime.client_sizes)[clients]))

    def _moments(self, runtime, adder, clients):
        """Mean, per-feature variance and deviation bound of the pooled rows (secure sums)."""
        n_c = self._max_size(runtime, clients)
        raw = adder.bound(moments_rows, tag="bound on the rows", clients=clients)
        bounds = None if raw is None else [_MARGIN * n_c * raw, None]
        (sums, count), survivors = adder.sum(
            moments_raw, tag="sums and counts", bounds=bounds, clients=clients
        )
        self._check_survivors("sums and counts", clients, survivors)
        n = int(count[0])
        rough = sums / n
        spread = adder.bound(
            moments_deviations, tag="bound on the deviations", clients=survivors, mean=rough
        )
        # One bound per feature: a feature 1e12 times narrower than another
        # keeps its digits in the fixed-point sums (one bound for all would
        # round its centers to a step set by the widest feature).
        spread = adder.column_bounds(
            moments_deviations,
            tag="bounds on the deviations per feature",
            bound=spread,
            clients=survivors,
            mean=rough,
        )
        bounds = None if spread is None else [_MARGIN * n_c * spread, _MARGIN * n_c * spread**2]
        (first, second), survivors2 = adder.sum(
            moments_centered,
            tag="centered moments",
            bounds=bounds,
            clients=survivors,
            mean=rough,
        )
        self._check_survivors("centered moments", survivors, survivors2)
        shift = first / n
        variance = np.maximum(second / n - shift**2, 0.0)
        return rough + shift, variance, rough, spread, survivors2

    def _initial_centers(self, runtime, adder, active, mean, variance, random_state):
        k = self.n_clusters
        if isinstance(self.init, str) and self.init == "sphere-packing":
            # Without privacy the box is two standard deviations around the
            # pooled mean (from the secure moments).
            half = 2.0 * np.sqrt(variance)
            return [
                sphere_packing_centers(mean - half, mean + half, k, random_state)
                for _ in range(self.n_init)
            ]
        if isinstance(self.init, str) and self.init == "random":
            return [
                mean + np.sqrt(variance) * random_state.standard_normal((k, len(mean)))
                for _ in range(self.n_init)
            ]
        if isinstance(self.init, str) and self.init == "k-fed":
            uploads = self._local_centers(runtime, active, send_sizes=False)
            # k-FED's restarts differ in the seed client only: distinct ones, in
            # a random order (at most one start per client).
            order = random_state.permutation(len(uploads))[: self.n_init]
            starts = []
            for seed_client in order:
                runtime.stage("server step: k-FED aggregation of the local centers")
                starts.append(
                    runtime.server(
                        kfed_server_step,
                        uploads,
                        n_clusters=k,
                        seed_client=int(seed_client),
                        n_lloyd_steps=None,
                        weighted=False,
                        max_iter=self.max_iter,
                    )
                )
            return starts
        if isinstance(self.init, str) or callable(self.init):
            # "k-fed-weighted" ("auto" in the clear) and a callable init.
            uploads = self._local_centers(runtime, active, send_sizes=True)
            starts = []
            for _ in range(self.n_init):
                runtime.stage("server step: weighted k-means++ on the local centers")
                starts.append(
                    runtime.server(
                        kfed_server_weighted_kmeans,
                        uploads,
                        n_clusters=k,
                        n_init=SERVER_RESTARTS,
                        seed=int(random_state.randint(np.iinfo(np.int32).max)),
                        max_iter=self.max_iter,
                    )
                )
            return starts
        return [self._array_init(runtime)]

    def _local_centers(self, runtime, active, send_sizes):
        """Every client's local centers (callable init or k-means), with their sizes or not."""
        k = self.n_clusters
        if callable(self.init):
            runtime.stage("client step: the callable init on each client's rows")
            return runtime.run(
                fedkmeans_callable_local_centers,
                tag="local centers",
                clients=active,
                init=self.init,
                n_clusters=k,
            )
        runtime.stage("client step: k-means on each client (k-FED initialisation)")
        return runtime.run(
            kfed_local_centers,
            tag="local centers",
            clients=active,
            n_clusters=k,
            solver="kmeans",
            n_init=1,
            max_iter=self.max_iter,
            send_sizes=send_sizes,
        )

    def _array_init(self, runtime):
        k = self.n_clusters
        centers = np.array(self.init, dtype=np.float64)
        if centers.shape != (k, runtime.n_features):
            raise ValueError(
                f"init has shape {centers.shape}; expected (n_clusters, n_features) = "
                f"({k}, {runtime.n_features})"
            )
        if not np.all(np.isfinite(centers)):
            raise ValueError("init holds values that are not finite")
        if self.n_init != 1:
            warnings.warn(
                f"an array init gives one start: n_init={self.n_init} runs once",
                RuntimeWarning,
                stacklevel=7,
            )
        return centers

    def _lloyd(self, runtime, adder, centers, active, rough, spread, tol, random_state):
        """One run of federated Lloyd from ``centers``: centers, iterations."""
        n_iter = 0
        visited = set()
        for i in range(self.max_iter):
            participants = self._sample(runtime, active)
            n_c = self._max_size(runtime, participants)
            runtime.broadcast(centers, tag=TAG_CENTERS, clients=participants)
            bounds = None
            if spread is not None:
                radius = nearest_radius(centers, rough, spread)
                per_feature = feature_radius(centers, rough, spread, radius)
                bounds = [_MARGIN * n_c * per_feature, None, _MARGIN * n_c * radius**2, None]
            runtime.stage(f"iteration {i + 1}: client step, per-cluster statistics")
            (sums, counts, inertia, changed), survivors = adder.sum(
                fedkmeans_lloyd_statistics,
                tag="cluster statistics",
                bounds=bounds,
                clients=participants,
            )
            self._check_survivors("cluster statistics", participants, survivors)
            n_iter = i + 1
            runtime.stage(f"iteration {i + 1}: server step, new centers")
            filled = counts > 0
            new = centers.copy()
            new[filled] = centers[filled] + sums[filled] / counts[filled, None]
            everyone = survivors == list(active)
            if everyone and not filled.all():
                new = self._relocate(
                    runtime, adder, centers, new, sums, counts, inertia, survivors, bounds
                )
                # A relocated empty cluster holds rows again.
                filled = filled | np.any(new != centers, axis=1)
            self._n_filled = int(filled.sum())
            if everyone and int(changed[0]) == 0:
                centers = new
                break
            shift = float(((new - centers) ** 2).sum())
            visited.add(centers.tobytes())
            centers = new
            if shift <= tol:
                break
            if self.secure_aggregation and centers.tobytes() in visited:
                # With client sampling the centers can return exactly to an
                # earlier state (a fixed point of a sample drawn again): the
                # iteration cycles, and nodes refuse a second sum of the same
                # statistic over other clients (it would give away the difference).
                break
        return centers, n_iter

    def _relocate(self, runtime, adder, centers, new, sums, counts, inertia, clients, bounds):
        if self.empty_clusters == "farthest-row":
            return self._relocate_to_farthest_rows(runtime, centers, sums, counts, clients)
        donors = _donors(counts, inertia)
        if not donors:
            return new
        runtime.stage(f"server step: {len(donors)} empty cluster(s) take far rows of others")
        runtime.broadcast(
            {
                "donors": np.array(donors, dtype=np.int64),
                "centers": centers[donors],
                "thresholds": inertia[donors] / counts[donors],
            },
            tag=TAG_RELOCATE,
            clients=clients,
        )
        (far_sums, far_counts), survivors = adder.sum(
            fedkmeans_far_rows,
            tag="far rows of the donor clusters",
            bounds=None if bounds is None else [bounds[0], None],
            clients=clients,
        )
        if survivors != list(clients):
            return new
        return _relocate_empty(centers, new, sums, counts, inertia, (donors, far_sums, far_counts))

    def _relocate_to_farthest_rows(self, runtime, centers, sums, counts, clients):
        """scikit-learn's rule: each empty cluster takes the next farthest row of the pooled rows.

        Two exchanges, only in iterations with empty clusters: every client
        sends its ``n_empty`` largest squared distances to their centers; the
        clients of the ``n_empty`` largest send those rows with their clusters.
        """
        empty = np.flatnonzero(counts == 0)
        runtime.stage(f"server step: {len(empty)} empty cluster(s) take the farthest rows")
        runtime.broadcast(
            {"n_empty": len(empty), "centers": centers}, tag=TAG_FARTHEST, clients=clients
        )
        distances = runtime.run(
            fedkmeans_largest_distances, tag="largest distances", clients=clients
        )
        picks = runtime.server(_farthest_picks, distances, n_empty=len(empty))
        chosen = sorted(picks)
        runtime.send({c: picks[c] for c in chosen}, tag=TAG_FARTHEST_PICK)
        rows = runtime.run(fedkmeans_farthest_rows, tag="farthest rows", clients=chosen)
        return runtime.server(
            _move_to_farthest_rows, rows, centers=centers, sums=sums, counts=counts, empty=empty
        )

    def _final_inertia(self, runtime, adder, centers, active, rough, spread, output):
        runtime.broadcast(centers, tag=TAG_CENTERS, clients=active)
        bounds = None
        if spread is not None:
            radius = nearest_radius(centers, rough, spread)
            bounds = [_MARGIN * self._max_size(runtime, active) * radius**2]
        runtime.stage("client step: inertia" + (" and labels" if output else ""))
        total, survivors = adder.sum(
            fedkmeans_inertia, tag="inertia", bounds=bounds, clients=active, output=output
        )
        self._check_survivors("inertia", active, survivors)
        return float(total[0])

    def _run_protocol(self, runtime, random_state):
        # Client steps spend their time in the compiled Lloyd pass, which
        # releases the GIL: threads run clients side by side without copying
        # their rows to worker processes at every iteration. A backend the
        # user chose (joblib.parallel_config) still wins.
        with parallel_config(prefer="threads"):
            try:
                if self.privacy == "dp":
                    self._dp_protocol(runtime, random_state)
                else:
                    self.privacy_spent_ = self.privacy_accountant_ = None
                    self.noise_scales_ = {}
                    self._protocol(runtime, random_state)
            finally:
                # The sampling seed and nonces are the fit's, not the model's.
                self.__dict__.pop("_sampling", None)

    def _check_min_clients(self, runtime):
        if self.min_clients is not None and self.min_clients > runtime.n_clients:
            raise ValueError(
                f"min_clients={self.min_clients} but there are {runtime.n_clients} clients"
            )
        sampled = max(math.ceil(self.client_fraction * runtime.n_clients), self.min_clients or 1)
        if self.secure_aggregation and min(sampled, runtime.n_clients) < (
            DEFAULT_MIN_SUM_PARTICIPANTS
        ):
            # Caught here, before any exchange: every node would refuse these
            # sums (a sum of two tells each client the other's vector).
            if sampled >= runtime.n_clients:
                raise ValueError(
                    f"secure sums need at least {DEFAULT_MIN_SUM_PARTICIPANTS} clients (nodes "
                    f"refuse smaller ones); this federation has {runtime.n_clients}: use more "
                    "clients, or secure_aggregation=False"
                )
            raise ValueError(
                f"client_fraction={self.client_fraction} of {runtime.n_clients} clients takes "
                f"{min(sampled, runtime.n_clients)} clients into each secure sum; nodes add "
                f"at least {DEFAULT_MIN_SUM_PARTICIPANTS}: raise client_fraction or "
                "min_clients, or use more clients"
            )

    def _sum_channel(self, runtime, random_state):
        """The fit's sums; its graph's public seed is the next draw of ``random_state``."""
        # A sampled client needs sampled neighbours to mask with: with sampling
        # the secure-sum graph is complete.
        degree = runtime.n_clients - 1 if self.client_fraction < 1.0 else None
        return SumChannel(
            runtime,
            secure=self.secure_aggregation,
            seed=int(random_state.randint(np.iinfo(np.int32).max)),
            degree=degree,
        )

    def _protocol(self, runtime, random_state):
        everyone = list(range(runtime.n_clients))
        self._check_min_clients(runtime)
        if callable(self.init) and not isinstance(runtime, InProcessRuntime):
            # Before any exchange: a deployed node runs only the package's steps.
            raise ValueError(
                "a callable init runs on every client's rows: a simulation can hand it to "
                "the simulated clients, a deployed node runs only the package's client "
                "steps; pass a string or an array of centers"
            )
        adder = self._sum_channel(runtime, random_state)
        runtime.stage("client step: secure moments of the pooled rows")
        mean, variance, rough, spread, active = self._moments(runtime, adder, everyone)
        # scikit-learn's tolerance: tol times the mean per-feature variance.
        tol = float(np.mean(variance)) * self.tol
        starts = self._initial_centers(runtime, adder, active, mean, variance, random_state)
        self._agree_sampling(runtime, active, self.max_iter * len(starts))
        best = None
        for r, start in enumerate(starts):
            centers, n_iter = self._lloyd(
                runtime,
                adder,
                np.array(start, dtype=np.float64),
                active,
                rough,
                spread,
                tol,
                random_state,
            )
            inertia = self._final_inertia(
                runtime, adder, centers, active, rough, spread, output=len(starts) == 1
            )
            if best is None or inertia < best[0]:
                best = (inertia, centers, n_iter, r, self.__dict__.pop("_n_filled", len(centers)))
        self.inertia_, self.cluster_centers_, self.n_iter_, _, n_filled = best
        _warn_if_fewer_clusters(n_filled, self.n_clusters)
        if len(starts) > 1:
            runtime.broadcast(self.cluster_centers_, tag=TAG_CENTERS, clients=active)
            runtime.stage("client step: nearest-center labels")
            runtime.run(fedkmeans_final_labels, tag="labels", clients=active)

    # ------------------------------------------------------------ private fit
    def _dp_bounds(self, runtime, clients):
        """The public box of the private fit: ``bounds``, or the data's (with a warning)."""
        d = runtime.n_features
        if self.bounds is None:
            warnings.warn(
                "privacy='dp' without bounds: each client sends its per-feature minimum and "
                "maximum, which the (epsilon, delta) guarantee does not cover (privacy_spent_ "
                "is None); pass public bounds=(lower, upper) to keep the data out of them",
                PrivacyLeakWarning,
                stacklevel=6,
            )
            runtime.stage("client step: per-feature extremes (bounds from the data)")
            received = runtime.run(fedkmeans_dp_extremes, tag="data bounds", clients=clients)
            lower, upper = runtime.server(_combine_extremes, received)
        else:
            if not isinstance(self.bounds, (tuple, list)) or len(self.bounds) != 2:
                raise ValueError(
                    "bounds must be a pair (lower, upper) of numbers or arrays of shape "
                    f"(n_features,), got {self.bounds!r}"
                )
            try:
                lower, upper = (
                    np.broadcast_to(np.asarray(b, dtype=np.float64), (d,)).copy()
                    for b in self.bounds
                )
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"bounds must be a pair (lower, upper) of numbers or arrays of shape "
                    f"({d},): {exc}"
                ) from None
        if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
            raise ValueError("bounds must be finite")
        if max(np.abs(lower).max(), np.abs(upper).max()) > MAX_MAGNITUDE:
            raise ValueError(
                f"bounds reach beyond {MAX_MAGNITUDE:.0e}, where the squared distances and the "
                "noise of the private sums overflow float64: rescale the data and the bounds"
            )
        if np.any(lower > upper):
            raise ValueError("bounds: every lower bound must be at most its upper bound")
        if not np.any(upper > lower):
            raise ValueError("bounds: the box has no width (every lower bound equals its upper)")
        return lower, upper

    def _dp_n_iter(self, runtime):
        if self.dp_max_iter != "auto":
            return int(self.dp_max_iter)
        # Under replace-one neighbours the number of rows is public.
        n = int(np.sum(runtime.client_sizes))
        return su_iterations(self.epsilon, n, runtime.n_features, self.n_clusters)

    def _noise_share(self, participants):
        """How many clients' shares make up the noise of a sum (each adds ``1 / t`` of it)."""
        if not self.secure_aggregation:
            # Each client's upload reaches the server: each carries the whole noise.
            return 1
        needed = len(participants) // 2 + 1 if self.min_clients is None else self.min_clients
        return int(min(needed, len(participants)))

    def _noise_factor(self, participants):
        """A client's share of the noise's standard deviation, ``1 / sqrt(t)``."""
        return 1.0 / math.sqrt(self._noise_share(participants))

    def _dp_protocol(self, runtime, random_state):
        everyone = list(range(runtime.n_clients))
        self._check_min_clients(runtime)
        if callable(self.init):
            raise ValueError(
                "a callable init computes each client's local centers from its rows, which "
                "no differential-privacy guarantee covers; with privacy='dp' use "
                "init='sphere-packing', init='random' or an array of public centers"
            )
        if isinstance(self.init, str) and self.init in ("k-fed", "k-fed-weighted"):
            raise ValueError(
                f"init={self.init!r} uploads each client's local centers, which no differential-"
                "privacy guarantee covers; with privacy='dp' use init='sphere-packing' (centers "
                "spread in the bounds, no privacy cost), init='random' (drawn from private "
                "moments) or an array of public centers"
            )
        lower, upper = self._dp_bounds(runtime, everyone)
        random_start = isinstance(self.init, str) and self.init == "random"
        n_starts = self.n_init if isinstance(self.init, str) else 1
        plan = DPPlan(
            lower,
            upper,
            epsilon=self.epsilon,
            delta=self.delta,
            n_starts=n_starts,
            n_iter=self._dp_n_iter(runtime),
            moments=random_start,
        )
        accountant = PrivacyAccountant(self.epsilon, self.delta, "replace-one")
        self.bounds_ = (lower, upper)
        self.privacy_accountant_ = accountant
        self.noise_scales_ = plan.scales()
        adder = self._sum_channel(runtime, random_state)
        self._agree_sampling(runtime, everyone, plan.n_iter * n_starts)
        if adder.secure:
            adder.aggregator.setup()
        if random_start:
            starts = self._dp_random_starts(
                runtime, adder, plan, accountant, everyone, random_state
            )
        elif isinstance(self.init, str):  # "sphere-packing"
            starts = [
                sphere_packing_centers(lower, upper, self.n_clusters, random_state)
                for _ in range(self.n_init)
            ]
        else:
            starts = [plan.clip_centers(self._array_init(runtime))]
        # scikit-learn's tolerance, on the variance of the box (public).
        tol = self.tol * float(np.mean((upper - lower) ** 2)) / 12.0
        best = None
        for start in starts:
            centers, n_iter = self._dp_lloyd(
                runtime, adder, plan, accountant, start, everyone, tol, random_state
            )
            inertia = self._dp_inertia(
                runtime, adder, plan, accountant, centers, everyone, output=len(starts) == 1
            )
            if best is None or inertia < best[0]:
                best = (inertia, centers, n_iter)
        self.inertia_, self.cluster_centers_, self.n_iter_ = best
        # Bounds read from the data are a release no accountant covers: no
        # (epsilon, delta) can be claimed for the fit.
        self.privacy_spent_ = None if self.bounds is None else accountant.spent()
        if len(starts) > 1:
            runtime.broadcast(self.cluster_centers_, tag=TAG_CENTERS, clients=everyone)
            runtime.stage("client step: nearest-center labels")
            runtime.run(fedkmeans_final_labels, tag="labels", clients=everyone)

    def _noisy_sum(self, plan, adder, step, tag, bounds, clients, **public):
        """A noisy sum over ``clients``; too few answers end the fit."""
        total, survivors = plan.noisy_sum(
            adder, step, tag=tag, bounds=bounds, clients=clients, **public
        )
        self._check_survivors(tag, clients, survivors)
        return total, survivors

    def _dp_random_starts(self, runtime, adder, plan, accountant, clients, random_state):
        """Gaussian starts around the private mean, with the private per-feature variance."""
        factor = self._noise_factor(clients)
        n_c = self._max_size(runtime, clients)
        half = float(np.max(plan.upper - plan.lower)) / 2
        bounds = [
            _MARGIN * (n_c * half + _NOISE_HEADROOM * factor * plan.sigma_moment_sums),
            _MARGIN * (n_c * half**2 + _NOISE_HEADROOM * factor * plan.sigma_moment_squares),
        ]
        accountant.charge("column sums", sensitivity=plan.diagonal, sigma=plan.sigma_moment_sums)
        accountant.charge(
            "column sums of squares",
            sensitivity=max(plan.squares_sensitivity, np.finfo(float).tiny),
            sigma=plan.sigma_moment_squares,
        )
        runtime.stage("client step: private moments of the pooled rows")
        (sums, squares), survivors = self._noisy_sum(
            plan,
            adder,
            fedkmeans_dp_moments,
            "private moments",
            bounds,
            clients,
            sigma_sums=plan.sigma_moment_sums,
            sigma_squares=plan.sigma_moment_squares,
            noise_share=self._noise_share(clients),
        )
        # The number of rows is public under replace-one neighbours.
        n = float(np.sum(np.asarray(runtime.client_sizes)[survivors]))
        shift = sums / n
        mean = plan.midpoint + shift
        variance = np.clip(squares / n - shift**2, 0.0, ((plan.upper - plan.lower) / 2) ** 2)
        k = self.n_clusters
        return [
            plan.clip_centers(
                mean + np.sqrt(variance) * random_state.standard_normal((k, len(mean)))
            )
            for _ in range(self.n_init)
        ]

    def _dp_lloyd(self, runtime, adder, plan, accountant, centers, active, tol, random_state):
        """``plan.n_iter`` private Lloyd iterations at most: centers, iterations."""
        centers = np.array(centers, dtype=np.float64)
        half = float(np.max(plan.upper - plan.lower)) / 2
        n_iter = relocated = 0
        visited = set()
        for i in range(plan.n_iter):
            participants = self._sample(runtime, active)
            factor = self._noise_factor(participants)
            n_c = self._max_size(runtime, participants)
            runtime.broadcast(centers, tag=TAG_CENTERS, clients=participants)
            bounds = [
                _MARGIN * (n_c * half + _NOISE_HEADROOM * factor * plan.sigma),
                _MARGIN * (n_c + _NOISE_HEADROOM * factor * plan.sigma_counts),
            ]
            accountant.charge(
                "cluster sums and counts", sensitivity=plan.diagonal, sigma=plan.sigma
            )
            runtime.stage(f"iteration {i + 1}: client step, noisy per-cluster sums and counts")
            (sums, counts), survivors = self._noisy_sum(
                plan,
                adder,
                fedkmeans_dp_lloyd_statistics,
                "noisy cluster statistics",
                bounds,
                participants,
                sigma=plan.sigma,
                noise_share=self._noise_share(participants),
            )
            n_iter = i + 1
            runtime.stage(f"iteration {i + 1}: server step, new centers")
            # The noise of the counts in the sum (every answering client's share).
            noise = plan.sigma_counts * factor * math.sqrt(len(survivors))
            new = _dp_centers(centers, sums, counts, plan, noise)
            new, relocated = _relocate_unreliable(new, counts, noise, plan)
            shift = float(((new - centers) ** 2).sum())
            visited.add(centers.tobytes())
            centers = new
            if shift <= tol:
                break
            if self.secure_aggregation and centers.tobytes() in visited:
                # With client sampling the centers can return exactly to an
                # earlier state (a fixed point of a sample drawn again): the
                # iteration cycles, and nodes refuse a second sum of the same
                # statistic over other clients (it would give away the difference).
                break
        if relocated:
            warnings.warn(
                f"{relocated} of the {self.n_clusters} clusters held too few rows to tell from "
                "the noise in the last private iteration; their centers were moved next to the "
                "largest clusters (at no privacy cost). Fewer clusters, a larger epsilon or "
                "more rows help.",
                ConvergenceWarning,
                stacklevel=2,
            )
        return centers, n_iter

    def _dp_inertia(self, runtime, adder, plan, accountant, centers, active, output):
        factor = self._noise_factor(active)
        n_c = self._max_size(runtime, active)
        runtime.broadcast(centers, tag=TAG_CENTERS, clients=active)
        bound = _MARGIN * (n_c * plan.diagonal**2 + _NOISE_HEADROOM * factor * plan.sigma_inertia)
        accountant.charge("inertia", sensitivity=plan.diagonal**2, sigma=plan.sigma_inertia)
        runtime.stage("client step: noisy inertia" + (" and labels" if output else ""))
        total, _ = self._noisy_sum(
            plan,
            adder,
            fedkmeans_dp_inertia,
            "noisy inertia",
            [bound],
            active,
            sigma=plan.sigma_inertia,
            noise_share=self._noise_share(active),
            output=output,
        )
        # A noisy sum of squares may come out negative; zero is the nearest inertia.
        return max(float(total[0]), 0.0)

    def _keep_input_precision(self, X):
        # As KMeans: float32 input, float32 centers (the protocol computes in float64).
        if float32_input(X):
            self.cluster_centers_ = self.cluster_centers_.astype(np.float32)

    @property
    def _n_features_out(self):
        # Columns of transform: one distance per center.
        return self.cluster_centers_.shape[0]

    # ------------------------------------------------------------ new rows
    def transform(self, X):
        """Distances of each sample to every center.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            New data.

        Returns
        -------
        distances : ndarray of shape (n_samples, n_clusters)
            Euclidean distances, translation invariant at any offset
            (computed in float64; float32 for float32 ``X``, as in
            :class:`~sklearn.cluster.KMeans`).
        """
        check_is_fitted(self, "cluster_centers_")
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        centers = np.asarray(self.cluster_centers_, dtype=np.float64)
        distances = np.sqrt(squared_distances(X.astype(np.float64, copy=False), centers))
        return distances.astype(X.dtype, copy=False)

    def fit_transform(self, X, y=None, client_ids=None):
        """Fit and return the distances of the input rows to the centers.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of array-like
            Any input form of :meth:`fit`.
        y : None
            Ignored.
        client_ids : array-like of shape (n_samples,), default=None
            Client of each pooled row.

        Returns
        -------
        distances : ndarray of shape (n_samples, n_clusters)
        """
        self.fit(X, y, client_ids=client_ids)
        rows = np.vstack(X) if input_form(X) == "clients" else X
        return self.transform(rows)

    def score(self, X, y=None):
        """Minus the inertia of ``X``'s rows, added up by a federated sum.

        Each holder of rows adds the squared distances of its rows to their
        nearest center (a secure sum when ``secure_aggregation`` and at least
        three holders, with a
        public bound agreed as in the fit). For a pooled ``X`` this is minus
        the inertia, like :meth:`sklearn.cluster.KMeans.score`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of array-like
            Pooled rows (one holder) or a list of per-client arrays.
        y : None
            Ignored.

        Returns
        -------
        score : float
            Minus the sum of squared distances to the nearest center.
        """
        check_is_fitted(self, "cluster_centers_")
        if input_form(X) == "clients":
            blocks = [validate_data(self, Xi, dtype=np.float64, reset=False) for Xi in X]
        else:
            blocks = [validate_data(self, X, dtype=np.float64, reset=False)]
        rows = np.vstack(blocks)
        sizes = np.cumsum([0] + [len(b) for b in blocks])
        federation = Federation(
            rows, [np.arange(sizes[i], sizes[i + 1]) for i in range(len(blocks))]
        )
        random_state = np.random.RandomState(0)
        federation.spawn_seeds(random_state)
        runtime = InProcessRuntime(
            federation, n_jobs=self.n_jobs, name=f"{type(self).__name__}.score"
        )
        with parallel_config(prefer="threads"):
            return self._score(runtime)

    def _score(self, runtime):
        # Rows of one or two holders: the caller holds them all (a pooled X) or
        # a sum would tell each the other's; they are added in the clear.
        secure = self.secure_aggregation and runtime.n_clients >= DEFAULT_MIN_SUM_PARTICIPANTS
        adder = SumChannel(runtime, secure=secure, seed=0)
        clients = list(range(runtime.n_clients))
        # The model's centers are public to the holders of X's rows.
        centers = self.cluster_centers_
        bound = adder.bound(
            fedkmeans_nearest_distances,
            tag="bound on the distances",
            clients=clients,
            centers=centers,
        )
        bounds = None if bound is None else [_MARGIN * self._max_size(runtime, clients) * bound]
        total, _ = adder.sum(
            fedkmeans_score_inertia,
            tag="inertia",
            bounds=bounds,
            clients=clients,
            centers=centers,
        )
        return -float(total[0])


def fedkmeans_final_labels(data, inbox, state, party):
    """Client step: label the rows by the nearest of the kept centers; output the labels."""
    return Reply(output={"labels": nearest_center(data, inbox[TAG_CENTERS])})
