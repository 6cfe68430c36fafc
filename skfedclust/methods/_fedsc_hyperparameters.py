"""FedSC's hyperparameters: the kernel bandwidth and the dictionary size (Qiao et al., 2023).

Client side: :func:`pair_distance_sum` (a client's total distance over its
distinct pairs) and :func:`n_components_auto` (the energy rule, Eq. 43) on
the client's own rows. Server side: :func:`pair_sum_bandwidth` (the federated
bandwidth from the summed pair statistics), :func:`federated_bandwidth` (the
paper's Eq. 42) and :func:`combine_n_components`. :func:`pooled_bandwidth`
and :func:`n_components_auto` on pooled data are the centralised rules of the
paper's experiments (Eqs. 40-41, 43).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import linalg
from scipy.spatial.distance import cdist
from sklearn.utils import check_random_state
from threadpoolctl import threadpool_limits

from ..clusterers._memory import check_dense_memory
from ._fedsc_core import BLOCK_ROWS, MAX_SAMPLES, _as_rows, gaussian_kernel

__all__ = [
    "combine_n_components",
    "energy_rank",
    "federated_bandwidth",
    "mean_pairwise_distance",
    "n_components_auto",
    "pair_distance_sum",
    "pair_sum_bandwidth",
    "pooled_bandwidth",
]

#: Up to this many rows the kernel spectrum is computed on one BLAS thread.
SERIAL_EIGEN_MAX = 2000

#: Up to this many rows the dictionary-size rule takes the whole kernel
#: spectrum; beyond, only its leading part (``_leading_energy_rank``).
DENSE_SPECTRUM_MAX = 2000

#: First number of leading eigenvalues tried by ``_leading_energy_rank``, its
#: extra sketch columns and its power iterations.
LEADING_CANDIDATES = 128
OVERSAMPLING = 32
POWER_ITERATIONS = 2


def _subsample(X, max_samples, random_state):
    if max_samples is None or len(X) < max_samples:
        return X
    rng = check_random_state(random_state)
    return X[np.sort(rng.choice(len(X), size=max_samples, replace=False))]


def mean_pairwise_distance(X, *, max_samples=MAX_SAMPLES, random_state=None):
    """Mean Euclidean distance over all ordered pairs of rows, the zero diagonal included.

    ``Mean(sqrt(D))`` of Eqs. (40-42) of Qiao et al. (2023): the bandwidth
    statistic of one data set. Computed in row blocks from coordinate
    differences, so memory is ``O(n)`` per block row and the value does not
    depend on where the data sit.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    max_samples : int or None, default=8000
        A random subset of this many rows is used when ``n_samples`` reaches
        it (as in the paper's experiments); ``None`` uses every row.
    random_state : int, RandomState instance or None, default=None
        Selects the subset.

    Returns
    -------
    distance : float

    Examples
    --------
    >>> from skfedclust.methods._fedsc_hyperparameters import mean_pairwise_distance
    >>> mean_pairwise_distance([[0.0, 0.0], [3.0, 4.0]])  # (0 + 5 + 5 + 0) / 4
    2.5
    """
    X = _subsample(_as_rows(X, "X"), max_samples, random_state)
    n = len(X)
    return _distance_total(X) / (n * n)


def _distance_total(X):
    """Sum of the Euclidean distances over all ordered pairs of rows, in row blocks."""
    return math.fsum(cdist(X[s : s + BLOCK_ROWS], X).sum() for s in range(0, len(X), BLOCK_ROWS))


def pooled_bandwidth(X, *, scale=1.0, max_samples=MAX_SAMPLES, random_state=None):
    """Bandwidth from pooled data, ``r = c Mean(sqrt(D))`` (Qiao et al. 2023, Eq. 40).

    The rule of the paper's experiments. It needs every sample in one place,
    so in a federation it is a simulation shortcut that leaks; see
    :func:`federated_bandwidth`.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    scale : float, default=1.0
        The constant ``c``.
    max_samples : int or None, default=8000
    random_state : int, RandomState instance or None, default=None

    Returns
    -------
    bandwidth : float

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from skfedclust.methods._fedsc_hyperparameters import pooled_bandwidth
    >>> round(pooled_bandwidth(load_iris().data), 4)
    2.5277
    """
    return float(scale) * mean_pairwise_distance(
        X, max_samples=max_samples, random_state=random_state
    )


def pair_distance_sum(X, *, max_samples=MAX_SAMPLES, random_state=None):
    """Client statistic of :func:`pair_sum_bandwidth`: total distance over distinct pairs.

    What the server needs of every client for the federated bandwidth is a
    term of two sums (distances and pairs over all clients), so a secure sum
    can deliver it without the server seeing any client's value.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    max_samples : int or None, default=8000
        A random subset of this many rows is used when ``n_samples`` reaches it.
    random_state : int, RandomState instance or None, default=None
        Selects the subset.

    Returns
    -------
    total_distance : float
        Sum of the Euclidean distances over the ordered pairs of distinct rows
        (0 without pairs).
    n_pairs : int
        Number of those pairs, ``m (m - 1)`` for the ``m`` rows used.

    Examples
    --------
    >>> from skfedclust.methods._fedsc_hyperparameters import pair_distance_sum
    >>> pair_distance_sum([[0.0, 0.0], [3.0, 4.0]])
    (10.0, 2)
    """
    X = _subsample(_as_rows(X, "X"), max_samples, random_state)
    m = len(X)
    if m < 2:
        return 0.0, 0
    return _distance_total(X), m * (m - 1)


def pair_sum_bandwidth(total_distance, n_pairs, *, n_samples, scale=1.0):
    """Server: the federated bandwidth from the clients' summed :func:`pair_distance_sum`.

    ``c * total_distance / n_pairs * (1 - 1 / n)``: the mean distance over
    the pairs inside the clients stands for the mean over all distinct
    pairs, and ``1 - 1 / n`` puts back the zero self-distances of the pooled
    rule (Qiao et al. 2023, Eq. 40). The paper's federated rule (Eq. 42,
    :func:`federated_bandwidth`) averages each client's mean over its own
    ``n_p**2`` pairs, zero self-distances included, which biases it low by
    about ``1 / n_p``: 5 % on iris split over 8 clients, and to 0 for a client
    with one sample.

    Parameters
    ----------
    total_distance : float
        Sum over the clients of their total distance over distinct pairs.
    n_pairs : int
        Sum over the clients of their numbers of distinct pairs.
    n_samples : int
        Total number of samples ``n`` (public).
    scale : float, default=1.0
        The constant ``c``.

    Returns
    -------
    bandwidth : float

    Examples
    --------
    >>> from skfedclust.methods._fedsc_hyperparameters import pair_sum_bandwidth
    >>> pair_sum_bandwidth(22.0, 8, n_samples=5)
    2.2
    """
    total_distance, n_pairs = float(total_distance), float(n_pairs)
    if not np.isfinite(total_distance) or total_distance < 0 or n_pairs < 0:
        raise ValueError(
            "The pair statistics must be a finite non-negative distance total and pair count, "
            f"got ({total_distance!r}, {n_pairs!r})."
        )
    if n_pairs == 0 or total_distance == 0:
        raise ValueError(
            "The bandwidth is 0: no client holds two distinct points. "
            "Give the bandwidth explicitly."
        )
    return float(scale) * total_distance / n_pairs * (1.0 - 1.0 / int(n_samples))


def federated_bandwidth(statistics, *, scale=1.0):
    """Server: bandwidth from the clients' statistics, ``r = (c / P) sum_p Mean(sqrt(D_p))``.

    Eq. (42) of Qiao et al. (2023): each client uploads the
    :func:`mean_pairwise_distance` of its own samples, and the server takes
    the unweighted mean of the uploads.

    Parameters
    ----------
    statistics : sequence of float
        One :func:`mean_pairwise_distance` per client.
    scale : float, default=1.0
        The constant ``c``.

    Returns
    -------
    bandwidth : float

    Examples
    --------
    >>> from skfedclust.methods._fedsc_hyperparameters import federated_bandwidth
    >>> federated_bandwidth([2.0, 3.0])
    2.5
    """
    values = np.asarray(statistics, dtype=np.float64)
    if values.ndim != 1 or len(values) == 0 or not np.all(np.isfinite(values)):
        raise ValueError("statistics must be a non-empty sequence of finite numbers.")
    bandwidth = float(scale) * float(values.mean())
    if bandwidth <= 0:
        raise ValueError(
            "The bandwidth is 0: every client holds a single distinct point. "
            "Give the bandwidth explicitly."
        )
    return bandwidth


def energy_rank(eigenvalues, tol=0.99):
    """Smallest ``k`` whose ``k`` largest eigenvalues hold a fraction ``tol`` of the total.

    ``min{k : sum_{i <= k} s_i / sum_i s_i >= tol}`` with ``s`` sorted in
    decreasing order (Qiao et al. 2023, Eq. 43). Magnitudes are used, so tiny
    negative eigenvalues from rounding count as the singular values they are.

    Parameters
    ----------
    eigenvalues : array-like of shape (n,)
    tol : float, default=0.99
        In (0, 1].

    Returns
    -------
    k : int
        Between 1 and ``n``.

    Examples
    --------
    >>> from skfedclust.methods._fedsc_hyperparameters import energy_rank
    >>> energy_rank([5.0, 3.0, 1.5, 0.5], tol=0.8)
    2
    """
    if not 0 < tol <= 1:
        raise ValueError(f"tol must lie in (0, 1], got {tol!r}.")
    s = np.sort(np.abs(np.asarray(eigenvalues, dtype=np.float64)))[::-1]
    if len(s) == 0 or s[0] == 0:
        return 1
    fraction = np.cumsum(s) / s.sum()
    # The last fraction may round to just below 1; tol = 1 must still stop at n.
    return int(min(np.searchsorted(fraction, tol * (1 - 1e-12)) + 1, len(s)))


def n_components_auto(X, *, bandwidth, tol=0.99, max_samples=MAX_SAMPLES, random_state=None):
    """Dictionary size from the spectrum of the kernel matrix (Qiao et al. 2023, Eq. 43).

    :func:`energy_rank` of the eigenvalues of ``K(X, X)``. On pooled data it
    is the rule of the paper's experiments (a simulation shortcut); a client
    applies it to its own samples and the server combines the answers with
    :func:`combine_n_components`. Holds a dense ``n x n`` kernel:
    ``8 n**2`` bytes, 512 MB at the default cap of 8000 samples.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    bandwidth : float
    tol : float, default=0.99
    max_samples : int or None, default=8000
        A random subset of this many rows is used when ``n_samples`` reaches it.
    random_state : int, RandomState instance or None, default=None

    Returns
    -------
    n_components : int

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from skfedclust.methods._fedsc_hyperparameters import n_components_auto, pooled_bandwidth
    >>> X = load_iris().data
    >>> n_components_auto(X, bandwidth=pooled_bandwidth(X))
    7
    """
    X = _subsample(_as_rows(X, "X"), max_samples, random_state)
    # The kernel is built in place; the spectrum needs at most one more copy.
    check_dense_memory(
        len(X),
        len(X),
        n_copies=2,
        what="The kernel matrix of the dictionary-size rule",
        advice="Lower max_samples, or give the dictionary size as an integer.",
    )
    K = gaussian_kernel(X, bandwidth=bandwidth)
    if len(X) > DENSE_SPECTRUM_MAX:
        return _leading_energy_rank(K, tol, random_state)
    # The tridiagonal reduction is a chain of small BLAS calls: below a few
    # thousand rows extra threads only add synchronisation, which costs seconds
    # on a busy machine.
    threads = 1 if len(X) <= SERIAL_EIGEN_MAX else None
    with threadpool_limits(limits=threads, user_api="blas"):
        eigenvalues = linalg.eigvalsh(K, overwrite_a=True)
    return energy_rank(eigenvalues, tol)


def _leading_energy_rank(K, tol, random_state):
    """:func:`energy_rank` of a PSD kernel from its leading eigenvalues only.

    The total energy is the trace, so only the eigenvalues up to the answer
    are needed: they come from a randomized subspace iteration (Halko,
    Martinsson & Tropp 2011) on ``OVERSAMPLING`` more columns than candidates,
    with ``POWER_ITERATIONS`` power steps, doubling the candidates until they
    hold the energy. A few BLAS-3 products of ``K`` instead of the
    ``O(n**3)`` tridiagonal reduction: 0.35 s instead of 1.4 s at
    ``n = 2500`` (8 blobs in 20 dimensions, d = 71) and 3 s at ``n = 8000``
    on one thread. Ritz values are lower bounds of the eigenvalues, so the
    answer can only exceed the full-spectrum one: it did by 1 (111 for 110)
    in one of eight test cases, and matched in the others.
    """
    n = len(K)
    total = float(np.trace(K))
    rng = check_random_state(0 if random_state is None else random_state)
    target = tol * total * (1 - 1e-12)
    n_candidates = LEADING_CANDIDATES
    while True:
        width = n_candidates + OVERSAMPLING
        if width > n // 4:
            # A sketch this wide costs more than the whole spectrum.
            with threadpool_limits(limits=1 if n <= SERIAL_EIGEN_MAX else None, user_api="blas"):
                return energy_rank(linalg.eigvalsh(K), tol)
        Y = K @ rng.standard_normal((n, width))
        for _ in range(POWER_ITERATIONS):
            Y = K @ linalg.qr(Y, mode="economic")[0]
        Q = linalg.qr(Y, mode="economic")[0]
        ritz = np.sort(linalg.eigvalsh(Q.T @ K @ Q))[::-1]
        cumulative = np.cumsum(ritz[:n_candidates])
        if cumulative[-1] >= target:
            return int(np.searchsorted(cumulative, target) + 1)
        n_candidates *= 2


def combine_n_components(counts):
    """Server: dictionary size from the clients' local :func:`n_components_auto`.

    The largest local answer. It underestimates the pooled rule, since every
    client sees only part of the spectrum.

    Parameters
    ----------
    counts : sequence of int

    Returns
    -------
    n_components : int

    Examples
    --------
    >>> from skfedclust.methods._fedsc_hyperparameters import combine_n_components
    >>> combine_n_components([4, 6, 5])
    6
    """
    counts = [int(c) for c in counts]
    if not counts or min(counts) < 1:
        raise ValueError("counts must be a non-empty sequence of integers >= 1.")
    return max(counts)
