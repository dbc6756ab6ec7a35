"""``rulka dpo``: offline preference data for DPO (``dpo.dpo_offline_pairs_jsonl``).

``rulka dpo record POLICY --out FILE`` drives episodes with a saved policy (a run folder or a
``policy.safetensors``) and writes them as rulka episode files. ``rulka dpo pair --chosen A
--rejected B --out pairs.jsonl`` appends a pair line; ``A`` and ``B`` are episode files, or run
folders / policy files from two recorded runs, in which case one episode of each is recorded
first (beside the pair file). Nothing is pickled: see ``rulka.agents.policy.episodes``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rulka.errors import UserError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("dpo", help="record episodes and write offline DPO pair files",
                                   description=__doc__.split("\n\n")[1])
    sub = parser.add_subparsers(dest="dpo_command", metavar="ACTION", required=True)
    p = sub.add_parser("record", help="drive episodes with a saved policy and write episode files")
    p.add_argument("policy", help="a run folder or a policy.safetensors file")
    p.add_argument("--out", required=True, help="episode file to write (NAME-<i> for several episodes)")
    _env_args(p)
    p.add_argument("--episodes", type=int, default=1)
    p.set_defaults(func=cmd_record)
    p = sub.add_parser("pair", help="append a {chosen, rejected} line to a pair file")
    p.add_argument("--chosen", required=True, help="episode file, run folder or policy file (the preferred one)")
    p.add_argument("--rejected", required=True, help="episode file, run folder or policy file")
    p.add_argument("--out", required=True, help="the pair file (JSONL) to append to")
    _env_args(p)
    p.set_defaults(func=cmd_pair)


def _env_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="run config naming the env (default: the policy's own)")
    p.add_argument("--seed", type=int, default=0, help="reset seed of the first episode")
    p.add_argument("--greedy", action="store_true", help="most probable actions instead of sampling")


def _policy_and_env(policy: str, config_path: str | None) -> tuple[Any, Any]:
    from rulka.config import load_config
    from rulka.envs.sim.policy import load_policy, spec_config
    from rulka.plugins import make_env

    actor, spec = load_policy(policy)
    cfg = load_config(config_path) if config_path is not None else spec_config(spec)
    if cfg is None:
        raise UserError(f"policy '{policy}' names no env: pass --config")
    return actor, make_env(cfg)


def _record(policy: str, out: Path, args: argparse.Namespace, episodes: int) -> list[Path]:
    from rulka.agents.policy.episodes import record_episode, write_episode

    actor, env = _policy_and_env(policy, args.config)
    paths = []
    try:
        for i in range(episodes):
            seg, ret = record_episode(env, actor, seed=args.seed + i, greedy=args.greedy, episode_id=i)
            path = out if episodes == 1 else out.with_name(f"{out.stem}-{i}{out.suffix}")
            write_episode(path, [seg])
            print(f"{path}: {seg.num_transitions} steps, return {ret:.2f}")
            paths.append(path)
    finally:
        env.close()
    return paths


def cmd_record(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise UserError("--episodes must be >= 1")
    _record(args.policy, Path(args.out), args, args.episodes)
    return 0


def cmd_pair(args: argparse.Namespace) -> int:
    from rulka.agents.policy.episodes import EPISODE_SUFFIX, append_pair, read_episode
    from rulka.errors import BadInput

    out = Path(args.out)
    sides = []
    for role, source in (("chosen", args.chosen), ("rejected", args.rejected)):
        path = Path(source)
        if path.is_file() and path.name.endswith(EPISODE_SUFFIX):
            try:
                read_episode(path)
            except BadInput as exc:
                raise UserError(str(exc)) from None
        else:
            n = sum(1 for _ in out.parent.glob(f"{role}-*{EPISODE_SUFFIX}")) if out.parent.exists() else 0
            path = _record(source, out.parent / f"{role}-{n}{EPISODE_SUFFIX}", args, 1)[0]
        sides.append(path)
    append_pair(out, *sides)
    print(f"{out}: + chosen {sides[0].name}, rejected {sides[1].name}")
    return 0
