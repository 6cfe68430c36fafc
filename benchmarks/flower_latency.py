"""Where the time of a protocol round goes on a local Flower deployment.

    python benchmarks/flower_latency.py [--nodes 3] [--method kfed]

Measures (1) what a ClientApp process pays before it runs a step: starting
Python and importing Flower's client runtime, skfedclust and a method's
module, each in a fresh interpreter; (2) a fit of the example app
(examples/flower_app) on a SuperLink and SuperNodes on loopback ports, with
Flower's defaults (the launcher polls every 1 s, replies pulled every 3 s as
``Grid.send_and_receive`` does) and with the recommended settings
(``FLWR_SUPEREXEC_TASK_POLL_INTERVAL=0.1``, ``poll-interval=0.1``). The time
per exchange is the fit's wall time over its exchanges (messages to the
nodes / nodes). Prints a Markdown report.
"""

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "examples" / "flower_app"
BIN = Path(sys.executable).parent

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


def deployment(n_nodes, method, task_poll, poll_interval, workdir):
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
            start(args, f"supernode_{i}")
        started = time.perf_counter()
        subprocess.run(
            [
                str(BIN / "flwr"),
                "run",
                ".",
                "local-deployment",
                "--stream",
                "--run-config",
                f"method='{method}' n-nodes={n_nodes} poll-interval={poll_interval} "
                f"output-dir='{workdir / 'out'}'",
            ],
            cwd=APP,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        total = time.perf_counter() - started
    finally:
        stop(processes)
    summary = json.loads((workdir / "out" / "summary.json").read_text())
    exchanges = summary["transport"]["n_messages"] / n_nodes
    return {
        "run_seconds": total,
        "fit_seconds": summary["fit_seconds"],
        "exchanges": exchanges,
        "rounds": summary["communication"]["rounds"],
        "per_exchange": summary["fit_seconds"] / exchanges,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--method", default="kfed")
    args = parser.parse_args()
    print("## Imports a ClientApp process pays per message (fresh interpreter, median of 5)\n")
    print("| import | seconds |\n| --- | ---: |")
    for label, statement in IMPORTS.items():
        print(f"| {label} | {import_seconds(statement):.2f} |")
    print(f"\n## A fit of `{args.method}` on {args.nodes} SuperNodes (loopback)\n")
    print("| settings | fit s | exchanges | s per exchange | protocol rounds |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, task_poll, poll in (
        ("Flower's defaults (launcher 1 s, pull every 3 s)", 1.0, 3.0),
        ("recommended (launcher 0.1 s, pull every 0.1 s)", 0.1, 0.1),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            r = deployment(args.nodes, args.method, task_poll, poll, Path(tmp))
        print(
            f"| {label} | {r['fit_seconds']:.1f} | {r['exchanges']:.0f} | "
            f"{r['per_exchange']:.2f} | {r['rounds']} |"
        )


if __name__ == "__main__":
    main()
