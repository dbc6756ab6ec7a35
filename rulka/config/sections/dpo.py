"""``dpo``: the DPO learner."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
)

from rulka.config.sections.common import FloatKnots, Section


class DpoConfig(Section):
    """DPO settings (training.algorithm: dpo)."""

    dpo_beta: PositiveFloat = 0.1
    """Preference loss temperature."""
    dpo_ref_sync_every_updates: PositiveInt = 50
    """Copy the policy into the reference every N pair updates (1 = margin 0 at every pair)."""
    dpo_pair_buffer_max: Annotated[int, Field(ge=2)] = 64
    """Online rollouts kept for pairing."""
    dpo_pair_within_start: bool = True
    """Online pairs: best and worst of one start (worker.rollouts_per_start), not of the whole buffer."""
    dpo_data_mode: Literal["online", "offline", "both"] = "online"
    """Pairs from online rollouts, an offline file, or both."""
    dpo_offline_pairs_jsonl: str | None = None
    """JSONL of {chosen, rejected} rulka episode files (never pickles)."""
    dpo_vf_coef: NonNegativeFloat = 0.1
    """Auxiliary value loss weight (V regressed on the discounted returns; 0 = off)."""
    dpo_update_epochs: PositiveInt = 4
    """Optimiser steps per pair."""
    dpo_num_minibatches: PositiveInt = 4
    """Reserved."""
    dpo_max_grad_norm: PositiveFloat = 0.5
    """Gradient norm clip."""
    dpo_beta_schedule: FloatKnots | None = None
    """dpo_beta vs frames, linear."""
    dpo_vf_coef_schedule: FloatKnots | None = None
    """dpo_vf_coef vs frames, linear."""
    dpo_max_grad_norm_schedule: FloatKnots | None = None
    """dpo_max_grad_norm vs frames, linear."""
