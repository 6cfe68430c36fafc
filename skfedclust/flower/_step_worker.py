"""A long-lived step worker per SuperNode: a ClientApp process that imports almost nothing.

Flower 1.42 starts a new ``flwr-clientapp`` process for every message a
SuperNode receives. Importing scikit-learn, SciPy, numba and the package's
methods in each of them costs about 1.5 s on an idle machine, more than the
step itself for most protocol rounds. :func:`make_worker_client_app` builds a
thin ClientApp that imports only the standard library and Flower's own
serialisation (already loaded by the ``flwr-clientapp`` process): with the
node config ``step-worker=true`` it hands each message, with the node's
Context, to a worker process it starts on first use and that keeps the real
ClientApp (``target``) imported, then returns the worker's reply and the
Context the worker updated. Without ``step-worker=true`` it imports the real
ClientApp in its own process and calls it, as a plain ClientApp would.

The worker is the node's own process: it runs as the SuperNode's user and
listens on a Unix socket in a folder of its own (``socket``, with ``lock``,
``log`` and its record ``worker.json``) inside a directory only that user may
open (``$TMPDIR/skfedclust-<uid>``, mode 0700, checked at every connection).
One worker serves one SuperNode (its node id), one ClientApp ``target`` on one
``sys.path``, and one version of the package's code: a change of any of them
starts a new worker. A worker handles one message at a time.

A worker ends with its node. The ClientApp that starts it looks up the
SuperNode among its own ancestors (Flower 1.42 runs the ClientApp in a
process of the SuperNode's process launcher, ``flower-superexec``, itself a
child of ``flower-supernode``; with ``--isolation process`` there is no
SuperNode above it and the launcher stands for the node) and hands the worker
its pid and start time, which the worker checks every ``WATCH_SECONDS``
(0.5 s). ``PR_SET_PDEATHSIG`` would not do: it binds to the
worker's parent, the short-lived ClientApp process of the first message. A
worker also exits after ``step-worker-idle`` seconds without a message (node
config, default 600) and on SIGTERM (``python -m skfedclust.flower workers
stop``). Ending so, it removes its folder, log included: the log holds one
timing line per message, and a step's failure goes back to the ClientApp,
which raises it. A worker that fails itself (its ``target`` does not import,
say) leaves its folder, the traceback in its ``log``, for its operator
(``workers list`` shows it as ended, ``workers stop --all`` removes it).

Nothing crosses the socket but what the ClientApp process would hand the
ClientApp in its own memory: the message and the Context, as Flower's
protocol buffers, and the reply. The node's state stays in its Context, which
Flower keeps; a worker that stops loses nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import json
import math
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

from ._actions import FINISH, HELLO, STEP

__all__ = ["make_worker_client_app", "worker_socket_directory"]

#: How long a worker waits for its next message before it exits (seconds).
DEFAULT_IDLE_SECONDS = 600.0
#: How often a worker looks whether its node process still runs (seconds).
WATCH_SECONDS = 0.5
#: How long a ClientApp waits for a worker it started to listen (its imports).
_START_TIMEOUT = 120.0
_HEADER = struct.Struct("!Q")
_OK, _ERROR = b"0", b"1"
#: The files of a worker's folder.
_SOCKET, _LOCK, _LOG, _RECORD = "socket", "lock", "log", "worker.json"
#: The programs of a node's processes, by precedence: the SuperNode, else the
#: process launcher that stands for it (``--isolation process``).
_NODE_PROGRAMS = ("flower-supernode", "flower-superexec")
#: A word of every worker's command line.
_WORKER_MODULE = "skfedclust.flower._step_worker"


def _truthy(value):
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


def _idle_seconds(value):
    """``step-worker-idle`` as positive finite seconds, or ``None`` if it is not one."""
    if isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _user_directory():
    return Path(tempfile.gettempdir()) / f"skfedclust-{os.getuid()}"


def worker_socket_directory():
    """The directory of this user's workers' sockets, created private if absent.

    Refuses a directory another user owns or may write to: a socket there
    could be another user's process posing as the node's worker.
    """
    directory = _user_directory()
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        pass
    _check_private(directory)
    return directory


def _check_private(directory):
    info = directory.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(
            f"{directory} must be a directory of user {os.getuid()} with mode 0700 (it holds "
            "the sockets of the node's step workers); remove it or fix its owner and mode"
        )


def _code_version():
    """The package's version and the newest modification time of its modules."""
    package = Path(__file__).resolve().parents[1]
    newest = max(p.stat().st_mtime_ns for p in package.rglob("*.py"))
    from .. import __version__

    return f"{__version__}:{newest}"


def _worker_key(target, node_id):
    identity = json.dumps([target, int(node_id), sys.executable, sys.path, _code_version()])
    return hashlib.sha256(identity.encode()).hexdigest()[:24]


# --------------------------------------------------------------------------- #
# Frames on the socket: a length, then the bytes
# --------------------------------------------------------------------------- #
def _send(connection, *parts):
    connection.sendall(b"".join(_HEADER.pack(len(p)) + p for p in parts))


def _receive_exactly(connection, n):
    chunks, left = [], n
    while left:
        chunk = connection.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the step worker closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _receive(connection, count):
    return [
        _receive_exactly(connection, _HEADER.unpack(_receive_exactly(connection, _HEADER.size))[0])
        for _ in range(count)
    ]


# --------------------------------------------------------------------------- #
# Processes: the node's, and the workers'
# --------------------------------------------------------------------------- #
def _process(pid):
    """``(parent pid, argv, start time)`` of a running process, or None (a zombie has ended).

    From ``/proc`` where there is one (the start time then tells a reused pid
    apart), else from ``ps`` (the command line split at spaces, no start time).
    """
    if Path("/proc/self/stat").exists():
        return _process_from_proc(pid)
    return _process_from_ps(pid)


def _process_from_proc(pid):
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields
    # from the state on follow its last ")".
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), [a.decode(errors="replace") for a in argv if a], int(fields[19])


def _process_from_ps(pid):
    out = subprocess.run(
        ["ps", "-o", "ppid=", "-o", "stat=", "-o", "command=", "-p", str(int(pid))],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split(None, 2)
    if len(out) < 3 or out[1].startswith("Z"):
        return None
    return int(out[0]), out[2].split(), None


def _is_running(pid, start=None):
    """Whether process ``pid`` runs, and is the one that started at ``start`` if given."""
    info = _process(pid)
    return info is not None and (start is None or info[2] is None or info[2] == start)


def _node_program(argv):
    """The node program a command line runs (``flower-supernode``...), or None.

    A console script runs as ``python /path/flower-supernode ...``: the
    program is its first or its second word.
    """
    names = [os.path.basename(word) for word in argv[:2]]
    return next((name for name in names if name in _NODE_PROGRAMS), None)


def _node_process():
    """``(pid, start time)`` of the node process this ClientApp runs under, else ``(None, None)``.

    The nearest ancestor running ``flower-supernode``, else the nearest
    running ``flower-superexec``: the ClientApp process's own parent is the
    process launcher, not the SuperNode.
    """
    found = {}
    pid, seen = os.getppid(), set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        info = _process(pid)
        if info is None:
            break
        parent, argv, start = info
        found.setdefault(_node_program(argv), (pid, start))
        if _NODE_PROGRAMS[0] in found:
            break
        pid = parent
    return next((found[p] for p in _NODE_PROGRAMS if p in found), (None, None))


class StepWorker(NamedTuple):
    """A step worker of this user, as ``workers list`` shows it."""

    pid: int
    node_pid: int
    node_id: int
    started: float
    folder: Path
    running: bool


def list_workers():
    """This user's step workers: one per folder in :func:`worker_socket_directory`.

    Returns
    -------
    workers : list of StepWorker
        Ordered by start. ``running`` is False for a worker that ended
        without removing its folder (a failure: see its ``log``). A folder
        without a record (a worker starting) is left out.
    """
    directory = _user_directory()
    if not directory.exists():
        return []
    _check_private(directory)
    workers = []
    for folder in directory.iterdir():
        record = _read_record(folder)
        if record is None:
            continue
        workers.append(
            StepWorker(
                pid=record["pid"],
                node_pid=record["node_pid"],
                node_id=record["node_id"],
                started=record["started"],
                folder=folder,
                running=_is_worker(record["pid"]),
            )
        )
    return sorted(workers, key=lambda w: w.started)


def _is_worker(pid):
    info = _process(pid)
    return info is not None and _WORKER_MODULE in info[1]


def stop_workers(pids=None, timeout=10.0):
    """Stop this user's step workers ``pids`` (default: all), and remove the folders of ended ones.

    Parameters
    ----------
    pids : iterable of int, default=None
        The workers to stop, as :func:`list_workers` gives them; ``None``
        stops every running worker and removes every ended worker's folder.
    timeout : float, default=10
        Seconds a worker has to end on SIGTERM (it finishes the message it
        is answering) before it is killed and its folder removed for it.

    Returns
    -------
    stopped : list of StepWorker
        The workers stopped or whose folder was removed.

    Raises
    ------
    ValueError
        If a pid is not a running step worker of this user; none is stopped then.
    """
    workers = list_workers()
    if pids is None:
        chosen = workers
    else:
        running = {w.pid: w for w in workers if w.running}
        unknown = [pid for pid in pids if pid not in running]
        if unknown:
            raise ValueError(
                f"not a running step worker of user {os.getuid()}: "
                f"{', '.join(map(str, unknown))} (see: python -m skfedclust.flower workers list)"
            )
        chosen = [running[pid] for pid in dict.fromkeys(pids)]
    for worker in chosen:
        if worker.running:
            os.kill(worker.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for worker in chosen:
        # Until it has ended (an ending process loses its command line first).
        while worker.running and _process(worker.pid) is not None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if worker.running and _is_worker(worker.pid):
            os.kill(worker.pid, signal.SIGKILL)
        _remove_ended_workers_folder(worker)
    return chosen


def _remove_ended_workers_folder(worker):
    with _folder_lock(worker.folder, create=False) as locked:
        if locked and _record_pid(worker.folder) == worker.pid:
            _remove_folder(worker.folder)


# --------------------------------------------------------------------------- #
# The ClientApp side
# --------------------------------------------------------------------------- #
def _load_target(target):
    module, _, attribute = target.partition(":")
    app = importlib.import_module(module)
    for name in attribute.split("."):
        app = getattr(app, name)
    return app


def _connect(path):
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(path))
    except OSError:
        connection.close()
        return None
    return connection


#: The workers this process started, never collected: Popen warns when it is
#: collected while its process runs, and a worker is meant to outlive this process.
_STARTED = []


def _start_worker(folder, target, node_id, idle):
    """Start the worker of ``folder``, told which process is its node's."""
    node_pid, node_start = _node_process()
    command = [
        sys.executable,
        "-m",
        _WORKER_MODULE,
        "--folder",
        str(folder),
        "--target",
        target,
        "--sys-path",
        json.dumps(sys.path),
        "--idle",
        str(idle),
        "--node-id",
        str(int(node_id)),
    ]
    if node_pid is not None:
        command += ["--node-pid", str(node_pid)]
    if node_start is not None:  # none where ps gives it (no /proc)
        command += ["--node-start", str(node_start)]
    with open(folder / _LOG, "ab") as err:
        # Its own session: the worker outlives this ClientApp process.
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            close_fds=True,
        )
    _STARTED.append(process)
    return process


@contextlib.contextmanager
def _folder_lock(folder, create=True):
    """Hold the lock of ``folder``; yields False if its worker removed the folder meanwhile.

    A worker that ends removes its folder under this lock: a ClientApp that
    waited for the lock then holds a removed file, and must look again.
    ``create`` makes the folder if it is missing (a ClientApp about to start
    its worker); a worker or ``workers stop`` never does.
    """
    if create:
        folder.mkdir(mode=0o700, exist_ok=True)
    try:
        lock = open(folder / _LOCK, "a")  # noqa: SIM115 - closed below, after the yield
    except FileNotFoundError:
        yield False
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield _is_the_file_at(lock, folder / _LOCK)


def _is_the_file_at(opened, path):
    try:
        here = path.stat()
    except FileNotFoundError:
        return False
    there = os.fstat(opened.fileno())
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _worker_connection(target, node_id, idle):
    """A connection to the node's worker for ``target``, started if none listens."""
    folder = worker_socket_directory() / _worker_key(target, node_id)
    while True:
        connection = _connect(folder / _SOCKET)
        if connection is not None:
            return connection
        # One ClientApp process starts the worker; the others wait for it.
        with _folder_lock(folder) as locked:
            if locked:
                connection = _connect(folder / _SOCKET)
                if connection is not None:
                    return connection
                return _start_and_connect(folder, target, node_id, idle)


def _start_and_connect(folder, target, node_id, idle):
    (folder / _SOCKET).unlink(missing_ok=True)
    process = _start_worker(folder, target, node_id, idle)
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        connection = _connect(folder / _SOCKET)
        if connection is not None:
            return connection
        if process.poll() is not None:
            raise RuntimeError(
                f"the step worker for {target} exited with status {process.returncode} "
                f"before it listened; its log {folder / _LOG} ends with:\n"
                f"{_log_tail(folder / _LOG)}"
            )
        time.sleep(0.02)
    raise RuntimeError(
        f"the step worker for {target} did not start within {_START_TIMEOUT:g} s; "
        f"see {folder / _LOG}"
    )


def _log_tail(log, n_chars=4000):
    try:
        return log.read_text(errors="replace")[-n_chars:]
    except FileNotFoundError:
        return "(no log)"


class _WorkerHandler:
    """A ClientApp function: the message and Context to the worker, its reply back."""

    def __init__(self, target):
        self.target = target
        self.__name__ = "skfedclust_step_worker"

    def __call__(self, message, context):
        idle = _idle_seconds(context.node_config.get("step-worker-idle", DEFAULT_IDLE_SECONDS))
        if not _truthy(context.node_config.get("step-worker", False)) or idle is None:
            # In this process; a malformed step-worker or step-worker-idle (anything
            # but a true word, or positive seconds) is then refused by the real
            # ClientApp, which checks every node-config field and names it.
            return _load_target(self.target)(message, context)
        from flwr.common.serde import (
            context_from_proto,
            context_to_proto,
            message_from_proto,
            message_to_proto,
        )

        connection = _worker_connection(self.target, context.node_id, idle)
        with connection:
            _send(
                connection,
                message_to_proto(message).SerializeToString(),
                context_to_proto(context).SerializeToString(),
            )
            status, first, second = _receive(connection, 3)
        if status != _OK:
            raise RuntimeError(f"the node's step worker failed:\n{first.decode()}")
        from flwr.proto.message_pb2 import Context as ProtoContext
        from flwr.proto.message_pb2 import Message as ProtoMessage

        reply = message_from_proto(ProtoMessage.FromString(first))
        context.state = context_from_proto(ProtoContext.FromString(second)).state
        return reply


def make_worker_client_app(target, *, app=None):
    """A ClientApp that runs ``target`` in the node's long-lived step worker.

    Parameters
    ----------
    target : str
        ``"module:attribute"`` of the real ClientApp (one made by
        :func:`make_client_app`), importable on this process's ``sys.path``
        (a Flower app's own modules are).
    app : flwr.clientapp.ClientApp, default=None
        Add the handlers to this ClientApp instead of a new one.

    Returns
    -------
    app : flwr.clientapp.ClientApp
        Importing it costs the standard library and Flower only. A node whose
        config sets ``step-worker=true`` runs every message in its worker
        (started on the first message, kept until ``step-worker-idle``
        seconds pass without one); any other node imports ``target`` and runs
        it in the ClientApp's own process.

    Examples
    --------
    The example app's ``client_app.py``: the real ClientApp is imported in the
    worker, not here.

    >>> from skfedclust.flower import make_worker_client_app
    >>> app = make_worker_client_app("skfedclust_app.node_app:app")
    >>> type(app).__name__
    'ClientApp'
    """
    from flwr.clientapp import ClientApp

    app = ClientApp() if app is None else app
    handler = _WorkerHandler(target)
    for message_type in (HELLO, STEP, FINISH):
        app.query(message_type.split(".", 1)[1])(handler)
    return app


# --------------------------------------------------------------------------- #
# The worker side
# --------------------------------------------------------------------------- #
def _handle(app, connection):
    from flwr.common.serde import (
        context_from_proto,
        context_to_proto,
        message_from_proto,
        message_to_proto,
    )
    from flwr.proto.message_pb2 import Context as ProtoContext
    from flwr.proto.message_pb2 import Message as ProtoMessage

    raw_message, raw_context = _receive(connection, 2)
    started = time.perf_counter()
    try:
        message = message_from_proto(ProtoMessage.FromString(raw_message))
        context = context_from_proto(ProtoContext.FromString(raw_context))
        reply = app(message, context)
        parts = (
            _OK,
            message_to_proto(reply).SerializeToString(),
            context_to_proto(context).SerializeToString(),
        )
    except Exception:  # the ClientApp process raises it, with this traceback
        import traceback

        parts = (_ERROR, traceback.format_exc().encode(), b"")
    _send(connection, *parts)
    # One line per message in the worker's log: what the node's own work costs.
    sys.stderr.write(f"handled a message in {time.perf_counter() - started:.6f} s\n")
    sys.stderr.flush()


def serve(folder, target, idle=DEFAULT_IDLE_SECONDS, *, node=None, node_id=None):
    """Import ``target``, then answer messages on ``folder``'s socket until the worker ends.

    Parameters
    ----------
    folder : str or pathlib.Path
        The worker's folder, inside :func:`worker_socket_directory`.
    target : str
        ``"module:attribute"`` of the real ClientApp.
    idle : float, default=600
        Seconds without a message after which the worker ends.
    node : tuple of (int, int or None), default=None
        Pid and start time of the node's process: the worker ends when it does.
        ``None`` watches no process (a ClientApp run outside a SuperNode).
    node_id : int, default=None
        The node's id, for ``workers list``.

    Returns
    -------
    reason : str
        Why the worker ended. Its folder is then removed; if ``serve``
        raises, the folder stays, with the traceback in its log.
    """
    app = _load_target(target)
    folder = Path(folder)
    worker_socket_directory()  # the private directory, checked again
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with server:
        server.bind(str(folder / _SOCKET))
        try:
            server.listen(8)
            _write_record(folder, node, node_id, target)
            server.settimeout(min(WATCH_SECONDS, float(idle)))
            reason = _answer_until_done(server, app, float(idle), node, stop)
        except BaseException:
            _unlink_own_socket(folder)
            raise
        with _folder_lock(folder, create=False) as locked:
            _leave(server, app, folder, locked)
    return reason


def _answer_until_done(server, app, idle, node, stop):
    """Answer messages until the worker is idle too long, its node ended or it is stopped."""
    last = time.monotonic()
    while True:
        if stop.is_set():
            return "asked to stop (SIGTERM)"
        if node is not None and not _is_running(*node):
            return f"its node process {node[0]} ended"
        if time.monotonic() - last >= idle:
            return f"idle for {idle:g} s"
        try:
            connection, _ = server.accept()
        except TimeoutError:
            continue
        _answer(app, connection)
        last = time.monotonic()


def _leave(server, app, folder, locked):
    """Under the folder's lock: stop listening, answer who already connected, remove the folder.

    A ClientApp that finds no socket waits for the lock, then starts a new
    worker in a new folder; one that connected before the socket went is
    answered, not dropped.
    """
    own = locked and _record_pid(folder) == os.getpid()
    if own:
        (folder / _SOCKET).unlink(missing_ok=True)
    server.setblocking(False)
    while True:
        try:
            connection, _ = server.accept()
        except BlockingIOError:
            break
        _answer(app, connection)
    if own:
        _remove_folder(folder)


def _answer(app, connection):
    """Answer one accepted connection, waiting on it whatever the listening socket's timeout."""
    with connection:
        connection.settimeout(None)
        _handle(app, connection)


def _remove_folder(folder):
    for name in (_SOCKET, _RECORD, _LOG, _LOCK):
        (folder / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # a file of another worker's: the folder is its
        folder.rmdir()


def _unlink_own_socket(folder):
    if _record_pid(folder) in (None, os.getpid()):
        (folder / _SOCKET).unlink(missing_ok=True)


def _write_record(folder, node, node_id, target):
    """``worker.json``: who the worker is, written whole (a reader never sees half)."""
    record = {
        "pid": os.getpid(),
        "node_pid": None if node is None else node[0],
        "node_id": node_id,
        "started": time.time(),
        "target": target,
    }
    partial = folder / f".{_RECORD}.{os.getpid()}"
    partial.write_text(json.dumps(record))
    partial.replace(folder / _RECORD)


def _read_record(folder):
    try:
        return json.loads((folder / _RECORD).read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None


def _record_pid(folder):
    record = _read_record(folder)
    return None if record is None else record.get("pid")


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="A SuperNode's step worker")
    parser.add_argument("--folder", required=True, help="the worker's folder (socket, log)")
    parser.add_argument("--target", required=True)
    parser.add_argument("--sys-path", required=True, help="the ClientApp process's sys.path")
    parser.add_argument("--idle", type=float, default=DEFAULT_IDLE_SECONDS)
    parser.add_argument("--node-id", type=int, default=None)
    parser.add_argument("--node-pid", type=int, default=None, help="the node's process")
    parser.add_argument("--node-start", type=int, default=None, help="its start time")
    args = parser.parse_args(argv)
    sys.path[:] = json.loads(args.sys_path)
    node = None if args.node_pid is None else (args.node_pid, args.node_start)
    serve(args.folder, args.target, args.idle, node=node, node_id=args.node_id)


if __name__ == "__main__":
    main()
