"""The simulator as a Gymnasium env: API, spaces, determinism, config wiring."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rulka.envs  # noqa: F401 - registers rulka/SimTrack-v0
from rulka.envs.pipeline import PipelineParams, layout_dim
from rulka.envs.sim.driver import ScriptedDriver
from rulka.envs.sim.env import SimTrackEnv
from rulka.registry import resolve


@pytest.mark.parametrize("continuous,image", [(False, True), (True, False)])
def test_env_checker_passes(continuous, image):
    env = gym.make("rulka/SimTrack-v0", continuous=continuous, image=image, render_mode="rgb_array")
    check_env(env.unwrapped, skip_render_check=False)


def test_registered_with_gymnasium_and_rulka_registry():
    env = gym.make("rulka/SimTrack-v0", track="slalom")
    assert env.unwrapped.track.name == "slalom"
    assert resolve("env", "sim") is SimTrackEnv


def test_spaces_and_observation_shapes():
    env = SimTrackEnv(image_size=(48, 32))
    obs, info = env.reset(seed=1)
    assert obs["img"].shape == (32, 48) and obs["img"].dtype == np.uint8
    assert obs["float"].shape == (layout_dim(PipelineParams()),) == (184,)
    assert obs["float"].dtype == np.float32
    assert env.action_space == gym.spaces.Discrete(12)
    assert info["race_time_ms"] == 0 and info["progress_m"] == pytest.approx(0.0, abs=0.5)
    assert env.observation_space.contains(obs)


def run_episode(env: SimTrackEnv, seed: int, n: int = 60):
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    frames, floats, rewards = [obs["img"]], [obs["float"]], []
    for _ in range(n):
        obs, r, term, trunc, _ = env.step(int(rng.integers(12)) if rng.random() < 0.3 else 0)
        frames.append(obs["img"])
        floats.append(obs["float"])
        rewards.append(r)
        if term or trunc:
            break
    return np.stack(frames), np.stack(floats), np.array(rewards)


def test_same_seed_same_episode_different_seed_differs():
    env = SimTrackEnv(start_noise=1.0)
    a = run_episode(env, seed=3)
    b = run_episode(SimTrackEnv(start_noise=1.0), seed=3)
    c = run_episode(env, seed=4)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)
    assert not np.array_equal(a[1][0], c[1][0])  # the start pose differs


def test_a_reset_option_moves_one_start_from_its_own_seed_and_leaves_the_envs_generator():
    """The best policy's candidates race from moved starts (trainer.best_policy_start_noise): the
    same start_seed gives the same start, another seed another one, and the env's own generator
    (the exploring episodes' draws) is not touched."""
    def pose(env: SimTrackEnv) -> tuple[float, float, float]:
        return (env.car.x, env.car.z, env.car.heading)

    env = SimTrackEnv(image=False)
    env.reset(seed=0)
    line = pose(env)
    env.reset(options={"start_noise": 0.3, "start_seed": 1000})
    a = pose(env)
    env.reset(options={"start_noise": 0.3, "start_seed": 1001})
    b = pose(env)
    env.reset(options={"start_noise": 0.3, "start_seed": 1000})
    assert pose(env) == a and a != b and a != line
    x, z, h = env.track.start_pose
    lateral = math.hypot(a[0] - x, a[1] - z)
    assert lateral <= 0.3 + 1e-9 and abs(math.degrees(a[2] - h)) <= 0.3 + 1e-9
    env.reset(options={"start_noise": 0.0, "start_seed": 5})  # no noise: the line itself
    assert pose(env) == line
    # the env's generator: the same draw after a seeded-start reset as without it
    plain = SimTrackEnv(image=False, start_noise=1.0)
    plain.reset(seed=7)
    plain.reset()
    moved = SimTrackEnv(image=False, start_noise=1.0)
    moved.reset(seed=7)
    moved.reset(options={"start_noise": 0.3, "start_seed": 1000})
    moved.reset()
    assert pose(moved) == pose(plain)


def test_scripted_driver_through_env_finishes_with_reward():
    env = SimTrackEnv(image=False)
    env.reset(seed=0)
    driver = ScriptedDriver(env.track)
    total, steps = 0.0, 0
    while True:
        _, r, term, trunc, info = env.step(driver.action(env.car))
        total += r
        steps += 1
        if term or trunc:
            break
    assert term and not trunc and info["finished"]
    assert info["race_time_ms"] == pytest.approx(env.track.reference_time_ms, rel=0.02)
    # progress reward for the whole race minus the time penalty: 5/500 per m, -6/5000 per ms
    expected = env.track.length * 5 / 500 - info["race_time_ms"] * 6 / 5000
    assert total == pytest.approx(expected, abs=0.15)
    with pytest.raises(RuntimeError):
        env.step(0)


def test_standing_still_is_cut_off_for_no_progress():
    env = SimTrackEnv(image=False)
    env.reset(seed=0)
    for _ in range(100):
        _, _, term, trunc, info = env.step(3)  # nothing pressed
        if term or trunc:
            break
    assert trunc and not term and info["cutoff"] == "no_progress"
    assert info["race_time_ms"] <= 2100


def test_continuous_steer_sign_matches_gamepad():
    env = SimTrackEnv(continuous=True, image=False)
    env.reset(seed=0)
    for _ in range(20):
        env.step(np.array([1.0, 0.0, 0.0], dtype=np.float32))
    h0 = env.car.heading
    for _ in range(5):
        env.step(np.array([1.0, 0.0, -1.0], dtype=np.float32))  # stick left
    assert env.car.heading > h0  # heading grows when turning left
    with pytest.raises(ValueError):
        env.step(np.array([np.nan, 0.0, 0.0]))


def test_config_supplies_track_timing_and_image_size():
    cfg = {"environment": {"track": "hairpins", "tm_engine_step_per_action": 4, "n_prev_actions_in_inputs": 2},
           "nn": {"vis": {"image_size": {"width": 32, "height": 24}}}}
    env = SimTrackEnv.from_config(cfg)
    obs, _ = env.reset(seed=0)
    assert env.track.name == "hairpins"
    assert obs["img"].shape == (24, 32)
    assert obs["float"].shape == (184 - 4 * 3,)
    _, _, _, _, info = env.step(0)
    assert info["race_time_ms"] == 40
    no_img = SimTrackEnv.from_config({"nn": {"vis": {"no_image": True}}})
    assert "img" not in no_img.observation_space.spaces


def test_gym_make_takes_a_config_mapping_and_keywords_win_over_it():
    from rulka.errors import ConfigError

    cfg = {"environment": {"track": "hairpins", "continuous_actions": True}, "nn": {"vis": {"no_image": True}}}
    env = gym.make("rulka/SimTrack-v0", config=cfg, track="slalom", image=True, image_size=(32, 24))
    obs, _ = env.reset(seed=0)
    base = env.unwrapped
    assert base.track.name == "slalom" and base.continuous and obs["img"].shape == (24, 32)
    # a mapping is validated at this edge, like a run config file
    with pytest.raises(ConfigError, match="environment.trak"):
        gym.make("rulka/SimTrack-v0", config={"environment": {"trak": "slalom"}})
    # without a config: the config model's defaults (5 engine steps of 10 ms) and a 64x64 camera
    plain = SimTrackEnv()
    assert plain.image_size == (64, 64) and plain.params.ms_per_action == 50 and plain.track.name == "default"
    assert SimTrackEnv(tm_engine_step_per_action=2, image=False).params.ms_per_action == 20


def test_several_tracks_drawn_by_seed():
    env = SimTrackEnv(track=["default", "slalom", "hairpins"], image=False)
    names = {env.reset(seed=s)[1]["track"] for s in range(12)}
    assert names == {"default", "slalom", "hairpins"}
    assert env.reset(options={"track": "dirt_mix"})[1]["track"] == "dirt_mix"


def test_render_rgb_array():
    env = SimTrackEnv(render_mode="rgb_array", image=False)
    env.reset(seed=0)
    env.step(0)
    frame = env.render()
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8
    assert math.isclose(frame.shape[1], 2 * frame.shape[0], rel_tol=0.01)


def test_generated_track_per_episode_follows_the_seed():
    env = SimTrackEnv(track="gen:*", image=False)
    a = env.reset(seed=5)[1]["track"]
    b = env.reset(seed=6)[1]["track"]
    assert a.startswith("gen:") and a != b
    assert env.reset(seed=5)[1]["track"] == a
