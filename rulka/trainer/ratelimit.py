"""The trainer's rate limiter: samples per insert held within a window, after Reverb's
``SampleToInsertRatio`` (reverb/rate_limiters.py, reverb/cc/rate_limiter.cc).

Units are Reverb's: an *insert* is one trainable transition stored (those a memory holds out
for its test loss, ``Memory.held_out_transitions``, do not count), a *sample* is one transition drawn
into a batch (an update on a batch of B spends B samples). ``samples_per_insert`` (spi) is how
many times, on average, a transition is trained on: the guide's
``number_times_single_memory_is_used_before_discard`` for IQN, or
``max_updates_per_env_step × batch_size``.

The cursor is ``inserts × spi − samples``. With ``error_buffer`` e and ``min_size_to_sample`` m
the window is ``[spi·m − e, spi·m + e]`` (so the m transitions stored before learning starts are
not owed samples):

- the learner may draw n samples when the memory holds at least m transitions and
  ``cursor − n ≥ min_diff`` (otherwise it is ahead: it waits for data);
- a segment may be inserted while the memory holds fewer than m transitions, or while
  ``cursor ≤ max_diff`` *before* the insert (otherwise the learner is behind). Reverb checks the
  cursor after each single-item insert; a segment is up to a few hundred items at once, so the
  check is made before it, and the cursor can pass ``max_diff`` by at most one segment. Checking
  after would deadlock any window narrower than one segment.

Nothing here blocks or sleeps: the trainer asks, and decides what to do with a refusal (wait,
withhold credit from workers, defer or drop a segment; see ``rulka.trainer.trainer``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass
class SampleToInsertRatio:
    """Reverb's ``SampleToInsertRatio`` in the trainer's units (see the module docstring).

    Args:
        samples_per_insert: target mean number of times a transition is sampled (> 0).
        min_size_to_sample: transitions the memory must hold before any sampling.
        error_buffer: half-width of the cursor window, in samples. None: Acme's default,
            ``0.1 × spi × min_size_to_sample``, raised to at least ``max(batch_size, 2·max(1, spi))``
            so that a batch always fits in the window (else learner and inserts could deadlock).
        batch_size: samples drawn per update (used by the default window and by ``achieved_updates``).
    """

    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float | None = None
    batch_size: int = 1
    inserts: int = 0
    samples: int = 0

    def __post_init__(self) -> None:
        if not self.samples_per_insert > 0:
            raise ValueError(f"samples_per_insert must be > 0, got {self.samples_per_insert}")
        self.min_size_to_sample = max(1, int(self.min_size_to_sample))
        spi = float(self.samples_per_insert)
        floor = max(float(self.batch_size), 2.0 * max(1.0, spi))
        e = 0.1 * spi * self.min_size_to_sample if self.error_buffer is None else float(self.error_buffer)
        if self.error_buffer is not None and 2 * e < floor:
            raise ValueError(f"error_buffer {e:g} gives a window of {2 * e:g} samples; it must be at least "
                             f"{floor:g} (max(batch_size, 2·max(1, samples_per_insert)))")
        self.error_buffer = max(e, floor / 2)
        center = spi * self.min_size_to_sample
        self.min_diff = center - self.error_buffer
        self.max_diff = center + self.error_buffer

    @property
    def cursor(self) -> float:
        """``inserts × samples_per_insert − samples``."""
        return self.inserts * self.samples_per_insert - self.samples

    def can_sample(self, n: int, size: int) -> bool:
        """Whether the learner may draw ``n`` samples from a memory holding ``size`` transitions."""
        return size >= self.min_size_to_sample and self.cursor - n >= self.min_diff

    def can_insert(self, size: int) -> bool:
        """Whether a segment may be inserted now into a memory holding ``size`` transitions."""
        return size < self.min_size_to_sample or self.cursor <= self.max_diff

    def record_insert(self, n: int) -> None:
        self.inserts += int(n)

    def record_sample(self, n: int) -> None:
        self.samples += int(n)

    def achieved(self) -> float:
        """Samples per insert so far (``nan`` before the first insert)."""
        return self.samples / self.inserts if self.inserts else math.nan

    def updates_ahead_allowed(self, size: int) -> int:
        """Updates of ``batch_size`` the learner may make now before it has to wait."""
        if size < self.min_size_to_sample:
            return 0
        return max(0, int((self.cursor - self.min_diff) // max(1, self.batch_size)))


def window_rate(samples: int, inserts: int) -> float:
    """Samples per insert over a window (``nan`` with no insert in it)."""
    return samples / inserts if inserts else math.nan


def limiter_for(rate: Any, memory: Any, batch_size: int,
                max_updates_per_env_step: float | None = None) -> SampleToInsertRatio | None:
    """The trainer's rate limiter for ``memory`` (None: no ratio to hold). ``rate`` is the config's
    ``trainer.rate_limit``. Samples per insert: ``rate.samples_per_insert``, else the memory's own
    (``samples_per_insert``), else ``max_updates_per_env_step × batch_size``; sampling starts once
    the memory holds ``max(start_learning_size, batch_size)`` transitions."""
    spi = rate.samples_per_insert
    if spi is None:
        spi = memory.samples_per_insert
    if spi is None and max_updates_per_env_step:
        spi = max_updates_per_env_step * batch_size
    if spi is None:
        return None
    min_size = max(int(memory.start_learning_size or 0), batch_size)
    return SampleToInsertRatio(float(spi), min_size, rate.error_buffer, batch_size=batch_size)
