"""Learning test (extended): IQN on CartPole through the real path with UNPACED workers.

`rulka run configs/cartpole_iqn.yaml --workers 2` (server, trainer and two workers as processes
over TLS on loopback; no worker.max_steps_per_s): the trainer's rate limiter holds 8 samples per
insert by withholding credit from the workers, so the run must learn as the single-process test
does (tests/test_learning_iqn.py): a greedy average of 475 over 20 episodes within its 200,000
env steps. The policy the trainer writes at each checkpoint is evaluated while the run goes on:
every 5 s here, about every 5k frames on an idle 2-core machine, as often as the single-process
test evaluates (every 20 s was about 4x more rarely, 2026-11-24). Outcomes are recorded in
BENCHMARKS.md (learning runs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.policy_loop import greedy_return as _greedy_return

REPO = Path(__file__).resolve().parents[1]
MAX_FRAMES = 200_000  # the single-process test's budget
MINUTES = 40


def _frames(run_dir: Path) -> int:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines() if (run_dir / "metrics.jsonl").exists() else []
    for line in reversed(lines):
        try:
            return int(json.loads(line)["metrics"]["charts/samples_received"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.integration
@pytest.mark.timeout(MINUTES * 60 + 300)
def test_unpaced_cartpole_run_reaches_475(tmp_path):
    import gymnasium as gym
    import torch

    from rulka.envs.sim.policy import load_policy

    torch.set_num_threads(1)
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_SILENT": "true"}
    err = open(tmp_path / "run.err", "wb")  # noqa: SIM115 - a file, never an undrained pipe: a full
    # stderr pipe blocked `rulka run` in its stop message and the test killed it (2026-11-23)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rulka.cli", "run", str(REPO / "configs" / "cartpole_iqn.yaml"), "--workers", "2",
         "--minutes", str(MINUTES), "--run-dir", str(run_dir), "--set", "logging.wandb.enabled=false",
         "--set", "logging.tensorboard.enabled=false", "--set", "trainer.checkpoint_every_s=5"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err,
        start_new_session=True)
    policy = run_dir / "weights" / "policy.safetensors"
    best, frames, seen = 0.0, 0, 0.0
    history = []
    try:
        while proc.poll() is None:
            time.sleep(5)
            if not policy.exists() or policy.stat().st_mtime == seen:
                continue
            seen = policy.stat().st_mtime
            frames = _frames(run_dir)
            actor, _ = load_policy(run_dir)
            score = _greedy_return(gym.make("CartPole-v1"), actor, 20, seed=100_000)
            history.append((frames, round(score, 1)))
            best = max(best, score)
            if best >= 475 or frames > MAX_FRAMES:
                break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        err.close()
    print(f"(frames, greedy) at each checkpoint: {history}")
    assert best >= 475, f"best greedy average {best} by {frames} frames; history {history}"
    assert frames <= MAX_FRAMES
