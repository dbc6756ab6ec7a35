"""The targets rows of the seed studies and issue studies (``bench/history``): each shipped recipe's
latest seed study (``recipe_studies.json``), the ``rulka run`` seed studies with a goal
(``run_studies.json``, pooled over the studies of the same recipe, the map cycle per track), the goals
an issue study answered (``issue_studies.json``) and the learner-fix comparisons
(``learner_fix_studies.json``). A row judging a recipe since replaced goes to ``superseded``. Only
reads and formats; ``bench.targets`` puts these rows in the table."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.rows import Row, _date, _num, _read_rows, _short, _sort


def adoptions(path: Path) -> dict[str, tuple[str, str]]:
    """Per config file name, the last time a study's arm became the shipped file
    (``bench/history/run_studies.json`` studies with ``shipped_arm``): (the earliest date a study names
    that arm as shipped, the arm). A row judging that config on runs from before then, of another
    arm, judges a recipe since replaced."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return adoptions_in(data)


def adoptions_in(data: Any) -> dict[str, tuple[str, str]]:
    """``adoptions`` of the studies already read."""
    named = [s for s in (data.get("studies", []) if isinstance(data, dict) else [])
             if isinstance(s, dict) and s.get("shipped_arm") and _shipped_arm(s) is not None]
    out: dict[str, tuple[str, str]] = {}
    for study in sorted(named, key=_date):
        config, arm = Path(str(study.get("config", ""))).name, str(study["shipped_arm"])
        if config not in out or out[config][1] != arm:
            out[config] = (_date(study), arm)
    return out


def _replaced_by(adopted: dict[str, tuple[str, str]], config: str, date: str, arm: str | None) -> str | None:
    """The words that say a row is superseded (its recipe was replaced after ``date``), or None."""
    since = adopted.get(Path(config).name)
    if since is None or date >= since[0] or arm == since[1]:
        return None
    return f"superseded: `{Path(config).name}` took the arm `{since[1]}` from {since[0]}"


def recipe_targets(path: Path, adopted: dict[str, tuple[str, str]] | None = None,
                   superseded: list[Row] | None = None) -> list[Row]:
    """Each shipped recipe's latest seed study (no overrides): reached in every seed or not; with
    ``adopted`` (``adoptions``), a study from before its config took other settings goes to
    ``superseded``."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for row in _read_rows(path):
        if str(row.get("overrides", "-")).strip() not in ("", "-"):
            continue
        key = (str(row.get("config", "")), str(row.get("target", "")))
        if key not in latest or _date(row) >= _date(latest[key]):
            latest[key] = row
    out = []
    for (config, target), row in latest.items():
        reached = str(row.get("reached", ""))
        got, _, of = reached.partition(" ")[0].partition("/")
        holds = got.isdigit() and of.isdigit() and got == of
        seeds = f"each of {of} seeds" if of.isdigit() else "every seed"
        line = ("`bench/study/recipe.py`", f"`{config}` greedy reaches {target} in {seeds} within "
                f"{_num(int(row['frames'])) if str(row.get('frames', '')).isdigit() else row.get('frames', '?')} frames",
                f"{reached} seeds", _date(row), holds)
        _sort(line, _replaced_by(adopted or {}, config, _date(row), None), out, superseded)
    return out


RUN_TARGETS = {
    # study name (bench/study/runs.py --name) -> (runs, best policy beats the scripted driver in, final weights in);
    # a Gymnasium study (--target-return): the best policy / final weights reach the target return in
    "readme_main_command": (5, 5, 4),
    "cartpole_iqn_runs": (10, 9, 0),
    # a map-cycle study (bench/study/runs.py --gen-random): (runs, bundled tracks the best policy beats the
    # scripted driver on in each run, generated tracks it finishes in each run, of how many generated)
    "map_cycle_runs": (3, 5, 8, 10),
}
"""Issue 32's goals for studies of repeated `rulka run`s (``bench/history/run_studies.json``)."""
# a study of a run longer than the README's (bench/study/runs.py --minutes 80 --at-minutes 20): (runs, of
# which the final weights race no slower than the run's own in-run races at --at-minutes)
LONG_RUN_TARGETS = {"sim_iqn_long": (1, 1)}


def _short_of(got: int, needed: int, runs: int, runs_needed: int) -> bool:
    """Whether ``got`` of ``runs`` runs falls short of ``needed`` of ``runs_needed``: counting the missing runs
    as successes while fewer were made, held to the goal's share once more were made."""
    if runs > runs_needed:
        return got * runs_needed < needed * runs
    return got + max(runs_needed - runs, 0) < needed


def _shipped_name(study: dict[str, Any]) -> str:
    """The name of the arm that is the config as it ships: ``as_shipped``, or the arm a study names in
    ``shipped_arm`` where the shipped file took that arm's settings after the study (set on the study
    that decided it and on the earlier studies of that arm: its runs are the shipped recipe's, the
    ``as_shipped`` arm was the file before; studies pooled with ``same_recipe_as`` give theirs)."""
    return str(study.get("shipped_arm") or "as_shipped")


def _shipped_arm(study: dict[str, Any]) -> dict[str, Any] | None:
    """The study's arm that is the config as it ships (``_shipped_name``), or None."""
    name = _shipped_name(study)
    return next((a for a in study.get("arms", []) if a.get("arm") == name), None)


def _seeds(runs: Sequence[dict[str, Any]]) -> str:
    """`` [seeds 0-4]`` / `` [seeds 0, 2, 7]``: the seeds of a study's runs (empty when none is recorded)."""
    seeds = sorted({int(r["seed"]) for r in runs if isinstance(r.get("seed"), int)})
    if not seeds:
        return ""
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f" [seeds {seeds[0]}-{seeds[-1]}]"
    return f" [seeds {', '.join(map(str, seeds))}]"


def _pooled_runs(studies: list[Any], study: dict[str, Any], arm: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs a row is judged on: the arm's, and those of the studies it pools (``same_recipe_as``)."""
    dates = {str(d) for d in study.get("same_recipe_as") or []}
    runs = list(arm.get("runs") or [])
    for other in studies:
        if isinstance(other, dict) and other is not study and other.get("name") == study.get("name") \
                and _date(other) in dates and (o := _shipped_arm(other)) is not None:
            runs += o.get("runs") or []
    return [r for r in runs if isinstance(r, dict)]


def _cycle_pooled(studies: list[Any], study: dict[str, Any], arm: dict[str, Any]
                  ) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """A map-cycle study whose arm the file took (``shipped_arm``) is judged with every earlier study
    of its name that names the same arm as shipped (runs of the same settings): per-run counts join.
    Returns (summary, runs, the words naming the studies pooled)."""
    s = dict(arm.get("summary") or {})
    runs = list(arm.get("runs") or [])
    if not study.get("shipped_arm"):
        return s, runs, ""
    used = []
    for other in studies:
        if (not isinstance(other, dict) or other is study or other.get("name") != study.get("name")
                or other.get("shipped_arm") != study.get("shipped_arm") or _date(other) > _date(study)):
            continue
        o_arm = _shipped_arm(other)
        o = (o_arm or {}).get("summary") or {}
        if not o.get("map_cycle"):
            continue
        used.append(_date(other))
        runs = list(o_arm.get("runs") or []) + runs
        for key in ("best_beats_scripted", "best_gen_finished"):
            s[key] = list(o.get(key) or []) + list(s.get(key) or [])
        s["runs"] = int(s.get("runs", 0)) + int(o.get("runs", 0))
        s["diverged"] = int(s.get("diverged", 0)) + int(o.get("diverged", 0))
        s["gen"] = min(int(s.get("gen") or 0), int(o.get("gen") or 0)) or s.get("gen")
    if not used:
        return s, runs, ""
    return s, runs, f" (pooled: the runs of {', '.join(sorted(used))} and {_date(study)}, the arm the file took)"


def run_targets(path: Path, superseded: list[Row] | None = None) -> list[Row]:
    """The latest study of each name in ``RUN_TARGETS`` that ran the config as shipped (its
    ``as_shipped`` arm; a later study of other arms alone compares, it does not judge): in how many
    runs the best policy and the final weights beat the scripted driver on the run's track. A study
    from before its config took another arm's settings (``adoptions``) goes to ``superseded``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    adopted = adoptions(path)
    rows = _run_rows(data)
    out = []
    for row, study in rows:
        _sort(row, _replaced_by(adopted, str(study.get("config", "")), _date(study), study.get("shipped_arm")),
              out, superseded)
    return out


def _latest_judged(data: Any) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Per study name with a goal, the latest study that ran the config as shipped and that arm."""
    latest: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # name -> (study, its as_shipped arm)
    for study in data.get("studies", []) if isinstance(data, dict) else []:
        name = str(study.get("name", "")) if isinstance(study, dict) else ""
        arm = _shipped_arm(study) if name in RUN_TARGETS or name in LONG_RUN_TARGETS else None
        if arm is not None and (name not in latest or _date(study) >= _date(latest[name][0])):
            latest[name] = (study, arm)
    return latest


def judged_runs(path: Path) -> dict[str, tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]]:
    """Per study name with a goal: (the study its row reads, its shipped arm, every run the row judges:
    the arm's and those of the studies it pools). What the README's solver ratios are read from."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out = {}
    for name, (study, arm) in _latest_judged(data).items():
        if (arm.get("summary") or {}).get("map_cycle"):
            runs = _cycle_pooled(data["studies"], study, arm)[1]
        else:
            runs = _pooled_runs(data["studies"], study, arm)
        out[name] = (study, arm, runs)
    return out


def _run_rows(data: Any) -> list[tuple[Row, dict[str, Any]]]:
    """``run_targets``'s rows, each with the study it judges."""
    latest = _latest_judged(data)
    out: list[tuple[Row, dict[str, Any]]] = []
    for name, (study, arm) in latest.items():
        s = arm.get("summary") or {}
        if name in LONG_RUN_TARGETS:
            out.append((_long_target(study, arm, s, *LONG_RUN_TARGETS[name]), study))
            continue
        if s.get("map_cycle"):
            s, runs, pooled = _cycle_pooled(data["studies"], study, arm)
            row = _cycle_target(study, s, *RUN_TARGETS[name], runs=runs)
            out.append(((*row[:2], row[2] + pooled + _seeds(runs), *row[3:]), study))
            continue
        seeds = _seeds(_pooled_runs(data["studies"], study, arm))
        s, pooled = _pooled(data["studies"], study, s)
        runs_needed, best_needed, final_needed = RUN_TARGETS[name]
        made = f" ({int(s.get('runs', 0))} of {runs_needed} runs made)" if int(s.get("runs", 0)) < runs_needed else ""
        if study.get("target_return") is not None:
            runs, best, final = int(s.get("runs", 0)), int(s.get("best_reaches_target", 0)), int(s.get("final_reaches_target", 0))
            target = study["target_return"]
            goal = (f"`{study.get('config', '')}` run with `rulka run`: over {runs_needed} seeds the best policy reaches a "
                    f"greedy {target:g} in {best_needed}" + (f", the final weights in {final_needed}" if final_needed else ""))
            # judged by the environment's own bounds where the study recorded them (health_limits; before,
            # by the simulator's, which flag every healthy CartPole run: `python -m bench.study health` rejudges)
            bounds = ("" if study.get("health_limits") else
                      " (flags judged by the simulator's bounds; the study recorded no health_limits)")
            shown = (f"best {best}/{runs}, final {final}/{runs} seeds reach {target:g}, diverged "
                     f"{s.get('diverged', 0)}{bounds}" + made + pooled)
            goal += ", no divergence"
        else:
            runs, best, final = int(s.get("runs", 0)), int(s.get("best_beats_scripted", 0)), int(s.get("final_beats_scripted", 0))
            goal = (f"`{study.get('config', '')}` as the README runs it: over {runs_needed} runs the best policy beats the "
                    f"scripted driver in {best_needed}, the final weights in {final_needed}, no divergence")
            # runs that kept the moving average of their weights (trainer.average_policy_frames): shown,
            # never counted for the final weights
            averaged = (f" (averaged weights {int(s['average_beats_scripted'])}/{int(s.get('average_runs', runs))}"
                        + (" of the latest study)" if "average_runs" in s else ")")
                        if "average_beats_scripted" in s else "")
            # the in-run greedy races of the runs' last fifth: how often an end version beats the driver
            late = (f"; in-run races of the last fifth {int(s['late_beats_scripted'])}/{int(s['late_races'])}"
                    if s.get("late_races") else "")
            adopted = (f"; arm `{_shipped_name(study)}`, the settings the file took after these runs"
                       if study.get("shipped_arm") else "")
            shown = (f"best {best}/{runs}, final {final}/{runs}{averaged} runs on `{s.get('track', '')}`, "
                     f"diverged {s.get('diverged', 0)}" + made + late + pooled + adopted)
        # decided once the runs that are missing could no longer change the verdict; more runs than the
        # goal names are held to its shares (best in 5 of 5 runs: in every run of 7)
        missing = max(runs_needed - runs, 0)
        diverged = int(s.get("diverged", 0)) > 0  # every goal says no divergence (Gymnasium's by its own bounds)
        fails = (_short_of(best, best_needed, runs, runs_needed) or _short_of(final, final_needed, runs, runs_needed)
                 or diverged)
        holds: bool | None = False if fails else (True if missing == 0 else None)
        # a study that compared arms chose the one it shipped on these very seeds: it cannot also judge
        # it (issue 68); the row waits for a study of that arm alone on seeds drawn after the choice
        compared = [str(a.get("arm", "")) for a in study.get("arms") or [] if isinstance(a, dict)]
        if len(compared) > 1 and holds is not False:
            holds = None
            shown += (f"; not decided: chosen among {len(compared)} arms ({', '.join(compared)}) on these seeds, "
                      "which cannot also judge it: a study of that arm alone on fresh seeds decides")
        out.append((("`bench/study/runs.py`", goal, shown + seeds, _date(study), holds), study))
    return out


# the counts of an arm's summary that add up over studies of the same recipe
# (not the averaged weights': how they are kept may differ between such studies; they stay the latest's)
POOLED_COUNTS = ("runs", "best_beats_scripted", "final_beats_scripted", "late_races", "late_beats_scripted",
                 "best_reaches_target", "final_reaches_target", "diverged")


def _pooled(studies: list[Any], study: dict[str, Any], s: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A study that names earlier studies of its name as the same recipe (``same_recipe_as``: their
    dates; set when recording it, where nothing the runs' end weights depend on changed between them)
    is judged on the runs of all of them: their as-shipped arms' counts add up, held to the goal's
    shares. Returns the summary to judge and the words that say which studies it pools."""
    dates = [str(d) for d in study.get("same_recipe_as") or []]
    if not dates:
        return s, ""
    total = dict(s)
    used = []
    for other in studies:
        if (not isinstance(other, dict) or other is study or other.get("name") != study.get("name")
                or _date(other) not in dates):
            continue
        arm = _shipped_arm(other)  # its runs of the recipe that ships now (its shipped_arm, if it names one)
        if arm is None:
            continue
        used.append(_date(other))
        o = arm.get("summary") or {}
        for key in POOLED_COUNTS:
            if key in s or key in o:
                total[key] = int(total.get(key, 0)) + int(o.get(key, 0))
    if not used:
        return s, ""
    total["average_runs"] = int(s.get("runs", 0))
    return total, f" (pooled: the runs of {', '.join(sorted(used))} and {_date(study)}, the same recipe)"


def _long_target(study: dict[str, Any], arm: dict[str, Any], s: dict[str, Any], runs_needed: int,
                 no_slower_needed: int) -> tuple[str, str, str, str, bool | None]:
    """A longer run's row (issue 32: "run 4x longer, the final policy no slower than at 20 min"): the
    final weights' greedy race against the median of the run's own in-run greedy races over the last
    fifth of the frames it had made by ``--at-minutes``; a study that did not race that point is shown
    and not judged."""
    minutes = (study.get("budget") or {}).get("minutes")
    at = s.get("at_minutes")
    goal = (f"`{study.get('config', '')}` run longer ({_num(minutes) if minutes else '?'} minutes): in {no_slower_needed} "
            f"of {runs_needed} runs the final weights race no slower than the run did at "
            f"{_num(at) if at else 20} minutes, no divergence")
    if at is None:
        return ("`bench/study/runs.py`", goal, "not judged: the study did not race where the run stood then "
                "(`bench/study/runs.py --at-minutes`)", _date(study), None)
    track = s.get("track", "")
    parts = []
    for run in arm.get("runs", []):
        then = (run.get("at_minutes") or {}).get("tracks", {}).get(track)
        final = (run.get("final") or {}).get("tracks", {}).get(track) or {}
        if not then:
            continue
        now = f"{final['race_time_s']:.2f} s" if final.get("finished") else "not finished"
        was = f"{then['median_s']:.2f} s" if then.get("median_s") is not None else "no finish"
        parts.append(f"seed {run.get('seed', '?')}: final {now} after {_num(run.get('frames'))} frames, "
                     f"{was} at {_num(at)} min ({_num(run['at_minutes'].get('frames'))} frames, median of "
                     f"{then.get('races', 0)} races)")
    runs, got = int(s.get("at_minutes_runs", 0)), int(s.get("final_no_slower_than_at", 0))
    shown = "; ".join(parts) + f"; no slower in {got} of {runs}; diverged {s.get('diverged', 0)}"
    fails = _short_of(got, no_slower_needed, runs, runs_needed) or int(s.get("diverged", 0)) > 0
    holds: bool | None = False if fails else (True if runs >= runs_needed else None)
    return ("`bench/study/runs.py`", goal, shown, _date(study), holds)


def _tracks_lost(runs: Sequence[dict[str, Any]]) -> str:
    """Per run, the bundled tracks its best policy did not beat the scripted driver on, and by how
    much: ``seed 1: hairpins +2.15 s, default not finished``; empty when every run beat every one."""
    parts = []
    for run in runs:
        tracks = ((run.get("best") or {}).get("tracks") or {}).items()
        lost = []
        for track, race in tracks:
            if track.startswith("gen:") or not isinstance(race, dict) or race.get("beats_scripted"):
                continue
            t, ref = race.get("race_time_s"), race.get("scripted_s")
            lost.append(f"{track} +{t - ref:.2f} s" if race.get("finished") and t is not None and ref is not None
                        else f"{track} not finished")
        if lost:
            parts.append(f"seed {run.get('seed', '?')}: {', '.join(lost)}")
    return "; ".join(parts)


def _cycle_target(study: dict[str, Any], s: dict[str, Any], runs_needed: int, beaten_needed: int,
                  gen_needed: int, gen_of: int,
                  runs: Sequence[dict[str, Any]] = ()) -> tuple[str, str, str, str, bool | None]:
    """A map-cycle study's row: in every run the best policy beats the scripted driver on
    ``beaten_needed`` bundled tracks and finishes ``gen_needed`` of ``gen_of`` generated ones; the
    tracks a run's best policy lost are named with the seconds it lost them by."""
    beaten = [int(x or 0) for x in s.get("best_beats_scripted", [])]
    gen = [int(x or 0) for x in s.get("best_gen_finished", [])]
    lost = _tracks_lost(runs)
    n_runs = int(s.get("runs", 0))
    goal = (f"`{study.get('config', '')}` as a user runs it: in each of {runs_needed} runs the best policy beats the "
            f"scripted driver on {beaten_needed} of 5 bundled tracks and finishes at least {gen_needed} of {gen_of} "
            "generated tracks it never saw, no divergence")
    shown = (f"best beats {', '.join(map(str, beaten)) or '-'} of {s.get('bundled', 5)} bundled tracks, finishes "
             f"{', '.join(map(str, gen)) or '-'} of {s.get('gen', 0)} generated ones; diverged {s.get('diverged', 0)}"
             + (f" ({n_runs} of {runs_needed} runs made)" if n_runs < runs_needed else "")
             + (f"; lost: {lost}" if lost else "")
             + (f"; arm `{_shipped_name(study)}`, the settings the file took after these runs"
                if study.get("shipped_arm") else ""))
    # a generated count out of fewer tracks than the goal's is scaled up to it
    gen_share = [g * gen_of / s["gen"] if s.get("gen") else 0 for g in gen]
    fails = (any(b < beaten_needed for b in beaten) or any(g < gen_needed for g in gen_share)
             or int(s.get("diverged", 0)) > 0 or not s.get("gen"))
    holds: bool | None = False if fails else (True if n_runs >= runs_needed else None)
    return ("`bench/study/runs.py`", goal, shown, _date(study), holds)


def issue_goal_targets(path: Path) -> list[Row]:
    """The goals an issue study answered (``bench/history/issue_studies.json`` studies that carry
    ``goal``, ``measured`` and ``holds``: a study judged by its table, not by a script), one row each."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    out = []
    for study in data.get("studies", []) if isinstance(data, dict) else []:
        if isinstance(study, dict) and study.get("goal"):
            holds = study.get("holds")
            out.append(("`bench/history/issue_studies.json`", str(study["goal"]),
                        _short(str(study.get("measured", ""))), _date(study), holds if isinstance(holds, bool) else None))
    return out


def study_arms(path: Path) -> list[dict[str, Any]]:
    """The arms of the seed studies in ``bench/history/learner_fix_studies.json`` (``{"studies": [...]}``),
    one dict per arm: study, arm, date, command, frames (the budget), seeds, reached (per seed the
    env steps at which the greedy average first reached 475, None when it did not), best (per seed
    the best greedy average). A study holds either ``runs`` (``bench/learner_fix_studies.py``: one
    arm per ``objective``) or ``arms`` (``bench/study/recipe.py`` runs, each with its own runs); a study
    with neither (one recorded run with a ``result``) has no arms."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    studies = data.get("studies") if isinstance(data, dict) else None
    out: list[dict[str, Any]] = []
    for study in studies if isinstance(studies, list) else []:
        if not isinstance(study, dict):
            continue
        groups: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = []
        if isinstance(study.get("runs"), list):
            by_objective: dict[str, list[dict[str, Any]]] = {}
            for run in study["runs"]:
                if isinstance(run, dict):
                    by_objective.setdefault(str(run.get("objective", "")), []).append(run)
            groups = [(objective, study, runs) for objective, runs in by_objective.items()]
        elif isinstance(study.get("arms"), list):
            groups = [(str(arm.get("arm", "")), arm, [r for r in arm.get("runs", []) if isinstance(r, dict)])
                      for arm in study["arms"] if isinstance(arm, dict)]
        for arm, where, runs in groups:
            out.append({
                "study": str(study.get("name", "")), "arm": arm, "date": _date(where),
                "command": str(where.get("command", "")),
                "frames": where.get("frames_cap", where.get("frames")),
                "seeds": [r.get("seed") for r in runs],
                "reached": [r.get("reached_475_env_steps", r.get("reached_475_at_frames")) for r in runs],
                "best": [r.get("best_greedy") for r in runs],
            })
    return out


def study_targets(path: Path) -> list[tuple[str, str, str, str, bool | None]]:
    """Each learner-fix study arm: does the greedy average reach 475 in every seed within its budget."""
    out = []
    for arm in study_arms(path):
        reached = [r for r in arm["reached"] if isinstance(r, int | float)]
        shown = f"{len(reached)}/{len(arm['reached'])} seeds"
        if reached:
            shown += f" (at {', '.join(_num(r) for r in reached)} steps)"
        frames = arm["frames"]
        out.append(("`bench/history/learner_fix_studies.json`",
                    f"learner-fix comparison (issue 31) {arm['study']}, {arm['arm']}: greedy reaches 475 in each of "
                    f"{len(arm['reached'])} seeds, budget "
                    f"{_num(frames) if isinstance(frames, int | float) else '?'} frames (the last update "
                    "may pass it)",
                    shown, arm["date"], bool(arm["reached"]) and len(reached) == len(arm["reached"])))
    return out
