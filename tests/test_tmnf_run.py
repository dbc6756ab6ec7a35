"""`rulka run configs/tmnf_fake.yaml`: the TMNF worker path end to end through the real roles
(server, trainer, two worker processes, TLS on loopback), each worker driving its own fake game
through rulka's TMInterface protocol on a local socket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FRAMES = 200_000  # configs/sim_iqn.yaml's measured budget
MINUTES = 40  # cap only


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line)["metrics"] for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]


def _run(tmp_path: Path, minutes: float, *sets: str, frames: int | None = None) -> Path:
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_SILENT": "true"}
    cmd = [sys.executable, "-m", "rulka.cli", "run", str(ROOT / "configs" / "tmnf_fake.yaml"), "--workers", "2",
           "--minutes", str(minutes), *(["--frames", str(frames)] if frames else []), "--run-dir", str(run_dir), "--set", "logging.wandb.enabled=false",
           "--set", "logging.tensorboard.enabled=false", "--set", "logging.progress=never", *sets]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=minutes * 60 + 600, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return run_dir


@pytest.mark.slow
@pytest.mark.integration
def test_tmnf_fake_runs_end_to_end(tmp_path):
    run_dir = _run(tmp_path, 1, "--set", "logging.log_every_s=5")
    accepted = [line.split()[0] for line in (run_dir / "accepted.log").read_text().splitlines() if line]
    assert set(accepted) == {"worker0", "worker1"}  # both workers' TMNF episodes reached the trainer
    merged: dict = {}
    for m in _metrics(run_dir):
        merged.update(m)
    assert merged["charts/samples_received"] > 500
    assert any(k.startswith("charts/default/") for k in merged)  # per-map metrics from the fake's map


@pytest.mark.extended
@pytest.mark.integration
@pytest.mark.timeout(MINUTES * 60 + 900)
def test_tmnf_fake_learns_to_finish_the_default_track(tmp_path):
    """`rulka run configs/tmnf_fake.yaml --workers 2` for the frame budget of configs/sim_iqn.yaml
    (200,000 frames); then the saved policy drives the fake game greedily and must finish. Outcome
    in bench/history/extended_runs.json and BENCHMARKS.md."""
    import torch

    from rulka.config import config_from_dict
    from rulka.envs.sim.policy import load_policy
    from rulka.envs.tmnf.env import TmnfEnv

    run_dir = _run(tmp_path, MINUTES, frames=FRAMES)
    torch.set_num_threads(1)
    actor, spec = load_policy(run_dir)
    env = TmnfEnv(config_from_dict(json.loads(spec["run_config_json"])))
    results = []
    try:
        for _ in range(3):
            obs, info = env.reset()
            done = False
            while not done:
                obs, _, terminated, truncated, info = env.step(actor.act(obs, test=True))
                done = terminated or truncated
            results.append((bool(info.get("finished")), info.get("race_time_ms"), info.get("progress_m")))
    finally:
        env.close()
    assert any(finished for finished, _, _ in results), f"greedy episodes (finished, race ms, metres): {results}"
