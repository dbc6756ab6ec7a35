"""``grpo``: the GRPO learner."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
)

from rulka.config.sections.common import FloatKnots, Section


class GrpoConfig(Section):
    """GRPO settings (training.algorithm: grpo)."""

    grpo_group_size: Annotated[int, Field(ge=2)] = 4
    """Rollouts per group update."""
    grpo_normalize_group: Literal["mean", "mean_std"] = "mean"
    """Advantages: subtract the group mean, or also divide by the group std."""
    grpo_ent_coef: NonNegativeFloat = 0.01
    """Entropy bonus coefficient."""
    grpo_max_grad_norm: PositiveFloat = 0.5
    """Gradient norm clip."""
    grpo_update_epochs: PositiveInt = 4
    """Passes over each group."""
    grpo_num_minibatches: PositiveInt = 4
    """Reserved."""
    grpo_ref_sync_every_updates: PositiveInt = 50
    """Copy the policy into the reference every N group updates."""
    grpo_ref_kl_coef: NonNegativeFloat = 0.0
    """KL-to-reference weight (0 = off); the KL is exact from the logits."""
    grpo_objective: Literal["reinforce", "clipped"] = "reinforce"
    """reinforce (the guide's; on-policy only) or clipped (DeepSeekMath: ratio, clip, per-step mean)."""
    grpo_clip_coef: PositiveFloat = 0.2
    """Ratio clip range of grpo_objective: clipped."""
    grpo_ent_coef_schedule: FloatKnots | None = None
    """grpo_ent_coef vs frames, linear."""
    grpo_max_grad_norm_schedule: FloatKnots | None = None
    """grpo_max_grad_norm vs frames, linear."""
    grpo_ref_kl_coef_schedule: FloatKnots | None = None
    """grpo_ref_kl_coef vs frames, linear."""
