"""Adaptive centers: exact Lloyd totals are a reconstruction oracle; a node's budget ends it.

A coordinator chooses the centers of every Lloyd iteration. Two centers far
apart on either side of the plane ``x . u = t`` split the rows into the
halfspace ``x . u > t`` and the rest; moving ``t`` by bisection on the summed
counts until they differ by one row, the difference of two per-cluster sums
is that row, exactly, however many clients each perfectly masked sum covers.
No rule on the shape of one message can see it: these totals are what
k-means releases. Two defences: a default node sends no exact statistic for
centers the coordinator chose (rule ``coordinator-centers``; FederatedKMeans
then runs with the nodes choosing every center, ``coordinator="blind"``), and
a node with ``dp-epsilon`` sends no float value that is not a noisy release
charged to it (rule ``dp-only``), so the exact sums are refused, and the noisy
ones end when its budget is spent.

Trust model: an active coordinator; every node honest.
"""

import functools

import numpy as np
import pytest

from skfedclust import FederatedKMeans
from skfedclust.federation import Federation, InProcessRuntime, use_runtime
from skfedclust.methods._fedkmeans_steps import TAG_CENTERS, fedkmeans_lloyd_statistics
from skfedclust.node._policy import NodePolicy
from skfedclust.node._sum_guard import SumRefusal
from skfedclust.secure import SecureAggregator

N_CLIENTS, N_PER, D = 6, 20, 3
FAR = 100.0  # distance of both centers from the splitting plane


def _deployed(policy):
    X = np.random.default_rng(0).uniform(-1, 1, size=(N_CLIENTS * N_PER, D))
    rows = [np.arange(N_PER * c, N_PER * (c + 1)) for c in range(N_CLIENTS)]
    federation = Federation(X, rows)
    federation.spawn_seeds(np.random.RandomState(0))
    return X, InProcessRuntime(federation, policy=policy)


def _split_by_plane(u, t):
    return np.vstack([(t - FAR) * u, (t + FAR) * u])


def _halfspace_oracle(runtime):
    """The coordinator's query: (count, sum of the rows with ``x . u > t``) by a secure sum."""
    aggregator = SecureAggregator(runtime, seed=3)
    aggregator.setup()
    u = np.ones(D) / np.sqrt(D)

    def query(t):
        centers = _split_by_plane(u, t)
        runtime.broadcast(centers, tag=TAG_CENTERS)
        (sums, counts, _), _ = aggregator.sum(
            fedkmeans_lloyd_statistics, tag="lloyd", bounds=[2.0**12, None, None]
        )
        # The step sends deviations from each row's own center.
        return int(counts[1]), sums[1] + counts[1] * centers[1]

    return query


def _peel_one_row(query, lo=-2.0, hi=2.0, max_queries=200):
    """Bisect the plane until two queries' counts differ by one; their difference is a row."""
    (n_lo, s_lo), (n_hi, s_hi) = query(lo), query(hi)
    for _ in range(max_queries):
        if n_lo - n_hi == 1:
            return s_lo - s_hi
        mid = 0.5 * (lo + hi)
        n_mid, s_mid = query(mid)
        if n_mid > n_hi:  # a row lies in (mid, hi]: keep the upper half
            lo, n_lo, s_lo = mid, n_mid, s_mid
        else:
            hi, n_hi, s_hi = mid, n_mid, s_mid
    return None


def test_exact_totals_of_adaptive_centers_give_a_row_to_the_coordinator():
    # The open attack the Security page states, where an operator lets the
    # coordinator choose the centers: a node without a budget answers every exact
    # sum, each one over six clients and masked, and one row falls out.
    X, runtime = _deployed(NodePolicy(allow_coordinator_centers="*"))
    row = _peel_one_row(_halfspace_oracle(runtime))
    assert row is not None
    assert np.abs(X - row).max(axis=1).min() < 1e-9


def test_a_default_node_answers_no_centers_the_coordinator_chose():
    _, runtime = _deployed(NodePolicy())
    with pytest.raises(PermissionError, match="rule 'coordinator-centers'"):
        _peel_one_row(_halfspace_oracle(runtime))


def test_the_far_start_attack_fails_against_default_nodes():
    # The coordinator's other lever, a start of its choosing (one run from
    # centers that isolate rows), is refused in the blind mode too.
    X = np.random.default_rng(0).uniform(-1, 1, size=(N_CLIENTS * N_PER, D))
    u = np.ones(D) / np.sqrt(D)
    policy = NodePolicy(privacy_ledger="none")
    with use_runtime(functools.partial(InProcessRuntime, policy=policy)):
        with pytest.raises(PermissionError, match="rule 'coordinator-centers'"):
            FederatedKMeans(2, init=_split_by_plane(u, 0.9), max_iter=1).fit(
                np.array_split(X, N_CLIENTS)
            )
        # What the default releases: centers each backed by rows of several clients.
        est = FederatedKMeans(2, random_state=0).fit(np.array_split(X, N_CLIENTS))
    assert est.coordinator_ == "blind"
    assert np.abs(X[:, None, :] - est.cluster_centers_[None]).max(axis=2).min() > 1e-3


def test_a_node_with_a_budget_refuses_the_exact_totals():
    # Even where the operator lets the coordinator choose the centers.
    _, runtime = _deployed(NodePolicy(dp_epsilon=1.0, allow_coordinator_centers="*"))
    with pytest.raises(PermissionError, match="rule 'dp-only'"):
        _peel_one_row(_halfspace_oracle(runtime))


def test_noisy_totals_end_with_the_nodes_budget_and_give_no_row():
    # The coordinator asks for what a budget allows: DP Lloyd iterations from
    # its far centers, fit after fit, with each node's ledger spanning the fits.
    X = np.random.default_rng(0).uniform(-1, 1, size=(N_CLIENTS * N_PER, D))
    clients = np.array_split(X, N_CLIENTS)
    u = np.ones(D) / np.sqrt(D)
    policy = NodePolicy(dp_epsilon=2.0)
    released = []
    with use_runtime(functools.partial(InProcessRuntime, policy=policy)):
        with pytest.raises(SumRefusal, match="rule 'dp-budget'"):
            for t in np.linspace(-1.0, 1.0, 50):
                estimator = FederatedKMeans(
                    2,
                    privacy="dp",
                    epsilon=0.5,
                    bounds=(-1.0, 1.0),
                    init=_split_by_plane(u, t),
                    n_init=1,
                    max_iter=1,
                    tol=0,
                    random_state=0,
                ).fit(clients)
                released.append(estimator.cluster_centers_)
    # The budget paid for some fits (Gaussian releases compose in Renyi DP,
    # so more than epsilon / 0.5 of them), then the nodes refused the next.
    assert 0 < len(released) < 50
    centers = np.vstack(released)
    distance_to_nearest_row = np.abs(X[:, None, :] - centers[None]).max(axis=2).min(axis=0)
    assert distance_to_nearest_row.min() > 1e-3
