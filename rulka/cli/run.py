"""``rulka run CONFIG``: a whole run on this machine: server, trainer and N workers as processes.

The same three commands a user would start on three machines (``rulka-server``,
``rulka-trainer``, ``rulka-worker``), on loopback with real TLS: throwaway keys are generated in
the run folder unless ``--keys`` names a folder from ``rulka keys generate``. The trainer's
progress line is shown; workers and server log to ``<run>/logs/``, and the trainer writes what
it logs to ``<run>/logs/trainer.log`` too (``rulka-trainer`` does so wherever it runs). Each role runs in its own
session, so a Ctrl-C reaches only ``rulka run``, which stops them in order. Ctrl-C, SIGTERM (or
``--minutes``) stops the workers, lets the trainer write its final checkpoint, then stops the
server. The stop is bounded: a role still running when ``--stop-timeout`` seconds have passed
(a hung or overloaded trainer) is killed with everything it started (its process group), and
every process is reaped before ``rulka run`` exits; a second Ctrl-C kills at once. The trainer's
journal and the previous checkpoint keep what a killed trainer had acknowledged.
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
from rulka.process import PRIORITIES, available_cores, format_cores, stop_on_ctrl_c


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
    worker_cores: list[int] | None = None  # where the workers and the relay are kept (None: anywhere)

    def alive(self) -> bool:
        return self.trainer.poll() is None

    def stop(self, timeout: float = 60.0, hurry: threading.Event | None = None) -> int:
        """Stop the workers (SIGINT: they wait for their last acknowledgements, at most
        ``WORKER_STOP_S``), then the trainer (SIGINT: it checkpoints), then the server. Whatever
        still runs ``timeout`` seconds after the call, or as soon as ``hurry`` is set, is killed
        with its process group; every process is reaped. Returns the trainer's exit code
        (negative: the signal that killed it)."""
        hurry = hurry or threading.Event()
        deadline = time.monotonic() + timeout
        workers = list(self.workers.values())
        try:
            for proc in workers:
                _interrupt(proc)
            _wait_all(workers, min(deadline, time.monotonic() + WORKER_STOP_S), hurry)
            _kill_groups(workers)
            _interrupt(self.trainer)
            _wait_all([self.trainer], deadline, hurry)
            _kill_groups([self.trainer])
            self.server.stop(hurry=hurry)
        finally:
            self.kill()  # a KeyboardInterrupt midway too
        return self.trainer.returncode

    def kill(self) -> None:
        """Kill every role with its process group now and reap it (idempotent)."""
        try:
            _kill_groups([*self.workers.values(), self.trainer, self.server.process])
        finally:
            for f in self.log_files:
                f.close()


WORKER_STOP_S = 15.0  # a stopping worker waits for its last acknowledgements (the trainer still runs)
SERVER_STOP_S = 5.0


def _interrupt(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        if os.name == "posix":
            proc.send_signal(signal.SIGINT)
        else:  # CTRL_C_EVENT would reach this console's whole process group on Windows
            proc.terminate()


def _wait_all(procs: Sequence[subprocess.Popen], deadline: float, hurry: threading.Event) -> None:
    """Wait until every process in ``procs`` has exited, ``deadline`` passed or ``hurry`` is set."""
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline and not hurry.is_set():
        time.sleep(0.05)


def _kill_groups(procs: Sequence[subprocess.Popen]) -> None:
    """SIGKILL each role with the processes it started (its session's process group: a role's
    network child, say, even when the role itself already exited), then reap the role. Each
    group is killed once: afterwards its id may belong to someone else."""
    for proc in procs:
        if getattr(proc, "_group_killed", False):
            continue
        if hasattr(os, "killpg"):
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group's id is the role's pid (own session)
            except (ProcessLookupError, PermissionError):
                pass  # the whole group is gone already
        elif proc.poll() is None:
            proc.kill()
        proc._group_killed = True  # type: ignore[attr-defined]
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # unkillable (uninterruptible I/O): say so, do not hang
            print(f"rulka run: process {proc.pid} did not exit after SIGKILL", file=sys.stderr)


def _followed(extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Popen arguments for a role that stops when this launcher goes away: its stdin is a pipe
    only this process holds (closed by the OS however it exits; see rulka.process.follow_launcher)."""
    from rulka.process import LAUNCHER_ENV

    return {"stdin": subprocess.PIPE, "env": {**os.environ, **(extra_env or {}), LAUNCHER_ENV: "1"}}


def _python_cmd(module: str) -> list[str]:
    return [sys.executable, "-m", module]


class ServerProcess:
    """``rulka-server`` on loopback in its own session (so a Ctrl-C in the terminal reaches only
    ``rulka run``, which then stops the roles in order). ``port`` is known once it listens."""

    def __init__(self, keys: Path, log_file: Any, allow_plain_tcp: bool = False, timeout: float = 60.0,
                 extra_args: Sequence[str] = ()) -> None:
        # its log goes to logs/server.log through stderr, not to this user's ~/.rulka/server/
        cmd = _python_cmd("rulka.server.cli") + ["--keys", str(keys), "--host", "127.0.0.1", "--port", "0",
                                                  "--log-file", "none", *extra_args]
        if allow_plain_tcp:
            cmd += ["--set", "network.allow_plain_tcp=true"]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, start_new_session=True,
                                        **_followed())
        self.pid = self.process.pid
        ready: queue.Queue[int] = queue.Queue()
        threading.Thread(target=self._pump, args=(ready, log_file), daemon=True).start()
        try:
            self.port = ready.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            raise UserError("rulka-server did not start (see logs/server.log in the run folder)") from None
        except BaseException:  # Ctrl-C while it starts: it must not stay behind
            self.stop(timeout=0.0)
            raise

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

    def stop(self, timeout: float = SERVER_STOP_S, hurry: threading.Event | None = None) -> None:
        """SIGTERM; after ``timeout`` seconds (or once ``hurry`` is set) SIGKILL; reaped."""
        if self.process.poll() is None:
            self.process.terminate()
        _wait_all([self.process], time.monotonic() + timeout, hurry or threading.Event())
        _kill_groups([self.process])


def trainer_threads(cfg: Any, workers: int, cores: int) -> int:
    """The trainer's torch threads on a machine of ``cores`` shared with ``workers`` workers (each
    running ``worker.torch_threads``): the config's ``trainer.torch_threads``, else the cores the
    workers leave, at least 1."""
    if cfg.trainer.torch_threads is not None:
        return int(cfg.trainer.torch_threads)
    return max(1, cores - workers * cfg.worker.torch_threads)


def role_thread_overrides(cfg: Any, workers: int, cores: int | None = None) -> list[str]:
    """``trainer.torch_threads`` for a trainer sharing this machine's ``cores`` with ``workers``
    workers: ``trainer_threads``. Empty when the config sets it. Torch's default, one thread per
    core in every process, made each of the trainer's ops wait for descheduled threads: ten times
    fewer updates with 2 workers on 2 cores (BENCHMARKS.md, trainer loop)."""
    if cfg.trainer.torch_threads is not None:
        return []
    return [f"trainer.torch_threads={trainer_threads(cfg, workers, cores or len(available_cores()))}"]


def worker_cores(cfg: Any, workers: int, cores: Sequence[int] | None = None) -> list[int] | None:
    """The cores ``rulka run`` keeps its workers and the relay on: all but the first
    ``trainer_threads`` of this machine's ``cores`` (None: no core left over, nothing is pinned).
    The trainer itself is not pinned, but nothing else runs on its cores. Without this, on 2
    cores, Linux's scheduler left the learner thread waiting on its run queue 13% of the time
    behind worker threads, even at nice 19 and with a core idle (per-thread schedstat), and the
    trainer made ~15% fewer updates per second than its learner alone (BENCHMARKS.md, trainer loop)."""
    cores = sorted(cores) if cores is not None else available_cores()
    rest = cores[trainer_threads(cfg, workers, len(cores)):]
    return rest or None


def launch(config: str | Path, *, workers: int = 2, run_dir: str | Path | None = None,
           keys: str | Path | None = None, overrides: Sequence[str] = (), resume: bool = False,
           trainer_output: Any = None, worker_args: Sequence[str] = (),
           worker_priority: str = "below_normal", pin_cores: bool = True,
           budget_minutes: float | None = None, budget_frames: int | None = None,
           instances_per_worker: int = 1) -> LocalRun:
    """Start server, trainer and ``workers`` workers on loopback; returns at once.

    ``instances_per_worker``: envs each worker process drives (``rulka-worker --instances``); the
    trainer's threads and the workers' cores count every instance as a worker.

    ``budget_minutes`` / ``budget_frames``: the run's length as the caller will stop it, told to the
    trainer (``--budget-minutes`` / ``--budget-frames``) to time its learning-rate cooldown.

    ``worker_priority``: the workers' CPU priority (``rulka-worker --priority``). Below normal by
    default: the roles share this machine's cores, and an unpaced simulator or gym env would
    otherwise take as much CPU as the learner (the OS shares time equally), leaving it half a core.
    ``pin_cores``: keep the workers and the relay off the trainer's cores (``worker_cores``).

    ``trainer_output``: a file for the trainer's stdout/stderr (None: this terminal). Should the
    start be interrupted (Ctrl-C), the roles started so far are killed before the exception
    propagates: none is left running.
    """
    from rulka.config import load_config
    from rulka.config.built import check_startable
    from rulka.net.keys import add_worker, generate_keys
    from rulka.trainer.cli import default_run_dir

    cfg = load_config(config, overrides)  # fail here, with the config's own message
    check_startable(cfg)
    cfg.worker.check_acting()  # the workers act on this machine: worker.device (and cpu_runtime) must exist here
    from rulka.worker.episodes import check_instances

    check_instances(cfg, instances_per_worker)
    acting = workers * instances_per_worker  # what takes the workers' cores: every instance acts
    if instances_per_worker > 1:
        worker_args = [*worker_args, "--instances", str(instances_per_worker)]
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
    cores = available_cores()
    pinned = worker_cores(cfg, acting, cores) if pin_cores else None
    pin_args = ["--cpu-cores", format_cores(pinned)] if pinned else []
    server = ServerProcess(keys, server_log, allow_plain_tcp=bool(cfg.network.allow_plain_tcp), extra_args=pin_args)
    address = f"127.0.0.1:{server.port}"
    overrides = [*overrides, *role_thread_overrides(cfg, acting, len(cores))]
    sets = [a for o in overrides for a in ("--set", o)]
    started: list[subprocess.Popen] = []
    try:
        from rulka.trust import trust_argv

        trainer_cmd = _python_cmd("rulka.trainer.cli") + ["--config", str(config), *sets, "--keys", str(keys),
                                                           "--server", address, *trust_argv()]
        trainer_cmd += ["--resume", str(run_dir)] if resume else ["--run-dir", str(run_dir)]
        if budget_minutes is not None:
            trainer_cmd += ["--budget-minutes", repr(float(budget_minutes))]
        if budget_frames is not None:
            trainer_cmd += ["--budget-frames", str(int(budget_frames))]
        trainer = subprocess.Popen(trainer_cmd, stdout=trainer_output, start_new_session=True,
                                   stderr=subprocess.STDOUT if trainer_output else None, **_followed())
        started.append(trainer)
        procs = {}
        for name in names:
            f = open(run_dir / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - closed by LocalRun.stop
            log_files.append(f)
            procs[name] = subprocess.Popen(
                _python_cmd("rulka.worker.cli") + ["--server", address, "--keys", str(keys / "bundles" / name),
                                                   "--state-dir", str(run_dir / "workers" / name),
                                                   "--priority", worker_priority, "--log-file", "none",  # logs/<name>.log has it
                                                   *pin_args, *trust_argv(), *worker_args],
                stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                **_followed({"PYTHONUNBUFFERED": "1"}))
            started.append(procs[name])
    except BaseException:
        _kill_groups(started)
        server.stop()
        for f in log_files:
            f.close()
        raise
    return LocalRun(run_dir, keys, server.port, server, trainer, procs, log_files, worker_cores=pinned)


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
    parser.add_argument("--instances-per-worker", type=int, default=1, metavar="K",
                        help="envs each worker process drives over its one connection (rulka-worker --instances; "
                             "default 1)")
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
    parser.add_argument("--worker-priority", choices=PRIORITIES, default="below_normal",
                        help="CPU priority of the worker processes (default below_normal: the trainer, on the "
                             "same cores, comes first; normal: share the CPU equally)")
    parser.add_argument("--no-pin", action="store_true",
                        help="let the OS place the workers and the relay on any core (default: kept off the "
                             "trainer's cores, so the learner thread is never queued behind them)")
    parser.add_argument("--stop-timeout", type=float, default=60.0, metavar="S",
                        help="after Ctrl-C/SIGTERM or --minutes, the roles get this many seconds to stop cleanly "
                             "(the trainer writes its checkpoint), then whatever still runs is killed (default 60)")
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
    if args.instances_per_worker < 1:
        raise UserError("--instances-per-worker must be at least 1")
    if args.frames is not None and args.frames < 1:
        raise UserError("--frames must be at least 1")
    from rulka.bundled import bundled_config

    if not Path(args.config).is_file() and bundled_config(args.config) is None:
        raise UserError(f"config file {args.config} not found")
    if args.stop_timeout < 0:
        raise UserError("--stop-timeout must be at least 0")
    run_dir = args.resume or args.run_dir
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops as cleanly as Ctrl-C
    stop_on_ctrl_c()  # and Ctrl-C, also when a shell started this in the background with SIGINT ignored
    try:
        run = launch(args.config, workers=args.workers, run_dir=run_dir, keys=args.keys, overrides=args.overrides,
                     resume=args.resume is not None, worker_priority=args.worker_priority,
                     pin_cores=not args.no_pin, budget_minutes=args.minutes, budget_frames=args.frames,
                     instances_per_worker=args.instances_per_worker)
    except KeyboardInterrupt:
        print("\nrulka run: interrupted while starting; the roles started so far were stopped", file=sys.stderr)
        return 130
    deadline = time.monotonic() + args.minutes * 60 if args.minutes is not None else None
    frames = FramesReceived(run.run_dir / "metrics.jsonl") if args.frames is not None else None
    interrupted = False
    hurry = threading.Event()
    code: int | None = None
    try:
        try:
            where = ""
            if run.worker_cores:
                kept = format_cores(run.worker_cores)
                where = f" (workers and relay on core{'s' if len(run.worker_cores) > 1 else ''} {kept}, the trainer's left free)"
            print(f"rulka run: server 127.0.0.1:{run.port}, {args.workers} workers{where}, run folder {run.run_dir}",
                  file=sys.stderr)
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
            print(f"\nrulka run: stopping (the trainer writes a checkpoint; whatever still runs in "
                  f"{args.stop_timeout:.0f} s is killed, Ctrl-C again kills now)...", file=sys.stderr)
        # a second Ctrl-C (or SIGTERM) must not interrupt the stop half-way: it shortens it
        signal.signal(signal.SIGINT, lambda *_: hurry.set())
        signal.signal(signal.SIGTERM, lambda *_: hurry.set())
        code = run.stop(timeout=args.stop_timeout, hurry=hurry)
    finally:
        run.kill()  # whatever happened above (an interrupt at the wrong moment): nothing stays behind
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if code is None or code < 0:
        why = "killed at a second Ctrl-C" if hurry.is_set() else f"killed after {args.stop_timeout:.0f} s"
        print(f"rulka run: the trainer did not stop cleanly ({why}); --resume continues from its previous "
              "checkpoint and journal", file=sys.stderr)
    print(f"rulka run: outputs in {run.run_dir} (metrics.jsonl, tensorboard/, checkpoints/, logs/); "
          f"continue with: rulka run {args.config} --resume {run.run_dir}", file=sys.stderr)
    return 130 if interrupted else (code if code is not None else 1)
