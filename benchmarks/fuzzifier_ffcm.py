"""FederatedFuzzyCMeans: the fuzzifier m on ordinary data.

NMI and ARI of ``FederatedFuzzyCMeans`` (aggregation v1, 10 rounds, three clients, IID
and Dirichlet(0.5) label-skewed partitions) for m = 1.1, 1.25, 1.5 and 2 on standardized
iris, wine, breast_cancer, digits and blobs, mean ± sd over seeds, next to centralized
``KMeans(n_init=10)``.

Usage::

    python benchmarks/fuzzifier_ffcm.py            # 10 seeds

Writes ``benchmarks/results/ffcm_fuzzifier.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine, make_blobs
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from _common import machine_line, markdown_table, write_result  # noqa: E402

from skfedclust import FederatedFuzzyCMeans  # noqa: E402
from skfedclust.partition import DirichletPartition, IIDPartition  # noqa: E402

FUZZIFIERS = (1.1, 1.25, 1.5, 2.0)
N_CLIENTS = 3


def datasets():
    return {
        "iris": load_iris(return_X_y=True),
        "wine": load_wine(return_X_y=True),
        "breast_cancer": load_breast_cancer(return_X_y=True),
        "digits": load_digits(return_X_y=True),
        "blobs": make_blobs(1500, n_features=10, centers=5, cluster_std=2.0, random_state=0),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    tables = {"NMI": [], "ARI": []}
    metrics = {"NMI": normalized_mutual_info_score, "ARI": adjusted_rand_score}
    with threadpool_limits(limits=1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (X, y) in datasets().items():
            X = StandardScaler().fit_transform(X)
            k = len(np.unique(y))
            km = [KMeans(k, n_init=10, random_state=s).fit(X).labels_ for s in range(args.seeds)]
            for part_name, part in (
                ("IID", lambda s: IIDPartition(N_CLIENTS, random_state=s)),
                ("Dirichlet 0.5", lambda s: DirichletPartition(N_CLIENTS, 0.5, random_state=s)),
            ):
                fits = {
                    m: [
                        FederatedFuzzyCMeans(k, fuzzifier=m, partition=part(s), random_state=s)
                        .fit(X, y)
                        .labels_
                        for s in range(args.seeds)
                    ]
                    for m in FUZZIFIERS
                }
                for metric, score in metrics.items():
                    cells = [name, part_name]
                    for m in FUZZIFIERS:
                        v = [score(y, lab) for lab in fits[m]]
                        cells.append(f"{np.mean(v):.3f} ± {np.std(v):.3f}")
                    v = [score(y, lab) for lab in km]
                    cells.append(f"{np.mean(v):.3f} ± {np.std(v):.3f}")
                    tables[metric].append(cells)
                print(name, part_name, tables["NMI"][-1][2:], flush=True)
    header = ["data", "partition"] + [f"m = {m:g}" for m in FUZZIFIERS] + ["KMeans"]
    body = [
        f"{args.seeds} seeds (seed s draws the partition and the seeding); mean ± sd "
        f"(population); {N_CLIENTS} clients, aggregation v1, 10 rounds, one local iteration; "
        "data standardized on the pooled rows; KMeans(n_init=10) centralized. Whole script: "
        f"{(time.perf_counter() - t0) / 60:.1f} min, one thread.",
        machine_line(),
        "Command: `python benchmarks/fuzzifier_ffcm.py"
        + "".join(" " + a for a in (argv or sys.argv[1:]))
        + "`",
    ]
    for metric, rows in tables.items():
        body += [f"## {metric}", markdown_table(header, rows)]
    write_result("ffcm_fuzzifier", "FederatedFuzzyCMeans: the fuzzifier", "\n\n".join(body))


if __name__ == "__main__":
    main()
