"""``performance``: worker/trainer pacing and the game's timing knobs."""

from __future__ import annotations

from pydantic import (
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)

from rulka.config.sections.common import Section


class PerformanceConfig(Section):
    """Throughput and synchronisation (guide: Performance Configuration)."""

    gpu_collectors_count: PositiveInt = 4
    """Game instances (collectors) per machine."""
    max_rollout_queue_size: PositiveInt = 1
    """Finished rollouts a collector may queue before blocking."""
    running_speed: PositiveFloat = 160
    """Game speed multiplier."""
    send_shared_network_every_n_batches: PositiveInt = 8
    """Learner publishes weights every N batches."""
    update_inference_network_every_n_actions: PositiveInt = 8
    """Collectors refresh their policy every N actions during a rollout."""
    make_highest_prio_figures: bool = False
    """Save images of the highest-priority transitions (PER only)."""
    plot_race_time_left_curves: bool = False
    """Save race-time-left curve plots."""
    n_transitions_to_plot_in_distribution_curves: PositiveInt = 1000
    """Transitions in distribution plots."""
    apply_randomcrop_augmentation: bool = False
    """Random-crop augmentation of replayed frames, on the learner's sampled batches only.

    Each sampled item's state and next-state images are edge-padded and cropped back at one random
    offset (rulka.memory.augment); workers and stored frames never see it."""
    n_pixels_to_crop_on_each_side: NonNegativeInt = 2
    """Crop margin for that augmentation: images move by up to this many pixels on each axis."""
    frames_before_save_best_runs: NonNegativeInt = 1_500_000
    """Frames before best runs are saved."""
    threshold_to_save_all_runs_ms: int = -1
    """Save every run faster than this (ms; -1 = off)."""

    def inference_update_interval_ms(self, ms_per_action: int) -> int:
        """Time between policy refreshes during a rollout: ms_per_action x update_inference_network_every_n_actions."""
        return ms_per_action * self.update_inference_network_every_n_actions
