"""The worker role: run episodes next to the game and deliver them to the trainer.

``Worker`` (rulka.worker.worker) is the importable role, three components joined there: the
network side (``network``), the episode runner (``episodes``, with the policies of ``policy``)
and the outbox (``outbox``, where the delivery guarantees live); ``rulka-worker``
(rulka.worker.cli) is the command. Plugin and env building live in ``rulka.plugins``. Attributes are imported lazily so ``rulka-worker --help`` stays quick.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Outbox", "Worker", "WorkerCounters", "WorkerStats"]


def __getattr__(name: str) -> Any:
    if name in ("Worker", "WorkerStats"):
        from rulka.worker import worker

        return getattr(worker, name)
    if name in ("Outbox", "WorkerCounters"):
        from rulka.worker import outbox

        return getattr(outbox, name)
    raise AttributeError(f"module 'rulka.worker' has no attribute {name!r}")
