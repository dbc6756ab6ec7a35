"""`rulka run configs/tm2020_fake.yaml`: the TrackMania 2020 worker path end to end through the real
roles (server, trainer, two worker processes, TLS on loopback), each worker driving the fake game
over the plugin's TCP protocol in rtgym's 20 Hz real-time loop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RULKA = [sys.executable, "-c", "import sys; from rulka.cli import main; sys.exit(main())"]


pytestmark = pytest.mark.filterwarnings("ignore:Time-step timed out")


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line)["metrics"] for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]


@pytest.mark.slow
@pytest.mark.integration
def test_tm2020_fake_runs_end_to_end(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [*RULKA, "run", str(ROOT / "configs" / "tm2020_fake.yaml"), "--workers", "2", "--minutes", "1",
           "--run-dir", str(run_dir), "--set", "logging.wandb.enabled=false", "--set", "logging.progress=never",
           "--set", "logging.log_every_s=5", "--set", "environment.tm2020.fake_countdown_s=0.3"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    accepted = [line.split()[0] for line in (run_dir / "accepted.log").read_text().splitlines() if line]
    assert set(accepted) == {"worker0", "worker1"}  # both workers' tm2020 episodes reached the trainer
    merged: dict = {}
    for m in _metrics(run_dir):
        merged.update(m)
    assert merged["charts/samples_received"] > 200
    for w in ("worker0", "worker1"):
        # the real-time loop reports its timing: a 50 ms step, jitter well under a step
        assert 45 < merged[f"perf/{w}/step_ms_p50"] < 60
        assert merged[f"perf/{w}/jitter_ms_p50"] < 25
        assert f"perf/{w}/overruns" in merged and merged[f"perf/{w}/faults_plugin_silent"] == 0


@pytest.mark.extended
@pytest.mark.integration
@pytest.mark.timeout(45 * 60)
def test_tm2020_fake_learns_to_finish_the_default_track(tmp_path):
    """`rulka run configs/tm2020_fake.yaml --workers 2` until the exploring workers finish the
    default track, then the greedy policy drives it through the same fake game. The fake game
    runs 4x faster than the real one (each worker's rtgym loop at 80 Hz, the agent sees 50 ms of
    game time per step as at 20 Hz, and telemetry records per game frame as from a game at 60
    FPS): the recipe first finished at ~85k samples (11 minutes here, ~40 minutes of a real-time
    run, which does not fit a test session). Outcome recorded in BENCHMARKS.md."""
    run_dir = tmp_path / "run"
    cmd = [*RULKA, "run", str(ROOT / "configs" / "tm2020_fake.yaml"), "--workers", "2", "--minutes", "30",
           "--run-dir", str(run_dir), "--set", "environment.tm2020.fake_time_scale=4",
           "--set", "logging.wandb.enabled=false", "--set", "logging.progress=never"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=40 * 60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    finish = [m["charts/finish_rate"] for m in _metrics(run_dir) if "charts/finish_rate" in m]
    assert finish and max(finish[-20:]) >= 0.5
    ev = subprocess.run([*RULKA, "eval", str(run_dir), "--episodes", "2", "--json"], capture_output=True, text=True,
                        timeout=300, cwd=tmp_path)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert json.loads(ev.stdout)["overall"]["finished"] >= 1, ev.stdout
