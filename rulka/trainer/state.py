"""What the trainer's components share: the run's counters, which checkpoints carry (``RunState``),
and the activity since the last metrics record (``Window``)."""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from rulka.trainer import checkpoint_store as ckpt
from rulka.trainer.dedupe import Dedupe

log = logging.getLogger(__name__)


@dataclass
class RunState:
    """The run's counters: what a checkpoint writes and ``--resume`` reads back."""

    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    version: int = 0
    updates: int = 0
    samples: int = 0  # transitions stored
    segments: int = 0
    episodes: int = 0
    dedupe: Dedupe = field(default_factory=Dedupe)
    last_episode: dict[str, int] = field(default_factory=dict)  # worker -> highest episode id accepted
    counters: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    checkpoint_number: int = 0
    journal_number: int = 0
    accepted_log_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint's trainer state (with the RNG state)."""
        return {
            "run_id": self.run_id, "version": self.version, "updates": self.updates, "samples": self.samples,
            "segments": self.segments, "episodes": self.episodes, "counters": dict(self.counters),
            "dedupe": self.dedupe.state_dict(), "last_episode": dict(self.last_episode), "rng": ckpt.rng_state(),
            "journal_number": self.journal_number, "accepted_log_bytes": self.accepted_log_bytes,
            "checkpoint_number": self.checkpoint_number,
        }

    def bad(self, reason: str, detail: str) -> None:
        """Count a dropped input (``bad_<reason>``) and log the first few and every 100th."""
        self.counters[f"bad_{reason}"] += 1
        n = self.counters[f"bad_{reason}"]
        if n <= 5 or n % 100 == 0:
            log.warning("dropped input (%s, %d so far): %s", reason, n, detail[:200])


@dataclass
class Window:
    """Activity since the last metrics record (``Reporter.report`` reads and resets it)."""

    bytes: int = 0
    samples: int = 0
    inserts: int = 0
    updates: int = 0
    t: float = field(default_factory=time.monotonic)
    lags: list[int] = field(default_factory=list)  # policy lag of each segment received
    train_s: float = 0.0  # time inside agent.train
    starved_s: float = 0.0  # time waiting for segments with nothing to train

    def reset(self, now: float) -> None:
        self.bytes = self.samples = self.inserts = self.updates = 0
        self.t = now
        self.lags = []
        self.train_s = self.starved_s = 0.0
