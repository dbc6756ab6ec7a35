"""The README's figures, generated from the targets so that there is one source of numbers: the
learner table and "What it got" are rows of the targets table (``bench.targets.target_rows``).
``python -m bench`` rewrites both blocks whenever it writes BENCHMARKS.md; ``tests/test_readme.py``
checks that the README holds what they render now."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

Row = tuple[str, str, str, str, "bool | None"]
HISTORY = Path(__file__).resolve().parent / "history"
REPO = HISTORY.parents[1]

# (learner, its recipes in configs/, the targets whose figures its row quotes: goals' beginnings)
LEARNERS: list[tuple[str, str, tuple[str, ...]]] = [
    ("IQN with mini-races, the default (`iqn`)",
     "`sim_iqn.yaml`, `sim_iqn_cycle.yaml` (five tracks), `cartpole_iqn.yaml`, `cartpole_simple.yaml` "
     "(a tiny DQN, plumbing check)",
     ("`configs/sim_iqn.yaml` as the README runs it", "`configs/sim_iqn_cycle.yaml` as a user runs it")),
    ("PPO (`ppo`)", "`sim_ppo.yaml`, `cartpole_ppo.yaml`", ("sim ppo finishes the default track",)),
    ("GRPO (`grpo`)", "`sim_grpo.yaml`, `cartpole_grpo.yaml`", ("sim grpo finishes the default track",)),
    ("DPO (`dpo`), online pairs within a start, or offline from `rulka dpo pair`",
     "`sim_dpo.yaml`, `cartpole_dpo.yaml`", ("cartpole dpo beyond random",)),
    ("SAC (`sac`), continuous actions", "`sim_sac.yaml`, `pendulum_sac.yaml`",
     ("sac analog finishes the default track", "SAC reaches a mean return of -200")),
    ("REDQ (`sac` with 10 critics)", "`sim_redq.yaml` (sized for a CPU learner)",
     ("redq analog finishes the default track",)),
]
MAIN_RUN = "`configs/sim_iqn.yaml` as the README runs it"  # the README's own command (lesson 12)
BLOCKS = ("learners", "what-it-got")
# the studies whose race times "What it got" reads as ratios to the solver's: (study name, what it is)
SOLVER_STUDIES = (("readme_main_command", "The README command"), ("map_cycle_runs", "The map cycle"))
BUNDLED = ("default", "dirt_mix", "hairpins", "slalom", "turbo_straight")


def _span(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"


def _ms_per_action(study: dict[str, Any], arm: dict[str, Any]) -> int | None:
    """The decision period the study's runs had: its config with the arm's overrides."""
    from rulka.config import load_config

    try:
        cfg = load_config(REPO / str(study.get("config", "")), [str(o) for o in arm.get("overrides") or []],
                          env_file=None)
    except Exception:  # noqa: BLE001 - a config since renamed or an override it no longer takes: no ratio
        return None
    return int(cfg.environment.ms_per_action)


def _track_ratios(runs: Sequence[dict[str, Any]], which: str, track: str, solver_ms: int) -> str:
    """The span of ``which`` policy's race times on ``track`` over the runs, as ratios to the solver's
    time, with how many of the runs finished when not all did."""
    races = [((r.get(which) or {}).get("tracks") or {}).get(track) or {} for r in runs]
    times = [race["race_time_s"] for race in races if race.get("finished") and race.get("race_time_s")]
    if not times:
        return f"no finish in {len(races)} runs"
    shown = _span([t * 1000 / solver_ms for t in times])
    return shown if len(times) == len(races) else f"{shown} ({len(times)} of {len(races)} runs finished)"


def solver_ratios(history: Path = HISTORY) -> str:
    """The race times of the studies the README quotes as ratios to the fastest race the solver
    found (``rulka/envs/sim/optimal_times.json``, ``rulka sim optimal``): per study, the best policy's
    and the end weights' span over the runs the targets judge, beside the scripted driver's."""
    from bench.targets import judged_runs
    from rulka.envs.sim.optimal import solver_time_ms

    studies = judged_runs(history / "run_studies.json")
    parts = []
    for name, label in SOLVER_STUDIES:
        if name not in studies:
            continue
        study, arm, runs = studies[name]
        ms = _ms_per_action(study, arm)
        if ms is None or not runs:
            continue
        cycle = bool((arm.get("summary") or {}).get("map_cycle"))
        tracks = BUNDLED if cycle else (str((arm.get("summary") or {}).get("track", "default")),)
        cells = []
        for track in tracks:
            solver = solver_time_ms(track, ms)
            scripted = next((((r.get("best") or {}).get("tracks") or {}).get(track, {}).get("scripted_s")
                             for r in runs if (r.get("best") or {}).get("tracks", {}).get(track)), None)
            if not solver:
                continue
            driver = f"; scripted driver {scripted * 1000 / solver:.2f}x" if scripted else ""
            cells.append(f"{track} (solver {solver / 1000:.2f} s): best {_track_ratios(runs, 'best', track, solver)}, "
                         f"end weights {_track_ratios(runs, 'final', track, solver)}{driver}")
        if cells:
            parts.append(f"{label} ({len(runs)} runs of {_date(study)}, {ms} ms decisions): " + "; ".join(cells))
    if not parts:
        return ""
    return ("As ratios to the fastest race the solver found with the same actions and decisions (`rulka sim "
            "optimal`, an upper bound: BENCHMARKS.md, \"optimal\"): " + ". ".join(parts) + ".")


def _date(study: dict[str, Any]) -> str:
    return str(study.get("date", ""))[:10]


def _quoted(rows: Sequence[Row], starts: Sequence[str]) -> list[Row]:
    return [row for start in starts for row in rows if row[1].startswith(start)]


def _cell(row: Row) -> str:
    verdict = {True: "holds", False: "**does not hold**", None: "not measured"}[row[4]]
    return f"{row[1]}: {row[2]} ({row[3][:10]}, {verdict})".replace("|", "/")


def render_blocks(rows: Sequence[Row], history: Path | None = HISTORY) -> dict[str, str]:
    """The text of each generated block, from the target rows (and the solver ratios of the studies in
    ``history``; None: none)."""
    table = ["| learner (`training.algorithm`) | recipes in `configs/` | measured (targets in BENCHMARKS.md) |",
             "|---|---|---|"]
    for learner, recipes, starts in LEARNERS:
        quoted = _quoted(rows, starts)
        table.append(f"| {learner} | {recipes} | {'; '.join(_cell(r) for r in quoted) or 'no target yet'} |")
    main = _quoted(rows, (MAIN_RUN,))
    got = (f"What it got ({_cell(main[0])}; the study's every run: `bench/history/README.md`, "
           "\"Repeated runs\")." if main else "What it got: not measured yet.")
    ratios = solver_ratios(history) if history is not None else ""
    return {"learners": "\n".join(table), "what-it-got": got + (f" {ratios}" if ratios else "")}


def update_readme(text: str, rows: Sequence[Row], history: Path | None = HISTORY) -> str:
    """``text`` (the README) with each ``<!-- bench:NAME:begin -->`` ... ``:end -->`` block rendered anew."""
    for name, body in render_blocks(rows, history).items():
        begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
        head, found, rest = text.partition(begin)
        _, found_end, tail = rest.partition(end)
        if not found or not found_end:
            raise ValueError(f"README.md has no {begin} ... {end} block")
        text = f"{head}{begin}\n{body}\n{end}{tail}"
    return text
