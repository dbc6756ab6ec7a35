"""The simulator behind rtgym: real-time stepping and delayed controls."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rulka.envs.sim.rt import SimRealTimeInterface, rtgym_config


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_physics_follows_the_clock_and_controls_arrive_late():
    clock = FakeClock()
    rt = SimRealTimeInterface(image=False, action_delay_ms=30, clock=clock)
    obs, _ = rt.reset(seed=0)
    assert len(obs) == 1 and obs[0].shape == (184,)
    rt.send_control(np.array([1.0, 0.0, 0.0]))  # full gas, felt 30 ms later
    clock.t += 0.05
    obs, reward, terminated, info = rt.get_obs_rew_terminated_info()
    assert info["race_time_ms"] == 50  # 5 ticks of wall time
    # gas for only the last 2 ticks: 2 x 10 ms at 80 % of first gear's drive
    assert rt.env.car.forward_speed == pytest.approx(2 * 0.01 * 13.0 * 0.8, rel=0.05)
    assert not terminated
    clock.t += 0.5
    _, _, _, info = rt.get_obs_rew_terminated_info()
    assert info["race_time_ms"] == 550
    assert rt.env.car.speed > 4.0


def test_runs_a_few_real_time_steps_through_rtgym():
    cfg = rtgym_config(time_step_duration=0.02, ep_max_length=5, track="default", image=True)
    env = gym.make("real-time-gym-v1", config=cfg, disable_env_checker=True)
    try:
        obs, _ = env.reset(seed=0)
        assert obs[0].shape == (184,) and obs[1].shape == (64, 64)
        steps = 0
        truncated = terminated = False
        while not (terminated or truncated):
            obs, reward, terminated, truncated, info = env.step(np.array([1.0, 0.0, 0.0], dtype=np.float32))
            steps += 1
        assert steps == 5 and truncated
        assert info["race_time_ms"] >= 80  # about 5 x 20 ms of wall time
        assert env.unwrapped.interface.env.car.speed > 0.5
    finally:
        env.unwrapped.stop()
