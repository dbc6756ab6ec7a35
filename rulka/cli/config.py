"""``rulka config``: check a run configuration, print it resolved, or print the defaults."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _add_sources(parser: argparse.ArgumentParser, file_required: bool) -> None:
    parser.add_argument(
        "file",
        metavar="FILE",
        nargs=None if file_required else "?",
        default=None,
        help="run configuration YAML",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        metavar="KEY.PATH=VALUE",
        action="append",
        default=[],
        help="override one value, e.g. --set training.batch_size=256 (repeatable; value parsed as YAML)",
    )
    parser.add_argument(
        "--env-file", metavar="FILE", default=".env", help="user-specific values (default: ./.env if present)"
    )


def _load(args: argparse.Namespace):  # -> RulkaConfig (imported lazily to keep `rulka --help` fast)
    from rulka.config import load_config

    return load_config(args.file, args.overrides, env_file=args.env_file)


def cmd_validate(args: argparse.Namespace) -> int:
    cfg = _load(args)
    env = cfg.environment
    parts = [f"algorithm {cfg.training.algorithm}"]
    if env.backend == "gym":
        parts.append(f"gym env {env.gym_id}")
    else:
        image = "no image" if cfg.nn.vis.no_image else f"image {cfg.w_downsized}x{cfg.h_downsized}"
        parts += [
            f"backend {env.backend}",
            f"{cfg.ms_per_action} ms per action",
            f"mini-race {cfg.temporal_mini_race_duration_actions} actions",
            f"float_input_dim {cfg.float_input_dim}",
            image,
        ]
    if args.overrides:
        parts.append(f"{len(args.overrides)} override(s)")
    print(f"ok: {args.file} - " + ", ".join(parts))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from rulka.config import resolved_yaml

    cfg = _load(args)
    sys.stdout.write(resolved_yaml(cfg) if args.computed else cfg.to_yaml())
    return 0


def cmd_defaults(args: argparse.Namespace) -> int:
    from rulka.config.reference import reference_yaml

    sys.stdout.write(reference_yaml())
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from rulka.config import all_key_paths

    for path in all_key_paths():
        if not args.prefix or path.startswith(args.prefix):
            print(path)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rulka config`` and its sub-commands."""
    parser = subparsers.add_parser(
        "config",
        help="check, show or print run configurations",
        description=(
            "Run configurations are YAML files (see configs/default.yaml for every key). Values are "
            "layered: built-in defaults < .env < FILE < --set KEY.PATH=VALUE."
        ),
    )
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION")

    p = sub.add_parser(
        "validate",
        help="check a config file; exit 0 and print a summary, or print the error and exit 2",
        description="Load FILE with its overrides, check every key, type and cross-key rule, and print one summary line.",
    )
    _add_sources(p, file_required=True)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser(
        "show",
        help="print a config with every default filled in",
        description="Print the resolved configuration (FILE + .env + --set over the defaults) as YAML.",
    )
    _add_sources(p, file_required=False)
    p.add_argument(
        "--computed", action="store_true", help="also print the values derived at load, as comments"
    )
    p.set_defaults(func=cmd_show)

    p = sub.add_parser(
        "defaults",
        help="print the default config with one comment per key",
        description="Print every key at its built-in default, documented (the same text as configs/default.yaml).",
    )
    p.set_defaults(func=cmd_defaults)

    p = sub.add_parser(
        "keys", help="list every config key path", description="List every section and key path."
    )
    p.add_argument("prefix", nargs="?", default="", help="only paths starting with this, e.g. training.")
    p.set_defaults(func=cmd_keys)

    def _no_action(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=_no_action)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rulka.cli.config``: the same as ``rulka config``."""
    from rulka.cli import run_main

    parser = argparse.ArgumentParser(prog="rulka")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["config", *(argv if argv is not None else sys.argv[1:])])
    return run_main(lambda: args.func(args))
