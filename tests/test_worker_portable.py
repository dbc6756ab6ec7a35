"""The worker runs on Windows gaming PCs: no POSIX-only call may sneak into the worker's code path.

Scans (with ``ast``) every module the worker imports to drive a game: rulka/worker, the shared
layers it uses (net, segment, compress, envs with the TMNF backend and the map cycle). A call of a
function that Windows lacks, or a POSIX-only module, fails this test with its file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "rulka"
WORKER_PATH = ["worker", "net", "envs/tmnf", "envs/map_cycle.py", "envs/pipeline.py", "envs/record_line.py",
               "envs/reference_line.py", "envs/car_state.py", "envs/actions.py", "segment.py", "compress.py",
               "plugins.py"]
POSIX_MODULES = {"fcntl", "termios", "pwd", "grp", "resource", "posix", "pty", "tty", "syslog", "crypt"}
POSIX_OS_CALLS = {"fork", "forkpty", "kill", "killpg", "getuid", "geteuid", "getgid", "setsid", "setpgid", "getpgid",
                  "chown", "lchown", "mkfifo", "wait3", "wait4", "nice", "sync", "symlink"}
POSIX_SIGNALS = {"SIGKILL", "SIGHUP", "SIGQUIT", "SIGALRM", "SIGCHLD", "SIGUSR1", "SIGUSR2", "SIGSTOP", "SIGCONT",
                 "SIGPIPE"}
POPEN_POSIX_ARGS = {"preexec_fn", "start_new_session", "pass_fds", "process_group"}


def _files() -> list[Path]:
    out: list[Path] = []
    for part in WORKER_PATH:
        p = ROOT / part
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return out


def _mentions_platform(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "platform" and isinstance(n.value, ast.Name)
               and n.value.id in ("sys", "os") for n in ast.walk(node))


def _platform_guarded(tree: ast.AST) -> set[int]:
    """ids of nodes that only run on some platforms: under an ``if`` on ``sys.platform``, or in a
    function that checks ``sys.platform`` before anything else (``if not linux: return``)."""
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _mentions_platform(node.test):
            guarded |= {id(n) for child in node.body for n in ast.walk(child)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))][:1]
            if first and isinstance(first[0], ast.If) and _mentions_platform(first[0].test):
                guarded |= {id(n) for n in ast.walk(node)}
    return guarded


def posix_only_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for every POSIX-only module, call or argument in ``source`` that is not behind a
    ``sys.platform`` check."""
    found = []
    tree = ast.parse(source)
    guarded = _platform_guarded(tree)
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] in POSIX_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in POSIX_MODULES:
            found.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "os" and node.attr in POSIX_OS_CALLS:
                found.append((node.lineno, f"os.{node.attr}"))
            elif node.value.id == "signal" and node.attr in POSIX_SIGNALS:
                found.append((node.lineno, f"signal.{node.attr}"))
        elif isinstance(node, ast.Call):
            found += [(node.lineno, f"{k.arg}=") for k in node.keywords if k.arg in POPEN_POSIX_ARGS]
    return found


def test_the_scan_catches_each_kind_of_posix_only_call():
    src = ("import fcntl\nimport os, signal, subprocess\nos.fork()\nos.kill(1, signal.SIGKILL)\n"
           "subprocess.Popen(['x'], start_new_session=True)\n")
    assert sorted(w for _, w in posix_only_uses(src)) == ["fcntl", "os.fork", "os.kill", "signal.SIGKILL",
                                                          "start_new_session="]
    assert posix_only_uses("import socket\nsocket.socket().settimeout(1)\nproc.kill()\n") == []
    guarded = ("import os, sys\nif sys.platform != 'win32':\n    os.kill(1, 9)\n"
               "def f():\n    if not sys.platform.startswith('linux'):\n        return\n    os.setsid()\n")
    assert posix_only_uses(guarded) == []


def test_no_posix_only_call_on_the_worker_path():
    bad = [f"{f.relative_to(ROOT.parent)}:{line}: {what}" for f in _files()
           for line, what in posix_only_uses(f.read_text(encoding="utf-8"))]
    assert not bad, "POSIX-only calls on the worker path (workers run on Windows):\n" + "\n".join(bad)
