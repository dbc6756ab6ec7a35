"""The trainer role: ingest segments, train, publish weights, checkpoint.

``Trainer`` (rulka.trainer.trainer) is the importable role, ``rulka-trainer`` (rulka.trainer.cli)
the command. The one-process mode (trainer and workers as threads) is ``rulka.local.run_local``:
no role imports another. Attributes are imported lazily so ``rulka-trainer --help`` stays quick.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Trainer"]


def __getattr__(name: str) -> Any:
    if name == "Trainer":
        from rulka.trainer.trainer import Trainer

        return Trainer
    raise AttributeError(f"module 'rulka.trainer' has no attribute {name!r}")
