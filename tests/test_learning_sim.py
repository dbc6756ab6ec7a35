"""Learning test (slow): the README's main command learns to drive.

`rulka run configs/sim_iqn.yaml` (server, trainer and two unpaced workers as real processes over
TLS on loopback) for 200,000 env frames; then the final weights the trainer saved (weights/, not best/) drive
the default track greedily, from the start line and from four moved starts, and the start line's race and the
moved starts' median race must each finish within ``BAR`` x the scripted driver's time. The budget is
in frames, not minutes: the trainer's rate limiter holds the replay ratio, so the learning per frame is
the same on a busy machine, only slower. The minutes cap is a safety net for a very slow machine. A
second test runs the README's command itself (20 minutes) and holds it to the README's 1.10x.

Extended, not in CI (about 2.5 minutes on an idle 2-core machine, 2026-11-27; 9 minutes on a loaded
one). Its history: on 2026-11-23, before double DQN and the learning-rate cooldown, one run finished
2 of 3 greedy tries and the next plateaued near 209 m. How reliable the recipe is across runs is
bench/study/runs.py's seed table (BENCHMARKS.md, "Repeated runs"); outcomes of this test are in
bench/history/extended_runs.json.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from roles_helpers import assert_race_time_within, greedy_sim_results

REPO = Path(__file__).resolve().parents[1]
FRAMES = 200_000
MINUTES = 30  # cap only
# The end weights' races of this test on the current recipe: 23.07 s (1.01x the scripted driver, 2026-11-27, idle
# machine), 24.66 s (1.08x, the same day, before lr_cooldown_from_best) and, on 2026-12-02 at load 4-14, 31.48 s
# from the start line and 28.32-28.44 s from 4 moved starts (1.38x and 1.24x): at 200k frames the recipe finishes
# from every start, but its time varies by a third. BAR is the strongest bar the three runs meet with margin
# (2.8 s over the slowest); the README's claim (1.10x, after 20 minutes) is test_readme_run_races_within_its_claim.
BAR = 1.50
README_MINUTES = 20
README_BAR = 1.10  # the README study's end weights (seeds 10-14): 0.89-1.00x from the start line, 0.89-1.01x moved


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.integration
@pytest.mark.timeout(MINUTES * 60 + 900)
def test_default_run_finishes_the_default_track(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_SILENT": "true"}
    proc = subprocess.run(
        [sys.executable, "-m", "rulka.cli", "run", str(REPO / "configs" / "sim_iqn.yaml"), "--workers", "2",
         "--frames", str(FRAMES), "--minutes", str(MINUTES), "--run-dir", str(run_dir), "--set", "logging.wandb.enabled=false",
         "--set", "logging.tensorboard.enabled=false"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=MINUTES * 60 + 600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    assert_race_time_within(greedy_sim_results(run_dir), BAR)


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.integration
@pytest.mark.timeout(README_MINUTES * 60 + 900)
def test_readme_run_races_within_its_claim(tmp_path):
    """The README's command (20 minutes, 2 workers): its end weights race the default track within
    1.10x the scripted driver from the start line and (the median of 4) from moved starts. The
    README study's 5 runs (2026-11-29, seeds 10-14) met it with 9% or more to spare."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_SILENT": "true"}
    proc = subprocess.run(
        [sys.executable, "-m", "rulka.cli", "run", str(REPO / "configs" / "sim_iqn.yaml"), "--workers", "2",
         "--minutes", str(README_MINUTES), "--run-dir", str(run_dir), "--set", "logging.wandb.enabled=false",
         "--set", "logging.tensorboard.enabled=false"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=README_MINUTES * 60 + 600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_race_time_within(greedy_sim_results(run_dir), README_BAR)
