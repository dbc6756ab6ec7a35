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

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rulka.errors import ConfigError

if TYPE_CHECKING:
    from rulka.interfaces import TrainingAgent
    from rulka.trainer.average import PolicyAverage
    from rulka.trainer.best import BestPolicy
    from rulka.trainer.state import RunState

log = logging.getLogger(__name__)


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


class CooldownWeights:
    """The cooldown as the trainer runs it: the ``lr_factor`` it gives the agent, and what it does
    to the agent's weights. ``training.lr_cooldown_from_best``: when the factor first drops, the
    best policy's weights go into the learner (once per invocation; the optimizer starts afresh with
    ``lr_cooldown_reset_optimizer``). ``training.lr_cooldown_end_on_average``: a run stopped inside
    its cooldown ends on the moving average of its weights, those it trained last kept by
    ``keep_trained`` (``<run>/trained/``). What the config alone decides is checked by the config
    (``rulka.config.sections.training``); what the agent must be able to do is checked here."""

    def __init__(self, training: Any, agent: TrainingAgent, state: RunState, best_policy: BestPolicy | None,
                 average: PolicyAverage | None) -> None:
        self.agent, self.state, self.best_policy, self.average = agent, state, best_policy, average
        self.training = training
        self.from_best = bool(training.lr_cooldown_from_best)
        self.reset_optimizer = bool(training.lr_cooldown_reset_optimizer)
        self.end_on_average = bool(training.lr_cooldown_end_on_average)
        self.schedule: LrCooldown | None = None  # made by ``start``: the budget is known when the run starts
        self.cooled_from_best = False  # done in this invocation (a resumed run cools again over what is left)
        self.keep_trained: Callable[[dict[str, Any]], None] | None = None
        name = type(agent).__name__
        if training.lr_cooldown_fraction > 0 and not agent.follows_lr_schedule:
            raise ConfigError(
                f"config key `training.lr_cooldown_fraction` ({training.lr_cooldown_fraction}): the {name} learner "
                "has no training.lr_schedule to cool (built for iqn, ppo, grpo, dpo): remove it")
        for key, wanted in (("lr_cooldown_from_best", self.from_best), ("lr_cooldown_end_on_average",
                                                                         self.end_on_average)):
            if wanted and not agent.loads_actor_weights:
                raise ConfigError(f"config key `training.{key}`: the {name} learner cannot load published weights "
                                  "(built for iqn): set it to false")

    def start(self, samples: int, budget_seconds: float | None, budget_samples: int | None) -> LrCooldown:
        """The run's budget starts now, with ``samples`` received so far."""
        tr = self.training
        self.schedule = LrCooldown(tr.lr_cooldown_fraction, tr.lr_cooldown_final_ratio,
                                   start_ratio=tr.lr_cooldown_start_ratio, budget_seconds=budget_seconds,
                                   budget_samples=budget_samples)
        self.schedule.start(samples)
        if self.schedule.fraction > 0:
            log.info("trainer: %s", self.schedule.describe())
        return self.schedule

    def step(self) -> None:
        """Set the agent's ``lr_factor`` for now; put the best policy back when the cooldown begins."""
        if self.schedule is None or not self.schedule.active:
            return
        factor = self.schedule.factor(self.state.samples)
        self.agent.lr_factor = factor
        if factor < 1.0 and self.from_best and not self.cooled_from_best:
            self.cool_from_best_policy()

    def cooling(self) -> bool:
        return self.schedule is not None and self.schedule.cooling(self.state.samples)

    def average_candidates(self, samples: int) -> bool:
        """Whether best-policy candidates alternate with the average now: the run ends on it and its
        cooldown has begun (``rulka.trainer.best``)."""
        return self.end_on_average and self.schedule is not None and self.schedule.cooling(samples)

    def end_on_averaged_weights(self) -> bool:
        """Put the moving average of the run's weights (``average/``) into the learner's networks, so
        that the last checkpoint's weights are the average. False (logged, counted) when the run
        stopped before its cooldown or has no average yet: it ends on the weights it trained."""
        avg, counters = self.average, self.state.counters
        why = ""
        if avg is None or avg.weights is None:
            why = "no averaged weights yet"
        elif not self.cooling():
            why = "the run stopped before its learning-rate cooldown"
        else:
            # copies: the actor's tensors may be the network's own, which the average overwrites
            trained = {k: v.detach().clone() for k, v in self.agent.actor_weights().items()}
            try:
                self.agent.load_actor_weights(avg.weights)
            except ValueError as exc:  # an average/ file of another network (a resumed run whose config changed)
                why = f"the average's {exc}"
        if why:
            counters["end_on_average_skipped"] += 1
            log.warning("trainer: the run ends on the weights it trained, not their average: %s", why)
            return False
        counters["ended_on_average"] += 1
        if self.keep_trained is not None:  # nothing is lost: the weights it trained last, beside the average
            self.keep_trained(trained)
        assert avg is not None
        log.info("trainer: the run ends on the average of its weights (%s, horizon %s frames, %s versions up to %s "
                 "frames)", avg.kind, f"{avg.frames:,}", avg.versions, f"{avg.samples or 0:,}")
        return True

    def cool_from_best_policy(self) -> bool:
        """Put the best policy's weights into the learner's networks. False (logged, counted) when
        the run has no best policy yet: the cooldown then settles the current weights."""
        self.cooled_from_best = True
        best, counters = self.best_policy, self.state.counters
        weights = best.best_weights() if best is not None else None
        why = "no best policy yet"
        if best is not None and weights is not None:
            try:
                self.agent.load_actor_weights(weights)
                why = ""
            except ValueError as exc:  # a best/ file of another network (a resumed run whose config changed)
                why = f"the best policy's {exc}"
        if best is None or why:
            counters["cooldown_without_best"] += 1
            log.warning("trainer: the cooldown starts from the current weights: %s", why)
            return False
        counters["cooldown_from_best"] += 1
        if self.reset_optimizer:
            self.agent.reset_optimizer()
            counters["cooldown_optimizer_reset"] += 1
        if self.average is not None:  # the average of the replaced weights is no average of these
            self.average.restart(weights, self.state.samples)
            counters["average_restarted"] += 1
        log.info("trainer: the cooldown starts from the best policy (%s at %s frames)", best.describe(),
                 (best.best or {}).get("frames"))
        return True
