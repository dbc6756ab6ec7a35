"""Benchmark: what a run's other processes on the other cores cost the learner's core.

``rulka run`` on one machine keeps its workers and relay off the trainer's cores, yet they share
the machine (caches, memory, the host). This measures that share alone: the bare learner
(``agent.train`` on a checkpoint of a short run of the config, as in ``bench/trainer_loop.py``) on
the trainer's cores, while a run of the same config works on the other cores, in turns with that
run paused (SIGSTOP to each role's process group), seconds apart. The run's whole traffic is kept
off the learner's cores: its workers are paced to the transitions/s the bare learner consumes at
the config's samples per insert, and its trainer, relay and their children are pinned with the
workers; that trainer trains at 1/16 of the ratio, so the other cores carry the workers, the relay,
TLS and ingest, not a second learner. ``slowdown`` = median over windows of the bare learner's
updates/s beside the running run over the same just after, with the run paused (1.0: costs nothing).
Linux only (affinity, signals).

    python -m bench.colocation [--configs cartpole,sim_image] [--workers 2] [--windows 12] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.trainer_loop import (
    COMMON,
    CONFIGS,
    REPO_ROOT,
    BareLearnerProcess,
    _median,
    _records,
    _signal_groups,
    measure_role,
    print_results,
    role_groups,
    wait_for_training,
)


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _pin_tree(pid: int, cores: list[int]) -> None:
    """Every thread of ``pid`` and of its descendants onto ``cores``."""
    for p in _tree(pid):
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                os.sched_setaffinity(int(tid), cores)
        except OSError:
            pass  # a thread or process that ended meanwhile


def measure_config(name: str, workers: int, windows: int, seconds: float, tmp: Path) -> dict[str, Any]:
    from rulka.cli.run import launch

    config, overrides = CONFIGS[name]
    first = tmp / f"{name}-checkpoint"
    role = measure_role(config, overrides, workers, 10.0, first)  # a checkpoint with a filled memory
    if "error" in role:
        return {"config": name, "error": role["error"]}
    other = role["_worker_cores"]
    if not other:
        return {"config": name, "error": "no cores to keep the run on (one core?)"}
    learner_cores = sorted(os.sched_getaffinity(0) - set(other))
    bare = BareLearnerProcess(first, cores=learner_cores)
    run = None
    try:
        if bare.ready is None:
            return {"config": name, "error": "the bare learner did not start"}
        quiet0 = bare.updates_per_s(seconds) or 0.0
        spi = float(role["spi_target"] or 8.0)
        rate = quiet0 * int(bare.ready["batch_size"]) / spi  # transitions/s the learner consumes
        run_dir = tmp / f"{name}-colocated"
        log = open(tmp / f"{name}-colocated.log", "w")  # noqa: SIM115 - closed with the run
        run = launch(REPO_ROOT / config, workers=workers, run_dir=run_dir, trainer_output=log,
                     overrides=[*COMMON, *overrides, f"worker.max_steps_per_s={rate / workers:.1f}",
                                f"trainer.rate_limit.samples_per_insert={spi / 16}", "network.heartbeat_s=5"])
        run.log_files.append(log)
        groups = role_groups(run)
        for pid in groups:
            _pin_tree(pid, other)
        if wait_for_training(run, run_dir) is None:  # until data flows: the run's trainer has trained
            return {"config": name, "error": "the co-located run did not start"}
        time.sleep(2.0)
        _pin_tree(run.trainer.pid, other)  # children started since (the link's process)
        busy, quiet = [], []
        samples0, running_s = _samples(run_dir), 0.0
        for _ in range(windows):
            t_busy = time.monotonic()
            busy.append(bare.updates_per_s(seconds))
            running_s += time.monotonic() - t_busy
            _signal_groups(groups, signal.SIGSTOP)
            try:
                quiet.append(bare.updates_per_s(seconds))
            finally:
                _signal_groups(groups[::-1], signal.SIGCONT)
            t_settle = time.monotonic()
            time.sleep(1.0)
            running_s += time.monotonic() - t_settle
        samples_per_s = (_samples(run_dir) - samples0) / running_s  # records lag by up to one log interval
    finally:
        if run is not None:
            run.stop()
        bare.close()
    ratios = [round(b / q, 3) for b, q in zip(busy, quiet, strict=True) if b and q]
    return {"config": name, "workers": workers, "learner_cores": learner_cores, "run_cores": other,
            "paced_transitions_per_s": round(rate, 1), "run_transitions_per_s": round(samples_per_s, 1),
            "alone_beside_run": busy, "alone_run_paused": quiet, "ratios": ratios, "slowdown": _median(ratios)}


def _samples(run_dir: Path) -> float:
    recs = _records(run_dir)
    return float(recs[-1]["metrics"].get("charts/samples_received", 0)) if recs else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ", ".join(CONFIGS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--windows", type=int, default=12, help="pairs of windows (beside the run, run paused)")
    parser.add_argument("--seconds", type=float, default=3.0, help="each window of the bare learner")
    args = parser.parse_args()
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        print(json.dumps({"bench": "colocation", "error": "needs Linux and at least 2 cores"}))
        return 0
    with tempfile.TemporaryDirectory(prefix="rulka-colocation-") as tmp:
        results = []
        for name in args.configs.split(","):
            row = measure_config(name, args.workers, args.windows, args.seconds, Path(tmp))
            print(json.dumps(row), file=sys.stderr, flush=True)
            results.append(row)
    print_results("colocation", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
