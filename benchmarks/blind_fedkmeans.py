"""Cost of the coordinator-blind FederatedKMeans against the mode where the coordinator sees totals.

Per Lloyd iteration and per node: rounds, bytes a node sends and receives
(to the server, from the server, to and from its peers) and CPU, for
federations of growing size (k=8 clusters, d=64 features, 200 rows per
client), from the same array start with ``tol=0`` so that both modes run
the iterations asked. The per-iteration figures are differences of two fits
(``max_iter`` = ``LONG`` and ``SHORT``) divided by the iterations between
them, so the set-up is left out; the CPU of a node is the in-process fit's
time divided by the clients (the simulation runs them one after another).

Relaying every upload to every node costs each node O(n) per iteration; the
secure sum of the other mode costs O(log n) (its neighbours). The page gives
the federation size where the blind round's cost per node passes the other's.

Run: ``python benchmarks/blind_fedkmeans.py`` (about 3 minutes; ``--sizes``
to choose the federation sizes). ``--method ffcm`` measures
FederatedFuzzyCMeans' v1 rounds the same way (``n_rounds`` for ``max_iter``)
into ``ffcm_blind.md``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import RESULTS, emit, machine_line, markdown_table

from skfedclust import FederatedFuzzyCMeans, FederatedKMeans

K, D, ROWS = 8, 64, 200
SHORT, LONG = 2, 6


#: The estimator of each ``--method``, from a start, a mode and its iterations.
METHODS = {
    "fedkmeans": lambda start, coordinator, iterations, n_clients: FederatedKMeans(
        K,
        init=start,
        coordinator=coordinator,
        max_iter=iterations,
        tol=0.0,
        partition=n_clients,
        random_state=0,
    ),
    "ffcm": lambda start, coordinator, iterations, n_clients: FederatedFuzzyCMeans(
        K,
        init=start,
        coordinator=coordinator,
        n_rounds=iterations,
        partition=n_clients,
        random_state=0,
    ),
}
METHOD = "fedkmeans"


def _fit(n_clients, coordinator, max_iter, X, start):
    est = METHODS[METHOD](start, coordinator, max_iter, n_clients)
    t0 = time.process_time()
    est.fit(X)
    return est, time.process_time() - t0


def per_iteration(n_clients, coordinator, repeats):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n_clients * ROWS, D)) + rng.integers(0, 4, size=(n_clients * ROWS, 1))
    start = X[:K].copy()
    times, comms, iters = {}, {}, {}
    for max_iter in (SHORT, LONG):
        runs = [_fit(n_clients, coordinator, max_iter, X, start) for _ in range(repeats)]
        times[max_iter] = float(np.median([t for _, t in runs]))
        comms[max_iter] = runs[0][0].communication_
        iters[max_iter] = runs[0][0].n_iter_
    steps = iters[LONG] - iters[SHORT]
    if steps <= 0:
        raise RuntimeError("the fits converged before SHORT iterations: no difference to take")

    def bytes_per_node(key):
        return (
            np.mean(comms[LONG]["per_client"][key]) - np.mean(comms[SHORT]["per_client"][key])
        ) / steps

    rounds = (comms[LONG]["rounds"] - comms[SHORT]["rounds"]) / steps
    peers = bytes_per_node("bytes_peer_sent") + bytes_per_node("bytes_peer_received")
    return {
        "rounds": rounds,
        "up": bytes_per_node("bytes_up"),
        "down": bytes_per_node("bytes_down"),
        "peer": peers,
        "cpu_ms": 1e3 * (times[LONG] - times[SHORT]) / steps / n_clients,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--method", choices=sorted(METHODS), default="fedkmeans")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    global METHOD
    METHOD = args.method
    out = args.out or str(RESULTS / f"{args.method}_blind.md")
    what = "FederatedKMeans" if METHOD == "fedkmeans" else "FederatedFuzzyCMeans (v1)"
    step = "Lloyd iteration" if METHOD == "fedkmeans" else "round"
    command = "python benchmarks/blind_fedkmeans.py" + (
        "" if METHOD == "fedkmeans" else " --method ffcm"
    )
    rows, ratios = [], []
    for n in args.sizes:
        seen = per_iteration(n, "sees-totals", args.repeats)
        blind = per_iteration(n, "blind", args.repeats)
        checked = per_iteration(n, "verified", args.repeats)
        total = {
            name: r["up"] + r["down"] + r["peer"]
            for name, r in (("seen", seen), ("blind", blind), ("verified", checked))
        }
        ratios.append(
            f"{n} clients: {blind['cpu_ms'] / seen['cpu_ms']:.1f}x the CPU, "
            f"{total['blind'] / total['seen']:.0f}x the bytes (verified: "
            f"{checked['cpu_ms'] / seen['cpu_ms']:.1f}x, "
            f"{total['verified'] / total['seen']:.1f}x)"
        )
        for name, r in (("sees-totals", seen), ("blind", blind), ("verified", checked)):
            rows.append(
                [
                    n,
                    name,
                    f"{r['rounds']:.0f}",
                    f"{r['up'] / 1e3:.1f}",
                    f"{r['down'] / 1e3:.1f}",
                    f"{r['peer'] / 1e3:.1f}",
                    f"{(r['up'] + r['down'] + r['peer']) / 1e3:.1f}",
                    f"{r['cpu_ms']:.2f}",
                ]
            )
    lines = [
        f"# {what}: the coordinator-blind mode against the coordinator seeing totals",
        "",
        f"Per {step} and per node, k=8, d=64, 200 rows per client, the same array",
        f"start, {'`tol=0`' if METHOD == 'fedkmeans' else 'no convergence test'}; "
        f"differences of fits of {SHORT} and {LONG} {step}s (the set-up",
        f"left out). CPU: process time of the in-process fit per {step}, divided by the",
        f"clients (median of {args.repeats} fits each). KB: 1,000 bytes of payload, as the",
        "ledger counts them (peer messages once per recipient).",
        "",
        f"Command: `{command}`. " + machine_line(),
        "",
        markdown_table(
            [
                "clients",
                "mode",
                "rounds",
                "KB up",
                "KB down",
                "KB to/from peers",
                "KB total",
                "CPU ms per node",
            ],
            rows,
        ),
        "",
        f"Per node and {step}, the blind mode against the coordinator seeing totals: "
        + "; ".join(ratios)
        + ". The blind and verified rounds are one round where the other takes two; the "
        "blind round's cost per node grows with the federation (every upload goes to "
        "every node), the secure sum's and the verified round's do not (masks with a "
        "node's few neighbours; the verified upload carries four 32-bit limbs per "
        "statistic and a 64-word code).",
    ]
    emit(lines, out)


if __name__ == "__main__":
    main()
