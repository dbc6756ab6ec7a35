"""The README keeps its limits and takes its figures from the targets (lesson 15: a limit met once
is kept by a check; one source of numbers)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.__main__ import REPO_ROOT, current_rows, previous_results
from bench.readme import render_blocks, update_readme

README = REPO_ROOT / "README.md"


def test_the_readme_is_under_150_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) < 150


def test_the_readme_figures_are_the_targets_as_benchmarks_md_holds_them():
    """The learner table and "What it got" are what ``python -m bench`` renders from the targets
    now: rerun ``python -m bench --rewrite`` after recording a result."""
    text = README.read_text(encoding="utf-8")
    rows = current_rows(previous_results(REPO_ROOT / "BENCHMARKS.md"))
    assert update_readme(text, rows) == text


def test_a_changed_figure_changes_the_readme_block(tmp_path: Path):
    rows = [("`bench/study/runs.py`", "`configs/sim_iqn.yaml` as the README runs it: goal", "best 5/5", "2026-12-01 10:00 UTC",
             True)]
    text = "a\n<!-- bench:learners:begin -->\nSTALE\n<!-- bench:learners:end -->\n" \
           "<!-- bench:what-it-got:begin -->\nSTALE\n<!-- bench:what-it-got:end -->\nb\n"
    updated = update_readme(text, rows)
    assert "best 5/5 (2026-12-01, holds)" in updated and "STALE" not in updated
    assert updated.startswith("a\n") and updated.endswith("b\n")
    assert "no target yet" in render_blocks(rows)["learners"]  # a learner none of the rows name
    assert update_readme(updated, [(*rows[0][:2], "best 4/5", rows[0][3], False)]) != updated


def test_what_it_got_states_the_solver_ratios_of_the_latest_studies():
    """The README command's best and end weights on the default track, and the map cycle's per track,
    as ratios to the solver's time, beside the scripted driver's: read from the runs the targets judge."""
    from bench.readme import HISTORY, solver_ratios
    from bench.targets import judged_runs
    from rulka.envs.sim.optimal import solver_time_ms

    text = solver_ratios(HISTORY)
    _, _, runs = judged_runs(HISTORY / "run_studies.json")["readme_main_command"]
    solver = solver_time_ms("default", 50)
    best = [r["best"]["tracks"]["default"]["race_time_s"] * 1000 / solver for r in runs]
    assert f"The README command ({len(runs)} runs of " in text
    assert f"default (solver {solver / 1000:.2f} s): best {min(best):.2f}-{max(best):.2f}x" in text
    assert f"scripted driver {22.84 * 1000 / solver:.2f}x" in text
    cycle = text.partition("The map cycle")[2]
    assert all(f"{track} (solver " in cycle for track in ("default", "dirt_mix", "hairpins", "slalom", "turbo_straight"))
    assert text in render_blocks([])["what-it-got"]


def test_solver_ratios_say_how_many_runs_finished(tmp_path: Path):
    from bench.readme import solver_ratios

    def run(seed: int, best: float | None) -> dict:
        race = {"finished": best is not None, "race_time_s": best, "scripted_s": 22.84}
        return {"seed": seed, "best": {"tracks": {"default": race}},
                "final": {"tracks": {"default": {"finished": True, "race_time_s": 21.24}}}}

    study = {"name": "readme_main_command", "date": "2026-12-01 10:00 UTC", "config": "configs/sim_iqn.yaml",
             "arms": [{"arm": "as_shipped", "runs": [run(0, 19.31), run(1, None)],
                       "summary": {"track": "default", "runs": 2}}]}
    (tmp_path / "run_studies.json").write_text(json.dumps({"studies": [study]}))
    text = solver_ratios(tmp_path)
    assert ("The README command (2 runs of 2026-12-01, 50 ms decisions): default (solver 19.31 s): best 1.00x "
            "(1 of 2 runs finished), end weights 1.10x; scripted driver 1.18x.") in text
    assert "map cycle" not in text
    assert solver_ratios(tmp_path / "nothing") == ""
