"""GOLD's package defaults against the paper's settings on ordinary data.

ARI of ``GOLDClustering`` on iris, wine, breast_cancer, digits and blobs, with IID and
label-skewed (Dirichlet, alpha=0.5) partitions over three clients, mean ± sd over seeds,
next to centralized ``KMeans(n_init=10)`` on the standardized pooled data:

* **paper**: the literal settings of the paper and of the authors' implementation
  (``local_init=0.5, remc_n_init=1, refine=False, visit_order="storage"``);
* **paper + 10 REMC starts**: the same with ``remc_n_init=10``;
* **defaults without refinement**: the package defaults with ``refine=False``;
* **defaults, REMC start only**: ``refine_n_init=0`` (the refinement starts from REMC's
  partition only, no k-means++ starts);
* **defaults**: ``GOLDClustering(k)``.

Usage::

    python benchmarks/defaults_gold.py              # 10 seeds
    python benchmarks/defaults_gold.py --seeds 3    # quicker

Writes ``benchmarks/results/gold_defaults.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import (
    load_breast_cancer,
    load_digits,
    load_iris,
    load_wine,
    make_blobs,
)
from sklearn.metrics import adjusted_rand_score
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from _common import machine_line, markdown_table, write_result  # noqa: E402

from skfedclust import GOLDClustering  # noqa: E402
from skfedclust.partition import DirichletPartition, IIDPartition  # noqa: E402

N_CLIENTS = 3
PAPER = dict(local_init=0.5, remc_n_init=1, refine=False, visit_order="storage")
SETTINGS = {
    "paper": PAPER,
    "paper + 10 REMC starts": {**PAPER, "remc_n_init": 10},
    "defaults, refine=False": {"refine": False},
    "defaults, refine_n_init=0": {"refine_n_init": 0},
    "defaults": {},
}


def datasets():
    blobs = make_blobs(1500, n_features=10, centers=5, cluster_std=2.0, random_state=0)
    return {
        "iris": load_iris(return_X_y=True),
        "wine": load_wine(return_X_y=True),
        "breast_cancer": load_breast_cancer(return_X_y=True),
        "digits": load_digits(return_X_y=True),
        "blobs": blobs,
    }


def partitions(seed):
    return {
        "IID": IIDPartition(N_CLIENTS, random_state=seed),
        "Dirichlet 0.5": DirichletPartition(N_CLIENTS, alpha=0.5, random_state=seed),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    results = {}
    with threadpool_limits(limits=1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (X, y) in datasets().items():
            k = len(np.unique(y))
            km = [
                adjusted_rand_score(
                    y, KMeans(k, n_init=10, random_state=s).fit(StandardScaler().fit_transform(X))
                    .labels_,
                )
                for s in range(args.seeds)
            ]  # fmt: skip
            for part in partitions(0):
                row = {"KMeans (centralized)": km}
                for setting, params in SETTINGS.items():
                    row[setting] = [
                        adjusted_rand_score(
                            y,
                            GOLDClustering(
                                k, partition=partitions(s)[part], random_state=s, **params
                            ).fit(X, y).labels_,
                        )
                        for s in range(args.seeds)
                    ]  # fmt: skip
                results[(name, part)] = row
                print(name, part, {m: round(float(np.mean(v)), 3) for m, v in row.items()},
                      flush=True)  # fmt: skip
    columns = list(SETTINGS) + ["KMeans (centralized)"]
    rows = [
        [name, part] + [f"{np.mean(row[c]):.3f} ± {np.std(row[c]):.3f}" for c in columns]
        for (name, part), row in results.items()
    ]
    body = "\n\n".join(
        [
            f"ARI over {args.seeds} seeds (seed s draws the partition and GOLD's randomness); "
            f"mean ± sd (population). {N_CLIENTS} clients; the partition is the label-free "
            "IID split or a label-skewed Dirichlet(0.5) split. Every GOLD run standardizes "
            "with the clients' pooled moments (`standardize=True`); KMeans(n_init=10) runs "
            f"on the standardized pooled data. Whole script: "
            f"{(time.perf_counter() - t0) / 60:.1f} min, one thread.",
            machine_line(),
            "Command: `python benchmarks/defaults_gold.py"
            + "".join(" " + a for a in (argv or sys.argv[1:]))
            + "`",
            "Settings: **paper** = `local_init=0.5, remc_n_init=1, refine=False, "
            "visit_order='storage'` (the paper and the authors' implementation); **defaults** "
            "= `GOLDClustering(k)` (`local_init='sqrt', remc_n_init=10, refine=True, "
            "refine_n_init=10, visit_order='canonical'`).",
            markdown_table(["data", "partition"] + columns, rows),
        ]
    )
    write_result("gold_defaults", "GOLD: package defaults vs the paper's settings", body)


if __name__ == "__main__":
    main()
