"""``exploration``: epsilon and Boltzmann schedules."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    NonNegativeFloat,
)

from rulka.config.sections.common import Section, UnitKnots


class ExplorationConfig(Section):
    """Epsilon-greedy and epsilon-Boltzmann exploration (IQN)."""

    epsilon_schedule: UnitKnots = Field(
        default_factory=lambda: [(0, 1.0), (50_000, 1.0), (300_000, 0.1), (3_000_000, 0.03)]
    )
    """Probability of a uniformly random action vs frames, linear."""
    epsilon_boltzmann_schedule: UnitKnots = Field(default_factory=lambda: [(0, 0.15), (3_000_000, 0.03)])
    """Probability of argmax(Q + tau * noise) vs frames, linear."""
    tau_epsilon_boltzmann: NonNegativeFloat = 0.01
    """Noise scale of Boltzmann exploration."""
    multi_action_exploration: Literal["per_action", "per_block"] = "per_action"
    """Multi-action blocks: one epsilon draw per action of the block (per_action) or one for the whole block (per_block)."""
