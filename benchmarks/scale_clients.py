"""FederatedKMeans with secure sums on 10 to 10,000 clients: time, bytes and memory per client.

Usage::

    python benchmarks/scale_clients.py                       # the published table
    python benchmarks/scale_clients.py --clients 10 100 1000
    python benchmarks/scale_clients.py --profile 300         # cProfile of one fit

Every client holds 100 rows of ``make_blobs(n_features=10, centers=5,
cluster_std=4)``; the fit starts from a fixed array (``init=array``, the
first 5 rows), runs 10 Lloyd iterations (``tol=0``, ``max_iter=10``) with
secure sums on, on the in-process runtime. Each size runs in its own process
(its peak resident memory is that process's ``ru_maxrss``), timing the fit
and scikit-learn's ``KMeans`` from the same start on the pooled rows in
alternating pairs. Bytes come from the runtime's ledger
(``communication_``): the mean per client per round of what the server sent
(down) and of what a client sent to the server (up) and to its peers.
Writes ``benchmarks/results/scale_clients.md``.
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
from _common import (  # noqa: E402
    RESULTS as RESULTS_DIR,
)
from _common import git_commit, machine_line, markdown_table, write_result  # noqa: E402

ROWS, D, K, ITERATIONS, STD = 100, 10, 5, 10, 4.0
CLIENTS = (10, 100, 1_000, 10_000)
#: Alternating pairs per size: fewer where a fit takes long.
PAIRS = {10: 5, 100: 3, 1_000: 1, 10_000: 1}


def _problem(n_clients):
    from sklearn.datasets import make_blobs

    # Overlapping blobs from their first rows: Lloyd runs all its iterations.
    X, _ = make_blobs(ROWS * n_clients, n_features=D, centers=K, cluster_std=STD, random_state=0)
    clients = np.split(X, n_clients)
    return X, clients, X[:K].copy()


#: The mode measured (``--coordinator``): the coordinator adding the sums by
#: default; ``verified``, the nodes computing and checking the totals it adds.
COORDINATOR = "sees-totals"


def _federated(start):
    from skfedclust import FederatedKMeans

    return FederatedKMeans(
        K,
        init=start,
        n_init=1,
        max_iter=ITERATIONS,
        tol=0.0,
        coordinator=COORDINATOR,
        random_state=0,
    )


def _reference(start):
    from sklearn.cluster import KMeans

    return KMeans(K, init=start, n_init=1, max_iter=ITERATIONS, tol=0.0, random_state=0)


def run_cell(n_clients, pairs):
    """One size in this process: alternating pairs, then one JSON line."""
    import warnings

    warnings.simplefilter("ignore")
    X, clients, start = _problem(n_clients)
    if n_clients <= 1_000:
        # Imports and compiled kernels, untimed (a fit of 10,000 clients is its own warm-up).
        _federated(start).fit(_problem(10)[1])
    _reference(start).fit(X)
    fed, ref, fed_cpu, ref_cpu, model = [], [], [], [], None
    for _ in range(pairs):
        t, c = time.perf_counter(), time.process_time()
        _reference(start).fit(X)
        ref.append(time.perf_counter() - t)
        ref_cpu.append(time.process_time() - c)
        model = _federated(start)
        t, c = time.perf_counter(), time.process_time()
        model.fit(clients)
        fed.append(time.perf_counter() - t)
        fed_cpu.append(time.process_time() - c)
    com = model.communication_
    rounds = com["rounds"] + com["setup_rounds"] + com["evaluation_rounds"]
    per = com["per_client"]
    sizes = {
        key: float(np.mean(per[key][:n_clients])) / rounds
        for key in ("bytes_down", "bytes_up", "bytes_peer_sent")
    }
    out = {
        "fed": fed,
        "ref": ref,
        "fed_cpu": fed_cpu,
        "ref_cpu": ref_cpu,
        "rounds": com["rounds"],
        "setup_rounds": com["setup_rounds"],
        "evaluation_rounds": com["evaluation_rounds"],
        "n_iter": int(model.n_iter_),
        "bytes_down": sizes["bytes_down"],
        "bytes_up": sizes["bytes_up"],
        "bytes_peer": sizes["bytes_peer_sent"],
        "total_down_per_client": float(np.mean(per["bytes_down"][:n_clients])),
        "load": os.getloadavg()[0],
        # ru_maxrss is in KiB on Linux.
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print("RESULT " + json.dumps(out), flush=True)


def profile(n_clients, iterations, out):
    """cProfile of one fit (after a warm-up) to ``out``; prints the top functions."""
    import cProfile
    import pstats

    global ITERATIONS
    ITERATIONS = iterations
    _, clients, start = _problem(n_clients)
    _federated(start).fit(_problem(10)[1])
    profiler = cProfile.Profile()
    t = time.perf_counter()
    profiler.enable()
    _federated(start).fit(clients)
    profiler.disable()
    print(f"fit of {n_clients} clients, {iterations} iterations: {time.perf_counter() - t:.2f} s")
    profiler.dump_stats(out)
    stats = pstats.Stats(out)
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(30)


def _row(n, r):
    if "failed" in r:
        return [f"{n:,}", f"failed: {r['failed']}"]
    fed, ref = statistics.median(r["fed"]), statistics.median(r["ref"])
    ratio = statistics.median(f / g for f, g in zip(r["fed"], r["ref"]))
    row = [
        f"{n:,}",
        f"{n * ROWS:,}",
        f"{fed:.3g}",
        f"{statistics.median(r['fed_cpu']):.3g}",
        f"{ref:.3g}",
        f"{ratio:.0f}×",
        f"{r['n_iter']}",
        f"{r['rounds']} + {r['setup_rounds']} set-up + {r['evaluation_rounds']} eval.",
        _kib(r["bytes_down"]),
        _kib(r["bytes_up"]),
        _kib(r["bytes_peer"]),
        _kib(r["total_down_per_client"]),
        f"{r['peak_mb']:.0f}",
        str(r.get("commit", "")),
    ]
    print(" | ".join(row), flush=True)
    return row


def _kib(value):
    return f"{value / 1024:.1f}"


TITLE = "FederatedKMeans from 10 to 10,000 clients"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", nargs="+", type=int, default=list(CLIENTS))
    parser.add_argument("--cell", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile", type=int, help="clients of one profiled fit")
    parser.add_argument("--iterations", type=int, default=3, help="Lloyd iterations (--profile)")
    parser.add_argument("--profile-out", default="/tmp/scale_clients.prof")
    parser.add_argument("--out", default="scale_clients", help="results page name")
    parser.add_argument(
        "--add-cell",
        nargs=3,
        metavar=("N", "FILE", "COMMIT"),
        help="store the RESULT line a `--cell N PAIRS` run printed to FILE, measured at COMMIT",
    )
    parser.add_argument("--table-only", action="store_true", help="render the stored sizes")
    parser.add_argument("--note", default="", help="a sentence on the conditions of the run")
    parser.add_argument("--title", default=TITLE, help="the page's title (one per page)")
    parser.add_argument(
        "--coordinator", default="sees-totals", choices=("sees-totals", "verified", "blind")
    )
    args = parser.parse_args(argv)
    global COORDINATOR
    COORDINATOR = args.coordinator
    if args.cell:
        run_cell(*args.cell)
        return
    if args.profile:
        profile(args.profile, args.iterations, args.profile_out)
        return
    start = time.perf_counter()
    # Each size's measurement is kept by size, so that sizes run apart (a long
    # one in its own run) make one table.
    store = RESULTS_DIR / f"{args.out}.json"
    cells = json.loads(store.read_text()) if store.exists() else {}
    if args.add_cell:
        n, path, commit = args.add_cell
        line = [x for x in Path(path).read_text().splitlines() if x.startswith("RESULT ")][0]
        cells[str(int(n))] = {**json.loads(line[len("RESULT ") :]), "commit": commit}
        store.write_text(json.dumps(cells, indent=1) + "\n")
    for n in [] if args.table_only or args.add_cell else args.clients:
        pairs = PAIRS.get(n, 1)
        command = [sys.executable, __file__, "--cell", str(n), str(pairs)]
        command += ["--coordinator", args.coordinator]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
        if not lines:
            print(done.stderr[-2000:], file=sys.stderr)
            cells[str(n)] = {"failed": done.stderr.strip().splitlines()[-1][:120]}
        else:
            cells[str(n)] = json.loads(lines[0][len("RESULT ") :])
            cells[str(n)]["commit"] = git_commit()
        if store.exists():
            # Sizes measured meanwhile by another run.
            cells = {**json.loads(store.read_text()), str(n): cells[str(n)]}
        store.write_text(json.dumps(cells, indent=1) + "\n")
    rows = [_row(int(n), cells[n]) for n in sorted(cells, key=int)]
    header = [
        "clients",
        "rows",
        "fit s",
        "fit CPU s",
        "KMeans s (pooled rows)",
        "ratio",
        "Lloyd iterations",
        "rounds",
        "KiB down / client / round",
        "KiB up / client / round",
        "KiB to peers / client / round",
        "KiB down / client, whole fit",
        "peak MB",
        "commit",
    ]
    argv_text = " ".join(argv if argv is not None else sys.argv[1:])
    body = "\n\n".join(
        [
            f'FederatedKMeans (coordinator="{args.coordinator}", secure sums on) on {ROWS} '
            "rows per "
            f"client of `make_blobs(n_features={D}, centers={K}, cluster_std={STD:g})`, from its "
            f"first {K} rows as a fixed array start, "
            f"{ITERATIONS} Lloyd iterations (`tol=0`), on the in-process runtime; scikit-learn's "
            "`KMeans` from the same start on the pooled rows alongside. Each size runs in its "
            "own process; fits alternate with KMeans in pairs "
            f"({', '.join(f'{PAIRS.get(int(n), 1)} at {int(n):,}' for n in sorted(cells, key=int))}"
            "), the table "
            "gives the medians and the median ratio (of wall-clock times; the fit's CPU time, "
            "`process_time`, is less sensitive to other work on the machine). Bytes per client "
            "per round are the means over the clients of the ledger's per-client counts "
            "divided by all rounds of the fit (protocol, set-up and evaluation); peak MB is "
            "the process's `ru_maxrss` (data, warm-up and fits).",
            machine_line() + " Two cores shared with other work: times are noisy. " + args.note,
            "Each row names the commit it measured (sizes may be run apart: "
            f"`--clients N`); this page's last run took "
            f"{(time.perf_counter() - start) / 60:.0f} minutes.",
            "Commands: `python benchmarks/scale_clients.py --clients N` measures sizes and "
            f"stores them by size (`benchmarks/results/{args.out}.json`); a size measured on "
            "its own (`--cell N PAIRS`, which prints its result) is stored with `--add-cell`; "
            "`--table-only` writes this page from the stored sizes. This page: "
            f"`python benchmarks/scale_clients.py{' ' + argv_text if argv_text else ''}`.",
            markdown_table(header, rows),
        ]
    )
    write_result(args.out, args.title, body)


if __name__ == "__main__":
    main()
