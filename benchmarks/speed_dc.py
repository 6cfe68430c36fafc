"""Speed of DCClustering against centralized k-means.

DC fits on n=100,000 samples with d=50 features split into 2 row groups x 3
feature blocks (six parties), with the paper's default configuration; the
reference is scikit-learn's ``KMeans(n_init=10)`` on the same pooled data.
Run ``python benchmarks/speed_dc.py`` to time the case on its own.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from skfedclust import DCClustering
from skfedclust.partition import HybridPartition

N_CLUSTERS = 8
RESULTS = Path(__file__).parent / "results" / "dc_speed.md"


def _data(quick):
    n = 20_000 if quick else 100_000
    X, _ = make_blobs(n, n_features=50, centers=N_CLUSTERS, cluster_std=2.0, random_state=0)
    return X


def cases(quick: bool) -> list[dict]:
    """Timing cases for ``benchmarks/bench_speed.py``."""
    X = _data(quick)
    partition = HybridPartition(2, 3, random_state=0)

    def federated():
        DCClustering(N_CLUSTERS, partition=partition, random_state=0).fit(X)

    def reference():
        KMeans(N_CLUSTERS, n_init=10, random_state=0).fit(X)

    return [
        {
            "name": f"DCClustering n={len(X)} d=50, 2 row groups x 3 feature blocks",
            "federated": federated,
            "reference": reference,
            "reference_name": "KMeans(n_init=10)",
            "goal_ratio": 1.5,
        }
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="n=20,000 instead of 100,000")
    parser.add_argument("--repeat", type=int, default=5, help="paired timings")
    args = parser.parse_args()
    lines = []
    for case in cases(args.quick):
        # Alternate the two sides so both see the same load on a shared machine;
        # the median of the paired ratios is robust to a burst hitting one run.
        times = {"federated": [], "reference": []}
        for _ in range(args.repeat):
            for side in times:
                t0 = time.perf_counter()
                case[side]()
                times[side].append(time.perf_counter() - t0)
        ratios = np.array(times["federated"]) / np.array(times["reference"])
        line = (
            f"{case['name']}: DC best {min(times['federated']):.2f}s, "
            f"{case['reference_name']} best {min(times['reference']):.2f}s; ratio "
            f"{np.median(ratios):.2f} (median of {args.repeat} paired runs, range "
            f"{ratios.min():.2f}-{ratios.max():.2f}; goal <= {case['goal_ratio']})"
        )
        print(line)
        lines.append(f"* {line}")
    command = "python benchmarks/speed_dc.py" + (" --quick" if args.quick else "")
    RESULTS.write_text(
        "# DC-Clustering speed\n\n"
        f"Produced by `{command} --repeat {args.repeat}` ({os.cpu_count()} CPU cores, "
        "shared machine).\n\n" + "\n".join(lines) + "\n"
    )


if __name__ == "__main__":
    main()
