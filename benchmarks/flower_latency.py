"""Where the time of a protocol round goes on a local Flower deployment.

    python benchmarks/flower_latency.py [--nodes 3] [--method kfed]

Writes ``benchmarks/results/flower_latency.md`` (the page's hand-written
section "Where an exchange's time goes" is kept from one run to the next).
Measures (1) what a ClientApp process pays before it runs a step: starting
Python and importing Flower's client runtime, skfedclust and a method's
module, each in a fresh interpreter; (2) Flower's own floor: a ClientApp that
imports Flower only and echoes each message, on the same SuperLink and
SuperNodes, driven by a ServerApp that pulls the replies every 0.1 s; (3) a
fit of the example app (examples/flower_app) on a SuperLink and SuperNodes on
loopback ports: with Flower's defaults (the launcher polls every 1 s, replies
pulled every 3 s as ``Grid.send_and_receive`` does), with the recommended
settings (``FLWR_SUPEREXEC_TASK_POLL_INTERVAL=0.1``, ``poll-interval=0.1``)
without a step worker, and with the recommended settings and the nodes' step
workers (``step-worker=true``, as ``prepare_data.py`` writes). The time per
exchange is the fit's wall time over its exchanges (messages to the nodes /
nodes); the floor's, its exchanges' mean.
"""

import argparse
import json
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _common import git_commit

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "examples" / "flower_app"
BIN = Path(sys.executable).parent

RESULT = ROOT / "benchmarks" / "results" / "flower_latency.md"
#: The goal: an exchange at most this many seconds above Flower's floor.
GOAL_OWN_SECONDS = 1.0
#: The hand-written part of the results page starts at this heading.
ANALYSIS = "## Where an exchange's time goes"

IMPORTS = {
    "python (no import)": "pass",
    "numpy": "import numpy",
    "Flower's ClientApp runtime": "import flwr.supernode.runtime.run_clientapp",
    "scikit-learn (sklearn.base)": "import sklearn.base",
    "skfedclust": "import skfedclust",
    "skfedclust.flower": "import skfedclust.flower",
    "the example's client_app": "import skfedclust_app.client_app",
    "k-FED's steps (skfedclust.methods._kfed)": "import skfedclust.methods._kfed",
}


def import_seconds(statement, repeat=5):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True, cwd=APP)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def stop(processes):
    tree = []
    for p in processes:
        try:
            tree.extend(psutil.Process(p.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    for p in [*processes, *tree]:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(
        [psutil.Process(p.pid) for p in processes if p.poll() is None] + tree, timeout=10
    )
    for p in alive:
        p.kill()


def deployment(n_nodes, method, task_poll, poll_interval, workdir, *, step_worker=True, app=APP):
    superlink_port, *node_ports = free_ports(1 + n_nodes)
    home = workdir / "flwr-home"
    home.mkdir(parents=True)
    (home / "config.toml").write_text(
        f'[superlink.local-deployment]\naddress = "127.0.0.1:{superlink_port}"\ninsecure = true\n'
    )
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": str(task_poll),
        # The nodes' step workers: sockets under a short directory of this run's own.
        "TMPDIR": tempfile.mkdtemp(prefix="fl", dir="/tmp"),
    }
    processes = []

    def start(args, name):
        log = open(workdir / f"{name}.log", "w")  # noqa: SIM115 - lives with the process
        processes.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env))

    try:
        start(
            shlex.split(
                f"{BIN}/flower-superlink --insecure --port {superlink_port} "
                "--disable-runtime-dependency-installation"
            ),
            "superlink",
        )
        deadline = time.monotonic() + 60
        while socket.socket().connect_ex(("127.0.0.1", superlink_port)) != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("the SuperLink did not start")
            time.sleep(0.2)
        printed = subprocess.run(
            [
                sys.executable,
                "prepare_data.py",
                str(workdir / "data"),
                str(n_nodes),
                str(superlink_port),
            ],
            cwd=APP,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        for i, (command, port) in enumerate(zip(printed, node_ports)):
            args = shlex.split(command)
            args[0] = str(BIN / args[0])
            args[args.index("--port") + 1] = str(port)
            if not step_worker:
                config = args.index("--node-config") + 1
                args[config] = args[config].replace("step-worker=true", "step-worker=false")
            start(args, f"supernode_{i}")
        # Two runs on the same nodes, the second measured: the first starts the
        # nodes' step workers (a node's first message imports the package once) and
        # installs the app, as any earlier fit on a running deployment has.
        for output in ("warm-up", "measured"):
            target = workdir / output
            if method == "floor":
                run_config = (
                    f"n-nodes={n_nodes} poll-interval={poll_interval} output='{target}.json'"
                )
            else:
                run_config = (
                    f"method='{method}' n-nodes={n_nodes} poll-interval={poll_interval} "
                    f"output-dir='{target}'"
                )
            started = time.perf_counter()
            run = subprocess.run(
                [
                    str(BIN / "flwr"),
                    "run",
                    str(app),
                    "local-deployment",
                    "--stream",
                    "--run-config",
                    run_config,
                ],
                cwd=APP,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            total = time.perf_counter() - started
    finally:
        # A worker removes its log when its SuperNode stops: read the logs first.
        worker_seconds = _worker_seconds(Path(env["TMPDIR"]))
        stop(processes)
        _stop_step_workers(env["TMPDIR"])
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)
    produced = workdir / ("measured.json" if method == "floor" else "measured/summary.json")
    if not produced.exists():
        logs = "".join(p.read_text()[-2000:] for p in sorted(workdir.glob("*.log")))
        raise RuntimeError(
            f"flwr run wrote no {produced.name}:\n{run.stdout[-3000:]}\n"
            f"{run.stderr[-3000:]}\n{logs}"
        )
    if method == "floor":
        times = json.loads(produced.read_text())["exchanges"]
        return {
            "run_seconds": total,
            "fit_seconds": sum(times),
            "exchanges": len(times),
            "rounds": len(times),
            "per_exchange": statistics.mean(times),
        }
    summary = json.loads(produced.read_text())
    # Each exchange the server made, handshake and write-out included (the
    # transport's message count holds messages both ways).
    exchanges = summary["transport"]["n_exchanges"]
    return {
        "run_seconds": total,
        "fit_seconds": summary["fit_seconds"],
        "seconds_waiting": summary["transport"]["seconds_waiting"],
        "n_exchanges": summary["transport"]["n_exchanges"],
        "worker_seconds": worker_seconds,
        "exchanges": exchanges,
        "rounds": summary["communication"]["rounds"],
        "per_exchange": summary["fit_seconds"] / exchanges,
    }


def _worker_seconds(tmpdir):
    """Per node (one worker log each): the seconds its worker spent on each message."""
    out = []
    for log in sorted(tmpdir.glob("skfedclust-*/*/log")):
        seconds = [
            float(line.split()[-2])
            for line in log.read_text().splitlines()
            if line.startswith("handled a message in ")
        ]
        if seconds:
            out.append(seconds)
    return out


def socket_round_trip(repeat=200):
    """Seconds a thin ClientApp spends handing an empty message to a worker and back."""
    sys.path.insert(0, str(APP))
    from flwr.app import Context, RecordDict
    from flwr.app.message.message import make_message
    from flwr.app.metadata import Metadata

    from skfedclust.flower import make_worker_client_app

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        app_dir = Path(tmp) / "echo_worker_app"
        app_dir.mkdir()
        (app_dir / "__init__.py").write_text("")
        (app_dir / "app.py").write_text(
            "from flwr.app import Message\nfrom flwr.clientapp import ClientApp\n"
            "app = ClientApp()\n\n@app.query('skfedclust_step')\n"
            "def step(message, context):\n    return Message(message.content, "
            "reply_to=message)\n"
        )
        sys.path.insert(0, tmp)
        saved = tempfile.tempdir
        tempfile.tempdir = tmp
        try:
            thin = make_worker_client_app("echo_worker_app.app:app")
            context = Context(
                run_id=1,
                node_id=1,
                node_config={"step-worker": True, "step-worker-idle": 30.0},
                state=RecordDict(),
                run_config={},
            )

            def message(i):
                metadata = Metadata(
                    run_id=1,
                    message_id=str(i),
                    src_node_id=1,
                    dst_node_id=1,
                    reply_to_message_id="",
                    group_id="",
                    created_at=time.time(),
                    ttl=60.0,
                    message_type="query.skfedclust_step",
                )
                return make_message(metadata=metadata, content=RecordDict())

            thin(message(0), context)  # starts the worker
            start = time.perf_counter()
            for i in range(repeat):
                thin(message(i + 1), context)
            return (time.perf_counter() - start) / repeat
        finally:
            tempfile.tempdir = saved
            _stop_step_workers(tmp)
            sys.path.remove(tmp)


def _stop_step_workers(tmpdir):
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if "skfedclust.flower._step_worker" in cmdline and tmpdir in cmdline:
            process.kill()


FLOOR_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "flower-floor"
version = "0.1.0"
description = "Flower alone: a ClientApp that echoes, for the floor of an exchange."
license = { file = "LICENSE" }
dependencies = ["flwr>=1.42"]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "skfedclust"
fab-format-version = 1
flwr-version-target = "1.42.0"

[tool.flwr.app.components]
serverapp = "floor_app.server_app:app"
clientapp = "floor_app.client_app:app"

[tool.flwr.app.config]
exchanges = 16
n-nodes = 3
poll-interval = 0.1
output = ""
"""

FLOOR_CLIENT = """\
from flwr.app import Message
from flwr.clientapp import ClientApp

app = ClientApp()


@app.query("echo")
def echo(message, context):
    return Message(message.content, reply_to=message)
"""

FLOOR_SERVER = """\
import json
import time
from pathlib import Path

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import ServerApp

app = ServerApp()


@app.main()
def main(grid, context):
    config = context.run_config
    n_nodes, poll = int(config["n-nodes"]), float(config["poll-interval"])
    deadline = time.monotonic() + 120
    while len(nodes := sorted(grid.get_node_ids())) < n_nodes and time.monotonic() < deadline:
        time.sleep(0.2)
    times = []
    for i in range(int(config["exchanges"])):
        start = time.perf_counter()
        messages = [
            Message(RecordDict({"x": ConfigRecord({"i": i})}), dst_node_id=n,
                    message_type="query.echo")
            for n in nodes[:n_nodes]
        ]
        pending = set(grid.push_messages(messages))
        while pending:
            pending -= {r.metadata.reply_to_message_id for r in grid.pull_messages(pending)}
            if pending:
                time.sleep(poll)
        times.append(time.perf_counter() - start)
    Path(config["output"]).write_text(json.dumps({"exchanges": times}))
"""


def write_floor_app(directory):
    """A Flower app of Flower alone: each exchange an echo from every node."""
    (directory / "floor_app").mkdir(parents=True)
    (directory / "pyproject.toml").write_text(FLOOR_PYPROJECT)
    (directory / "LICENSE").write_text((APP / "LICENSE").read_text())
    (directory / "floor_app" / "__init__.py").write_text("")
    (directory / "floor_app" / "client_app.py").write_text(FLOOR_CLIENT)
    (directory / "floor_app" / "server_app.py").write_text(FLOOR_SERVER)
    return directory


def _kept_analysis():
    if not RESULT.exists():
        return ""
    text = RESULT.read_text()
    start = text.find(ANALYSIS)
    return text[start:].strip() if start >= 0 else ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--method", default="kfed")
    args = parser.parse_args()
    import flwr

    load_before = "/".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        "# Flower: where a protocol round's time goes",
        "",
        f"`python benchmarks/flower_latency.py` (flwr {flwr.__version__}, package at commit "
        f"{git_commit()}, {os.cpu_count()} cores, a SuperLink and {args.nodes} SuperNodes on "
        f"loopback, the example app fitting `{args.method}` on the demo data; each setting "
        "runs twice on the same nodes and the second run is measured, the first having "
        "started the nodes' step workers and installed the app). Load average "
        f"(1/5/15 min) before the run: {load_before}.",
        "",
        "## Imports a ClientApp process pays per message (fresh interpreter, median of 5)",
        "",
        "| import | seconds |",
        "| --- | ---: |",
    ]
    for label, statement in IMPORTS.items():
        lines.append(f"| {label} | {import_seconds(statement):.2f} |")
        print(lines[-1], flush=True)
    lines += [
        "",
        f"## A fit of `{args.method}` on {args.nodes} SuperNodes",
        "",
        "| settings | fit s | exchanges | s per exchange | protocol rounds |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    settings = (
        (
            "Flower alone: an echo ClientApp (launcher 0.1 s, pull every 0.1 s)",
            "floor",
            0.1,
            0.1,
            False,
        ),
        ("Flower's defaults (launcher 1 s, pull every 3 s)", args.method, 1.0, 3.0, False),
        ("recommended (launcher 0.1 s, pull every 0.1 s)", args.method, 0.1, 0.1, False),
        ("recommended and step workers (`step-worker=true`)", args.method, 0.1, 0.1, True),
    )
    per_exchange = {}
    for label, method, task_poll, poll, worker in settings:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            app = write_floor_app(tmp / "floor") if method == "floor" else APP
            r = deployment(args.nodes, method, task_poll, poll, tmp, step_worker=worker, app=app)
        per_exchange[label] = r["per_exchange"]
        last = r
        lines.append(
            f"| {label} | {r['fit_seconds']:.1f} | {r['exchanges']:.0f} | "
            f"{r['per_exchange']:.2f} | {r['rounds']} |"
        )
        print(lines[-1], flush=True)
    floor = per_exchange[settings[0][0]]
    without = per_exchange[settings[2][0]]
    ours_exchange = per_exchange[settings[-1][0]]
    lines += [
        "",
        "An exchange is one message to every node and its replies (handshake, each",
        "client step, the final write-out); a fit's time per exchange is its wall time",
        "over its exchanges. The echo app's ClientApp imports Flower only and returns",
        "the message: its exchanges are Flower's floor.",
        "",
        "## Above Flower's floor",
        "",
        "| setting | s per exchange | above the floor s |",
        "| --- | ---: | ---: |",
    ]
    for label, *_ in settings[2:]:
        lines.append(f"| {label} | {per_exchange[label]:.2f} | {per_exchange[label] - floor:.2f} |")
    above = ours_exchange - floor
    lines += [
        "",
        f"**Goal (an exchange at most {GOAL_OWN_SECONDS:g} s above Flower's floor, with the "
        f"recommended settings and step workers): "
        f"{'met' if above <= GOAL_OWN_SECONDS else 'not met'}**, {above:.2f} s above the "
        f"floor's {floor:.2f} s; without step workers {without - floor:.2f} s above it. "
        "A fit's exchange can take less than the echo app's: a node sleeps 3 s after an "
        "empty pull, and whether that sleep falls inside an exchange depends on when the "
        "next message comes; the package's own time below is the direct measure. "
        "Load average after the run: " + "/".join(f"{x:.1f}" for x in os.getloadavg()) + ".",
    ]
    # The package's own time in an exchange of the fit with step workers: what an
    # exchange would lose if the package's work took no time.
    server_own = (last["fit_seconds"] - last["seconds_waiting"]) / last["n_exchanges"]
    node_means = [statistics.mean(seconds) for seconds in last["worker_seconds"]]
    slowest_node = max(node_means) if node_means else float("nan")
    runtime_import = "import flwr.supernode.runtime.run_clientapp"
    thin_import = max(
        0.0,
        import_seconds(f"{runtime_import}; import skfedclust_app.client_app")
        - import_seconds(runtime_import),
    )
    round_trip = socket_round_trip()
    ours = server_own + slowest_node + thin_import + round_trip
    lines += [
        "",
        "## The package's own time per exchange (step workers)",
        "",
        "| part | seconds per exchange |",
        "| --- | ---: |",
        f"| server: its own work between two exchanges (fit time less the waits for "
        f"replies, over {last['n_exchanges']} exchanges) | {server_own:.3f} |",
        f"| node: its step worker per message (mean of the slowest of {len(node_means)} "
        f"nodes, from the workers' logs) | {slowest_node:.3f} |",
        f"| node: the thin ClientApp's import beyond Flower's ClientApp runtime | "
        f"{thin_import:.3f} |",
        f"| node: the message and Context to the worker and back (empty message, mean of 200) | "
        f"{round_trip:.3f} |",
        f"| total | {ours:.3f} |",
        "",
        f"The package's own time is {ours:.3f} s per exchange; the rest is Flower's: its "
        "polls, its 3 s idle sleep after an empty pull, its process per message and its "
        "runtime's import.",
    ]
    analysis = _kept_analysis()
    RESULT.write_text("\n".join(lines) + ("\n\n" + analysis if analysis else "") + "\n")
    print(f"wrote {RESULT}")


if __name__ == "__main__":
    main()
