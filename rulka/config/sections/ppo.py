"""``ppo``: the PPO learner."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
)

from rulka.config.sections.common import FloatKnots, Section, UnitKnots


class PpoConfig(Section):
    """PPO loss and update settings (training.algorithm: ppo)."""

    gamma: Annotated[float, Field(ge=0.0, le=1.0)] = 0.99
    """Legacy rollout discount, used when training.policy_rollout_gamma* are unset."""
    gae_lambda: Annotated[float, Field(ge=0.0, le=1.0)] = 0.95
    """GAE lambda."""
    clip_coef: PositiveFloat = 0.2
    """Surrogate clip range."""
    clip_coef_vf: PositiveFloat | None = None
    """Value clip range (null = plain MSE)."""
    ent_coef: NonNegativeFloat = 0.01
    """Entropy bonus coefficient."""
    vf_coef: NonNegativeFloat = 0.5
    """Value loss coefficient."""
    max_grad_norm: PositiveFloat = 0.5
    """Gradient norm clip."""
    update_epochs: PositiveInt = 4
    """Passes over each rollout batch."""
    num_minibatches: PositiveInt = 4
    """Minibatches per epoch."""
    normalize_advantages: bool = True
    """Normalise advantages within each minibatch (as CleanRL / Stable-Baselines3)."""
    rollout_steps_per_update: PositiveInt = 2048
    """Environment steps gathered before one update."""
    ppo_gamma_schedule: UnitKnots | None = None
    """Legacy discount vs frames, linear."""
    gae_lambda_schedule: UnitKnots | None = None
    """GAE lambda vs frames, linear (null = gae_lambda)."""
    ent_coef_schedule: FloatKnots | None = None
    """Entropy coefficient vs frames, linear (null = ent_coef)."""
    vf_coef_schedule: FloatKnots | None = None
    """Value coefficient vs frames, linear (null = vf_coef)."""
