"""FederatedKMeans: whole fits against scikit-learn's KMeans from the same start.

Run ``nice python benchmarks/whole_fit.py [--quick] [--out PATH]``; writes
``benchmarks/results/whole_fit.md`` (or ``PATH``). The page's hand-written
section (from the heading "## Notes" on) is kept from one run to the next.

A fit as a user waits for it: ``fit`` from its call to its return, input
checks, copies, the secure sums' set-up, the moments and the final labels
included. 20,000, 200,000 and 2,000,000 uniform rows (Lloyd keeps moving the
centers, so every fit runs its 20 iterations) of 20 features, k=8, 10
clients, the same start (the first 8 rows: ``init`` an array, ``n_init=1``,
``max_iter=20``, ``tol=0``) for both. Fits alternate pair by pair (KMeans,
FederatedKMeans, KMeans, ...), after a warm-up pair (compiled code, thread
pools); the ratio is the median of the pairs' ratios, the times the medians
of each side. Peak extra memory is the peak of ``tracemalloc`` (NumPy's
allocations) during one more fit of each, apart from the timed ones.

Input forms: the rows as a list of 10 client arrays (views of one pooled
array, as a user splitting it would hold them), and the pooled rows with
``client_ids`` (sorted: each client a run of rows); the coordinator-blind
protocol on the list.
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc
from pathlib import Path

import numpy as np
from _common import RESULTS, git_commit, machine_line, markdown_table
from sklearn.cluster import KMeans

from skfedclust import FederatedKMeans

K, D, N_CLIENTS, ITERATIONS = 8, 20, 10, 20
GOAL = 1.5
#: The hand-written part of the results page starts at this heading.
NOTES = "## Notes"
SETTINGS = [
    ("list of 10 client arrays", "sees-totals"),
    ("pooled X + sorted client_ids", "sees-totals"),
    ("list of 10 client arrays", "blind"),
]


def _fits(X, form, coordinator):
    init = X[:K].copy()
    clients = np.array_split(X, N_CLIENTS)
    ids = np.repeat(np.arange(N_CLIENTS), [len(c) for c in clients])

    def sklearn():
        return KMeans(K, init=init, n_init=1, max_iter=ITERATIONS, tol=0).fit(X)

    def ours():
        model = FederatedKMeans(
            K, init=init, max_iter=ITERATIONS, tol=0, coordinator=coordinator, random_state=0
        )
        if form.startswith("list"):
            return model.fit(clients)
        return model.fit(X, client_ids=ids)

    return sklearn, ours


def _seconds(fit):
    start = time.perf_counter()
    model = fit()
    seconds = time.perf_counter() - start
    assert model.n_iter_ == ITERATIONS, model.n_iter_
    return seconds


def _peak_mb(fit):
    tracemalloc.start()
    try:
        fit()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def measure(X, form, coordinator, pairs):
    sklearn, ours = _fits(X, form, coordinator)
    _seconds(sklearn), _seconds(ours)  # warm-up
    theirs, mine = [], []
    for _ in range(pairs):
        theirs.append(_seconds(sklearn))
        mine.append(_seconds(ours))
    ratios = np.array(mine) / np.array(theirs)
    return {
        "sklearn": float(np.median(theirs)),
        "ours": float(np.median(mine)),
        "ratio": float(np.median(ratios)),
        "range": (float(ratios.min()), float(ratios.max())),
        "peak_sklearn": _peak_mb(sklearn),
        "peak_ours": _peak_mb(ours),
    }


def _load():
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _kept_notes(path):
    if not path.exists():
        return None
    text = path.read_text()
    start = text.find(NOTES)
    return text[start:].strip() if start >= 0 else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer pairs, no 2,000,000 rows")
    parser.add_argument("--out", default=str(RESULTS / "whole_fit.md"), help="results page")
    args = parser.parse_args(argv)
    sizes = [(20_000, 9), (200_000, 7), (2_000_000, 5)]
    if args.quick:
        sizes = [(20_000, 3), (200_000, 3)]
    X_all = np.random.RandomState(0).uniform(size=(sizes[-1][0], D))
    load_before = _load()
    rows = []
    for form, coordinator in SETTINGS:
        for n, pairs in sizes:
            r = measure(X_all[:n], form, coordinator, pairs)
            print(
                f"{form}, {coordinator}, n={n:,}: KMeans {r['sklearn']:.3f} s, ours "
                f"{r['ours']:.3f} s, ratio {r['ratio']:.2f}x, peak {r['peak_sklearn']:.0f} / "
                f"{r['peak_ours']:.0f} MB",
                flush=True,
            )
            rows.append(
                [
                    form,
                    f"`{coordinator}`",
                    f"{n:,}",
                    f"{r['sklearn']:.3f} s",
                    f"{r['ours']:.3f} s",
                    f"**{r['ratio']:.2f}x** ({r['range'][0]:.2f}-{r['range'][1]:.2f}, "
                    f"{pairs} pairs)",
                    f"{r['peak_sklearn']:.0f} MB / {r['peak_ours']:.0f} MB",
                    f"{X_all[:n].nbytes / 1e6:.0f} MB",
                ]
            )
    table = markdown_table(
        [
            "input",
            "coordinator",
            "rows",
            "KMeans fit",
            "FederatedKMeans fit",
            "ratio (median of pairs; range)",
            "peak extra memory, KMeans / ours",
            "rows' size",
        ],
        rows,
    )
    out = Path(args.out)
    notes = _kept_notes(out)
    lines = [
        "# FederatedKMeans: whole fits against KMeans",
        "",
        f"Generated by `benchmarks/whole_fit.py`{' --quick' if args.quick else ''}. "
        + machine_line(),
        f"skfedclust at {git_commit()}. Load average (1/5/15 min) before: {load_before}, "
        f"after: {_load()}.",
        "",
        f"{D} features, k={K}, {N_CLIENTS} clients, {ITERATIONS} Lloyd iterations from the same "
        "start (`init` the first 8 rows, `n_init=1`, `max_iter=20`, `tol=0`) on uniform rows; "
        "whole `fit` calls, alternating pair by pair, secure sums on (the default). The goal "
        f"at 2,000,000 rows: at most {GOAL}x KMeans. Peak extra memory: `tracemalloc`'s peak "
        "during one fit (KMeans copies the rows to centre them; ours reads the clients' "
        "rows where they are).",
        "",
        table,
        "",
    ]
    if notes:
        lines.append(notes)
    text = "\n".join(lines).rstrip() + "\n"
    out.write_text(text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
