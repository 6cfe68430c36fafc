"""FederatedKMeans: time per Lloyd iteration against scikit-learn, and secure-sum cost.

Run ``python benchmarks/speed_fedkmeans.py [--quick]``; writes
``benchmarks/results/fedkmeans.md``.

1. Per Lloyd iteration at n=200,000, d=20, k=8, 10 clients, secure sums on,
   in-process, as a ratio to one iteration of scikit-learn's ``KMeans`` on
   the pooled rows. An iteration's time is the difference between fits of
   ``1 + m`` and ``1`` iterations (``tol=0`` on rows that keep moving), divided
   by ``m``: it leaves out the one-off costs (bound agreement, moments,
   validation). Federated and scikit-learn fits alternate, pair by pair, and
   the ratio is the median of the pairs' ratios.
2. One secure sum of a fixed-length vector (that of a Lloyd iteration at
   d=20, k=8) for 10, 100 and 1,000 simulated clients, with and without the
   set-up (pairwise seeds), per client.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from _common import machine_line, markdown_table, write_result
from sklearn.cluster import KMeans

from skfedclust import FederatedKMeans
from skfedclust.federation import Federation, InProcessRuntime, Reply
from skfedclust.secure import SecureAggregator, default_degree

K, D = 8, 20
VECTOR = K * D + K + K + 1  # sums, counts, inertias, changed labels


def _fit_time(fit):
    start = time.perf_counter()
    fit()
    return time.perf_counter() - start


def per_iteration(n, n_clients, extra, pairs):
    # Uniform rows: Lloyd keeps moving centers for many iterations.
    X = np.random.RandomState(0).uniform(size=(n, D))
    init = X[:K].copy()

    def ours(iters):
        return lambda: FederatedKMeans(
            K, init=init, max_iter=iters, tol=0, partition=n_clients, random_state=0
        ).fit(X)

    def sklearn(iters):
        return lambda: KMeans(K, init=init, n_init=1, max_iter=iters, tol=0).fit(X)

    # Every fit runs its max_iter iterations (no convergence this early).
    assert (
        FederatedKMeans(
            K, init=init, max_iter=1 + extra, tol=0, partition=n_clients, random_state=0
        )
        .fit(X)
        .n_iter_
        == 1 + extra
    )
    ratios, ours_s, sk_s = [], [], []
    for _ in range(pairs):
        a = (_fit_time(ours(1 + extra)) - _fit_time(ours(1))) / extra
        b = (_fit_time(sklearn(1 + extra)) - _fit_time(sklearn(1))) / extra
        ours_s.append(a)
        sk_s.append(b)
        ratios.append(a / b)
    fit = FederatedKMeans(K, init=init, max_iter=2, tol=0, partition=n_clients, random_state=0).fit(
        X
    )
    one = FederatedKMeans(K, init=init, max_iter=1, tol=0, partition=n_clients, random_state=0).fit(
        X
    )
    bytes_per_iteration = fit.communication_["bytes_total"] - one.communication_["bytes_total"]
    return np.median(ours_s), np.median(sk_s), np.median(ratios), bytes_per_iteration


def vector_step(data, inbox, state, party):
    """Client step: a fixed-length vector of floats and the row count."""
    return Reply(send=(np.full(VECTOR - 1, 0.5), np.array([data.shape[0]], dtype=np.int64)))


def secure_sum_cost(n_clients, repeats):
    X = np.zeros((4 * n_clients, 2))
    federation = Federation(X, np.array_split(np.arange(len(X)), n_clients))
    federation.spawn_seeds(np.random.RandomState(0))
    setup, sums = [], []
    for _ in range(repeats):
        runtime = InProcessRuntime(federation, private_entropy=[1])
        aggregator = SecureAggregator(runtime, seed=0)
        start = time.perf_counter()
        aggregator.setup()
        setup.append(time.perf_counter() - start)
        start = time.perf_counter()
        total, _ = aggregator.sum(vector_step, tag="v", bounds=[1.0, None])
        sums.append(time.perf_counter() - start)
        assert total[1][0] == len(X)
    report = runtime.ledger.report()
    return np.median(setup), np.median(sums), report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller n, fewer pairs")
    args = parser.parse_args(argv)
    n, extra, pairs = (50_000, 3, 3) if args.quick else (200_000, 5, 7)
    clients = [10, 100] if args.quick else [10, 100, 1000]
    t_ours, t_sk, ratio, nbytes = per_iteration(n, 10, extra, pairs)
    print(f"per iteration: ours {t_ours * 1e3:.1f} ms, sklearn {t_sk * 1e3:.1f} ms, {ratio:.2f}x")
    rows = [
        [
            f"n={n:,} d={D} k={K}, 10 clients",
            f"{t_ours * 1e3:.1f} ms",
            f"{t_sk * 1e3:.1f} ms",
            f"{ratio:.2f}x",
            "<= 1.3x",
            f"{nbytes:,}",
        ]
    ]
    speed = markdown_table(
        [
            "case",
            "FederatedKMeans iteration",
            "KMeans iteration",
            "ratio (median of pairs)",
            "goal",
            "bytes per iteration",
        ],
        rows,
    )
    cost_rows = []
    for m in clients:
        setup, one_sum, report = secure_sum_cost(m, 3 if m <= 100 else 1)
        print(f"{m} clients: set-up {setup:.3f} s, sum {one_sum:.3f} s")
        cost_rows.append(
            [
                m,
                default_degree(m),
                f"{setup:.3f} s",
                f"{one_sum:.3f} s",
                f"{one_sum / m * 1e3:.2f} ms",
                f"{report['bytes_total'] / m:,.0f}",
            ]
        )
    cost = markdown_table(
        [
            "clients",
            "graph degree",
            "set-up (pairwise seeds)",
            "one secure sum",
            "per client",
            "bytes per client (set-up + one sum)",
        ],
        cost_rows,
    )
    body = f"""
Command: `python benchmarks/speed_fedkmeans.py{" --quick" if args.quick else ""}`. {machine_line()}

## Time per Lloyd iteration

Uniform rows (Lloyd keeps moving), scikit-learn's `KMeans(init=centers, n_init=1, tol=0)`
on the pooled rows against `FederatedKMeans(init=centers, tol=0, partition=10)` with
secure aggregation, in-process (clients one after the other, one thread each; scikit-learn
uses every core). An iteration's time is `(T(1 + {extra}) - T(1)) / {extra}` for fits of
`1 + {extra}` and 1 iterations; federated and scikit-learn fits alternate, {pairs} pairs,
medians shown.

{speed}

## Secure-sum cost by number of clients

One secure sum of a vector of {VECTOR} values (a Lloyd iteration's at d={D}, k={K}),
in-process, after the set-up; the set-up (one 16-byte seed per edge of the graph) is
timed apart. Bytes per client include the set-up.

{cost}
"""
    write_result("fedkmeans", "FederatedKMeans: speed and secure-sum cost", body)


if __name__ == "__main__":
    sys.exit(main())
