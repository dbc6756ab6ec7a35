"""Who the trainer hears from, and how far each worker may run ahead (``trainer.rate_limit`` mode
``ratio``): ``credit`` messages (``rulka.net.messages.Credit``) granted while the limiter
admits inserts, and the ``welcome`` a (re)connecting worker gets with the highest sequence number
and episode id accepted from it.

Credit is counted in full segments' worth of steps: a worker whose segments are short (episodes
that end early) gets more of them, else it pauses every few dozen steps.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sized
from typing import Any

from rulka.errors import BadInput
from rulka.net.messages import Credit as CreditMessage
from rulka.net.messages import Hello, Welcome
from rulka.segment import Segment
from rulka.trainer.ratelimit import SampleToInsertRatio
from rulka.trainer.state import RunState

log = logging.getLogger(__name__)

CREDIT_RESEND_S = 5.0  # a worker that hears no credit for 12x this resumes on its own (rulka.worker)


class WorkerBook:
    """What the trainer knows of each worker: when it was last heard from, the next sequence number
    after the highest received, the mean length of its segments and its latest ``stats``."""

    def __init__(self) -> None:
        self.last_heard: dict[str, float] = {}
        self.next_seq: dict[str, int] = {}  # worker -> 1 + highest seq received
        self.segment_steps: dict[str, float] = {}  # worker -> running mean of its segments' lengths
        self.stats: dict[str, dict[str, Any]] = {}  # worker -> its latest stats message, with "_t"

    def segment_received(self, sender: str, seq: int, transitions: int) -> None:
        self.next_seq[sender] = max(self.next_seq.get(sender, 0), seq + 1)
        mean = self.segment_steps.get(sender)
        n = max(1, transitions)
        self.segment_steps[sender] = float(n) if mean is None else 0.8 * mean + 0.2 * n

    def recent(self, now: float) -> set[str]:
        """Workers heard from (segments, hello or stats) in the last 30 s."""
        seen = {w for w, t in self.last_heard.items() if now - t < 30}
        return seen | {w for w, s in self.stats.items() if now - s["_t"] < 30}


class Credit:
    """Grants credit and welcomes workers. ``link`` is set by the trainer (it may be attached late)."""

    def __init__(self, state: RunState, workers: WorkerBook, limiter: SampleToInsertRatio | None,
                 memory: Sized, deferred: deque[Segment], *, rate_mode: str, credit_segments: int,
                 credit_steps: int) -> None:
        self.state = state
        self.workers = workers
        self.limiter = limiter
        self.memory = memory
        self.deferred = deferred
        self.rate_mode = rate_mode
        self.credit_segments = credit_segments
        self.credit_steps = credit_steps
        self.link: Any = None
        self.sent: dict[str, tuple[int, float]] = {}  # worker -> (limit, when)

    def grant(self, force: bool = False, only: str | None = None) -> None:
        """Tell each worker heard from lately the next sequence number it may not reach yet:
        ``credit_segments`` beyond the last segment received, while the limiter admits inserts
        (mode ``ratio`` only). Unchanged limits are repeated every few seconds, so a paused
        worker knows the trainer is there; ``force`` repeats them now (to worker ``only``, or
        to all)."""
        if self.limiter is None or self.rate_mode != "ratio":
            return
        now = time.monotonic()
        open_ = not self.deferred and self.limiter.can_insert(len(self.memory))
        for worker in self.workers.recent(now) if only is None else [only]:
            # a resumed trainer knows what it accepted (dedupe) before it hears from the worker
            base = max(self.workers.next_seq.get(worker, 0), self.state.dedupe.highest(worker) + 1)
            stats = self.workers.stats.get(worker)
            if stats and stats.get("unacked") == 0 and isinstance(stats.get("next_seq"), int):
                base = max(base, stats["next_seq"])  # a worker that skipped numbers (restarted)
            sent, when = self.sent.get(worker, (-1, 0.0))
            limit = base + self.credit_for(worker) if open_ else sent
            if limit < 0:
                continue  # never granted and closed now: the worker has not started pausing
            if limit > sent or force or now - when >= CREDIT_RESEND_S:
                try:
                    self.link.send_to(worker, "credit", CreditMessage(int(limit)).encode())
                    self.sent[worker] = (limit, now)
                except Exception as exc:  # noqa: BLE001 - resent within CREDIT_RESEND_S
                    self.state.counters["credit_failures"] += 1
                    log.debug("credit to %s failed: %s", worker, exc)

    def credit_for(self, worker: str) -> int:
        """Segments ``worker`` may produce beyond the last one received: ``credit_segments``
        segments of ``segment_max_steps`` steps, counted in steps by the mean length of its recent
        segments (at most 16x ``credit_segments``; never fewer than ``credit_segments``)."""
        mean = self.workers.segment_steps.get(worker)
        if not mean:
            return self.credit_segments
        return int(min(16 * self.credit_segments, max(self.credit_segments, round(self.credit_steps / mean))))

    def on_hello(self, sender: str, payload: bytes) -> None:
        """A worker (re)connected: tell it the highest sequence number and episode id accepted
        from it (it continues above them), and grant its credit now, from where it stands."""
        try:
            hello = Hello.decode(payload)
        except BadInput as exc:
            self.state.bad("hello", f"from {sender!r}: {exc}")
            return
        self.workers.last_heard[sender] = time.monotonic()
        highest = self.state.dedupe.highest(sender)
        base = max(self.workers.next_seq.get(sender, 0), highest + 1)
        if hello.unacked == 0:  # nothing of it in flight: its next number is where credit starts
            base = max(base, hello.next_seq)
        self.workers.next_seq[sender] = base
        try:
            self.link.send_to(sender, "welcome",
                              Welcome(highest, self.state.last_episode.get(sender, -1)).encode())
        except Exception as exc:  # noqa: BLE001 - the worker says hello again until welcomed
            self.state.counters["welcome_failures"] += 1
            log.debug("welcome to %s failed: %s", sender, exc)
        self.state.counters["hellos"] += 1
        self.grant(force=True, only=sender)
