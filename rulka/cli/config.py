"""``rulka config``: check run configurations, print one resolved, or print the defaults."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rulka.errors import ConfigError, UserError

if TYPE_CHECKING:
    from rulka.config import RulkaConfig


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        metavar="KEY.PATH=VALUE",
        action="append",
        default=[],
        help="override one value, e.g. --set training.batch_size=256 (repeatable; value parsed as YAML)",
    )
    parser.add_argument(
        "--env-file",
        metavar="FILE",
        default=".env",
        help="user-specific values, see `rulka config env` (default: ./.env if present)",
    )


def _load(file: str | None, args: argparse.Namespace) -> RulkaConfig:
    from rulka.config import load_config  # lazily: `rulka --help` stays fast

    return load_config(file, args.overrides, env_file=args.env_file)


def summary(cfg: RulkaConfig) -> str:
    """One line saying what a config runs."""
    env = cfg.environment
    parts = [f"algorithm {cfg.training.algorithm}"]
    if env.backend == "gym":
        gym_id = env.gym_id or ""
        parts.append(f"gym env {gym_id if len(gym_id) <= 80 else gym_id[:77] + '...'}")
    else:
        image = "no image" if cfg.nn.vis.no_image else f"image {cfg.w_downsized}x{cfg.h_downsized}"
        parts += [
            f"backend {env.backend}",
            f"{cfg.ms_per_action} ms per action",
            *([f"{cfg.n_actions_per_block} actions per {cfg.ms_per_block} ms block "
               f"({cfg.exploration.multi_action_exploration} exploration)"] if env.is_multi_action else []),
            f"mini-race {cfg.temporal_mini_race_duration_actions} "
            f"{'blocks' if env.is_multi_action else 'actions'}",
            f"float_input_dim {cfg.float_input_dim}",
            image,
        ]
    return ", ".join(parts)


def cmd_validate(args: argparse.Namespace) -> int:
    from rulka.config.built import check_startable

    failed = 0
    for file in args.files:
        try:
            cfg = _load(file, args)
            try:
                plugins = check_startable(cfg, import_plugins=args.check_plugins)
            except UserError as exc:
                raise UserError(f"{file}: {exc}") from None
        except UserError as exc:
            # report every file, so `rulka config validate configs/*.yaml` lists all problems at once
            print(f"error: {exc}", file=sys.stderr)
            failed += 1
            continue
        extra = f", {len(args.overrides)} override(s)" if args.overrides else ""
        extra += f", plugins found ({' '.join(plugins)})" if args.check_plugins else ""
        print(f"ok: {file} - {summary(cfg)}{extra}")
    return ConfigError.exit_code if failed else 0


def _changed(data: Any, default: Any) -> Any:
    """The parts of ``data`` that differ from ``default`` (mappings compared key by key)."""
    if isinstance(data, dict) and isinstance(default, dict):
        out = {}
        for key, value in data.items():
            if key not in default:
                out[key] = value
                continue
            diff = _changed(value, default[key])
            if diff is not _SAME:
                out[key] = diff
        return out if out else _SAME
    return _SAME if data == default else data


_SAME = object()


def cmd_show(args: argparse.Namespace) -> int:
    from rulka.config import RulkaConfig, resolved_yaml
    from rulka.config.model import dump_yaml

    cfg = _load(args.file, args)
    if args.changed:
        diff = _changed(cfg.to_dict(), RulkaConfig().to_dict())
        sys.stdout.write("{}\n" if diff is _SAME else dump_yaml(diff))
    elif args.computed:
        sys.stdout.write(resolved_yaml(cfg))
    else:
        sys.stdout.write(cfg.to_yaml())
    return 0


def cmd_defaults(args: argparse.Namespace) -> int:
    from rulka.config.reference import reference_yaml

    sys.stdout.write(reference_yaml())
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from rulka.config import all_key_paths

    for path in all_key_paths():
        if path.startswith(args.prefix):
            print(path)
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    from rulka.config import ENV_KEYS

    width = max(len(name) for name in ENV_KEYS)
    for name, key in ENV_KEYS.items():
        print(f"{name:<{width}}  -> {key}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rulka config`` and its actions."""
    parser = subparsers.add_parser(
        "config",
        help="check, show or print run configurations",
        description=(
            "Run configurations are YAML files (configs/default.yaml lists every key with its default "
            "and meaning). Values are layered, lowest first: built-in defaults < .env < FILE < "
            "--set KEY.PATH=VALUE. Role commands take the same --config/--set options."
        ),
    )
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION")

    p = sub.add_parser(
        "validate",
        help="check config files: one 'ok' line each, or the error and exit 2",
        description=(
            "Load each FILE (with the same overrides), check every key, type and cross-key rule, "
            "refuse keys that are documented but not built yet, check that the learner, memory, "
            "compressor and environment backend it names exist, and print one line per file. "
            "Exit 0 when all are valid (a role would start), 2 otherwise."
        ),
    )
    p.add_argument("files", metavar="FILE", nargs="+", help="run configuration YAML")
    _add_overrides(p)
    p.add_argument(
        "--check-plugins",
        action="store_true",
        help="also import the compressor, agent, memory and env plugins the config names",
    )
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser(
        "show",
        help="print a config with every default filled in",
        description="Print the resolved configuration (FILE + .env + --set over the defaults) as YAML.",
    )
    p.add_argument(
        "file", metavar="FILE", nargs="?", default=None, help="run configuration YAML (default: none)"
    )
    _add_overrides(p)
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--computed", action="store_true", help="also print the values derived at load, as comments"
    )
    group.add_argument(
        "--changed", action="store_true", help="print only the values that differ from the defaults"
    )
    p.set_defaults(func=cmd_show)

    p = sub.add_parser(
        "defaults",
        help="print the default config with one comment per key",
        description="Print every key at its built-in default, documented (the text of configs/default.yaml).",
    )
    p.set_defaults(func=cmd_defaults)

    p = sub.add_parser(
        "keys", help="list every config key path", description="List every section and key path."
    )
    p.add_argument("prefix", nargs="?", default="", help="only paths starting with this, e.g. training.")
    p.set_defaults(func=cmd_keys)

    p = sub.add_parser(
        "env",
        help="list the .env variables rulka reads",
        description=(
            "List the variables read from .env and the config key each one sets. They are defaults: "
            "the YAML file and --set override them. Other variables in .env are ignored."
        ),
    )
    p.set_defaults(func=cmd_env)

    def no_action(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=no_action)


def main(argv: Sequence[str] | None = None) -> int:
    """``rulka config ...`` with ``argv`` after ``config``."""
    from rulka.cli import main as rulka_main

    return rulka_main(["config", *(argv if argv is not None else sys.argv[1:])])
