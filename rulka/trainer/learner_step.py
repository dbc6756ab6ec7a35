"""The learner step: one update of the agent on a batch the memory has ready (a trajectory batch)
or samples under the replay ratio, and a slice of such updates bounded in time so that intake runs
between slices. Every ``publish_every_updates`` updates the new weights are published.

With ``prefetch`` (``trainer.prefetch_batches``; on by default when the agent trains on CUDA) a
second thread samples and collates the next replay batch while the agent trains on this one, and
the step waits for it before returning: intake, checkpoints and everything else still meet a
memory that no other thread touches. The batch sampled ahead is trained on next, when the rate
limiter allows (counted by the limiter then). bench/learner.py measured on an H200: the 160x120
network's bare learner 44.7 -> 59.2 batches/s at batch 512 (sampling took 3.4 ms of a 22 ms step)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rulka.interfaces import Memory, TrainingAgent
from rulka.trainer.ratelimit import SampleToInsertRatio
from rulka.trainer.state import RunState, Window


class LearnerStep:
    """``can_train`` / ``train_once`` / ``train_slice``; ``last_metrics`` is the latest update's."""

    def __init__(self, state: RunState, window: Window, agent: TrainingAgent, memory: Memory,
                 limiter: SampleToInsertRatio | None, publish: Callable[[], int], *, batch_size: int,
                 publish_every: int, slice_s: float, augment: Callable[[Any], Any] | None = None,
                 prefetch: bool = False) -> None:
        self.state = state
        self.window = window
        self.agent = agent
        self.memory = memory
        self.limiter = limiter
        self.publish = publish
        self.batch_size = batch_size
        self.publish_every = publish_every
        self.slice_s = slice_s
        # applied to sampled (replay) batches only, e.g. rulka.memory.augment.RandomCrop
        self.augment = augment
        self.last_metrics: dict[str, Any] = {}
        # sample the next batch during train(): only where the memory says a concurrent sample is safe
        self.prefetch = bool(prefetch and getattr(memory, "sample_while_training", False))
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: Any = None  # a batch sampled during the previous update, not yet trained on
        self.prefetched = 0  # batches trained on that were sampled ahead

    def _sample(self) -> Any:
        if self._ahead is not None:
            batch, self._ahead = self._ahead, None
            self.prefetched += 1
            return batch
        return self.memory.sample(self.batch_size)

    def _start_prefetch(self) -> Future[Any] | None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="rulka-prefetch")
        return self._pool.submit(self.memory.sample, self.batch_size)

    def _finish_prefetch(self, pending: Future[Any]) -> None:
        try:
            self._ahead = pending.result()
        except NotImplementedError:
            self.prefetch = False

    def close(self) -> None:
        """Stop the prefetch thread (a batch sampled ahead is dropped, never counted)."""
        self._ahead = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _start_size(self) -> int:
        return int(self.memory.start_learning_size or 0)

    def allowed_updates(self) -> int | float:
        """How many updates in total the data stored so far allows now (``math.inf``: no cap):
        the updates made plus those the rate limiter lets the learner make before it waits."""
        if len(self.memory) < max(self._start_size(), self.batch_size):
            return 0
        if self.limiter is None:
            return math.inf
        return self.state.updates + self.limiter.updates_ahead_allowed(len(self.memory))

    def can_train(self) -> bool:
        """Whether ``train_once`` would train now (a trajectory batch, or room under the ratio)."""
        if self.memory.ready():
            return True
        if self.limiter is None:
            return len(self.memory) >= max(self._start_size(), self.batch_size)
        return self.limiter.can_sample(self.batch_size, len(self.memory))

    def train_once(self) -> bool:
        """One update if ``can_train``: a trajectory batch the memory has ready, or a sampled
        batch under the ratio (recorded by the limiter); publishes every ``publish_every_updates``.
        Returns whether it trained."""
        pending: Future[Any] | None = None
        if self.memory.ready():
            batch = self.memory.take()
        elif self.can_train():
            try:
                batch = self._sample()
            except NotImplementedError:
                return False
            if self.limiter is not None:
                self.limiter.record_sample(self.batch_size)
            if self.augment is not None:
                batch = self.augment(batch)
            if self.prefetch:
                pending = self._start_prefetch()
        else:
            return False
        t0 = time.perf_counter()
        try:
            self.last_metrics = self.agent.train(batch)
        finally:
            if pending is not None:
                self._finish_prefetch(pending)
        if self.limiter is not None:  # IQN resets: re-learn from replay
            self.limiter.samples -= int(self.agent.take_sample_credit())
        self.window.train_s += time.perf_counter() - t0
        self.state.updates += 1
        self.window.updates += 1
        if self.state.updates % self.publish_every == 0:
            self.publish()
        return True

    def train_slice(self, max_updates: int | None = None) -> int:
        """Train for up to ``slice_s`` seconds; returns updates done."""
        t_end = time.monotonic() + self.slice_s
        n = 0
        while time.monotonic() < t_end:
            if max_updates is not None and self.state.updates >= max_updates:
                break
            if not self.train_once():
                break
            n += 1
        return n
