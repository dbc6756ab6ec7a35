"""``rulka eval RUN_DIR_OR_WEIGHTS``: greedy episodes of a saved policy on the env it trained on."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rulka.errors import UserError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "eval", help="run greedy episodes of a saved policy and print return, race time, finish rate",
        description=(
            "Load a saved policy (a run folder: its best policy, best/policy.safetensors, which every "
            "run keeps from its greedy evaluation episodes, or with --final the weights at the end of "
            "the run, weights/policy.safetensors; or a policy .safetensors file) with the run's "
            "resolved config, run N greedy episodes on the run's "
            "env (the simulator, a Gymnasium env or a game backend), and print mean ± std of the "
            "return, the finish rate and the race time per map. Episode i resets with seed S+i, so "
            "two policies compared with --compare meet the same starts."
        ),
        epilog="example: rulka eval runs/sim_iqn --episodes 5 --video renders/",
    )
    parser.add_argument("policy", metavar="RUN_DIR_OR_WEIGHTS", help="run folder or policy .safetensors file")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--final", action="store_true",
                       help="a run folder's final weights (weights/; with training.lr_cooldown_end_on_average "
                            "the moving average the run ended on) instead of its best policy (best/)")
    which.add_argument("--average", action="store_true",
                       help="a run folder's moving average of its weights (average/, kept with "
                            "trainer.average_policy_frames) instead of its best policy")
    parser.add_argument("--episodes", type=int, default=10, help="greedy episodes per policy (default 10)")
    parser.add_argument("--env", default=None, metavar="ENV",
                        help="evaluate on another env: sim, sim:TRACK (a bundled track, gen:SEED or a "
                             ".json), another env plugin, or a Gymnasium id (default: the run's env)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a value of the run's config (repeatable), e.g. environment.gym_kwargs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode (default 0)")
    parser.add_argument("--start-noise", type=float, default=0.0, metavar="M",
                        help="simulator only: start each episode up to M metres sideways and M degrees off the "
                             "start line (drawn from its seed); a greedy race from the line repeats exactly, so "
                             "this shows how much the policy's race time moves (e.g. --episodes 9 --start-noise 0.3)")
    parser.add_argument("--max-steps", type=int, default=None, metavar="N",
                        help="stop an episode after N actions (default: when the env ends it; at most 100000)")
    parser.add_argument("--compare", default=None, metavar="OTHER",
                        help="a second run folder or policy file, evaluated on the same env and seeds")
    parser.add_argument("--video", type=Path, default=None, metavar="DIR",
                        help="record the first episode of each policy into DIR (the simulator also "
                             "writes the driven line as a PNG)")
    parser.add_argument("--video-format", choices=["gif", "mp4"], default="gif", help="video format (default gif)")
    parser.add_argument("--json", action="store_true", help="print JSON (summary and every episode)")
    parser.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from rulka.envs.video import EpisodeRecorder, file_stem
    from rulka.evaluation import (
        AVERAGE,
        BEST,
        DEFAULT_MAX_STEPS,
        FINAL,
        evaluate,
        format_table,
        load_for_eval,
    )

    max_steps = DEFAULT_MAX_STEPS if args.max_steps is None else args.max_steps
    if max_steps < 1:
        raise UserError("--max-steps must be at least 1")
    if args.episodes < 1:
        raise UserError("--episodes must be at least 1")
    which = FINAL if args.final else AVERAGE if args.average else BEST
    first = load_for_eval(args.policy, env=args.env, overrides=args.overrides, which=which)
    policies = [first]
    if args.compare:
        # the second policy runs on the first one's env, whatever its own run used
        other = load_for_eval(args.compare, env=args.env, overrides=args.overrides, which=which)
        other.cfg = _with_env_of(other.cfg, first.cfg)
        policies.append(other)
    summaries = []
    written: list[Path] = []
    for i, policy in enumerate(policies):
        recorder = EpisodeRecorder() if args.video is not None else None
        report = evaluate(policy, episodes=args.episodes, seed=args.seed, max_steps=max_steps, recorder=recorder,
                          start_noise=args.start_noise)
        summaries.append(report.summary())
        if recorder is not None:
            env_name = report.episodes[0].map_name or report.env
            tag = f"{chr(ord('A') + i)}_" if len(policies) > 1 else ""
            written += recorder.write(args.video, f"{tag}{file_stem(env_name)}_policy", fmt=args.video_format,
                                      title=f"{env_name} - {Path(args.policy if i == 0 else args.compare).name}: "
                                            f"{recorder.outcome()}")
    if args.json:
        out: dict[str, Any] = summaries[0] if len(summaries) == 1 else {"policies": summaries}
        if written:
            out = {**out, "video": [str(p) for p in written]}
        print(json.dumps(out, indent=2))
    else:
        print(format_table(summaries))
        for path in written:
            print(path)
    for arg, policy in zip([args.policy, args.compare], policies, strict=False):
        if which == BEST and Path(arg).is_dir() and policy.file.parent.name != "best":
            print(f"note: {arg} kept no best policy (best/); evaluated its final weights", file=sys.stderr)
        if policy.config_source == "defaults":
            print(f"note: {policy.file} carries no run config; evaluated with the defaults' env",
                  file=sys.stderr)
    return 0


def _with_env_of(cfg: Any, reference: Any) -> Any:
    """``cfg`` with the ``environment`` and ``rewards`` sections of ``reference``: the same env
    and the same returns, each policy with its own network settings."""
    from rulka.config import config_from_dict

    data, ref = cfg.to_dict(), reference.to_dict()
    for section in ("environment", "rewards"):
        data[section] = ref[section]
    return config_from_dict(data)
