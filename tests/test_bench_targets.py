"""BENCHMARKS.md opens with every target, its last measured figure and whether it holds."""

from __future__ import annotations

import json
from pathlib import Path

from bench.__main__ import learner_fix_studies, main, previous_machine, results_file
from bench.targets import (
    TARGETS,
    extended_targets,
    recipe_targets,
    run_targets,
    study_targets,
    target_rows,
    targets_table,
)

RESULTS = {
    "transport": {"date": "2026-01-02 03:04 UTC", "figures": {
        "relay_mb_s": {"64KB": 95.0, "1MB": 81.0, "26MB": 79.5},
        "targets": {"relay_mb_s_min": 80.0, "weights_26mb_to_4_workers_s_max": 1.5},
        "weights_26mb_to_4_workers_s": 0.9}},
    "trainer_loop": {"date": "2026-01-03 00:00 UTC", "figures": {"results": [
        {"ratio": 0.95, "spi_vs_target": 0.93}, {"ratio": 0.91, "spi_vs_target": 1.08}]}},
    "soak": {"date": "2026-01-04 00:00 UTC", "figures": {
        "segments_lost": 0, "segments_duplicated": 1, "sequence_numbers_reused": 0,
        "relay_rss_peak_mb": 77.0, "relay_rss_bound_mb": 256}},
}


def table(tmp_path: Path) -> str:
    (tmp_path / "extended_runs.json").write_text("[]")
    return "\n".join(targets_table(lambda name: RESULTS.get(name), tmp_path, {"transport": "", "sim": "", "pipeline": ""}))


def test_benchmark_targets_judge_the_latest_figures(tmp_path: Path) -> None:
    text = table(tmp_path)
    # the slowest size, 79.5, is under 80
    assert ("| `transport` | relay payload >= 80 MB/s over TLS at every message size "
            "| 79.5 MB/s (26MB messages, the slowest size) | 2026-01-02 03:04 UTC | **no** |") in text
    assert "| 0.9 s | 2026-01-02 03:04 UTC | yes |" in text
    assert "| lowest 0.91 over 2 configurations | 2026-01-03 00:00 UTC | yes |" in text
    assert "| 0.93 to 1.08 over 2 configurations | 2026-01-03 00:00 UTC | yes |" in text
    assert "| segments lost 0, segments duplicated 1, sequence numbers reused 0 | 2026-01-04 00:00 UTC | **no** |" in text
    assert "| 77 MB | 2026-01-04 00:00 UTC | yes |" in text
    # a script never run is shown, not dropped
    assert "| `sim` | simulator >= 5,000 actions/s with the image on one core | not measured |  | - |" in text
    # 4 hold of all the rows (3 of transport's and trainer_loop's and soak's 6 rows; the rest not measured)
    assert f"4 of {len(TARGETS)} hold" in text
    assert "Figures without a target (they describe rather than judge): `pipeline`." in text


def test_spi_outside_ten_percent_fails(tmp_path: Path) -> None:
    results = {"trainer_loop": {"date": "d", "figures": {"results": [{"ratio": 0.89, "spi_vs_target": 1.11}]}}}
    (tmp_path / "extended_runs.json").write_text("[]")
    text = "\n".join(targets_table(lambda name: results.get(name), tmp_path, {}))
    assert "| lowest 0.89 over 1 configurations | d | **no** |" in text
    assert "| 1.11 to 1.11 over 1 configurations | d | **no** |" in text


def test_learning_rows_take_each_tests_latest_measured_run(tmp_path: Path) -> None:
    path = tmp_path / "extended_runs.json"
    path.write_text(json.dumps([
        {"test": "tests/test_a.py::test_a_learns", "outcome": "fail: x", "date": "2026-01-01 10:00 UTC"},
        {"test": "tests/test_a.py::test_a_learns", "outcome": "pass (y)", "date": "2026-01-02 10:00 UTC"},
        {"test": "tests/test_a.py::test_a_learns", "outcome": "not run: no time", "date": "2026-01-03 10:00 UTC"},
        {"test": "configs/z.yaml (no test yet)", "outcome": "not finished", "date": "2026-01-01 00:00 UTC"},
    ]))
    assert extended_targets(path) == [
        ("`configs/z.yaml`", "recorded learning run (no test yet)", "not finished", "2026-01-01 00:00 UTC", False),
        ("`tests/test_a.py`", "a learns", "pass (y)", "2026-01-02 10:00 UTC", True),
    ]
    # once a test runs that recipe, its row replaces the recorded run (a later recorded run would show again)
    rows = json.loads(path.read_text())
    rows.append({"test": "tests/test_z.py::test_z_finishes", "outcome": "fail: slow", "date": "2026-01-04 00:00 UTC",
                 "supersedes": "configs/z.yaml (no test yet)"})
    path.write_text(json.dumps(rows))
    assert [r[0] for r in extended_targets(path)] == ["`tests/test_a.py`", "`tests/test_z.py`"]
    rows.append({"test": "configs/z.yaml (no test yet)", "outcome": "finished", "date": "2026-01-05 00:00 UTC"})
    path.write_text(json.dumps(rows))
    assert [r[0] for r in extended_targets(path)] == ["`configs/z.yaml`", "`tests/test_a.py`", "`tests/test_z.py`"]
    studies = tmp_path / "recipe_studies.json"
    studies.write_text(json.dumps([
        {"config": "c.yaml", "overrides": "-", "target": "475", "reached": "3/4", "frames": "200000", "date": "1"},
        {"config": "c.yaml", "overrides": "x=1", "target": "475", "reached": "4/4", "frames": "200000", "date": "2"},
        {"config": "s.yaml", "overrides": "-", "target": "finish", "reached": "2/2", "frames": "200000", "date": "3"},
    ]))
    assert recipe_targets(studies) == [
        ("`bench/study/recipe.py`", "`c.yaml` greedy reaches 475 in each of 4 seeds within 200,000 frames", "3/4 seeds", "1",
         False),
        ("`bench/study/recipe.py`", "`s.yaml` greedy reaches finish in each of 2 seeds within 200,000 frames", "2/2 seeds", "3",
         True),
    ]


def test_rewrite_puts_targets_first_and_keeps_the_measuring_machine(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    embedded = {"transport": {"status": "ok", "command": "python -m bench.transport", **RESULTS["transport"]}}
    out.write_text("# rulka benchmarks\n\n## Machine\n\n| | |\n|---|---|\n| cpu | The Old One |\n| cores | 2 |\n")
    results_file(out).write_text(json.dumps(embedded))  # the figures behind it, beside it
    assert previous_machine(out) == {"cpu": "The Old One", "cores": "2"}
    assert main(["--rewrite", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.index("## Targets") < text.index("## Machine") < text.index("## Summary") < text.index("## transport")
    assert "| cpu | The Old One |" in text
    assert "| 79.5 MB/s (26MB messages, the slowest size) |" in text


def test_learner_fix_studies_give_one_target_per_arm_and_their_own_section(tmp_path: Path) -> None:
    path = tmp_path / "learner_fix_studies.json"
    path.write_text(json.dumps({"machine": "m", "studies": [
        {"name": "g", "date": "2026-01-05 00:00 UTC", "command": "python bench/learner_fix_studies.py grpo",
         "frames_cap": 1000, "runs": [
             {"objective": "reinforce", "seed": 0, "reached_475_env_steps": 900, "best_greedy": 480.0},
             {"objective": "reinforce", "seed": 1, "reached_475_env_steps": 700, "best_greedy": 500.0},
             {"objective": "clipped", "seed": 0, "reached_475_env_steps": None, "best_greedy": 300.5},
             {"objective": "clipped", "seed": 1, "reached_475_env_steps": 800, "best_greedy": 476.0}]},
        {"name": "n", "arms": [{"arm": "eps 0", "date": "2026-01-06 00:00 UTC", "frames": 2000, "command": "c",
                                "runs": [{"seed": 3, "reached_475_at_frames": None, "best_greedy": 9.9}]}]},
        {"name": "once", "date": "2026-01-07 00:00 UTC", "command": "rulka run x", "result": {"frames": 5}},
    ]}))
    fix = "`bench/history/learner_fix_studies.json`", "learner-fix comparison (issue 31) "
    assert study_targets(path) == [
        (fix[0], fix[1] + "g, reinforce: greedy reaches 475 in each of 2 seeds, budget 1,000 frames "
         "(the last update may pass it)", "2/2 seeds (at 900, 700 steps)", "2026-01-05 00:00 UTC", True),
        (fix[0], fix[1] + "g, clipped: greedy reaches 475 in each of 2 seeds, budget 1,000 frames "
         "(the last update may pass it)", "1/2 seeds (at 800 steps)", "2026-01-05 00:00 UTC", False),
        (fix[0], fix[1] + "n, eps 0: greedy reaches 475 in each of 1 seeds, budget 2,000 frames "
         "(the last update may pass it)", "0/1 seeds", "2026-01-06 00:00 UTC", False),
    ]
    (tmp_path / "extended_runs.json").write_text("[]")
    text = "\n".join(targets_table(lambda name: None, tmp_path, {}))
    # comparisons between arms are rows of the table, marked, and counted: a failing arm is never left out
    assert "| 1/2 seeds (at 800 steps) | 2026-01-05 00:00 UTC | **no** |" in text
    rows = len(TARGETS) + 3  # the benchmark rows and the three arms
    assert f"1 of {rows} hold, 2 do not, {rows - 3} are not measured or not decided; 0 more rows" in text
    section = "\n".join(learner_fix_studies(path))
    assert ("| g | clipped | 0, 1 | 1,000 | -, 800 | 300.5, 476 | 2026-01-05 00:00 UTC "
            "| `python bench/learner_fix_studies.py grpo` |") in section
    assert "| n | eps 0 | 3 | 2,000 | - | 9.9 | 2026-01-06 00:00 UTC | `c` |" in section
    assert "once (2026-01-07 00:00 UTC): `rulka run x`" in section and "| frames | 5 |" in section


def _study(date: str, runs: int, best: int, final: int, diverged: int = 0, name: str = "readme_main_command") -> dict:
    return {"name": name, "config": "configs/sim_iqn.yaml", "date": date,
            "arms": [{"arm": "as_shipped", "summary": {"track": "default", "runs": runs, "best_beats_scripted": best,
                                                        "final_beats_scripted": final, "diverged": diverged}}]}


def test_repeated_run_targets_are_decided_only_when_missing_runs_cannot_change_them(tmp_path: Path) -> None:
    path = tmp_path / "run_studies.json"

    def verdict(*studies: dict) -> list:
        path.write_text(json.dumps({"studies": list(studies)}))
        return [row[4] for row in run_targets(path)]

    # 5 runs needed, best in 5, final in 4: 2 runs with best 2/2 and final 1/2 may still hold
    assert verdict(_study("2026-11-26", 2, 2, 1)) == [None]
    assert verdict(_study("2026-11-26", 2, 1, 2)) == [False]  # best can no longer be 5 of 5
    assert verdict(_study("2026-11-26", 5, 5, 4)) == [True]
    assert verdict(_study("2026-11-26", 5, 5, 3)) == [False]
    assert verdict(_study("2026-11-26", 5, 5, 5, diverged=1)) == [False]
    # more runs than the goal names: held to its shares (best in every run, final in 4 of 5)
    assert verdict(_study("2026-11-26", 7, 6, 6)) == [False]  # best 6 of 7 is not every run
    assert verdict(_study("2026-11-26", 7, 7, 5)) == [False]  # final 5 of 7 < 4 of 5
    assert verdict(_study("2026-11-26", 10, 10, 8)) == [True]
    # the latest study of the name decides; studies of other names (comparisons) are no target
    assert verdict(_study("2026-11-25", 5, 5, 5), _study("2026-11-26", 3, 0, 0),
                   _study("2026-11-27", 2, 0, 0, name="sim_grpo_objective")) == [False]
    assert "best 0/3, final 0/3" in run_targets(path)[0][2]
    # a later study of other arms only (a comparison, stopped early) leaves the as-shipped one to judge
    other = _study("2026-11-27", 1, 1, 0)
    other["arms"][0]["arm"] = "from_best_low"
    assert verdict(_study("2026-11-26", 5, 5, 4), other) == [True]
    # runs that kept averaged weights show their count, which never stands in for the final weights
    averaged = _study("2026-11-28", 7, 7, 2)
    averaged["arms"][0]["summary"].update(average_beats_scripted=5)
    assert verdict(averaged) == [False]
    assert "best 7/7, final 2/7 (averaged weights 5/7) runs on `default`" in run_targets(path)[0][2]
    averaged["arms"][0]["summary"].update(late_races=140, late_beats_scripted=61)  # shown, not judged
    assert verdict(averaged) == [False]
    assert run_targets(path)[0][2].endswith("diverged 0; in-run races of the last fifth 61/140")
    # a Gymnasium study: the best policy reaches the target return in 9 of 10 seeds (the final weights: no goal)
    gym = {"name": "cartpole_iqn_runs", "date": "2026-11-26", "config": "configs/cartpole_iqn.yaml", "target_return": 475,
           "arms": [{"arm": "as_shipped", "summary": {"runs": 5, "best_reaches_target": 4, "final_reaches_target": 1,
                                                      "diverged": 1}}]}
    assert verdict(gym) == [False]  # a divergence fails a Gymnasium goal too
    assert ("best 4/5, final 1/5 seeds reach 475, diverged 1 (flags judged by the simulator's bounds; the study "
            "recorded no health_limits) (5 of 10 runs made)") in run_targets(path)[0][2]
    gym["arms"][0]["summary"].update(diverged=0)
    gym["health_limits"] = {"q_mean": 150.0, "td_loss": 30.0, "grad_norm": 3000.0}
    assert verdict(gym) == [None]  # 5 more seeds may still make 9 of 10
    assert "best 4/5, final 1/5 seeds reach 475, diverged 0 (5 of 10 runs made)" in run_targets(path)[0][2]
    gym["arms"][0]["summary"].update(runs=10, best_reaches_target=9)
    assert verdict(gym) == [True]
    gym["arms"][0]["summary"].update(best_reaches_target=8)
    assert verdict(gym) == [False]


def test_a_study_of_the_same_recipe_as_earlier_ones_is_judged_on_all_their_runs(tmp_path: Path) -> None:
    """same_recipe_as: the earlier studies' as-shipped runs count with the latest one's, held to the
    goal's shares (final in 4 of 5: 8 of 10); a lucky second batch does not hide the first."""
    path = tmp_path / "run_studies.json"
    first = _study("2026-11-27 13:44 UTC", 5, 5, 3)
    first["arms"][0]["summary"].update(late_races=87, late_beats_scripted=61, average_beats_scripted=3)
    second = _study("2026-11-27 20:17 UTC", 5, 5, 4)
    second["arms"][0]["summary"].update(late_races=90, late_beats_scripted=70, average_beats_scripted=4)
    other_name = _study("2026-11-27 10:00 UTC", 5, 0, 0, name="sim_grpo_objective")
    compared = _study("2026-11-27 10:48 UTC", 5, 5, 5)
    compared["arms"][0]["arm"] = "no_cooldown"  # not the as-shipped arm: never pooled

    def judged(*dates: str) -> tuple:
        second["same_recipe_as"] = list(dates)
        path.write_text(json.dumps({"studies": [other_name, compared, first, second]}))
        (row,) = run_targets(path)
        return row[2], row[4]

    shown, holds = judged()  # alone, the second batch's 4 of 5 holds
    assert holds is True and shown.startswith("best 5/5, final 4/5 (averaged weights 4/5)")
    shown, holds = judged("2026-11-27 13:44 UTC", "2026-11-27 10:48 UTC", "2026-11-27 10:00 UTC")
    assert holds is False  # 7 of 10 < 4 of 5
    # the averaged weights stay the latest study's (how they are kept may have changed between them)
    assert shown.startswith("best 10/10, final 7/10 (averaged weights 4/5 of the latest study) runs on `default`, "
                            "diverged 0")
    assert "in-run races of the last fifth 131/177" in shown
    assert shown.endswith("(pooled: the runs of 2026-11-27 13:44 UTC and 2026-11-27 20:17 UTC, the same recipe)")
    first["arms"][0]["summary"].update(final_beats_scripted=4)
    assert judged("2026-11-27 13:44 UTC")[1] is True  # 8 of 10
    first["arms"][0]["summary"].update(diverged=1)
    assert judged("2026-11-27 13:44 UTC")[1] is False  # a divergence in any pooled run
    assert judged("2026-11-01 00:00 UTC")[0].startswith("best 5/5, final 4/5")  # no such study: nothing pooled
    assert judged("2026-11-27 20:17 UTC")[0].startswith("best 5/5, final 4/5")  # itself: counted once


def test_a_study_whose_other_arm_the_file_took_is_judged_on_that_arm_and_its_earlier_runs(tmp_path: Path) -> None:
    """shipped_arm: the config took a compared arm's settings after the study; the goal is then judged
    on that arm (pooled with the same-named arm of the studies it names), not on the file it replaced."""
    path = tmp_path / "run_studies.json"
    earlier = _study("2026-11-28 21:24 UTC", 5, 5, 5)
    earlier["arms"][0]["arm"] = "ez_greedy"  # a study of the other settings alone, named as shipped now
    earlier["shipped_arm"] = "ez_greedy"
    paired = _study("2026-11-29 07:00 UTC", 3, 3, 2, diverged=1)  # the file before: one run diverged
    paired["arms"].append({"arm": "ez_greedy", "summary": {"track": "default", "runs": 3, "best_beats_scripted": 3,
                                                           "final_beats_scripted": 3, "diverged": 0}})

    def judged(**fields: object) -> tuple:
        study = {**paired, **fields}
        path.write_text(json.dumps({"studies": [earlier, study]}))
        (row,) = run_targets(path)
        return row[2], row[4]

    shown, holds = judged()  # as recorded without it: the as-shipped arm's divergence decides
    assert holds is False and shown.startswith("best 3/3, final 2/3 runs on `default`, diverged 1")
    shown, holds = judged(shipped_arm="ez_greedy")
    assert holds is None and shown.startswith("best 3/3, final 3/3 runs on `default`, diverged 0 (3 of 5 runs made)")
    assert "; arm `ez_greedy`, the settings the file took after these runs" in shown
    shown, holds = judged(shipped_arm="ez_greedy", same_recipe_as=["2026-11-28 21:24 UTC"])
    # every count holds, but the study that chose the arm on its seeds cannot decide it (a later study does)
    assert holds is None and shown.startswith("best 8/8, final 8/8 runs on `default`, diverged 0")
    assert "not decided: chosen among 2 arms (as_shipped, ez_greedy) on these seeds" in shown
    assert "(pooled: the runs of 2026-11-28 21:24 UTC and 2026-11-29 07:00 UTC, the same recipe)" in shown
    earlier["arms"][0]["summary"].update(diverged=1)
    assert judged(shipped_arm="ez_greedy", same_recipe_as=["2026-11-28 21:24 UTC"])[1] is False
    # a later plain study of the file pools each earlier study's own shipped arm, never the file it replaced
    later = _study("2026-11-30 07:00 UTC", 2, 2, 2)
    later["same_recipe_as"] = ["2026-11-28 21:24 UTC", "2026-11-29 07:00 UTC"]
    earlier["arms"][0]["summary"].update(diverged=0)
    path.write_text(json.dumps({"studies": [earlier, {**paired, "shipped_arm": "ez_greedy"}, later]}))
    (row,) = run_targets(path)
    assert row[4] is True and row[2].startswith("best 10/10, final 10/10 runs on `default`, diverged 0")
    path.write_text(json.dumps({"studies": [earlier, paired, later]}))  # the paired study as first recorded
    (row,) = run_targets(path)
    assert row[4] is False and row[2].startswith("best 10/10, final 9/10 runs on `default`, diverged 1")
    path.write_text(json.dumps({"studies": [earlier, {**paired, "shipped_arm": "no_such_arm"}]}))
    # an arm the study does not have: it judges nothing, the latest study that has one does
    assert [row[3] for row in run_targets(path)] == ["2026-11-28 21:24 UTC"]


def test_a_map_cycle_study_holds_only_when_every_run_beats_every_track_and_finishes_the_generated_ones(
        tmp_path: Path) -> None:
    path = tmp_path / "run_studies.json"

    def verdict(runs: int, beaten: list[int], gen: list[int], of: int = 10, diverged: int = 0) -> tuple:
        summary = {"map_cycle": True, "runs": runs, "bundled": 5, "gen": of, "best_beats_scripted": beaten,
                   "best_gen_finished": gen, "diverged": diverged}
        path.write_text(json.dumps({"studies": [{"name": "map_cycle_runs", "config": "configs/sim_iqn_cycle.yaml",
                                                 "date": "2026-11-27", "arms": [{"arm": "as_shipped",
                                                                                 "summary": summary}]}]}))
        (row,) = run_targets(path)
        return row[4], row[2]

    assert verdict(3, [5, 5, 5], [8, 10, 9])[0] is True
    assert verdict(3, [5, 4, 5], [10, 10, 10])[0] is False  # one run beats 4 tracks
    assert verdict(3, [5, 5, 5], [8, 7, 9])[0] is False  # one run finishes 7 of 10
    assert verdict(3, [5, 5, 5], [10, 10, 10], diverged=1)[0] is False
    assert verdict(2, [5, 5], [9, 9]) == (None, "best beats 5, 5 of 5 bundled tracks, finishes 9, 9 of 10 generated "
                                                "ones; diverged 0 (2 of 3 runs made)")
    assert verdict(3, [5, 5, 5], [4, 5, 5], of=5)[0] is True  # 4 of 5 generated is 8 of 10
    assert verdict(3, [5, 5, 5], [0, 0, 0], of=0)[0] is False  # no generated track raced: not shown to hold


def test_a_map_cycle_row_names_the_tracks_each_run_lost_and_by_how_much(tmp_path: Path) -> None:
    path = tmp_path / "run_studies.json"

    def race(t: float | None, ref: float) -> dict:
        return {"finished": t is not None, "race_time_s": t, "scripted_s": ref,
                "beats_scripted": t is not None and t < ref}

    runs = [{"seed": 0, "best": {"tracks": {"default": race(22.0, 22.84), "hairpins": race(23.35, 21.08),
                                            "gen:5": race(None, 18.0)}}},
            {"seed": 1, "best": {"tracks": {"default": race(None, 22.84), "hairpins": race(21.0, 21.08)}}},
            {"seed": 2, "best": {"tracks": {"default": race(20.0, 22.84), "hairpins": race(20.5, 21.08)}}}]
    summary = {"map_cycle": True, "runs": 3, "bundled": 5, "gen": 1, "best_beats_scripted": [1, 1, 2],
               "best_gen_finished": [0, 1, 1], "diverged": 0}
    path.write_text(json.dumps({"studies": [{"name": "map_cycle_runs", "config": "configs/sim_iqn_cycle.yaml",
                                             "date": "2026-11-29", "arms": [{"arm": "as_shipped", "runs": runs,
                                                                             "summary": summary}]}]}))
    (row,) = run_targets(path)
    # a generated track is not a bundled one; a run that beat every bundled track names none
    assert row[2].endswith("diverged 0; lost: seed 0: hairpins +2.27 s; seed 1: default not finished [seeds 0-2]")
    assert row[4] is False


def test_a_longer_run_holds_when_its_final_weights_race_no_slower_than_it_did_at_20_minutes(tmp_path: Path) -> None:
    path = tmp_path / "run_studies.json"
    at = {"minutes": 20, "frames": 700_000, "tracks": {"default": {"races": 7, "median_s": 23.4}}}
    run = {"seed": 0, "frames": 3_000_000, "at_minutes": at,
           "final": {"tracks": {"default": {"finished": True, "race_time_s": 21.52}}}}
    summary = {"track": "default", "runs": 1, "at_minutes": 20, "at_minutes_runs": 1, "final_no_slower_than_at": 1,
               "diverged": 0}
    study = {"name": "sim_iqn_long", "date": "2026-11-29 10:00 UTC", "config": "configs/sim_iqn.yaml",
             "budget": {"minutes": 80}, "arms": [{"arm": "as_shipped", "runs": [run], "summary": summary}]}
    path.write_text(json.dumps({"studies": [study]}))
    (row,) = run_targets(path)
    assert row[4] is True and "run longer (80 minutes)" in row[1]
    assert "seed 0: final 21.52 s after 3,000,000 frames, 23.40 s at 20 min (700,000 frames, median of 7 races)" in row[2]
    summary.update(final_no_slower_than_at=0)
    path.write_text(json.dumps({"studies": [study]}))
    assert run_targets(path)[0][4] is False
    summary.update(final_no_slower_than_at=1, diverged=1)
    path.write_text(json.dumps({"studies": [study]}))
    assert run_targets(path)[0][4] is False
    # a study that did not race the run at 20 minutes is shown, not judged
    del summary["at_minutes"]
    path.write_text(json.dumps({"studies": [study]}))
    assert run_targets(path)[0][4] is None and "not judged" in run_targets(path)[0][2]


def test_gpu_checks_give_a_target_row_per_check_from_its_latest_run_and_their_own_section(tmp_path: Path) -> None:
    from bench.__main__ import cuda_runs
    from bench.targets import cuda_targets

    rows = [
        {"check": "image network finishes on a GPU", "target": True, "result": "fail: 0 of 3", "holds": False,
         "date": "2026-01-01 00:00 UTC"},
        {"check": "image network finishes on a GPU", "target": True, "result": "pass: 3 of 3", "holds": True,
         "date": "2026-01-02 00:00 UTC"},
        {"check": "learner batches/s", "result": "77.4 batches/s", "date": "2026-01-02 00:00 UTC"},
    ]
    path = tmp_path / "cuda_runs.json"
    path.write_text(json.dumps(rows))
    assert cuda_targets(path) == [("`bench/cuda_check.sh`", "image network finishes on a GPU", "pass: 3 of 3",
                                   "2026-01-02 00:00 UTC", True)]
    section = "\n".join(cuda_runs(path))
    assert "## CUDA (a lent GPU machine)" in section and "77.4 batches/s" in section and "fail: 0 of 3" in section
    (tmp_path / "extended_runs.json").write_text("[]")
    text = "\n".join(targets_table(lambda name: None, tmp_path, {}))
    assert "| `bench/cuda_check.sh` | image network finishes on a GPU | pass: 3 of 3 |" in text
    assert cuda_targets(tmp_path / "missing.json") == []


def test_actor_rows_judge_the_fastest_exact_cpu_path_and_leave_gpu_rows_unmeasured(tmp_path: Path) -> None:
    (tmp_path / "extended_runs.json").write_text("[]")
    figures = {"best_cpu": {"guide160x120": {"path": "int8", "decisions_per_s": 250.0},
                            "sim_image48x36": {"path": "batch1", "decisions_per_s": 2500.0}},
               "cuda_guide_step_ms": "not measured",
               "targets": {"guide160x120_greedy_per_s_min": 200, "sim_image48x36_greedy_per_s_min": 3000,
                           "cuda_guide160x120_step_ms_max": 1.0}}
    results = {"actor": {"date": "2026-01-05 00:00 UTC", "figures": figures}}
    rows = [r for r in targets_table(results.get, tmp_path, {"actor": ""}) if r.startswith("| `actor`")]
    assert len(rows) == 3
    assert rows[0].endswith("| 250 decisions/s | 2026-01-05 00:00 UTC | yes |")
    assert rows[1].endswith("| 2,500 decisions/s | 2026-01-05 00:00 UTC | **no** |")
    assert "| - | 2026-01-05 00:00 UTC |" in rows[2] and "yes" not in rows[2]


HISTORY = Path(__file__).resolve().parents[1] / "bench" / "history"


def _history_copy(tmp_path: Path) -> Path:
    """The real history files, in a folder a test may change."""
    for path in HISTORY.glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path


def test_the_real_history_loses_no_row_and_the_heading_counts_every_one() -> None:
    from bench.targets import adoptions, issue_goal_targets, study_arms

    superseded: list = []
    rows = target_rows(lambda name: None, HISTORY, superseded)
    # every learner-fix arm is a row (the eight taken out once), marked as a comparison
    fix_rows = [r for r in rows if r[0] == "`bench/history/learner_fix_studies.json`"]
    assert len(fix_rows) == len(study_arms(HISTORY / "learner_fix_studies.json")) >= 8
    assert all(r[1].startswith("learner-fix comparison (issue 31)") for r in fix_rows)
    assert sum(r[4] is False for r in fix_rows) >= 6
    # the pretraining goal has its row, and it does not hold
    (pretrain,) = [r for r in issue_goal_targets(HISTORY / "issue_studies.json") if r[1].startswith("pretraining")]
    assert pretrain in rows and pretrain[4] is False
    # the recipe rows of a single seed judge files since replaced: listed as superseded, not counted
    assert adoptions(HISTORY / "run_studies.json")["sim_iqn.yaml"][1] == "ez_greedy"
    gone = [r for r in superseded if r[0] == "`bench/study/recipe.py`"]
    assert {r[1].split("`")[1] for r in gone} == {"sim_iqn.yaml", "sim_iqn_cycle.yaml"}
    assert all(r[2].startswith("superseded: ") and "1/1 seeds" in r[2] for r in gone)
    assert not any("1/1 seeds" in r[2] for r in rows if r[0] == "`bench/study/recipe.py`")
    # the 80-minute run was judged on the file before εz-greedy: superseded too
    assert any("run longer (80 minutes)" in r[1] for r in superseded)
    assert not any("run longer" in r[1] for r in rows)
    # the heading's count is every row of the table; the superseded ones are said and listed apart
    text = "\n".join(targets_table(lambda name: None, HISTORY, {}))
    held, failing = sum(r[4] is True for r in rows), sum(r[4] is False for r in rows)
    assert (f"{held} of {len(rows)} hold, {failing} do not, {len(rows) - held - failing} are not measured or not "
            f"decided; {len(superseded)} more rows judge recipes since replaced") in text
    table, _, below = text.partition("Superseded, not counted")
    assert table.count("\n| `") == len(rows) and below.count("\n| `") == len(superseded)


def test_the_real_seed_studies_state_their_seeds_and_their_divergence(tmp_path: Path) -> None:
    from bench.study.runs import rejudge_health

    rows = run_targets(HISTORY / "run_studies.json")
    assert rows and all(" [seeds " in r[2] for r in rows)
    # the map cycle is judged on every run of the arm the file took (seeds 0-4), not the last study's 2-4:
    # seed 1 lost hairpins
    (cycle,) = [r for r in rows if "sim_iqn_cycle.yaml" in r[1]]
    assert "[seeds 0-4]" in cycle[2] and "seed 1: hairpins +" in cycle[2] and cycle[4] is False
    # CartPole's goal says no divergence: the flags count, and say which bounds judged them; the latest
    # study ran the shipped arm alone on 10 seeds drawn before it (2026-12-02): it decides
    (cart,) = [r for r in rows if "cartpole_iqn.yaml" in r[1]]
    assert cart[1].endswith("no divergence")
    assert "diverged 0 [seeds 349928-349937]" in cart[2] and cart[4] is True
    # the study before it (2026-11-27) compared three arms on seeds 0-9: alone, it is not decided
    folder = _history_copy(tmp_path)
    data = json.loads((folder / "run_studies.json").read_text(encoding="utf-8"))
    data["studies"] = [s for s in data["studies"] if not (s["name"] == "cartpole_iqn_runs" and s["date"] > "2026-11-28")]
    (folder / "run_studies.json").write_text(json.dumps(data), encoding="utf-8")
    (cart,) = [r for r in run_targets(folder / "run_studies.json") if "cartpole_iqn.yaml" in r[1]]
    # judged by CartPole's own bounds (python -m bench.study health --q-limit 150, recorded): no flags;
    # but its arm was chosen among three on these seeds, so the row is not decided, never "holds"
    assert "diverged 0" in cart[2] and "[seeds 0-9]" in cart[2] and "health_limits" not in cart[2]
    assert "not decided: chosen among 3 arms" in cart[2] and cart[4] is None
    # the same study judged by the simulator's bounds (as recorded before the rejudge) fails on its flags
    i = max((k for k, s in enumerate(data["studies"]) if s["name"] == "cartpole_iqn_runs"),
            key=lambda k: data["studies"][k]["date"])
    data["studies"][i] = rejudge_health(data["studies"][i], None)
    (folder / "run_studies.json").write_text(json.dumps(data), encoding="utf-8")
    (cart,) = [r for r in run_targets(folder / "run_studies.json") if "cartpole_iqn.yaml" in r[1]]
    assert "diverged 10" in cart[2] and cart[4] is False
    # a study of that arm alone decides: its seeds judge it
    data["studies"][i] = rejudge_health(data["studies"][i], 150)
    data["studies"][i]["arms"] = [a for a in data["studies"][i]["arms"] if a["arm"] == "as_shipped"]
    (folder / "run_studies.json").write_text(json.dumps(data), encoding="utf-8")
    (cart,) = [r for r in run_targets(folder / "run_studies.json") if "cartpole_iqn.yaml" in r[1]]
    assert "diverged 0 [seeds 0-9]" in cart[2] and cart[4] is True


def test_a_recorded_outcome_of_a_test_no_longer_in_its_file_is_superseded(tmp_path: Path) -> None:
    path = tmp_path / "extended_runs.json"
    path.write_text(json.dumps([
        {"test": "tests/test_learning_bench.py::test_cycle_policy_beats_the_scripted_driver_on_three_tracks",
         "outcome": "pass (4 of the 3 needed)", "date": "2026-11-24 22:48 UTC"},
        {"test": "tests/test_learning_sim.py::test_default_run_finishes_the_default_track", "outcome": "pass: 23.07 s",
         "date": "2026-11-27 15:32 UTC"}]))
    superseded: list = []
    rows = extended_targets(path, superseded)
    assert [r[0] for r in rows] == ["`tests/test_learning_sim.py`"]
    assert len(superseded) == 1 and superseded[0][2].startswith("superseded: the test is no longer in its file")
