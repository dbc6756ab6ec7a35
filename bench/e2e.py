"""End-to-end benchmark: how long the default ``rulka run`` takes to first finish the track.

Starts ``rulka run CONFIG`` (server, trainer and workers on loopback, as a user would), watches
the run's ``metrics.jsonl`` for the first finished episode (a logged race time or a non-zero
finish rate), then stops the run with Ctrl-C. Prints one JSON object. Bounded by
``--time-limit`` (the result then says ``finished: false``).

    python -m bench.e2e [--quick] [--config FILE] [--workers N] [--time-limit S]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIGS = ("configs/sim_iqn.yaml", "configs/default.yaml", "rulka/configs/default.yaml")


def default_config() -> Path | None:
    for candidate in DEFAULT_CONFIGS:
        if (REPO_ROOT / candidate).is_file():
            return REPO_ROOT / candidate
    return None


def first_finish(run_root: Path) -> dict[str, Any] | None:
    """The first record in any ``metrics.jsonl`` under ``run_root`` that shows a finished race."""
    for log_file in sorted(run_root.rglob("metrics.jsonl")):
        with open(log_file, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                    metrics = record["metrics"]
                except (ValueError, KeyError, TypeError):
                    continue
                if not isinstance(metrics, dict):
                    continue
                race_times = [v for k, v in metrics.items()
                              if k.startswith("charts/") and k.endswith("/race_time_ms") or k == "charts/race_time_ms"]
                race_times = [v for v in race_times if isinstance(v, int | float) and v > 0]
                finish_rates = [v for k, v in metrics.items()
                                if (k == "charts/finish_rate" or k.startswith("charts/") and k.endswith("/finish_rate"))
                                and isinstance(v, int | float) and v > 0]
                if race_times or finish_rates:
                    return {"step": record.get("step"), "wall_time": record.get("wall_time"),
                            "race_time_ms": min(race_times) if race_times else None}
    return None


def run_summary(run_root: Path) -> dict[str, Any]:
    """Where the run got to: the last logged counters and the mean throughput over the run."""
    records = []
    for log_file in sorted(run_root.rglob("metrics.jsonl")):
        with open(log_file, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("metrics"), dict):
                    records.append(record["metrics"])
    if not records:
        return {}
    out: dict[str, Any] = {"metric_records": len(records)}
    for name in ("charts/samples_received", "charts/batches_trained", "charts/episodes", "charts/weights_version",
                 "charts/episodic_return"):
        values = [r[name] for r in records if isinstance(r.get(name), int | float)]
        if values:
            out[f"last {name}"] = round(values[-1], 3)
    for name in ("perf/samples_per_s", "perf/batches_per_s", "perf/ingest_mb_per_s"):
        values = [r[name] for r in records if isinstance(r.get(name), int | float)]
        if values:
            out[f"mean {name}"] = round(sum(values) / len(values), 3)
    return out


def stop(proc: subprocess.Popen[str], grace_s: float = 30.0) -> int:
    """Ctrl-C the run's process group (its clean shutdown path), then kill what is left."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=grace_s)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of our own process group only
    except ProcessLookupError:
        pass
    return proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one worker and a 120 s limit")
    parser.add_argument("--config", type=Path, default=None, help="run config (default: the default sim run)")
    parser.add_argument("--workers", type=int, default=None, help="workers to start (default: rulka run's default)")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds before giving up (default 600)")
    args = parser.parse_args()
    config = args.config or default_config()
    if config is None:
        print(f"no default run config found (looked for {', '.join(DEFAULT_CONFIGS)})", file=sys.stderr)
        return 1
    limit_s = args.time_limit or (120.0 if args.quick else 600.0)
    workers = args.workers or (1 if args.quick else None)
    with tempfile.TemporaryDirectory(prefix="rulka-e2e-") as tmp:
        run_root = Path(tmp) / "runs"
        command = [sys.executable, "-c", "import sys; from rulka.cli import main; sys.exit(main())", "run", str(config),
                   "--minutes", f"{limit_s / 60 + 1:.2f}", "--run-dir", str(run_root / "e2e"),
                   "--set", "logging.wandb.enabled=false"]
        if workers:
            command += ["--workers", str(workers)]
        log_path = Path(tmp) / "run.log"
        started = time.monotonic()
        with open(log_path, "w", encoding="utf-8") as log_file:
            proc = subprocess.Popen(command, cwd=tmp, stdout=log_file, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)
            first_log_s = None
            finish = None
            try:
                while time.monotonic() - started < limit_s and proc.poll() is None:
                    time.sleep(1.0)
                    if first_log_s is None and any(run_root.rglob("metrics.jsonl")):
                        first_log_s = time.monotonic() - started
                    finish = first_finish(run_root) if run_root.exists() else None
                    if finish:
                        break
                elapsed = time.monotonic() - started
            finally:
                exit_code = proc.poll()
                stop(proc)
                summary = run_summary(run_root) if run_root.exists() else {}
        if finish is None and exit_code is not None:
            tail = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
            print(f"`rulka run` exited with code {exit_code} before a finish: " + " / ".join(tail), file=sys.stderr)
            return 1
    result = {
        "config": str(config.relative_to(REPO_ROOT)) if config.is_relative_to(REPO_ROOT) else str(config),
        "workers": workers or "default",
        "finished": finish is not None,
        "time_to_first_finish_s": round(elapsed, 1) if finish else None,
        "frames_at_first_finish": finish["step"] if finish else None,
        "first_race_time_ms": finish["race_time_ms"] if finish else None,
        "time_to_first_metrics_s": None if first_log_s is None else round(first_log_s, 1),
        "time_limit_s": limit_s,
        "run": summary,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
