"""Command line of skfedclust.flower: keygen, show, ledger, check-config and workers.

``keygen`` writes a node's long-term identity key (Ed25519, PEM, readable by
its owner only) and prints its public key and fingerprint. The node's
operator points the ``identity-key`` field of the node config at the file and
sends the printed line to the other operators, who add it to their
``trusted-identities`` file; comparing the fingerprint over another channel
(a phone call) guards against a swapped line.

``keygen NEW.pem --rotate-from OLD.pem`` replaces a node's identity key: the
old key signs the new one (the chain is written to ``NEW.pem.rotation``), and
the printed line carries the link (``rotated-from=... rotation-signature=...``).
The node's ledger goes on under its first key, and peers whose trust file
holds the line count the new key as the same participant: an honest key
change needs no ledger reset.

``ledger show --dir DIR`` prints what the node's privacy ledgers hold (or
their damage); ``ledger reset --dir DIR --what budget|fits|sums|all [--node
NODE]`` is the operator's explicit reset, recorded in the ledger: nothing
else starts a node's budget or its count of fits afresh (a ledger written
once and then missing or damaged is refused, rule ``ledger-damaged``, and
only ``--what all`` resets one). Deleting the whole directory is a reset too.

``check-config "NODE_CONFIG"`` checks a ``--node-config`` value as a node
reads it at its first message (every field known and well formed, see the
Flower guide's node-config reference), so that its operator finds a misspelt
field before starting the SuperNode; ``--field NAME`` declares a field the
app's own loader reads. It prints each field as the node reads it and the
policy, or the refusal, naming the field (exit status 2).

``workers list`` prints this user's step workers (the long-lived processes of
SuperNodes started with ``step-worker=true``): pid, the pid of the SuperNode
it ends with, node id, age and folder, and whether it runs. ``workers stop
PID...`` stops the named ones (SIGTERM: a worker finishes the message it is
answering, then removes its folder); ``workers stop --all`` stops every one
and removes the folders of workers that ended on a failure (their logs).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m skfedclust.flower")
    commands = parser.add_subparsers(dest="command", required=True)
    keygen = commands.add_parser("keygen", help="write a node identity key and print it")
    keygen.add_argument("path", help="file to write the private key to")
    keygen.add_argument("--name", default=None, help="name to print before the key")
    keygen.add_argument("--force", action="store_true", help="overwrite an existing file")
    keygen.add_argument(
        "--rotate-from",
        default=None,
        metavar="OLD",
        help="the identity key this one replaces: it signs the new key, so the node's ledger "
        "and its peers' count both as one node",
    )
    show = commands.add_parser("show", help="print the public key of an identity key file")
    show.add_argument("path")
    show.add_argument("--name", default=None)
    ledger = commands.add_parser("ledger", help="show or reset a node's privacy ledgers")
    ledger.add_argument("action", choices=("show", "reset"))
    ledger.add_argument("--dir", required=True, help="the node's privacy-ledger directory")
    ledger.add_argument(
        "--what",
        choices=("budget", "fits", "sums", "all"),
        default=None,
        help="reset the DP budget, the count of fits, the secure sums' record, or all",
    )
    ledger.add_argument(
        "--node",
        default=None,
        help="the node whose ledger to reset (its identity fingerprint, or name:<client-name>); "
        "default: every ledger of the directory",
    )
    check = commands.add_parser(
        "check-config", help="check a --node-config value as a node reads it"
    )
    check.add_argument("node_config", help="the --node-config value, as given to the SuperNode")
    check.add_argument(
        "--field",
        action="append",
        default=[],
        help="a field the app's own functions read (repeat for several)",
    )
    workers = commands.add_parser("workers", help="list or stop this user's step workers")
    worker_actions = workers.add_subparsers(dest="action", required=True)
    worker_actions.add_parser("list", help="print each step worker of this user")
    stop = worker_actions.add_parser("stop", help="stop step workers of this user")
    stop.add_argument("pids", nargs="*", type=int, metavar="PID", help="as workers list shows")
    stop.add_argument("--all", action="store_true", help="every step worker of this user")
    args = parser.parse_args(argv)
    if args.command == "workers":
        return _workers(parser, args)
    if args.command == "ledger":
        return _ledger(parser, args)
    if args.command == "check-config":
        return _check_config(parser, args.node_config, args.field)

    from ._crypto import IdentityKey

    options = ""
    if args.command == "keygen":
        if os.path.exists(args.path) and not args.force:
            parser.exit(2, f"{args.path} exists; pass --force to replace it\n")
        if args.rotate_from is not None:
            from ._rotation import rotate

            key, options = rotate(args.rotate_from, args.path)
            options = f" {options}"
        else:
            key = IdentityKey()
            key.save(args.path)
    else:
        key = IdentityKey.load(args.path)
    name = f"{args.name} " if args.name else ""
    print(f"{name}ed25519:{key.public_bytes.hex()}{options}")
    print(f"# fingerprint {key.fingerprint}", file=sys.stdout)
    return 0


def _ledger(parser, args):
    from ..node._ledger import ledger_summaries, reset_ledger

    if args.action == "show":
        for line in ledger_summaries(args.dir) or [f"{args.dir}: no ledger"]:
            print(line)
        return 0
    if args.what is None:
        parser.exit(2, "ledger reset needs --what budget|fits|sums|all\n")
    try:
        names = reset_ledger(args.dir, args.what, node=args.node)
    except (PermissionError, ValueError) as exc:
        parser.exit(2, f"{exc}\n")
    for name in names:
        print(f"{name}: {args.what} reset")
    return 0


def _workers(parser, args):
    from ._step_worker import list_workers, stop_workers, worker_socket_directory

    if args.action == "list":
        workers = list_workers()
        if not workers:
            print(f"no step worker of user {os.getuid()}")
            return 0
        print(f"{'PID':>8} {'SUPERNODE':>9} {'NODE':>20} {'AGE':>8}  {'STATE':<8} FOLDER")
        for worker in workers:
            print(_worker_line(worker))
        return 0
    if args.all == bool(args.pids):
        parser.exit(2, "workers stop needs the workers' PIDs (see workers list) or --all\n")
    try:
        stopped = stop_workers(None if args.all else args.pids)
    except (PermissionError, ValueError) as exc:
        parser.exit(2, f"{exc}\n")
    for worker in stopped:
        what = "stopped" if worker.running else "removed the folder of ended worker"
        print(f"{what} {worker.pid} ({worker.folder})")
    if not stopped:
        print(f"no step worker of user {os.getuid()} in {worker_socket_directory()}")
    return 0


def _worker_line(worker):
    import time

    node_pid = "-" if worker.node_pid is None else worker.node_pid
    node_id = "-" if worker.node_id is None else worker.node_id
    state = "running" if worker.running else "ended"
    age = _duration(time.time() - worker.started)
    return f"{worker.pid:>8} {node_pid:>9} {node_id:>20} {age:>8}  {state:<8} {worker.folder}"


def _duration(seconds):
    """``42 s``, ``7 min``, ``3 h``, ``2 d``: the largest whole unit."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(max(seconds, 0))} s"


def _check_config(parser, text, fields):
    """Print the node config ``text`` as a node reads it, or exit 2 with its refusal."""
    from flwr.common.config import parse_config_args

    from ..node._node_config import check_node_config
    from ..node._policy import NodePolicy

    try:
        # As flower-supernode parses --node-config: typed values (2, true, 'text').
        config = parse_config_args([text])
    except Exception as exc:  # noqa: BLE001 - Flower raises click's exception, not a ValueError
        parser.exit(2, f"flower-supernode would not read this --node-config: {exc}\n")
    try:
        values = check_node_config(config, fields)
        policy = NodePolicy.from_node_config(config, fields)
    except ValueError as exc:
        parser.exit(2, f"node config refused: {exc}\n")
    for name, value in values.items():
        print(f"{name} = {value!r}")
    for name in sorted(set(config) - set(values)):
        print(f"{name} = {config[name]!r} (the app's own field)")
    print(policy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
