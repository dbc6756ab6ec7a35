"""``rulka keys``: make and manage the credentials of a run (see ``rulka.net.keys``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DEFAULT_DIR = "~/.rulka/keys"  # network.credentials_dir's default


def register(subparsers: Any) -> None:
    """Add ``rulka keys`` and its sub-commands to the umbrella parser."""
    parser = subparsers.add_parser(
        "keys", help="make TLS certificates, the relay password and signing keys; enrol workers",
        description=(
            "Credentials of a run. `generate` makes the keys folder the trainer and server use "
            "(TLS certificate for the names/IPs workers connect to, relay password, trainer "
            "signing key). `add-worker NAME` enrols a gaming PC and writes a bundle folder to "
            "copy to it; `revoke-worker NAME` shuts it out; `add-operator NAME` lets someone read "
            "`rulka status`; `list` shows every worker and operator key."
        ),
    )
    sub = parser.add_subparsers(dest="keys_command", metavar="ACTION", required=True)

    gen = sub.add_parser("generate", help="make a new keys folder",
                         description="Write a CA, a server certificate, the relay password and the "
                                     "trainer's signing key pair into --out (files 0600, folders 0700).")
    gen.add_argument("--out", default=DEFAULT_DIR, help=f"keys folder to create (default: {DEFAULT_DIR})")
    gen.add_argument("--host", action="append", default=[], metavar="NAME_OR_IP",
                     help="a host name or IP workers use to reach the server (repeatable); "
                          "localhost and 127.0.0.1 are always included")
    gen.add_argument("--force", action="store_true", help="overwrite existing keys (invalidates old bundles)")
    gen.set_defaults(func=_generate)

    _enrol_parser(sub, "worker", _add_worker, help="enrol a worker and write its bundle",
                  description="Give worker NAME its own signing key and write the folder to "
                              "copy to that PC (CA certificate, password, trainer public key, "
                              "its own key; never the trainer's private key).")

    rev = sub.add_parser("revoke-worker", help="revoke a worker's key",
                         description="Move the worker's public key to revoked/ and delete its bundle; "
                                     "running trainers and servers stop accepting it within seconds.")
    rev.add_argument("name")
    rev.add_argument("--dir", default=DEFAULT_DIR, help=f"keys folder (default: {DEFAULT_DIR})")
    rev.set_defaults(func=_revoke_worker)

    _enrol_parser(sub, "operator", _add_operator, help="enrol someone who may read `rulka status` and nothing else",
                  description="Write an operator bundle (operator_bundles/NAME/): its key lets "
                              "`rulka status --keys BUNDLE` read the relay's report (every address) "
                              "without the trainer's keys; it cannot send or receive anything else. "
                              "Delete operators/NAME.pub to shut it out.")

    lst = sub.add_parser("list", help="list enrolled and revoked workers and operators",
                         description="One line per key: role (worker or operator), name, state "
                                     "(enrolled or revoked) and fingerprint (sha256 of the public key).")
    lst.add_argument("--dir", default=DEFAULT_DIR, help=f"keys folder (default: {DEFAULT_DIR})")
    lst.set_defaults(func=_list)


def _enrol_parser(sub: Any, kind: str, func: Any, **texts: str) -> None:
    parser = sub.add_parser(f"add-{kind}", **texts)
    parser.add_argument("name", help=f"{kind} name (letters, digits, '_', '.', '-')")
    parser.add_argument("--dir", default=DEFAULT_DIR, help=f"keys folder (default: {DEFAULT_DIR})")
    parser.add_argument("--force", action="store_true", help=f"replace the key of an enrolled {kind}")
    parser.set_defaults(func=func)


def _generate(args: argparse.Namespace) -> int:
    from rulka.net.keys import generate_keys

    out = Path(args.out).expanduser()
    generate_keys(out, args.host, force=args.force)
    print(f"wrote keys to {out}/ (keep ca.key and trainer.key private)")
    print(f"next: rulka keys add-worker NAME --dir {out}")
    return 0


def _add_worker(args: argparse.Namespace) -> int:
    from rulka.net.keys import add_worker

    bundle = add_worker(Path(args.dir).expanduser(), args.name, force=args.force)
    print(f"enrolled {args.name}; copy the folder {bundle}/ to that PC and start the worker there with")
    print("  rulka-worker --keys PATH/TO/THAT/FOLDER ...")
    return 0


def _add_operator(args: argparse.Namespace) -> int:
    from rulka.net.keys import add_operator

    bundle = add_operator(Path(args.dir).expanduser(), args.name, force=args.force)
    print(f"enrolled operator {args.name}; copy {Path(args.dir).expanduser() / 'operators'}/ into the relay "
          f"host's keys folder, give the folder {bundle}/ to the operator, who runs")
    print("  rulka status --server HOST:PORT --keys PATH/TO/THAT/FOLDER")
    return 0


def _revoke_worker(args: argparse.Namespace) -> int:
    from rulka.net.keys import revoke_worker

    revoke_worker(Path(args.dir).expanduser(), args.name)
    print(f"revoked {args.name}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from rulka.errors import UserError
    from rulka.net.keys import list_keys

    folder = Path(args.dir).expanduser()
    if not folder.is_dir():
        raise UserError(f"keys folder {folder} does not exist")
    keys = list_keys(folder)
    if not keys:
        print(f"no workers or operators enrolled in {folder} (rulka keys add-worker NAME --dir {folder})")
        return 0
    print("role\tname\tstate\tfingerprint")
    for row in keys:
        print("\t".join(row))
    return 0
