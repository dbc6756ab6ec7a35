"""The trainer role: ingest segments, train, publish weights, checkpoint.

``Trainer`` (rulka.trainer.trainer) is the importable role, ``run_local`` (rulka.trainer.local)
the one-process mode (trainer and workers as threads), ``rulka-trainer`` (rulka.trainer.cli) the
command. Attributes are imported lazily so ``rulka-trainer --help`` stays quick.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LocalRunResult", "Trainer", "run_local"]


def __getattr__(name: str) -> Any:
    if name == "Trainer":
        from rulka.trainer.trainer import Trainer

        return Trainer
    if name in ("run_local", "LocalRunResult"):
        from rulka.trainer import local

        return getattr(local, name)
    raise AttributeError(f"module 'rulka.trainer' has no attribute {name!r}")
