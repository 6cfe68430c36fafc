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
listens on a Unix socket in a directory only that user may open
(``$TMPDIR/skfedclust-<uid>``, mode 0700, checked at every connection). One
worker serves one SuperNode (its node id), one ClientApp ``target`` on one
``sys.path``, and one version of the package's code: a change of any of them
starts a new worker. A worker handles one message at a time and exits after
``step-worker-idle`` seconds without one (node config, default 600).

Nothing crosses the socket but what the ClientApp process would hand the
ClientApp in its own memory: the message and the Context, as Flower's
protocol buffers, and the reply. The node's state stays in its Context, which
Flower keeps; a worker that stops loses nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import json
import math
import os
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ._actions import FINISH, HELLO, STEP

__all__ = ["make_worker_client_app", "worker_socket_directory"]

#: How long a worker waits for its next message before it exits (seconds).
DEFAULT_IDLE_SECONDS = 600.0
#: How long a ClientApp waits for a worker it started to listen (its imports).
_START_TIMEOUT = 120.0
_HEADER = struct.Struct("!Q")
_OK, _ERROR = b"0", b"1"


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


def worker_socket_directory():
    """The directory of this user's workers' sockets, created private if absent.

    Refuses a directory another user owns or may write to: a socket there
    could be another user's process posing as the node's worker.
    """
    directory = Path(tempfile.gettempdir()) / f"skfedclust-{os.getuid()}"
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = directory.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(
            f"{directory} must be a directory of user {os.getuid()} with mode 0700 (it holds "
            "the sockets of the node's step workers); remove it or fix its owner and mode"
        )
    return directory


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


def _start_worker(path, target, idle, log):
    command = [
        sys.executable,
        "-m",
        "skfedclust.flower._step_worker",
        "--socket",
        str(path),
        "--target",
        target,
        "--sys-path",
        json.dumps(sys.path),
        "--idle",
        str(idle),
    ]
    with open(log, "ab") as err:
        # Its own session: the worker outlives this ClientApp process.
        subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            close_fds=True,
        )


def _worker_connection(target, node_id, idle):
    """A connection to the node's worker for ``target``, started if none listens."""
    directory = worker_socket_directory()
    key = _worker_key(target, node_id)
    path = directory / f"{key}.sock"
    connection = _connect(path)
    if connection is not None:
        return connection
    # One ClientApp process starts the worker; the others wait for it.
    with open(directory / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        connection = _connect(path)
        if connection is not None:
            return connection
        path.unlink(missing_ok=True)
        log = directory / f"{key}.log"
        _start_worker(path, target, idle, log)
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            connection = _connect(path)
            if connection is not None:
                return connection
            time.sleep(0.02)
    raise RuntimeError(
        f"the step worker for {target} did not start within {_START_TIMEOUT:g} s; see {log}"
    )


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


def serve(socket_path, target, idle=DEFAULT_IDLE_SECONDS):
    """Import ``target``, then answer messages on ``socket_path`` until idle for ``idle`` s."""
    app = _load_target(target)
    socket_path = Path(socket_path)
    worker_socket_directory()  # the private directory, checked again
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with server:
        server.bind(str(socket_path))
        server.listen(8)
        server.settimeout(float(idle))
        try:
            while True:
                try:
                    connection, _ = server.accept()
                except TimeoutError:
                    return
                with connection:
                    connection.settimeout(None)
                    _handle(app, connection)
        finally:
            socket_path.unlink(missing_ok=True)


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="A SuperNode's step worker")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--sys-path", required=True, help="the ClientApp process's sys.path")
    parser.add_argument("--idle", type=float, default=DEFAULT_IDLE_SECONDS)
    args = parser.parse_args(argv)
    sys.path[:] = json.loads(args.sys_path)
    serve(args.socket, args.target, args.idle)


if __name__ == "__main__":
    main()
