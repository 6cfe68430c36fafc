"""Rounds and bytes of one secure sum, and FederatedKMeans' rounds per Lloyd iteration.

Usage::

    python benchmarks/secure_sum_cost.py [--out benchmarks/results/secure_sum_cost.md]

One sum of a 100-float vector per client, after the set-up, with every client
answering and with one client lost after masking, for 5, 10 and 50 clients;
then FederatedKMeans (secure sums, 10 clients) for a fixed number of
iterations. Counts come from the runtime's ledger (``communication_``).
"""

import argparse
import subprocess
from pathlib import Path

import numpy as np
from _common import emit
from sklearn.datasets import make_blobs

from skfedclust import FederatedKMeans
from skfedclust.federation import Federation, InProcessRuntime, Reply, summand
from skfedclust.secure import SecureAggregator
from skfedclust.secure._secure_sum import TAG_UPLOAD

D = 100


@summand
def vector(data, inbox, state, party):
    return Reply(send=data[:, :D].sum(axis=0))


class Losing(InProcessRuntime):
    lost = ()

    def _lost(self, tag, party):
        return tag == TAG_UPLOAD and party in self.lost


def one_sum(n_clients, lose):
    X = np.random.RandomState(0).normal(size=(20 * n_clients, D))
    federation = Federation(X, np.array_split(np.arange(len(X)), n_clients))
    federation.spawn_seeds(np.random.RandomState(1))
    runtime = Losing(federation, private_entropy=[1])
    runtime.lost = (0,) if lose else ()
    aggregator = SecureAggregator(runtime, seed=0)
    aggregator.setup()
    before = runtime.ledger.report()
    aggregator.sum(vector, tag="sum", bounds=1e3)
    after = runtime.ledger.report()
    return {k: after[k] - before[k] for k in ("rounds", "bytes_up", "bytes_down", "bytes_peer")}


def fedkmeans_rounds(max_iter):
    X, _ = make_blobs(2000, centers=4, random_state=0)
    clients = np.array_split(X, 10)
    est = FederatedKMeans(4, max_iter=max_iter, n_init=1, random_state=0)
    return est.fit(clients).communication_["rounds"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent,
    ).stdout.strip()
    lines = [
        f"# Cost of one secure sum (commit {commit})",
        "",
        f"Command: `python benchmarks/secure_sum_cost.py` at commit {commit}. One sum of a "
        "100-float vector per client after the set-up, counted by the runtime's ledger.",
        "",
        "| clients | dropout | rounds | bytes up | bytes down | peer bytes |",
        "|---|---|---|---|---|---|",
    ]
    for n in (5, 10, 50):
        for lose in (False, True):
            c = one_sum(n, lose)
            lines.append(
                f"| {n} | {'one client' if lose else 'none'} | {c['rounds']} | "
                f"{c['bytes_up']:,} | {c['bytes_down']:,} | {c['bytes_peer']:,} |"
            )
    per_iteration = fedkmeans_rounds(6) - fedkmeans_rounds(5)
    lines += [
        "",
        f"FederatedKMeans (10 clients, secure sums): {per_iteration} rounds per iteration",
    ]
    emit(lines, args.out)


if __name__ == "__main__":
    main()
