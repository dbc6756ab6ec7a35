"""``TM2020Env``: TrackMania 2020 (or its fake) as the Gymnasium env a rulka worker drives.

It builds the game connection the config describes (``environment.tm2020``): rulka's Openplanet
plugin for telemetry, window capture and a virtual gamepad on a gaming PC, or the fake game
(``capture: fake``) that runs rulka's simulator behind the same protocol. The real-time loop is
rtgym's (``real-time-gym-v1`` on Windows, the thread-safe ``real-time-gym-ts-v1`` elsewhere):
one action every ``environment.ms_per_action`` of game time, observation read
``start_obs_capture_ms`` into the step.

Observations are ``{"float": (D,) float32, "img": (H, W) uint8}`` like the simulator's (no
``img`` in LIDAR mode, whose beams extend ``float``, nor with ``nn.vis.no_image``, where frames
are still grabbed to check the window but not observed), so the learner cannot tell the backends
apart. Because rtgym returns, at ``step(a_t)``, what was observed while the previous action was
held, the previous-action slots of the float observation are rewritten to end with ``a_t``, the
action the car holds from now on (TMRL appends its action buffer to the observation for the same
reason).

``perf_stats()`` reports the loop's timing for ``perf/<worker>/...``: step period percentiles,
jitter (|period - nominal|) p50/p99, overruns (steps late beyond rtgym's elasticity), capture and
pipeline milliseconds per step, and fault counts.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rulka.config import ConfigLike, as_config
from rulka.envs.actions import DEFAULT_PREVIOUS_ACTION, action_to_flags, discrete_to_flags
from rulka.envs.pipeline import PipelineParams, TrackmaniaPipeline, make_reference_line
from rulka.envs.reference_line import read_reference_file
from rulka.envs.tm2020.capture import make_capture
from rulka.envs.tm2020.control import make_controller
from rulka.envs.tm2020.interface import InterfaceSettings, TM2020Interface
from rulka.envs.tm2020.telemetry import TelemetryClient
from rulka.errors import UserError

log = logging.getLogger(__name__)

# rtgym warns on every late step; the env counts them and logs a summary instead
warnings.filterwarnings("ignore", message="Time-step timed out")


class TM2020Env(gym.Env):
    """The tm2020 backend (registered as env plugin ``tm2020``).

    Args:
        config: the run config (``RulkaConfig``, a mapping of sections or a YAML path; validated
            here); ``environment.tm2020`` holds the
            backend's keys, ``nn.vis.image_size`` the image size, ``environment.continuous_actions``
            the action space.
        fake: a started ``FakeTM2020`` to drive instead of the one ``capture: fake`` builds
            (tests use it to inject faults).
    """

    metadata = {"render_modes": []}

    def __init__(self, config: ConfigLike = None, fake: Any = None) -> None:
        super().__init__()
        cfg = as_config(config)
        env = cfg.environment
        tm = env.tm2020
        self.cfg = cfg
        self.settings = tm
        params = PipelineParams.from_config(cfg)
        self.fake = fake
        self._owns_fake = False
        image_size = (int(cfg.w_downsized), int(cfg.h_downsized))
        use_fake = tm.capture == "fake" or fake is not None
        if use_fake:
            from rulka.envs.sim.tracks import get_track
            from rulka.envs.tm2020.fake import FakeGamepad, FakeWindow, build_fake

            if self.fake is None:
                self.fake = build_fake(tm, env.track, (tm.window_width, tm.window_height))
                self._owns_fake = True
            track = get_track(env.track) if isinstance(self.fake.track, str) else self.fake.track
            line = make_reference_line(track.race_line(), params)
            self.track_name = track.name
            self.reference_time_ms = track.reference_time_ms
            frames: Any = FakeWindow(self.fake)
            controller: Any = FakeGamepad(self.fake)
            port = self.fake.port
            time_scale = self.fake.time_scale
        else:
            if tm.reference_line is None:
                raise UserError(
                    "environment.tm2020.reference_line is not set: drive one lap with "
                    "`rulka tm record-line --game tm2020 --out LINE.json` and point the key at the file"
                )
            points, checkpoints = read_reference_file(tm.reference_line)
            line = make_reference_line(points, params, checkpoints)
            self.track_name = tm.reference_line.stem
            self.reference_time_ms = None
            frames = make_capture(tm.capture, tm.window_title, tm.window_width, tm.window_height)
            controller = make_controller(tm.control)
            port = tm.plugin_port
            time_scale = 1.0
        self.telemetry = TelemetryClient(tm.plugin_host, port, read_timeout_s=max(30.0, 5 * tm.telemetry_timeout_s))
        self.telemetry.start()
        self.pipeline = TrackmaniaPipeline(params, line)
        self.controller = controller
        self.frames = frames
        self.step_s = params.ms_per_action / 1000.0 / time_scale
        settings = InterfaceSettings(
            observation=tm.observation,
            image=not cfg.nn.vis.no_image,
            image_size=image_size,
            continuous=bool(env.continuous_actions),
            lidar_history=tm.lidar_history,
            lidar_dark_threshold=tm.lidar_dark_threshold,
            lidar=tm.lidar,
            telemetry_timeout_s=tm.telemetry_timeout_s,
            reset_timeout_s=tm.reset_timeout_s / time_scale if use_fake else tm.reset_timeout_s,
            recover_timeout_s=tm.recover_timeout_s,
        )
        self.interface = TM2020Interface(self.telemetry, frames, controller, self.pipeline, settings)
        rt_config = {
            "interface": _Prebuilt,
            "interface_kwargs": {"interface": self.interface},
            "time_step_duration": self.step_s,
            "start_obs_capture": min(tm.start_obs_capture_ms / 1000.0 / time_scale, self.step_s),
            "time_step_timeout_factor": tm.time_step_timeout_factor,
            "ep_max_length": params.cutoff_rollout_if_race_not_finished_within_duration_ms // params.ms_per_action + 10,
            "act_in_obs": False,
            "act_buf_len": 1,
            "reset_act_buf": True,
            "wait_on_done": True,
            "benchmark": False,
        }
        env_id = "real-time-gym-v1" if sys.platform == "win32" else "real-time-gym-ts-v1"
        import rtgym  # noqa: F401 - registers the env ids

        self.rt = gym.make(env_id, config=rt_config, disable_env_checker=True)
        obs: dict[str, spaces.Space[Any]] = {
            "float": spaces.Box(-1e6, 1e6, shape=(self.interface.float_dim,), dtype=np.float32)}
        if tm.observation == "image" and not cfg.nn.vis.no_image:
            obs["img"] = spaces.Box(0, 255, shape=(image_size[1], image_size[0]), dtype=np.uint8)
        self.observation_space = spaces.Dict(obs)
        self.action_space = self.interface.get_action_space()
        self._prev = self.pipeline.slices["prev_actions"]
        n_prev = params.n_prev_actions_in_inputs
        self._flags: deque[np.ndarray] = deque(maxlen=max(n_prev, 1))
        self._n_prev = n_prev
        self._periods: deque[float] = deque(maxlen=4000)
        self._obs_ms: deque[float] = deque(maxlen=4000)
        self._last_step_t: float | None = None
        self.overruns = 0
        self.steps = 0

    # ------------------------------------------------------------------ gym API
    def _dict_obs(self, parts: Any) -> dict[str, np.ndarray]:
        out = {"float": np.array(parts[0], dtype=np.float32)}
        if len(parts) > 1:
            out["img"] = parts[1]
        if self._n_prev:
            out["float"][self._prev] = np.concatenate(list(self._flags))
        return out

    def set_frames_played(self, frames: float) -> None:
        """The run's frame count (sent by the trainer with the weights): moves the engineered
        reward schedules along."""
        self.pipeline.set_frames_played(frames)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self._flags.clear()
        self._flags.extend([discrete_to_flags(DEFAULT_PREVIOUS_ACTION)] * self._flags.maxlen)
        parts, info = self.rt.reset(seed=seed, options=options)
        error, self.interface.reset_error = self.interface.reset_error, None
        if error is not None:
            raise error
        self._last_step_t = None
        return self._dict_obs(parts), self._info(info)

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if not self.interface.s.continuous:
            action = int(action)
        else:
            action = np.asarray(action, dtype=np.float32).reshape(3)
        parts, reward, terminated, truncated, info = self.rt.step(action)
        now = time.perf_counter()
        if self._last_step_t is not None:
            period = now - self._last_step_t
            self._periods.append(period)
            if period > self.step_s * (1.0 + self.settings.time_step_timeout_factor):
                self.overruns += 1
                if self.overruns in (1, 10) or self.overruns % 100 == 0:
                    log.warning(
                        "tm2020: control loop missed its %.0f ms deadline %d times (last step took %.0f ms): "
                        "lower the graphics settings, keep >= 30 FPS, keep the CPU free",
                        1000 * self.step_s, self.overruns, 1000 * period)
        self._last_step_t = now
        self.steps += 1
        self._flags.append(action_to_flags(action))
        if "obs_ms" in info:
            self._obs_ms.append(float(info["obs_ms"]))
        if terminated and info.get("truncated_by_pipeline"):
            terminated, truncated = False, True
        return self._dict_obs(parts), float(reward), bool(terminated), bool(truncated), self._info(info)

    def _info(self, info: dict[str, Any]) -> dict[str, Any]:
        info["track"] = self.track_name
        if self.reference_time_ms is not None:
            info["reference_time_ms"] = self.reference_time_ms
        return info

    # ------------------------------------------------------------------ timing
    def perf_stats(self) -> dict[str, float]:
        """Loop timing and fault counts since the start (flat, for the worker's stats)."""
        out: dict[str, float] = {"overruns": float(self.overruns)}
        if self._periods:
            p = np.asarray(self._periods) * 1000.0
            jitter = np.abs(p - 1000.0 * self.step_s)
            out.update(step_ms_p50=float(np.percentile(p, 50)), step_ms_p99=float(np.percentile(p, 99)),
                       jitter_ms_p50=float(np.percentile(jitter, 50)), jitter_ms_p99=float(np.percentile(jitter, 99)))
        if self._obs_ms:
            out["obs_ms_p50"] = float(np.percentile(np.asarray(self._obs_ms), 50))
        for k, v in self.interface.faults.items():
            out[f"faults_{k}"] = float(v)
        out["telemetry_reconnects"] = float(max(self.telemetry.connects - 1, 0))
        return out

    def close(self) -> None:
        self.interface.closed = True  # a time step still running cannot press anything now
        try:
            self.controller.close()  # neutral first, whatever else fails
            rt = self.rt.unwrapped
            rt.stop()  # wait for the running time step
            rt.__del__()  # end rtgym's background thread (its own clean-up, run now)
        except Exception:  # noqa: BLE001 - closing must go on
            pass
        finally:
            self.controller.neutral()
            self.telemetry.close()
            self.frames.close()
            if self._owns_fake and self.fake is not None:
                self.fake.close()


class _Prebuilt(TM2020Interface):
    """rtgym builds its interface from a class: this one hands back an already built interface."""

    def __new__(cls, interface: TM2020Interface) -> TM2020Interface:  # type: ignore[misc]
        return interface

