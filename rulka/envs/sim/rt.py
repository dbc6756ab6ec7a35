"""The simulator in real time, behind rtgym's ``RealTimeGymInterface``.

Training uses ``SimTrackEnv``, which runs as fast as the CPU allows. This interface runs the same
car, track, camera and pipeline against the wall clock, the way TrackMania 2020 runs for a
real-time worker: physics advances 10 ms per 10 ms of wall time whatever the agent does, and a
control takes effect ``action_delay_ms`` after it was sent (the input latency of a game). So a
real-time worker path can be developed and tested without the game.

Example::

    import gymnasium as gym
    from rtgym import DEFAULT_CONFIG_DICT
    from rulka.envs.sim.rt import SimRealTimeInterface, rtgym_config

    env = gym.make("real-time-gym-v1", config=rtgym_config(track="default"))
    obs, info = env.reset()
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces
from rtgym import DEFAULT_CONFIG_DICT, RealTimeGymInterface

from rulka.envs.sim.env import _DISCRETE_CONTROLS, SimTrackEnv
from rulka.envs.sim.physics import Controls

TICK_S = 0.01


class SimRealTimeInterface(RealTimeGymInterface):
    """rtgym interface to the simulator. Observations are ``[float_obs, img]`` (``[float_obs]``
    without image); actions ``(gas, brake, steer)`` like a gamepad, or an index 0..11 with
    ``continuous=False``.

    Args:
        track, image, continuous, image_size, config: as for ``SimTrackEnv``.
        action_delay_ms: wall-clock delay between ``send_control`` and the car feeling it.
        clock: seconds, monotonic (tests may pass a fake clock).
    """

    def __init__(
        self,
        track: str = "default",
        image: bool = True,
        continuous: bool = True,
        image_size: tuple[int, int] = (64, 64),
        config: Any = None,
        action_delay_ms: float = 20.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.env = SimTrackEnv(config=config, track=track, image=image, continuous=continuous, image_size=image_size)
        self.action_delay_s = float(action_delay_ms) / 1000.0
        self.clock = clock
        self._t0 = 0.0
        self._ticks = 0
        self._control = Controls()
        self._pending: tuple[float, Controls, Any] | None = None
        self._last_action: Any = self.get_default_action()
        self.late_ticks = 0  # ticks simulated in catch-up bursts > 100 ms (the loop was too slow)

    # ------------------------------------------------------------------ spaces
    def get_observation_space(self) -> spaces.Tuple:
        obs = self.env.observation_space
        parts = [obs["float"]] + ([obs["img"]] if self.env.image else [])
        return spaces.Tuple(parts)

    def get_action_space(self) -> spaces.Space[Any]:
        return self.env.action_space

    def get_default_action(self) -> Any:
        if self.env.continuous:
            return np.zeros(3, dtype=np.float32)
        return 3  # nothing pressed

    # ------------------------------------------------------------------ time
    def _controls_of(self, action: Any) -> Controls:
        if self.env.continuous:
            gas, brake, steer = (float(v) for v in np.clip(np.asarray(action, dtype=np.float64).reshape(3),
                                                         [0, 0, -1], [1, 1, 1]))
            return Controls(gas=gas, brake=brake, steer=-steer)
        return _DISCRETE_CONTROLS[int(action)]

    def _catch_up(self) -> None:
        """Run the physics up to the current wall-clock time, switching controls on schedule."""
        target = int((self.clock() - self._t0) / TICK_S + 1e-6)  # 1e-6: float noise at tick edges
        n = target - self._ticks
        if n <= 0:
            return
        if n > 10:
            self.late_ticks += n
        car = self.env.car
        if self._pending is not None:
            due = int((self._pending[0] - self._t0) / TICK_S + 1e-6)
            before = min(max(due - self._ticks, 0), n)
            if before:
                car.step(self._control, before)
            if due <= target:
                _, self._control, self._last_action = self._pending
                self._pending = None
                if n - before:
                    car.step(self._control, n - before)
        else:
            car.step(self._control, n)
        self._ticks = target

    # ------------------------------------------------------------------ rtgym API
    def send_control(self, control: Any) -> None:
        if control is None:
            return
        self._catch_up()
        if self._pending is not None:  # an older control still in flight takes effect first
            _, self._control, self._last_action = self._pending
        self._pending = (self.clock() + self.action_delay_s, self._controls_of(control), control)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[Any], dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._t0 = self.clock()
        self._ticks = 0
        self._control = Controls()
        self._pending = None
        self._last_action = self.get_default_action()
        return self._as_list(obs), info

    def get_obs_rew_terminated_info(self) -> tuple[list[Any], float, bool, dict[str, Any]]:
        self._catch_up()
        env = self.env
        float_obs, reward, terminated, truncated, info = env.pipeline.step(env.car_state(), self._last_action)
        obs = env._obs(float_obs)
        # rtgym truncates only on its own episode length: a pipeline cut-off ends the episode too
        info["truncated_by_pipeline"] = bool(truncated)
        info["late_ticks"] = self.late_ticks
        return self._as_list(obs), float(reward), bool(terminated or truncated), info

    def wait(self) -> None:
        """Between episodes the car simply waits: nothing to pause."""

    def _as_list(self, obs: dict[str, np.ndarray]) -> list[Any]:
        return [obs["float"]] + ([obs["img"]] if self.env.image else [])


def rtgym_config(time_step_duration: float = 0.05, ep_max_length: int = 6000, **interface_kwargs: Any) -> dict[str, Any]:
    """An rtgym configuration for ``SimRealTimeInterface`` (20 Hz by default, like TrackMania
    workers); ``interface_kwargs`` go to the interface."""
    cfg = dict(DEFAULT_CONFIG_DICT)
    cfg.update(
        interface=SimRealTimeInterface,
        interface_kwargs=interface_kwargs,
        time_step_duration=time_step_duration,
        start_obs_capture=time_step_duration,
        time_step_timeout_factor=1.0,
        ep_max_length=ep_max_length,
        act_buf_len=2,
        wait_on_done=True,
        reset_act_buf=True,
    )
    return cfg
