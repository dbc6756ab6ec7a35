"""``rewards``: the reward terms of the shared pipeline."""

from __future__ import annotations

from pydantic import (
    Field,
)

from rulka.config.sections.common import FloatKnots, Section


class RewardsConfig(Section):
    """Reward shaping (guide: Rewards Configuration)."""

    constant_reward_per_ms: float = -6 / 5000
    """Time penalty per millisecond."""
    reward_per_m_advanced_along_centerline: float = 5 / 500
    """Progress reward per metre along the reference line."""
    finish_reward_per_ms_left_in_mini_race: float = Field(default=0.0, ge=0.0)
    """Reward per ms of the mini-race left when the race finishes inside it (IQN mini-races; 0 = off).

    rulka's own, not in the guide. Discounted as the steps it stands for. Inside a mini-race the
    progress to the finish line is the same however fast the car gets there, so only the time penalty
    pays a faster finish, and with a small one the last seconds of a race go slack (BENCHMARKS.md,
    hairpins_single). A larger ``constant_reward_per_ms`` pays it too but also charges its full value
    over every window, an offset the network has to learn; this reward is that penalty's finish share
    alone."""
    final_speed_reward_as_if_duration_s: float = 0.0
    """Speed-gain bonus, valued as this many seconds of progress per m/s (0 = off)."""
    shaped_reward_dist_to_cur_vcp: float = -0.1
    """Potential coefficient on the distance to the current virtual checkpoint."""
    shaped_reward_min_dist_to_cur_vcp: float = 2
    """Lower clamp of that distance, metres."""
    shaped_reward_max_dist_to_cur_vcp: float = 25
    """Upper clamp of that distance, metres."""
    shaped_reward_point_to_vcp_ahead: float = 0.0
    """Potential coefficient on pointing towards the next checkpoint (0 = off)."""
    engineered_reward_min_dist_to_cur_vcp: float = 5
    """Lower clamp for the close-to-checkpoint reward, metres."""
    engineered_reward_max_dist_to_cur_vcp: float = 25
    """Upper clamp for the close-to-checkpoint reward, metres."""
    engineered_speedslide_reward_schedule: FloatKnots = Field(default_factory=lambda: [(0, 0.0)])
    """Speedslide reward vs frames, linear."""
    engineered_neoslide_reward_schedule: FloatKnots = Field(default_factory=lambda: [(0, 0.0)])
    """Neoslide (lateral speed >= 2 m/s) reward vs frames, linear."""
    engineered_kamikaze_reward_schedule: FloatKnots = Field(default_factory=lambda: [(0, 0.0)])
    """Kamikaze reward vs frames, linear."""
    engineered_close_to_vcp_reward_schedule: FloatKnots = Field(default_factory=lambda: [(0, 0.0)])
    """Close-to-checkpoint reward vs frames, linear."""

    @property
    def final_speed_reward_per_m_per_s(self) -> float:
        """reward_per_m_advanced_along_centerline x final_speed_reward_as_if_duration_s."""
        return self.reward_per_m_advanced_along_centerline * self.final_speed_reward_as_if_duration_s
