"""Synthetic workers: recorded segments fed at a set rate through the real relay into the real trainer.

A **recorded set** is the write-ahead journal of a short real run (``rulka run``: the simulator's
workers, their real segment encoding, delta + zstd): ``record`` runs one and keeps its journal
files; ``recorded`` reads them back (``rulka.trainer.journal.read_journal``: the exact bytes the
workers sent). bench/trainer_loop.py's first phase is itself such a run, so its ``--feed`` reads
the run's own journal; bench/fleet.py sends the recorded payloads instead of random bytes.

A **feeder** is one synthetic worker: its own enrolled credentials (``rulka.net.keys.add_worker``),
the real worker link (``rulka.net.tls.connect_worker``: TLS, the relay's challenge), the real
worker I/O half (``rulka.worker.network.Network``: hello/welcome, credit, acks, resends) and a real
``Outbox``; in place of the env and the policy, a thread that takes the next recorded segment,
renumbers it as this worker's (worker id, sequence number, episode id; nothing else changes),
re-encodes it and queues it every ``segment transitions / rate`` seconds, holding back as the real
worker does while the trainer's credit is used up (``credit_wait_s``). ``--as-feeders`` runs
several in one process until the ``t_end`` it reads on stdin, then prints their counters as JSON.

    python -m bench.feed --record DIR [--config sim_image] [--segments 64]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rulka" / "bench-segments"


def journal_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).glob("journal-*.bin") if p.is_file())


def recorded_payloads(folder: Path, limit: int | None = None) -> list[tuple[str, int, bytes]]:
    """(worker, seq, payload) of every record in ``folder``'s journal files, in the order received."""
    from rulka.trainer.journal import read_journal

    out: list[tuple[str, int, bytes]] = []
    for path in journal_files(folder):
        for rec in read_journal(path, repair=False):
            out.append(rec)
            if limit is not None and len(out) >= limit:
                return out
    return out


def recorded(folder: Path, limit: int | None = None) -> list[Any]:
    """The recorded segments (``rulka.segment.Segment``), decoded as the trainer decodes them."""
    from rulka.compress import SegmentDecoder, ZstdCompressor

    decoder = SegmentDecoder(ZstdCompressor())
    return [decoder.decompress(p) for _, _, p in recorded_payloads(folder, limit)]


def whole_episodes(segments: list[Any]) -> list[Any]:
    """The segments of the episodes recorded from their first segment on with none missing, in the
    order received (a recording copied mid-run starts inside episodes: a trainer holds such a
    segment back until the start it will never get); all of them if no episode is whole."""
    groups: dict[tuple[str, int], list[Any]] = {}
    for seg in segments:
        groups.setdefault((seg.worker_id, seg.episode_id), []).append(seg)
    whole = {k for k, g in groups.items() if [s.index_in_episode for s in g] == list(range(len(g)))}
    kept = [seg for seg in segments if (seg.worker_id, seg.episode_id) in whole]
    return kept or segments


def record(config: str, overrides: list[str], out: Path, segments: int = 64, workers: int = 2,
           timeout_s: float = 240.0) -> Path:
    """Run ``config`` (``rulka run``, ``workers`` unpaced workers) until its journal holds
    ``segments`` records or ``timeout_s`` passed, stop it and keep its journal files in ``out``."""
    from rulka.cli.run import launch

    with tempfile.TemporaryDirectory(prefix="rulka-record-") as tmp:
        run_dir = Path(tmp) / "run"
        run = launch(REPO_ROOT / config, workers=workers, run_dir=run_dir, trainer_output=subprocess_log(tmp),
                     overrides=["worker.max_steps_per_s=null", "logging.progress=never",
                                "logging.wandb.enabled=false", *overrides])
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < timeout_s and run.alive():
                time.sleep(2.0)
                if len(recorded_payloads(run_dir / "journal", segments)) >= segments:
                    copy_journal(run_dir, out)
                    break
        finally:
            run.stop()
    if not recorded_payloads(out, 1):
        raise RuntimeError(f"recording {config} gave no journal (see its logs)")
    return out


def copy_journal(run_dir: Path, out: Path) -> None:
    """``run_dir``'s journal files into ``out`` (replacing any there), while the run goes on: a
    checkpoint (the last one at the stop) retires the journal files it covers."""
    out.mkdir(parents=True, exist_ok=True)
    for p in journal_files(out):
        p.unlink()
    for p in journal_files(Path(run_dir) / "journal"):
        shutil.copy(p, out / p.name)


def subprocess_log(folder: str) -> Any:
    return open(Path(folder) / "trainer.log", "w")  # noqa: SIM115 - the run's trainer writes it until stopped


def cached_recording(name: str = "sim_image", segments: int = 64) -> Path:
    """The recorded set of bench/trainer_loop.py's config ``name`` under the user's cache, recorded on
    first use."""
    from bench.trainer_loop import CONFIGS

    folder = CACHE / name
    if not journal_files(folder) or len(recorded_payloads(folder, segments)) < segments:
        config, overrides = CONFIGS[name]
        record(config, overrides, folder, segments)
    return folder


# -- a synthetic worker --------------------------------------------------------------------------
def encode_as(seg: Any, worker: str, seq: int, episode_id: int, compressor: Any, codec: str) -> bytes:
    """``seg`` as ``worker``'s segment ``seq`` of its episode ``episode_id`` (no run id: any run takes
    it), framed and compressed as the worker's runner does; nothing else changes."""
    import dataclasses

    from rulka.compress import frame_segment

    seg = dataclasses.replace(seg, worker_id=worker, seq=seq, run_id="", episode_id=episode_id, created_at=time.time())
    return frame_segment(codec, compressor.compress(seg))

class Feeder:
    """One synthetic worker (see the module docstring). ``rate``: transitions per second."""

    def __init__(self, bundle: Path, host: str, port: int, segments: list[Any], rate: float) -> None:
        from rulka.compress import ZstdCompressor, codec_name
        from rulka.net.tls import connect_worker
        from rulka.plugins import network_settings
        from rulka.worker.counters import WorkerCounters
        from rulka.worker.network import CreditGate, Network, WeightsInbox
        from rulka.worker.outbox import Outbox
        from rulka.worker.worker import WorkerStats

        self.link = connect_worker(network_settings(None, host=host, port=port), bundle)
        self.name = self.link.worker_id
        self.counters = WorkerCounters(None)
        self.outbox = Outbox(memory_limit_bytes=512 << 20)
        self.gate = CreditGate()
        self.stats = WorkerStats()
        self.network = Network(self.link, self.outbox, self.counters, self.stats, WeightsInbox(), self.gate,
                               _refuse_weights, test=False, resend_after_s=15.0, max_in_flight=64,
                               stats_every_s=5.0, env_stats=dict)
        self.compressor = ZstdCompressor()
        self.codec = codec_name(self.compressor)
        self.segments = segments
        self.rate = float(rate)
        self.queued = 0
        self.transitions = 0
        self.credit_wait_s = 0.0
        self.encode_s = 0.0
        self._episodes: dict[tuple[str, int], int] = {}

    def _next(self, i: int) -> tuple[int, bytes]:
        """The recorded segment ``i`` as this worker's next one, encoded as the worker encodes it."""
        seg = self.segments[i % len(self.segments)]
        key = (seg.worker_id, seg.episode_id + 1_000_000 * (i // len(self.segments)))  # a new episode per lap
        if key not in self._episodes:
            self._episodes[key] = self.counters.take_episode()
        seq = self.counters.take_seq()
        return seq, encode_as(seg, self.name, seq, self._episodes[key], self.compressor, self.codec)

    def produce(self, t_end: float, stop: threading.Event) -> None:
        """Queue the recorded segments at ``rate`` transitions/s (no catching up after a credit wait)."""
        self.gate.welcomed.wait(max(0.0, t_end - time.time()))
        i, next_t = 0, time.monotonic()
        while time.time() < t_end and not stop.is_set():
            t0 = time.monotonic()
            while self.gate.over_limit(self.counters.next_seq)[0] and time.time() < t_end and not stop.is_set():
                self.gate.wake.wait(0.05)
                self.gate.wake.clear()
            self.credit_wait_s += time.monotonic() - t0
            t1 = time.monotonic()
            seq, payload = self._next(i)
            self.encode_s += time.monotonic() - t1
            self.outbox.add(seq, payload, stop)
            self.queued += 1
            self.transitions += self.segments[i % len(self.segments)].num_transitions
            next_t = max(next_t + self.segments[i % len(self.segments)].num_transitions / self.rate,
                         time.monotonic() - 1.0)
            i += 1
            time.sleep(max(0.0, next_t - time.monotonic()))

    def result(self) -> dict[str, Any]:
        return {"name": self.name, "segments_queued": self.queued, "transitions_queued": self.transitions,
                "acked": self.outbox.acked, "unacked": len(self.outbox), "resent": self.outbox.resends,
                "credit_wait_s": round(self.credit_wait_s, 2), "encode_s": round(self.encode_s, 2)}


def _refuse_weights(payload: bytes) -> Any:
    raise ValueError("a feeder loads no weights")  # counted as refused by Network, never loaded


def run_feeders(args: argparse.Namespace) -> int:
    """``--as-feeders``: the named feeders until the ``t_end`` read on stdin, or a second line (or the
    end of stdin) before it; prints their counters."""
    logging.basicConfig(level=logging.ERROR)
    segments = whole_episodes(recorded(Path(args.recorded), args.limit))
    names = args.names.split(",")
    feeders = [Feeder(Path(args.keys) / "bundles" / n, args.host, args.port, segments, args.rate / len(names))
               for n in names]
    for f in feeders:
        f.network.start()
    print("ready", flush=True)
    t_end = float(sys.stdin.readline())
    stop = threading.Event()

    def stop_on_stdin() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=stop_on_stdin, daemon=True).start()
    threads = [threading.Thread(target=f.produce, args=(t_end, stop), daemon=True) for f in feeders]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive() and not stop.is_set() and time.time() < t_end + 5.0:
                t.join(0.2)
    finally:
        stop.set()
        for f in feeders:
            f.network.stop()
            f.link.close()
    print(json.dumps({"cpu_s": round(time.process_time(), 2), "feeders": [f.result() for f in feeders]}), flush=True)
    return 0


class FeederProcesses:
    """``procs`` feeder processes (each its own session, so that it can be paused as a group) for
    ``names`` enrolled in ``keys``, sharing ``rate`` transitions/s; ``start(t_end)`` starts the
    feed, ``results()`` stops it and returns the counters. ``place``: (cores, nice) set on each
    process before its threads start, as ``rulka run`` places its workers."""

    def __init__(self, keys: Path, names: list[str], host: str, port: int, recorded_dir: Path, rate: float,
                 procs: int = 1, limit: int | None = None,
                 place: tuple[list[int] | None, int] = (None, 0)) -> None:
        import subprocess

        from bench import child_command, child_env

        groups = [names[i::procs] for i in range(procs) if names[i::procs]]
        self.procs = []
        for g in groups:
            cmd = child_command("bench.feed", "--as-feeders", "--names", ",".join(g), "--keys", str(keys),
                                "--host", host, "--port", str(port), "--recorded", str(recorded_dir),
                                "--rate", repr(rate * len(g) / len(names)))
            if limit:
                cmd += ["--limit", str(limit)]
            p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env={**child_env(), "OMP_NUM_THREADS": "1"}, start_new_session=True)
            self.procs.append(p)
            cores, nice = place
            if cores and hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(p.pid, cores)  # its threads, started later, inherit both
            if nice and hasattr(os, "setpriority"):
                os.setpriority(os.PRIO_PROCESS, p.pid, nice)
        for p in self.procs:
            if p.stdout is None or p.stdout.readline().strip() != "ready":
                self.close()
                raise RuntimeError("a feeder process did not start")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self, t_end: float) -> None:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write(f"{t_end}\n")
            p.stdin.flush()

    def results(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Stop the feed (a line on each stdin) and collect every feeder's counters."""
        out: list[dict[str, Any]] = []
        for p in self.procs:
            try:
                assert p.stdin is not None
                p.stdin.write("stop\n")
                p.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
        for p in self.procs:
            try:
                text, _ = p.communicate(timeout=timeout)
            except Exception:  # noqa: BLE001 - a stuck feeder is killed, its counters lost
                p.kill()
                continue
            lines = [ln for ln in (text or "").splitlines() if ln.startswith("{")]
            if lines:
                out += json.loads(lines[-1])["feeders"]
        return out

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def enroll(keys: Path, count: int, prefix: str = "feeder") -> list[str]:
    """``count`` feeder names enrolled in ``keys`` (each its own credentials), added where missing."""
    from rulka.net.keys import add_worker

    names = [f"{prefix}{i}" for i in range(count)]
    for n in names:
        if not (Path(keys) / "bundles" / n / "worker.key").exists():
            add_worker(keys, n)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=Path, default=None, help="record a set into this folder and exit")
    parser.add_argument("--config", default="sim_image", help="bench/trainer_loop.py's config to record")
    parser.add_argument("--segments", type=int, default=64, help="segments to record")
    parser.add_argument("--as-feeders", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--names", help=argparse.SUPPRESS)
    parser.add_argument("--keys", help=argparse.SUPPRESS)
    parser.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--recorded", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=1000.0, help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.as_feeders:
        return run_feeders(args)
    if args.record is None:
        parser.error("--record DIR is required")
    from bench.trainer_loop import CONFIGS

    config, overrides = CONFIGS[args.config]
    out = record(config, overrides, args.record, args.segments)
    payloads = recorded_payloads(out)
    sizes = sorted(len(p) for _, _, p in payloads)
    print(json.dumps({"recorded": str(out), "segments": len(payloads),
                      "bytes_median": sizes[len(sizes) // 2] if sizes else None, "bytes_max": sizes[-1] if sizes else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
