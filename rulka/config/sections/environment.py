"""``environment``: the game or simulator backend, timing, track and inputs (``tm2020`` inside)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
)

from rulka.config.sections.common import Section


class Tm2020Config(Section):
    """TrackMania 2020 through Openplanet, screen capture and a virtual gamepad (backend: tm2020)."""

    plugin_host: str = "127.0.0.1"
    """Where rulka's Openplanet plugin listens (the game's own PC)."""
    plugin_port: Annotated[int, Field(ge=1, le=65535)] = 9010
    """TCP port of rulka's Openplanet plugin (its Port setting in Openplanet)."""
    window_title: str = "Trackmania"
    """Exact title of the game window to capture."""
    window_width: Annotated[int, Field(ge=8)] = 256
    """Client-area width the game window is resized to (set the game's windowed resolution to match)."""
    window_height: Annotated[int, Field(ge=8)] = 128
    """Client-area height the game window is resized to."""
    capture: Literal["auto", "windows", "linux", "fake"] = "auto"
    """Screen capture: auto (by platform), windows (GDI), linux (X11 + mss, for Proton), fake (rulka's fake game)."""
    control: Literal["gamepad", "keyboard", "fake"] = "gamepad"
    """How actions reach the game: virtual gamepad (analog), keyboard (binary, window focused), fake."""
    observation: Literal["image", "lidar"] = "image"
    """image: the window as a grayscale nn.vis.image_size frame; lidar: TMRL's 19 beams appended to the float inputs."""
    lidar_history: PositiveInt = 4
    """LIDAR scans (this one and the previous ones) in the float inputs (observation: lidar)."""
    lidar_dark_threshold: Annotated[int, Field(ge=1, le=255)] = 55
    """A LIDAR beam stops at the first pixel darker than this on all channels (road borders)."""
    lidar: Literal["rulka", "tmrl"] = "rulka"
    """Which LIDAR (observation: lidar): rulka (origin at the bottom, beams left to right, lengths / frame diagonal) or tmrl (TMRL 0.7.1's own: origin at 44/49 of the height, beams right to left, raw pixel indexes from 20 px out)."""
    start_obs_capture_ms: NonNegativeInt = 40
    """rtgym start_obs_capture: ms into each action step at which telemetry and the frame are read."""
    time_step_timeout_factor: PositiveFloat = 1.0
    """rtgym elasticity: a step may start this many step durations late before the clock restarts."""
    telemetry_timeout_s: PositiveFloat = 2.0
    """Telemetry older than this mid-race ends the episode as a fault (plugin silent)."""
    reset_timeout_s: PositiveFloat = 10.0
    """After pressing respawn, wait this long for the start signal before pressing again."""
    recover_timeout_s: PositiveFloat = 600.0
    """A reset waits this long for the game to come back (plugin, window, unpaused) before failing."""
    reference_line: Path | None = None
    """Reference line file the rewards follow (rulka tm record-line --game tm2020); null with the fake game."""
    fake_fps: PositiveFloat = 60.0
    """Fake game: telemetry records per game second (its frame rate; times fake_time_scale per wall second)."""
    fake_time_scale: PositiveFloat = 1.0
    """Fake game: game seconds per wall-clock second (1 = real time, like the game)."""
    fake_countdown_s: NonNegativeFloat = 1.5
    """Fake game: game seconds between respawn and the start signal."""
    fake_fixed_port: bool = False
    """Fake game: listen on plugin_port instead of a free port (one fake per machine then)."""

    @property
    def lidar_float_inputs(self) -> int:
        """Floats LIDAR adds to the float inputs (0 in image mode)."""
        return 19 * self.lidar_history if self.observation == "lidar" else 0


class EnvironmentConfig(Section):
    """Environment, timing, track geometry and timeouts (guide: Environment Configuration)."""

    backend: Literal["sim", "tmnf", "tm2020", "gym"] = "sim"
    """Which environment workers run: built-in simulator, TrackMania Nations Forever, TrackMania 2020, or any Gymnasium env."""
    gym_id: str | None = None
    """Gymnasium environment id (backend: gym), e.g. CartPole-v1."""
    gym_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for gymnasium.make (backend: gym)."""
    track: str = "default"
    """Simulator track name (backend: sim; backend: tm2020 with the fake game)."""
    continuous_actions: bool = False
    """Continuous gas/brake/steer actions instead of the discrete action set."""
    tm_engine_step_per_action: PositiveInt = 5
    """Game simulation steps (10 ms each) per agent action."""
    ms_per_tm_engine_step: PositiveInt = 10
    """Milliseconds per game simulation step (fixed by the engine at 100 Hz)."""
    rl_action_offsets_ms: list[NonNegativeInt] = Field(default_factory=lambda: [0])
    """Multi-action offsets in ms ([0] = one action per decision; [0, 10, 20, 30, 40] = 5 actions per decision, one per 10 ms step; IQN only)."""
    n_zone_centers_in_inputs: PositiveInt = 40
    """Number of upcoming track waypoints given to the agent."""
    one_every_n_zone_centers_in_inputs: PositiveInt = 20
    """Keep one virtual checkpoint in N as a waypoint input."""
    distance_between_checkpoints: PositiveFloat = 0.5
    """Spacing of virtual checkpoints along the reference line, metres."""
    n_zone_centers_extrapolate_before_start_of_map: NonNegativeInt = 20
    """Virtual waypoints extrapolated before the start line."""
    n_zone_centers_extrapolate_after_end_of_map: NonNegativeInt = 1000
    """Virtual waypoints extrapolated after the finish line."""
    road_width: PositiveFloat = 90
    """Largest lateral distance from the centre line still on track, metres."""
    temporal_mini_race_duration_ms: PositiveInt = 7000
    """Mini-race horizon in ms: Q-values predict the reward of the next this-many ms."""
    margin_to_announce_finish_meters: PositiveFloat = 700
    """Distance-to-finish input is capped at this many metres."""
    n_contact_material_physics_behavior_types: NonNegativeInt = 4
    """Surface categories one-hot encoded per wheel."""
    n_prev_actions_in_inputs: NonNegativeInt = 5
    """Previous actions included in the float inputs (4 flags each)."""
    cutoff_rollout_if_race_not_finished_within_duration_ms: PositiveInt = 300_000
    """End an episode that has not finished after this many ms."""
    cutoff_rollout_if_no_vcp_passed_within_duration_ms: PositiveInt = 2_000
    """End an episode when no virtual checkpoint is passed for this many ms."""
    timeout_during_run_ms: PositiveInt = 30_000
    """Game-interface response timeout while racing, ms."""
    timeout_between_runs_ms: PositiveInt = 600_000_000
    """Game-interface response timeout while parked between runs, ms."""
    tmi_protection_timeout_s: PositiveInt = 500
    """Socket timeout towards the game interface, seconds."""
    game_reboot_interval: PositiveInt = 43_200
    """Restart the game every this many seconds (memory leaks)."""
    game_camera_number: Annotated[int, Field(ge=1, le=3)] = 2
    """Game camera: 1 behind, 2 first person, 3 top."""
    game_launch: Literal["launch", "attach", "fake"] = "launch"
    """How a TMNF worker gets its game: launch it (TMLoader on Windows, user.linux_launch_game_path elsewhere), attach to one the user started, or run rulka's fake game (CI, tests)."""
    game_start_timeout_s: PositiveFloat = 120
    """Seconds to wait for the game's plugin to accept a connection after a launch."""
    sync_virtual_and_real_checkpoints: bool = True
    """Keep virtual checkpoint progress in step with the game's checkpoints."""
    tm2020: Tm2020Config = Field(default_factory=Tm2020Config)
    """TrackMania 2020 worker settings (backend: tm2020)."""

    @field_validator("rl_action_offsets_ms")
    @classmethod
    def _offsets(cls, value: list[int]) -> list[int]:
        if not value:
            return [0]
        expected = [10 * i for i in range(len(value))]
        if value != expected:
            raise ValueError(f"offsets must be consecutive 10 ms steps from 0, e.g. {expected}; got {value}")
        return value

    @property
    def n_actions_per_block(self) -> int:
        """Actions per decision block: len(rl_action_offsets_ms) in multi-action mode, else 1."""
        return len(self.rl_action_offsets_ms)

    @property
    def is_multi_action(self) -> bool:
        return self.n_actions_per_block > 1

    @property
    def ms_per_action(self) -> int:
        """tm_engine_step_per_action x ms_per_tm_engine_step; one engine step in multi-action mode."""
        if self.is_multi_action:
            return self.ms_per_tm_engine_step
        return self.tm_engine_step_per_action * self.ms_per_tm_engine_step

    @property
    def ms_per_block(self) -> int:
        """Milliseconds per decision (one replay transition)."""
        if self.is_multi_action:
            return self.n_actions_per_block * self.ms_per_tm_engine_step
        return self.ms_per_action

    @property
    def temporal_mini_race_duration_actions(self) -> int:
        """Mini-race horizon in decisions: temporal_mini_race_duration_ms // ms_per_block."""
        return self.temporal_mini_race_duration_ms // self.ms_per_block

    @property
    def max_allowable_distance_to_virtual_checkpoint(self) -> float:
        """sqrt((distance_between_checkpoints/2)^2 + (road_width/2)^2), metres."""
        return math.hypot(self.distance_between_checkpoints / 2, self.road_width / 2)

    @property
    def zone_center_spacing_m(self) -> float:
        """Distance between two waypoint inputs, metres."""
        return self.one_every_n_zone_centers_in_inputs * self.distance_between_checkpoints

    @property
    def float_input_dim(self) -> int:
        """Size of the TrackMania float observation (guide formula; 184 with the defaults).

        27 fixed features (mini-race time, 16 wheel and gear values, 9 car-frame velocity and up
        values, distance to finish) + 3 per waypoint + 4 per previous action + 4 wheels x surface
        categories + 1 freewheeling flag. The guide's headline "191" is stale; its own sum is 184.
        """
        return (
            27
            + 3 * self.n_zone_centers_in_inputs
            + 4 * self.n_prev_actions_in_inputs
            + 4 * self.n_contact_material_physics_behavior_types
            + 1
        )
