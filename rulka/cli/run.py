"""``rulka run CONFIG``: a whole run on this machine: server, trainer and N workers as processes.

The same three commands a user would start on three machines (``rulka-server``,
``rulka-trainer``, ``rulka-worker``), on loopback with real TLS: throwaway keys are generated in
the run folder unless ``--keys`` names a folder from ``rulka keys generate``. The trainer's
progress line is shown; workers and server log to ``<run>/logs/``. Each role runs in its own
session, so a Ctrl-C reaches only ``rulka run``, which stops them in order. Ctrl-C (or ``--minutes``) stops
the workers, lets the trainer write its final checkpoint, then stops the server.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rulka.errors import UserError


@dataclass
class LocalRun:
    """Handles on the processes of a launched run (``launch``)."""

    run_dir: Path
    keys: Path
    port: int
    server: ServerProcess
    trainer: subprocess.Popen
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)
    log_files: list[Any] = field(default_factory=list)

    def alive(self) -> bool:
        return self.trainer.poll() is None

    def stop(self, timeout: float = 60.0) -> int:
        """Stop the workers, then the trainer (SIGINT: it checkpoints), then the server.
        Returns the trainer's exit code."""
        for proc in self.workers.values():
            _interrupt(proc)
        for proc in self.workers.values():
            _wait_or_kill(proc, 15.0)
        _interrupt(self.trainer)
        code = _wait_or_kill(self.trainer, timeout)
        self.server.stop()
        for f in self.log_files:
            f.close()
        return code


def _interrupt(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)


def _wait_or_kill(proc: subprocess.Popen, timeout: float) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(10)


def _python_cmd(module: str) -> list[str]:
    return [sys.executable, "-m", module]


class ServerProcess:
    """``rulka-server`` on loopback in its own session (so a Ctrl-C in the terminal reaches only
    ``rulka run``, which then stops the roles in order). ``port`` is known once it listens."""

    def __init__(self, keys: Path, log_file: Any, allow_plain_tcp: bool = False, timeout: float = 60.0) -> None:
        cmd = _python_cmd("rulka.server.cli") + ["--keys", str(keys), "--host", "127.0.0.1", "--port", "0"]
        if allow_plain_tcp:
            cmd += ["--set", "network.allow_plain_tcp=true"]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, start_new_session=True)
        self.pid = self.process.pid
        ready: queue.Queue[int] = queue.Queue()
        threading.Thread(target=self._pump, args=(ready, log_file), daemon=True).start()
        try:
            self.port = ready.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            raise UserError("rulka-server did not start (see logs/server.log in the run folder)") from None

    def _pump(self, ready: queue.Queue[int], log_file: Any) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            text = line.decode(errors="replace")
            if text.startswith("listening on "):
                ready.put(int(text.strip().rsplit(":", 1)[1]))
            try:
                log_file.write(line)
                log_file.flush()
            except ValueError:  # the log was closed at stop
                return

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        _wait_or_kill(self.process, timeout)


def role_thread_overrides(cfg: Any, workers: int, cores: int | None = None) -> list[str]:
    """``trainer.torch_threads`` for a trainer sharing this machine's ``cores`` with ``workers``
    workers (each running one torch thread, ``worker.torch_threads``): the cores they leave, at
    least 1. Empty when the config sets it. Torch's default, one thread per core in every
    process, made each of the trainer's ops wait for descheduled threads: ten times fewer
    updates with 2 workers on 2 cores (BENCHMARKS.md, trainer loop)."""
    if cfg.trainer.torch_threads is not None:
        return []
    cores = cores or os.cpu_count() or 1
    return [f"trainer.torch_threads={max(1, cores - workers * cfg.worker.torch_threads)}"]


def launch(config: str | Path, *, workers: int = 2, run_dir: str | Path | None = None,
           keys: str | Path | None = None, overrides: Sequence[str] = (), resume: bool = False,
           trainer_output: Any = None, worker_args: Sequence[str] = ()) -> LocalRun:
    """Start server, trainer and ``workers`` workers on loopback; returns at once.

    ``trainer_output``: a file for the trainer's stdout/stderr (None: this terminal).
    """
    from rulka.config import load_config
    from rulka.config.built import check_startable
    from rulka.net.keys import add_worker, generate_keys
    from rulka.trainer.cli import default_run_dir

    cfg = load_config(config, overrides)  # fail here, with the config's own message
    check_startable(cfg)
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    names = [f"worker{i}" for i in range(workers)]
    if keys is None:
        keys = run_dir / "keys"
        if not (keys / "trainer.key").exists():
            generate_keys(keys, [])
        for name in names:
            if not (keys / "bundles" / name).exists():
                add_worker(keys, name)
    keys = Path(keys)
    for name in names:
        if not (keys / "bundles" / name / "worker.key").exists():
            raise UserError(f"{keys} has no bundle for {name}: run `rulka keys add-worker {name} --dir {keys}`")
    server_log = open(run_dir / "logs" / "server.log", "ab")  # noqa: SIM115 - closed by LocalRun.stop
    log_files = [server_log]
    server = ServerProcess(keys, server_log, allow_plain_tcp=bool(cfg.network.allow_plain_tcp))
    address = f"127.0.0.1:{server.port}"
    overrides = [*overrides, *role_thread_overrides(cfg, workers)]
    sets = [a for o in overrides for a in ("--set", o)]
    try:
        trainer_cmd = _python_cmd("rulka.trainer.cli") + ["--config", str(config), *sets, "--keys", str(keys),
                                                           "--server", address]
        trainer_cmd += ["--resume", str(run_dir)] if resume else ["--run-dir", str(run_dir)]
        trainer = subprocess.Popen(trainer_cmd, stdout=trainer_output, start_new_session=True,
                                   stderr=subprocess.STDOUT if trainer_output else None)
        procs = {}
        for name in names:
            f = open(run_dir / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - closed by LocalRun.stop
            log_files.append(f)
            procs[name] = subprocess.Popen(
                _python_cmd("rulka.worker.cli") + ["--server", address, "--keys", str(keys / "bundles" / name),
                                                   "--state-dir", str(run_dir / "workers" / name), *worker_args],
                stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True)
    except BaseException:
        server.stop()
        for f in log_files:
            f.close()
        raise
    return LocalRun(run_dir, keys, server.port, server, trainer, procs, log_files)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run", help="run a whole training run on this machine (server, trainer, workers)",
        description=(
            "Run a whole rulka run on this machine: rulka-server, rulka-trainer and N rulka-worker "
            "processes on loopback with TLS (throwaway keys in the run folder unless --keys is "
            "given). Shows the trainer's progress; Ctrl-C stops everything cleanly and the run can "
            "be continued with --resume."
        ),
        epilog="example: rulka run configs/cartpole_simple.yaml --workers 2 --minutes 5",
    )
    parser.add_argument("config", metavar="CONFIG", help="run configuration YAML")
    parser.add_argument("--workers", type=int, default=2, help="number of worker processes (default 2)")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this many minutes")
    parser.add_argument("--frames", type=int, default=None, metavar="N",
                        help="stop once the trainer has received N env frames (transitions); with --minutes, "
                             "whichever comes first")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a config value (repeatable)")
    parser.add_argument("--run-dir", default=None, metavar="DIR", help="run folder (default: logging.run_dir/...)")
    parser.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue the run in RUN_DIR")
    parser.add_argument("--keys", default=None, metavar="DIR",
                        help="keys folder with bundles worker0..N-1 (default: throwaway keys in the run folder)")
    parser.set_defaults(func=_main)


class FramesReceived:
    """The trainer's ``charts/samples_received`` as its metrics file grows: reads only the lines
    added since the last call (the file of a long run is large), ignores a partly written last line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._value = 0

    def latest(self) -> int:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return self._value
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            try:
                value = json.loads(line)["metrics"]["charts/samples_received"]
            except (ValueError, KeyError, TypeError):
                continue
            self._value = max(self._value, int(value))
        return self._value


def _main(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise UserError("--workers must be at least 1")
    if args.frames is not None and args.frames < 1:
        raise UserError("--frames must be at least 1")
    from rulka.bundled import bundled_config

    if not Path(args.config).is_file() and bundled_config(args.config) is None:
        raise UserError(f"config file {args.config} not found")
    run_dir = args.resume or args.run_dir
    run = launch(args.config, workers=args.workers, run_dir=run_dir, keys=args.keys, overrides=args.overrides,
                 resume=args.resume is not None)
    print(f"rulka run: server 127.0.0.1:{run.port}, {args.workers} workers, run folder {run.run_dir}",
          file=sys.stderr)
    deadline = time.monotonic() + args.minutes * 60 if args.minutes is not None else None
    frames = FramesReceived(run.run_dir / "metrics.jsonl") if args.frames is not None else None
    interrupted = False
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops as cleanly as Ctrl-C
    try:
        while run.alive():
            if deadline is not None and time.monotonic() >= deadline:
                break
            if frames is not None and frames.latest() >= args.frames:
                print(f"rulka run: {args.frames} frames received, stopping", file=sys.stderr)
                break
            dead = [n for n, p in run.workers.items() if p.poll() is not None]
            if dead and len(dead) == len(run.workers):
                print(f"rulka run: every worker stopped (see {run.run_dir / 'logs'})", file=sys.stderr)
                break
            time.sleep(0.5)
    except KeyboardInterrupt:
        interrupted = True
        print("\nrulka run: stopping (the trainer writes a checkpoint)...", file=sys.stderr)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean stop
    try:
        code = run.stop()
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    print(f"rulka run: outputs in {run.run_dir} (metrics.jsonl, tensorboard/, checkpoints/, logs/); "
          f"continue with: rulka run {args.config} --resume {run.run_dir}", file=sys.stderr)
    return 130 if interrupted else code
