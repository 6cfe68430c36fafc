"""FedSC's neighbour count: the paper's ceil(ln n) against fixed counts, measured.

The paper keeps ``k = ceil(ln n)`` neighbours of every sample in the kNN graph of
the reconstructed kernel (Qiao, Ding & Fan 2023, Appendix D.3, after von
Luxburg 2007): 6 on Iris, 8 on digits. On small standardised data that graph is
sparse enough to split a cluster. This script fits FedSC with each neighbour
count on six data sets (standardised as the package's demo does) and two splits
(8 IID clients, the estimator's default; 3 label-skewed clients, the demo's
``--partition noniid``) and reports NMI, mean ± std over seeds. Everything but
``n_neighbors`` is the package default. Writes
``benchmarks/results/fedsc_neighbors.md`` (``fedsc_neighbors_quick.md`` with
``--quick``).

    python benchmarks/neighbors_fedsc.py --quick
    python benchmarks/neighbors_fedsc.py
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import (
    load_breast_cancer,
    load_digits,
    load_iris,
    load_wine,
    make_circles,
    make_moons,
)
from sklearn.metrics import normalized_mutual_info_score
from sklearn.preprocessing import StandardScaler

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from _common import (  # noqa: E402
    cache_threadpool_scan,
    git_commit,
    machine_line,
    markdown_table,
    mean_std,
    write_result,
)

from skfedclust import FedSpectralClustering  # noqa: E402
from skfedclust.partition import IIDPartition, NonIIDLevelPartition  # noqa: E402

#: Neighbour counts compared: the paper's rule first.
COUNTS = ["ceil(ln n)", 10, 15, 20, 30]


def data_sets():
    """``{name: (X standardised, y)}``."""
    sets = {
        "iris": load_iris(return_X_y=True),
        "wine": load_wine(return_X_y=True),
        "breast_cancer": load_breast_cancer(return_X_y=True),
        "digits": load_digits(return_X_y=True),
        "moons": make_moons(500, noise=0.08, random_state=0),
        "circles": make_circles(500, factor=0.5, noise=0.05, random_state=0),
    }
    return {name: (StandardScaler().fit_transform(X), y) for name, (X, y) in sets.items()}


def splits(seed):
    """The two client splits: the estimator's default and the demo's label skew."""
    return {
        "8 IID": IIDPartition(8, random_state=seed),
        "3 non-IID (p = 0.5)": NonIIDLevelPartition(0.5, n_clients=3, random_state=seed),
    }


def measure(seeds):
    rows, best, totals = [], {}, {count: [] for count in COUNTS}
    for name, (X, y) in data_sets().items():
        n, k_clusters = len(X), len(np.unique(y))
        for split in splits(0):
            nmis = {count: [] for count in COUNTS}
            for seed in seeds:
                spec = splits(seed)[split]
                for count in COUNTS:
                    k = math.ceil(math.log(n)) if count == "ceil(ln n)" else count
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        est = FedSpectralClustering(
                            k_clusters, partition=spec, n_neighbors=k, random_state=seed
                        ).fit(X, y)
                    nmis[count].append(normalized_mutual_info_score(y, est.labels_))
            means = {count: np.mean(v) for count, v in nmis.items()}
            for count in COUNTS:
                totals[count].append(means[count])
            best[name, split] = max(means, key=means.get)
            rows.append(
                [name, n, math.ceil(math.log(n)), split]
                + [mean_std(nmis[count]) for count in COUNTS]
            )
            print(" | ".join(str(c) for c in rows[-1]), flush=True)
    return rows, best, {count: np.mean(v) for count, v in totals.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds instead of 5")
    args = parser.parse_args()
    cache_threadpool_scan()  # speed only: the same thread limits, scanned once
    seeds = list(range(2 if args.quick else 5))
    t0 = time.perf_counter()
    rows, best, overall = measure(seeds)
    elapsed = time.perf_counter() - t0
    header = ["data", "n", "ceil(ln n)", "clients"] + [f"k = {c}" for c in COUNTS]
    mode = "quick" if args.quick else "full"
    body = f"""
Mode: **{mode}** (`python benchmarks/neighbors_fedsc.py{" --quick" if args.quick else ""}`),
seeds {seeds}, {elapsed:.0f} s, code at commit {git_commit()}. {machine_line()}

NMI of FedSC (mean ± std over seeds; a new split and new initialisations per seed)
with each neighbour count of the kNN graph of the reconstructed kernel, everything
else the package default (federated bandwidth and dictionary size, 20 rounds). The
features are standardised, as in `python -m skfedclust`. The package's default is
`max(15, ceil(ln n))`, which is 15 on all of these; `n_neighbors="log"` is the
paper's `ceil(ln n)`.

{markdown_table(header, rows)}

Highest mean NMI: {", ".join(f"{d} / {s}: k = {c}" for (d, s), c in best.items())}.

Mean over the twelve rows: {", ".join(f"k = {c}: {m:.3f}" for c, m in overall.items())}.
"""
    write_result(
        "fedsc_neighbors_quick" if args.quick else "fedsc_neighbors",
        "FedSC: neighbour count of the kNN graph" + (" (quick run)" if args.quick else ""),
        body,
    )


if __name__ == "__main__":
    main()
