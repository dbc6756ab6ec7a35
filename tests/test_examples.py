"""The example scripts run as a user would run them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_custom_pipeline_example_trains_and_workers_follow(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "custom_pipeline.py"), "--updates", "3",
                          "--workers", "1", "--time-step", "0.01"],
                         capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    m = re.search(r"updates: (\d+), weights version: (\d+), episodes: (\d+)", out.stdout)
    assert m, out.stdout
    updates, version, episodes = map(int, m.groups())
    # EpisodeMemory hands 4 episodes per update; one publish at start plus one per update
    assert updates == 3 and version == 4 and episodes >= 12
    worker_version = int(re.search(r"local-0: \d+ episodes, running weights v(\d+)", out.stdout).group(1))
    assert worker_version >= 2  # the worker followed the published weights
    assert list(tmp_path.iterdir()) == []  # nothing written: one-process mode without a run folder
