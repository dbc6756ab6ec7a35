"""The TrackMania observation and reward pipeline, shared by every backend.

The built-in simulator, TMNF (TMInterface) and TM2020 (Openplanet) all report a ``CarState``
after each action; ``TrackmaniaPipeline`` turns it into the float observation, the reward and the
episode cut-offs, against the track's ``ReferenceLine``. Nothing here knows which backend runs.

Float observation layout (``float_feature_names`` names every slot; ``D = float_input_dim``):

====================  ======================  =================================================
slots                 name                    content
====================  ======================  =================================================
1                     mini_race_time          0 here. The replay memory overwrites it with the
                                              mini-race time (in decisions: actions, or blocks
                                              in multi-action mode) when it samples a batch; 0
                                              means "at the start of a mini-race", which is
                                              what the actor assumes when it acts.
4 * n_prev_actions    prev_action{k}/{flag}   last actions as (accelerate, brake, left, right),
                                              oldest first; "accelerate" before the first one
4                     wheel_sliding/{w}       wheel slides (FL, FR, RL, RR)
4                     wheel_contact/{w}       wheel touches the ground
4                     wheel_damper/{w}        suspension compression; per game: TMNF and the
                                              simulator report damper absorption (about
                                              0.005-0.15), TM2020 its *DamperLen, a length
1                     gearbox_state           non-zero while shifting
1                     gear                    engine gear
1                     rpm                     engine rpm
1                     gearbox_counter         steps since the gearbox started shifting (0 idle)
4 * n_categories      material/{w}/{cat}      per wheel, one-hot surface category; "other" and
                                              airborne wheels are all zeros. TM2020 has no
                                              turbo surface (its ids 7 and 26 are
                                              Turbo_Deprecated), so "turbo" stays 0 there
3                     angular_velocity/{a}    in the car frame (lateral, up, forward)
3                     velocity/{a}            in the car frame
3                     world_up/{a}            world up (0, 1, 0) in the car frame
3 * n_zone_centers    zone{j}/{a}             zone centres current, current + every, ...,
                                              current + (n - 1) * every, in the car frame
1                     distance_to_finish      min(margin_to_announce_finish_meters, metres left)
1                     freewheeling            engine disconnected
====================  ======================  =================================================

The distance to finish follows the guide's formula, ``min(margin, metres left)``: a constant
``margin`` far from the finish, then the real distance counting down (the guide's prose says it
the other way round; the formula and Linesight agree with this).

So ``D = 28 + 4 * n_prev_actions_in_inputs + 4 * n_contact_material_physics_behavior_types
+ 3 * n_zone_centers_in_inputs`` (184 with the defaults 5, 4, 40).

The observation is raw (metres, m/s, rpm...) so it can be checked by hand; ``normalize`` applies
``(x - mean) / std`` with the config's ``float_inputs_mean`` / ``float_inputs_std`` or, when those
are not given, with ``default_normalization`` for the chosen layout. The network sees normalised
values; segments carry raw ones.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from rulka.config import ConfigLike, as_config
from rulka.config.sections import EnvironmentConfig, RewardsConfig
from rulka.envs import rewards as R
from rulka.envs.actions import DEFAULT_PREVIOUS_ACTION, FLAG_NAMES, action_to_flags, discrete_to_flags
from rulka.envs.car_state import WHEEL_NAMES, CarState
from rulka.envs.materials import CATEGORY_NAMES, CATEGORY_OTHER, MATERIAL_CATEGORY_LUT
from rulka.envs.reference_line import ReferenceLine
from rulka.errors import ConfigError

AXES = ("lateral", "up", "forward")
WORLD_UP = np.array([0.0, 1.0, 0.0])

Knots = tuple[tuple[float, float], ...]


# defaults are the run config's (rulka.config.sections): one home for each
_ENV = EnvironmentConfig()
_REWARDS = RewardsConfig()


def _knots_of(value: Sequence[Sequence[float]]) -> Knots:
    return tuple((float(k[0]), float(k[1])) for k in value)


@dataclass(frozen=True)
class PipelineParams:
    """Everything the pipeline reads from the run config. Field names are the config keys
    (sections ``environment``, ``rewards``, ``state_normalization``) and the defaults are the
    config model's; see the configuration guide. Build it from a run config with
    :meth:`from_config`.
    """

    # environment: timing
    ms_per_action: int = _ENV.ms_per_action
    """Milliseconds of race time per action (tm_engine_step_per_action * ms_per_tm_engine_step)."""
    # environment: spatial inputs
    n_zone_centers_in_inputs: int = _ENV.n_zone_centers_in_inputs
    one_every_n_zone_centers_in_inputs: int = _ENV.one_every_n_zone_centers_in_inputs
    n_zone_centers_extrapolate_before_start_of_map: int = _ENV.n_zone_centers_extrapolate_before_start_of_map
    n_zone_centers_extrapolate_after_end_of_map: int = _ENV.n_zone_centers_extrapolate_after_end_of_map
    distance_between_checkpoints: float = _ENV.distance_between_checkpoints
    road_width: float = _ENV.road_width
    margin_to_announce_finish_meters: float = _ENV.margin_to_announce_finish_meters
    n_contact_material_physics_behavior_types: int = _ENV.n_contact_material_physics_behavior_types
    n_prev_actions_in_inputs: int = _ENV.n_prev_actions_in_inputs
    sync_virtual_and_real_checkpoints: bool = _ENV.sync_virtual_and_real_checkpoints
    temporal_mini_race_duration_ms: int = _ENV.temporal_mini_race_duration_ms
    temporal_mini_race_duration_actions: int | None = None
    """Mini-race length in decisions (the unit of slot 0); None: duration_ms // ms_per_action."""
    # environment: cut-offs
    cutoff_rollout_if_race_not_finished_within_duration_ms: int = (
        _ENV.cutoff_rollout_if_race_not_finished_within_duration_ms)
    cutoff_rollout_if_no_vcp_passed_within_duration_ms: int = _ENV.cutoff_rollout_if_no_vcp_passed_within_duration_ms
    # rewards
    constant_reward_per_ms: float = _REWARDS.constant_reward_per_ms
    reward_per_m_advanced_along_centerline: float = _REWARDS.reward_per_m_advanced_along_centerline
    final_speed_reward_as_if_duration_s: float = _REWARDS.final_speed_reward_as_if_duration_s
    shaped_reward_dist_to_cur_vcp: float = _REWARDS.shaped_reward_dist_to_cur_vcp
    shaped_reward_min_dist_to_cur_vcp: float = _REWARDS.shaped_reward_min_dist_to_cur_vcp
    shaped_reward_max_dist_to_cur_vcp: float = _REWARDS.shaped_reward_max_dist_to_cur_vcp
    shaped_reward_point_to_vcp_ahead: float = _REWARDS.shaped_reward_point_to_vcp_ahead
    engineered_reward_min_dist_to_cur_vcp: float = _REWARDS.engineered_reward_min_dist_to_cur_vcp
    engineered_reward_max_dist_to_cur_vcp: float = _REWARDS.engineered_reward_max_dist_to_cur_vcp
    engineered_speedslide_reward_schedule: Knots = _knots_of(_REWARDS.engineered_speedslide_reward_schedule)
    engineered_neoslide_reward_schedule: Knots = _knots_of(_REWARDS.engineered_neoslide_reward_schedule)
    engineered_kamikaze_reward_schedule: Knots = _knots_of(_REWARDS.engineered_kamikaze_reward_schedule)
    engineered_close_to_vcp_reward_schedule: Knots = _knots_of(_REWARDS.engineered_close_to_vcp_reward_schedule)
    # state_normalization (None: default_normalization for this layout)
    float_inputs_mean: tuple[float, ...] | None = None
    float_inputs_std: tuple[float, ...] | None = None
    # derived by the config; checked against the layout when given
    float_input_dim: int | None = field(default=None)

    def __post_init__(self) -> None:
        for name in (
            "n_zone_centers_in_inputs",
            "one_every_n_zone_centers_in_inputs",
            "n_zone_centers_extrapolate_before_start_of_map",
            "n_zone_centers_extrapolate_after_end_of_map",
            "ms_per_action",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("n_prev_actions_in_inputs", "n_contact_material_physics_behavior_types"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        dim = layout_dim(self)
        if self.float_input_dim is not None and self.float_input_dim != dim:
            raise ValueError(
                f"float_input_dim is {self.float_input_dim} but the pipeline layout has {dim} floats "
                f"(28 + 4 * n_prev_actions_in_inputs + 4 * n_contact_material_physics_behavior_types "
                f"+ 3 * n_zone_centers_in_inputs)"
            )
        for name in ("float_inputs_mean", "float_inputs_std"):
            v = getattr(self, name)
            if v is not None and len(v) != dim:
                raise ValueError(f"state_normalization.{name} has {len(v)} values, the layout has {dim}")
        if self.float_inputs_std is not None and min(self.float_inputs_std) <= 0:
            raise ValueError("state_normalization.float_inputs_std values must be > 0")

    @property
    def mini_race_actions(self) -> int:
        """Mini-race length in decisions (the unit the memory writes into slot 0)."""
        if self.temporal_mini_race_duration_actions is not None:
            return self.temporal_mini_race_duration_actions
        return self.temporal_mini_race_duration_ms // self.ms_per_action

    @property
    def final_speed_reward_per_m_per_s(self) -> float:
        return self.reward_per_m_advanced_along_centerline * self.final_speed_reward_as_if_duration_s

    @classmethod
    def from_config(cls, cfg: ConfigLike) -> PipelineParams:
        """The pipeline's parameters from the run config (``rulka.config.as_config``: a
        ``RulkaConfig``, a mapping of sections or a YAML path). ``ms_per_action`` and the
        mini-race length in decisions are the config's derived values; the engineered reward
        schedules are stretched by ``training.global_schedule_speed``. Values the pipeline cannot
        use raise ``ConfigError``.
        """
        cfg = as_config(cfg)
        env, rewards, norm = cfg.environment, cfg.rewards, cfg.state_normalization
        kwargs: dict[str, Any] = {"ms_per_action": env.ms_per_action,
                                  "temporal_mini_race_duration_actions": env.temporal_mini_race_duration_actions,
                                  "float_input_dim": env.float_input_dim}
        for f in fields(cls):
            if f.name in kwargs:
                continue
            if f.name.startswith("engineered_") and f.name.endswith("_schedule"):
                kwargs[f.name] = _knots_of(cfg.scaled_knots(f"rewards.{f.name}") or ())
            elif f.name in ("float_inputs_mean", "float_inputs_std"):
                value = getattr(norm, f.name)
                kwargs[f.name] = None if value is None else tuple(float(x) for x in value)
            elif f.name in type(rewards).model_fields:
                kwargs[f.name] = getattr(rewards, f.name)
            else:
                kwargs[f.name] = getattr(env, f.name)
        try:
            return cls(**kwargs)
        except ValueError as exc:
            raise ConfigError(f"the TrackMania observation pipeline cannot use this config: {exc}") from None


def make_reference_line(
    points: np.ndarray, params: PipelineParams, checkpoint_positions: np.ndarray | None = None
) -> ReferenceLine:
    """A ``ReferenceLine`` through ``points`` with the spacing, extrapolation and road width of
    ``params`` (what a backend should use, so zone indices mean what the config says).

    ``checkpoint_positions`` (the game's real checkpoints, in order) gate the zone tracking when
    ``params.sync_virtual_and_real_checkpoints`` is on; they are ignored otherwise.
    """
    return ReferenceLine(
        points,
        params.distance_between_checkpoints,
        params.n_zone_centers_extrapolate_before_start_of_map,
        params.n_zone_centers_extrapolate_after_end_of_map,
        params.road_width,
        checkpoint_positions if params.sync_virtual_and_real_checkpoints else None,
    )


def layout_dim(params: PipelineParams) -> int:
    """Length of the float observation for ``params`` (see the module docstring)."""
    return (
        28
        + 4 * params.n_prev_actions_in_inputs
        + 4 * params.n_contact_material_physics_behavior_types
        + 3 * params.n_zone_centers_in_inputs
    )


def float_feature_names(params: PipelineParams) -> list[str]:
    """Name of every slot of the float observation, in order."""
    names = ["mini_race_time"]
    for k in range(params.n_prev_actions_in_inputs):
        age = params.n_prev_actions_in_inputs - k  # 1 = the latest action
        names += [f"prev_action{age}/{f}" for f in FLAG_NAMES]
    names += [f"wheel_sliding/{w}" for w in WHEEL_NAMES]
    names += [f"wheel_contact/{w}" for w in WHEEL_NAMES]
    names += [f"wheel_damper/{w}" for w in WHEEL_NAMES]
    names += ["gearbox_state", "gear", "rpm", "gearbox_counter"]
    n_cat = params.n_contact_material_physics_behavior_types
    cat_names = [CATEGORY_NAMES[c] if c < len(CATEGORY_NAMES) else f"cat{c}" for c in range(n_cat)]
    names += [f"material/{w}/{c}" for w in WHEEL_NAMES for c in cat_names]
    names += [f"angular_velocity/{a}" for a in AXES]
    names += [f"velocity/{a}" for a in AXES]
    names += [f"world_up/{a}" for a in AXES]
    names += [f"zone{j}/{a}" for j in range(params.n_zone_centers_in_inputs) for a in AXES]
    names += ["distance_to_finish", "freewheeling"]
    assert len(names) == layout_dim(params)
    return names


def feature_slices(params: PipelineParams) -> dict[str, slice]:
    """Slices of the float observation by block (``prev_actions``, ``velocity``, ``zones``...)."""
    n_prev = 4 * params.n_prev_actions_in_inputs
    n_mat = 4 * params.n_contact_material_physics_behavior_types
    n_zone = 3 * params.n_zone_centers_in_inputs
    sizes = [
        ("mini_race_time", 1),
        ("prev_actions", n_prev),
        ("wheel_sliding", 4),
        ("wheel_contact", 4),
        ("wheel_damper", 4),
        ("gearbox_state", 1),
        ("gear", 1),
        ("rpm", 1),
        ("gearbox_counter", 1),
        ("material", n_mat),
        ("angular_velocity", 3),
        ("velocity", 3),
        ("world_up", 3),
        ("zones", n_zone),
        ("distance_to_finish", 1),
        ("freewheeling", 1),
    ]
    out, start = {}, 0
    for name, n in sizes:
        out[name] = slice(start, start + n)
        start += n
    return out


def default_normalization(params: PipelineParams) -> tuple[np.ndarray, np.ndarray]:
    """Domain-derived ``(mean, std)`` for the layout of ``params``.

    Binary flags get mean ~ how often they are on and std 0.5; the mini-race time is centred on
    half a mini-race; the distance to finish on the announce margin; zone centre ``j`` (``a``
    metres ahead along the line) gets mean ``(0, 0, 0.7 a)`` and a spread growing with ``a``,
    because far centres swing left and right with the road. Replace them with statistics of your
    own runs (``normalization_from_samples``) once you have some.
    """
    half_race = max(params.mini_race_actions / 2.0, 1.0)
    mean: list[float] = [half_race]
    std: list[float] = [half_race]
    for _ in range(params.n_prev_actions_in_inputs):
        mean += [0.8, 0.2, 0.3, 0.3]
        std += [0.5] * 4
    mean += [0.1] * 4 + [0.9] * 4 + [0.02] * 4 + [0.3, 2.5, 7000.0, 0.1]
    std += [0.5] * 4 + [0.5] * 4 + [0.06] * 4 + [1.0, 2.0, 3000.0, 10.0]
    n_mat = 4 * params.n_contact_material_physics_behavior_types
    mean += [0.5] * n_mat
    std += [0.5] * n_mat
    mean += [0.0, 0.0, 0.0, 0.0, 0.0, 55.0, 0.0, 1.0, 0.0]
    std += [0.5, 1.0, 0.5, 5.0, 5.0, 20.0, 0.5, 0.5, 0.5]
    step = params.one_every_n_zone_centers_in_inputs * params.distance_between_checkpoints
    for j in range(params.n_zone_centers_in_inputs):
        a = j * step
        mean += [0.0, 0.0, 0.7 * a]
        std += [5.0 + 0.4 * a, 2.0 + 0.05 * a, 3.0 + 0.35 * a]
    margin = float(params.margin_to_announce_finish_meters)
    mean += [margin, 0.0]
    std += [max(margin / 2.0, 1.0), 1.0]
    return np.asarray(mean, dtype=np.float32), np.asarray(std, dtype=np.float32)


def normalization_from_samples(samples: np.ndarray, min_std: float = 1e-2) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, std)`` of raw float observations ``(N, D)`` (NaN ignored, std floored at
    ``min_std``), to put in ``state_normalization.float_inputs_mean`` / ``float_inputs_std``."""
    x = np.asarray(samples, dtype=np.float64)
    mean = np.nanmean(x, axis=0)
    std = np.maximum(np.nanstd(x, axis=0), min_std)
    return mean.astype(np.float32), std.astype(np.float32)


class TrackmaniaPipeline:
    """Observation, reward and cut-offs for one car on one track.

    Usage (any backend)::

        pipe = TrackmaniaPipeline(params, reference_line)
        obs, info = pipe.reset(car_state)            # car at the start, race time ~0
        while True:
            car_state = backend.apply(action)        # ms_per_action of race time later
            obs, reward, terminated, truncated, info = pipe.step(car_state, action)
            if terminated or truncated: break

    ``action`` is whatever was applied to reach ``car_state``: a discrete index (0..11), a
    ``(gas, brake, steer)`` triple or 4 flags. ``reward`` does not include potential-based
    shaping: ``info["potential"]`` carries phi of the new observation (and ``reset``'s info phi of
    the first one) for the learner to add ``gamma^n * phi(s') - phi(s)`` (see ``rewards``).

    Episode ends: ``terminated`` when the backend reports ``car_state.finished`` (that step is
    charged only the race time up to the finish and credited the progress left to the finish
    centre); ``truncated`` when no new zone was reached for
    ``cutoff_rollout_if_no_vcp_passed_within_duration_ms`` (strictly more), when the race time
    reaches ``cutoff_rollout_if_race_not_finished_within_duration_ms``, or when the backend hands
    over NaN/inf (the last good observation is repeated and ``counters["bad_car_state"]`` grows).

    ``info`` keys: ``zone``, ``furthest_zone``, ``progress_m`` (metres from the start),
    ``progress_delta_m``, ``distance_to_finish_m``, ``potential``, ``race_time_ms``, ``speed``,
    ``finished``, ``cutoff`` (``""``, ``"no_progress"``, ``"max_duration"`` or
    ``"bad_car_state"``) and ``reward/<term>`` for each reward term.
    """

    def __init__(self, params: PipelineParams, reference_line: ReferenceLine) -> None:
        self.params = params
        self.line = reference_line
        self.float_input_dim = layout_dim(params)
        self.feature_names = float_feature_names(params)
        self.slices = feature_slices(params)
        if params.float_inputs_mean is not None and params.float_inputs_std is not None:
            self.mean = np.asarray(params.float_inputs_mean, dtype=np.float32)
            self.std = np.asarray(params.float_inputs_std, dtype=np.float32)
        else:
            self.mean, self.std = default_normalization(params)
        self._inv_std = (1.0 / self.std).astype(np.float32)
        every = params.one_every_n_zone_centers_in_inputs
        self._zone_offsets = np.arange(params.n_zone_centers_in_inputs) * every
        n_cat = params.n_contact_material_physics_behavior_types
        # Row c: the one-hot of category c; categories >= n_cat ("other") are all zeros.
        self._one_hot = np.zeros((max(CATEGORY_OTHER, n_cat) + 1, n_cat), dtype=np.float32)
        self._one_hot[np.arange(n_cat), np.arange(n_cat)] = 1.0
        self._vec_buf = np.zeros((params.n_zone_centers_in_inputs + 5, 3))
        self._vec_buf[2] = WORLD_UP
        self._material_cache: dict[bytes, np.ndarray] = {}
        self._i_wheels = self.slices["wheel_sliding"].start
        self._i_vectors = self.slices["angular_velocity"].start
        self._i_finish = self.slices["distance_to_finish"].start
        self._frames_played = 0.0
        self._coefs = self._engineered_coefs()
        self.counters: dict[str, int] = {"bad_car_state": 0, "episodes": 0}
        self._started = False

    # ------------------------------------------------------------------ schedules
    def set_frames_played(self, frames: float) -> None:
        """Frames played so far in the run: the x axis of the engineered reward schedules."""
        self._frames_played = float(frames)
        self._coefs = self._engineered_coefs()

    def _engineered_coefs(self) -> tuple[float, float, float, float]:
        p, f = self.params, self._frames_played
        return (
            R.schedule_value(p.engineered_speedslide_reward_schedule, f),
            R.schedule_value(p.engineered_neoslide_reward_schedule, f),
            R.schedule_value(p.engineered_kamikaze_reward_schedule, f),
            R.schedule_value(p.engineered_close_to_vcp_reward_schedule, f),
        )

    # ------------------------------------------------------------------ episode
    def reset(self, car_state: CarState) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode with the car at ``car_state``; return the first observation and info."""
        p = self.params
        self.counters["episodes"] += 1
        self._prev_flags: deque[np.ndarray] = deque(
            [discrete_to_flags(DEFAULT_PREVIOUS_ACTION)] * p.n_prev_actions_in_inputs,
            maxlen=max(p.n_prev_actions_in_inputs, 1),
        )
        self._gearbox_counter = 0
        self._zone = self.line.start_zone
        self._zone, self._progress = self.line.project(car_state.position, self._zone)
        self._furthest_zone = self._zone
        self._last_progress_time_ms = car_state.race_time_ms
        self._speed = car_state.speed
        self._race_time_ms = car_state.race_time_ms
        self._started = True
        obs, phi, dist_finish = self._observe(car_state)
        if not (math.isfinite(phi + self._progress) and np.isfinite(obs).all()):
            self._started = False
            raise ValueError(
                "the backend reported a car state with NaN or infinite values at reset "
                f"(position {car_state.position.tolist()}, velocity {car_state.velocity.tolist()})"
            )
        info = self._info(car_state, 0.0, phi, dist_finish, "", {})
        return obs, info

    def step(
        self, car_state: CarState, action: int | np.ndarray
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Observation, reward, terminated, truncated, info after ``action`` led to ``car_state``."""
        if not self._started:
            raise RuntimeError("TrackmaniaPipeline.step called before reset")
        p = self.params
        flags = action_to_flags(action)
        if p.n_prev_actions_in_inputs:
            self._prev_flags.append(flags)

        saved = self._save()
        prev_progress, prev_speed, prev_time = self._progress, self._speed, self._race_time_ms
        self._gearbox_counter = 0 if car_state.gearbox_state == 0 else self._gearbox_counter + 1
        self._zone, progress = self.line.project(car_state.position, self._zone)
        finished = car_state.finished
        if finished:
            # Only the part of the last action spent racing counts: time up to the finish. A
            # finished race has covered the whole line, wherever the game's finish block sits
            # relative to the reference line's end, and coasting past it earns nothing.
            progress = self.line.finish_progress
            ms_in_race = float(min(max(car_state.race_time_ms - prev_time, 0), p.ms_per_action))
        else:
            ms_in_race = float(p.ms_per_action)
            # The zones go on past the finish (extrapolated), but a car there that has not
            # finished went round the finish line (the simulator's verge lets it): that is worth
            # nothing. Paid, it taught greedy policies to skirt the line and die in the run-out.
            progress = min(progress, self.line.finish_progress)
        self._progress = progress
        if self._zone > self._furthest_zone:
            self._furthest_zone = self._zone
            self._last_progress_time_ms = car_state.race_time_ms
        self._race_time_ms = car_state.race_time_ms
        vel = car_state.velocity
        speed = math.sqrt(float(vel[0]) ** 2 + float(vel[1]) ** 2 + float(vel[2]) ** 2)
        self._speed = speed

        obs, phi, dist_finish = self._observe(car_state)
        if not (math.isfinite(progress + speed + phi) and np.isfinite(obs).all()):
            # A backend glitch must not put NaN into the replay memory: end the episode here,
            # repeating the last good observation, and count it.
            self._restore(saved)
            self.counters["bad_car_state"] += 1
            info = self._info(car_state, 0.0, self._last_phi, self._last_dist, "bad_car_state", {})
            return self._last_obs.copy(), 0.0, False, True, info
        sl = self.slices
        lateral_v, forward_v = float(obs[sl["velocity"]][0]), float(obs[sl["velocity"]][2])
        n_grounded = int(np.count_nonzero(car_state.wheel_contact))
        c_slide, c_neo, c_kami, c_close = self._coefs
        zone_dist = float(np.linalg.norm(self._zone_center_car)) if c_close else 0.0
        terms = {
            "time": R.time_reward(p.constant_reward_per_ms, ms_in_race),
            "progress": R.progress_reward(p.reward_per_m_advanced_along_centerline, progress - prev_progress),
            "speed": R.speed_gain_reward(
                p.reward_per_m_advanced_along_centerline,
                p.final_speed_reward_as_if_duration_s,
                prev_speed,
                speed,
                forward_v,
            ),
            "speedslide": R.speedslide_reward(c_slide, lateral_v, forward_v, n_grounded == 4),
            "neoslide": R.neoslide_reward(c_neo, lateral_v),
            "kamikaze": R.kamikaze_reward(c_kami, float(flags[0]), float(flags[1]), n_grounded),
            "close_to_vcp": R.close_to_vcp_reward(
                c_close,
                zone_dist,
                p.engineered_reward_min_dist_to_cur_vcp,
                p.engineered_reward_max_dist_to_cur_vcp,
            ),
        }
        reward = float(sum(terms.values()))

        cutoff = ""
        if not finished:
            if car_state.race_time_ms >= p.cutoff_rollout_if_race_not_finished_within_duration_ms:
                cutoff = "max_duration"
            elif (
                car_state.race_time_ms - self._last_progress_time_ms
                > p.cutoff_rollout_if_no_vcp_passed_within_duration_ms
            ):
                cutoff = "no_progress"
        info = self._info(car_state, progress - prev_progress, phi, dist_finish, cutoff, terms)
        return obs, reward, finished, bool(cutoff), info

    # ------------------------------------------------------------------ features
    def observe(self, car_state: CarState) -> np.ndarray:
        """The float observation of ``car_state`` with the current episode context (zone, action
        history), without advancing the episode."""
        return self._observe(car_state)[0]

    def _observe(self, car_state: CarState) -> tuple[np.ndarray, float, float]:
        p = self.params
        line = self.line
        pos = car_state.position
        out = np.empty(self.float_input_dim, dtype=np.float32)
        out[0] = 0.0  # mini-race time: written by the replay memory at sampling
        if p.n_prev_actions_in_inputs:
            out[1 : self._i_wheels] = np.concatenate(self._prev_flags)
        i = self._i_wheels
        out[i : i + 4] = car_state.wheel_sliding
        out[i + 4 : i + 8] = car_state.wheel_contact
        out[i + 8 : i + 12] = car_state.wheel_damper_absorb
        out[i + 12] = car_state.gearbox_state
        out[i + 13] = car_state.gear
        out[i + 14] = car_state.rpm
        out[i + 15] = self._gearbox_counter
        if p.n_contact_material_physics_behavior_types:
            out[i + 16 : self._i_vectors] = self._material_block(
                car_state.wheel_material, car_state.wheel_contact
            )
        # One product puts every vector in the car frame (components along the orientation's
        # columns: lateral, up, forward): angular velocity, velocity, world up, the zone centres
        # in the inputs, then the two centres the shaping potential uses.
        vecs = self._vec_buf
        vecs[0] = car_state.angular_velocity
        vecs[1] = car_state.velocity
        zone = self._zone
        last = line.n_zones - 1
        n_z = p.n_zone_centers_in_inputs
        every = p.one_every_n_zone_centers_in_inputs
        if zone + (n_z - 1) * every <= last:
            centers = line.zone_centers[zone : zone + (n_z - 1) * every + 1 : every]
        else:
            centers = line.zone_centers[np.minimum(self._zone_offsets + zone, last)]
        np.subtract(centers, pos, out=vecs[3 : 3 + n_z])
        vecs[3 + n_z] = line.zone_centers[zone] - pos
        vecs[4 + n_z] = line.zone_centers[min(zone + every, last)] - pos
        car = vecs @ car_state.orientation
        out[self._i_vectors : self._i_finish] = car[: 3 + n_z].reshape(-1)
        dist_finish = max(line.finish_progress - self._progress, 0.0)
        out[self._i_finish] = min(float(p.margin_to_announce_finish_meters), dist_finish)
        out[self._i_finish + 1] = car_state.is_freewheeling

        phi = R.potential(
            car[3 + n_z],
            car[4 + n_z],
            p.shaped_reward_dist_to_cur_vcp,
            p.shaped_reward_min_dist_to_cur_vcp,
            p.shaped_reward_max_dist_to_cur_vcp,
            p.shaped_reward_point_to_vcp_ahead,
        )
        self._zone_center_car = car[3 + n_z]
        if math.isfinite(phi) and np.isfinite(out).all():
            self._last_obs, self._last_phi, self._last_dist = out, phi, dist_finish
        return out, phi, dist_finish

    def _material_block(self, material: np.ndarray, contact: np.ndarray) -> np.ndarray:
        # Surfaces change rarely, so the one-hot of each (materials, contacts) pair is cached.
        key = material.tobytes() + contact.tobytes()
        block = self._material_cache.get(key)
        if block is None:
            cats = np.where(contact, MATERIAL_CATEGORY_LUT[material & 0xFFFF], CATEGORY_OTHER)
            block = self._one_hot[cats].reshape(-1)
            if len(self._material_cache) >= 4096:
                self._material_cache.clear()
            self._material_cache[key] = block
        return block

    _STATE = (
        "_zone",
        "_progress",
        "_speed",
        "_race_time_ms",
        "_gearbox_counter",
        "_furthest_zone",
        "_last_progress_time_ms",
    )

    def _save(self) -> tuple[Any, ...]:
        return (
            self._zone,
            self._progress,
            self._speed,
            self._race_time_ms,
            self._gearbox_counter,
            self._furthest_zone,
            self._last_progress_time_ms,
        )

    def _restore(self, saved: tuple[Any, ...]) -> None:
        for k, v in zip(self._STATE, saved):
            setattr(self, k, v)

    def _info(
        self,
        car_state: CarState,
        delta: float,
        phi: float,
        dist_finish: float,
        cutoff: str,
        terms: Mapping[str, float],
    ) -> dict[str, Any]:
        info: dict[str, Any] = {
            "zone": self._zone,
            "furthest_zone": self._furthest_zone,
            "progress_m": self._progress,
            "progress_delta_m": delta,
            "distance_to_finish_m": dist_finish,
            "potential": phi,
            "race_time_ms": car_state.race_time_ms,
            "speed": self._speed,
            "finished": car_state.finished,
            "cutoff": cutoff,
        }
        for k, v in terms.items():
            info[f"reward/{k}"] = v
        return info

    # ------------------------------------------------------------------ normalisation
    def normalize(self, float_obs: np.ndarray) -> np.ndarray:
        """``(float_obs - mean) / std`` as float32; works on one observation or a batch ``(..., D)``."""
        x = np.asarray(float_obs, dtype=np.float32)
        if x.shape[-1] != self.float_input_dim:
            raise ValueError(f"float observation has {x.shape[-1]} values, expected {self.float_input_dim}")
        return (x - self.mean) * self._inv_std


def flags_history(actions: Sequence[int], n_prev: int) -> np.ndarray:
    """The previous-action block (``4 * n_prev`` floats, oldest first) after ``actions`` were
    played from the start of an episode; handy to check a recorded observation."""
    hist = [discrete_to_flags(DEFAULT_PREVIOUS_ACTION)] * n_prev + [action_to_flags(a) for a in actions]
    tail = hist[len(hist) - n_prev :] if n_prev else []
    return np.concatenate(tail).astype(np.float32) if tail else np.zeros(0, np.float32)
