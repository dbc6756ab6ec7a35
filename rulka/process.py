"""What every rulka process shares, below the roles and the umbrella command: running a command
body (a UserError is one line and an exit code), logging, a clean Ctrl-C, stopping with the
``rulka run`` launcher, a quick exit, CPU priority and cores. ``rulka-server``, ``rulka-trainer``,
``rulka-worker`` and ``rulka`` (which launches the other three) all import it; it imports no
role and no command."""

from __future__ import annotations

import _thread
import atexit
import contextlib
import gc
import logging
import logging.handlers
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from rulka.errors import UserError


def run_main(func: Callable[[], int | None]) -> int:
    """Run a command body: a UserError becomes one line on stderr and a non-zero exit."""
    try:
        code = func()
        return int(code or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def exit_quickly() -> None:
    """Make this process's exit skip the garbage collector's last full pass over every object.

    A role that imported torch spends most of its exit in that pass: the trainer took 2.6 CPU
    seconds from its network process's death to its exit, 0.7 s with this (issue 62). The pass
    only frees memory the OS takes back anyway; every object still goes when its last reference
    does, and the roles close their files themselves. Harmless where ``main`` runs in-process
    (tests): it acts at that interpreter's exit only."""
    atexit.register(gc.freeze)


LAUNCHER_ENV = "RULKA_LAUNCHER_STDIN"
"""Set to ``1`` by ``rulka run`` for the roles it starts: the role's stdin is a pipe the launcher
holds open, so its end (the launcher exited, however it died) tells the role to stop."""


def stop_on_ctrl_c() -> None:
    """Make SIGINT (Ctrl-C, ``kill -INT``, ``rulka run``'s stop) raise KeyboardInterrupt, the roles'
    clean-stop path, even when a shell started this process in the background with SIGINT ignored
    (``rulka-trainer ... &`` in a script: the ignore is inherited and the process would never stop
    cleanly). Call from the main thread."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def follow_launcher(grace_s: float = 60.0) -> None:
    """When started by ``rulka run`` (``RULKA_LAUNCHER_STDIN=1``), stop this role when the launcher
    goes away: a daemon thread reads stdin until end-of-file, then interrupts the main thread (the
    role's own Ctrl-C path: a worker flushes, a trainer writes its checkpoint) and exits hard
    ``grace_s`` seconds later if that did not finish. Portable (a pipe, no POSIX signal): a launcher
    killed with SIGKILL or a closed console no longer leaves roles running without a parent."""
    if os.environ.get(LAUNCHER_ENV) != "1":
        return

    try:
        # a raw descriptor, not sys.stdin: a thread blocked in sys.stdin's buffered read holds its
        # lock, and a forked child (the network process) that closes stdin would wait on it forever
        fd = os.dup(sys.stdin.fileno())
    except (OSError, ValueError, AttributeError):
        return

    def watch() -> None:
        try:
            while os.read(fd, 4096):
                pass  # nothing is ever written; only the end matters
        except OSError:
            pass
        logging.getLogger("rulka").warning("the rulka run launcher is gone: stopping")
        _thread.interrupt_main()
        time.sleep(grace_s)
        os._exit(1)

    threading.Thread(target=watch, name="rulka-launcher-watch", daemon=True).start()


PRIORITIES = ("normal", "below_normal", "idle")
"""Process priorities a role can ask for (``rulka-worker --priority``)."""
_NICE = {"below_normal": 10, "idle": 19}
# Windows priority classes (winbase.h)
_WINDOWS_CLASS = {"below_normal": 0x00004000, "idle": 0x00000040}


def set_process_priority(level: str) -> None:
    """Lower this process's CPU priority: ``below_normal`` (nice 10 / BELOW_NORMAL_PRIORITY_CLASS)
    or ``idle`` (nice 19 / IDLE_PRIORITY_CLASS); ``normal`` leaves it as it is. Call it first
    thing: on Linux a nice value belongs to a thread, and only threads and processes started
    afterwards (torch's, the network process) inherit it. Raises UserError if the OS refuses."""
    if level not in PRIORITIES:
        raise UserError(f"priority must be one of {', '.join(PRIORITIES)}, not {level!r}")
    if level == "normal":
        return
    if sys.platform == "win32":
        import ctypes

        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        if not kernel32.SetPriorityClass(kernel32.GetCurrentProcess(), _WINDOWS_CLASS[level]):
            raise UserError(f"could not set the {level} priority class (Windows error {ctypes.GetLastError()})")
        return
    try:
        current = os.getpriority(os.PRIO_PROCESS, 0)
        if current < _NICE[level]:
            os.setpriority(os.PRIO_PROCESS, 0, _NICE[level])
    except OSError as exc:
        raise UserError(f"could not lower the process priority to {level}: {exc}") from exc


def available_cores() -> list[int]:
    """The CPU cores this process may run on: its affinity where the OS tells (Linux, a container's
    cpuset), else every core."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def parse_cores(text: str) -> list[int]:
    """``"1"``, ``"0,2"``, ``"2-5,7"`` -> sorted core numbers; UserError for anything else."""
    cores: set[int] = set()
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            lo, hi = int(first), int(last or first)
            if lo < 0 or hi < lo:
                raise ValueError
            cores.update(range(lo, hi + 1))
    except ValueError:
        raise UserError(f"cores must be a list like 1 or 0,2 or 2-5,7, not {text!r}") from None
    return sorted(cores)


def format_cores(cores: Sequence[int]) -> str:
    """The inverse of ``parse_cores``: ``[2, 3, 4, 7]`` -> ``"2-4,7"``."""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive cores
    for core in sorted(set(cores)):
        if runs and core == runs[-1][1] + 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def set_cpu_affinity(cores: Sequence[int]) -> bool:
    """Keep this process on ``cores``. Call it first thing: on Linux an affinity belongs to a
    thread, and only threads and processes started afterwards inherit it (on Windows it is the
    whole process's). Returns False where the OS has no such call (macOS); raises UserError when
    the OS refuses (a core this process may not use)."""
    cores = sorted(set(cores))
    if not cores:
        raise UserError("no cores given")
    if sys.platform == "win32":
        import ctypes
        from ctypes import wintypes

        if cores[-1] >= 64:
            raise UserError(f"core {cores[-1]}: on Windows a process can be kept on cores 0-63 only")
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
        kernel32.GetCurrentProcess.restype = wintypes.HANDLE
        kernel32.SetProcessAffinityMask.argtypes = [wintypes.HANDLE, ctypes.c_size_t]
        kernel32.SetProcessAffinityMask.restype = wintypes.BOOL
        if not kernel32.SetProcessAffinityMask(kernel32.GetCurrentProcess(), sum(1 << c for c in cores)):
            raise UserError(f"could not keep this process on cores {format_cores(cores)} "
                            f"(Windows error {ctypes.get_last_error()})")  # type: ignore[attr-defined]
        return True
    if not hasattr(os, "sched_setaffinity"):
        return False
    try:
        os.sched_setaffinity(0, cores)
    except OSError as exc:
        raise UserError(f"could not keep this process on cores {format_cores(cores)}: {exc}") from exc
    return True


def keep_on_cores(text: str | None) -> None:
    """A role's ``--cpu-cores LIST`` (None: any core): ``set_cpu_affinity``, with a warning where
    the OS cannot pin."""
    if text is not None and not set_cpu_affinity(parse_cores(text)):
        logging.getLogger("rulka").warning("--cpu-cores %s: this OS cannot keep a process on given cores", text)


LOG_FORMAT = "%(asctime)s %(levelname).1s %(name)s: %(message)s"  # the terminal's and the log files'


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT, datefmt="%H:%M:%S")


def log_to_file(path: str | os.PathLike[str], verbose: bool = False,
                max_bytes: int | None = None, backups: int = 2) -> logging.Handler:
    """Also write this process's log records to ``path`` (appended, UTF-8, dated timestamps: a run
    lasts hours and is resumed on later days), beside the terminal; the folder is made. Returns the
    handler (``logging.getLogger().removeHandler`` it to stop). A role's run folder keeps what it said
    (the learning-rate cooldown, the best policy put back, warnings) after the terminal is gone.
    ``max_bytes``: a file kept across runs (a worker's state folder) is rolled over at that size,
    keeping ``backups`` older ones (``worker.log.1``, ...), so that months of runs stay bounded."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if max_bytes:
        handler: logging.Handler = logging.handlers.RotatingFileHandler(
            path, mode="a", maxBytes=int(max_bytes), backupCount=int(backups), encoding="utf-8")
    else:
        handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setLevel(logging.DEBUG if verbose else logging.INFO)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt="%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level > handler.level:
        root.setLevel(handler.level)
    return handler


# a log file kept across runs (a worker's state folder, a relay host) rolls over at this size,
# keeping this many older files: months of runs stay bounded
KEPT_LOG_BYTES = 5 * 2**20
KEPT_LOG_BACKUPS = 2


def log_file_option(option: str | None, default: Path | None) -> Path | None:
    """The path a role's ``--log-file`` option names: ``default`` when not given, ``None`` (the
    terminal only) for ``none``, else the path given."""
    if option is None:
        return default
    if option.strip().lower() == "none":
        return None
    return Path(option).expanduser()


@contextlib.contextmanager
def role_log_file(path: str | os.PathLike[str] | None, logger: logging.Logger, role: str, verbose: bool = False,
                  max_bytes: int | None = None, backups: int = 2) -> Iterator[Callable[..., None]]:
    """A role's log file for the length of its run (``log_to_file``), and how the run ended: a
    ``UserError`` ("<role> stopped: ..."), Ctrl-C, or an unexpected error with its traceback. Those
    lines go to the file alone: the terminal already gets them from ``run_main`` or Python. Yields
    ``file_only(level, msg)``, for a line the role prints itself (its closing line). ``path`` None:
    no file (``file_only`` does nothing)."""
    if path is None:
        yield lambda *_, **__: None
        return
    handler = log_to_file(path, verbose, max_bytes=max_bytes, backups=backups)

    def file_only(level: int, msg: str, exc_info: bool = False) -> None:
        handler.handle(logger.makeRecord(logger.name, level, __file__, 0, msg, None,
                                         sys.exc_info() if exc_info else None))

    try:
        yield file_only
    except UserError as exc:
        said = str(exc)  # a role's own "<role> stopped: why" is not prefixed twice
        file_only(logging.ERROR, said if said.startswith(f"{role} stopped") else f"{role} stopped: {said}")
        raise
    except KeyboardInterrupt:
        file_only(logging.INFO, f"{role} interrupted")
        raise
    except BaseException:
        file_only(logging.ERROR, f"{role} stopped by an unexpected error", exc_info=True)
        raise
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
