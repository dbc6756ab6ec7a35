"""Benchmark: what a trained policy drives, track by track, against the scripted driver.

Per track (the five bundled ones and generated ``gen:<seed>`` tracks the run never saw) it
reports, as one JSON object:

- from the run's ``metrics.jsonl`` (``first_finish``): the frames (samples) and minutes at which
  an exploring worker first finished that track (per-map ``charts/<track>/finish_rate``);
- from the saved greedy policy (``greedy``): finished or not, race time, metres driven;
- the scripted driver's race time on the same track, and whether the policy beat it.

Two ways to use it::

    # evaluate an existing run folder (the map cycle's best policy in <run>/best, else the latest
    # weights in <run>/weights; --policy final: the latest weights), the metrics beside it
    python -m bench.study tracks evaluate RUN_DIR [--gen-seeds 1 2 3] [--policy best|final]
    # train first (a full learning run: 30 minutes on a 2-core box), then evaluate
    python -m bench.study tracks run --config configs/sim_iqn_cycle.yaml --minutes 30 --workers 2
    # each also writes its JSON to RUN_DIR/learning.json; the per-track table of BENCHMARKS.md:
    python -m bench.study tracks record RUN_DIR/learning.json --label NAME --command "..."

Greedy episodes start like the game (no start noise) and end at the finish, at a cut-off
(``no_progress`` after 2 s without a new zone) or at ``--max-seconds`` of race time. The
simulator and every rulka actor's ``act(obs, test=True)`` are deterministic (IQN averages Q over
fixed quantile midpoints when testing), so one race per track is the policy's time. With
``--races N`` each track is driven N times and judged by the median race (an unfinished race
counts as slower than any finish), the best time beside it: for a policy that samples its greedy
action (IQN did until 2026-11-24, and two races of one policy then differed by up to 10 s).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

BUNDLED = ("default", "hairpins", "slalom", "dirt_mix", "turbo_straight")


def drive(env: Any, act: Any, max_seconds: float, seed: int = 0) -> dict[str, Any]:
    """One episode from ``env.reset(seed=seed)`` with ``act(obs) -> action``; its outcome."""
    obs, info = env.reset(seed=seed)
    total = 0.0
    base = getattr(env, "unwrapped", env)  # the simulator under a multi-action block wrapper
    while base.car.race_time_ms < max_seconds * 1000:
        obs, reward, terminated, truncated, info = env.step(act(obs))
        total += float(reward)
        if terminated or truncated:
            break
    finished = bool(info.get("finished"))
    return {"return": round(total, 2), "finished": finished,
            "race_time_s": round(info["race_time_ms"] / 1000, 2) if finished else None,
            "progress_m": round(float(info.get("progress_m", 0.0)), 1),
            "cutoff": info.get("cutoff") or ("" if finished else "time limit")}


def scripted_time_s(track: str, max_seconds: float = 120.0) -> float | None:
    """The scripted driver's race time on ``track`` (None if it does not finish)."""
    from rulka.envs.sim.driver import ScriptedDriver
    from rulka.envs.sim.env import SimTrackEnv

    env = SimTrackEnv(track=track, image=False)
    env.reset(seed=0)
    driver = ScriptedDriver(env.track)
    return drive(env, lambda _obs: driver.action(env.car), max_seconds)["race_time_s"]


def first_finishes(run_dir: Path) -> dict[str, dict[str, float]]:
    """Per track: frames and minutes of the first metrics record with a finish on it."""
    from rulka.telemetry.logger import read_metrics
    from rulka.telemetry.metrics import FINISH_RATE, per_map

    metrics_file = run_dir / "metrics.jsonl"
    if not metrics_file.is_file():
        return {}
    out: dict[str, dict[str, float]] = {}
    t0: float | None = None
    for record in read_metrics(metrics_file):
        t0 = record.get("wall_time", 0.0) if t0 is None else t0
        for track in BUNDLED:
            if track not in out and (record["metrics"].get(per_map(FINISH_RATE, track)) or 0) > 0:
                out[track] = {"frames": int(record["step"]),
                              "minutes": round((record.get("wall_time", t0) - t0) / 60, 1)}
    return out


def greedy_races(env: Any, actor: Any, races: int, max_seconds: float) -> dict[str, Any]:
    """``races`` greedy races of ``actor`` on ``env``; the median race decides (``finished``,
    ``race_time_s``, ``progress_m``, ``cutoff``), ``best_s`` and ``finishes`` beside it."""
    outcomes = []
    for _ in range(races):
        actor.reset()
        outcomes.append(drive(env, lambda obs: actor.act(obs, test=True), max_seconds))
    return _median_race(outcomes)


def _median_race(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of several races (the lower middle: with 4 races, the 2nd best), with
    ``races``, ``finishes``, ``best_s`` and every race's ``times_s`` beside it."""
    from rulka.trainer.best import race_order  # the order the trainer ranks a candidate's races in

    ranked = sorted(outcomes, key=lambda o: race_order(o["finished"], o["race_time_s"], o["progress_m"]))
    median = ranked[(len(ranked) - 1) // 2]
    times = [o["race_time_s"] for o in outcomes if o["finished"]]
    return {**median, "races": len(outcomes), "finishes": len(times), "best_s": min(times) if times else None,
            "times_s": [o["race_time_s"] if o["finished"] else None for o in outcomes]}


# metres sideways and degrees of heading (the simulator's start_noise) for perturbed_races
PERTURBED_START_NOISE = 0.3


def perturbed_races(env: Any, actor: Any, races: int, max_seconds: float,
                    noise: float = PERTURBED_START_NOISE) -> dict[str, Any]:
    """``races`` greedy races of ``actor`` from starts moved up to ``noise`` m sideways and turned up
    to ``noise`` degrees (the simulator's ``start_noise``, reset seeds 1..races); the median race
    decides, as in ``greedy_races``, with ``start_noise`` beside it.

    The simulator repeats a greedy race exactly, and a greedy policy's race time can move by seconds
    between weights a few updates apart (BENCHMARKS.md, readme_frames_1m): the one race from the
    start line is one draw. The median of races from slightly different starts describes the
    policy rather than one of its races (a game's races are not exactly repeatable either)."""
    base = getattr(env, "unwrapped", env)
    before = base.start_noise
    base.start_noise = float(noise)
    try:
        outcomes = []
        for i in range(races):
            actor.reset()
            outcomes.append(drive(env, lambda obs: actor.act(obs, test=True), max_seconds, seed=i + 1))
    finally:
        base.start_noise = before
    return {**_median_race(outcomes), "start_noise": float(noise)}


def _beats(race: dict[str, Any], scripted_s: float | None) -> bool:
    """Whether a (median) race finished faster than the scripted driver's time."""
    return bool(race["finished"] and scripted_s is not None and race["race_time_s"] < scripted_s)


def policy_folder(run_dir: Path, policy: str) -> tuple[Path, dict[str, Any] | None]:
    """Where the policy to evaluate is, and the run's ``best/best.json`` when it is the best one.
    ``policy``: ``best`` (the map cycle's best policy, ``<run>/best``, when the run wrote one; else
    the latest weights), ``final`` (``<run>/weights``, the weights at the end of the run) or
    ``average`` (``<run>/average``, the moving average of the weights, ``trainer.average_policy_frames``)
    or ``trained`` (``<run>/trained``, the weights trained last when the run ended on its average)."""
    if policy in ("average", "trained"):  # trained: the weights trained last of a run that ended on its average
        if not (run_dir / policy / "policy.safetensors").is_file():
            raise SystemExit(f"bench/study/tracks.py: {run_dir} kept no {policy} policy ({policy}/)")
        return run_dir / policy, None
    best = run_dir / "best"
    if policy == "best" and (best / "policy.safetensors").is_file():
        try:
            info = json.loads((best / "best.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            info = {}
        return best, info if isinstance(info, dict) else {}
    return run_dir, None


def evaluate(run_dir: Path, gen_seeds: list[int], max_seconds: float, races: int = 1,
             policy: str = "best", perturbed: int = 0) -> dict[str, Any]:
    """Greedy policy of ``run_dir`` on the bundled tracks and ``gen:<seed>``, vs the scripted driver
    (``policy``: see ``policy_folder``); with ``perturbed`` > 0, on the tracks it trained on, also
    that many races from perturbed starts (``perturbed_races``, row ``perturbed``)."""
    import torch

    from rulka.envs.map_cycle import MapCycle
    from rulka.envs.multi_action import wrap_for_blocks
    from rulka.envs.sim.env import SimTrackEnv
    from rulka.envs.sim.policy import load_policy, spec_config

    torch.set_num_threads(1)
    torch.manual_seed(0)  # a policy that samples its greedy actions drives the same races each time
    folder, best = policy_folder(run_dir, policy)
    actor, spec = load_policy(folder)
    cfg = spec_config(spec)
    if cfg is None or cfg.environment.backend != "sim":
        backend = repr(cfg.environment.backend) if cfg is not None else "unknown (its policy carries no run config)"
        raise SystemExit(f"bench/study/tracks.py: {run_dir} was trained with environment.backend "
                         f"{backend}; it evaluates simulator (backend sim) runs only")
    cycle = MapCycle.from_config(cfg)
    seen = {e.map_path for e in cycle.entries} if cycle else {cfg.environment.track}
    firsts = first_finishes(run_dir)
    rows = []
    for track in [*BUNDLED, *(f"gen:{s}" for s in gen_seeds)]:
        env = wrap_for_blocks(SimTrackEnv(config=cfg, track=track), cfg.environment.n_actions_per_block)
        greedy = greedy_races(env, actor, races, max_seconds)
        scripted = scripted_time_s(track)
        row = {"track": track, "trained_on": track in seen, "first_finish": firsts.get(track),
               "greedy": greedy, "scripted_s": scripted, "beats_scripted": _beats(greedy, scripted)}
        if perturbed > 0 and row["trained_on"]:
            moved = perturbed_races(env, actor, perturbed, max_seconds)
            row["perturbed"] = {**moved, "beats_scripted": _beats(moved, scripted)}
        in_run = (best or {}).get("maps", {}).get(track)
        if isinstance(in_run, dict):  # the race that made it the best, driven by a worker in the run
            t = in_run.get("race_time_ms")
            row["in_run_race_time_s"] = round(t / 1000, 2) if in_run.get("finished") and t else None
        rows.append(row)
    bundled = [r for r in rows if not r["track"].startswith("gen:")]
    unseen = [r for r in rows if not r["trained_on"]]
    return {
        "bench": "learning", "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu", "run_dir": str(run_dir),
        "races_per_track": races, "tracks": rows,
        "policy": "best" if best is not None else "final",
        "best_policy": {k: best.get(k) for k in ("version", "frames", "updates")} if best is not None else None,
        "summary": {
            "bundled_finished": sum(r["greedy"]["finished"] for r in bundled),
            "bundled_beats_scripted": sum(r["beats_scripted"] for r in bundled),
            "unseen_finish_rate": (round(sum(r["greedy"]["finished"] for r in unseen) / len(unseen), 2)
                                   if unseen else None),
        },
    }


TRACK_RESULTS = Path(__file__).resolve().parents[1] / "history" / "track_results.json"


def draw_gen_seeds(n: int) -> list[int]:
    """``n`` distinct generated-track seeds drawn from the OS's entropy now (not 1-5, the tracks the
    recipes' notes quote), so that a generalisation figure is not a figure about tuned tracks."""
    import secrets

    seeds: list[int] = []
    while len(seeds) < n:
        s = 1000 + secrets.randbelow(2**31 - 1000)
        if s not in seeds:
            seeds.append(s)
    return seeds


def _greedy_text(greedy: dict[str, Any]) -> str:
    """The table's cell: the median race, and with several races the best time and finishes."""
    text = (f"{greedy['race_time_s']:.2f} s" if greedy["finished"]
            else f"not finished ({greedy['cutoff'] or 'time'} at {greedy['progress_m']} m)")
    races = greedy.get("races", 1)
    if races > 1:
        best = f"best {greedy['best_s']:.2f} s, " if greedy.get("best_s") is not None else ""
        text += f" (median of {races}; {best}{greedy['finishes']}/{races} finished)"
    return text


def record(result: dict[str, Any], label: str, command: str, path: Path = TRACK_RESULTS) -> list[dict[str, Any]]:
    """Append one row per track of an ``evaluate`` result to ``path`` (BENCHMARKS.md's per-track
    table, written by ``python -m bench``); returns the rows added."""
    rows = []
    for r in result["tracks"]:
        first, greedy = r.get("first_finish") or {}, r["greedy"]
        rows.append({"run": label, "track": r["track"], "trained_on": "yes" if r["trained_on"] else "no",
                     "first_finish_min": first.get("minutes", ""), "first_finish_frames": first.get("frames", ""),
                     "greedy": _greedy_text(greedy),
                     "scripted_s": r["scripted_s"], "beats_scripted": "yes" if r["beats_scripted"] else "no",
                     "date": str(result["date"])[:16].replace("T", " ") + " UTC", "command": command})
    try:
        existing = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        existing = []
    path.write_text(json.dumps([*existing, *rows], indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    ev = sub.add_parser("evaluate", help="evaluate an existing run folder")
    ev.add_argument("run_dir", type=Path)
    rc = sub.add_parser("record", help="add a saved result (RUN_DIR/learning.json) to bench/history/track_results.json")
    rc.add_argument("result", type=Path)
    rc.add_argument("--label", required=True, help="the run's name in the table")
    rc.add_argument("--command", required=True, help="the command that trained and evaluated it")
    rn = sub.add_parser("run", help="train with `rulka run`, then evaluate")
    rn.add_argument("--config", type=Path, default=Path("configs/sim_iqn_cycle.yaml"))
    rn.add_argument("--minutes", type=float, default=30.0)
    rn.add_argument("--workers", type=int, default=2)
    rn.add_argument("--run-dir", type=Path, default=Path("runs/learning_bench"))
    rn.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    for p in (ev, rn):
        p.add_argument("--gen-seeds", type=int, nargs="*", default=[1, 2, 3, 4, 5])
        p.add_argument("--gen-random", type=int, default=0, metavar="N",
                       help="N more generated tracks whose seeds are drawn now (tracks nobody tuned on; "
                            "the seeds are in the JSON: gen_seeds_drawn)")
        p.add_argument("--max-seconds", type=float, default=120.0)
        p.add_argument("--races", type=int, default=1,
                       help="greedy races per track, the median decides (for policies that sample)")
        p.add_argument("--perturbed-races", type=int, default=0, metavar="K",
                       help="also race the policy K times from starts moved up to 0.3 m and 0.3 degrees on the "
                            "tracks it trained on; the median race is the row's `perturbed` (0: off)")
        p.add_argument("--policy", choices=("best", "final", "average"), default="best",
                       help="best: the map cycle's best policy (<run>/best) when the run wrote one, and the final "
                            "weights' summary beside it; final: the weights at the end of the run (<run>/weights)")
    args = parser.parse_args(argv)
    if args.cmd == "record":
        print(json.dumps(record(json.loads(args.result.read_text(encoding="utf-8")), args.label, args.command),
                         indent=2))
        return
    if args.cmd == "run":
        cmd = [sys.executable, "-m", "rulka.cli", "run", str(args.config), "--workers", str(args.workers),
               "--minutes", str(args.minutes), "--run-dir", str(args.run_dir),
               "--set", "logging.wandb.enabled=false", "--set", "logging.tensorboard.enabled=false"]
        for kv in args.set:
            cmd += ["--set", kv]
        subprocess.run(cmd, check=True)
    drawn = draw_gen_seeds(args.gen_random)
    gen_seeds = [*args.gen_seeds, *drawn]
    result = evaluate(args.run_dir, gen_seeds, args.max_seconds, args.races, args.policy, args.perturbed_races)
    result["gen_seeds_drawn"] = drawn
    if result["policy"] == "best":  # what the weights at the end would have driven, for comparison
        final = evaluate(args.run_dir, gen_seeds, args.max_seconds, args.races, "final")
        result["final_policy"] = {"summary": final["summary"],
                                  "greedy": {r["track"]: r["greedy"]["race_time_s"] for r in final["tracks"]}}
    text = json.dumps(result, indent=2)
    if args.run_dir.is_dir():  # kept with the run: an extended test's figures outlive its output
        (args.run_dir / "learning.json").write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
