"""``exploration``: epsilon and Boltzmann schedules."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
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
    epsilon_z_exponent: PositiveFloat | None = None
    """εz-greedy: hold each random action for n actions, P(n) ~ n^-exponent (the paper: 2); null: one action.

    Temporally-extended epsilon-greedy (Dabney, Ostrovski and Barreto, ICLR 2021): a uniformly random
    action, once drawn (probability ``epsilon``), is taken for n actions in all, n drawn from the zeta
    distribution P(n) proportional to n^-exponent on 1..``epsilon_z_max_actions``; the held actions
    need no new draw, so a random brake or steer lasts long enough to change where the car goes.
    None: every random action lasts one action (plain epsilon-greedy, the guide's). IQN with one
    action per decision only."""
    epsilon_z_max_actions: PositiveInt = 100
    """εz-greedy's longest hold, in actions (the paper: 10,000 Atari steps; 100 actions of 50 ms are 5 s)."""
