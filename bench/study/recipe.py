"""Benchmark: is a learning recipe reliable across seeds? One config, several seeds, one process each.

A distributed run is not repeatable (thread timing, two workers' interleaving), so one good or bad
run says little about a config. This bench runs the same recipe as the trainer does, without the
network and without threads, so that a seed gives the same run every time:

- a worker's episode loop (``rulka.worker.buffer.EpisodeBuffer``, segments of
  ``worker.segment_max_steps``) with the actor the agent publishes, refreshed every
  ``trainer.publish_every_updates`` updates (the policy lag of a run on one machine);
- the trainer's rate limiter (``SampleToInsertRatio`` over the memory's samples per insert,
  starting at the memory's start size: no burst at the start);
- the agent's and the env's frame-driven schedules fed with the frames played.

Every ``--eval-every`` frames the current policy is evaluated greedily: a Gymnasium env by its
mean return over ``--eval-episodes`` episodes, the simulator by one race from the start (finished,
race time, metres). The JSON names, per seed, the best evaluation, the frames at which the target
was first reached (``--target``: a return, or ``finish`` for the simulator) and the history; the
summary says in how many seeds the target was reached.

    python -m bench.study recipe --config configs/cartpole_iqn.yaml --seeds 0 1 2 3 --frames 200000
    python -m bench.study recipe --config configs/sim_iqn.yaml --seeds 0 1 2 --frames 200000 --target finish \\
        --set exploration.epsilon_schedule='[[0,1.0],[20000,0.1]]'

Seeds run ``--parallel`` at a time (default: one per core), each in its own process with one
torch thread. IQN-family (replay) agents only: the on-policy learners have their own benches.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[2]


def _tracks(cfg: Any) -> list[str]:
    """The simulator tracks a recipe is judged on: the map cycle's greedy maps, else its track."""
    from rulka.envs.map_cycle import MapCycle

    cycle = MapCycle.from_config(cfg)
    if cycle is None:
        return [str(cfg.environment.track)]
    greedy = [e.map_path for e in cycle.entries if not e.is_exploration] or [e.map_path for e in cycle.entries]
    return list(dict.fromkeys(greedy))


def _evaluate(cfg: Any, actor: Any, episodes: int, seed: int, tracks: list[str] | None = None) -> dict[str, Any]:
    """Greedy outcome of ``actor``: one race from the start per simulator track (``tracks``), or a
    gym env's mean return over ``episodes`` episodes."""
    import numpy as np

    from rulka.plugins import make_env

    if cfg.environment.backend == "sim":
        from bench.study.tracks import drive  # bench/study/tracks.py: one greedy race from the start
        from rulka.envs.multi_action import wrap_for_blocks
        from rulka.envs.sim.env import SimTrackEnv

        races = {}
        for track in tracks or [str(cfg.environment.track)]:
            actor.reset()
            env = wrap_for_blocks(SimTrackEnv(config=cfg, track=track), cfg.environment.n_actions_per_block)
            races[track] = drive(env, lambda obs: actor.act(obs, test=True), max_seconds=120.0)
        first = next(iter(races.values()))
        return {**first, "finished": all(r["finished"] for r in races.values()),
                "return": round(sum(r["return"] for r in races.values()), 2), "tracks": races}
    env = make_env(cfg)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        actor.reset()
        done, total = False, 0.0
        while not done:
            obs, r, terminated, truncated, _ = env.step(actor.act(obs, test=True))
            total += float(r)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return {"return": round(float(np.mean(returns)), 2)}


# the Q-function is called diverged when the mean over a window of updates (between two evaluations)
# goes over one of these (the map-cycle run that diverged at ~22 min: q_mean 5 -> 119, grad_norm
# 1.6k); a mean, not a max: the first updates' gradients reach ~1k on a healthy run
DIVERGENCE = {"q_mean": 50.0, "td_loss": 10.0, "grad_norm": 1000.0}


def divergence_limits(q_limit: float | None = None) -> dict[str, float]:
    """The bounds a run's health is judged by: DIVERGENCE (the simulator's) or, with ``q_limit``
    (an environment's q_mean bound, about 1.5x its largest healthy Q: CartPole at gamma 0.99
    approaches 1 / (1 - 0.99) = 100, so 150), every bound scaled by ``q_limit / DIVERGENCE['q_mean']``.

    The td_loss and grad_norm bounds scale with the q_mean one: the quantile Huber loss (kappa 1) and
    its gradient grow linearly with the size of the TD errors, which grow with the return's scale.
    With the simulator's td_loss and grad_norm bounds kept, every healthy CartPole run counted as
    diverged (grad norms 800-1,700 at Q near 100: all 10 runs of the 2026-11-27 study)."""
    if q_limit is None:
        return dict(DIVERGENCE)
    scale = float(q_limit) / DIVERGENCE["q_mean"]
    return {name: bound * scale for name, bound in DIVERGENCE.items()}


class _Window:
    """The learner's health between two evaluations: mean and max of q_mean, td_loss, grad_norm."""

    NAMES = {"q_mean": "charts/q_mean", "td_loss": "losses/td_loss", "grad_norm": "losses/grad_norm"}

    def __init__(self, q_limit: float | None = None) -> None:
        self.values: dict[str, list[float]] = {k: [] for k in self.NAMES}
        self.limits = divergence_limits(q_limit)

    def add(self, metrics: dict[str, Any]) -> None:
        for short, name in self.NAMES.items():
            if name in metrics:
                self.values[short].append(abs(float(metrics[name])))

    def row(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in self.values.items():
            if v:
                out[f"{k}_mean"] = round(sum(v) / len(v), 3)
                out[f"{k}_max"] = round(max(v), 3)
        over = [k for k, limit in self.limits.items() if self.values[k] and sum(self.values[k]) / len(self.values[k]) > limit]
        out["diverged"] = over
        self.values = {k: [] for k in self.NAMES}
        return out


def _track_table(history: list[dict[str, Any]], tracks: list[str], scripted: dict[str, float | None]) -> dict[str, Any]:
    """Per track: the frames of the first greedy finish, the final and the best greedy race time,
    and the scripted driver's time."""
    out: dict[str, Any] = {}
    for track in tracks:
        races = [(row["frames"], row["tracks"][track]) for row in history if track in row.get("tracks", {})]
        times = [r["race_time_s"] for _, r in races if r["finished"]]
        first = next((f for f, r in races if r["finished"]), None)
        final = races[-1][1] if races else None
        ref = scripted.get(track)
        best = min(times) if times else None
        out[track] = {"first_finish_frames": first,
                      "final_s": final["race_time_s"] if final and final["finished"] else None,
                      "final_m": final["progress_m"] if final else None,
                      "best_s": best, "scripted_s": ref,
                      "best_beats_scripted": bool(best is not None and ref is not None and best < ref),
                      "final_beats_scripted": bool(final and final["finished"] and ref is not None
                                                   and final["race_time_s"] < ref)}
    return out


def _reached(result: dict[str, Any], target: str) -> bool:
    if target == "finish":
        return bool(result.get("finished"))
    return result["return"] >= float(target)


def run_seed(config: str, overrides: list[str], seed: int, frames: int, eval_every: int,
             eval_episodes: int, target: str, stop_at_target: bool = False, save: str | None = None,
             eval_at_start: bool = False, q_limit: float | None = None) -> dict[str, Any]:
    """One seed of the recipe (see the module docstring); returns its outcome and history.
    ``stop_at_target``: stop at the first evaluation that reaches ``target`` (learning tests).
    ``save``: a folder; the best evaluated weights go to ``<save>/seed<N>/best/`` and the final ones
    to ``<save>/seed<N>/weights/`` (policy files, as a run folder holds them: ``rulka eval``,
    ``bench/study/tracks.py evaluate``). ``eval_at_start``: also evaluate the weights the agent starts
    with, at 0 frames (a run from ``nn.init_from_pretrained``). ``q_limit``: the q_mean over which
    the Q-function counts as diverged (default ``DIVERGENCE``'s, the simulator's)."""
    import torch

    from rulka.agents.iqn.settings import make_agent, make_memory
    from rulka.config import load_config
    from rulka.envs.map_cycle import MapCycle
    from rulka.plugins import make_env, obs_to_arrays
    from rulka.segment import Segment
    from rulka.trainer.ratelimit import limiter_for
    from rulka.worker.buffer import EpisodeBuffer

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    cfg = load_config(config, [*overrides, f"training.seed={seed}"], env_file=None)
    if cfg.training.algorithm not in ("iqn",):
        raise SystemExit(f"bench/study/recipe.py: training.algorithm {cfg.training.algorithm!r}: replay (iqn) agents only")
    agent = make_agent(cfg, device="cpu", seed=seed)
    memory = make_memory(cfg, seed=seed)
    batch = int(cfg.training.batch_size)
    limiter = limiter_for(cfg.trainer.rate_limit, memory, batch)  # the trainer's own
    publish_every = int(cfg.trainer.publish_every_updates or 100)
    seg_steps = int(cfg.worker.segment_max_steps)
    env = make_env(cfg)
    set_env_frames = getattr(getattr(env, "unwrapped", env), "set_frames_played", None)
    actor = agent.get_actor()
    sim = cfg.environment.backend == "sim"
    tracks = _tracks(cfg) if sim else []
    if sim:
        from bench.study.tracks import scripted_time_s

        scripted = {t: scripted_time_s(t) for t in tracks}  # the reference times the trainer ranks by
    else:
        scripted = {}
    cycle = MapCycle.from_config(cfg)
    window = _Window(q_limit)
    played = updates = episode = 0
    next_eval = eval_every
    history: list[dict[str, Any]] = []
    returns: list[float] = []
    best: dict[str, Any] | None = None
    best_weights: dict[str, Any] | None = None
    first_reached: int | None = None
    t0 = time.monotonic()

    def insert(buf: EpisodeBuffer, index: int, done: bool) -> None:
        nonlocal updates, actor
        seg = Segment(run_id="recipe", worker_id="w0", episode_id=episode, seq=0, index_in_episode=index,
                      first_step=buf.first_step, policy_version=updates // publish_every,
                      arrays=buf.arrays(), episode_done=done)
        held_out = memory.held_out_transitions
        added = memory.append(seg)  # the trainer's count: trainable transitions, not the test store's
        limiter.record_insert(max(0, added - (memory.held_out_transitions - held_out)))
        while limiter.can_sample(batch, len(memory)):
            window.add(agent.train(memory.sample(batch)))
            limiter.record_sample(batch)
            updates += 1
            if updates % publish_every == 0:
                actor = agent.get_actor()

    def evaluate() -> bool:
        """One greedy evaluation of the current weights (a history row); True the first time the
        target is reached."""
        nonlocal best, best_weights, first_reached
        result = _evaluate(cfg, agent.get_actor(), eval_episodes, seed=100_000, tracks=tracks)
        row = {"frames": played, "updates": updates, "minutes": round((time.monotonic() - t0) / 60, 2),
               "exploring_return": round(sum(returns) / len(returns), 2) if returns else None, **result,
               **window.row()}
        history.append(row)
        print(json.dumps({"seed": seed, **row}), file=sys.stderr, flush=True)
        if best is None or _rank(row, scripted) < _rank(best, scripted):
            best = row
            if save is not None:
                best_weights = {k: v.detach().clone() for k, v in agent.actor_weights().items()}
        if first_reached is None and _reached(result, target):
            first_reached = played
            return True
        return False

    if eval_at_start and evaluate() and stop_at_target:
        frames = 0  # reached before any frame: nothing left to run
    while played < frames:
        if callable(set_env_frames):
            set_env_frames(played)
        entry = cycle.next() if cycle is not None else None
        greedy = entry is not None and not entry.is_exploration  # the cycle's greedy entries, as a worker drives them
        options = MapCycle.reset_options(entry) if entry is not None else None
        obs, info = env.reset(seed=seed * 1_000_003 + episode, options=options)
        actor.reset()
        buf = EpisodeBuffer()
        buf.start(obs_to_arrays(obs, info), 0)
        index, step, ret = 0, 0, 0.0
        while True:
            action, extras = actor.act_with_info(obs, test=greedy)
            obs, reward, terminated, truncated, info = env.step(action)
            step += 1
            ret += float(reward)
            done = bool(terminated or truncated)
            buf.add(action, extras, float(reward), bool(terminated), bool(truncated), obs_to_arrays(obs, info))
            if done or len(buf) >= seg_steps:
                insert(buf, index, done)
                index += 1
                if done:
                    break
                buf.start(buf.obs[-1], step)
        played += step
        episode += 1
        returns = (returns + [ret])[-20:]
        if played >= next_eval or played >= frames:
            next_eval += eval_every
            if evaluate() and stop_at_target:
                break
    if save is not None:
        from rulka.envs.sim.policy import POLICY_FILE, save_policy

        spec = {**agent.actor_spec(), "run_config_json": json.dumps(cfg.to_dict(), default=str)}
        for sub, weights in (("best", best_weights), ("weights", agent.actor_weights())):
            if weights is not None:
                (Path(save) / f"seed{seed}" / sub).mkdir(parents=True, exist_ok=True)
                save_policy(Path(save) / f"seed{seed}" / sub / POLICY_FILE, weights, spec)
    diverged = [{"frames": row["frames"], "over": row["diverged"]} for row in history if row.get("diverged")]
    out = {"seed": seed, "frames": played, "updates": updates, "minutes": round((time.monotonic() - t0) / 60, 2),
           "samples_per_insert": round(limiter.achieved(), 2), "reached_at_frames": first_reached,
           "diverged": diverged[0] if diverged else None, "divergence_thresholds": window.limits,
           "best": best, "last": history[-1] if history else None}
    if sim:
        out["tracks"] = _track_table(history, tracks, scripted)
    out["history"] = history
    return out


def _rank(row: dict[str, Any], scripted: dict[str, float | None] | None = None) -> tuple[Any, ...]:
    """Sort key of an evaluation, lower is better: a gym env by its mean return; the simulator as
    the trainer ranks its best policy (rulka.trainer.best.score: maps finished, then maps faster
    than their reference, the scripted driver's time as the simulator reports it, then total time)."""
    if "tracks" not in row:
        return (-row["return"],)
    from rulka.trainer.best import MapResult, score

    def ref(track: str) -> float | None:
        t = (scripted or {}).get(track)
        return None if t is None else t * 1000

    return score({t: MapResult(r["finished"], r["race_time_s"] * 1000 if r["finished"] else None, r["progress_m"],
                               ref(t)) for t, r in row["tracks"].items()})


def _seed_line(r: dict[str, Any]) -> str:
    """One seed in a line: when the target was reached, the best evaluation, per simulator track the
    first greedy finish and the final and best race times, and whether the Q-function diverged."""
    line = f"seed {r['seed']}: " + (f"at {r['reached_at_frames']}" if r["reached_at_frames"] is not None else "no")
    if "tracks" in r:
        parts = [f"{t} first {v['first_finish_frames'] or '-'}, final {v['final_s'] or '-'} s, best {v['best_s'] or '-'} s"
                 f" (scripted {v['scripted_s']})" for t, v in r["tracks"].items()]
        line += " [" + "; ".join(parts) + "]"
    else:
        line += f" (best {r['best']['return'] if r['best'] else '-'}, final {r['last']['return'] if r['last'] else '-'})"
    if r.get("diverged"):
        line += f" DIVERGED at {r['diverged']['frames']} ({', '.join(r['diverged']['over'])})"
    return line


def record(out: dict[str, Any], note: str, command: str) -> None:
    """Append the study's summary row to ``bench/history/recipe_studies.json``."""
    path = REPO / "bench" / "history" / "recipe_studies.json"
    rows = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
    per_seed = "; ".join(_seed_line(r) for r in out["runs"])
    rows.append({"config": Path(out["config"]).name, "overrides": " ".join(out["overrides"]) or "-",
                 "target": out["target"], "reached": f"{out['summary']['reached']}/{out['summary']['seeds']}",
                 "reached_at_frames": per_seed, "frames": out["frames"], "minutes": out["summary"]["minutes"],
                 "date": out["date"], "machine": f"{out['machine']['cpus']} cpus, {out['machine']['platform']}",
                 "command": command, "note": note})
    path.write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(REPO / "configs" / "cartpole_iqn.yaml"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--frames", type=int, default=200_000)
    p.add_argument("--eval-every", type=int, default=10_000, help="frames between greedy evaluations")
    p.add_argument("--eval-episodes", type=int, default=10, help="episodes per evaluation (gym envs)")
    p.add_argument("--target", default="475", help="a mean greedy return, or 'finish' (simulator)")
    p.add_argument("--parallel", type=int, default=os.cpu_count() or 1)
    p.add_argument("--q-limit", type=float, default=None,
                   help=f"the q_mean over which a seed counts as diverged (default {DIVERGENCE['q_mean']:g}, sized "
                        "for the simulator; a gym env with returns of hundreds needs more: CartPole at gamma 0.99, "
                        "150); the td_loss and grad_norm bounds scale with it")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    p.add_argument("--save", metavar="DIR", help="write each seed's best and final policy under DIR/seed<N>/ "
                   "(best/, weights/: bench/study/tracks.py evaluate DIR/seed<N> drives them on other tracks)")
    p.add_argument("--eval-at-start", action="store_true",
                   help="also evaluate the starting weights at 0 frames (a run from nn.init_from_pretrained)")
    p.add_argument("--record", metavar="NOTE", help="append a summary row to bench/history/recipe_studies.json "
                   "(BENCHMARKS.md after `python -m bench --rewrite`), with this note")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    jobs = [(args.config, args.set, s, args.frames, args.eval_every, args.eval_episodes, args.target, False, args.save,
             args.eval_at_start, args.q_limit) for s in args.seeds]
    with ProcessPoolExecutor(max_workers=max(1, min(args.parallel, len(jobs)))) as pool:
        runs = list(pool.map(run_seed, *zip(*jobs, strict=True)))
    reached = [r for r in runs if r["reached_at_frames"] is not None]
    out = {
        "bench": "recipe", "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "config": args.config, "overrides": args.set, "frames": args.frames, "target": args.target,
        "summary": {"seeds": len(runs), "reached": len(reached),
                    "reached_at_frames": sorted(r["reached_at_frames"] for r in reached),
                    "minutes": round((time.monotonic() - t0) / 60, 1)},
        "runs": runs,
    }
    text = json.dumps(out, indent=1)
    if args.record is not None:
        record(out, args.record, " ".join(["python -m bench.study recipe", *(argv if argv is not None else sys.argv[1:])]))
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
