"""Which (worker, sequence number) pairs the trainer has already accepted.

Workers resend what they have not seen acknowledged, so the trainer sees some segments twice;
it keeps, per worker, the highest sequence number below which it has seen everything (``floor``)
and the set of numbers seen above it. The set is bounded: when a worker leaves a gap that never
fills (it dropped segments under ``worker.on_full=drop_oldest``), the floor moves past the gap
once the set grows beyond ``max_above``, so memory stays bounded. The state is plain data and is
saved with each checkpoint.
"""

from __future__ import annotations

from typing import Any

from rulka.errors import BadInput


class _WorkerSeqs:
    __slots__ = ("floor", "above")

    def __init__(self, floor: int = -1, above: set[int] | None = None) -> None:
        self.floor = floor
        self.above = above if above is not None else set()


class Dedupe:
    """``accept(worker, seq)`` returns True the first time a pair is seen, False afterwards."""

    def __init__(self, max_above: int = 65536) -> None:
        self.max_above = int(max_above)
        self._workers: dict[str, _WorkerSeqs] = {}
        self.skipped_gaps = 0  # sequence numbers given up on (dropped by a worker, most likely)

    def seen(self, worker: str, seq: int) -> bool:
        w = self._workers.get(worker)
        return w is not None and (seq <= w.floor or seq in w.above)

    def accept(self, worker: str, seq: int) -> bool:
        """Record ``seq`` for ``worker``; False if it was already recorded (a duplicate)."""
        w = self._workers.setdefault(worker, _WorkerSeqs())
        if seq <= w.floor or seq in w.above:
            return False
        w.above.add(seq)
        while w.floor + 1 in w.above:
            w.floor += 1
            w.above.discard(w.floor)
        if len(w.above) > self.max_above:
            # give up on the oldest gap: move the floor to the smallest seen number, then as far
            # as it is contiguous
            lowest = min(w.above)
            self.skipped_gaps += lowest - w.floor - 1
            w.floor = lowest
            w.above.discard(lowest)
            while w.floor + 1 in w.above:
                w.floor += 1
                w.above.discard(w.floor)
        return True

    def floor(self, worker: str) -> int:
        """Highest seq below which everything from ``worker`` was seen (-1 if nothing)."""
        w = self._workers.get(worker)
        return w.floor if w is not None else -1

    def highest(self, worker: str) -> int:
        """Highest seq accepted from ``worker`` (-1 if nothing): a worker that lost its numbers
        continues above it."""
        w = self._workers.get(worker)
        if w is None:
            return -1
        return max(w.floor, max(w.above, default=-1))

    def workers(self) -> list[str]:
        return sorted(self._workers)

    def state_dict(self) -> dict[str, Any]:
        """Plain data (msgpack/JSON-able)."""
        return {
            "max_above": self.max_above,
            "skipped_gaps": self.skipped_gaps,
            "workers": {name: [w.floor, sorted(w.above)] for name, w in self._workers.items()},
        }

    def load_state_dict(self, state: Any) -> None:
        """Inverse of ``state_dict``; raise BadInput on anything malformed."""
        try:
            workers = {}
            for name, (floor, above) in state["workers"].items():
                if not isinstance(name, str):
                    raise TypeError("worker name")
                workers[name] = _WorkerSeqs(int(floor), {int(s) for s in above})
            self.max_above = int(state["max_above"])
            self.skipped_gaps = int(state["skipped_gaps"])
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput("dedupe state", str(exc)) from None
        self._workers = workers
