"""Issue 68's learning goals, held against the fastest race the solver found with the same actions and
decision period (``rulka sim optimal``; the times ``rulka/envs/sim/optimal_times.json`` ships):

- the README command: over 5 runs on fresh seeds, the best policy within 1.05x the solver's time on the
  default track in every run, the end weights within 1.10x;
- the map cycle: over 3 runs on fresh seeds, the best policy within 1.10x the solver on every bundled
  track, from the start line and from moved starts (the median of the study's perturbed races), and 9 of
  10 generated tracks finished within 1.25x their solver times, in every run;
- the 80-minute run: over 3 seeds, its end weights race no slower than the end weights of a 20-minute
  run of the same seed and recipe (``readme_main_command`` runs).

"Fresh seeds" means drawn when the study started (``python -m bench.study runs --first-seed draw``
records ``seeds_drawn``): a row on seeds someone chose can fail but cannot hold, it stays undecided.
A row that misses says by how much. Only reads and formats; ``bench.targets`` puts the rows in the table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.rows import Row, _date, _num
from bench.study_targets import _replaced_by, _seeds, _short_of, adoptions_in, judged_runs

README_GOAL = {"runs": 5, "best": 1.05, "final": 1.10}
CYCLE_GOAL = {"runs": 3, "bundled": 1.10, "gen_finished": 9, "gen": 10, "gen_ratio": 1.25}
LONG_GOAL = {"seeds": 3, "name": "sim_iqn_long", "short": "readme_main_command"}
BUNDLED = ("default", "dirt_mix", "hairpins", "slalom", "turbo_straight")
SOURCE = "`bench/study/runs.py`"


def _solver_ms(study: dict[str, Any], arm: dict[str, Any], track: str) -> int | None:
    from bench.readme import _ms_per_action
    from rulka.envs.sim.optimal import solver_time_ms

    ms = _ms_per_action(study, arm)
    return solver_time_ms(track, ms) if ms is not None else None


def _ratio(race: dict[str, Any] | None, solver_ms: int | None, key: str = "race_time_s") -> float | None:
    """A race's time over the solver's (None: not finished, or no solver time)."""
    t = (race or {}).get(key)
    if not solver_ms or not isinstance(t, int | float) or ((race or {}).get("finished") is False and key == "race_time_s"):
        return None
    return t * 1000.0 / solver_ms


def _race(run: dict[str, Any], which: str, track: str) -> dict[str, Any]:
    return ((run.get(which) or {}).get("tracks") or {}).get(track) or {}


def _span(ratios: Sequence[float | None]) -> str:
    from bench.readme import _span as span

    done = [r for r in ratios if r is not None]
    if not done:
        return "no finish"
    return span(done) if len(done) == len(ratios) else f"{span(done)} ({len(ratios) - len(done)} not finished)"


def _shown(ratio: float | None) -> str:
    return "not finished" if ratio is None else f"{ratio:.2f}x"


def _within(ratios: Sequence[float | None], bound: float) -> tuple[int, str]:
    """How many ratios are within ``bound``, and the words for the worst miss (empty when none)."""
    got = sum(1 for r in ratios if r is not None and r <= bound)
    misses = [r for r in ratios if r is None or r > bound]
    if not misses:
        return got, ""
    if any(r is None for r in misses):
        return got, "; a run did not finish"
    worst = max(r for r in misses if r is not None)
    return got, f"; worst {worst:.3f}x, {worst - bound:.3f} over"


def _fresh(study: dict[str, Any]) -> bool:
    return bool(study.get("seeds_drawn"))


def _verdict(fails: bool, made: int, needed: int, fresh: bool) -> bool | None:
    if fails:
        return False
    return True if made >= needed and fresh else None


def _freshness(study: dict[str, Any]) -> str:
    return "" if _fresh(study) else ("; seeds chosen, not drawn when the study started: it can fail, not hold "
                                     "(`--first-seed draw`)")


def readme_row(study: dict[str, Any], arm: dict[str, Any], runs: list[dict[str, Any]]) -> Row:
    g = README_GOAL
    track = str((arm.get("summary") or {}).get("track") or "default")
    goal = (f"`{study.get('config', '')}` as the README runs it, {g['runs']} runs on fresh seeds: the best policy "
            f"within {g['best']:.2f}x the solver's time on `{track}` in every run, the end weights within "
            f"{g['final']:.2f}x (issue 68)")
    solver = _solver_ms(study, arm, track)
    if not solver:
        return SOURCE, goal, "not measured: no solver time for this track and decision period", _date(study), None
    best = [_ratio(_race(r, "best", track), solver) for r in runs]
    final = [_ratio(_race(r, "final", track), solver) for r in runs]
    nb, miss_b = _within(best, g["best"])
    nf, miss_f = _within(final, g["final"])
    n = len(runs)
    shown = (f"solver {solver / 1000:.2f} s; best {_span(best)} ({nb}/{n} within {g['best']:.2f}x{miss_b}), end weights "
             f"{_span(final)} ({nf}/{n} within {g['final']:.2f}x{miss_f})" + _seeds(runs) + _freshness(study))
    fails = _short_of(nb, g["runs"], n, g["runs"]) or _short_of(nf, g["runs"], n, g["runs"])
    return SOURCE, goal, shown, _date(study), _verdict(fails, n, g["runs"], _fresh(study))


def cycle_row(study: dict[str, Any], arm: dict[str, Any], runs: list[dict[str, Any]]) -> Row:
    g = CYCLE_GOAL
    goal = (f"`{study.get('config', '')}` as a user runs it, {g['runs']} runs on fresh seeds: in every run the best "
            f"policy within {g['bundled']:.2f}x the solver on every bundled track, from moved starts too, and "
            f"{g['gen_finished']} of {g['gen']} generated tracks finished within {g['gen_ratio']:.2f}x their solver "
            "times (issue 68)")
    gen_tracks = [f"gen:{s}" for s in study.get("gen_seeds") or []]
    solver = {t: _solver_ms(study, arm, t) for t in (*BUNDLED, *gen_tracks)}
    if not all(solver[t] for t in BUNDLED):
        return SOURCE, goal, "not measured: no solver time for a bundled track at this decision period", _date(study), None
    parts, ok = [], 0
    for run in runs:
        start = {t: _ratio(_race(run, "best", t), solver[t]) for t in BUNDLED}
        moved = {t: _ratio(_race(run, "best", t), solver[t], "perturbed_s") for t in BUNDLED}
        timed = [t for t in gen_tracks if solver[t]]
        gen_ok = sum(1 for t in timed if (r := _ratio(_race(run, "best", t), solver[t])) is not None and r <= g["gen_ratio"])
        worst = max(BUNDLED, key=lambda t: start[t] if start[t] is not None else 99.0)
        worst_moved = max(BUNDLED, key=lambda t: moved[t] if moved[t] is not None else 99.0)
        bundled_ok = all(r is not None and r <= g["bundled"] for r in (*start.values(), *moved.values()))
        needed_gen = g["gen_finished"] * len(timed) / g["gen"] if timed else g["gen_finished"]
        ok += int(bundled_ok and gen_ok >= needed_gen)
        untimed = f", {len(gen_tracks) - len(timed)} without a solver time" if len(timed) < len(gen_tracks) else ""
        parts.append(f"seed {run.get('seed', '?')}: worst bundled {_shown(start[worst])} ({worst}), from moved starts "
                     f"{_shown(moved[worst_moved])} ({worst_moved}); generated {gen_ok}/{len(timed)} within "
                     f"{g['gen_ratio']:.2f}x{untimed}")
    n = len(runs)
    text = "; ".join(parts) + f"; {ok} of {n} runs meet it" + _freshness(study)
    fails = _short_of(ok, g["runs"], n, g["runs"])
    return SOURCE, goal, text, _date(study), _verdict(fails, n, g["runs"], _fresh(study))


def long_row(data: dict[str, Any]) -> Row:
    """The latest study named ``sim_iqn_long`` of the recipe that ships: each run's end weights against
    the end weights of the ``readme_main_command`` runs (20 minutes) of the same seed and recipe."""
    g = LONG_GOAL
    goal = (f"`configs/sim_iqn.yaml` run for 80 minutes, {g['seeds']} seeds: the end weights race no slower than "
            "the end weights of a 20-minute run (the README's command) of the same seed and recipe (issue 68)")
    studies = [s for s in data.get("studies", []) if isinstance(s, dict)]
    adopted = adoptions_in(data)

    def current(s: dict[str, Any]) -> bool:
        return _replaced_by(adopted, str(s.get("config", "")), _date(s), s.get("shipped_arm")) is None

    def shipped_runs(s: dict[str, Any]) -> list[dict[str, Any]]:
        name = str(s.get("shipped_arm") or "as_shipped")
        arm = next((a for a in s.get("arms", []) if a.get("arm") == name), None)
        return [r for r in (arm or {}).get("runs") or [] if isinstance(r, dict)]

    longs = [s for s in studies if s.get("name") == g["name"] and current(s) and shipped_runs(s)]
    if not longs:
        return SOURCE, goal, "not measured: no 80-minute study of the recipe that ships now", "", None
    study = max(longs, key=_date)
    track = "default"
    shorts: dict[int, list[float | None]] = {}
    for s in studies:
        if s.get("name") == g["short"] and current(s) and s.get("config") == study.get("config"):
            for r in shipped_runs(s):
                if isinstance(r.get("seed"), int):
                    race = _race(r, "final", track)
                    shorts.setdefault(r["seed"], []).append(race.get("race_time_s") if race.get("finished") else None)
    parts, paired, ok = [], 0, 0
    for run in shipped_runs(study):
        race = _race(run, "final", track)
        long_s = race.get("race_time_s") if race.get("finished") else None
        short = [t for t in shorts.get(run.get("seed"), []) if t is not None]  # type: ignore[arg-type]
        if run.get("seed") not in shorts:
            parts.append(f"seed {run.get('seed', '?')}: no 20-minute run of it")
            continue
        paired += 1
        ref = min(short) if short else None
        good = long_s is not None and (ref is None or long_s <= ref)
        ok += int(good)
        now = f"{long_s:.2f} s" if long_s is not None else "not finished"
        then = f"{ref:.2f} s" if ref is not None else "not finished"
        parts.append(f"seed {run.get('seed')}: 80 min {now}, 20 min {then}"
                     + ("" if good or long_s is None or ref is None else f" ({long_s - ref:.2f} s slower)"))
    text = "; ".join(parts) + f"; no slower in {ok} of {paired} paired seeds ({_num(len(shipped_runs(study)))} runs)"
    fails = _short_of(ok, g["seeds"], paired, g["seeds"])
    return SOURCE, goal, text, _date(study), False if fails else (True if paired >= g["seeds"] else None)


def solver_targets(path: Path) -> list[Row]:
    """Issue 68's rows from ``bench/history/run_studies.json``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    judged = judged_runs(path)
    rows: list[Row] = []
    if "readme_main_command" in judged:
        rows.append(readme_row(*judged["readme_main_command"]))
    if "map_cycle_runs" in judged:
        rows.append(cycle_row(*judged["map_cycle_runs"]))
    rows.append(long_row(data if isinstance(data, dict) else {}))
    return rows
