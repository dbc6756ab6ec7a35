"""``SimTrackEnv``: the built-in simulator as a Gymnasium env (``rulka/SimTrack-v0``).

It looks to the learner like TrackMania will: the same 12 discrete actions (or gamepad-like
``(gas, brake, steer)``), the same float observation, rewards and cut-offs (computed by the
shared ``rulka.envs.pipeline.TrackmaniaPipeline`` from a ``CarState``), and a grayscale camera
image. Observations are ``{"img": (H, W) uint8, "float": (float_input_dim,) float32}``; the float
vector is raw (not normalised), as segments carry it.

Example::

    import gymnasium as gym, rulka.envs
    env = gym.make("rulka/SimTrack-v0", track="hairpins")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(0)   # accelerate

``rulka/SimTrackAnalog-v0`` is the same env with analog ``(gas, brake, steer)`` actions (a ``Box``;
``rulka.envs.actions`` documents the layout), as TM2020 takes them from a gamepad.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rulka.config import ConfigLike, as_config
from rulka.envs.actions import CONTINUOUS_HIGH, CONTINUOUS_LOW, N_ACTIONS, action_to_flags
from rulka.envs.car_state import CarState
from rulka.envs.pipeline import PipelineParams, TrackmaniaPipeline
from rulka.envs.sim.camera import Camera
from rulka.envs.sim.physics import MATERIAL_ID, CarPhysics, Controls
from rulka.envs.sim.tracks import DIRT, GRASS, Track, get_track
from rulka.errors import UserError

_MAX_SETUPS = 8  # tracks (with their pipeline and camera) kept per env

# suspension compression the learner sees: rough surfaces shake the car a little
_DAMPER = {GRASS: 0.03, DIRT: 0.02}


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


# CarState arrays shared between steps (read-only): building them is a visible cost per action
_ALL_TRUE = _readonly(np.ones(4, dtype=bool))
_ALL_FALSE = _readonly(np.zeros(4, dtype=bool))
_WHEELS: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}


# physics controls (steer positive = left) of the 12 discrete actions
_DISCRETE_CONTROLS = [
    Controls(gas=float(f[0]), brake=float(f[1]), steer=float(f[2]) - float(f[3]))
    for f in (action_to_flags(a) for a in range(N_ACTIONS))
]


def _wheel_arrays(codes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(material ids, damper values) for the raster codes under the four wheels, cached."""
    arrays = (
        _readonly(np.array([MATERIAL_ID[k] for k in codes], dtype=np.int64)),
        _readonly(np.array([_DAMPER.get(k, 0.01) for k in codes], dtype=np.float64)),
    )
    _WHEELS[codes] = arrays
    return arrays


def physics_car_state(car: CarPhysics) -> CarState:
    """A simulated car as a ``CarState`` (what a TrackMania backend would report); the fake
    TMInterface game reports the same through its state blobs."""
    h = car.heading
    c, s = math.cos(h), math.sin(h)
    codes = tuple(car.wheel_codes)
    wheels = _WHEELS.get(codes)
    if wheels is None:
        wheels = _wheel_arrays(codes)
    return CarState(
        position=np.array([car.x, 0.0, car.z]),
        orientation=np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]]),
        velocity=np.array([car.vx, 0.0, car.vz]),
        angular_velocity=np.array([0.0, car.yaw_rate, 0.0]),
        wheel_material=wheels[0],
        wheel_contact=_ALL_TRUE,
        wheel_sliding=_ALL_TRUE if car.sliding else _ALL_FALSE,
        wheel_damper_absorb=wheels[1],
        gear=car.gear,
        rpm=car.rpm,
        gearbox_state=1 if car.shift_timer > 0.0 else 0,
        race_time_ms=car.finish_time_ms if car.finished else car.race_time_ms,
        finished=car.finished,
    )


# the standalone env's camera (no run config): small, for quick experiments and tests
STANDALONE_IMAGE_SIZE = (64, 64)


class SimTrackEnv(gym.Env):
    """The simulator with TrackMania's actions, observations and rewards.

    Args:
        config: a run config (a ``RulkaConfig``, a mapping of sections or a YAML path; validated
            here by ``rulka.config.as_config``). It supplies the defaults of every other argument:
            ``environment.track``, ``environment.continuous_actions``,
            ``environment.tm_engine_step_per_action``, ``nn.vis.no_image``, ``nn.vis.image_size``
            and the pipeline's keys. None (standalone, ``gymnasium.make`` with keyword arguments):
            the config model's defaults, except a 64x64 camera (``STANDALONE_IMAGE_SIZE``).
        track: a bundled track name, ``gen:<seed>``, a track .json path, or a list of them (one is
            drawn at each reset, with the env's seeded generator). ``gen:*`` generates a new track
            at each reset (from the same generator).
        image: include the camera image under ``"img"``.
        continuous: ``Box(3)`` actions ``(gas, brake, steer)`` (steer -1 left .. +1 right)
            instead of ``Discrete(12)``.
        render_mode: ``"rgb_array"`` for :meth:`render` (camera view beside a map with the car).
        image_size: ``(width, height)`` of the camera image.
        tm_engine_step_per_action: 10 ms physics steps per action.
        pipeline_params: observation/reward parameters (default: from ``config`` or defaults).
        start_noise: random start offset, metres sideways (and ``start_noise`` degrees of
            heading), drawn at each reset from the seeded generator; 0 starts like the game.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        config: ConfigLike = None,
        track: str | Sequence[str] | None = None,
        image: bool | None = None,
        continuous: bool | None = None,
        render_mode: str | None = None,
        image_size: tuple[int, int] | None = None,
        tm_engine_step_per_action: int | None = None,
        pipeline_params: PipelineParams | None = None,
        start_noise: float = 0.0,
    ) -> None:
        super().__init__()
        cfg = as_config(config)
        env_cfg, vis = cfg.environment, cfg.nn.vis
        if track is None:
            track = env_cfg.track
        if continuous is None:
            continuous = env_cfg.continuous_actions
        if image is None:
            image = not vis.no_image
        if image_size is None:
            image_size = (vis.image_size.width, vis.image_size.height) if config is not None else STANDALONE_IMAGE_SIZE
        if tm_engine_step_per_action is None:  # 1 with multi-action blocks (10 ms per action)
            tm_engine_step_per_action = env_cfg.ms_per_action // env_cfg.ms_per_tm_engine_step
        if pipeline_params is None:
            pipeline_params = PipelineParams.from_config(cfg)
            if config is None:  # standalone: the keyword sets the decision length
                pipeline_params = dataclasses.replace(pipeline_params, ms_per_action=10 * tm_engine_step_per_action,
                                                      temporal_mini_race_duration_actions=None)
        if pipeline_params.ms_per_action != 10 * tm_engine_step_per_action:
            raise UserError(
                f"pipeline ms_per_action ({pipeline_params.ms_per_action}) must equal 10 ms x "
                f"tm_engine_step_per_action ({tm_engine_step_per_action})"
            )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise UserError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.track_names = [track] if isinstance(track, str) else list(track)
        if not self.track_names:
            raise UserError("SimTrackEnv needs at least one track")
        self.image = bool(image)
        self.continuous = bool(continuous)
        self.render_mode = render_mode
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.steps_per_action = int(tm_engine_step_per_action)
        self.params = pipeline_params
        self.start_noise = float(start_noise)
        self._setups: dict[str, tuple[Track, TrackmaniaPipeline, Camera | None]] = {}
        self._frames_played = 0.0
        self._select("gen:0" if self.track_names[0] == "gen:*" else self.track_names[0])

        dim = self.pipeline.float_input_dim
        obs: dict[str, spaces.Space[Any]] = {}
        if self.image:
            w, h = self.image_size
            obs["img"] = spaces.Box(0, 255, shape=(h, w), dtype=np.uint8)
        # every float the pipeline reports is far inside +-1e6 (rpm, metres, m/s)
        obs["float"] = spaces.Box(-1e6, 1e6, shape=(dim,), dtype=np.float32)
        self.observation_space = spaces.Dict(obs)
        if self.continuous:
            self.action_space = spaces.Box(
                np.array(CONTINUOUS_LOW, dtype=np.float32), np.array(CONTINUOUS_HIGH, dtype=np.float32)
            )
        else:
            self.action_space = spaces.Discrete(N_ACTIONS)
        self._done = True
        self._trace: list[tuple[float, float, float]] = []

    # ------------------------------------------------------------------ setup
    def _select(self, name: str, reference_line: str = "", short_name: str = "") -> None:
        key = f"{name}|{reference_line}"
        setup = self._setups.get(key)
        if setup is None:
            track = get_track(name)
            if reference_line:  # a map-cycle entry's own line (.npy / .json) instead of the centreline
                from rulka.envs.pipeline import make_reference_line
                from rulka.envs.reference_line import read_reference_file

                points, checkpoints = read_reference_file(reference_line)
                line = make_reference_line(points, self.params, checkpoints)
            else:
                line = track.reference_line(self.params)
            camera = Camera(track, *self.image_size) if self.image or self.render_mode else None
            setup = (track, TrackmaniaPipeline(self.params, line), camera)
            setup[1].set_frames_played(self._frames_played)
            if len(self._setups) >= _MAX_SETUPS:  # bounded: "gen:*" would otherwise grow forever
                self._setups.pop(next(iter(self._setups)))
            self._setups[key] = setup
        self.track, self.pipeline, self.camera = setup
        self._setup_key = key
        self.map_name = short_name or self.track.name
        self.car = CarPhysics(self.track)

    def set_frames_played(self, frames: float) -> None:
        """The run's frame count (sent by the trainer with the weights): moves the engineered
        reward schedules (``rewards.engineered_*_reward_schedule``) along."""
        self._frames_played = float(frames)
        for _, pipeline, _ in self._setups.values():
            pipeline.set_frames_played(self._frames_played)

    @classmethod
    def from_config(cls, cfg: Any, **overrides: Any) -> SimTrackEnv:
        """The env a run config describes; keyword arguments override it."""
        return cls(config=cfg, **overrides)

    # ------------------------------------------------------------------ state
    def car_state(self) -> CarState:
        """The car as a ``CarState`` (what a TrackMania backend would report)."""
        return physics_car_state(self.car)

    def _obs(self, float_obs: np.ndarray) -> dict[str, np.ndarray]:
        obs: dict[str, np.ndarray] = {"float": float_obs}
        if self.image:
            assert self.camera is not None
            obs["img"] = self.camera.render(self.car.x, self.car.z, self.car.heading)
        return obs

    # ------------------------------------------------------------------ gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Car at standstill on the start line (of a track drawn from ``track`` when several).

        ``options``: ``map``/``track``, ``reference_line``, ``short_name`` (a map-cycle entry);
        ``start_noise`` replaces the env's ``start_noise`` for this episode, and ``start_seed`` draws
        its offsets from a generator of their own (the same seed, the same start; the env's
        generator is left as it was): the best policy's candidates race from the same moved starts."""
        super().reset(seed=seed)
        name = self.track_names[0]
        options = options or {}
        line_path, short_name = str(options.get("reference_line") or ""), str(options.get("short_name") or "")
        if options.get("map") or options.get("track"):  # the map cycle's entry, or an explicit track
            name = str(options.get("map") or options["track"])
        elif len(self.track_names) > 1:
            name = self.track_names[int(self.np_random.integers(len(self.track_names)))]
        if name == "gen:*":  # a fresh generated track per episode, drawn from the seeded generator
            name = f"gen:{int(self.np_random.integers(1_000_000))}"
        if f"{name}|{line_path}" != self._setup_key or short_name and short_name != self.map_name:
            self._select(name, line_path, short_name)
        x, z, h = self.track.start_pose
        noise, rng = self.start_noise, self.np_random
        if options.get("start_noise") is not None:  # this episode only, its offsets from its own seed
            noise = float(options["start_noise"])
            if options.get("start_seed") is not None:
                rng = np.random.default_rng(int(options["start_seed"]))
        if noise > 0.0:
            lateral = float(rng.uniform(-noise, noise))
            x += lateral * math.cos(h)
            z -= lateral * math.sin(h)
            h += math.radians(float(rng.uniform(-noise, noise)))
        self.car.reset(x, z, h)
        float_obs, info = self.pipeline.reset(self.car_state())
        self._done = False
        self._trace = [(self.car.x, self.car.z, 0.0)]
        info = self._extend_info(info)
        return self._obs(float_obs), info

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError("SimTrackEnv.step called after the episode ended; call reset() first")
        if self.continuous:
            act = np.asarray(action, dtype=np.float32).reshape(3)
            if not np.all(np.isfinite(act)):
                raise ValueError(f"continuous action must be finite, got {action!r}")
            gas, brake, steer = (float(v) for v in np.clip(act, [0, 0, -1], [1, 1, 1]))
            controls = Controls(gas=gas, brake=brake, steer=-steer)  # physics: positive = left
            pipe_action: Any = act
        else:
            a = int(action)
            if not 0 <= a < N_ACTIONS:
                raise ValueError(f"discrete action must be in 0..{N_ACTIONS - 1}, got {action!r}")
            controls = _DISCRETE_CONTROLS[a]
            pipe_action = a
        self.car.step(controls, self.steps_per_action)
        float_obs, reward, terminated, truncated, info = self.pipeline.step(self.car_state(), pipe_action)
        self._done = terminated or truncated
        if self.render_mode is not None:
            self._trace.append((self.car.x, self.car.z, self.car.speed))
        return self._obs(float_obs), float(reward), bool(terminated), bool(truncated), self._extend_info(info)

    def _extend_info(self, info: dict[str, Any]) -> dict[str, Any]:
        info["track"] = self.map_name
        info["wall_hits"] = self.car.wall_hits
        info["reference_time_ms"] = self.track.reference_time_ms
        return info

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """``rgb_array``: the camera view (scaled up) beside a map of the track with the car."""
        if self.render_mode != "rgb_array":
            return None
        from rulka.envs.sim.render import compose_frame

        assert self.camera is not None
        view = self.camera.render(self.car.x, self.car.z, self.car.heading)
        return compose_frame(self.track, view, self.car, self._trace)
