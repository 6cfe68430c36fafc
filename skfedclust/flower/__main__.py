"""Command line of skfedclust.flower: ``python -m skfedclust.flower keygen PATH``.

``keygen`` writes a node's long-term identity key (Ed25519, PEM, readable by
its owner only) and prints its public key and fingerprint. The node's
operator points the ``identity-key`` field of the node config at the file and
sends the printed line to the other operators, who add it to their
``trusted-identities`` file; comparing the fingerprint over another channel
(a phone call) guards against a swapped line.
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
    show = commands.add_parser("show", help="print the public key of an identity key file")
    show.add_argument("path")
    show.add_argument("--name", default=None)
    args = parser.parse_args(argv)

    from ._crypto import IdentityKey

    if args.command == "keygen":
        if os.path.exists(args.path) and not args.force:
            parser.exit(2, f"{args.path} exists; pass --force to replace it\n")
        key = IdentityKey()
        key.save(args.path)
    else:
        key = IdentityKey.load(args.path)
    name = f"{args.name} " if args.name else ""
    print(f"{name}ed25519:{key.public_bytes.hex()}")
    print(f"# fingerprint {key.fingerprint}", file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
