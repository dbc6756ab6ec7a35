"""``rulka-server``: run the relay until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rulka.cli import run_main, setup_logging
from rulka.errors import UserError

log = logging.getLogger("rulka.server")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rulka-server",
        description=(
            "The rulka relay: forwards segments from workers to the trainer and weights from the "
            "trainer to every worker, over TLS. Run it on a host the workers and the trainer can "
            "reach (forward its port on your router). It needs the keys folder from "
            "`rulka keys generate` (it never needs trainer.key)."
        ),
    )
    parser.add_argument("--config", metavar="YAML", help="run config; only its `network:` block is used")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set network.chunk_bytes=524288 (repeatable)")
    parser.add_argument("--host", default="0.0.0.0", help="interface to listen on (default: all, 0.0.0.0)")
    parser.add_argument("--port", type=int, default=None, help="port to listen on (default: network.port, 55555)")
    parser.add_argument("--keys", default="keys", metavar="DIR", help="keys folder (default: ./keys)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def network_section(config_path: str | None, overrides: Sequence[str]) -> dict[str, Any]:
    """The ``network:`` block of ``config_path`` with ``network.KEY=VALUE`` overrides applied."""
    import yaml

    data: dict[str, Any] = {}
    if config_path:
        path = Path(config_path)
        if not path.is_file():
            raise UserError(f"config file {path} not found")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise UserError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(loaded, dict):
            raise UserError(f"{path} must hold a mapping at the top level")
        section = loaded.get("network") or {}
        if not isinstance(section, dict):
            raise UserError(f"{path}: `network` must be a mapping")
        data.update(section)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise UserError(f"--set {item!r}: expected KEY=VALUE")
        if not key.startswith("network."):
            continue  # other sections do not concern the relay
        data[key[len("network."):]] = yaml.safe_load(raw)
    from rulka.net.settings import NetworkSettings

    unknown = set(data) - set(NetworkSettings.__dataclass_fields__)
    if unknown:
        raise UserError(f"unknown network key(s): {', '.join(sorted(unknown))}")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)

    def body() -> int:
        from rulka.server.server import Server

        server = Server(network_section(args.config, args.set), args.keys, bind_host=args.host, port=args.port)
        server.serve_forever()
        return 0

    return run_main(body)


if __name__ == "__main__":
    import sys

    sys.exit(main())
