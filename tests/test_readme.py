"""The README keeps its limits and takes its figures from the targets (lesson 15: a limit met once
is kept by a check; one source of numbers)."""

from __future__ import annotations

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
