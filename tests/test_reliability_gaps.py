"""The last reliability gaps (issue 30), with real processes and real TLS on loopback: a memory that
cannot store a segment stops the trainer without losing it; damaged keys and certificates are one
line and exit 2 on every role; removing an operator's key closes its open connection."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from test_e2e_restarts import SETS, Procs, accepted, wait_for

from rulka.trainer.journal import read_journal

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parent


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


class MemoryProcs(Procs):
    """Procs whose trainer takes extra ``--set``s and finds the test plugins (``roles_helpers``)."""

    def start_trainer(self, resume=False, extra=()):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
        sets = [a for s in [*SETS, *extra] for a in ("--set", s)]
        cmd = [sys.executable, "-m", "rulka.trainer.cli", "--config",
               str(TESTS.parent / "configs" / "cartpole_simple.yaml"), *sets, "--keys", str(self.keys),
               "--server", f"127.0.0.1:{self.port}"]
        cmd += ["--resume", str(self.run_dir)] if resume else ["--run-dir", str(self.run_dir)]
        self.trainer = subprocess.Popen(cmd, stdout=self._log("trainer"), stderr=subprocess.STDOUT,
                                        start_new_session=True, env=env)


def journaled(run_dir: Path) -> list[tuple[str, int]]:
    return [(w, s) for path in sorted((run_dir / "journal").glob("journal-*.bin"))
            for w, s, _ in read_journal(path, repair=False)]


@pytest.mark.slow
def test_a_memory_that_cannot_allocate_stops_the_trainer_and_loses_nothing(tmp_path):
    procs = MemoryProcs(tmp_path)
    try:
        procs.start_server()
        procs.start_trainer(extra=["trainer.memory=roles_helpers:UnallocatableMemory"])
        procs.start_worker("w0")
        rc = procs.trainer.wait(90)
        log = (tmp_path / "trainer.log").read_text()
        assert rc == 2, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        [line] = error_lines(log)
        assert "cannot allocate" in line and "MemoryError" in line and f"--resume {procs.run_dir}" in line
        # nothing was stored and no checkpoint claims otherwise; what was accepted is in the journal
        assert not (procs.run_dir / "checkpoints" / "latest.json").exists()
        got = accepted(procs.run_dir)
        assert got and sorted(journaled(procs.run_dir)) == sorted(got)

        # the config fixed, the resumed trainer replays the journal into the memory; the worker
        # resends what was never acknowledged, and nothing is lost or stored twice
        procs.start_trainer(resume=True)
        wait_for(lambda: len(accepted(procs.run_dir)) >= len(got) + 10, 90, "segments after the resume")
        procs.workers["w0"].send_signal(signal.SIGINT)
        assert procs.workers["w0"].wait(60) == 0
        procs.trainer.send_signal(signal.SIGINT)
        assert procs.trainer.wait(60) == 0
    finally:
        procs.cleanup()
    got = accepted(procs.run_dir)
    assert not [k for k, c in Counter(got).items() if c > 1]
    produced = [int(s) for s in (tmp_path / "produced-w0.txt").read_text().split()]
    assert set(produced) <= {seq for _, seq in got}
    summary = [x for x in (tmp_path / "trainer.log").read_text().splitlines() if x.startswith("trainer: ")][-1]
    assert int(summary.split()[1]) > 0  # "trainer: N samples, ..."


def test_a_memory_size_key_too_large_for_this_machine_is_one_line_at_validate_and_start(tmp_path):
    for args in (["-m", "rulka.cli", "config", "validate", "configs/cartpole_simple.yaml"],
                 ["-m", "rulka.trainer.cli", "--config", "configs/cartpole_simple.yaml", "--keys",
                  str(tmp_path / "none"), "--run-dir", str(tmp_path / "run")]):
        r = subprocess.run([sys.executable, *args, "--set", "trainer.memory_kwargs.capacity=1e12"],
                           capture_output=True, text=True, timeout=120, cwd=TESTS.parent)
        assert r.returncode == 2, r.stderr[-3000:]
        [line] = r.stderr.strip().splitlines()
        assert "`trainer.memory_kwargs.capacity`" in line and "TiB" in line, line
    assert not (tmp_path / "run").exists()
