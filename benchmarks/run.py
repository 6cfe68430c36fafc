"""Grid runner: data set × partition × method × seeds, with the fit times it measures.

Fits every federated estimator of the package with its defaults (plus the few settings of
``skfedclust._cli.DEMO_PARAMS``) next to centralized scikit-learn references, on the same
standardized data and the same simulated client splits. Writes two pages:

* ``benchmarks/results/grid.md``: ARI, NMI and accuracy of every cell, the ARI side by
  side against centralized k-means, and what one fit costs in bytes and rounds.
* ``benchmarks/results/grid_speed.md``: fit time of every estimator as a ratio to
  ``KMeans(n_init=10)`` on the same data, timed in the same run (the scaling to 200,000
  rows is ``speed_scale.py``'s ``speed.md``).

    python benchmarks/run.py                 # the published run (5 data sets, 5 seeds)
    python benchmarks/run.py --quick         # iris and wine, 2 seeds (grid_quick.md)
    python benchmarks/run.py --datasets iris digits --partitions iid dirichlet --seeds 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections import defaultdict
from contextlib import nullcontext
from pathlib import Path

import numpy as np
from sklearn.cluster import AgglomerativeClustering, KMeans, SpectralClustering
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    git_commit,
    machine_line,
    markdown_table,
    mean_std,
    timed,
    write_result,
)

from skfedclust import partition  # noqa: E402
from skfedclust._cli import DEMO_PARAMS, load  # noqa: E402
from skfedclust.metrics import clustering_accuracy  # noqa: E402
from skfedclust.utils import all_estimators  # noqa: E402

DATASETS = ["iris", "wine", "breast_cancer", "digits", "blobs"]

PARTITIONS = {
    "iid": lambda m, d, seed: partition.IIDPartition(m, random_state=seed),
    # Label skew: each client holds mostly a few classes.
    "dirichlet(0.3)": lambda m, d, seed: partition.DirichletPartition(
        m, 0.3, min_size=5, random_state=seed
    ),
    "noniid(p=0.5)": lambda m, d, seed: partition.NonIIDLevelPartition(
        0.5, n_clients=m, random_state=seed
    ),
    # Clusters fragmented across clients at different granularities (GOLD's setting).
    "nonicd": lambda m, d, seed: partition.NonICDPartition(m, random_state=seed),
    # Data split by features (every client holds every row) and by both.
    "vertical": lambda m, d, seed: partition.VerticalPartition(min(m, d), random_state=seed),
    "hybrid": lambda m, d, seed: partition.HybridPartition(max(m // 2, 1), 2, random_state=seed),
}
DEFAULT_PARTITIONS = ["iid", "dirichlet(0.3)", "nonicd", "vertical", "hybrid"]
ROW_SPLITS = {"iid", "dirichlet(0.3)", "noniid(p=0.5)", "nonicd"}

#: The reference of the ARI comparison and of the speed ratios.
REFERENCE = "KMeans (central)"
CENTRAL = {
    REFERENCE: lambda k, seed: KMeans(k, n_init=10, random_state=seed),
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
    }


def horizontal_only(exc):
    return "horizontal federations only" in str(exc)


def run_cell(est, X, y):
    """Fit once; the scores, the fit time and the ledger's counts, or why it did not run."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            _, seconds = timed(lambda: est.fit(X, y))
        except (ValueError, TypeError) as exc:
            if horizontal_only(exc):
                return {"not_applicable": True}
            return {"error": str(exc).splitlines()[0]}
    row = scores(y, est.labels_)
    row["time"] = seconds
    comm = getattr(est, "communication_", None)
    if comm:
        for key in ("bytes_up", "bytes_down", "bytes_peer", "rounds"):
            row[key] = comm.get(key, 0)
        row["setup_rounds"] = comm.get("setup_rounds", 0)
        row["evaluation_rounds"] = comm.get("evaluation_rounds", 0)
    return row


class _Args:
    def __init__(self, clients):
        self.clients = clients


def make_estimator(name, cls, k, spec, seed, clients):
    params = {"n_clusters": k, "partition": spec, "random_state": seed}
    params.update(DEMO_PARAMS.get(name, lambda a: {})(_Args(clients)))
    return cls(**params)


def warm_up(estimators, clients):
    """Fit each estimator once, untimed: compiled kernels are built on first use."""
    X, y = load("iris", 0)
    X = StandardScaler().fit_transform(X)
    for name, cls in estimators:
        spec = PARTITIONS["iid"](clients, X.shape[1], 0)
        run_cell(make_estimator(name, cls, 3, spec, 0, clients), X, y)


def threads_sentence(args):
    if not args.threads:
        return "Every fit used the libraries' default BLAS and OpenMP threads."
    return (
        f"Every fit, the reference included, ran with {args.threads} BLAS and OpenMP "
        f"thread{'s' if args.threads > 1 else ''} (`--threads`): on a busy machine a "
        "multi-threaded fit waits at each parallel region for a descheduled thread."
    )


def ratio(r):
    return f"{r:.0f}×" if r >= 10 else (f"{r:.1f}×" if r >= 1 else f"{r:.2f}×")


def command(argv):
    return " ".join(["python benchmarks/run.py", *argv])


def human_bytes(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def min_or_nan(values):
    values = [v for v in values if v == v]
    return min(values) if values else float("nan")


def grid_page(args, argv, results, not_applicable, errors, shapes, elapsed):
    methods = sorted({name for (_, _, name) in results if not name.endswith("(central)")})
    settings = ", ".join(
        f"`{name}({', '.join(f'{k}={v!r}' for k, v in make(_Args(args.clients)).items())})`"
        for name, make in DEMO_PARAMS.items()
    )
    header_text = (
        f"{args.seeds} seeds (0 to {args.seeds - 1}), {args.clients} clients, features "
        "standardized on the pooled data before the split; mean ± std over seeds. A seed "
        "drives the partition and every random choice of the methods. Every estimator runs "
        f"with its defaults except {settings}. Row splits: `iid`; `dirichlet(0.3)`, label "
        "skew (each client's class proportions drawn from a Dirichlet with concentration "
        "0.3); `nonicd`, clusters fragmented across clients at different granularities. "
        f"Feature splits: `vertical`, {args.clients} feature blocks (at most one per "
        "feature), every client holding every row; `hybrid`, "
        f"{max(args.clients // 2, 1)} row groups × 2 feature blocks. Centralized references "
        f"fit the pooled data once per seed. {threads_sentence(args)}"
    )
    datasets = ", ".join(f"{d} ({n} × {p}, k = {k})" for d, (n, p, k) in shapes.items())
    body = [
        header_text,
        f"Data sets: {datasets}.",
        machine_line(),
        f"Package at commit {git_commit()}. The whole run (this page and "
        f"[speed](grid_speed.md)) took {elapsed / 60:.1f} minutes.",
        f"Command: `{command(argv)}`",
    ]

    parts = list(args.partitions)

    def mean_ari(dataset, part, name):
        cells = results.get((dataset, part, name))
        if not cells:
            return None
        return float(np.mean([c["ARI"] for c in cells]))

    # The summary: one number per method and split, the mean over the data sets.
    body.append("## Summary: mean ARI over the data sets")
    body.append(
        f"Mean over the {len(shapes)} data sets of the per-data-set mean ARI (the next table "
        "has each data set). The centralized rows fit the pooled data, whatever the split."
    )
    rows = []
    for name in CENTRAL:
        value = np.mean([mean_ari(d, "central", name) for d in shapes])
        rows.append([name] + [f"{value:.2f}"] * len(parts))
    for m in methods:
        row = [m]
        for part in parts:
            values = [mean_ari(d, part, m) for d in shapes]
            if any(v is None for v in values):
                row.append("n/a" if all(v is None for v in values) else "—")
            else:
                row.append(f"{np.mean(values):.2f}")
        rows.append(row)
    body.append(markdown_table(["method"] + parts, rows))

    # The side-by-side view: ARI of every method, next to centralized k-means.
    body.append("## ARI side by side")
    body.append(
        "Mean ARI over seeds. `ref` is centralized `KMeans(n_init=10)` on the same data, "
        "`SC` centralized `SpectralClustering(affinity='nearest_neighbors')` (the fairer "
        "reference of the spectral methods, FedSC and OmniFC); `n/a`: the estimator accepts "
        "data split by rows only."
    )
    short = {m: m.replace("Clustering", "").replace("Federated", "Fed") for m in methods}
    rows = []
    for dataset in shapes:
        ref = mean_ari(dataset, "central", REFERENCE)
        sc = mean_ari(dataset, "central", "SpectralClustering (central)")
        for part in parts:
            row = [dataset, part, f"{ref:.2f}", f"{sc:.2f}"]
            for m in methods:
                cells = results.get((dataset, part, m))
                if (dataset, part, m) in not_applicable:
                    row.append("n/a")
                elif (dataset, part, m) in errors or not cells:
                    row.append("error")
                else:
                    row.append(f"{np.mean([c['ARI'] for c in cells]):.2f}")
            rows.append(row)
    header = ["data set", "partition", "ref", "SC"] + [short[m] for m in methods]
    body.append(markdown_table(header, rows))

    body.append("## Clustering quality")
    rows = []
    for (dataset, part, name), cells in results.items():
        if not cells:
            continue
        rows.append(
            [dataset, part, name] + [mean_std([c[m] for c in cells]) for m in ("ARI", "NMI", "ACC")]
        )
    body.append(markdown_table(["data set", "partition", "method", "ARI", "NMI", "ACC"], rows))

    body.append("## Communication and rounds")
    body.append(
        "Totals of one fit from `communication_`, mean over seeds: bytes sent to the "
        "server (`bytes_up`), from it (`bytes_down`) and between parties (`bytes_peer`); "
        "`rounds` of the protocol proper, `setup` rounds (key agreement, shared seeds) and "
        "`eval` rounds made after the fit to report `inertia_` (secure sums; they are "
        "not part of the clustering). The rounds do not depend on the seed except where "
        "an iterative method stops at convergence: then min–max over seeds."
    )
    rows = []
    for (dataset, part, name), cells in results.items():
        if not cells or "bytes_up" not in cells[0]:
            continue

        def span(key, cells=cells):
            values = [int(c[key]) for c in cells]
            lo, hi = min(values), max(values)
            return str(lo) if lo == hi else f"{lo}–{hi}"

        rows.append(
            [dataset, part, name]
            + [human_bytes(np.mean([c[k] for c in cells])) for k in ("bytes_up", "bytes_down")]
            + [human_bytes(np.mean([c["bytes_peer"] for c in cells]))]
            + [span("rounds"), span("setup_rounds"), span("evaluation_rounds")]
        )
    header = ["data set", "partition", "method", "bytes up", "bytes down", "bytes peer"]
    body.append(markdown_table(header + ["rounds", "setup", "eval"], rows))

    if not_applicable:
        body.append("## Not applicable")
        by_method = defaultdict(set)
        for _, part, name in not_applicable:
            by_method[name].add(part)
        body.append(
            "\n".join(
                f"- {name}: {', '.join(sorted(p))} (horizontal federations only)"
                for name, p in sorted(by_method.items())
            )
        )
    if errors:
        body.append("## Cells that could not run")
        body.append("\n".join(f"- {d} / {p} / {n}: {e}" for (d, p, n), e in errors.items()))
    return "\n\n".join(body)


def speed_page(args, argv, results, shapes, reference_times):
    methods = sorted({name for (_, _, name) in results if not name.endswith("(central)")})
    body = [
        "Fit time of every estimator on the grid's data sets, as a ratio to centralized "
        "`KMeans(n_init=10)` fitted on the same standardized data in the same run "
        f"([grid](grid.md): {args.seeds} seeds, {args.clients} clients). Per data set: the "
        "fastest of the federated fits over the seeds on the IID split (DCClustering also "
        "on the vertical split), the fastest of the KMeans fits (three per seed), and their "
        "ratio; the fastest time is the least disturbed by other processes. Every "
        "protocol runs all parties in one process and counts its messages; one untimed fit "
        "of each estimator precedes the run (compiled kernels are built on first use). "
        "Times on the small data sets are dominated by the per-round and per-step overhead "
        "of the simulation, not by arithmetic; for scaling to 100,000 rows and more see the "
        "methods' own speed pages.",
        f"{threads_sentence(args)} The machine is shared: other processes ran during the "
        f"measurement (load average {args.load[0]:.1f} at the start of the run, "
        f"{args.load[1]:.1f} at its end, on {os.cpu_count()} cores), so single times move "
        "with the load; compare methods within a column.",
        machine_line(),
        f"Package at commit {git_commit()}.",
        f"Command: `{command(argv)}`",
    ]
    ref = {d: min_or_nan(reference_times[d]) for d in shapes}
    header = ["method", "split"] + [f"{d} s (×)" for d in shapes]
    rows = [
        [REFERENCE, "—"] + [f"{ref[d]:.3f} (1.0×)" for d in shapes],
    ]
    for m in methods:
        for part in ("iid", "vertical"):
            if part not in args.partitions:
                continue
            times = {d: [c["time"] for c in results.get((d, part, m), [])] for d in shapes}
            if not any(times.values()):
                continue
            row = [m, part]
            for d in shapes:
                t = min_or_nan(times[d])
                row.append("—" if t != t else f"{t:.3f} ({ratio(t / ref[d])})")
            rows.append(row)
    body.append(markdown_table(header, rows))
    return "\n\n".join(body)


def run_grid(args):
    """Fit every cell; return what the two pages are written from."""
    start = time.perf_counter()
    load_start = os.getloadavg()[0]
    estimators = [(n, c) for n, c in all_estimators() if not args.methods or n in args.methods]
    warm_up(estimators, args.clients)
    results = defaultdict(list)
    not_applicable, errors, shapes = set(), {}, {}
    reference_times = defaultdict(list)
    for dataset in args.datasets:
        X, y = load(dataset, 0)
        X = StandardScaler().fit_transform(X)
        k = len(np.unique(y))
        shapes[dataset] = (X.shape[0], X.shape[1], k)
        for seed in range(args.seeds):
            for central_name, make in CENTRAL.items():
                results[(dataset, "central", central_name)].append(run_cell(make(k, seed), X, y))
            # The reference of the speed page is timed twice more: its fastest fit is the
            # least disturbed by the other processes of a shared machine.
            reference_times[dataset].append(results[(dataset, "central", REFERENCE)][-1]["time"])
            for _ in range(2):
                cell = run_cell(CENTRAL[REFERENCE](k, seed), X, y)
                reference_times[dataset].append(cell["time"])
            for part in args.partitions:
                spec = PARTITIONS[part](args.clients, X.shape[1], seed)
                for name, cls in estimators:
                    est = make_estimator(name, cls, k, spec, seed, args.clients)
                    row = run_cell(est, X, y)
                    if row.get("not_applicable"):
                        not_applicable.add((dataset, part, name))
                    elif "error" in row:
                        errors[(dataset, part, name)] = row["error"]
                    else:
                        results[(dataset, part, name)].append(row)
            print(f"{dataset}: seed {seed} done ({time.perf_counter() - start:.0f} s)", flush=True)
    args.load = (load_start, os.getloadavg()[0])
    return results, reference_times, not_applicable, errors, shapes, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=DATASETS)
    parser.add_argument(
        "--partitions", nargs="+", default=DEFAULT_PARTITIONS, choices=list(PARTITIONS)
    )
    parser.add_argument("--methods", nargs="+", default=None, help="estimator names")
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="iris and wine, 2 seeds")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="BLAS and OpenMP threads of every fit (0: the libraries' defaults)",
    )
    parser.add_argument(
        "--name",
        default=None,
        help="suffix of the results files (default: none; '_quick' with --quick)",
    )
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:
        args.datasets, args.seeds = ["iris", "wine"], 2
    suffix = args.name if args.name is not None else ("_quick" if args.quick else "")

    # One thread by default: on a shared machine a multi-threaded scikit-learn fit waits at
    # every parallel region for a descheduled thread; the reference KMeans took 0.12 s on
    # iris and 0.008 s on breast_cancer in one such run.
    limits = threadpool_limits(args.threads) if args.threads else nullcontext()
    with limits:
        results, reference_times, not_applicable, errors, shapes, elapsed = run_grid(args)

    # Pages of a partial run get their own names and titles: the docs publish every page
    # under its title, and bench_speed.py writes speed_ratios.md.
    tag = f" ({suffix.strip('_')})" if suffix else ""
    grid = grid_page(args, argv, results, not_applicable, errors, shapes, elapsed)
    write_result(f"grid{suffix}", f"Grid: every estimator on the demo data sets{tag}", grid)
    speed = speed_page(args, argv, results, shapes, reference_times)
    title = f"Speed on the demo data sets: fit time against centralized k-means{tag}"
    write_result(f"grid_speed{suffix}", title, speed)


if __name__ == "__main__":
    main()
