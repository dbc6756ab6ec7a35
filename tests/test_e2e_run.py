"""`rulka run`: the README's main command starts server, trainer and workers, stops cleanly on
its own after --minutes, and leaves a resumable run folder."""

from __future__ import annotations

import json
import os
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
                 "logs/worker0.log", "logs/worker1.log", "logs/trainer.log", "keys/trainer.key"):
        assert (run_dir / name).exists(), name
    accepted = (run_dir / "accepted.log").read_text().split("\n")
    assert {line.split()[0] for line in accepted if line} == {"worker0", "worker1"}
    assert "resumed from" not in out.stderr
    first = json.loads((run_dir / "checkpoints" / "latest.json").read_text())["number"]
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]

    # continue the same run (same keys, same run id), then stop it the way a user does: Ctrl-C
    lines_before = len(accepted)
    # started as a non-interactive shell starts `rulka run ... &`: SIGINT ignored, inherited by the
    # launcher and the roles it starts; Ctrl-C (SIGINT) must still stop the run cleanly
    proc = subprocess.Popen([*rulka, "run", str(ROOT / "configs" / "cartpole_simple.yaml"), "--workers", "1",
                             "--resume", str(run_dir), "--set", "logging.wandb.enabled=false",
                             "--set", "logging.progress=never"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
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
    # the trainer's own log, both invocations, in the run folder
    said = (run_dir / "logs" / "trainer.log").read_text(encoding="utf-8")
    assert said.count(f"trainer: run {run_id} in {run_dir}") == 2, said[-3000:]
    assert said.count("rulka.trainer: trainer: ") >= 2 and said.count(" updates, weights v") == 2, said[-3000:]
    # each worker's lines are in logs/<name>.log once: rulka run turns the state folder's worker.log off
    assert "episodes" in (run_dir / "logs" / "worker0.log").read_text(encoding="utf-8")
    assert not list((run_dir / "workers").glob("*/worker.log*"))


def descendants(pid: int) -> dict[int, tuple[int, str]]:
    """Every live process below ``pid`` (children, grandchildren...): pid -> (parent, command line)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = {}, [pid]
    while frontier:
        p = frontier.pop()
        for child, parent in parents.items():
            if parent == p and child not in found:
                try:
                    cmd = (Path("/proc") / str(child) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    cmd = ""
                found[child] = (p, cmd)
                frontier.append(child)
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to list the processes of a run")
def test_rulka_run_stop_is_bounded_when_the_trainer_hangs(tmp_path):
    """Ctrl-C with a trainer that cannot act on it (stopped, as under heavy load): `rulka run`
    kills it after --stop-timeout, and no process of the run is left behind."""
    from test_resilience_lifetime import pid_alive

    run_dir = tmp_path / "run"
    rulka = [sys.executable, "-c", "import sys; from rulka.cli import main; sys.exit(main())"]
    proc = subprocess.Popen([*rulka, "run", str(ROOT / "configs" / "cartpole_simple.yaml"), "--workers", "1",
                             "--run-dir", str(run_dir), "--stop-timeout", "5", "--set", "logging.wandb.enabled=false",
                             "--set", "logging.progress=never"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        accepted = run_dir / "accepted.log"
        while not accepted.exists() or len(accepted.read_text().split("\n")) < 4:
            assert time.monotonic() < deadline and proc.poll() is None, "the run took no segment"
            time.sleep(0.5)
        kids = descendants(proc.pid)
        trainer = [p for p, (parent, cmd) in kids.items() if "rulka.trainer.cli" in cmd and parent == proc.pid]
        assert len(trainer) == 1 and len(kids) >= 5, kids  # server, trainer, worker, two network children
        os.kill(trainer[0], signal.SIGSTOP)  # hung: SIGINT stays pending, SIGKILL still works
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            for p in descendants(proc.pid):
                os.kill(p, signal.SIGKILL)
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert elapsed < 5 + 15, f"stopped in {elapsed:.1f} s"  # --stop-timeout, the server's 5 s, slack
    assert "did not stop cleanly" in err
    left = [f"{p}: {cmd}" for p, (_, cmd) in kids.items() if pid_alive(p)]
    assert not left, left
