"""Speed and precision of the secure OmniFC distance round, for both field schemes.

Each case times :func:`skfedclust.secure.lcc_squared_distances` on n rows of
d = 784 unit-norm features held by m = 7 clients, l = t = 2 (the paper's
defaults, the smallest federation that can decode), against a blockwise
``euclidean_distances(X[block], X, squared=True)`` pass over the pooled rows
(blocks of 1024 rows; each a general BLAS product, as a pass over rows whose
n x n matrix does not fit would run):

* the default prime ``2**30 - 35``: two limbs stacked into one float64
  product of twice the width per block; the floor of a faithful simulation is
  then 3.5x (seven parties, the upper block triangle of width-d/2 rows, two
  limbs, against a general product of width d over every pair);
* the fast prime ``2**23 - 15``: one product of the width per block (floor
  1.75x), about three bits less precision.

The precision of each is the RMSE of the decoded ``D`` against the real
squared distances on scikit-learn's digits, L2-normalised (the setting of the
paper's Table 7, which reports 2e-4 on MNIST), over all n² entries.

Both sides of a case run in alternating pairs (:func:`bench_speed.paired_times`),
so that a shared, noisy machine loads both alike; the table gives the medians.

    python benchmarks/speed_omnifc.py            # n = 10,000, writes results/omnifc_speed.md
    python benchmarks/speed_omnifc.py --quick    # n = 3,000
    python benchmarks/bench_speed.py --only omnifc   # the same cases in the common table
    /usr/bin/time -v python benchmarks/speed_omnifc.py --big 30000   # peak memory run
    python benchmarks/speed_omnifc.py --profile   # single-threaded CPU ratio, where it goes
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import resource
import sys
import threading
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.metrics import euclidean_distances
from sklearn.preprocessing import normalize
from threadpoolctl import threadpool_limits

from skfedclust.secure import (
    DEFAULT_PRIME,
    FAST_PRIME,
    _kernels,
    _lcc,
    lcc_squared_distances,
    max_safe_precision,
)
from skfedclust.secure._field import ModularProduct

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine_line, markdown_table, write_result  # noqa: E402
from bench_speed import paired_times  # noqa: E402

N_CLIENTS = 7
N_FEATURES = 784
#: (name, prime, goal ratio): the default must meet the goal; the fast option is faster.
SCHEMES = [
    ("default", DEFAULT_PRIME, 7.5),
    ("fast", FAST_PRIME, 7.5),
]
#: The hand-written part of the results page starts at this heading.
ANALYSIS = "## Before and after the compiled kernels"
#: The goal against one plain ``euclidean_distances(X, squared=True)`` call.
PLAIN_GOAL = 6.0
#: Rows per block of the reference pass.
REFERENCE_BLOCK = 1024


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, N_FEATURES))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X


def _prime_name(prime):
    return {DEFAULT_PRIME: "2**30 - 35", FAST_PRIME: "2**23 - 15"}.get(prime, str(prime))


def cases(quick: bool) -> list[dict]:
    """Timing cases for ``benchmarks/bench_speed.py``: one per field scheme."""
    n = 3_000 if quick else 10_000
    X = _data(n)
    clients = np.array_split(X, N_CLIENTS)

    def reference():
        # blockwise, as a pass over rows that do not fit as one n x n matrix would run
        # (a general product per block: no symmetric BLAS shortcut)
        for a in range(0, n, REFERENCE_BLOCK):
            euclidean_distances(X[a : a + REFERENCE_BLOCK], X, squared=True)

    def plain():
        # What a user runs instead when the n x n matrix fits: one call (numpy
        # takes the symmetric product X X^T for it).
        euclidean_distances(X, squared=True)

    out = []
    for name, prime, goal in SCHEMES:

        def federated(prime=prime):
            lcc_squared_distances(clients, prime=prime, random_state=0)

        out.append(
            {
                "name": f"OmniFC secure D ({name}, prime={_prime_name(prime)}), n={n} "
                f"d={N_FEATURES} m={N_CLIENTS} l=t=2",
                "federated": federated,
                "reference": reference,
                "reference_name": "blockwise euclidean_distances(squared=True)",
                "goal_ratio": goal,
                "plain": plain,
                "plain_goal": PLAIN_GOAL,
                "prime": prime,
            }
        )
    return out


def digits_rmse(prime):
    """RMSE of the decoded D on L2-normalised digits (all n² entries), and the q used."""
    X = normalize(load_digits().data)
    D, _ = lcc_squared_distances(np.array_split(X, N_CLIENTS), prime=prime, random_state=0)
    # the exact squared distances, free of euclidean_distances' cancellation
    true = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    # precision="auto": the largest q the bounds around the common offset allow
    centred = X - X.mean(axis=0)
    q = max_safe_precision(
        np.abs(centred).max() * (1 + 1e-9),
        np.linalg.norm(centred, axis=1).max() * (1 + 1e-9),
        X.shape[1],
        prime,
    )
    return float(np.sqrt(np.mean((D - true) ** 2))), q


def big_run(n, prime):
    """One secure round at size n; prints time and peak resident memory."""
    X = _data(n)
    clients = np.array_split(X, N_CLIENTS)
    t0 = time.perf_counter()
    D, ledger = lcc_squared_distances(clients, prime=prime, random_state=0)
    elapsed = time.perf_counter() - t0
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    line = (
        f"n={n}, d={N_FEATURES}, m={N_CLIENTS}, l=t=2, prime={_prime_name(prime)}: secure D "
        f"in {elapsed:.1f} s, peak resident memory {peak_gib:.2f} GiB (D alone is "
        f"{D.nbytes / 2**30:.2f} GiB; {ledger.report()['bytes_up'] / 2**30:.1f} GiB of uploads "
        f"counted). Command: `python benchmarks/speed_omnifc.py --big {n}"
        + (" --fast`" if prime == FAST_PRIME else "`")
    )
    print(line)
    path = Path(__file__).parent / "results" / "omnifc_speed.md"
    if path.exists():
        with path.open("a") as fh:
            fh.write(f"\nLarge run: {line}\n")


#: What ``--profile`` times: (owner, attribute), thread CPU time inclusive of nested calls.
PROFILED = [
    (ModularProduct, "product"),
    (_kernels, "tile_residues"),
    (ModularProduct, "left_operand_from_residues"),
    (ModularProduct, "right_operand_from_residues"),
    (_lcc.StreamingDecoder, "decode_dense"),
    (_lcc, "lcc_encode"),
    (_lcc, "encoded_row_norms"),
    (_lcc, "agree_scale"),
]


def profile_run(n, repeat=2):
    """Single-threaded CPU ratio against the reference, and the secure round's CPU per part.

    Everything on one thread (``threadpool_limits(1)``, ``n_jobs=1``): neither side then
    waits for a descheduled thread, so the CPU ratio hardly moves with the machine's load.
    The parts are thread CPU time summed over the calls of each function.
    """
    X = _data(n)
    clients = np.array_split(X, N_CLIENTS)
    spent, calls, lock = collections.Counter(), collections.Counter(), threading.Lock()

    def timed_call(f, label):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            start = time.thread_time()
            try:
                return f(*args, **kwargs)
            finally:
                with lock:
                    spent[label] += time.thread_time() - start
                    calls[label] += 1

        return wrapper

    originals = [(owner, name, getattr(owner, name)) for owner, name in PROFILED]
    for owner, name, f in originals:
        setattr(owner, name, timed_call(f, name))
    print(f"load average {os.getloadavg()}")
    try:
        with threadpool_limits(1):
            for pair in range(repeat):
                spent.clear()
                calls.clear()
                start = time.process_time()
                for a in range(0, n, REFERENCE_BLOCK):
                    euclidean_distances(X[a : a + REFERENCE_BLOCK], X, squared=True)
                reference = time.process_time() - start
                start = time.process_time()
                lcc_squared_distances(clients, random_state=0, n_jobs=1)
                secure = time.process_time() - start
                print(
                    f"pair {pair}: CPU secure {secure:.2f} s, reference {reference:.2f} s, "
                    f"ratio {secure / reference:.2f}"
                )
    finally:
        for owner, name, f in originals:
            setattr(owner, name, f)
    for name, seconds in spent.most_common():
        print(f"{seconds:8.2f} s {100 * seconds / secure:5.1f}% {calls[name]:6d} calls  {name}")
    print(f"load average {os.getloadavg()}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 3,000")
    parser.add_argument("--repeat", type=int, default=3, help="alternating pairs per case")
    parser.add_argument("--big", type=int, default=None, help="only run one round of this size")
    parser.add_argument("--fast", action="store_true", help="with --big: the fast prime")
    parser.add_argument(
        "--profile", action="store_true", help="single-threaded CPU ratio and its parts"
    )
    args = parser.parse_args()
    if args.profile:
        profile_run(3_000 if args.quick else 10_000)
        return
    if args.big:
        big_run(args.big, FAST_PRIME if args.fast else DEFAULT_PRIME)
        return
    rows = []
    load_before = "/".join(f"{x:.1f}" for x in os.getloadavg())
    for case in cases(args.quick):
        rmse, q = digits_rmse(case["prime"])
        plan = ModularProduct.plan(case["prime"], N_FEATURES // 2)
        t_fed, t_ref, ratio = paired_times(case["federated"], case["reference"], args.repeat)
        t_fed_plain, t_plain, plain_ratio = paired_times(
            case["federated"], case["plain"], args.repeat
        )
        rows.append(
            [
                case["name"],
                f"{plan.n_limbs} limb{'s' if plan.n_limbs > 1 else ''}, 1 product of width "
                f"{plan.n_limbs * N_FEATURES // 2}",
                str(q),
                f"{rmse:.2e}",
                f"{t_fed:.2f}",
                f"{t_ref:.2f}",
                f"{ratio:.2f}×",
                f"≤ {case['goal_ratio']}×",
                f"{t_plain:.2f}",
                f"{plain_ratio:.2f}×",
                f"≤ {case['plain_goal']:g}×",
            ]
        )
        print(" | ".join(rows[-1]), flush=True)
    table = markdown_table(
        [
            "case",
            "per block and party",
            "q on digits",
            "RMSE on digits",
            "secure D s",
            "blockwise euclidean_distances s",
            "ratio",
            "goal",
            "plain euclidean_distances s",
            "ratio to plain",
            "goal (plain)",
        ],
        rows,
    )
    name = "omnifc_speed_quick" if args.quick else "omnifc_speed"
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    default = rows[0]
    verdict = (
        f"Load average (1/5/15 min) {load_before} at the start and {load} at the end. "
        f"Default prime: {default[6]} the blockwise pass (goal {default[7]}), {default[9]} "
        f"one plain call (goal {default[10]}). In flops, a faithful simulation's floor with "
        "the default prime is 3.5× a general product over every pair and 7× a symmetric "
        "one (below); the plain call is not all symmetric product (row norms, the sum, the "
        "clipping), so its measured ratio sits a little under 7×."
    )
    kept = _kept_sections(name)
    write_result(
        name,
        "OmniFC secure distance round: speed and precision",
        "\n\n".join(
            [
                f"{args.repeat} alternating pairs per case (reference, then secure), medians of "
                "the times and of the pair ratios, against the blockwise pass and, in pairs "
                "of their own, against one plain `euclidean_distances(X, squared=True)` call "
                "(numpy computes X X^T as a symmetric product). RMSE: decoded D against the "
                "real squared "
                "distances on scikit-learn's digits, L2-normalised, 7 clients (the paper's "
                "Table 7 reports 2e-4 on MNIST). " + machine_line(),
                "Command: `python benchmarks/speed_omnifc.py"
                + (" --quick`" if args.quick else f" --repeat {args.repeat}`"),
                table,
                verdict,
                *([kept] if kept else []),
            ]
        ),
    )


def _kept_sections(name):
    """The page's hand-written sections, from :data:`ANALYSIS` on (kept across reruns)."""
    path = Path(__file__).parent / "results" / f"{name}.md"
    if not path.exists():
        return ""
    text = path.read_text()
    start = text.find(ANALYSIS)
    return text[start:].strip() if start >= 0 else ""


if __name__ == "__main__":
    main()
