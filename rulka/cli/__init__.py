"""The umbrella ``rulka`` command.

Each sub-command lives in its own module under ``rulka.cli`` and exposes
``register(subparsers) -> None``, which adds its parser and sets ``func`` (a callable taking the
parsed args and returning an exit code). Modules are imported only when listed here, so a
missing optional dependency of one sub-command never breaks the others.

The umbrella stands above the roles: it launches them and imports their commands; what it shares
with them (``run_main``, ``setup_logging``, CPU priority and cores, ...) lives in
``rulka.process``, below both.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rulka import __version__
from rulka.process import (  # noqa: F401  (the process helpers, re-exported for scripts and tests)
    LAUNCHER_ENV,
    PRIORITIES,
    available_cores,
    follow_launcher,
    format_cores,
    keep_on_cores,
    parse_cores,
    run_main,
    set_cpu_affinity,
    set_process_priority,
    setup_logging,
    stop_on_ctrl_c,
)

# sub-command module names under rulka.cli, in the order --help lists them
SUBCOMMANDS = ["run", "config", "keys", "sim", "tm", "eval", "dpo", "pretrain", "status", "plot", "verify"]


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
    _add_trust_to_commands(parser)
    return parser


def _add_trust_to_commands(parser: argparse.ArgumentParser) -> None:
    """``--allow-plugin`` and ``--trust-remote-code`` on every command that runs something (each
    leaf of the sub-command tree): what a file alone cannot allow, the command line can."""
    from rulka.trust import add_trust_arguments

    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        if parser.get_default("func") is not None and "allow_plugin" not in {a.dest for a in parser._actions}:
            add_trust_arguments(parser)
        return
    for action in subs:
        for child in {id(c): c for c in action.choices.values()}.values():
            _add_trust_to_commands(child)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    from rulka.trust import apply_trust_arguments

    apply_trust_arguments(args)
    return run_main(lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
