"""Speed of the secure OmniFC distance round against plain squared distances.

The case times :func:`skfedclust.secure.lcc_squared_distances` on n rows of
d = 784 unit-norm features held by m = 7 clients, l = t = 2 (the paper's
defaults, the smallest federation that can decode), against scikit-learn's
``euclidean_distances(X, squared=True)`` on the pooled rows. The floor of a
faithful simulation is 3.5x: seven parties each compute the distances of
width-d/2 encoded rows.

    python benchmarks/speed_omnifc.py            # n = 10,000, writes results/omnifc_speed.md
    python benchmarks/speed_omnifc.py --quick    # n = 3,000
    /usr/bin/time -v python benchmarks/speed_omnifc.py --big 30000   # peak memory run
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import euclidean_distances

from skfedclust.secure import lcc_squared_distances

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine_line, markdown_table, write_result  # noqa: E402

N_CLIENTS = 7
N_FEATURES = 784


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, N_FEATURES))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X


def cases(quick: bool) -> list[dict]:
    """Timing cases for ``benchmarks/bench_speed.py``."""
    n = 3_000 if quick else 10_000
    X = _data(n)
    clients = np.array_split(X, N_CLIENTS)

    def federated():
        lcc_squared_distances(clients, random_state=0)

    def reference():
        euclidean_distances(X, squared=True)

    return [
        {
            "name": f"OmniFC secure D, n={n} d={N_FEATURES} m={N_CLIENTS} l=t=2",
            "federated": federated,
            "reference": reference,
            "reference_name": "euclidean_distances(squared=True)",
            "goal_ratio": 8.0,
        }
    ]


def _best(func, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        func()
        times.append(time.perf_counter() - t0)
    return min(times), times


def big_run(n):
    """One secure round at size n; prints time and peak resident memory."""
    X = _data(n)
    clients = np.array_split(X, N_CLIENTS)
    t0 = time.perf_counter()
    D, ledger = lcc_squared_distances(clients, random_state=0)
    elapsed = time.perf_counter() - t0
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    line = (
        f"n={n}, d={N_FEATURES}, m={N_CLIENTS}, l=t=2: secure D in {elapsed:.1f} s, peak "
        f"resident memory {peak_gib:.2f} GiB (D alone is {D.nbytes / 2**30:.2f} GiB; "
        f"{ledger.report()['bytes_up'] / 2**30:.1f} GiB of uploads counted). "
        f"Command: `python benchmarks/speed_omnifc.py --big {n}`"
    )
    print(line)
    path = Path(__file__).parent / "results" / "omnifc_speed.md"
    if path.exists():
        with path.open("a") as fh:
            fh.write(f"\nLarge run: {line}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 3,000")
    parser.add_argument("--repeat", type=int, default=3, help="timings per side (best kept)")
    parser.add_argument("--big", type=int, default=None, help="only run one round of this size")
    args = parser.parse_args()
    if args.big:
        big_run(args.big)
        return
    rows = []
    for case in cases(args.quick):
        t_ref, refs = _best(case["reference"], args.repeat)
        t_fed, feds = _best(case["federated"], args.repeat)
        ratio = t_fed / t_ref
        rows.append(
            [
                case["name"],
                f"{t_fed:.2f} ({', '.join(f'{t:.2f}' for t in feds)})",
                f"{t_ref:.2f} ({', '.join(f'{t:.2f}' for t in refs)})",
                f"{ratio:.2f}×",
                f"≤ {case['goal_ratio']}×",
            ]
        )
        print(" | ".join(rows[-1]), flush=True)
    table = markdown_table(
        ["case", "secure D s (runs)", "euclidean_distances s (runs)", "ratio", "goal"], rows
    )
    name = "omnifc_speed_quick" if args.quick else "omnifc_speed"
    write_result(
        name,
        "OmniFC secure distance round: speed",
        "\n\n".join(
            [
                f"Best of {args.repeat} runs per side. " + machine_line(),
                "Command: `python benchmarks/speed_omnifc.py"
                + (" --quick`" if args.quick else "`"),
                table,
            ]
        ),
    )


if __name__ == "__main__":
    main()
