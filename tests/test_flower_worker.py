"""The SuperNode's step worker: a thin ClientApp hands each message to one long-lived process."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, RecordDict  # noqa: E402
from flwr.app.message.message import make_message  # noqa: E402
from flwr.app.metadata import Metadata  # noqa: E402

import skfedclust.flower._step_worker as step_worker  # noqa: E402
from skfedclust.flower import make_worker_client_app  # noqa: E402

EXAMPLE_APP = Path(__file__).resolve().parents[1] / "examples" / "flower_app"


@pytest.fixture
def private_tmp(monkeypatch):
    """A short temporary directory of this test (a Unix socket path has 108 bytes)."""
    directory = tempfile.mkdtemp(prefix="sw", dir="/tmp")
    monkeypatch.setenv("TMPDIR", directory)
    monkeypatch.setattr(tempfile, "tempdir", directory)
    yield Path(directory)
    _stop_workers(Path(directory))
    shutil.rmtree(directory, ignore_errors=True)


def _stop_workers(directory):
    import psutil

    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if "skfedclust.flower._step_worker" in cmdline and str(directory) in cmdline:
            process.kill()


def _context(**node_config):
    return Context(run_id=1, node_id=7, node_config=node_config, state=RecordDict(), run_config={})


def _message(i, fail=False):
    metadata = Metadata(
        run_id=1,
        message_id=f"message {i}",
        src_node_id=1,
        dst_node_id=7,
        reply_to_message_id="",
        group_id="",
        created_at=time.time(),
        ttl=60.0,
        message_type="query.skfedclust_step",
    )
    return make_message(
        metadata=metadata, content=RecordDict({"ask": ConfigRecord({"fail": fail})})
    )


def test_a_node_with_step_worker_runs_every_message_in_one_long_lived_process(private_tmp):
    app = make_worker_client_app("flower_toy_app:app")
    context = _context(**{"step-worker": True, "step-worker-idle": 30.0})
    replies = [app(_message(i), context) for i in range(3)]
    pids = {reply.content["reply"]["pid"] for reply in replies}
    (pid,) = pids
    assert pid != os.getpid()
    # The node's state goes to the worker with each message and comes back in its Context.
    assert [reply.content["reply"]["n"] for reply in replies] == [1, 2, 3]
    assert context.state["count"]["n"] == 3
    assert [r.metadata.reply_to_message_id for r in replies] == [f"message {i}" for i in range(3)]
    (socket_path,) = (private_tmp / f"skfedclust-{os.getuid()}").glob("*/socket")
    assert socket_path.is_socket()


def test_a_node_without_step_worker_runs_the_message_in_its_own_process(private_tmp):
    app = make_worker_client_app("flower_toy_app:app")
    reply = app(_message(0), _context())
    assert reply.content["reply"]["pid"] == os.getpid()
    assert not (private_tmp / f"skfedclust-{os.getuid()}").exists()


def test_a_failure_in_the_worker_is_raised_and_leaves_the_context_unchanged(private_tmp):
    app = make_worker_client_app("flower_toy_app:app")
    context = _context(**{"step-worker": True})
    app(_message(0), context)
    with pytest.raises(RuntimeError, match="ValueError: asked to fail"):
        app(_message(1, fail=True), context)
    assert context.state["count"]["n"] == 1


def test_new_code_starts_a_new_worker(private_tmp, monkeypatch):
    app = make_worker_client_app("flower_toy_app:app")
    context = _context(**{"step-worker": True})
    first = app(_message(0), context).content["reply"]["pid"]
    monkeypatch.setattr(step_worker, "_code_version", lambda: "another version")
    second = app(_message(1), context).content["reply"]["pid"]
    assert first != second


def test_an_idle_worker_exits_and_removes_its_folder(private_tmp):
    import psutil

    app = make_worker_client_app("flower_toy_app:app")
    pid = app(_message(0), _context(**{"step-worker": True, "step-worker-idle": 0.5}))
    pid = pid.content["reply"]["pid"]
    directory = private_tmp / f"skfedclust-{os.getuid()}"

    def exited():
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # not yet reaped
        except psutil.NoSuchProcess:
            return True

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not exited():
        time.sleep(0.1)
    assert exited()
    assert not list(directory.iterdir())


def test_a_socket_directory_others_may_write_to_is_refused(private_tmp):
    directory = private_tmp / f"skfedclust-{os.getuid()}"
    directory.mkdir(mode=0o700)
    directory.chmod(0o777)
    app = make_worker_client_app("flower_toy_app:app")
    with pytest.raises(PermissionError, match="mode 0700"):
        app(_message(0), _context(**{"step-worker": True}))


def test_the_example_clientapp_imports_neither_scikit_learn_nor_the_methods():
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import skfedclust_app.client_app; "
        "print(sorted(m for m in ('sklearn', 'scipy', 'numba', 'skfedclust.methods') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(EXAMPLE_APP)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- #
# A worker ends with its node; ``workers list`` and ``workers stop``
# --------------------------------------------------------------------------- #
#: A stand-in for a node program: runs the command it is given, then stays.
NODE_PROGRAM = """\
import subprocess, sys, time
subprocess.run(sys.argv[1:], check=True)
time.sleep(600)
"""
#: The ClientApp process of one message: prints the pid of the worker that answered.
CLIENTAPP_PROCESS = """\
from skfedclust.flower import make_worker_client_app
from test_flower_worker import _context, _message
app = make_worker_client_app("flower_toy_app:app")
reply = app(_message(0), _context(**{"step-worker": True, "step-worker-idle": 120.0}))
print(reply.content["reply"]["pid"], flush=True)
"""


def _node_program(directory, name):
    path = directory / name
    path.write_text(NODE_PROGRAM)
    return str(path)


def _ended(pid):
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_until(condition, seconds):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_a_worker_ends_with_its_supernode_and_removes_its_folder(private_tmp):
    # As Flower 1.42 runs it: the SuperNode starts a process launcher, which
    # starts the ClientApp process of each message; the worker's parent (that
    # ClientApp process) ends at once, the launcher stays.
    tests = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(tests).parent), tests])}
    command = [sys.executable, _node_program(private_tmp, "flower-supernode")]
    command += [sys.executable, _node_program(private_tmp, "flower-superexec")]
    command += [sys.executable, "-c", CLIENTAPP_PROCESS]
    supernode = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    launcher = []
    try:
        pid = int(supernode.stdout.readline())
        launcher = _children(supernode.pid)  # the process launcher
        (worker,) = step_worker.list_workers()
        assert (worker.pid, worker.node_pid, worker.node_id) == (pid, supernode.pid, 7)
        assert worker.running and (worker.folder / "socket").is_socket()
        supernode.kill()
        supernode.wait()
        # The launcher still runs: the worker watches the SuperNode itself.
        assert launcher and not any(_ended(p) for p in launcher)
        assert _wait_until(lambda: _ended(pid), 5 * step_worker.WATCH_SECONDS + 3)
        assert not worker.folder.exists()
        assert step_worker.list_workers() == []
    finally:
        supernode.kill()
        supernode.wait()
        supernode.stdout.close()
        for p in launcher:
            os.kill(p, 9)


def _children(pid):
    import psutil

    return [p.pid for p in psutil.Process(pid).children()]


def test_a_worker_started_outside_a_supernode_watches_no_node_process(private_tmp):
    app = make_worker_client_app("flower_toy_app:app")
    pid = app(_message(0), _context(**{"step-worker": True})).content["reply"]["pid"]
    (worker,) = step_worker.list_workers()
    assert worker.pid == pid and worker.node_pid is None and worker.running


def _run_cli(*argv):
    import contextlib
    import io

    from skfedclust.flower.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(list(argv))
    return status, out.getvalue()


def _two_nodes_workers():
    """A worker-backed ClientApp and the pids of the workers it started for nodes 7 and 8."""
    app = make_worker_client_app("flower_toy_app:app")
    pids = []
    for node_id in (7, 8):
        context = _context(**{"step-worker": True})
        context.node_id = node_id
        pids.append(app(_message(0), context).content["reply"]["pid"])
    return app, pids


def test_workers_list_and_stop_name_this_users_workers(private_tmp):
    app, pids = _two_nodes_workers()
    status, printed = _run_cli("workers", "list")
    assert status == 0
    header, *lines = printed.splitlines()
    assert header.split() == ["PID", "SUPERNODE", "NODE", "AGE", "STATE", "FOLDER"]
    folders = {}
    for line in lines:
        pid, node_pid, node_id, age, unit, state, folder = line.split()
        assert (node_pid, state, unit) == ("-", "running", "s")
        folders[int(pid)] = Path(folder)
    assert sorted(folders) == sorted(pids)
    assert all(
        folder.parent == private_tmp / f"skfedclust-{os.getuid()}" for folder in folders.values()
    )

    status, printed = _run_cli("workers", "stop", str(pids[0]))
    assert status == 0 and printed.startswith(f"stopped {pids[0]} ")
    assert _ended(pids[0]) and not folders[pids[0]].exists()
    assert not _ended(pids[1]) and folders[pids[1]].exists()
    # The other worker still answers its node.
    context = _context(**{"step-worker": True})
    context.node_id = 8
    assert app(_message(1), context).content["reply"]["pid"] == pids[1]


def test_workers_stop_refuses_what_is_not_a_running_worker(private_tmp, capsys):
    from skfedclust.flower.__main__ import main

    app = make_worker_client_app("flower_toy_app:app")
    pid = app(_message(0), _context(**{"step-worker": True})).content["reply"]["pid"]
    for argv in (["workers", "stop", str(os.getpid())], ["workers", "stop", str(pid), "1"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        assert "not a running step worker" in capsys.readouterr().err
    # Nothing was stopped, not even the worker named with a wrong pid.
    assert not _ended(pid)
    with pytest.raises(SystemExit):
        main(["workers", "stop"])
    assert "PIDs (see workers list) or --all" in capsys.readouterr().err


def test_workers_stop_all_stops_the_running_and_removes_the_ended_workers_folders(private_tmp):
    app, pids = _two_nodes_workers()
    # A worker killed outright cannot remove its folder: listed as ended.
    os.kill(pids[0], 9)
    assert _wait_until(lambda: _ended(pids[0]), 5)
    states = {w.pid: w.running for w in step_worker.list_workers()}
    assert states == {pids[0]: False, pids[1]: True}
    assert _run_cli("workers", "list")[1].count(" ended ") == 1
    status, printed = _run_cli("workers", "stop", "--all")
    assert status == 0
    assert f"removed the folder of ended worker {pids[0]}" in printed
    assert f"stopped {pids[1]}" in printed
    assert _ended(pids[1])
    assert list((private_tmp / f"skfedclust-{os.getuid()}").iterdir()) == []
    assert _run_cli("workers", "list")[1] == f"no step worker of user {os.getuid()}\n"


def test_a_worker_that_cannot_start_is_reported_at_once_and_keeps_its_log(private_tmp):
    app = make_worker_client_app("no_such_module_of_the_node:app")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="exited with status 1 before it listened") as error:
        app(_message(0), _context(**{"step-worker": True}))
    assert "ModuleNotFoundError: No module named 'no_such_module_of_the_node'" in str(error.value)
    assert time.monotonic() - started < 60
    (log,) = (private_tmp / f"skfedclust-{os.getuid()}").glob("*/log")
    assert "ModuleNotFoundError" in log.read_text()
