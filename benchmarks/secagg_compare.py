"""The package's secure sum side by side with Flower's SecAgg+ workflow, on the same sums.

Usage::

    python benchmarks/secagg_compare.py [--quick] [--repeats 5]

Every configuration sums ``n`` float64 vectors of length ``d`` (one per client,
entries uniform in ``[-1, 1]``), with every client answering and with one client
lost after the masking (its masked upload never arrives). Both systems run in
the same process, alternating: one repetition of the package's sum, then one of
Flower's, and so on.

* skfedclust: :class:`skfedclust.secure.SecureAggregator` on an
  :class:`~skfedclust.federation.InProcessRuntime` (clients run one after the other
  in this process). A fresh federation per repetition; ``setup()`` (the pairwise
  seeds) is timed apart from ``sum(step, bounds=1)``. Bytes and rounds of the sum
  come from the runtime's ledger.
* Flower: one aggregation of ``SecAggPlusWorkflow`` (its four stages: setup,
  share keys, collect masked vectors, unmask) inside ``flwr.simulation.run_simulation``
  (Ray backend, one actor: each ClientApp runs after the other, as ours do), on the
  first ``n`` of the simulation's nodes, with ``secaggplus_mod`` on a ClientApp whose
  ``fit`` returns the client's vector with ``num_examples=1``. The workflow runs with
  the package's graph degree and threshold (``num_shares = degree + 1``: the client
  and its neighbours), ``max_weight=1`` (so the weight costs no precision) and
  Flower's default ``clipping_range``, ``quantization_range`` and ``modulus_range``.
  The server's result (the weighted average) times the number of surviving clients
  is the sum. A client mod placed before ``secaggplus_mod`` counts the bytes of every
  message a node receives and sends and times the node's work; a wrapper around the
  grid times the server's waits. The lost client answers the collect-masked-vectors
  stage with an error message.
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import (
    cache_threadpool_scan,
    git_commit,
    machine_line,
    markdown_table,
    write_result,
)
from threadpoolctl import threadpool_limits

from skfedclust.federation import Federation, InProcessRuntime, Reply, summand
from skfedclust.federation._ledger import payload_nbytes
from skfedclust.secure import SecureAggregator
from skfedclust.secure._secure_sum import TAG_UPLOAD

BENCH_DIR = "SKFEDCLUST_SECAGG_BENCH_DIR"


def client_vector(node_id, d, scale):
    """Client ``node_id``'s vector: ``d`` floats uniform in ``[-scale, scale]``."""
    return np.random.default_rng([int(node_id), int(d)]).uniform(-scale, scale, int(d))


# ---------------------------------------------------------------- skfedclust


@summand
def own_vector(data, inbox, state, party):
    return Reply(send=data[0])


class Losing(InProcessRuntime):
    lost = ()

    def _lost(self, tag, party):
        return tag == TAG_UPLOAD and party in self.lost


def skfedclust_sum(vectors, drop, bound):
    """One set-up and one sum of ``vectors`` (one row per client); times, counts, sum."""
    n = len(vectors)
    federation = Federation(vectors, [np.array([i]) for i in range(n)])
    federation.spawn_seeds(np.random.RandomState(1))
    runtime = Losing(federation, private_entropy=[1])
    runtime.lost = (0,) if drop else ()
    aggregator = SecureAggregator(runtime, seed=0)
    start = time.perf_counter()
    aggregator.setup()
    setup_s = time.perf_counter() - start
    before = runtime.ledger.report()
    start = time.perf_counter()
    total, survivors = aggregator.sum(own_vector, tag="sum", bounds=bound)
    sum_s = time.perf_counter() - start
    after = runtime.ledger.report()
    counts = {k: after[k] - before[k] for k in ("rounds", "bytes_up", "bytes_down", "bytes_peer")}
    setup_bytes = sum(before[k] for k in ("bytes_up", "bytes_down", "bytes_peer"))
    expected = vectors[survivors].sum(axis=0)
    assert list(survivors) == list(range(int(drop), n))
    return {
        "setup_s": setup_s,
        "sum_s": sum_s,
        "bytes": counts["bytes_up"] + counts["bytes_down"] + counts["bytes_peer"],
        "counts": counts,
        "setup_bytes": setup_bytes,
        "setup_rounds": before["rounds"],
        "error": float(np.max(np.abs(np.asarray(total) - expected))),
    }


# -------------------------------------------------------------------- Flower


def content_bytes(content):
    """(payload bytes by the ledger's rule, protobuf bytes) of a Message's RecordDict."""
    from flwr.common.serde import recorddict_to_proto

    payload = 0
    for record in content.array_records.values():
        payload += sum(len(array.data) for array in record.values())
    for records in (content.config_records, content.metric_records):
        for record in records.values():
            payload += sum(payload_nbytes(value) for value in record.values())
    return payload, recorddict_to_proto(content).ByteSize()


def bench_mod(msg, ctxt, call_next):
    """Count a node's bytes and time its work; play the lost client when told to."""
    from flwr.app import Error, Message
    from flwr.app.message_type import MessageType
    from flwr.common.secure_aggregation.secaggplus_constants import (
        RECORD_KEY_CONFIGS,
        Key,
        Stage,
    )

    if msg.metadata.message_type != MessageType.TRAIN:
        return call_next(msg, ctxt)
    stage = msg.content.config_records[RECORD_KEY_CONFIGS][Key.STAGE]
    down = content_bytes(msg.content)
    fit_config = msg.content.config_records.get("fitins.config", {})
    if stage == Stage.COLLECT_MASKED_VECTORS and fit_config.get("drop", 0):
        # Lost after the masking: the request arrived, no masked vector leaves.
        out, seconds, up = Message(Error(code=0, reason="lost"), reply_to=msg), 0.0, (0, 0)
    else:
        start = time.perf_counter()
        out = call_next(msg, ctxt)
        seconds = time.perf_counter() - start
        up = content_bytes(out.content)
    line = {
        "round": msg.metadata.group_id,
        "node": msg.metadata.dst_node_id,
        "stage": stage,
        "seconds": seconds,
        "down": down,
        "up": up,
    }
    path = Path(os.environ[BENCH_DIR]) / f"{os.getpid()}.jsonl"
    with path.open("a") as f:
        f.write(json.dumps(line) + "\n")
    return out


def client_fn(context):
    from flwr.client import NumPyClient

    node_id = context.node_id

    class VectorClient(NumPyClient):
        def fit(self, parameters, config):
            return [client_vector(node_id, config["d"], config["scale"])], 1, {}

    return VectorClient().to_client()


class TimedGrid:
    """The grid, with the time the server spends waiting in ``send_and_receive``."""

    def __init__(self, grid):
        self._grid = grid
        self.waiting = 0.0

    def send_and_receive(self, messages, *, timeout=None):
        start = time.perf_counter()
        try:
            return self._grid.send_and_receive(messages, timeout=timeout)
        finally:
            self.waiting += time.perf_counter() - start

    def __getattr__(self, name):
        return getattr(self._grid, name)


def make_strategy():
    import flwr.common as fc
    from flwr.server.strategy import FedAvg

    class SumTrial(FedAvg):
        """Fit on the first ``n`` nodes, tell the first one to drop, keep the result."""

        n = 5
        config = {}
        drop = False
        nodes = []
        result = None

        def initialize_parameters(self, client_manager):
            return fc.ndarrays_to_parameters([np.zeros(1)])

        def configure_fit(self, server_round, parameters, client_manager):
            proxies = sorted(client_manager.all().values(), key=lambda p: p.node_id)[: self.n]
            self.nodes = [p.node_id for p in proxies]
            return [
                (p, fc.FitIns(parameters, {**self.config, "drop": int(self.drop and i == 0)}))
                for i, p in enumerate(proxies)
            ]

        def aggregate_fit(self, server_round, results, failures):
            self.result = fc.parameters_to_ndarrays(results[0][1].parameters)[0]
            return results[0][1].parameters, {}

        def configure_evaluate(self, server_round, parameters, client_manager):
            return []

        def evaluate(self, server_round, parameters):
            return None

    return SumTrial(fraction_evaluate=0.0)


def flower_sum(grid, context, trial, round_id, bench_dir, initial_model):
    """One SecAgg+ aggregation of ``trial``'s sum on the simulation's first n nodes."""
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.server.workflow.constant import Key as WorkflowKey

    strategy = context.strategy
    strategy.n, strategy.drop = trial["n"], trial["drop"]
    strategy.config = {"d": trial["d"], "scale": trial["scale"]}
    context.state.config_records[MAIN_CONFIGS_RECORD][WorkflowKey.CURRENT_ROUND] = round_id
    workflow = SecAggPlusWorkflow(
        num_shares=trial["degree"] + 1,
        reconstruction_threshold=trial["threshold"],
        max_weight=1.0,
    )
    # The workflow sends the global model (the strategy's 1-float array) with the fit
    # instructions and stores the round's result as the next model: reset it, so every
    # aggregation sends the same 1-float model.
    context.state.array_records[MAIN_PARAMS_RECORD] = initial_model.copy()
    timed = TimedGrid(grid)
    start = time.perf_counter()
    workflow(timed, context)
    wall = time.perf_counter() - start
    lines = []
    for path in Path(bench_dir).glob("*.jsonl"):
        for text in path.read_text().splitlines():
            line = json.loads(text)
            if line["round"] == str(round_id):
                lines.append(line)
    nodes = strategy.nodes
    survivors = nodes[int(trial["drop"]) :]
    vectors = np.array([client_vector(v, trial["d"], trial["scale"]) for v in survivors])
    total = strategy.result * len(survivors)
    client_s = sum(line["seconds"] for line in lines)
    by_stage = {}
    for line in lines:
        key = line["stage"]
        by_stage[key] = by_stage.get(key, 0) + line["down"][0] + line["up"][0]
    return {
        "wall_s": wall,
        "compute_s": wall - timed.waiting + client_s,
        "server_s": wall - timed.waiting,
        "client_s": client_s,
        "bytes": sum(line["down"][0] + line["up"][0] for line in lines),
        "bytes_pb": sum(line["down"][1] + line["up"][1] for line in lines),
        "stages": len({line["stage"] for line in lines}),
        "error": float(np.max(np.abs(total - vectors.sum(axis=0)))),
        "nodes": nodes,
        "by_stage": by_stage,
        "messages": len(lines),
    }


# ---------------------------------------------------------------------- plan


def run_plan(args, bench_dir):
    """Run every trial inside one Flower simulation; return the measurements."""
    from flwr.client import ClientApp
    from flwr.client.mod import secaggplus_mod
    from flwr.server import LegacyContext, ServerApp, ServerConfig
    from flwr.server.compat.app_utils import start_update_client_manager_thread
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.server.workflow.default_workflows import default_init_params_workflow
    from flwr.simulation import run_simulation

    from skfedclust.secure import default_degree

    configs = [(n, d, drop) for n in args.clients for d in args.dims for drop in (False, True)]
    out = {"timing": [], "exact": [], "errors": []}

    def main(grid, context):
        from flwr.app import ConfigRecord

        context = LegacyContext(
            context=context, config=ServerConfig(num_rounds=1), strategy=make_strategy()
        )
        thread, stop, done = start_update_client_manager_thread(grid, context.client_manager)
        done.wait()
        default_init_params_workflow(grid, context)  # the strategy's 1-float "model"
        initial_model = context.state.array_records[MAIN_PARAMS_RECORD].copy()
        context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({})
        round_id = 0
        try:
            with threadpool_limits(1):
                for n, d, drop, scale, repeats, kind in plan():
                    parts = [np.array([i]) for i in range(n)]
                    probe = SecureAggregator(
                        InProcessRuntime(Federation(np.zeros((n, 1)), parts)), seed=0
                    )
                    trial = {
                        "n": n,
                        "d": d,
                        "drop": drop,
                        "scale": scale,
                        "degree": probe.degree,
                        "threshold": probe.threshold,
                    }
                    for rep in range(repeats):
                        round_id += 1
                        flower = flower_sum(
                            grid, context, trial, round_id, bench_dir, initial_model
                        )
                        vectors = np.array([client_vector(v, d, scale) for v in flower["nodes"]])
                        ours = skfedclust_sum(vectors, drop, bound=scale)
                        if kind != "warmup":
                            out[kind].append({**trial, "rep": rep, "ours": ours, "flower": flower})
                        print(
                            f"{kind} n={n} d={d} drop={drop} scale={scale}: "
                            f"ours {ours['sum_s']:.3f}s (+setup {ours['setup_s']:.3f}s) "
                            f"flower {flower['wall_s']:.3f}s wall, "
                            f"{flower['compute_s']:.3f}s compute, "
                            f"{flower['messages']} replies, bytes {flower['by_stage']}",
                            flush=True,
                        )
        except Exception as exc:
            out["errors"].append(repr(exc))
            raise
        finally:
            stop.set()
            thread.join()

    def plan():
        yield 5, 100, False, 1.0, 2, "warmup"
        for n, d, drop in configs:
            yield n, d, drop, 1.0, args.repeats, "timing"
        for n in args.clients:
            yield n, 100, False, 100.0, 1, "exact"

    server_app = ServerApp()
    server_app.main()(main)
    client_app = ClientApp(client_fn=client_fn, mods=[bench_mod, secaggplus_mod])
    assert max(default_degree(n) for n in args.clients) < max(args.clients)
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=max(args.clients),
        backend_config={
            "client_resources": {"num_cpus": 2, "num_gpus": 0.0},
            "init_args": {"num_cpus": 2, "log_to_driver": False},
        },
    )
    return out


# ------------------------------------------------------------------- results


def median(rows, *path):
    values = []
    for row in rows:
        value = row
        for key in path:
            value = value[key]
        values.append(value)
    return statistics.median(values)


def fmt_s(seconds):
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def page(args, out, elapsed):
    import flwr

    groups = {}
    for row in out["timing"]:
        groups.setdefault((row["n"], row["d"], row["drop"]), []).append(row)
    time_rows, byte_rows, exact_rows = [], [], []
    for (n, d, drop), rows in groups.items():
        lost = "one client" if drop else "none"
        setup = median(rows, "ours", "setup_s")
        ours = median(rows, "ours", "sum_s")
        wall = median(rows, "flower", "wall_s")
        compute = median(rows, "flower", "compute_s")
        time_rows.append(
            [
                n,
                f"{d:,}",
                lost,
                f"{rows[0]['degree']} / {rows[0]['threshold']}",
                fmt_s(ours),
                fmt_s(setup),
                fmt_s(wall),
                fmt_s(compute),
                f"{wall / ours:.1f}",
                f"{compute / ours:.1f}",
                f"{compute / (ours + setup):.1f}",
            ]
        )
        r = rows[0]
        c = r["ours"]["counts"]
        ours_bytes = r["ours"]["bytes"]
        both = ours_bytes + r["ours"]["setup_bytes"]
        byte_rows.append(
            [
                n,
                f"{d:,}",
                lost,
                c["rounds"],
                f"{c['bytes_up']:,} / {c['bytes_down']:,} / {c['bytes_peer']:,}",
                f"{ours_bytes:,}",
                f"{r['ours']['setup_bytes']:,}",
                r["flower"]["stages"],
                f"{r['flower']['bytes']:,}",
                f"{r['flower']['bytes_pb']:,}",
                f"{r['flower']['bytes'] / ours_bytes:.1f}",
                f"{r['flower']['bytes'] / both:.1f}",
            ]
        )
        exact_rows.append(
            [
                n,
                f"{d:,}",
                lost,
                "~1 (uniform in [-1, 1])",
                f"{max(x['ours']['error'] for x in rows):.1e}",
                f"{max(x['flower']['error'] for x in rows):.1e}",
            ]
        )
    for row in out["exact"]:
        exact_rows.append(
            [
                row["n"],
                f"{row['d']:,}",
                "none",
                "~100 (uniform in [-100, 100])",
                f"{row['ours']['error']:.1e}",
                f"{row['flower']['error']:.1e}",
            ]
        )
    command = "python benchmarks/secagg_compare.py" + (" --quick" if args.quick else "")
    if args.repeats != (2 if args.quick else 5):
        command += f" --repeats {args.repeats}"
    body = f"""
Command: `{command}` (the run took {elapsed / 60:.1f} min). Package
commit: {git_commit()}. {machine_line()} flwr {flwr.__version__} (simulation, Ray backend).
Threads capped at one (`threadpool_limits(1)`, `OMP_NUM_THREADS=1` for the Ray workers);
the package's per-step thread-pool scan is cached as in the other benchmarks
(`cache_threadpool_scan`).

## What is compared

The same sum: `n` clients each hold a float64 vector of length `d` (entries uniform in
[-1, 1] unless said otherwise), the server learns the sum. "one client" lost: the first
client's masked upload never arrives, the sum is over the others.

* **skfedclust**: `SecureAggregator(runtime, seed=0)` on an `InProcessRuntime` (clients
  run one after the other in this process), `setup()` once (pairwise seeds between
  neighbours, timed apart), then `sum(step, tag=..., bounds=1)` timed (exact
  fixed-point sum in int64 words of a Mersenne field, bound 1 per entry; 100 for the
  ~100 data). Bytes and rounds from `runtime.ledger.report()` (payload bytes: arrays
  their `nbytes`, numbers 8 bytes, bytes objects their length).
* **Flower SecAgg+ (the workflow, not only its primitives)**: one aggregation of
  `SecAggPlusWorkflow` in `flwr.simulation.run_simulation`: setup (key pairs), share
  keys (encrypted Shamir shares of the mask seed and key, relayed by the server),
  collect masked vectors, unmask. ClientApp with `mods=[bench_mod, secaggplus_mod]`,
  `fit` returns the vector with `num_examples=1`; `num_shares` = the package's degree +
  1 and `reconstruction_threshold` = the package's threshold (column "degree /
  threshold"), `max_weight=1.0`, default `clipping_range=8.0`,
  `quantization_range=2**22`, `modulus_range=2**32`. The sum is the workflow's weighted
  average times the number of surviving clients. The lost client answers the
  collect-masked-vectors stage with an error message. The fit instructions carry a
  1-float global model (reset before every aggregation).
  `bench_mod` (placed before `secaggplus_mod`) measures every message a node receives
  and sends: **payload bytes** by the ledger's rule (the `Array.data` bytes of array
  records, the values of config and metric records; keys not counted) and the size of
  the content serialized to protobuf (`recorddict_to_proto(...).ByteSize()`; message
  metadata and gRPC framing not counted). Server-to-client relays of the encrypted
  shares are counted on both legs, as they travel.
* **Time**: median of {args.repeats} repetitions, the two alternating (one of Flower's,
  then one of ours, on the same vectors). Flower's **wall** time is the workflow call
  on the server: it includes the simulation's message passing (Ray actor calls, the
  in-memory link state, the grid's 0.1 s polling of replies). Flower's **compute** is
  the server's time outside `grid.send_and_receive` plus every node's time inside
  `secaggplus_mod` (and the `fit` that returns the vector): the protocol's own work,
  comparable to ours, which runs every client in this process with no transport.
  Flower's aggregation includes its key set-up (SecAgg+ agrees new keys every
  aggregation); ours is given with and without the set-up, which the package runs once
  per fit and reuses for every sum.
* **Masks.** Flower's SecAgg+ (`flwr.common.secure_aggregation.secaggplus_utils.
  pseudo_rand_gen`) expands every mask seed with numpy's `RandomState` (the Mersenne
  Twister), seeded with the 32-bit XOR of the seed's 4-byte words. The package's masks
  are ChaCha20 keystreams (SHAKE-128 for short vectors) under keys of 128 bits or more,
  and every node keys what it adds for its rules (three SHA-256 digests of the values).
  Per client and sum, at `d = 10,000` and degree 4, that is five keystreams of 80 KB
  (about 0.11 ms) and 240 KB hashed (about 0.13 ms) besides the rest of a node's work
  (about 0.4 ms per client and sum whatever `d`: the node's checks, Shamir shares,
  digests, the runtime): the ratios are lowest with few clients and long vectors, where
  Flower's key agreement is cheapest and the package's cryptographic masks cost most.

## Time per aggregation

"""
    body += markdown_table(
        [
            "clients",
            "d",
            "lost",
            "degree / threshold",
            "skfedclust sum",
            "skfedclust set-up",
            "Flower wall",
            "Flower compute",
            "wall / our sum",
            "compute / our sum",
            "compute / (our set-up + sum)",
        ],
        time_rows,
    )
    body += """

## Bytes per aggregation

Ours: the sum alone (rounds; up / down / peer bytes; total), then the one-time set-up
(bytes). Flower: the whole aggregation (4 stages, set-up included; the
lost client's request counted, it sends nothing back).

"""
    body += markdown_table(
        [
            "clients",
            "d",
            "lost",
            "our rounds",
            "our up / down / peer",
            "our total",
            "our set-up bytes",
            "Flower stages",
            "Flower payload",
            "Flower protobuf",
            "Flower payload / our sum",
            "Flower payload / (our set-up + sum)",
        ],
        byte_rows,
    )
    body += """

## Exactness: max |result − float64 sum| over all entries and repetitions

"""
    body += markdown_table(
        ["clients", "d", "lost", "data", "skfedclust", "Flower SecAgg+ (defaults)"], exact_rows
    )
    body += """

SecAgg+ clips every entry to `clipping_range` (8.0) and quantizes it to
`quantization_range` (2**22) levels over [-8, 8] (a step of about 3.8e-6) before summing
modulo 2**32: for data of magnitude ~1 the error is the rounding of each client's
entries; for data of magnitude ~100 it is the clipping. The package's sum is exact up
to the fixed-point resolution chosen from the public bound (a step of 2**-s with
n·bound·2**s < 2**62) and the rounding of the float64 result.
"""
    if out["errors"]:
        body += "\nErrors: " + "; ".join(out["errors"]) + "\n"
    write_result(
        "secagg_compare" + ("_quick" if args.quick else ""),
        "The package's secure sum and Flower's SecAgg+ on the same sums",
        body,
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="5 and 10 clients, 2 repeats")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    args.clients = (5, 10) if args.quick else (5, 10, 50)
    args.dims = (100, 10_000)
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    cache_threadpool_scan()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as bench_dir:
        os.environ[BENCH_DIR] = bench_dir
        out = run_plan(args, bench_dir)
    page(args, out, time.perf_counter() - start)


if __name__ == "__main__":
    main()
