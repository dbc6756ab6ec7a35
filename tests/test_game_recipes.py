"""The real-game recipes (configs/tmnf.yaml, configs/tm2020.yaml, configs/tm2020_image.yaml) run at
their real sizes against their fake games. Default suite: the env the recipe builds, driven by the
recipe's own network for 300 steps. ``slow``: a trainer and a worker in one process (rulka.local),
a few hundred steps reaching the trainer's memory and the learner updating at the recipe's batch
size (IQN: 512 transitions of 160 x 120 frames; 288 s for the TMNF recipe on this 2-core machine
under load, hence slow).
Plumbing, not learning: only what would have to point somewhere else for the game is overridden
(the fake game instead of the real one, its map instead of the campaign map, and a start-learning
size a few hundred steps can reach)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rulka.config import load_config
from rulka.local import run_local

pytestmark = pytest.mark.filterwarnings("ignore:Time-step timed out")

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
COMMON = ["logging.wandb.enabled=false", "logging.tensorboard.enabled=false", "logging.progress=never",
          "logging.log_every_s=1", "worker.segment_max_steps=50", "trainer.device=cpu", "training.seed=0"]


def _drive(cfg, env, steps: int) -> list[dict]:
    """``steps`` steps of ``env`` with the recipe's own actor (its network at its sizes, random
    weights); the infos."""
    import torch

    from rulka.plugins import build_plugin

    torch.set_num_threads(1)  # as a worker runs its actor (worker.torch_threads)
    agent = build_plugin("agent", str(cfg.trainer.agent), cfg.trainer.agent_kwargs, cfg)
    spec = agent.actor_spec()
    actor = build_plugin("actor", spec["actor"], spec.get("kwargs"), cfg)
    actor.load_weights(agent.actor_weights())  # as a worker receives them
    infos = []
    obs, info = env.reset()
    for _ in range(steps):
        action = actor.act(obs, test=False)
        assert env.action_space.contains(np.asarray(action, dtype=env.action_space.dtype))
        obs, _, terminated, truncated, info = env.step(action)
        for key, space in env.observation_space.spaces.items():
            assert obs[key].shape == space.shape, (key, obs[key].shape, space.shape)
        infos.append(info)
        if terminated or truncated:
            obs, info = env.reset()
    return infos


def _run(cfg, tmp_path: Path, samples: int) -> dict:
    result = run_local(cfg, n_workers=1, run_dir=tmp_path / "run", max_samples=samples, max_seconds=600)
    assert not result.worker_errors, result.worker_errors
    return result.trainer


TMNF_FAKE = [
    "environment.game_launch=fake",
    "environment.tmi_protection_timeout_s=30",
    # the fake plays simulator tracks; the recipe's cycle shape (4 exploring, 1 greedy) is kept
    "map_cycle.entries=[{short_name: A01, map_path: default, repeat: 4}, "
    "{short_name: A01, map_path: default, is_exploration: false}]",
]
TM2020_FAKE = [
    "environment.tm2020.capture=fake", "environment.tm2020.control=fake",
    "environment.tm2020.reference_line=null",  # the fake's track carries its own line
    "environment.tm2020.fake_time_scale=4", "environment.tm2020.fake_countdown_s=0.3",
]


def test_tmnf_recipe_drives_the_fake_game_at_its_sizes():
    """Linesight's 160 x 120 frame and 184 floats reach the recipe's network, whose actions drive
    the fake game, for 200 steps."""
    from rulka.envs.tmnf.env import TmnfEnv
    from rulka.envs.tmnf.game import FakeLauncher

    cfg = load_config(CONFIGS / "tmnf.yaml", [*COMMON, *TMNF_FAKE], env_file=None)
    env = TmnfEnv(cfg, launcher=FakeLauncher(countdown_ms=-100), port=0)
    try:
        assert env.observation_space["img"].shape[-2:] == (120, 160)
        assert env.observation_space["float"].shape == (184,)
        infos = _drive(cfg, env, 200)
    finally:
        env.close()
    assert len(infos) == 200 and all(i["map_name"] == "default" for i in infos)  # the cycle's map


@pytest.mark.parametrize("name", ["tm2020.yaml", "tm2020_image.yaml"])
def test_tm2020_recipe_drives_the_fake_game_at_its_sizes(name):
    """TMRL's window sizes (958 x 488 LIDAR / 256 x 128 image) through the fake game's window,
    the recipe's observation and network, 300 steps of 50 ms (4x fast fake)."""
    from rulka.envs.tm2020.env import TM2020Env

    cfg = load_config(CONFIGS / name, [*COMMON, *TM2020_FAKE], env_file=None)
    env = TM2020Env(cfg)
    try:
        tm = cfg.environment.tm2020
        assert env.fake.window_size == (tm.window_width, tm.window_height)
        if tm.observation == "lidar":
            assert env.observation_space["float"].shape == (184 + 19 * 4,) and "img" not in env.observation_space.spaces
        else:
            assert env.observation_space["img"].shape == (64, 64)
        infos = _drive(cfg, env, 300)
    finally:
        env.close()
    assert sum(1 for i in infos if not i.get("fault")) >= 290  # steps with telemetry and a frame


@pytest.mark.slow
def test_tmnf_recipe_runs_at_its_sizes_against_the_fake_game(tmp_path):
    cfg = load_config(CONFIGS / "tmnf.yaml", [
        *COMMON, *TMNF_FAKE,
        "memory.memory_size_schedule=[[0, [50000, 300]]]",
        "nn.training.use_jit=false",
    ], env_file=None)
    assert (cfg.w_downsized, cfg.h_downsized) == (160, 120)  # Linesight's frame
    assert cfg.nn.decoder.dense_hidden_dimension == 1024 and cfg.training.batch_size == 512
    summary = _run(cfg, tmp_path, samples=600)
    assert summary["samples"] >= 600
    assert summary["updates"] >= 1  # an IQN update at batch 512 on 160 x 120 frames
    assert summary["memory_size"] > 300


@pytest.mark.slow
@pytest.mark.parametrize("name,image", [("tm2020.yaml", False), ("tm2020_image.yaml", True)])
def test_tm2020_recipe_runs_at_its_sizes_against_the_fake_game(tmp_path, name, image):
    sets = [*COMMON, *TM2020_FAKE]
    sets += (["memory.memory_size_schedule=[[0, [50000, 300]]]", "nn.training.use_jit=false"] if image
             else ["sac.start_learning_size=300", "sac.random_steps=100"])
    cfg = load_config(CONFIGS / name, sets, env_file=None)
    tm = cfg.environment.tm2020
    if image:
        assert (tm.window_width, tm.window_height, cfg.w_downsized, cfg.h_downsized) == (256, 128, 64, 64)
    else:
        assert (tm.window_width, tm.window_height, tm.observation, tm.lidar) == (958, 488, "lidar", "tmrl")
        assert cfg.training.algorithm == "sac" and cfg.environment.continuous_actions
    summary = _run(cfg, tmp_path, samples=600)
    assert summary["samples"] >= 600 and summary["updates"] >= 1
    assert summary["memory_size"] > 0
