"""``sac``: SAC and REDQ."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)

from rulka.config.sections.common import Section


class SacConfig(Section):
    """SAC and REDQ (training.algorithm: sac): squashed-Gaussian actor, an ensemble of critics,
    polyak targets, automatic entropy tuning, uniform replay. REDQ = n_critics > 2 with a random
    subset of target_critics in the target and updates_per_sample > 1."""

    gamma: Annotated[float, Field(ge=0.0, le=1.0)] = 0.99
    """Discount."""
    actor_lr: PositiveFloat = 3e-4
    """Actor learning rate (Adam)."""
    critic_lr: PositiveFloat = 1e-3
    """Critic learning rate (Adam)."""
    alpha_lr: PositiveFloat = 1e-3
    """Entropy temperature learning rate (Adam, on log alpha)."""
    tau: Annotated[float, Field(gt=0.0, le=1.0)] = 0.005
    """Polyak rate: target <- tau * online + (1 - tau) * target after each critic update."""
    hidden_dim: PositiveInt = 256
    """Width of the actor and critic hidden layers."""
    hidden_layers: PositiveInt = 2
    """Hidden layers of the actor and of each critic."""
    autotune_alpha: bool = True
    """Tune the entropy temperature toward target_entropy (else alpha stays at init_alpha)."""
    init_alpha: PositiveFloat = 1.0
    """Entropy temperature at the start."""
    target_entropy: float | None = None
    """Entropy target of the automatic tuning (null = minus the action dimension)."""
    n_critics: Annotated[int, Field(ge=2)] = 2
    """Critics in the ensemble (2 = SAC's twin critics; REDQ uses 10)."""
    target_critics: Annotated[int, Field(ge=1)] = 2
    """Critics drawn at random for each target's minimum (REDQ's M; 2 of 2 = SAC's clipped double Q)."""
    policy_critic_reduction: Literal["min", "mean"] | None = None
    """Q the actor maximises: min or mean over the critics (null = min for 2 critics, mean for more, as REDQ)."""
    policy_every: PositiveInt | None = None
    """Actor and temperature update every N critic updates (null = round(updates_per_sample): once per sample, as REDQ)."""
    updates_per_sample: PositiveFloat = 1.0
    """Critic updates per env step received (UTD ratio; REDQ uses 20)."""
    start_learning_size: NonNegativeInt = 5000
    """Transitions stored before the first update."""
    random_steps: NonNegativeInt = 5000
    """Each worker's first N steps take uniformly random actions."""
    buffer_size: PositiveInt = 1_000_000
    """Replay capacity in transitions (frames are stored once)."""
    n_steps: PositiveInt = 1
    """n-step returns (1 = SAC's one-step target)."""
    log_std_min: float = -5.0
    """Lower bound of the actor's log standard deviation."""
    log_std_max: float = 2.0
    """Upper bound of the actor's log standard deviation."""
