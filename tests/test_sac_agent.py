"""SAC through rulka's plugins: the analog simulator config builds an agent, a memory and an
actor; float actions go env -> segment -> memory -> update; config errors are one clear line."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import rulka.envs  # noqa: F401 - registers rulka/SimTrack*-v0
from rulka.config import load_config
from rulka.errors import ConfigError, UserError
from rulka.plugins import build_plugin, obs_to_arrays
from rulka.segment import Segment

REPO = Path(__file__).resolve().parents[1]


def test_analog_sim_variant_is_registered():
    env = gym.make("rulka/SimTrackAnalog-v0", image=False)
    assert isinstance(env.action_space, gym.spaces.Box) and env.action_space.shape == (3,)
    obs, _ = env.reset(seed=0)
    obs, reward, *_ = env.step(np.array([1.0, 0.0, 0.3], np.float32))
    assert np.isfinite(reward) and obs["float"].dtype == np.float32
    env.close()


@pytest.mark.parametrize("name", ["sim_sac.yaml", "sim_redq.yaml"])
def test_sim_config_drives_and_trains(name):
    cfg = load_config(REPO / "configs" / name, env_file=None, overrides=["sac.start_learning_size=10",
                                                                          "sac.random_steps=5", "training.batch_size=8"])
    agent = build_plugin("agent", cfg.trainer.agent, cfg.trainer.agent_kwargs, cfg)
    memory = build_plugin("memory", cfg.trainer.memory, cfg.trainer.memory_kwargs, cfg)
    actor = build_plugin("actor", agent.actor_spec()["actor"], agent.actor_spec()["kwargs"], cfg)
    actor.load_weights(agent.get_actor().get_weights())
    from rulka.plugins import make_env

    env = make_env(cfg)
    obs, info = env.reset(seed=0)
    steps = [obs_to_arrays(obs, info)]
    actions, rewards = [], []
    for _ in range(30):
        a = actor.act(obs)
        assert a.shape == (3,) and a.dtype == np.float32 and 0 <= a[0] <= 1 and 0 <= a[1] <= 1 and -1 <= a[2] <= 1
        obs, r, term, trunc, info = env.step(a)
        steps.append(obs_to_arrays(obs, info))
        actions.append(a)
        rewards.append(r)
    arrays = {k: np.stack([s[k] for s in steps]) for k in steps[0]}
    arrays.update(action=np.stack(actions), reward=np.asarray(rewards, np.float32),
                  terminated=np.zeros(30, bool), truncated=np.zeros(30, bool))
    seg = Segment(run_id="r", worker_id="w", episode_id=0, seq=0, index_in_episode=0, first_step=0,
                  policy_version=1, arrays=arrays)
    assert seg.arrays["action"].dtype == np.float32 and seg.arrays["action"].shape == (30, 3)
    assert memory.append(seg) == 30 - cfg.sac.n_steps  # the last n steps wait for the next segment
    assert memory.samples_per_insert == cfg.sac.updates_per_sample * 8
    metrics = agent.train(memory.sample(8))
    assert np.isfinite(metrics["losses/qf_loss"]) and agent.critic.n == cfg.sac.n_critics


def test_sac_refuses_discrete_sim_and_images():
    base = REPO / "configs" / "sim_sac.yaml"
    from rulka.agents.sac.settings import network_spec_from_config

    with pytest.raises(ConfigError, match="continuous_actions"):
        load_config(base, env_file=None, overrides=["environment.continuous_actions=false"])
    with pytest.raises(ConfigError, match="no_image"):
        load_config(base, env_file=None, overrides=["nn.vis.no_image=false"])
    with pytest.raises(UserError, match="Box actions"):
        network_spec_from_config(load_config(base, env_file=None, overrides=[
            "environment.backend=gym", "environment.gym_id=CartPole-v1"]))
    with pytest.raises(ConfigError, match="target_critics"):
        load_config(base, env_file=None, overrides=["sac.target_critics=3"])


def test_pendulum_spec_reads_the_box_spaces():
    from rulka.agents.sac.settings import memory_kwargs_from_config, network_spec_from_config

    cfg = load_config(REPO / "configs" / "pendulum_sac.yaml", env_file=None)
    spec = network_spec_from_config(cfg)
    assert (spec.obs_key, spec.obs_dim, spec.action_low, spec.action_high) == ("x", 3, (-2.0,), (2.0,))
    kw = memory_kwargs_from_config(cfg)
    assert kw["updates_per_sample"] == cfg.sac.updates_per_sample and kw["batch_size"] == 128


def test_sac_hyper_defaults_are_the_config_models():
    from rulka.agents.sac.agent import SacHyper
    from rulka.agents.sac.settings import hyper_from_config
    from rulka.config import RulkaConfig

    assert SacHyper() == hyper_from_config(RulkaConfig())  # one home for each default


def test_redq_updates_the_actor_once_per_sample_by_default():
    """policy_every null: one actor update per round(updates_per_sample) critic updates (REDQ's
    G); an explicit value wins."""
    from rulka.agents.sac.settings import hyper_from_config
    from rulka.config import config_from_dict

    assert hyper_from_config(config_from_dict({"sac": {"updates_per_sample": 20.0}})).policy_every == 20
    assert hyper_from_config(config_from_dict({"sac": {"updates_per_sample": 0.5}})).policy_every == 1
    assert hyper_from_config(config_from_dict({"sac": {"updates_per_sample": 20.0, "policy_every": 4}})).policy_every == 4
