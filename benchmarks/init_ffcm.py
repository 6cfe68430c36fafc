"""FederatedFuzzyCMeans: the start that sends no row against the reconstruction's, on the grid.

Runs ``FederatedFuzzyCMeans`` with ``init="local-centers"`` (the default: the clients'
local k-means centers, each the mean of two or more rows) and ``init="k-means++-rows"``
(k-means++ seeds drawn from one client's rows and sent to the server), with aggregations
v1 (the default, by secure sums) or v2, on the data sets, row splits, clients and seeds
of the benchmark grid (``benchmarks/run.py``: standardized features, 5 clients), next to
centralized ``KMeans(n_init=10)``. Scores are ARI and NMI, mean ± std over seeds.

The parties run a deployed node's raw-row rule (``refuse-raw-rows``, so that the start's
local centers are those a default node sends: each the mean of two or more rows, none of
them a row), allow FFCM's release of rows by name (the k-means++ start) and count no
vectors (``min-rows-per-vector`` off, so that the rounds of small label-skewed clients run
for both starts alike).

Usage::

    python benchmarks/init_ffcm.py                    # v1; 5 data sets, 3 row splits, 5 seeds
    python benchmarks/init_ffcm.py --aggregations v2  # the same with v2
    python benchmarks/init_ffcm.py --quick            # iris and wine, 2 seeds

Writes ``benchmarks/results/ffcm_init.md`` (``ffcm_init_v2.md`` for v2; ``_quick`` with
``--quick``).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))
from _common import git_commit, machine_line, markdown_table, mean_std, write_result  # noqa: E402
from run import CENTRAL, DATASETS, PARTITIONS, REFERENCE, load, run_cell  # noqa: E402

from skfedclust import FederatedFuzzyCMeans  # noqa: E402
from skfedclust.federation import InProcessRuntime, use_runtime  # noqa: E402
from skfedclust.node import NodePolicy  # noqa: E402

ROW_SPLITS = ["iid", "dirichlet(0.3)", "nonicd"]
INITS = ["local-centers", "k-means++-rows"]
AGGREGATIONS = ["v1", "v2"]


def node_policy():
    """The parties' policy: a deployed node's raw-row rule, FFCM's row release allowed."""
    return NodePolicy(
        min_rows_per_vector=None,
        privacy_ledger=False,
        allow_row_release=("FederatedFuzzyCMeans",),
    )


def fit_on_nodes(est, X, y):
    with use_runtime(functools.partial(InProcessRuntime, policy=node_policy())):
        try:
            return run_cell(est, X, y)
        except PermissionError as exc:
            return {"error": str(exc).splitlines()[0]}


def variants(aggregations):
    return [(init, agg) for agg in aggregations for init in INITS]


def label(init, agg):
    return f"{init}, {agg}"


def run(args):
    results = defaultdict(list)
    errors = {}
    start = time.perf_counter()
    for dataset in args.datasets:
        X, y = load(dataset, 0)
        X = StandardScaler().fit_transform(X)
        k = len(np.unique(y))
        for seed in range(args.seeds):
            results[(dataset, "central", REFERENCE)].append(
                run_cell(CENTRAL[REFERENCE](k, seed), X, y)
            )
            for part in args.partitions:
                for init, agg in variants(args.aggregations):
                    est = FederatedFuzzyCMeans(
                        k,
                        init=init,
                        aggregation=agg,
                        partition=PARTITIONS[part](args.clients, X.shape[1], seed),
                        random_state=seed,
                    )
                    row = fit_on_nodes(est, X, y)
                    if "error" in row:
                        errors[(dataset, part, label(init, agg))] = row["error"]
                    else:
                        results[(dataset, part, label(init, agg))].append(row)
        print(f"{dataset} done ({time.perf_counter() - start:.0f} s)", flush=True)
    return results, errors, time.perf_counter() - start


def page(args, argv, results, errors, elapsed):
    names = [label(i, a) for i, a in variants(args.aggregations)]
    body = [
        f"{args.seeds} seeds (0 to {args.seeds - 1}), {args.clients} clients, the grid's "
        "data sets and row splits (`benchmarks/run.py`: features standardized on the pooled "
        "data, then split; a seed drives the partition and every random choice). "
        "`FederatedFuzzyCMeans(n_clusters=k)` with its defaults (10 rounds, fuzzifier 2, one "
        "local iteration, v1 by secure sums) except `init` and `aggregation`. "
        "`local-centers`: every client sends the centers of its local k-means (at most k, "
        "each the mean of two or more of its rows) with their row counts, the server runs "
        "weighted k-means on them; `k-means++-rows`: one random client sends k of its rows "
        "picked by k-means++. The parties refuse raw rows, as a deployed node does by "
        "default (the local centers are those a default node sends), allow FFCM's release "
        "of rows by name and count no vectors (so that small clients' rounds run for both "
        "starts). KMeans: centralized `KMeans(n_init=10)` on the pooled data. Mean ± std "
        "(population) over seeds.",
        machine_line(),
        f"Package at commit {git_commit()}. The run took {elapsed / 60:.1f} minutes, "
        "one BLAS/OpenMP thread.",
        "Command: `python benchmarks/init_ffcm.py" + "".join(" " + a for a in argv) + "`",
    ]

    def mean(dataset, part, name, metric):
        cells = results.get((dataset, part, name))
        return float(np.mean([c[metric] for c in cells])) if cells else float("nan")

    for metric in ("ARI", "NMI"):
        body.append(f"## Summary: mean {metric} over the data sets")
        rows = []
        for part in args.partitions:
            row = [part]
            for name in names:
                row.append(f"{np.mean([mean(d, part, name, metric) for d in args.datasets]):.3f}")
            ref = np.mean([mean(d, "central", REFERENCE, metric) for d in args.datasets])
            rows.append([*row, f"{ref:.3f}"])
        body.append(markdown_table(["partition", *names, "KMeans"], rows))
    for metric in ("ARI", "NMI"):
        body.append(f"## {metric} per data set")
        rows = []
        for dataset in args.datasets:
            ref = [c[metric] for c in results[(dataset, "central", REFERENCE)]]
            for part in args.partitions:
                row = [dataset, part]
                for name in names:
                    cells = results.get((dataset, part, name), [])
                    row.append(mean_std([c[metric] for c in cells]))
                rows.append([*row, mean_std(ref)])
        body.append(markdown_table(["data set", "partition", *names, "KMeans"], rows))
    body.append("## What one fit sends up (mean over the cells)")
    rows = []
    for name in names:
        up = [c["bytes_up"] for key, cells in results.items() if key[2] == name for c in cells]
        rounds = [c["rounds"] for key, cells in results.items() if key[2] == name for c in cells]
        rows.append([name, f"{np.mean(up) / 1024:.1f} KB", f"{np.mean(rounds):.1f}"])
    body.append(markdown_table(["variant", "bytes up", "rounds"], rows))
    if errors:
        body.append("## Cells that did not run")
        failed = [[" / ".join(key), error] for key, error in errors.items()]
        body.append(markdown_table(["cell", "error"], failed))
    return "\n\n".join(body)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=DATASETS)
    parser.add_argument("--partitions", nargs="+", default=ROW_SPLITS, choices=ROW_SPLITS)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--aggregations", nargs="+", default=["v1"], choices=AGGREGATIONS, help="default: v1"
    )
    parser.add_argument("--quick", action="store_true", help="iris and wine, 2 seeds")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:
        args.datasets, args.seeds = ["iris", "wine"], 2
    with threadpool_limits(1):
        results, errors, elapsed = run(args)
    name = "ffcm_init" + ("" if args.aggregations == ["v1"] else "_" + "_".join(args.aggregations))
    name += "_quick" if args.quick else ""
    title = "FederatedFuzzyCMeans: a start that sends no row against the reconstruction's"
    if args.aggregations != ["v1"]:
        title += f" ({', '.join(args.aggregations)})"
    write_result(name, title, page(args, argv, results, errors, elapsed))


if __name__ == "__main__":
    main()
