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
    (socket_path,) = (private_tmp / f"skfedclust-{os.getuid()}").glob("*.sock")
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


def test_an_idle_worker_exits_and_removes_its_socket(private_tmp):
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
    assert not list(directory.glob("*.sock"))


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
