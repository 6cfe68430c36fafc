"""GOLD fit time against centralized k-means, its growth with n, and its compiled pass.

A case module of ``benchmarks/bench_speed.py`` (``cases(quick)``): GOLD's default fit on
n=200,000 samples (20,000 with ``quick``), d=20, 10 IID clients, 10 clusters, against
``KMeans(n_init=10)``; goal <= 3x. The default ``local_init="sqrt"`` seeds
``min(n_i / 2, 10 sqrt(n_i))`` clusters per client; the paper's ``local_init=0.5`` (half
the client's rows) makes a pass cost grow with the square of the rows.

Run on its own (``python benchmarks/speed_gold.py``) it also measures

* the same ratio with the paper's settings at n=20,000 and n=200,000;
* the growth from n=20,000 to n=200,000 with the default ``local_init="sqrt"``;
* the online competition pass compiled with numba against the numpy engine (one
  loop over the samples, vectorised over the clusters);
* numba's first-call compile time (an empty cache) and the warm-cache load time,

and writes ``benchmarks/results/gold_speed.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from skfedclust import GOLDClustering

HERE = Path(__file__).parent
N_CLUSTERS = 10
N_CLIENTS = 10
PAPER = dict(local_init=0.5, remc_n_init=1, refine=False, visit_order="storage")


def _data(n, d=20):
    X, _ = make_blobs(n, n_features=d, centers=N_CLUSTERS, random_state=0)
    return X


def cases(quick):
    """Timing cases for ``benchmarks/bench_speed.py``."""
    n = 20_000 if quick else 200_000
    X = _data(n)
    return [
        {
            "name": f"GOLDClustering n={n:,} d=20 {N_CLIENTS} clients k={N_CLUSTERS}",
            "federated": lambda: GOLDClustering(
                N_CLUSTERS, partition=N_CLIENTS, random_state=0
            ).fit(X),
            "reference": lambda: KMeans(N_CLUSTERS, n_init=10, random_state=0).fit(X),
            "reference_name": "KMeans(n_init=10)",
            "goal_ratio": 3.0,
        }
    ]


def _paired(federated, reference, repeat):
    t_fed, t_ref = [], []
    for _ in range(repeat):
        t_ref.append(_timed(reference)[1])
        t_fed.append(_timed(federated)[1])
    ratios = [f / r for f, r in zip(t_fed, t_ref)]
    return statistics.median(t_fed), statistics.median(t_ref), ratios


def _timed(func):
    start = time.perf_counter()
    out = func()
    return out, time.perf_counter() - start


COMPILE_SNIPPET = """
import time
import numpy as np
t0 = time.perf_counter()
from skfedclust.clusterers._cpl import competitive_penalized_learning
t1 = time.perf_counter()
competitive_penalized_learning(np.random.RandomState(0).normal(size=(300, 3)), 10, random_state=0)
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def _first_call(cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run(
        [sys.executable, "-c", COMPILE_SNIPPET], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), float(out[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="alternating pairs")
    parser.add_argument("--skip-numpy", action="store_true", help="skip the slow numpy engine")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from _common import machine_line, markdown_table, write_result

    lines = ["## Ratio to centralized k-means"]
    # 1. the ratio case: package defaults, then the paper's settings
    case = cases(False)[0]
    case["federated"]()  # compile (or load) the numba pass first
    fed, ref, ratios = _paired(case["federated"], case["reference"], args.repeat)
    ratio = statistics.median(ratios)
    lines.append(
        f"{case['name']}, package defaults: GOLD {fed:.2f} s, KMeans(n_init=10) {ref:.2f} s; "
        f"median ratio of {args.repeat} alternating pairs **{ratio:.2f}x** (range "
        f"{min(ratios):.2f}-{max(ratios):.2f}; goal <= 3x: {'met' if ratio <= 3 else 'not met'})."
    )
    print(lines[-1], flush=True)
    for n in (20_000, 200_000):
        X = _data(n)
        fed, ref, ratios = _paired(
            lambda X=X: GOLDClustering(
                N_CLUSTERS, partition=N_CLIENTS, random_state=0, **PAPER
            ).fit(X),
            lambda X=X: KMeans(N_CLUSTERS, n_init=10, random_state=0).fit(X),
            1 if n > 20_000 else args.repeat,
        )
        lines.append(
            f"n={n:,}, the paper's settings (`local_init=0.5, remc_n_init=1, refine=False, "
            f"visit_order='storage'`): GOLD {fed:.2f} s, KMeans(n_init=10) {ref:.2f} s, "
            f"ratio **{statistics.median(ratios):.2f}x**."
        )
        print(lines[-1], flush=True)

    # 2. growth with n at a capped local_init
    rows, times, base, base_pass = [], [], None, None
    for n in (20_000, 50_000, 100_000, 200_000):
        X = _data(n)
        est, seconds = _timed(
            lambda X=X: GOLDClustering(N_CLUSTERS, partition=N_CLIENTS, random_state=0).fit(X)
        )
        times.append(seconds)
        base = base or seconds / n
        base_pass = base_pass or seconds / n / est.n_iter_
        rows.append([
            f"{n:,}", f"{seconds:.2f}", f"{seconds / n / base:.2f}",
            f"{seconds / n / est.n_iter_ / base_pass:.2f}", est.n_iter_,
            int(est.n_local_clusters_.sum()), " ".join(map(str, est.level_n_clusters_)),
        ])  # fmt: skip
        print(rows[-1], flush=True)
    header = ["n", "fit s", "time per sample vs n=20,000", "per sample and pass",
              "FCPL passes", "micro-centroids", "MCPL levels"]  # fmt: skip
    lines += [
        "## Growth with n, package defaults (local_init='sqrt')",
        "GOLD on blobs (d=20, 10 centers, 10 IID clients), defaults. Time per sample "
        "relative to n=20,000 (1.00 = exactly linear), and per sample and FCPL pass (passes: "
        "the largest number over the clients; the first pass, with every seed still alive, "
        "costs the most, so this column is only indicative). Ten times the samples take "
        f"{times[-1] / times[0]:.1f} times as long (seeds grow as sqrt(n), a pass as "
        "n^1.5). With the paper's `local_init=0.5` the seeds grow with the rows and the cost "
        "with their square.",
        markdown_table(header, rows),
    ]

    # 3. numba vs numpy
    from skfedclust.clusterers import _cpl

    X = _data(20_000)

    def fit():
        return GOLDClustering(N_CLUSTERS, partition=N_CLIENTS, random_state=0, **PAPER).fit(X)

    fit()
    compiled = min(_timed(fit)[1] for _ in range(2))
    engine_line = f"numba engine {compiled:.2f} s"
    if not args.skip_numpy:
        previous = _cpl._ENGINE
        _cpl._ENGINE = "numpy"
        try:
            plain = _timed(fit)[1]
        finally:
            _cpl._ENGINE = previous
        engine_line += f", numpy engine {plain:.1f} s ({plain / compiled:.0f}x slower)"
    lines += [
        "## Compiled pass",
        f"GOLD at n=20,000, d=20, 10 clients, the paper's settings: {engine_line}. Both "
        "engines run "
        "the same dynamics (tested against each other); numpy alone loops over the samples "
        "in Python, vectorised over the clusters.",
    ]
    print(lines[-1], flush=True)

    # 4. numba compile time
    with tempfile.TemporaryDirectory() as cache:
        cold_import, cold_call = _first_call(cache)
        warm_import, warm_call = _first_call(cache)
    lines += [
        "## numba compile time",
        "First CPL call (300 rows: the compiled pass) in a fresh process with an empty "
        f"numba cache: {cold_call:.1f} s "
        f"(import {cold_import:.1f} s); with the cache filled: {warm_call:.2f} s (import "
        f"{warm_import:.1f} s). The package compiles with `cache=True`, so the cost is paid "
        "once per installation (per cache directory).",
    ]
    print(lines[-1], flush=True)

    # 5. the authors' splits, from the reproduction's raw numbers
    raw_path = HERE / "results" / "gold_raw.json"
    if raw_path.exists():
        import json

        raw = json.loads(raw_path.read_text())["datasets"]
        per_set = {
            name: sum(r["time"] for r in entry["methods"]["GOLD"]) / len(entry["methods"]["GOLD"])
            for name, entry in raw.items()
        }
        lines += [
            "## The authors' client splits",
            "Mean GOLD fit time per run on the authors' eight-client splits (paper settings, "
            "`benchmarks/reproduce_gold.py`, clients one after the other on one thread): "
            + ", ".join(f"{name} {t:.1f} s" for name, t in per_set.items())
            + ". The authors' reference implementation loops in pure Python and is reported "
            "to take minutes per run on LA, WI and PE and over 20 minutes on LE (not "
            "measured here).",
        ]

    body = "\n\n".join(
        [
            "GOLD's fit time (`benchmarks/speed_gold.py`). The machine is shared: times are "
            "indicative, ratios come from runs alternated with the reference.",
            machine_line(),
            "Command: `python benchmarks/speed_gold.py`",
            *lines,
        ]
    )
    write_result("gold_speed", "GOLD speed", body)


if __name__ == "__main__":
    main()
