"""``memory``: replay size schedule, reuse and prioritisation."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
)

from rulka.config.sections.common import MemoryKnots, Section


class MemoryConfig(Section):
    """Replay buffer (guide: Memory Configuration)."""

    memory_size_schedule: MemoryKnots = Field(
        default_factory=lambda: [
            (0, (50_000, 20_000)),
            (5_000_000, (100_000, 75_000)),
            (7_000_000, (200_000, 150_000)),
        ]
    )
    """[frames, [buffer size, start-learning size]], staircase."""
    prio_alpha: NonNegativeFloat = 0.0
    """PER priority exponent (0 = uniform sampling)."""
    prio_epsilon: PositiveFloat = 2e-3
    """PER priority offset."""
    prio_beta: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    """PER importance-sampling exponent."""
    number_times_single_memory_is_used_before_discard: PositiveInt = 32
    """Average number of times a stored transition is trained on."""
    buffer_test_ratio: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.05
    """Share of transitions held out as a test buffer."""
