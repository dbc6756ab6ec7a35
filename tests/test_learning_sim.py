"""Learning test (slow): the README's main command learns to drive.

`rulka run configs/sim_iqn.yaml` (server, trainer and two unpaced workers as real processes over
TLS on loopback) for 200,000 env frames; then the final weights the trainer saved (weights/, not best/) drive
the default track greedily, from the start line and from four moved starts, and the start line's race and the
moved starts' median race must each finish within ``BAR`` x the scripted driver's time. The budget is in frames, not minutes: the trainer's
rate limiter holds the replay ratio, so the learning per frame is the same on a busy machine, only
slower. The minutes cap is a safety net for a very slow machine.

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
# the recorded end-weights races of this test on the current recipe: 24.66 s (1.08x, 2026-11-27 12:38, before
# lr_cooldown_from_best) and 23.07 s (1.01x, 15:32): 1.6 s of margin at the start line. No race from moved starts
# is recorded at this budget (200k frames); the end weights of the README study's 20-minute runs raced them at
# 0.89-1.01x (median of 5 each, seeds 10-14)
BAR = 1.15


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
