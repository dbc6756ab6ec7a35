"""`rulka run`: the README's main command starts server, trainer and workers, stops cleanly on
its own after --minutes, and leaves a resumable run folder."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def test_rulka_run_then_resume(tmp_path):
    run_dir = tmp_path / "run"
    rulka = [sys.executable, "-c", "import sys; from rulka.cli import main; sys.exit(main())"]
    # stopped by its frame budget (--minutes is only the safety net here)
    cmd = [*rulka, "run", str(ROOT / "configs" / "cartpole_simple.yaml"), "--workers", "2",
           "--frames", "3000", "--minutes", "3", "--run-dir", str(run_dir), "--set", "logging.wandb.enabled=false",
           "--set", "logging.progress=never"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "3000 frames received, stopping" in out.stderr
    assert f"outputs in {run_dir}" in out.stderr
    for name in ("config.resolved.yaml", "metrics.jsonl", "accepted.log", "checkpoints/latest.json",
                 "logs/worker0.log", "logs/worker1.log", "keys/trainer.key"):
        assert (run_dir / name).exists(), name
    accepted = (run_dir / "accepted.log").read_text().split("\n")
    assert {line.split()[0] for line in accepted if line} == {"worker0", "worker1"}
    assert "resumed from" not in out.stderr
    first = json.loads((run_dir / "checkpoints" / "latest.json").read_text())["number"]

    # continue the same run (same keys, same run id), then stop it the way a user does: Ctrl-C
    lines_before = len(accepted)
    proc = subprocess.Popen([*rulka, "run", str(ROOT / "configs" / "cartpole_simple.yaml"), "--workers", "1",
                             "--resume", str(run_dir), "--set", "logging.wandb.enabled=false",
                             "--set", "logging.progress=never"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while len((run_dir / "accepted.log").read_text().split("\n")) < lines_before + 5:
            assert time.monotonic() < deadline and proc.poll() is None, "the resumed run took no new segment"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "stopping" in err and f"--resume {run_dir}" in err
    assert json.loads((run_dir / "checkpoints" / "latest.json").read_text())["number"] > first
