"""Several game instances in one worker process (``rulka-worker --instances N``).

One process, one link, one ``WeightsInbox`` (each version received and verified once, loaded by
every instance), one outbox, packer and set of counters; N ``EpisodeRunner`` threads, each with its
own env, its own policies (its own copy of the network: torch and ONNX Runtime release the GIL in
their forward, so the instances act in parallel) and its own ``WorkerStats``. On a relay uplink a
version then crosses once per PC, not once per instance (issue 66).

``CombinedStats`` is what the rest of the worker reads as its stats (the status line, the
``stats`` report, ``rulka status``, the trainer's per-worker tables): the instances' counts
summed. ``run_instances`` runs the N threads; one that fails stops the others, and the worker
raises its error, as a single-instance worker whose env fails does.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from typing import Any

from rulka.errors import UserError
from rulka.worker.episodes import EpisodeRunner

log = logging.getLogger("rulka.worker")

# counted by each instance's env thread: the worker's total is their sum
_SUMMED = frozenset({"episodes", "steps", "weights_loaded", "paused_s", "credit_timeouts", "eval_episodes"})
# counted by both sides: the network side (refused weights) and the instances (unloadable ones)
_BOTH = frozenset({"weights_rejected"})
# copies of the shared packer's totals, taken by each instance: the newest is the largest
_LATEST = frozenset({"pack_waits", "pack_wait_s"})


class CombinedStats:
    """A ``WorkerStats`` view over ``parts`` (one per instance) and ``own`` (what the network side
    and the shared packer count: bad messages, stale and received weights, segments). Reading a
    field gives the worker's total; ``weights_version`` is the oldest version any instance runs
    (the one that says how far behind this PC is); writes go to ``own``."""

    def __init__(self, own: Any, parts: Sequence[Any]) -> None:
        object.__setattr__(self, "own", own)
        object.__setattr__(self, "parts", list(parts))

    @property
    def instances(self) -> int:
        return len(self.parts)

    def __getattr__(self, name: str) -> Any:
        own, parts = self.own, self.parts
        if name in _SUMMED:
            return sum(getattr(p, name) for p in parts)
        if name in _BOTH:
            return getattr(own, name) + sum(getattr(p, name) for p in parts)
        if name in _LATEST:
            return max(getattr(p, name) for p in parts)
        if name == "weights_version":
            return min(p.weights_version for p in parts)
        if name == "last_returns":
            return [r for p in parts for r in p.last_returns][-100:]
        return getattr(own, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _BOTH:  # the writer meant the total: keep the instances' share out of own
            value -= sum(getattr(p, name) for p in self.parts)
        setattr(self.own, name, value)

    def totals(self) -> dict[str, Any]:
        """Every field, as ``dataclasses.asdict`` of one ``WorkerStats``."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self.own)}


class _Budget:
    """``max_episodes`` over all instances (an episode is counted when it starts) and what is left
    of ``max_steps`` when an episode starts (so the steps may pass it by at most N - 1 episodes)."""

    def __init__(self, max_episodes: int | None, max_steps: int | None) -> None:
        self.max_episodes, self.max_steps = max_episodes, max_steps
        self.started = self.steps = 0
        self._lock = threading.Lock()

    def claim(self) -> tuple[bool, int | None]:
        """(whether another episode may start, its step budget)."""
        with self._lock:
            if self.max_episodes is not None and self.started >= self.max_episodes:
                return False, None
            if self.max_steps is not None and self.steps >= self.max_steps:
                return False, None
            self.started += 1
            return True, None if self.max_steps is None else self.max_steps - self.steps

    def add(self, steps: int) -> None:
        with self._lock:
            self.steps += steps


def run_instances(runners: Sequence[EpisodeRunner], stop_event: threading.Event, max_episodes: int | None,
                  max_steps: int | None) -> None:
    """Run every runner's episodes on a thread of its own until the budget is used or
    ``stop_event`` is set. An instance that raises stops the others (their finished segments stay
    in the packer and the outbox); its error is raised here, naming the instance."""
    halt = threading.Event()  # the caller's stop, or an instance's failure
    budget = _Budget(max_episodes, max_steps)
    failed: list[tuple[int, BaseException]] = []
    n = len(runners)

    def play(i: int, runner: EpisodeRunner) -> None:
        try:
            if not runner.ready(halt):
                return
            while not halt.is_set():
                go, step_budget = budget.claim()
                if not go:
                    return
                steps = runner.run_episode(halt, step_budget)
                if steps < 0:
                    return
                budget.add(steps)
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            log.error("game instance %d of %d failed (%s: %s): stopping the worker's %d instances", i, n,
                      type(exc).__name__, str(exc)[:300], n)
            failed.append((i, exc))
            halt.set()

    threads = [threading.Thread(target=play, args=(i, r), name=f"worker-env-{i}", daemon=True)
               for i, r in enumerate(runners)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                if stop_event.is_set():
                    halt.set()
                t.join(0.1)
    finally:
        halt.set()
        for t in threads:
            t.join(30.0)
    if failed:
        i, exc = failed[0]
        if isinstance(exc, UserError):  # already one line the user can act on (e.g. tm2020 with --instances)
            raise exc
        raise InstanceFailed(f"game instance {i} of {n} failed, so the worker stopped: "
                             f"{type(exc).__name__}: {str(exc)[:300]}") from exc


class InstanceFailed(RuntimeError):
    """One of a worker's game instances raised; the worker stopped all of them."""
