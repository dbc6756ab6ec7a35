"""``memory``: replay size schedule, reuse and prioritisation."""

from __future__ import annotations

from typing import Annotated, Literal

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
    batch_device: Literal["auto", "host", "pinned", "device"] = "auto"
    """Where the IQN learner's replay batches are assembled (rulka.memory.batch_device).

    host: numpy arrays the learner copies to its device during the update. pinned: gathered into
    page-locked memory and copied to the GPU without blocking, by the thread that samples (with
    trainer.prefetch_batches, during the previous update). device: the image frames are also kept
    on the GPU and each batch is gathered there. auto: host on CPU; on CUDA device when the largest
    image ring memory_size_schedule can reach fits in device_frames_max_gb, else pinned; host when
    performance.apply_randomcrop_augmentation is on (it crops numpy batches). Not measured on a
    GPU yet (bench/learner.py's batch rows)."""
    device_frames_max_gb: NonNegativeFloat = 16.0
    """GPU memory (GB) that batch_device auto may spend on the replay's image frames.

    160x120 frames take 19.2 kB each: about 4.7 GB at the default schedule's 200k transitions
    (1.25 frames per transition slot plus the test store). Larger rings take pinned."""
