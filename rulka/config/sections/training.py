"""``training``: the learner, batch, learning-rate and discount schedules, n-step."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from rulka.config.sections.common import Algorithm, PositiveKnots, Section, SuffixKnots, UnitKnots
from rulka.errors import ConfigError


class TrainingConfig(Section):
    """Run identity, algorithm, optimiser and schedules (guide: Training Configuration)."""

    run_name: str = "rulka"
    """Run identifier: names the run folder, logs and checkpoints."""
    algorithm: Algorithm = "iqn"
    """Learner: iqn (replay, mini-races), ppo, dpo, grpo (on-policy), sac."""
    seed: int | None = None
    """Random seed for the trainer and workers (null = random)."""
    batch_size: PositiveInt = 512
    """Transitions per training batch."""
    adam_epsilon: PositiveFloat = 1e-4
    """Adam epsilon."""
    adam_beta1: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.9
    """Adam beta1."""
    adam_beta2: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.999
    """Adam beta2."""
    weight_decay_lr_ratio: NonNegativeFloat = 0.1
    """IQN: decoupled weight decay per step, weights *= 1 - ratio * lr (Linesight); 0 = off."""
    global_schedule_speed: PositiveFloat = 1.0
    """Multiplies the frame counts of every schedule (>1 stretches training)."""
    lr_schedule: PositiveKnots = Field(
        default_factory=lambda: [(0, 1e-3), (3_000_000, 5e-5), (12_000_000, 5e-5), (15_000_000, 1e-5)]
    )
    """Learning rate vs frames, exponential interpolation."""
    lr_cooldown_fraction: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    """Last fraction of the run's budget (rulka run --minutes/--frames) over which the lr falls; 0 = off.
    IQN, PPO, GRPO, DPO: the learning rate falls geometrically to ``lr_cooldown_final_ratio`` times
    ``lr_schedule``'s value, so that the end weights settle; a run without a budget never cools."""
    lr_cooldown_final_ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 0.05
    """Where the cooldown ends: this times ``lr_schedule``'s value at the end of the budget."""
    lr_cooldown_start_ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    """Where the cooldown begins (from there geometric to ``lr_cooldown_final_ratio``, which it must not
    be below); 1 = at the schedule's rate, lower = a step down first (a cooldown that settles the best
    policy's weights, ``lr_cooldown_from_best``, without first moving them at the full rate)."""
    lr_cooldown_from_best: bool = False
    """IQN: when the cooldown starts, the online and target networks go back to the run's best policy
    (``<run>/best/``, the greedy evaluation's best so far), and the cooldown settles those weights
    instead of wherever the last swing left them; needs ``lr_cooldown_fraction`` > 0 and a best policy."""
    lr_cooldown_end_on_average: bool = False
    """IQN, with ``trainer.average_policy_frames``: a run that stops inside its cooldown ends on the moving
    average of its weights, as stochastic weight averaging's output is the average (Izmailov et al. 2018):
    the averaged weights go into the online and target networks before the last checkpoint, so the end
    weights (``weights/``, ``rulka eval RUN --final``, what ``--resume`` trains on) are ``average/``'s and
    the weights it trained last are kept in ``<run>/trained/``; a run stopped before its cooldown ends on
    the weights it trained. Needs ``lr_cooldown_fraction`` > 0."""
    lr_cooldown_reset_optimizer: bool = False
    """IQN, with ``lr_cooldown_from_best``: the optimizer's moments start afresh when the best policy's
    weights are put back (the moments were gathered on the weights they replace; RAdam warms up again
    from its first step); false keeps them."""
    gamma_schedule: UnitKnots = Field(
        default_factory=lambda: [(0, 0.999), (1_500_000, 0.999), (2_500_000, 1.0)]
    )
    """IQN n-step discount vs frames, linear."""
    policy_rollout_gamma: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    """On-policy rollout discount (ppo/dpo/grpo); null = ppo.gamma."""
    policy_rollout_gamma_schedule: UnitKnots | None = None
    """On-policy rollout discount vs frames, linear; wins over ppo.ppo_gamma_schedule."""
    n_steps: PositiveInt = 3
    """n-step returns."""
    discard_non_greedy_actions_in_nsteps: bool = True
    """Cut n-step returns at exploratory actions."""
    tensorboard_suffix_schedule: SuffixKnots = Field(
        default_factory=lambda: [
            (0, ""),
            (6_000_000, "_2"),
            (15_000_000, "_3"),
            (30_000_000, "_4"),
            (45_000_000, "_5"),
            (80_000_000, "_6"),
            (150_000_000, "_7"),
        ]
    )
    """TensorBoard folder suffix vs frames, staircase."""
    oversample_long_term_steps: NonNegativeInt = 40
    """Mini-race time sampling: oversample times with many steps left."""
    oversample_maximum_term_steps: NonNegativeInt = 5
    """Mini-race time sampling: shift and upper margin of the extended range."""

    @model_validator(mode="after")
    def _cooldown_keys_act(self) -> TrainingConfig:
        """The cooldown's weight keys are refused where nothing would act on them (what the learner
        must be able to do is checked by the trainer, ``rulka.trainer.cooldown``)."""
        for key, on in (("lr_cooldown_from_best", self.lr_cooldown_from_best),
                        ("lr_cooldown_end_on_average", self.lr_cooldown_end_on_average)):
            if on and self.lr_cooldown_fraction <= 0:
                raise ConfigError(f"config key `training.{key}`: training.lr_cooldown_fraction is 0: set it to false")
        if self.lr_cooldown_reset_optimizer and not self.lr_cooldown_from_best:
            raise ConfigError("config key `training.lr_cooldown_reset_optimizer` acts when the cooldown puts the best "
                              "policy back: set training.lr_cooldown_from_best too, or set it to false")
        return self

