"""`rulka pretrain`: scripted-driver recordings in the inert episode format, behaviour cloning into
the network the config trains (IQN or the actor-critic) and the level-0 visual pretrain of its
image stem; both write a folder that `nn.init_from_pretrained` loads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from rulka.cli import main
from rulka.config import load_config
from rulka.nn.pretrained import TENSORS
from rulka.pretrain.data import episode_files, load_steps, record_scripted

SMALL_NN = {"float": {"mlp": {"hidden_dim": 32}}, "decoder": {"dense_hidden_dimension": 64},
            "iqn": {"embedding_dimension": 16}, "training": {"use_jit": False},
            "vis": {"no_image": True, "image_size": {"width": 48, "height": 36}}}


def write_config(tmp_path, algorithm: str, **nn) -> str:
    data = {"environment": {"backend": "sim", "track": "default"}, "training": {"algorithm": algorithm},
            "nn": {**SMALL_NN, **nn}}
    path = tmp_path / f"{algorithm}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("episodes")
    cfg = load_config(write_config(tmp, "iqn"))
    return record_scripted(cfg, tmp / "ep", 2, seed=0, start_noise=1.0)


def test_scripted_recordings_are_episode_files_of_the_drivers_actions(episodes):
    from rulka.agents.policy.episodes import read_episode

    assert [p.suffix for p in episodes] == [".rulka-episode"] * 2
    segs = [read_episode(p)[0] for p in episodes]
    # the driver finishes the default track, and two seeds start differently
    assert all(s.info["episode_length"] == len(s.arrays["action"]) for s in segs)
    assert not np.array_equal(segs[0].arrays["obs/float"][0], segs[1].arrays["obs/float"][0])
    steps = load_steps(episode_files([episodes[0].parent]), with_images=False)
    assert len(steps) == sum(len(s.arrays["action"]) for s in segs) and steps.episodes == 2
    assert steps.floats.shape == (len(steps), 184)


@pytest.mark.parametrize("algorithm", ["ppo", "iqn"])
def test_bc_clones_the_driver_and_the_rl_agent_starts_from_it(tmp_path, episodes, algorithm):
    config = write_config(tmp_path, algorithm)
    out = tmp_path / "bc"
    assert main(["pretrain", "bc", config, str(episodes[0].parent), "--out", str(out), "--updates", "300",
                 "--batch-size", "128", "--lr", "3e-3"]) == 0
    summary = json.loads((out / "bc_summary.json").read_text())
    steps = load_steps(episodes, with_images=False)
    majority = np.bincount(steps.actions).max() / len(steps)  # always the most frequent action
    assert summary["last_loss"] < 0.5 * summary["first_loss"]
    assert summary["train_accuracy"] > majority + 0.2, (summary, majority)
    # the RL learner loads every tensor of its network from the folder
    cfg = load_config(config, overrides=[f"nn.init_from_pretrained={out}"])
    if algorithm == "iqn":
        from rulka.agents.iqn.settings import make_agent

        agent = make_agent(cfg, device="cpu", seed=1)
        net = agent.online
    else:
        from rulka.agents.policy.settings import make_agent

        agent = make_agent(cfg, device="cpu", seed=1)
        net = agent.net
    assert agent.prepared["loaded"] == sorted(net.state_dict())
    # its greedy actor (what workers run) picks the driver's actions as often as the clone did
    actor = agent.get_actor()
    n = min(len(steps), 300)
    hits = sum(actor.act({"float": steps.floats[i]}, test=True) == steps.actions[i] for i in range(n))
    assert hits / n > majority + 0.2


def test_visual_pretrain_trains_and_writes_the_image_stem(tmp_path):
    image_nn = {"vis": {"no_image": False, "image_size": {"width": 48, "height": 36}, "cnn": {}}}
    config = write_config(tmp_path, "iqn", **image_nn)
    ep = record_scripted(load_config(config), tmp_path / "ep", 1, seed=3)
    out = tmp_path / "visual"
    assert main(["pretrain", "visual", config, str(ep[0]), "--out", str(out), "--updates", "150",
                 "--batch-size", "32", "--lr", "2e-3"]) == 0
    from safetensors.torch import load_file

    saved = load_file(str(out / TENSORS))
    assert saved and all(k.startswith("img_head.") for k in saved)
    # the loss fell (the decoder reconstructs the pooled frames better than at the start)
    from rulka.agents.policy.episodes import read_episode
    from rulka.pretrain.visual import train_visual

    frames = read_episode(ep[0])[0].arrays["obs/img"]
    res = train_visual(load_config(config), frames, updates=150, batch_size=32, lr=2e-3)
    assert res.last_loss < 0.5 * res.first_loss
    # an IQN run with the stem loaded and frozen: the stem is the pretrained one and stays out of training
    from rulka.agents.iqn.settings import make_agent

    cfg = load_config(config, overrides=[f"nn.init_from_pretrained={out}", "nn.vis.freeze=true"])
    agent = make_agent(cfg, device="cpu", seed=0)
    assert agent.prepared["loaded"] == sorted(saved) and agent.prepared["frozen"] == {"img_head.": len(saved)}  # 4 convs: weight + bias
    state = agent.online.state_dict()
    assert all(torch.equal(state[k], v) for k, v in saved.items())


def test_step_returns_by_hand():
    from rulka.pretrain.data import step_returns

    rewards = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    potentials = np.full(5, 0.5)
    # horizon 2, gamma 0.5: r_t + 0.5 r_{t+1} - phi(s_t), cut at the episode's end
    np.testing.assert_allclose(step_returns(rewards, potentials, 2, 0.5), [1.5, 3.0, 4.5, 3.5])
    # no horizon, no potential: to the end, undiscounted
    np.testing.assert_allclose(step_returns(rewards, None, None, 1.0), [10.0, 9.0, 7.0, 4.0])


def test_returns_to_go_by_hand():
    from rulka.pretrain.data import returns_to_go, step_returns

    rewards = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    potentials = np.full(5, 0.5)
    # column j: the next j + 1 rewards discounted by 0.5, minus phi(s_t); cut at the episode's end
    np.testing.assert_allclose(returns_to_go(rewards, potentials, 2, 0.5),
                               [[0.5, 1.5], [1.5, 3.0], [2.5, 4.5], [3.5, 3.5]])
    np.testing.assert_allclose(returns_to_go(rewards, None, 3, 1.0), [[1, 3, 6], [2, 5, 9], [3, 7, 7], [4, 4, 4]])
    # its last column is the whole-mini-race return the clone is fitted to at time 0
    np.testing.assert_allclose(returns_to_go(rewards, potentials, 3, 0.9)[:, -1], step_returns(rewards, potentials, 3, 0.9),
                               rtol=1e-6)
