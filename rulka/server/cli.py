"""``rulka-server``: run the relay until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rulka.process import (
    KEPT_LOG_BACKUPS,
    KEPT_LOG_BYTES,
    follow_launcher,
    keep_on_cores,
    log_file_option,
    role_log_file,
    run_main,
    setup_logging,
    stop_on_ctrl_c,
)

log = logging.getLogger("rulka.server")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rulka-server",
        description=(
            "The rulka relay: forwards segments from workers to the trainer and weights from the "
            "trainer to every worker, over TLS. Run it on a host the workers and the trainer can "
            "reach (forward its port on your router). It needs the keys folder from "
            "`rulka keys generate` (it never needs trainer.key). Stop it with Ctrl-C or SIGTERM."
        ),
    )
    parser.add_argument("--config", metavar="YAML", help="run config; its `network:` section is used")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set network.chunk_bytes=524288 (repeatable)")
    parser.add_argument("--host", default="0.0.0.0", help="interface to listen on (default: all, 0.0.0.0)")
    parser.add_argument("--port", type=int, default=None,
                        help="port to listen on (default: network.port, 55555; 0 = any free port)")
    parser.add_argument("--keys", default=None, metavar="DIR",
                        help="keys folder (default: network.credentials_dir, ~/.rulka/keys)")
    parser.add_argument("--cpu-cores", default=None, metavar="LIST",
                        help="keep the relay on these CPU cores, e.g. 1 or 2-3 (default: any)")
    parser.add_argument("--log-file", default=None, metavar="FILE",
                        help="also keep the log here, with dates: who connected, who was turned away, bad "
                             "input (default: ~/.rulka/server/server.log, rolled over at "
                             f"{KEPT_LOG_BYTES // 2**20} MB keeping {KEPT_LOG_BACKUPS} older; 'none': the "
                             "terminal only; a relay started by `rulka run` logs to its terminal only)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    # used by Server.start(): the transport settings as JSON, instead of --config/--set
    parser.add_argument("--settings-json", default=None, help=argparse.SUPPRESS)
    return parser


def resolve(args: argparse.Namespace) -> tuple[Any, Path]:
    """The transport settings and keys folder the command line asks for."""
    if args.settings_json is not None:
        settings = json.loads(args.settings_json)
        default_keys = Path("~/.rulka/keys")
    else:
        from rulka.config import load_config

        network = load_config(args.config, overrides=args.set).network
        settings, default_keys = network.transport_settings(), network.credentials_dir
    keys = Path(args.keys) if args.keys else default_keys
    return settings, keys.expanduser()


def log_file_path(args: argparse.Namespace) -> Path | None:
    """Where the relay keeps its log: ``--log-file``, else ``~/.rulka/server/server.log`` when started
    by hand (a relay host runs for weeks, and its terminal is rarely kept); a relay started by
    ``rulka run`` or ``Server.start`` (``--settings-json``) logs to its parent's terminal only."""
    default = None if args.settings_json is not None else Path.home() / ".rulka" / "server" / "server.log"
    return log_file_option(args.log_file, default)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    code = run_main(lambda: keep_on_cores(args.cpu_cores))  # before any thread starts: they inherit it
    if code:
        return code
    stop_on_ctrl_c()
    follow_launcher()

    def body() -> int:
        from rulka.server.server import Server

        with role_log_file(log_file_path(args), log, "rulka-server", args.verbose,
                           max_bytes=KEPT_LOG_BYTES, backups=KEPT_LOG_BACKUPS):
            settings, keys = resolve(args)  # a config error is kept in the file too
            Server(settings, keys, bind_host=args.host, port=args.port).serve_forever()
        return 0

    return run_main(body)


if __name__ == "__main__":
    import sys

    sys.exit(main())
