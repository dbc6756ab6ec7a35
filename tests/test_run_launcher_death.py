"""`rulka run` killed outright (SIGKILL, a closed console): the roles it started notice the end of
the pipe it held open and stop by themselves, instead of running on without a parent (a hung
test's roles ran on for 1.7 hours in one CI run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next((ln for ln in (entry / "status").read_text().splitlines() if ln.startswith("State:")), "")
        except OSError:
            continue
        if text in cmdline and "zombie" not in state:
            pids.append(int(entry.name))
    return pids


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="lists processes through /proc")
def test_roles_stop_when_the_launcher_is_killed(tmp_path):
    run_dir = tmp_path / "run"
    with open(tmp_path / "run.err", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rulka.cli", "run", str(ROOT / "configs" / "cartpole_simple.yaml"), "--workers", "1",
             "--minutes", "5", "--run-dir", str(run_dir), "--set", "logging.wandb.enabled=false",
             "--set", "logging.progress=never"],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 120
        accepted = run_dir / "accepted.log"
        while not (accepted.exists() and accepted.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "run.err").read_text()[-2000:]
            time.sleep(0.5)
        roles = _processes_mentioning(str(run_dir))
        assert len(roles) >= 3  # server, trainer, worker (and their network children)
        proc.send_signal(signal.SIGKILL)  # no clean stop from the launcher
        proc.wait(10)
        deadline = time.monotonic() + 90
        while _processes_mentioning(str(run_dir)) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = _processes_mentioning(str(run_dir))
    finally:
        for pid in _processes_mentioning(str(run_dir)):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
    assert left == [], f"roles still running 90 s after the launcher died: {left}"
    # the trainer took its normal Ctrl-C path: a final checkpoint exists
    assert (run_dir / "checkpoints" / "latest.json").exists()
