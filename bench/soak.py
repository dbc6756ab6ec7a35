"""Soak: a multi-minute run of real processes over TLS on loopback while things go wrong.

``rulka-server``, ``rulka-trainer`` (cartpole, the cheapest learner) and N ``rulka-worker``
processes run for ``--minutes``; on a schedule the script

1. stops the trainer with SIGSTOP for 10 s, then SIGCONT (a machine that stalls),
2. kills worker 0 with SIGKILL and restarts it from its state folder,
3. kills the relay with SIGKILL and starts it again on the same port,
4. kills the trainer with SIGKILL and resumes it from its checkpoint and journal,

then stops everything cleanly and prints one JSON object: segments produced and accepted,
lost (produced, never accepted) and duplicated (accepted twice), each worker's share of the
accepted segments against a fair share, the time from each event until segments flow again,
and the relay's peak resident memory against a stated bound (its trainer queue, set to 128 MiB
here, plus 128 MB). The issue's target is ``--workers 16 --minutes 10``;
the default is smaller so that it fits a shared 2-core machine (``--quick``: 2 workers, 1.5 min).
Linux only (signals, ``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG = REPO_ROOT / "configs" / "cartpole_simple.yaml"
# The relay's memory bound this soak checks: what it may queue for an absent trainer
# (network.server_queue_bytes, lowered from 1 GiB to 128 MiB here so the bound means something)
# plus 128 MB for the process itself and its connections' buffers (~60 MB idle).
RELAY_QUEUE_MB = 128
RELAY_RSS_BOUND_MB = RELAY_QUEUE_MB + 128
SETS = ["trainer.checkpoint_every_s=10", "worker.segment_max_steps=50", "logging.wandb.enabled=false",
        "logging.tensorboard.enabled=false", "logging.progress=never"]


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Soak:
    def __init__(self, root: Path, workers: int, steps_per_s: float) -> None:
        from rulka.net.keys import add_worker, generate_keys
        from rulka.net.tls import free_local_port

        self.root = root
        self.keys = root / "keys"
        generate_keys(self.keys, [])
        self.names = [f"w{i}" for i in range(workers)]
        for name in self.names:
            add_worker(self.keys, name)
        self.port = free_local_port()
        self.run_dir = root / "run"
        self.steps_per_s = steps_per_s
        self.server: subprocess.Popen | None = None
        self.trainer: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}
        self.logs: list[Any] = []
        self._accepted_pos = 0
        self.first_seen: dict[tuple[str, int], float] = {}  # (worker, seq) -> when first accepted

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - closed at the end
        self.logs.append(log)
        # a session of its own: SIGKILL takes the role's network child too, as a crash would
        return subprocess.Popen([sys.executable, "-m", *cmd], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def start_server(self) -> None:
        self.server = self._spawn("server", ["rulka.server.cli", "--keys", str(self.keys), "--host", "127.0.0.1",
                                             "--port", str(self.port), "--log-file", "none",
                                             "--set", f"network.server_queue_bytes={RELAY_QUEUE_MB << 20}"])

    def start_trainer(self, resume: bool = False) -> None:
        sets = [a for s in SETS for a in ("--set", s)]
        where = ["--resume", str(self.run_dir)] if resume else ["--run-dir", str(self.run_dir)]
        self.trainer = self._spawn("trainer", ["rulka.trainer.cli", "--config", str(CONFIG), *sets, "--keys",
                                               str(self.keys), "--server", f"127.0.0.1:{self.port}", *where])

    def start_worker(self, name: str) -> None:
        self.workers[name] = self._spawn(name, [
            "rulka.worker.cli", "--server", f"127.0.0.1:{self.port}", "--keys", str(self.keys / "bundles" / name),
            "--state-dir", str(self.root / "state" / name), "--produced-log", str(self.root / f"produced-{name}.txt"),
            "--max-steps-per-s", str(self.steps_per_s)])

    @staticmethod
    def kill(proc: subprocess.Popen | None) -> None:
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(30)

    def poll_accepted(self) -> None:
        """Note when each (worker, seq) first appears in accepted.log."""
        path = self.run_dir / "accepted.log"
        if not path.exists():
            return
        if path.stat().st_size < self._accepted_pos:  # a resumed trainer cut it back to its checkpoint
            self._accepted_pos = 0
        with open(path, "rb") as f:
            f.seek(self._accepted_pos)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._accepted_pos += end
        now = time.monotonic()
        for line in data[:end].decode().splitlines():
            name, seq = line.split()
            self.first_seen.setdefault((name, int(seq)), now)

    def accepted(self) -> list[tuple[str, int]]:
        """Every line of accepted.log (what the trainer's memory holds, once per acceptance)."""
        path = self.run_dir / "accepted.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return [(name, int(seq)) for name, seq in (line.split() for line in lines)]

    def produced(self, name: str) -> list[int]:
        path = self.root / f"produced-{name}.txt"
        return [int(s) for s in path.read_text().split()] if path.exists() else []

    def cleanup(self) -> None:
        for proc in [*self.workers.values(), self.trainer, self.server]:
            self.kill(proc)
        for log in self.logs:
            log.close()


def wait_flowing(soak: Soak, names: list[str], sample: Any, timeout: float = 120.0) -> dict[str, float]:
    """Seconds from now until each of ``names`` has a segment accepted that it produced from now
    on (a sequence number above the highest it had produced): segments in flight before the
    event do not count."""
    since = time.monotonic()
    marks = {name: max(soak.produced(name), default=-1) for name in names}
    out: dict[str, float] = {}
    deadline = since + timeout
    while len(out) < len(names) and time.monotonic() < deadline:
        sample()
        soak.poll_accepted()
        for (name, seq), when in soak.first_seen.items():
            if name in marks and name not in out and seq > marks[name]:
                out[name] = round(max(0.0, when - since), 2)
        time.sleep(0.2)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--steps-per-s", type=float, default=200.0, help="each worker's env step cap")
    parser.add_argument("--quick", action="store_true", help="2 workers, 1.5 minutes")
    args = parser.parse_args()
    if args.quick:
        args.workers, args.minutes = 2, 1.5
    if not sys.platform.startswith("linux"):
        print("the soak needs Linux (SIGSTOP, /proc)", file=sys.stderr)
        return 2
    t_total = args.minutes * 60
    events: dict[str, Any] = {}
    relay_rss: list[float] = []
    with tempfile.TemporaryDirectory(prefix="rulka-soak-") as tmp:
        soak = Soak(Path(tmp), args.workers, args.steps_per_s)

        def sample() -> None:
            if soak.server is not None and soak.server.poll() is None:
                relay_rss.append(rss_mb(soak.server.pid))

        def run_until(t: float) -> None:
            while time.monotonic() - t0 < t:
                sample()
                soak.poll_accepted()
                time.sleep(0.5)

        try:
            soak.start_server()
            time.sleep(2)
            soak.start_trainer()
            for name in soak.names:
                soak.start_worker(name)
            t0 = time.monotonic()
            events["first_segments_s"] = wait_flowing(soak, soak.names, sample)
            run_until(0.15 * t_total)

            assert soak.trainer is not None
            os.killpg(soak.trainer.pid, signal.SIGSTOP)
            run_until(0.15 * t_total + 10)
            os.killpg(soak.trainer.pid, signal.SIGCONT)
            events["trainer_stopped_10s_resume_s"] = wait_flowing(soak, soak.names, sample)
            run_until(0.35 * t_total)

            soak.kill(soak.workers["w0"])
            time.sleep(2)
            soak.start_worker("w0")
            events["worker_killed_restart_s"] = wait_flowing(soak, ["w0"], sample)
            run_until(0.5 * t_total)

            soak.kill(soak.server)
            time.sleep(2)
            soak.start_server()
            events["relay_killed_restart_s"] = wait_flowing(soak, soak.names, sample)
            run_until(0.7 * t_total)

            soak.kill(soak.trainer)
            soak.start_trainer(resume=True)
            events["trainer_killed_resume_s"] = wait_flowing(soak, soak.names, sample)
            run_until(t_total)

            for proc in soak.workers.values():
                proc.send_signal(signal.SIGINT)  # they wait for their last acknowledgements
            clean = {name: proc.wait(120) for name, proc in soak.workers.items()}
            soak.trainer.send_signal(signal.SIGINT)
            trainer_code = soak.trainer.wait(120)
            soak.poll_accepted()
        finally:
            soak.cleanup()

        counts = Counter(soak.accepted())
        per_worker = Counter(name for name, _ in counts)
        fair = sum(per_worker.values()) / len(soak.names)
        lost = {name: len(set(soak.produced(name)) - {s for w, s in counts if w == name}) for name in soak.names}
        reused = {name: len(soak.produced(name)) - len(set(soak.produced(name))) for name in soak.names}
        result = {
            "workers": args.workers, "minutes": args.minutes,
            "segments_produced": sum(len(soak.produced(n)) for n in soak.names),
            "segments_accepted": len(counts),
            "segments_lost": sum(lost.values()),
            "segments_duplicated": sum(c - 1 for c in counts.values()),
            "sequence_numbers_reused": sum(reused.values()),
            "share_min_of_fair": round(min(per_worker.get(n, 0) for n in soak.names) / fair, 3) if fair else 0.0,
            "share_max_of_fair": round(max(per_worker.get(n, 0) for n in soak.names) / fair, 3) if fair else 0.0,
            "relay_rss_peak_mb": round(max(relay_rss, default=0.0), 1),
            "relay_rss_bound_mb": RELAY_RSS_BOUND_MB,
            "relay_rss_within_bound": max(relay_rss, default=0.0) <= RELAY_RSS_BOUND_MB,
            "worker_exit_codes": sorted(set(clean.values())), "trainer_exit_code": trainer_code,
        }
        for event, times in events.items():
            result[f"{event}_max"] = max(times.values()) if times else None
            result[f"{event}_missing"] = len(["w0"] if event.startswith("worker") else soak.names) - len(times)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
