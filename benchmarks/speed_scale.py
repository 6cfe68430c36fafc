"""Every estimator at n = 2,000 / 20,000 / 200,000 against its centralized scikit-learn match.

One table, one run: for each estimator of the package and each size, the fit time of
the estimator with its defaults on ten IID clients and that of the centralized
scikit-learn estimator that computes the same kind of clustering on the pooled rows,
timed in alternating pairs in the same process (reference, then federated), and the
median of the pairs' ratios. Writes ``benchmarks/results/speed.md``.

    python benchmarks/speed_scale.py                     # the published run
    python benchmarks/speed_scale.py --sizes 2000 20000  # a subset
    python benchmarks/speed_scale.py --only KFed GOLDClustering

Each (estimator, size) runs in its own process, stopped after ``--budget`` seconds: a
method whose cost grows with the square of the rows (OmniFC's secure distance matrix)
then shows how far it got instead of holding up the table for an hour. Data: blobs with
20 features and 10 centers, standardized; every fit uses the libraries' default threads
(both cores), ``n_jobs`` left at its default.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from _common import git_commit, machine_line, markdown_table, write_result  # noqa: E402

SIZES = (2_000, 20_000, 200_000)
N_CLIENTS, N_CLUSTERS, N_FEATURES = 10, 10, 20
#: Alternating pairs per cell: fewer where one fit takes long.
PAIRS = {2_000: 5, 20_000: 3, 200_000: 2}


SPECTRAL = ("OmniFCClustering", "FedSpectralClustering")


def references(method):
    """The centralized scikit-learn estimators a method is compared with (their names).

    k-means-like methods: ``KMeans`` with the method's own number of restarts
    (GOLD: ``n_init=10``, the reference of its speed goal). The two spectral methods
    default to a spectral clustering of a nearest-neighbour graph: scikit-learn's
    ``SpectralClustering`` with its defaults (ARPACK), and with pyamg's multigrid
    solver, which the package's own spectral clusterer picks from 20,000 vertices.
    """
    from skfedclust.utils import all_estimators

    if method in SPECTRAL:
        return [
            'SpectralClustering(affinity="nearest_neighbors")',
            'SpectralClustering(affinity="nearest_neighbors", eigen_solver="amg")',
        ]
    n_init = dict(all_estimators())[method]().get_params().get("n_init", 1)
    if method == "GOLDClustering":
        n_init = 10
    note = " (no fuzzy c-means in scikit-learn)" if method == "FederatedFuzzyCMeans" else ""
    return [f"KMeans(n_init={n_init}){note}"]


def _data(n):
    from sklearn.datasets import make_blobs
    from sklearn.preprocessing import StandardScaler

    X, _ = make_blobs(n, n_features=N_FEATURES, centers=N_CLUSTERS, random_state=0)
    return StandardScaler().fit_transform(X)


def _reference(name):
    """A fresh centralized estimator from its name in :func:`references`."""
    from sklearn.cluster import KMeans, SpectralClustering

    if name.startswith("SpectralClustering"):
        solver = "amg" if "amg" in name else None
        return SpectralClustering(
            N_CLUSTERS, affinity="nearest_neighbors", eigen_solver=solver, random_state=0
        )
    n_init = int(name.split("n_init=")[1].split(")")[0])
    return KMeans(N_CLUSTERS, n_init=n_init, random_state=0)


def _federated(method):
    """The estimator with the grid's settings (``run.py``: the demo's, ten IID clients)."""
    from run import make_estimator

    from skfedclust import partition
    from skfedclust.utils import all_estimators

    spec = partition.IIDPartition(N_CLIENTS, random_state=0)
    cls = dict(all_estimators())[method]
    return make_estimator(method, cls, N_CLUSTERS, spec, 0, N_CLIENTS)


def run_cell(method, reference, n, pairs, sides):
    """Alternating pairs in this process; one JSON line before and after every fit."""
    import warnings

    warnings.simplefilter("ignore")
    makers = {
        "reference": lambda: _reference(reference),
        "federated": lambda: _federated(method),
    }
    X = _data(n)
    # One untimed fit of each first: imports, and compiled kernels loaded from
    # numba's cache. On the cell's own rows: some kernels run only on large
    # clients (the Lloyd pass from 2,048 rows). The spectral methods, whose
    # cost grows with the square of the rows, warm up on 2,000.
    warm = _data(2_000) if method in SPECTRAL else X
    for side in sides:
        makers[side]().fit(warm)
    for _ in range(pairs):
        for side in sides:
            estimator = makers[side]()
            print(json.dumps({"start": side}), flush=True)
            start = time.perf_counter()
            try:
                estimator.fit(X)
            except (MemoryError, ValueError) as exc:
                print(json.dumps({"error": f"{side}: {str(exc).splitlines()[0]}"}), flush=True)
                return
            print(json.dumps({side: time.perf_counter() - start}), flush=True)


def _run_child(method, reference, n, pairs, sides, budget):
    """Run :func:`run_cell` in a process, stopping it when one fit outlasts ``budget``.

    Returns the times per side, the side that was stopped (or None), an error
    message (or None).
    """
    command = [sys.executable, __file__, "--cell", method, reference, str(n), str(pairs)]
    # stderr to a file: a pipe nobody reads while the child runs could fill and block it.
    errors = tempfile.TemporaryFile("w+")
    child = subprocess.Popen([*command, *sides], stdout=subprocess.PIPE, stderr=errors, text=True)
    lines = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(x) for x in child.stdout] + [lines.put(None)], daemon=True
    ).start()
    times = {"reference": [], "federated": []}
    running, stopped, error = None, None, None
    while True:
        try:
            line = lines.get(timeout=budget if running else 120 + budget)
        except queue.Empty:
            child.kill()
            stopped = running or "set-up"
            break
        if line is None:
            break
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        running = record.get("start")
        error = record.get("error", error)
        for side in times:
            if record.get(side) is not None:
                times[side].append(record[side])
    child.wait()
    if child.returncode and stopped is None and error is None:
        errors.seek(0)
        error = (errors.read().strip().splitlines() or ["no message"])[-1][:200]
    return times, stopped, error


#: Fits stopped at the budget, by (estimator, size): the next reference row of
#: the same estimator does not wait for it again.
_STOPPED = set()


def measure(method, reference, n, pairs, budget):
    """Times of a cell: the sides in alternating pairs, a stopped side's partner alone."""
    sides = ["reference", "federated"]
    if (method, n) in _STOPPED:
        sides = ["reference"]
    times, stopped, error = _run_child(method, reference, n, pairs, sides, budget)
    if stopped in sides:
        if stopped == "federated":
            _STOPPED.add((method, n))
        # The partner of a stopped fit, alone: one fit, within the same budget.
        others = [side for side in sides if side != stopped and not times[side]]
        if others:
            more, stopped_too, error = _run_child(method, reference, n, 1, others, budget)
            for side in others:
                times[side] += more[side]
            if stopped_too in others:
                stopped = "both"
                if stopped_too == "federated":
                    _STOPPED.add((method, n))
    if (method, n) in _STOPPED and stopped != "federated":
        stopped = "federated" if stopped is None else "both"
    return times, stopped, error


def cell_text(times, stopped, error, budget):
    """``federated s / reference s = ratio`` of a cell, or why it has none."""
    fed, ref = times["federated"], times["reference"]
    if error:
        return f"refused: {error}"

    def side(values, name):
        if values:
            return _seconds(statistics.median(values))
        if stopped in (name, "both"):
            return f"over {budget:.0f}"
        return "—"

    if not (fed and ref):
        return f"{side(fed, 'federated')} / {side(ref, 'reference')} (stopped)"
    ratios = [f / r for f, r in zip(fed, ref)]
    ratio = statistics.median(ratios)
    return f"{side(fed, 'federated')} / {side(ref, 'reference')} = **{ratio:.2f}×**"


def _seconds(t):
    """Three significant figures (0.00412, 41.2, 412)."""
    return f"{t:.3g}" if t < 1000 else f"{t:,.0f}"


def _load():
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    parser.add_argument("--only", nargs="+", default=None, help="estimator names")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds one fit may take")
    parser.add_argument(
        "--cell", nargs="+", metavar="METHOD REFERENCE N PAIRS SIDE", help=argparse.SUPPRESS
    )
    parser.add_argument("--out", default="speed", help="results page name")
    args = parser.parse_args(argv)
    if args.cell:
        run_cell(args.cell[0], args.cell[1], int(args.cell[2]), int(args.cell[3]), args.cell[4:])
        return
    from skfedclust.utils import all_estimators

    methods = [name for name, _ in all_estimators() if not args.only or name in args.only]
    load_before, start = _load(), time.perf_counter()
    rows = []
    for method in methods:
        for reference in references(method):
            row = [method, reference]
            for n in args.sizes:
                times, stopped, error = measure(method, reference, n, PAIRS.get(n, 2), args.budget)
                row.append(cell_text(times, stopped, error, args.budget))
                print(f"{method} vs {reference} n={n:,}: {row[-1]}", flush=True)
            rows.append(row)
    elapsed = time.perf_counter() - start
    header = ["estimator", "scikit-learn reference"] + [
        f"n={n:,}: federated / reference s (ratio)" for n in args.sizes
    ]
    argv_text = " ".join(argv if argv is not None else sys.argv[1:])
    pairs = ", ".join(f"{PAIRS.get(n, 2)} at n={n:,}" for n in args.sizes)
    body = "\n\n".join(
        [
            "Fit time of every estimator, package defaults on ten IID clients "
            "(`IIDPartition(10)`; `n_parties=10` (one per client) for OmniFC, "
            "`weighted=True` for Kumar, as in the demo), against the centralized "
            "scikit-learn estimator that computes the same kind of clustering on the "
            "pooled rows. Data: "
            f"`make_blobs(n, n_features={N_FEATURES}, centers={N_CLUSTERS})`, standardized, "
            f"k = {N_CLUSTERS}. Reference and federated fits alternate in pairs in one "
            f"process per estimator and size ({pairs}), after one untimed fit of each on the "
            "same rows (on 2,000 rows for the two spectral methods); a cell gives the "
            "medians of the times and, in bold, the median of "
            "the pairs' ratios. Every fit uses the libraries' default threads (both cores); "
            "the spectral methods are compared with scikit-learn's `SpectralClustering` with "
            "its default eigensolver (ARPACK) and with pyamg's multigrid, which the "
            "package's own spectral clusterer picks from 20,000 vertices. A fit still running "
            f"after {args.budget:.0f} s is stopped: its cell says `over` that time, and the "
            "other side is then timed once on its own.",
            machine_line(),
            f"Package at commit {git_commit()}. Load average (1/5/15 min) {load_before} at "
            f"the start, {_load()} at the end; the run took {elapsed / 60:.0f} minutes.",
            f"Command: `python benchmarks/speed_scale.py{' ' + argv_text if argv_text else ''}`",
            "## Fit time against centralized scikit-learn",
            markdown_table(header, rows),
        ]
    )
    write_result(args.out, "Speed: every estimator at three sizes", body)


if __name__ == "__main__":
    main()
