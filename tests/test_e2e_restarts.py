"""End to end with real processes and real TLS on loopback: rulka-server, rulka-trainer and two
rulka-worker processes. The trainer, then the server, then a worker are killed with SIGKILL and
restarted; every segment a worker produced must reach the trainer exactly once, and the workers
must end on the newest weights."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rulka.net.keys import add_worker, generate_keys
from rulka.server.server import Server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "cartpole_simple.yaml"
SETS = ["trainer.publish_every_updates=1000000000",  # publishes only at start: versions are predictable
        "trainer.checkpoint_every_s=4", "worker.segment_max_steps=50", "logging.wandb.enabled=false",
        "logging.tensorboard.enabled=false", "logging.progress=never", "trainer.memory_kwargs.min_samples_to_train=200"]


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def accepted(run_dir: Path) -> list[tuple[str, int]]:
    path = run_dir / "accepted.log"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        name, seq = line.split()
        out.append((name, int(seq)))
    return out


def kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait(10)


class Procs:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.keys = tmp / "keys"
        generate_keys(self.keys, [])
        for name in ("w0", "w1"):
            add_worker(self.keys, name)
        self.run_dir = tmp / "run"
        self.server = None
        self.port = 0
        self.trainer = None
        self.workers: dict[str, subprocess.Popen] = {}
        self.logs = []

    def _log(self, name):
        f = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115
        self.logs.append(f)
        return f

    def start_server(self):
        self.server = Server({}, self.keys, bind_host="127.0.0.1", port=self.port).start()
        self.port = self.server.port

    def start_trainer(self, resume=False):
        sets = [a for s in SETS for a in ("--set", s)]
        cmd = [sys.executable, "-m", "rulka.trainer.cli", "--config", str(CONFIG), *sets, "--keys", str(self.keys),
               "--server", f"127.0.0.1:{self.port}"]
        cmd += ["--resume", str(self.run_dir)] if resume else ["--run-dir", str(self.run_dir)]
        # a session of its own, so that SIGKILL takes the role's transport helper process too,
        # as a crash of the machine would
        self.trainer = subprocess.Popen(cmd, stdout=self._log("trainer"), stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def start_worker(self, name):
        self.workers[name] = subprocess.Popen(
            [sys.executable, "-m", "rulka.worker.cli", "--server", f"127.0.0.1:{self.port}",
             "--keys", str(self.keys / "bundles" / name), "--state-dir", str(self.tmp / "state" / name),
             "--produced-log", str(self.tmp / f"produced-{name}.txt"), "--max-steps-per-s", "300"],
            stdout=self._log(name), stderr=subprocess.STDOUT, start_new_session=True)

    def cleanup(self):
        procs = [p for p in [self.trainer, *self.workers.values()] if p is not None]
        for p in procs:
            kill_group(p)
        if self.server is not None:
            self.server.stop()
        for f in self.logs:
            f.close()


def test_kill_and_restart_every_role_loses_and_duplicates_nothing(tmp_path):
    procs = Procs(tmp_path)
    try:
        procs.start_server()
        procs.start_trainer()
        for name in ("w0", "w1"):
            procs.start_worker(name)

        def grows(n):
            return lambda: len(accepted(procs.run_dir)) >= n

        wait_for(grows(20), 60, "first segments")
        wait_for(lambda: (procs.run_dir / "checkpoints" / "latest.json").exists(), 30, "a checkpoint")

        # 1. the trainer dies without warning, and comes back from its checkpoint + journal
        kill_group(procs.trainer)
        n = len(accepted(procs.run_dir))
        procs.start_trainer(resume=True)
        wait_for(grows(n + 20), 60, "segments after the trainer restart")

        # 2. the server dies; the workers keep collecting, then resend when it is back
        os.kill(procs.server.pid, signal.SIGKILL)
        procs.server.stop()
        time.sleep(2)
        n = len(accepted(procs.run_dir))
        procs.start_server()
        wait_for(grows(n + 20), 60, "segments after the server restart")

        # 3. a worker dies in the middle of an episode and restarts from its state folder
        kill_group(procs.workers["w1"])
        before = max(int(s) for s in (tmp_path / "produced-w1.txt").read_text().split())
        procs.start_worker("w1")
        wait_for(lambda: len([1 for w, seq in accepted(procs.run_dir) if w == "w1" and seq > before]) >= 10, 90,
                 "segments produced by the restarted worker")

        # stop the workers cleanly: they wait for their last acknowledgements
        for p in procs.workers.values():
            p.send_signal(signal.SIGINT)
        for p in procs.workers.values():
            assert p.wait(60) == 0
        procs.trainer.send_signal(signal.SIGINT)
        assert procs.trainer.wait(60) == 0
    finally:
        procs.cleanup()

    got = accepted(procs.run_dir)
    dupes = [k for k, c in Counter(got).items() if c > 1]
    assert not dupes, f"segments accepted twice: {dupes[:10]}"
    for name in ("w0", "w1"):
        produced = [int(s) for s in (tmp_path / f"produced-{name}.txt").read_text().split()]
        assert len(produced) == len(set(produced))  # a restarted worker never reuses a number
        missing = set(produced) - {seq for w, seq in got if w == name}
        assert not missing, f"{name}: {len(missing)} produced segments never reached the trainer"
        # the trainer published v1, then v2 after its restart: both workers end on v2
        log = (tmp_path / f"{name}.log").read_text()
        assert re.findall(r"weights v(\d+)", log)[-1] == "2", log[-2000:]
    trainer_log = (tmp_path / "trainer.log").read_text()
    assert "weights v2;" in trainer_log


def test_worker_with_a_damaged_or_lost_state_file_reuses_no_number(tmp_path):
    """A worker stopped cleanly (nothing unacknowledged), whose worker_state.json is then damaged,
    and later deleted with its folder: each restart continues above what the trainer accepted."""
    procs = Procs(tmp_path)
    state = tmp_path / "state" / "w0"
    produced_log = tmp_path / "produced-w0.txt"

    def w0_accepted() -> list[int]:
        return [seq for w, seq in accepted(procs.run_dir) if w == "w0"]

    def run_until_more(n: int) -> None:
        procs.start_worker("w0")
        before = len(w0_accepted())
        wait_for(lambda: len(w0_accepted()) >= before + n, 90, f"{n} more segments from w0")
        procs.workers["w0"].send_signal(signal.SIGINT)
        assert procs.workers["w0"].wait(60) == 0  # it waited for its last acknowledgements

    try:
        procs.start_server()
        procs.start_trainer()
        run_until_more(6)
        assert not list((state / "unacked").glob("*.seg"))
        (state / "worker_state.json").write_bytes(b"\x00" * 17)  # zero-filled by a crash
        run_until_more(6)
        shutil.rmtree(state)
        run_until_more(6)
        procs.trainer.send_signal(signal.SIGINT)
        assert procs.trainer.wait(60) == 0
    finally:
        procs.cleanup()
    produced = [int(s) for s in produced_log.read_text().split()]
    got = w0_accepted()
    assert len(produced) == len(set(produced)), "a restarted worker reused sequence numbers"
    assert sorted(got) == sorted(produced), "produced and accepted segments differ (lost or dropped as duplicates)"
