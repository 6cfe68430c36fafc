"""How cost grows: FederatedKMeans, KFed, FeCA and GOLD up to 10,000 clients and 2,000,000 rows.

Usage::

    python benchmarks/scale.py                          # every cell, then the page and plot
    python benchmarks/scale.py --methods KFed --cells clients:1000
    python benchmarks/scale.py --table-only             # the page from the stored cells

Two sweeps of ``make_blobs(n_features=10, centers=5, cluster_std=4)`` rows,
split into equal consecutive blocks, one per client: the number of clients
(10, 100, 1,000 and 10,000 clients of 100 rows) and the number of rows
(20,000, 200,000 and 2,000,000 rows over 10 clients). Every estimator runs
with its defaults and ``n_clusters=5`` (``FederatedKMeans`` in its default
coordinator mode for the size, which the table names), against scikit-learn's
``KMeans(5)`` on the pooled rows with the method's number of restarts
(``n_init``: 1 for FederatedKMeans, 10 for KFed and FeCA, 10 for GOLD as on
its speed page): the centralized clustering doing the same work, all four
being k-means-family clusterings.

Each (method, cell) runs in its own process: after an untimed warm-up on 10
small clients (imports, compiled kernels), whole ``fit`` calls alternate with
KMeans' in pairs (3 where a fit takes under 20 s, else 1); the table gives the
medians and the median of the paired ratios. Peak memory is the process's
``ru_maxrss`` (rows, warm-up and fits), next to the rows' own size. Bytes per
client are the ledger's (``communication_``): the mean over the clients of
everything a client received and sent in the fit. Cells are stored by key in
``benchmarks/results/scale.json``, so a slow cell can run on its own and join
the page; ``scale.png`` is the log-log plot of the fit times.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from _common import RESULTS, git_commit, machine_line, markdown_table, write_result  # noqa: E402

D, K, STD, ROWS_PER_CLIENT, SWEEP_CLIENTS = 10, 5, 4.0, 100, 10
#: Each measured estimator by its label: the class and what differs from its defaults.
ESTIMATORS = {
    "FederatedKMeans": ("FederatedKMeans", {}),
    "KFed": ("KFed", {}),
    "FeCA": ("FeCA", {}),
    "GOLDClustering": ("GOLDClustering", {}),
    # GOLD's server seeds its first competition with half the clients'
    # micro-centroids (the authors' 0.5): a pass costs their number squared.
    # A fixed count keeps the server linear in the clients.
    "GOLDClustering(server_init=256)": ("GOLDClustering", {"server_init": 256}),
}
METHODS = tuple(ESTIMATORS)
#: ``sweep:size``: clients (of 100 rows) or rows (over 10 clients).
CELLS = (
    "clients:10",
    "clients:100",
    "clients:1000",
    "clients:10000",
    "rows:20000",
    "rows:200000",
    "rows:2000000",
)
#: A cell's process is stopped after this long (the table says so).
TIMEOUT = 1800
#: Fits shorter than this run in 3 pairs, longer ones in 1.
SHORT_FIT = 20.0


def _split(cell):
    sweep, size = cell.split(":")
    size = int(size)
    if sweep == "clients":
        return size, size * ROWS_PER_CLIENT
    return SWEEP_CLIENTS, size


def _problem(cell):
    from sklearn.datasets import make_blobs

    n_clients, n_rows = _split(cell)
    X, y = make_blobs(n_rows, n_features=D, centers=K, cluster_std=STD, random_state=0)
    return X, y, np.split(X, n_clients)


def _estimator(method):
    import skfedclust

    name, params = ESTIMATORS[method]
    return getattr(skfedclust, name)(K, random_state=0, **params)


def _reference(method):
    """scikit-learn's ``KMeans`` with the method's restarts (GOLD: 10, as its speed page)."""
    from sklearn.cluster import KMeans

    return KMeans(K, n_init=_restarts(method), random_state=0)


def _restarts(method):
    if method.startswith("GOLDClustering"):
        return 10
    return _estimator(method).get_params().get("n_init", 1)


def _timed_fit(model, data):
    wall, cpu = time.perf_counter(), time.process_time()
    model.fit(data)
    return time.perf_counter() - wall, time.process_time() - cpu


def run_cell(method, cell):
    """One method on one cell in this process; prints one ``RESULT`` JSON line."""
    import warnings

    from sklearn.metrics import adjusted_rand_score

    warnings.simplefilter("ignore")
    X, y, clients = _problem(cell)
    _estimator(method).fit(_problem("clients:10")[2])
    _reference(method).fit(X[:1000])
    fed, fed_cpu, ref, model, reference = [], [], [], None, None
    while not fed or (len(fed) < 3 and max(fed) < SHORT_FIT):
        reference = _reference(method)
        ref.append(_timed_fit(reference, X)[0])
        model = _estimator(method)
        wall, cpu = _timed_fit(model, clients)
        fed.append(wall)
        fed_cpu.append(cpu)
    com = model.communication_
    per = com["per_client"]
    n_clients = len(clients)
    moved = sum(np.asarray(per[key][:n_clients], dtype=float) for key in per)
    out = {
        "fed": fed,
        "fed_cpu": fed_cpu,
        "ref": ref,
        "mode": getattr(model, "coordinator_", ""),
        "rounds": int(com["rounds"]),
        "setup_rounds": int(com["setup_rounds"]),
        "bytes_per_client": float(moved.mean()),
        "ari": float(adjusted_rand_score(y, np.asarray(model.labels_))),
        "ari_ref": float(adjusted_rand_score(y, reference.labels_)),
        "ref_n_init": int(reference.n_init),
        "data_mb": X.nbytes / 1e6,
        # ru_maxrss is in KiB on Linux.
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "load": os.getloadavg()[0],
    }
    print("RESULT " + json.dumps(out), flush=True)


def _measure(method, cell):
    command = [sys.executable, __file__, "--cell", method, cell]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"failed": f"stopped after {TIMEOUT // 60} minutes"}
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if not lines:
        print(done.stderr[-2000:], file=sys.stderr)
        return {"failed": (done.stderr.strip().splitlines() or ["no output"])[-1][:160]}
    return {**json.loads(lines[0][len("RESULT ") :]), "commit": git_commit()}


def _key(method, cell):
    return f"{method}|{cell}"


def _cell_order(key):
    method, cell = key.split("|")
    sweep, size = cell.split(":")
    return METHODS.index(method), sweep, int(size)


def _row(key, r):
    method, cell = key.split("|")
    n_clients, n_rows = _split(cell)
    head = [method, f"{n_clients:,}", f"{n_rows:,}"]
    if "failed" in r:
        return head + [f"failed: {r['failed']}"] + [""] * 10
    ratio = statistics.median(f / g for f, g in zip(r["fed"], r["ref"]))
    mode = f"`{r['mode']}`" if r["mode"] else ""
    return head + [
        mode,
        f"{statistics.median(r['fed']):.3g}",
        f"{statistics.median(r['fed_cpu']):.3g}",
        f"{statistics.median(r['ref']):.3g} ({r.get('ref_n_init', 1)})",
        f"{ratio:.3g}×",
        f"{r['rounds']} + {r['setup_rounds']}",
        f"{r['bytes_per_client'] / 1024:,.1f}",
        f"{r['peak_mb']:,.0f} / {r['data_mb']:,.0f}",
        f"{r['ari']:.2f} / {r['ari_ref']:.2f}",
        f"{len(r['fed'])}",
        str(r.get("commit", "")),
    ]


HEADER = [
    "method",
    "clients",
    "rows",
    "mode",
    "fit s",
    "fit CPU s",
    "KMeans s (n_init)",
    "ratio",
    "rounds + set-up",
    "KiB / client",
    "peak MB / rows' MB",
    "ARI (truth) / KMeans'",
    "pairs",
    "commit",
]


NOTES = """## Notes

**Per client, the cost stays flat with the federation's size.** A client's bytes do not
grow from 100 to 10,000 clients for `FederatedKMeans` (`verified` above 50 clients:
masks from about 2 log2 n neighbours' seeds, one upload and the total back per round),
KFed and FeCA (their local centers, once); GOLD's grow as the log of the clients (the
neighbours of its secure sums). The fit's time grows with the clients because this
machine runs every client in turn; per client it stays within a small factor.

**GOLD's server grows with the square of the clients.** Its first server competition is
seeded with half the clients' micro-centroids (`server_init=0.5`, the authors' choice),
and each competition pass compares every micro-centroid with every seed: at 10,000
clients (100,000 micro-centroids) the fit was stopped after 30 minutes. A fixed count of
seeds (`server_init=256`, its own rows) keeps the server linear in the clients.

**Along the rows, the clients' local k-means dominates.** Every method here runs k-means
on each client's rows: KFed's and FeCA's local step, GOLD's micro-clusters, and
`FederatedKMeans`' default start (a local k-means with 10 restarts on each client, then
weighted k-means++ on the local centers). Against `KMeans` from the same start,
`FederatedKMeans`' whole fit is within 1.5x at 2,000,000 rows (`whole_fit.md`)."""


def plot(cells, out):
    """Log-log fit times of both sweeps to ``out`` (a PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for ax, sweep, label in (
        (axes[0], "clients", f"clients ({ROWS_PER_CLIENT} rows each)"),
        (axes[1], "rows", f"rows (over {SWEEP_CLIENTS} clients)"),
    ):
        reference = {}
        for method in METHODS:
            points = []
            for key, r in cells.items():
                name, cell = key.split("|")
                if name != method or not cell.startswith(sweep) or "failed" in r:
                    continue
                x = int(cell.split(":")[1])
                points.append((x, statistics.median(r["fed"])))
                restarts = reference.setdefault(r.get("ref_n_init", 1), {})
                restarts.setdefault(x, []).extend(r["ref"])
            if points:
                xs, ys = zip(*sorted(points))
                ax.loglog(xs, ys, marker="o", label=method)
        for n_init, style in ((1, "--"), (10, ":")):
            if n_init in reference:
                xs = sorted(reference[n_init])
                ax.loglog(
                    xs,
                    [statistics.median(reference[n_init][x]) for x in xs],
                    marker="s",
                    linestyle=style,
                    color="black",
                    label=f"KMeans(n_init={n_init}), pooled rows",
                )
        ax.set_xlabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("whole fit, seconds")
    axes[0].legend(fontsize=8)
    figure.suptitle("Fit time as the federation grows (log-log)")
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    print(f"wrote {out}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--cells", nargs="+", default=list(CELLS), choices=CELLS)
    parser.add_argument("--cell", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--table-only", action="store_true", help="render the stored cells")
    parser.add_argument("--note", default="", help="a sentence on the conditions of the run")
    args = parser.parse_args(argv)
    if args.cell:
        run_cell(*args.cell)
        return
    store = RESULTS / "scale.json"
    cells = json.loads(store.read_text()) if store.exists() else {}
    started = time.perf_counter()
    todo = [] if args.table_only else [(m, c) for c in args.cells for m in args.methods]
    for method, cell in todo:
        result = _measure(method, cell)
        print(method, cell, json.dumps(result)[:300], flush=True)
        # Cells measured meanwhile by another run are kept.
        cells = json.loads(store.read_text()) if store.exists() else {}
        cells[_key(method, cell)] = result
        store.write_text(json.dumps(cells, indent=1, sort_keys=True) + "\n")
    plot(cells, RESULTS / "scale.png")
    rows = [_row(key, cells[key]) for key in sorted(cells, key=_cell_order)]
    minutes = (time.perf_counter() - started) / 60
    body = "\n\n".join(
        [
            f"Generated by `python benchmarks/scale.py`. Rows of `make_blobs(n_features={D}, "
            f"centers={K}, cluster_std={STD:g})` in equal consecutive blocks, one per client: "
            f"{ROWS_PER_CLIENT} rows a client from 10 to 10,000 clients, then 20,000 to "
            f"2,000,000 rows over {SWEEP_CLIENTS} clients. Each estimator with its defaults and "
            f"`n_clusters={K}`, secure sums on where it has them, on the in-process runtime, "
            f"against scikit-learn's `KMeans({K})` on the pooled rows with the method's "
            "restarts (`n_init`, in brackets: 1 for FederatedKMeans, 10 for KFed and FeCA, 10 "
            "for GOLD as on its speed page), the centralized clustering doing the same work. "
            "Whole `fit` calls, each (method, size) in its own process after an untimed "
            f"warm-up, alternating with KMeans pair by pair (3 pairs where a fit takes under "
            f"{SHORT_FIT:g} s, else 1; `pairs`); times are medians, the ratio the median of the "
            "paired ratios.",
            "**mode**: the coordinator mode `FederatedKMeans` chose for the size "
            '(`coordinator="auto"`: `blind` from 3 to 50 clients, `verified` above). '
            "**rounds + set-up**: the protocol's rounds and its set-up rounds. "
            "**KiB / client**: everything a client received and sent in the whole fit (the "
            "ledger's per-client counts, mean over the clients). **peak MB**: the process's "
            "`ru_maxrss` (rows, warm-up and fits), next to the size of the rows. **ARI**: "
            "against the blobs' labels, the estimator's and KMeans'.",
            machine_line()
            + f" Two cores; load average at the end of each cell in `scale.json`. {args.note}",
            f"This page's last run took {minutes:.0f} minutes; each row names the commit it "
            "measured (`--methods M --cells sweep:size` measures cells apart and stores them).",
            "![Fit time against clients and rows, log-log](scale.png)",
            markdown_table(HEADER, rows),
            NOTES,
        ]
    )
    write_result("scale", "How cost grows with clients and rows", body)


if __name__ == "__main__":
    main()
