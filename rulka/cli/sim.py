"""``rulka sim``: the built-in track simulator: list tracks, drive, set reference times, render,
split times against the scripted driver."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rulka.errors import UserError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sim",
        help="the built-in track simulator: tracks, scripted driver, pictures",
        description=(
            "The built-in TrackMania-like simulator (the default environment). List its tracks, "
            "drive one with the scripted driver, recompute reference times, or render an episode "
            "as a GIF/MP4 plus a PNG of the driven line coloured by speed."
        ),
    )
    sub = parser.add_subparsers(dest="sim_command", metavar="SIM_COMMAND")
    parser.set_defaults(func=lambda args: (parser.print_help(), 0)[1])

    p = sub.add_parser("tracks", help="list the bundled tracks with length and reference time",
                       description="List the bundled tracks: name, length, reference time, description.")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_tracks)

    p = sub.add_parser("drive", help="run the scripted driver on a track and print the race time",
                       description="Run the scripted driver (pure pursuit with a speed plan) on a track.")
    p.add_argument("--track", default="default", help="bundled name, gen:<seed> or a track .json (default: default)")
    p.add_argument("--continuous", action="store_true", help="analog steering instead of the 12 discrete actions")
    p.set_defaults(func=cmd_drive)

    p = sub.add_parser("reference", help="recompute reference times (scripted driver, discrete actions)",
                       description=("Recompute each bundled track's reference time with the scripted driver "
                                    "(discrete actions). With --write, store them in the track files "
                                    "(after a change to the physics or the driver)."))
    p.add_argument("--track", action="append", help="only this track (repeatable; default: all bundled)")
    p.add_argument("--write", action="store_true", help="write the new times into the bundled track files")
    p.set_defaults(func=cmd_reference)

    p = sub.add_parser("render", help="write a GIF/MP4 of an episode and a PNG of the driven line",
                       description=("Drive one episode (scripted driver, or a saved policy with --policy) and "
                                    "write NAME.gif (camera view beside a map) and NAME.png (the track with "
                                    "the driven line coloured by speed) into --out."))
    p.add_argument("--track", default=None,
                   help="bundled name, gen:<seed> or a track .json (default: the policy's track, else default)")
    p.add_argument("--policy", default=None, metavar="WEIGHTS_OR_RUN_DIR",
                   help="a policy.safetensors file, or a run folder holding one (default: the scripted driver)")
    p.add_argument("--out", type=Path, default=Path("renders"), metavar="DIR", help="output folder (default: renders)")
    p.add_argument("--format", choices=["gif", "mp4"], default="gif", help="animation format (default: gif)")
    p.add_argument("--max-seconds", type=float, default=60.0, help="stop the episode after this race time")
    p.add_argument("--every", type=int, default=2, help="keep one frame in N for the animation (default: 2)")
    p.add_argument("--no-animation", action="store_true", help="write only the PNG")
    p.add_argument("--line", type=Path, default=None, metavar="FILE",
                   help="a reference line (.npy / .json, e.g. from `rulka tm record-line --fake`): the rewards "
                        "follow it and the PNG shows it in white, its real checkpoints as circles")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("splits", help="split times of a policy against the scripted driver",
                       description=("Drive a saved policy greedily and the scripted driver on the same track from "
                                    "the same start, and print both times every --every metres along the track, "
                                    "the policy's gap (positive: behind) and the time it lost or gained in each "
                                    "sector: where a policy loses its race."))
    p.add_argument("--policy", required=True, metavar="WEIGHTS_OR_RUN_DIR",
                   help="a policy.safetensors file, or a run folder (its best policy, else its final weights)")
    p.add_argument("--track", default=None, help="bundled name, gen:<seed> or a track .json (default: the policy's track)")
    p.add_argument("--every", type=float, default=50.0, metavar="M", help="metres between marks (default: 50)")
    p.add_argument("--max-seconds", type=float, default=180.0, help="stop either race after this race time")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_splits)

    p = sub.add_parser("optimal", help="search the fastest race on a track with the learner's actions",
                       description=("Search the deterministic simulator for the fastest race on TRACK with the "
                                    "learner's 12 discrete actions, one per decision period (the config's "
                                    "environment.tm_engine_step_per_action; default 5 x 10 ms, as "
                                    "configs/sim_iqn.yaml): the best of the scripted driver's and racing-line "
                                    "drivers' races, improved by beam searches at --width and at twice it. "
                                    "Writes the action tape (JSON); replaying it in the simulator reproduces "
                                    "the time exactly. The report says how hard it searched and whether the "
                                    "doubled search still improved the time."))
    p.add_argument("track", help="bundled name, gen:<seed> or a track .json")
    p.add_argument("--config", default=None, help="a run config: its decision period (default: the defaults, 50 ms)")
    p.add_argument("--steps-per-action", type=int, default=None, metavar="N",
                   help="10 ms physics steps per decision (overrides --config)")
    p.add_argument("--width", type=int, default=8, help="beam width of the first search (default 8)")
    p.add_argument("--no-double", action="store_true", help="skip the search at twice the width")
    p.add_argument("--random-seeds", type=int, default=16, metavar="N",
                   help="line-driver seed races with knobs drawn at random, besides a fixed grid (default 16)")
    p.add_argument("--seed-tape", action="append", default=[], metavar="FILE",
                   help="another seed race: a tape at a multiple of the decision period, e.g. a faster race "
                        "found at 100 ms seeding a 50 ms search (repeatable)")
    p.add_argument("--max-seconds", type=float, default=180.0, help="give up on races longer than this")
    p.add_argument("--out", type=Path, default=None, metavar="FILE",
                   help="write the tape here (default: optimal_<track>_<ms>ms.json)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_optimal)


def cmd_tracks(args: argparse.Namespace) -> int:
    from rulka.envs.sim.tracks import bundled_track_names, get_track

    rows = []
    for name in bundled_track_names():
        t = get_track(name)
        rows.append({"name": name, "length_m": round(t.length, 1), "reference_time_ms": t.reference_time_ms,
                     "description": t.description})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'track':<16} {'length':>8} {'reference':>10}  description")
    for r in rows:
        ref = f"{r['reference_time_ms'] / 1000:.2f} s" if r["reference_time_ms"] else "-"
        print(f"{r['name']:<16} {r['length_m']:>6.0f} m {ref:>10}  {r['description']}")
    return 0


def cmd_drive(args: argparse.Namespace) -> int:
    from rulka.envs.sim.driver import drive
    from rulka.envs.sim.tracks import get_track

    track = get_track(args.track)
    result = drive(track, discrete=not args.continuous)
    t = int(result["race_time_ms"])  # type: ignore[call-overload]
    status = "finished" if result["finished"] else "did not finish"
    ref = f" (reference {track.reference_time_ms / 1000:.2f} s)" if track.reference_time_ms else ""
    print(f"{track.name}: {status} in {t / 1000:.2f} s{ref}, wall hits: {result['wall_hits']}")
    return 0 if result["finished"] else 1


def cmd_reference(args: argparse.Namespace) -> int:
    from importlib import resources

    from rulka.envs.sim.driver import reference_time_ms
    from rulka.envs.sim.tracks import build_track, bundled_track_names, dump_track_spec, load_track_spec

    names = args.track or bundled_track_names()
    for name in names:
        if name not in bundled_track_names():
            raise UserError(f"'{name}' is not a bundled track (bundled: {', '.join(bundled_track_names())})")
        spec = load_track_spec(name)
        old = spec.get("reference_time_ms")
        new = reference_time_ms(build_track(spec))
        print(f"{name:<16} stored {old} ms  driver {new} ms")
        if args.write and new != old:
            spec["reference_time_ms"] = new
            path = Path(str(resources.files("rulka.envs") / "tracks" / f"{name}.json"))
            path.write_text(dump_track_spec(spec), encoding="utf-8")
            print(f"  wrote {path}")
    return 0


def _max_steps(seconds: float, sim: Any, per_decision: int = 1) -> int:
    """Decisions in ``seconds`` of race time on ``sim`` (engine steps of MS_PER_STEP) with ``per_decision`` actions each."""
    import math

    from rulka.envs.sim.physics import MS_PER_STEP

    return math.ceil(seconds * 1000 / (MS_PER_STEP * sim.steps_per_action * per_decision))


class _DriverActor:
    """The scripted driver as an actor (it reads the car, not the observation)."""

    def __init__(self, env: Any) -> None:
        from rulka.envs.sim.driver import ScriptedDriver

        self.env = env
        self.driver = ScriptedDriver(env.track)

    def reset(self) -> None:  # after env.reset, which may have changed the track
        from rulka.envs.sim.driver import ScriptedDriver

        if self.driver.track is not self.env.track:
            self.driver = ScriptedDriver(self.env.track)

    def act(self, obs: Any, test: bool = False) -> Any:
        import numpy as np

        car = self.env.car
        if self.env.continuous:
            ctl = self.driver.controls(car)
            return np.array([ctl.gas, ctl.brake, -ctl.steer], dtype=np.float32)
        return self.driver.action(car)


def cmd_render(args: argparse.Namespace) -> int:
    from rulka.envs.multi_action import wrap_for_blocks
    from rulka.envs.sim.env import SimTrackEnv
    from rulka.envs.video import EpisodeRecorder, file_stem
    from rulka.evaluation import run_episode

    if args.every < 1:
        raise UserError("--every must be >= 1")
    actor: Any = None
    config: Any = None
    if args.policy:
        from rulka.envs.sim.policy import load_policy, read_policy_file, spec_config

        config = spec_config(read_policy_file(args.policy)[2])
        actor, _ = load_policy(args.policy, config)
    sim = SimTrackEnv(config=config, track=args.track or (None if config is not None else "default"),
                      render_mode="rgb_array",
                      image=None if config is not None else True)
    # a policy trained with multi-action blocks takes its N actions per decision
    per_decision = config.environment.n_actions_per_block if config is not None else 1
    env = wrap_for_blocks(sim, per_decision)
    reference = checkpoints = None
    options = None
    if args.line is not None:
        from rulka.envs.reference_line import read_reference_file

        reference, checkpoints = read_reference_file(args.line)
        options = {"map": sim.track.name, "reference_line": str(args.line)}
    if actor is None:
        actor = _DriverActor(sim)
    recorder = EpisodeRecorder(every=args.every, animate=not args.no_animation)
    run_episode(env, actor, seed=0, options=options, max_steps=_max_steps(args.max_seconds, sim, per_decision),
                on_reset=recorder.start,
                on_step=recorder.step)
    who = "policy" if args.policy else "driver"
    outcome = recorder.outcome()
    paths = recorder.write(args.out, f"{file_stem(sim.track.name)}_{who}", fmt=args.format,
                           title=f"{sim.track.name} - {who}: {outcome}", reference=reference,
                           checkpoints=checkpoints)
    for path in paths:
        print(path)
    print(f"{sim.track.name}: {who} {outcome}")
    return 0


def cmd_splits(args: argparse.Namespace) -> int:
    from rulka.envs.multi_action import wrap_for_blocks
    from rulka.envs.sim.env import SimTrackEnv
    from rulka.envs.sim.splits import Race, drive, splits
    from rulka.evaluation import load_for_eval

    if not args.every > 0:
        raise UserError("--every must be > 0")
    loaded = load_for_eval(args.policy)
    config, path = loaded.cfg, loaded.file
    sim = SimTrackEnv(config=config, track=args.track)
    per_decision = config.environment.n_actions_per_block
    policy = drive(wrap_for_blocks(sim, per_decision), loaded.actor, _max_steps(args.max_seconds, sim, per_decision))
    # the driver acts once per action (50 ms, as its reference time was set) on the same track, with the
    # policy's pipeline settings unless those split actions into 10 ms blocks
    plain = SimTrackEnv(config=config if per_decision == 1 else None, track=sim.track.name, image=False)
    reference = drive(plain, _DriverActor(plain), _max_steps(args.max_seconds, plain))
    length = float(plain.pipeline.line.finish_progress)
    rows = splits(reference, policy, args.every, length)

    def outcome(race: Race) -> str:
        done = f"finished in {race.race_time_ms / 1000:.2f} s" if race.race_time_ms is not None else "did not finish"
        return f"{done}, {race.wall_hits} wall hits"

    if args.json:
        print(json.dumps({"track": plain.track.name, "policy_file": str(path), "every_m": args.every,
                          "length_m": round(length, 1), "policy": outcome(policy), "driver": outcome(reference),
                          "splits": rows}, indent=2))
        return 0
    print(f"{plain.track.name}: policy {outcome(policy)}; scripted driver {outcome(reference)}")
    print("sector columns, driver/policy: brake actions, % of actions sliding, lowest speed (m/s), lowest gear")
    print(f"{'mark':>8} {'driver':>8} {'policy':>8} {'gap':>7} {'sector':>7} {'v driver':>9} {'v policy':>9} "
          f"{'brakes':>7} {'slide %':>9} {'v min':>11} {'gear':>5}")

    def num(v: object, fmt: str) -> str:
        return format(v, fmt) if isinstance(v, int | float) else "-"

    def pair(r: dict[str, Any], key: str, fmt: str, scale: float = 1.0) -> str:
        ref, pol = r["reference_driving"], r["policy_driving"]
        return "/".join(num(d[key] if scale == 1.0 else d[key] * scale, fmt) if d is not None else "-"
                        for d in (ref, pol))

    for r in rows:
        mark = "finish" if r["finish"] else f"{r['mark_m']:.0f} m"
        print(f"{mark:>8} {num(r['reference_s'], '8.2f')} {num(r['policy_s'], '8.2f')} {num(r['gap_s'], '+7.2f')} "
              f"{num(r['sector_s'], '+7.2f')} {num(r['reference_speed'], '9.1f')} {num(r['policy_speed'], '9.1f')} "
              f"{pair(r, 'brake_actions', 'd'):>7} {pair(r, 'sliding_share', '.0f', 100):>9} "
              f"{pair(r, 'min_speed', '.1f'):>11} {pair(r, 'min_gear', 'd'):>5}")
    lost = [r for r in rows if r["sector_s"] is not None]
    if lost:
        worst = max(lost, key=lambda r: r["sector_s"])
        if worst["sector_s"] > 0:
            where = "the finish" if worst["finish"] else f"{worst['mark_m']:.0f} m"
            print(f"most time lost in the sector ending at {where}: {worst['sector_s']:+.2f} s")
    return 0


def solver_steps_per_action(config: str | None, steps: int | None) -> int:
    """10 ms physics steps per decision: ``steps``, else the config's, else the config defaults'."""
    if steps is not None:
        if steps < 1:
            raise UserError(f"--steps-per-action must be at least 1, got {steps}")
        return steps
    from rulka.config import RulkaConfig, load_config

    cfg = load_config(config) if config else RulkaConfig()
    env = cfg.environment
    if env.continuous_actions:
        raise UserError("rulka sim optimal searches the discrete action set; the config sets "
                        "environment.continuous_actions: true")
    if env.ms_per_tm_engine_step != 10:
        raise UserError(f"the simulator steps 10 ms; the config sets environment.ms_per_tm_engine_step "
                        f"{env.ms_per_tm_engine_step}")
    return env.ms_per_action // env.ms_per_tm_engine_step


def cmd_optimal(args: argparse.Namespace) -> int:
    import sys

    from rulka.envs.sim.optimal import Tape, solve
    from rulka.envs.video import file_stem

    steps = solver_steps_per_action(args.config, args.steps_per_action)
    log = None if args.quiet or args.json else (lambda line: print(line, file=sys.stderr, flush=True))
    if args.random_seeds < 0:
        raise UserError("--random-seeds must be at least 0")
    sol = solve(args.track, steps_per_action=steps, width=args.width, doubling=not args.no_double,
                n_random_seeds=args.random_seeds, max_race_time_ms=int(args.max_seconds * 1000), log=log,
                seed_from=[Tape.read(p) for p in args.seed_tape])
    tape = sol.tape
    stem = Path(args.track).stem if args.track.endswith(".json") else args.track
    out = args.out or Path(f"optimal_{file_stem(stem)}_{tape.ms_per_action}ms.json")
    tape.write(out)
    result = {"track": args.track, "ms_per_action": tape.ms_per_action, "race_time_ms": tape.race_time_ms,
              "scripted_time_ms": sol.scripted_time_ms, "seed": sol.seed_source, "seed_time_ms": sol.seed_time_ms,
              "actions": len(tape.actions), "search": tape.search, "passes": sol.passes, "tape": str(out)}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0 if tape.race_time_ms is not None else 1
    if tape.race_time_ms is None:
        print(f"{args.track}: no race found that finishes within {args.max_seconds:g} s; wrote {out}")
        return 1
    s = tape.search
    by = s["best_ms_by_width"]
    doubled = (f"; at width {2 * s['width']}: {by[str(2 * s['width'])] / 1000:.2f} s "
               f"({s['improved_by_doubling_ms']} ms better)" if s["doubled"] else "")
    ref = f", scripted driver {sol.scripted_time_ms / 1000:.2f} s" if sol.scripted_time_ms else ""
    print(f"{args.track} ({tape.ms_per_action} ms decisions): {tape.race_time_ms / 1000:.2f} s{ref}; "
          f"seed {sol.seed_source} {sol.seed_time_ms / 1000 if sol.seed_time_ms else float('nan'):.2f} s")
    print(f"search: width {s['width']}: {by[str(s['width'])] / 1000:.2f} s{doubled}; "
          f"{s['nodes_expanded']} nodes expanded in {s['seconds']:.1f} s")
    print(f"wrote {out}")
    return 0
