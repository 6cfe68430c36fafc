"""Grid runner: data set × partition × method × seeds.

Records NMI, ARI, clustering accuracy, Kappa, fit time and bytes for every federated
estimator of the package, next to centralized scikit-learn reference rows, and writes
``benchmarks/results/grid.md``.

    python benchmarks/run.py --quick
    python benchmarks/run.py --datasets iris digits --partitions iid dirichlet --seeds 5
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
from sklearn.cluster import AgglomerativeClustering, KMeans, SpectralClustering
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine_line, markdown_table, mean_std, timed, write_result  # noqa: E402

from skfedclust import partition  # noqa: E402
from skfedclust._cli import DEMO_PARAMS, load  # noqa: E402
from skfedclust.metrics import clustering_accuracy, kappa  # noqa: E402
from skfedclust.utils import all_estimators  # noqa: E402

PARTITIONS = {
    "iid": lambda m, seed: partition.IIDPartition(m, random_state=seed),
    "dirichlet(0.3)": lambda m, seed: partition.DirichletPartition(
        m, 0.3, min_size=5, random_state=seed
    ),
    "noniid(p=0.5)": lambda m, seed: partition.NonIIDLevelPartition(
        0.5, n_clients=m, random_state=seed
    ),
    "nonicd": lambda m, seed: partition.NonICDPartition(m, random_state=seed),
}

CENTRAL = {
    "KMeans (central)": lambda k, seed: KMeans(k, n_init=10, random_state=seed),
    "SpectralClustering (central)": lambda k, seed: SpectralClustering(
        k, affinity="nearest_neighbors", random_state=seed
    ),
    "Agglomerative ward (central)": lambda k, seed: AgglomerativeClustering(k),
}


def scores(y, labels):
    return {
        "NMI": normalized_mutual_info_score(y, labels),
        "ARI": adjusted_rand_score(y, labels),
        "ACC": clustering_accuracy(y, labels),
        "Kappa": kappa(y, labels),
    }


def run_cell(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            _, seconds = timed(lambda: est.fit(X, y))
        except (ValueError, TypeError) as exc:
            return {"error": str(exc).splitlines()[0]}
    row = scores(y, est.labels_)
    row["time"] = seconds
    comm = getattr(est, "communication_", None)
    if comm:
        row.update(up=comm["bytes_up"], down=comm["bytes_down"], rounds=comm["rounds"])
    return row


class _Args:
    def __init__(self, clients):
        self.clients = clients


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["iris", "wine", "digits", "s1"])
    parser.add_argument("--partitions", nargs="+", default=list(PARTITIONS))
    parser.add_argument("--methods", nargs="+", default=None, help="estimator names")
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="iris and wine, 2 seeds")
    parser.add_argument("--name", default="grid", help="results file name")
    args = parser.parse_args(argv)
    if args.quick:
        args.datasets, args.seeds = ["iris", "wine"], 2

    estimators = [(n, c) for n, c in all_estimators() if not args.methods or n in args.methods]
    results = defaultdict(list)
    errors = {}
    for dataset in args.datasets:
        X, y = load(dataset, 0)
        X = StandardScaler().fit_transform(X)
        k = len(np.unique(y))
        for seed in range(args.seeds):
            for central_name, make in CENTRAL.items():
                results[(dataset, "central", central_name)].append(run_cell(make(k, seed), X, y))
            for part in args.partitions:
                spec = PARTITIONS[part](args.clients, seed)
                for name, cls in estimators:
                    params = {"n_clusters": k, "partition": spec, "random_state": seed}
                    params.update(DEMO_PARAMS.get(name, lambda a: {})(_Args(args.clients)))
                    row = run_cell(cls(**params), X, y)
                    if "error" in row:
                        errors[(dataset, part, name)] = row["error"]
                    else:
                        results[(dataset, part, name)].append(row)
            print(f"{dataset}: seed {seed} done", flush=True)

    header = ["data set", "partition", "method", "NMI", "ARI", "ACC", "Kappa", "fit s"]
    header += ["bytes up", "bytes down", "rounds"]
    rows = []
    for (dataset, part, name), cells in results.items():
        if not cells:
            continue

        def col(key, cells=cells):
            return [c.get(key, np.nan) for c in cells]

        rows.append(
            [dataset, part, name]
            + [mean_std(col(m)) for m in ("NMI", "ARI", "ACC", "Kappa")]
            + [mean_std(col("time"), "{:.2f}")]
            + [
                "—" if "up" not in cells[0] else f"{int(np.mean(col('up'))):,}",
                "—" if "down" not in cells[0] else f"{int(np.mean(col('down'))):,}",
                cells[0].get("rounds", "—"),
            ]
        )
    body = [
        f"{args.seeds} seeds, {args.clients} clients, standardised features; mean ± std "
        "over seeds. Seeds drive the partition and every random choice of the methods.",
        machine_line(),
        f"Command: `python benchmarks/run.py {' '.join(argv or sys.argv[1:])}`",
        markdown_table(header, rows),
    ]
    if errors:
        body.append("Cells that could not run:\n")
        body.append("\n".join(f"- {d} / {p} / {n}: {e}" for (d, p, n), e in errors.items()))
    write_result(args.name, "Grid: data set × partition × method", "\n\n".join(body))


if __name__ == "__main__":
    main()
