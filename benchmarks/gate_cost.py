"""What the node's gate costs: per client step and per fit, a deployed node against a simulated one.

Every client step passes :func:`skfedclust.node.serve_step`: it is admitted
(agreed method, allowed methods, declared role, clear sums), run, and its
reply is checked by the node's policy (rows, vector counts, the DP budget).
A simulated party (``NodePolicy.simulation()``) has the harvest rules off; a
deployed node (``NodePolicy()``, without a ledger here so that repeated fits
are allowed) runs every rule. Per step: the gate's own time around a step
that does nothing (``admit`` and ``check``), and the reply check of a step
sending k local centers of a 20,000-row node. Per fit: whole fits of each
estimator on the in-process runtime, alternating the two policies, median of
``--repeats`` pairs; the ratio is deployed over simulated.

Run: ``python benchmarks/gate_cost.py`` (about 2 minutes).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import RESULTS, emit, machine_line, markdown_table
from sklearn.datasets import make_blobs

from skfedclust import FeCA, FederatedKMeans, GOLDClustering, KFed
from skfedclust.federation import Federation, InProcessRuntime, Reply, use_runtime
from skfedclust.node import NodePolicy, data_independent, summary
from skfedclust.node._gate import admit_step, serve_step


@data_independent
def nothing(data, inbox, state, party):
    """A step that sends nothing: the gate's own cost."""
    return Reply()


@summary
def local_centers(data, inbox, state, party, *, k):
    """A step sending ``k`` means of the node's rows (as k-FED does)."""
    blocks = np.array_split(data, k)
    return Reply(send=np.array([b.mean(axis=0) for b in blocks]))


def _party(policy, data):
    federation = Federation(data, [np.arange(len(data))])
    federation.spawn_seeds(np.random.RandomState(0))
    runtime = InProcessRuntime(federation, policy=policy, name=None)
    return runtime._party(0)


def per_step(repeats):
    data = np.random.default_rng(0).normal(size=(20_000, 10))
    # Read-only, as the runtimes hand a node its rows: the node indexes them once.
    data.flags.writeable = False
    rows = []
    for name, policy in (
        ("simulated", NodePolicy.simulation()),
        ("deployed", NodePolicy(privacy_ledger="none")),
    ):
        party = _party(policy, data)
        for label, step, public in (
            ("admit only", nothing, None),
            ("serve a step sending nothing", nothing, {}),
            ("serve a step sending 8 local centers", local_centers, {"k": 8}),
        ):
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                if public is None:
                    admit_step(step, policy)
                else:
                    serve_step(step, data, {}, {}, party, public)
                times.append(time.perf_counter() - t0)
            rows.append([label, name, f"{1e6 * np.median(times):.1f}"])
    return rows


def _deployed(*args, **kwargs):
    return InProcessRuntime(*args, policy=NodePolicy(privacy_ledger="none"), **kwargs)


def per_fit(repeats):
    X, _ = make_blobs(20_000, centers=5, n_features=10, random_state=0)
    estimators = {
        "KFed": lambda: KFed(5, partition=10, random_state=0),
        "FeCA": lambda: FeCA(5, partition=10, random_state=0),
        "GOLDClustering": lambda: GOLDClustering(5, partition=10, random_state=0),
        "FederatedKMeans": lambda: FederatedKMeans(5, partition=10, random_state=0),
        "FederatedKMeans (blind)": lambda: FederatedKMeans(
            5, coordinator="blind", partition=10, random_state=0
        ),
    }
    rows = []
    for name, make in estimators.items():
        simulated, deployed = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            make().fit(X)
            simulated.append(time.perf_counter() - t0)
            with use_runtime(_deployed):
                t0 = time.perf_counter()
                make().fit(X)
                deployed.append(time.perf_counter() - t0)
        s, d = np.median(simulated), np.median(deployed)
        rows.append([name, f"{s:.3f}", f"{d:.3f}", f"{d / s:.2f}x"])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(RESULTS / "gate_cost.md"))
    args = parser.parse_args()
    lines = [
        "# The node's gate: what its checks cost",
        "",
        "Every client step passes the node's one gate (`skfedclust.node.serve_step`). A",
        "simulated party has the harvest rules off; a deployed node (`NodePolicy()`, no",
        "ledger) runs every rule. Command: `python benchmarks/gate_cost.py`. " + machine_line(),
        "",
        "## Per step (microseconds, median of 200 calls; a 20,000 x 10 node)",
        "",
        markdown_table(["what", "node", "us"], per_step(200)),
        "",
        f"## Per fit (20,000 x 10 rows over 10 clients, k=5; median of {args.repeats} "
        "alternating pairs, seconds)",
        "",
        markdown_table(["estimator", "simulated", "deployed", "ratio"], per_fit(args.repeats)),
    ]
    emit(lines, args.out)


if __name__ == "__main__":
    main()
