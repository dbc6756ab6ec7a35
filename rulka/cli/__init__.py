"""The umbrella ``rulka`` command.

Each sub-command lives in its own module under ``rulka.cli`` and exposes
``register(subparsers) -> None``, which adds its parser and sets ``func`` (a callable taking the
parsed args and returning an exit code). Modules are imported only when listed here, so a
missing optional dependency of one sub-command never breaks the others.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence

from rulka import __version__
from rulka.errors import UserError

# sub-command module names under rulka.cli, in the order --help lists them
SUBCOMMANDS = ["run", "config", "keys", "sim", "tm", "eval", "dpo", "status", "plot", "verify"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rulka",
        description=(
            "rulka: distributed reinforcement learning for TrackMania and any Gymnasium env. "
            "The roles have their own commands (rulka-server, rulka-worker, rulka-trainer); "
            "this command runs a whole run locally and holds the tools around them."
        ),
    )
    parser.add_argument("--version", action="version", version=f"rulka {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"rulka.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"rulka.cli.{name}":
                continue  # sub-command not built yet
            raise
        module.register(sub)
    return parser


def run_main(func: Callable[[], int | None]) -> int:
    """Run a command body: a UserError becomes one line on stderr and a non-zero exit."""
    try:
        code = func()
        return int(code or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return run_main(lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
