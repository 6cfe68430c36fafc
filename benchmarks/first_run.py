"""The README's demo on a fresh install (empty compilation cache) against its second run.

Usage::

    python benchmarks/first_run.py [--pairs 3] [--out benchmarks/results/first_run.md]

Each pair runs ``python -m skfedclust --dataset iris --partition noniid --clients 3``
twice in new processes with a new, empty ``NUMBA_CACHE_DIR``: the first run compiles
what it needs and caches it, the second loads the cache. Wall-clock seconds of the
whole command (interpreter start and imports included), per pair, and the ratio of
the medians.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _common import emit, git_commit

DEMO = [sys.executable, "-m", "skfedclust", "--dataset", "iris", "--partition", "noniid"]
DEMO += ["--clients", "3"]


def timed(env):
    started = time.perf_counter()
    subprocess.run(DEMO, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    commit = git_commit()
    first, second = [], []
    for _ in range(args.pairs):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "NUMBA_CACHE_DIR": cache}
            first.append(timed(env))
            second.append(timed(env))
    load = os.getloadavg()[0]
    lines = [
        f"# First run of the demo (commit {commit})",
        "",
        f"Command: `python benchmarks/first_run.py --pairs {args.pairs}` at commit {commit}. "
        "The README's demo (`python -m skfedclust --dataset iris --partition noniid "
        "--clients 3`, every method of the package and centralized k-means) run twice in new "
        "processes with a new, empty compilation cache per pair; wall-clock seconds of the "
        f"whole command. 1-minute load average at the end: {load:.1f}.",
        "",
        "| pair | first run (empty cache) s | second run s | ratio |",
        "|---|---|---|---|",
    ]
    for i, (a, b) in enumerate(zip(first, second), start=1):
        lines.append(f"| {i} | {a:.2f} | {b:.2f} | {a / b:.2f} |")
    median_first, median_second = statistics.median(first), statistics.median(second)
    lines += [
        "",
        f"Median: {median_first:.2f} s against {median_second:.2f} s, "
        f"**{median_first / median_second:.2f}×** (goal: at most 1.5×).",
    ]
    emit(lines, args.out)


if __name__ == "__main__":
    main()
