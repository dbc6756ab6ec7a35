"""The learning-rate cooldown: over the last part of a run's budget the learning rate falls
geometrically from its schedule's value to a fraction of it, so that the weights a run ends with
have settled instead of being one draw of a policy that still moves by seconds between versions.

The budget is what the run was given (``rulka run --minutes M`` and/or ``--frames N``, passed to
the trainer as ``--budget-minutes`` / ``--budget-frames``; ``rulka-trainer --minutes`` counts too),
so the cooldown scales with the run: a 20-minute run cools over its last 4 minutes at
``training.lr_cooldown_fraction: 0.2``, a 2-hour run over its last 24. A run with no budget never
cools. With both budgets, the one nearer its end decides. The factor starts at
``training.lr_cooldown_start_ratio`` (1 by default: the cooldown begins at the schedule's rate; lower
starts it with a step down, for a cooldown that only settles weights it was handed, e.g. the best
policy's with ``training.lr_cooldown_from_best``) and falls geometrically to
``training.lr_cooldown_final_ratio``. It multiplies the learning rate
of ``training.lr_schedule`` (the agent's ``lr_factor``), and with it the decoupled weight decay,
which is proportional to the learning rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def cooldown_factor(progress: float, fraction: float, final_ratio: float, start_ratio: float = 1.0) -> float:
    """Learning-rate multiplier at ``progress`` (0 at the start of the budget, 1 at its end): 1
    until ``1 - fraction``, then ``start_ratio * (final_ratio / start_ratio) ** t`` with
    ``t = (progress - (1 - fraction)) / fraction``: ``start_ratio`` where the cooldown begins,
    ``final_ratio`` at the end and past it. ``fraction`` 0: always 1."""
    if fraction <= 0.0 or progress < 1.0 - fraction:
        return 1.0
    t = min(1.0, (progress - (1.0 - fraction)) / fraction)
    return float(start_ratio * (final_ratio / start_ratio) ** t)


class LrCooldown:
    """Progress through a run's budget and the learning-rate factor it gives.

    ``budget_seconds`` counts from ``start``; ``budget_samples`` is the total of samples received
    at which the run stops (``rulka run --frames``), the samples received when this invocation
    started being where its progress is 0 (a resumed run cools over what is left of it)."""

    def __init__(self, fraction: float, final_ratio: float, *, start_ratio: float = 1.0,
                 budget_seconds: float | None = None, budget_samples: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0.0 <= fraction < 1.0:
            raise ValueError(f"lr cooldown fraction must be in [0, 1), got {fraction}")
        if not 0.0 < final_ratio <= 1.0:
            raise ValueError(f"lr cooldown final ratio must be in (0, 1], got {final_ratio}")
        if not final_ratio <= start_ratio <= 1.0:
            raise ValueError(f"lr cooldown start ratio must be in [final ratio {final_ratio:g}, 1], got {start_ratio}")
        self.fraction = float(fraction)
        self.final_ratio = float(final_ratio)
        self.start_ratio = float(start_ratio)
        self.budget_seconds = budget_seconds if budget_seconds and budget_seconds > 0 else None
        self.budget_samples = budget_samples if budget_samples and budget_samples > 0 else None
        self._clock = clock
        self._t0: float | None = None
        self._samples0 = 0

    @property
    def active(self) -> bool:
        """Whether it can ever change the learning rate: a fraction above 0 and a budget."""
        return self.fraction > 0.0 and (self.budget_seconds is not None or self.budget_samples is not None)

    def start(self, samples: int) -> None:
        """The budget starts now, with ``samples`` received so far."""
        self._t0 = self._clock()
        self._samples0 = int(samples)

    def progress(self, samples: int) -> float:
        """How far through its budget the run is (0..1+): the larger of time and samples."""
        if self._t0 is None:
            return 0.0
        parts = [0.0]
        if self.budget_seconds is not None:
            parts.append((self._clock() - self._t0) / self.budget_seconds)
        if self.budget_samples is not None:
            span = self.budget_samples - self._samples0
            parts.append(1.0 if span <= 0 else (samples - self._samples0) / span)
        return max(parts)

    def seconds_left(self, samples: int) -> float | None:
        """Estimated seconds until the budget ends (None without a budget or before any sample of a
        frame budget came): the time budget's remainder, or the frames left at the mean rate since
        ``start``, whichever ends first."""
        if self._t0 is None:
            return None
        elapsed = self._clock() - self._t0
        left: list[float] = []
        if self.budget_seconds is not None:
            left.append(self.budget_seconds - elapsed)
        if self.budget_samples is not None:
            done = samples - self._samples0
            if done >= self.budget_samples - self._samples0:
                left.append(0.0)
            elif done > 0 and elapsed > 0:
                left.append((self.budget_samples - samples) * elapsed / done)
        return max(0.0, min(left)) if left else None

    def budget_text(self, samples: int) -> str | None:
        """The progress line's budget field, e.g. ``34% ~26 min left`` (None without a budget)."""
        if self._t0 is None or (self.budget_seconds is None and self.budget_samples is None):
            return None
        text = f"{min(1.0, self.progress(samples)):.0%}"
        left = self.seconds_left(samples)
        if left is not None:
            text += f" ~{left / 60:.0f} min left" if left >= 60 else f" ~{left:.0f} s left"
        return text

    def cooling(self, samples: int) -> bool:
        """Whether the run is inside its cooldown (active, and at least ``1 - fraction`` of its budget used)."""
        return self.active and self.progress(samples) >= 1.0 - self.fraction

    def factor(self, samples: int) -> float:
        """The learning-rate multiplier now (1.0 when inactive)."""
        if not self.active:
            return 1.0
        return cooldown_factor(self.progress(samples), self.fraction, self.final_ratio, self.start_ratio)

    def describe(self) -> str:
        """One line for the trainer's log (which writes it when the fraction is above 0)."""
        budget = " and ".join(
            ([f"{self.budget_seconds / 60:g} min"] if self.budget_seconds is not None else [])
            + ([f"{self.budget_samples:,} frames"] if self.budget_samples is not None else []))
        if not budget:
            return ("learning-rate cooldown inactive: the run has no budget (give rulka run --minutes or "
                    "--frames to cool the learning rate over its end)")
        return (f"learning-rate cooldown over the last {self.fraction:.0%} of {budget} "
                f"({self.start_ratio:g} down to {self.final_ratio:g} x training.lr_schedule)")
