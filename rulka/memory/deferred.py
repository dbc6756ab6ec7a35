"""Values a learner computed on its device, read back to the host only when the memory needs them.

PER reports each update's TD errors to the replay. Reading them back at once (``td.cpu()``) makes
a CUDA update wait for the whole step to finish on the device before the host can prepare the
next one. ``DeferredValues`` starts a non-blocking copy into pinned host memory and records an
event; ``numpy()`` waits for that event only. The replay keeps such reports pending and applies
them, in order, before it next reads or changes its priorities (the next sample, an insert, a
save), so that the batches and priorities are exactly those of an immediate read-back: with the
trainer's prefetch the wait then falls on the prefetch thread, not the training thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch


class DeferredValues:
    """A 1-d tensor on its way to the host: ``numpy()`` returns it (float32 or its own dtype),
    waiting for the copy where it ran asynchronously (CUDA); on the CPU it is the tensor itself."""

    __slots__ = ("_event", "_host")

    def __init__(self, values: torch.Tensor) -> None:
        values = values.detach()
        self._event: Any = None
        if values.device.type == "cuda":
            self._host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            self._host.copy_(values, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
        else:
            self._host = values

    def ready(self) -> bool:
        """Whether ``numpy()`` would return without waiting."""
        return self._event is None or bool(self._event.query())

    def numpy(self) -> np.ndarray:
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        return self._host.numpy()


class PendingReports:
    """Reports (``apply(*args)`` with a ``DeferredValues`` among the args) kept in arrival order
    until ``drain`` applies them; ``add`` may run on another thread than ``drain``."""

    def __init__(self, apply: Callable[..., None]) -> None:
        self._apply = apply
        self._items: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()

    def add(self, *args: Any) -> None:
        with self._lock:
            self._items.append(args)

    def __len__(self) -> int:
        return len(self._items)

    def drain(self) -> int:
        """Apply every pending report, oldest first (each waits for its own copy); returns how many."""
        with self._lock:
            items, self._items = self._items, []
        for args in items:
            self._apply(*(a.numpy() if isinstance(a, DeferredValues) else a for a in args))
        return len(items)
