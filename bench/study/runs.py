"""Benchmark: a recipe judged the way a user meets it: several `rulka run`s of one config, per arm.

A distributed run is not repeatable (two workers' interleaving, thread timing), so a "seed" here is
one more run of the same command. Each run is ``rulka run CONFIG --workers W [--minutes M]
[--frames F] --set ...`` in its own folder; then, per run:

- totals from its ``metrics.jsonl``: frames, updates, minutes; the exploring workers' first finish
  on the run's track (frames, minutes);
- the learner's health: the worst mean over windows of ``--window`` metric records of ``q_mean``,
  ``td_loss`` and ``grad_norm`` (absolute values), and which of them went over ``bench/study/recipe.py``'s
  divergence thresholds;
- the in-run greedy races of the versions in the run's last fifth (``best/candidates.jsonl``): how
  many beat the scripted driver, of which the final weights are one draw; with ``--at-minutes M``
  the same for the last fifth of the frames the run had made by minute M (where a run 4x longer
  stood when the README's run would have stopped), and whether the final weights race no slower;
- the greedy outcome of the run's best policy (``best/``, what ``rulka eval RUN`` drives) and of its
  final weights (``rulka eval RUN --final``), and of its averaged weights when it kept them
  (``rulka eval RUN --average``, ``trainer.average_policy_frames``) on the five bundled tracks (``bench/study/tracks.py``'s
  races), each against the scripted driver; for a map-cycle config (``map_cycle.entries``) every
  bundled track counts and ``--gen-random N`` adds N generated tracks whose seeds are drawn when the
  study starts (the same N for every run, kept in the study): tracks the run never saw; for a Gymnasium config (``environment.backend: gym``),
  the mean return of ``--eval-episodes`` greedy episodes of each through ``rulka eval --json``,
  against ``--target-return``.

Run i of every arm sets ``training.seed=i`` (unless the arm sets it; ``--first-seed K`` starts at K,
to extend a study; ``--first-seed draw`` draws K when the study starts and records ``seeds_drawn``,
what issue 68's "fresh seeds" rows ask for): a seed table, not one seed run again. Each run records
the machine's 1-minute load average while it ran (``machine_load_1m``); ``--wait-idle LOAD`` holds
each run of a minute-budgeted study until the machine has been at most that busy for 2 minutes. ``--parallel N`` runs N at a time, for frame
budgets only (a frame budget learns the same whatever the machine's speed: the rate limiter holds
the samples per insert). BENCHMARKS.md's ``readme_frames_budget`` study ran three side by side (its
table gives each run's frames and minutes); how much sooner N side by side finish than N one after
another has not been measured in one run.

::

    python -m bench.study runs --config configs/sim_iqn.yaml --runs 3 --minutes 20
    python -m bench.study runs --config configs/sim_grpo.yaml --runs 2 --frames 800000 \\
        --arm reinforce:grpo.grpo_objective=reinforce --arm clipped:grpo.grpo_objective=clipped

    python -m bench.study runs --config configs/sim_iqn_cycle.yaml --runs 3 --minutes 30 --gen-random 10 --name map_cycle_runs
    python -m bench.study runs --config configs/cartpole_iqn.yaml --runs 10 --frames 200000 --target-return 475 --q-limit 150
    python -m bench.study runs --config configs/sim_iqn.yaml --runs 3 --frames 2000000 --parallel 3
    python -m bench.study runs --config configs/sim_iqn.yaml --runs 1 --minutes 80 --at-minutes 20 --name sim_iqn_long
    python -m bench.study runs --config configs/sim_iqn.yaml --runs 5 --first-seed draw --minutes 20 \
        --name readme_main_command --wait-idle 0.5

``--record NOTE`` appends the study to ``bench/history/run_studies.json`` (BENCHMARKS.md after ``python -m
bench --rewrite``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[2]
RUN_STUDIES = Path(__file__).resolve().parents[1] / "history" / "run_studies.json"
HEALTH = {"q_mean": "charts/q_mean", "td_loss": "losses/td_loss", "grad_norm": "losses/grad_norm"}


def parse_arm(text: str) -> tuple[str, list[str]]:
    """``NAME:key=value,key=value`` (or ``NAME`` alone: the config as it is) -> (name, overrides).
    Commas inside brackets belong to the value (a schedule: ``training.lr_schedule=[[0,1e-3],[9,1e-4]]``)."""
    name, _, rest = text.partition(":")
    if not name:
        raise argparse.ArgumentTypeError(f"arm {text!r}: give it a name, NAME:key=value,...")
    overrides, depth, start = [], 0, 0
    for i, ch in enumerate(rest + ","):
        depth += (ch in "[{") - (ch in "]}")
        if ch == "," and depth == 0:
            if rest[start:i]:
                overrides.append(rest[start:i])
            start = i + 1
    for kv in overrides:
        if "=" not in kv:
            raise argparse.ArgumentTypeError(f"arm {text!r}: {kv!r} is not key=value")
    return name, overrides


def health(records: list[dict[str, Any]], window: int, q_limit: float | None = None) -> dict[str, Any]:
    """Worst window mean of each health metric (absolute values) and the ones over the thresholds
    (recipe.py's ``divergence_limits``: sized for the simulator's rewards; ``q_limit`` is another
    environment's q_mean bound, and the other bounds scale with it: CartPole's Q reaches
    1 / (1 - 0.99) = 100 when it balances)."""
    from bench.study.recipe import divergence_limits

    limits = divergence_limits(q_limit)

    out: dict[str, Any] = {}
    over = []
    for short, name in HEALTH.items():
        values = [abs(float(r["metrics"][name])) for r in records if name in r["metrics"]]
        if not values:
            continue
        means = [sum(values[i:i + window]) / len(values[i:i + window]) for i in range(0, len(values), window)]
        worst = max(means)
        out[f"{short}_worst_window_mean"] = round(worst, 3)
        if worst > limits[short]:
            over.append(short)
    out["diverged"] = over
    return out


def summarise_metrics(run_dir: Path, window: int, q_limit: float | None = None) -> dict[str, Any]:
    """Totals, first exploring finish per track and the learner's health from ``metrics.jsonl``."""
    from bench.study.tracks import first_finishes
    from rulka.telemetry.logger import read_metrics

    records = list(read_metrics(run_dir)) if (run_dir / "metrics.jsonl").is_file() else []
    if not records:
        return {"frames": 0, "updates": 0, "minutes": 0.0, "first_finish": {}, "health": {"diverged": []}}
    last = records[-1]
    return {
        "frames": int(last["step"]),
        "updates": int(max((r["metrics"].get("charts/batches_trained", 0) for r in records), default=0)),
        "minutes": round((last.get("wall_time", 0.0) - records[0].get("wall_time", 0.0)) / 60, 1),
        "first_finish": first_finishes(run_dir),
        "health": health(records, window, q_limit),
    }


def _candidate_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The in-run greedy races of ``best/candidates.jsonl``, one row per evaluated version of the
    learner's weights (not the candidates of the run's average inside its cooldown: ``"weights":
    "average"``, rulka.trainer.best)."""
    from rulka.trainer.best import BEST_DIR, CANDIDATES_LOG, TRAINED

    path = run_dir / BEST_DIR / CANDIDATES_LOG
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut off by a kill
        if isinstance(row, dict) and row.get("weights", TRAINED) == TRAINED:
            rows.append(row)
    return rows


def _window_races(rows: list[dict[str, Any]], from_frames: int, to_frames: int | None = None) -> dict[str, Any]:
    """Per track, the races of the versions from ``from_frames`` (to ``to_frames``): races, finished,
    faster than the track's reference, median race time (a race not finished counts as slower than
    any finish)."""
    window = [r for r in rows if int(r.get("frames", 0)) >= from_frames
              and (to_frames is None or int(r.get("frames", 0)) <= to_frames)]
    out: dict[str, Any] = {}
    for track in sorted({t for r in window for t in r.get("maps", {})}):
        races = [r["maps"][track] for r in window if track in r.get("maps", {})]
        times = sorted(m["race_time_ms"] / 1000 if m.get("finished") and m.get("race_time_ms") is not None
                       else float("inf") for m in races)
        ref = next((m.get("reference_time_ms") for m in races if m.get("reference_time_ms")), None)
        median = times[(len(times) - 1) // 2] if times else float("inf")  # the lower median of finishes
        out[track] = {"races": len(races), "finished": sum(t != float("inf") for t in times),
                      "beats_reference": sum(ref is not None and t * 1000 < ref for t in times),
                      "median_s": round(median, 2) if median != float("inf") else None,
                      "from_frames": from_frames, **({"to_frames": to_frames} if to_frames is not None else {})}
    return out


def late_candidates(run_dir: Path, late_fraction: float = 0.2) -> dict[str, Any]:
    """The in-run greedy races (``best/candidates.jsonl``, one per ``trainer.best_policy_every_frames``)
    of the versions in the last ``late_fraction`` of the run's frames (the shipped cooldown's fifth),
    per track: races, finished, faster than the track's reference (the scripted driver), median race
    time (a race not finished counts as slower than any finish). A run's final weights are one draw
    of these, so their share under the reference says how often the end weights beat it, with ~20
    races per run where the final weights give one."""
    rows = _candidate_rows(run_dir)
    if not rows:
        return {}
    return _window_races(rows, math.ceil((1.0 - late_fraction) * max(int(r.get("frames", 0)) for r in rows)))


def races_at_minutes(run_dir: Path, minutes: float, late_fraction: float = 0.2) -> dict[str, Any]:
    """Where a longer run stood at ``minutes`` of its wall time (issue 32: "run 4x longer, the final
    policy no slower than at 20 minutes"): the frames it had made by then (``metrics.jsonl``) and, per
    track, the in-run greedy races of the versions in the last ``late_fraction`` of those frames
    (``late_candidates``' window, as if the run had stopped there). Empty when the run did not last
    that long or kept no candidates."""
    from rulka.telemetry.logger import read_metrics

    rows = _candidate_rows(run_dir)
    records = list(read_metrics(run_dir)) if (run_dir / "metrics.jsonl").is_file() else []
    if not rows or not records or records[-1].get("wall_time", 0.0) - records[0].get("wall_time", 0.0) < minutes * 60:
        return {}
    until = records[0].get("wall_time", 0.0) + minutes * 60
    frames = max(int(r["step"]) for r in records if r.get("wall_time", 0.0) <= until)
    tracks = _window_races(rows, math.ceil((1.0 - late_fraction) * frames), frames)
    return {"minutes": minutes, "frames": frames, "tracks": tracks} if tracks else {}


def greedy(run_dir: Path, policy: str, max_seconds: float, gen_seeds: list[int] | None = None,
           perturbed: int = 0) -> dict[str, Any]:
    """Per bundled track (and ``gen:<seed>`` for each of ``gen_seeds``): finished, race time (s) or
    metres, scripted time, beats scripted; with ``gen_seeds``, the counts (``cycle_counts``) too;
    with ``perturbed`` > 0, on the tracks the run trained on, the median of that many races from
    perturbed starts (``learning.perturbed_races``: ``perturbed_s``, ``perturbed_beats_scripted``)."""
    from bench.study.tracks import evaluate

    result = evaluate(run_dir, list(gen_seeds or []), max_seconds, 1, policy, perturbed=perturbed)
    out = {}
    for row in result["tracks"]:
        g = row["greedy"]
        out[row["track"]] = {"trained_on": row["trained_on"], "finished": bool(g["finished"]),
                             "race_time_s": g["race_time_s"] if g["finished"] else None,
                             "progress_m": g.get("progress_m"), "scripted_s": row["scripted_s"],
                             "beats_scripted": row["beats_scripted"]}
        pert = row.get("perturbed")
        if pert:
            out[row["track"]].update({
                "perturbed_s": pert["race_time_s"] if pert["finished"] else None,
                "perturbed_beats_scripted": pert["beats_scripted"],
                "perturbed_times_s": pert["times_s"], "perturbed_start_noise": pert["start_noise"]})
    res = {"policy": result["policy"], "best_policy": result.get("best_policy"), "tracks": out}
    return {**res, "counts": cycle_counts(res)} if gen_seeds is not None else res


def cycle_counts(result: dict[str, Any]) -> dict[str, int]:
    """Of one policy's races: bundled tracks finished and beaten (faster than the scripted driver),
    generated tracks (``gen:<seed>``) finished."""
    tracks = result.get("tracks", {})
    bundled = [t for name, t in tracks.items() if not name.startswith("gen:")]
    gen = [t for name, t in tracks.items() if name.startswith("gen:")]
    return {"bundled": len(bundled), "bundled_finished": sum(bool(t.get("finished")) for t in bundled),
            "bundled_beats_scripted": sum(bool(t.get("beats_scripted")) for t in bundled),
            "gen": len(gen), "gen_finished": sum(bool(t.get("finished")) for t in gen)}


def greedy_gym(run_dir: Path, policy: str, episodes: int, target: float | None) -> dict[str, Any]:
    """Mean greedy return of the run's best policy or final weights (``rulka eval --json``)."""
    # trained: the weights trained last of a run that ended on its average (training.lr_cooldown_end_on_average)
    path = run_dir / "trained" / "policy.safetensors" if policy == "trained" else run_dir
    cmd = [sys.executable, "-m", "rulka.cli", "eval", str(path), "--episodes", str(episodes), "--json"]
    if policy in ("final", "average"):
        cmd.append(f"--{policy}")
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        return {"policy": policy, "error": proc.stderr.strip()[-500:]}
    overall = json.loads(proc.stdout)["overall"]
    mean = overall["return_mean"]
    return {"policy": policy, "episodes": overall["episodes"], "return_mean": round(mean, 2),
            "return_std": round(overall["return_std"], 2),
            "reaches_target": bool(target is not None and mean >= target)}


def with_seed(overrides: list[str], i: int) -> list[str]:
    """The arm's overrides, plus ``training.seed=i`` unless the arm sets the seed itself."""
    return overrides if any(kv.startswith("training.seed=") for kv in overrides) else [*overrides, f"training.seed={i}"]


# the greedy races run in this process and seed torch's global generator (learning.evaluate): runs
# side by side (--parallel) race one at a time so that a policy drives the races it would alone
_EVAL_LOCK = threading.Lock()


class LoadSampler:
    """The machine's 1-minute load average every ``every_s`` seconds while a run lasts (``with``): a
    minute-budgeted run measures the machine it shared; the study records what it shared it with.
    None where the platform has no load average."""

    def __init__(self, every_s: float = 20.0) -> None:
        self.every_s, self.samples = every_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="load-sampler", daemon=True)

    def _loop(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> LoadSampler:
        if hasattr(os, "getloadavg"):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def summary(self) -> dict[str, Any] | None:
        if not self.samples:
            return None
        return {"mean": round(sum(self.samples) / len(self.samples), 2), "max": round(max(self.samples), 2),
                "samples": len(self.samples)}


def wait_idle(bound: float, calm_s: float = 120.0, check_s: float = 10.0, limit_s: float = 12 * 3600.0) -> float:
    """Wait until the 1-minute load average has stayed at most ``bound`` for ``calm_s`` seconds (a
    minute-budgeted run started beside other work would measure a slower machine); the seconds
    waited. Gives up waiting after ``limit_s`` (the run then starts, and its load shows it)."""
    if not hasattr(os, "getloadavg"):
        return 0.0
    t0 = calm_since = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        now = time.monotonic()
        if os.getloadavg()[0] > bound:
            calm_since = now
        elif now - calm_since >= calm_s:
            break
        time.sleep(check_s)
    return time.monotonic() - t0


def one_run(config: Path, overrides: list[str], run_dir: Path, workers: int, minutes: float | None,
            frames: int | None, window: int, max_seconds: float, gym: dict[str, Any] | None = None,
            q_limit: float | None = None, gen_seeds: list[int] | None = None, perturbed: int = 0,
            at_minutes: float | None = None) -> dict[str, Any]:
    """``rulka run`` once, then its summary (``rc`` and the stderr tail when it failed)."""
    cmd = [sys.executable, "-m", "rulka.cli", "run", str(config), "--workers", str(workers),
           "--run-dir", str(run_dir), "--set", "logging.wandb.enabled=false", "--set", "logging.progress=never"]
    if minutes is not None:
        cmd += ["--minutes", str(minutes)]
    if frames is not None:
        cmd += ["--frames", str(frames)]
    for kv in overrides:
        cmd += ["--set", kv]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    out: dict[str, Any] = {"run_dir": str(run_dir), "rc": proc.returncode,
                           "wall_minutes": round((time.monotonic() - t0) / 60, 1)}
    if proc.returncode != 0:
        out["stderr_tail"] = proc.stderr[-2000:]
    out.update(summarise_metrics(run_dir, window, q_limit))
    late = late_candidates(run_dir)
    if late:
        out["late_candidates"] = late
    at = races_at_minutes(run_dir, at_minutes) if at_minutes else {}
    if at:
        out["at_minutes"] = at
    with _EVAL_LOCK:
        out.update(_race_policies(run_dir, max_seconds, gym, gen_seeds, perturbed))
    return out


def _race_policies(run_dir: Path, max_seconds: float, gym: dict[str, Any] | None,
                   gen_seeds: list[int] | None, perturbed: int = 0) -> dict[str, Any]:
    """The greedy races of a finished run's policies: best/, the final weights, and average/ and
    trained/ where the run kept them."""
    out: dict[str, Any] = {}
    if (run_dir / "weights").exists() or (run_dir / "best").exists():
        if gym is not None:  # {"episodes": E, "target": T}
            out["best"] = greedy_gym(run_dir, "best", gym["episodes"], gym["target"])
            out["final"] = greedy_gym(run_dir, "final", gym["episodes"], gym["target"])
            for kept in ("average", "trained"):
                if (run_dir / kept).exists():
                    out[kept] = greedy_gym(run_dir, kept, gym["episodes"], gym["target"])
        else:
            out["best"] = greedy(run_dir, "best", max_seconds, gen_seeds, perturbed)
            out["final"] = greedy(run_dir, "final", max_seconds, gen_seeds, perturbed)
            for kept in ("average", "trained"):  # trained: the weights trained last, when the run ended on the average
                if (run_dir / kept).exists():
                    out[kept] = greedy(run_dir, kept, max_seconds, gen_seeds, perturbed)
    return out


def arm_summary(runs: list[dict[str, Any]], track: str | None, cycle: bool = False) -> dict[str, Any]:
    """Per arm on the run's track: how many runs' best / final policies finish and beat the scripted
    driver; for a Gymnasium config (``track`` None): how many reach the target return; for a
    map-cycle study (``cycle``): per policy and run, the bundled tracks beaten and the generated
    tracks finished (``cycle_counts``)."""
    if cycle:
        def per_run(which: str, key: str) -> list[int | None]:
            return [(r.get(which) or {}).get("counts", {}).get(key) if which in r else None for r in runs]

        out: dict[str, Any] = {"map_cycle": True, "runs": len(runs),
                               "bundled": max((c for c in per_run("best", "bundled") if c), default=0),
                               "gen": max((c for c in per_run("best", "gen") if c), default=0)}
        for which in ("best", "final", *(w for w in ("average", "trained") if any(w in r for r in runs))):
            out[f"{which}_beats_scripted"] = per_run(which, "bundled_beats_scripted")
            out[f"{which}_finished"] = per_run(which, "bundled_finished")
            out[f"{which}_gen_finished"] = per_run(which, "gen_finished")
        out["diverged"] = sum(bool(r.get("health", {}).get("diverged")) for r in runs)
        return out
    if track is None:
        return {"runs": len(runs),
                "best_reaches_target": sum(bool(r.get("best", {}).get("reaches_target")) for r in runs),
                "final_reaches_target": sum(bool(r.get("final", {}).get("reaches_target")) for r in runs),
                **{f"{w}_reaches_target": sum(bool(r.get(w, {}).get("reaches_target")) for r in runs)
                   for w in ("average", "trained") if any(w in r for r in runs)},
                "diverged": sum(bool(r.get("health", {}).get("diverged")) for r in runs)}
    def count(which: str, key: str) -> int:
        return sum(bool(r.get(which, {}).get("tracks", {}).get(track, {}).get(key)) for r in runs)

    late = [r.get("late_candidates", {}).get(track) for r in runs]
    late = [x for x in late if x]
    # a longer run against where it stood at --at-minutes: the final weights' race no slower than the
    # median of the in-run races then (a race not finished is slower than any finish)
    at = [(r, r["at_minutes"]["tracks"][track]) for r in runs if track in r.get("at_minutes", {}).get("tracks", {})]
    kept = [w for w in ("average", "trained") if any(w in r for r in runs)]  # average/, trained/ where runs kept them
    perturbed = [w for w in ("best", "final", *kept)
                 if any("perturbed_s" in r.get(w, {}).get("tracks", {}).get(track, {}) for r in runs)]
    return {"track": track, "runs": len(runs),
            "best_finished": count("best", "finished"), "best_beats_scripted": count("best", "beats_scripted"),
            "final_finished": count("final", "finished"), "final_beats_scripted": count("final", "beats_scripted"),
            **{f"{w}_{key}": count(w, key) for w in kept for key in ("finished", "beats_scripted")},
            **({"late_races": sum(x["races"] for x in late),
                "late_beats_scripted": sum(x["beats_reference"] for x in late)} if late else {}),
            **{f"{w}_perturbed_beats_scripted": count(w, "perturbed_beats_scripted") for w in perturbed},
            **({"at_minutes": at[0][0]["at_minutes"]["minutes"], "at_minutes_runs": len(at),
                "final_no_slower_than_at": sum(_no_slower(r.get("final", {}).get("tracks", {}).get(track), m)
                                               for r, m in at)} if at else {}),
            "diverged": sum(bool(r.get("health", {}).get("diverged")) for r in runs)}


def _no_slower(outcome: dict[str, Any] | None, then: dict[str, Any]) -> bool:
    """Whether a policy's greedy race (``greedy``'s per-track outcome) is no slower than ``then``'s
    median in-run race (``_window_races``); a race not finished is slower than any finish."""
    if not outcome or not outcome.get("finished") or outcome.get("race_time_s") is None:
        return False
    return then.get("median_s") is None or float(outcome["race_time_s"]) <= float(then["median_s"])


def rejudge_health(study: dict[str, Any], q_limit: float | None) -> dict[str, Any]:
    """``study`` with every run's health flags judged anew by ``divergence_limits(q_limit)`` from the
    worst window means it recorded (the flag is exactly "worst window mean over the bound", so this is
    the judgement the run would have had), each arm's ``diverged`` count redone and the bounds kept
    in ``health_limits``. A run that recorded no worst mean of a metric keeps no flag for it."""
    from bench.study.recipe import divergence_limits

    limits = divergence_limits(q_limit)
    out = {**study, "health_limits": limits, "arms": []}
    for arm in study.get("arms", []):
        runs = []
        for run in arm.get("runs", []):
            h = dict(run.get("health") or {})
            h["diverged"] = [name for name, bound in limits.items()
                             if isinstance(h.get(f"{name}_worst_window_mean"), int | float)
                             and h[f"{name}_worst_window_mean"] > bound]
            runs.append({**run, "health": h})
        summary = {**(arm.get("summary") or {}), "diverged": sum(bool(r["health"]["diverged"]) for r in runs)}
        out["arms"].append({**arm, "runs": runs, "summary": summary})
    return out


def rejudge_main(argv: list[str] | None = None) -> None:
    """``python -m bench.study health --name NAME [--date DATE] [--q-limit Q] [--write]``: the recorded
    study's divergence flags judged anew (``rejudge_health``); prints each run's flags as JSON lines
    and, with ``--write``, replaces the study in ``bench/history/run_studies.json``."""
    p = argparse.ArgumentParser(description=rejudge_main.__doc__.splitlines()[0])
    p.add_argument("--name", required=True, help="the study's name (bench/study/runs.py --name)")
    p.add_argument("--date", help="the study's date as recorded (default: the latest study of that name)")
    p.add_argument("--q-limit", type=float, default=None,
                   help="the environment's q_mean bound (CartPole at gamma 0.99: 150); the other bounds scale with it")
    p.add_argument("--write", action="store_true", help="replace the study in the history file")
    p.add_argument("--path", type=Path, default=RUN_STUDIES)
    args = p.parse_args(argv)
    try:
        data = json.loads(args.path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"bench.study health: cannot read {args.path}: {e}") from None
    studies = data.get("studies", []) if isinstance(data, dict) else []
    found = [i for i, s in enumerate(studies) if isinstance(s, dict) and s.get("name") == args.name
             and (args.date is None or s.get("date") == args.date)]
    if not found:
        raise SystemExit(f"bench.study health: no study {args.name!r}" + (f" dated {args.date!r}" if args.date else ""))
    i = max(found, key=lambda k: str(studies[k].get("date", "")))
    judged = rejudge_health(studies[i], args.q_limit)
    for arm in judged["arms"]:
        for run in arm["runs"]:
            print(json.dumps({"arm": arm.get("arm"), "seed": run.get("seed"), **run["health"]}))
        print(json.dumps({"arm": arm.get("arm"), "diverged": arm["summary"]["diverged"],
                          "runs": len(arm["runs"]), "limits": judged["health_limits"]}))
    if args.write:
        studies[i] = judged
        args.path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def record(study: dict[str, Any], path: Path = RUN_STUDIES) -> None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {"studies": []}
    data.setdefault("studies", []).append(study)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _first_seed(text: str) -> int | str:
    if text == "draw":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"an integer or 'draw', got {text!r}") from None


def draw_first_seed() -> int:
    """A first seed nobody chose: 1,000 to 1,000,999, from the operating system's randomness."""
    import secrets

    return 1000 + secrets.randbelow(1_000_000)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--runs", type=int, default=3, help="runs per arm")
    p.add_argument("--first-seed", type=_first_seed, default=0,
                   help="run i sets training.seed=i from this one (to extend a study); 'draw': drawn now with "
                        "secrets and recorded as such (seeds_drawn: issue 68's fresh seeds)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--minutes", type=float, default=None)
    p.add_argument("--frames", type=int, default=None)
    p.add_argument("--arm", type=parse_arm, action="append", default=[],
                   help="NAME:key=value,... (repeatable); none: the config as it is")
    p.add_argument("--out-dir", type=Path, default=Path("runs/seeds"))
    p.add_argument("--window", type=int, default=20, help="metric records per health window")
    p.add_argument("--max-seconds", type=float, default=120.0)
    p.add_argument("--record", metavar="NOTE", help="append the study to bench/history/run_studies.json")
    p.add_argument("--name", help="the study's name in the table (default: the config's stem)")
    p.add_argument("--target-return", type=float, default=None,
                   help="Gymnasium configs: the greedy mean return a policy must reach (CartPole: 475)")
    p.add_argument("--eval-episodes", type=int, default=20, help="Gymnasium configs: greedy episodes per policy")
    p.add_argument("--gen-random", type=int, default=0, metavar="N",
                   help="map-cycle configs: also race N generated tracks, their seeds drawn now (tracks no run saw)")
    p.add_argument("--gen-seeds", type=int, nargs="*", default=[], metavar="SEED",
                   help="map-cycle configs: generated tracks to race by seed (to extend a study with the tracks it drew)")
    p.add_argument("--parallel", type=int, default=1, metavar="N",
                   help="runs side by side (frame budgets only: a shared machine gives each run fewer frames per "
                        "minute, so a minute budget would measure a slower machine)")
    p.add_argument("--perturbed-races", type=int, default=5, metavar="K",
                   help="simulator configs: also race each policy K times from starts moved up to 0.3 m and 0.3 degrees "
                        "on the tracks it trained on, and report the median (a policy's level, not one draw; 0: off)")
    p.add_argument("--at-minutes", type=float, default=None, metavar="M",
                   help="simulator configs, a run longer than M minutes: also report where it stood at M minutes "
                        "(the in-run greedy races of the last fifth of its frames by then) and whether its final "
                        "weights race no slower (issue 32: run 4x longer, final no slower than at 20 minutes)")
    p.add_argument("--q-limit", type=float, default=None,
                   help="the q_mean over which a run counts as diverged (default recipe.py's, sized for the simulator); "
                        "td_loss's and grad_norm's bounds scale with it (CartPole at gamma 0.99: 150)")
    p.add_argument("--wait-idle", type=float, default=None, metavar="LOAD",
                   help="before each run, wait until the 1-minute load average has stayed at most LOAD for 2 "
                        "minutes (a minute-budgeted study started beside other work; each run records its load)")
    args = p.parse_args(argv)
    drawn = args.first_seed == "draw"
    if drawn:
        args.first_seed = draw_first_seed()
        print(f"first seed drawn: {args.first_seed}", flush=True)
    if args.minutes is None and args.frames is None:
        p.error("give --minutes and/or --frames (a run's budget)")
    if args.at_minutes is not None and (args.minutes is None or args.at_minutes >= args.minutes):
        p.error("--at-minutes M: for a run with a longer --minutes budget")
    if args.parallel < 1:
        p.error("--parallel: at least 1")
    if args.parallel > 1 and (args.minutes is not None or args.frames is None):
        p.error("--parallel N > 1 needs --frames and no --minutes: runs side by side get fewer frames per minute, "
                "so a minute budget would shorten them (and time their learning-rate cooldown)")
    from rulka.config import load_config

    cfg = load_config(args.config)
    gym = None
    if cfg.environment.backend == "gym":
        if args.target_return is None:
            p.error(f"{args.config} is a Gymnasium config: give --target-return (the greedy mean return to reach)")
        gym = {"episodes": args.eval_episodes, "target": args.target_return}
    elif cfg.environment.backend != "sim":
        p.error(f"{args.config}: simulator or Gymnasium configs only (backend {cfg.environment.backend!r})")
    track = None if gym else str(cfg.environment.track)
    cycle = bool(cfg.map_cycle.entries) and gym is None
    if (args.gen_random or args.gen_seeds) and not cycle:
        p.error("--gen-random / --gen-seeds: map-cycle configs only (map_cycle.entries)")
    from bench.study.recipe import divergence_limits
    from bench.study.tracks import draw_gen_seeds

    gen_seeds = [*args.gen_seeds, *draw_gen_seeds(args.gen_random)] if cycle else None
    arms = args.arm or [("as_shipped", [])]
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    args.out_dir.mkdir(parents=True, exist_ok=True)  # study-<stamp>.json there keeps the runs done so far
    study: dict[str, Any] = {
        "name": args.name or args.config.stem, "config": str(args.config),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cpus, {platform.platform()}",
        "budget": {"minutes": args.minutes, "frames": args.frames, "workers": args.workers},
        **({"target_return": args.target_return, "eval_episodes": args.eval_episodes} if gym else {}),
        **({"map_cycle": True, "gen_seeds": gen_seeds} if cycle else {}),
        "health_limits": divergence_limits(args.q_limit),  # what "diverged" was judged by
        **({"seeds_drawn": f"first seed {args.first_seed} drawn with secrets when the study started"} if drawn else {}),
        "command": "python -m bench.study runs " + " ".join(argv if argv is not None else sys.argv[1:]),
        "arms": [],
    }
    by_arm: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in arms}
    done = threading.Lock()  # --parallel: runs finish in any order; each writes the study so far

    def run_one(i: int, name: str, overrides: list[str]) -> None:
        run_dir = (args.out_dir / f"{args.config.stem}-{name}-{stamp}-{i}").resolve()
        waited = None
        if args.wait_idle is not None:
            print(f"waiting for a 1-minute load average <= {args.wait_idle:g} for 2 minutes", flush=True)
            waited = round(wait_idle(args.wait_idle))
        with LoadSampler() as load:
            r = one_run(args.config, with_seed(overrides, i), run_dir, args.workers, args.minutes, args.frames,
                        args.window, args.max_seconds, gym, args.q_limit, gen_seeds, args.perturbed_races,
                        args.at_minutes)
        r["seed"] = i
        r["machine_load_1m"] = load.summary()  # the run's own processes count too (about its workers + 1)
        if waited is not None:
            r["waited_for_idle_s"] = waited
        with done:
            by_arm[name].append(r)
            by_arm[name].sort(key=lambda run: run["seed"])
            partial = {**study, "arms": [{"arm": n, "overrides": o, "runs": by_arm[n]} for n, o in arms]}
            (args.out_dir / f"study-{stamp}.json").write_text(json.dumps(partial, indent=2), encoding="utf-8")
            print(json.dumps({"arm": name, "run": i, **{k: r.get(k) for k in ("rc", "frames", "updates", "minutes")},
                              **({f"{w}_counts": (r.get(w) or {}).get("counts") for w in ("best", "final", "average")} if cycle else {}),
                              "first_finish": r.get("first_finish", {}).get(track) if track else None,
                              "best": r.get("best", {}).get("tracks", {}).get(track) if track else r.get("best"),
                              "final": r.get("final", {}).get("tracks", {}).get(track) if track else r.get("final"),
                              "average": r.get("average", {}).get("tracks", {}).get(track) if track else r.get("average"),
                              "diverged": r.get("health", {}).get("diverged")}), flush=True)

    # interleaved (run i of every arm, then run i+1): load drifts hit every arm
    jobs = [(i, name, overrides) for i in range(args.first_seed, args.first_seed + args.runs) for name, overrides in arms]
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        for future in [pool.submit(run_one, *job) for job in jobs]:
            future.result()  # a failure in the bench itself stops the study with its traceback
    for name, overrides in arms:
        runs = by_arm[name]
        study["arms"].append({"arm": name, "overrides": overrides, "runs": runs, "summary": arm_summary(runs, track, cycle)})
    print(json.dumps(study, indent=2))
    if args.record:
        study["note"] = args.record
        record(study)


if __name__ == "__main__":
    main()
