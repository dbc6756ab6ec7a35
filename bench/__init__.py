"""rulka's benchmark suite: each ``bench/<name>.py`` prints one JSON object on stdout;
``python -m bench`` runs them all (each as ``python -m bench.<name>``) and rewrites BENCHMARKS.md.
``bench.study`` is the seed-study tool. Not part of the installed package: run it from the
repository's root, where ``bench`` and ``rulka`` import without any path edits."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def child_command(module: str, *args: str) -> list[str]:
    """The command of a benchmark's child process running ``module`` (``bench.<name>``)."""
    return [sys.executable, "-m", module, *args]


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the repository first on PYTHONPATH, so that a child
    started in any folder imports ``bench`` and ``rulka`` from it."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env
