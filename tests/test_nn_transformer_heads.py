"""IQN's transformer decoder heads (nn.decoder.advantage.transformer / value.transformer)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rulka.agents.iqn.actor import IQNActor
from rulka.agents.iqn.network import IQNNetwork, IQNNetworkSpec, mean_q
from rulka.agents.iqn.replay import ReplayBatch
from rulka.agents.iqn.reset import last_layer_names
from rulka.agents.iqn.settings import make_agent, network_spec_from_config
from rulka.config import config_from_dict
from rulka.config.built import check_built
from rulka.errors import ConfigError
from rulka.nn.transformer import TransformerHead

GYM = {"backend": "gym", "gym_id": "CartPole-v1"}
SLOT = {"d_model": 32, "n_layers": 1, "n_heads": 2, "ff_mult": 2}


def cfg(decoder: dict, algorithm: str = "iqn"):
    return config_from_dict({
        "environment": GYM, "training": {"algorithm": algorithm, "batch_size": 16, "lr_schedule": [[0, 1e-3]]},
        "nn": {"float": {"mlp": {"hidden_dim": 16}}, "iqn": {"embedding_dimension": 8},
               "decoder": {"dense_hidden_dimension": 32, **decoder}, "training": {"use_jit": False}}})


def test_head_tokens_by_hand():
    torch.manual_seed(0)
    head = TransformerHead(40, 3, SLOT)  # 40 features -> 2 tokens of 32 (the second padded with 24 zeros)
    assert head.n_tokens == 2 and head.pos.shape == (1, 2, 32)
    x = torch.randn(5, 40)
    out = head(x)
    assert out.shape == (5, 3)
    # the same computation written out: pad, cut, add positions, stack, mean, norm, linear
    tokens = torch.cat([x, torch.zeros(5, 24)], dim=1).reshape(5, 2, 32) + head.pos
    expected = head.out(head.norm(head.stack(tokens).mean(1)))
    torch.testing.assert_close(out, expected)
    # the output depends on every input feature (attention mixes the tokens)
    x2 = x.clone()
    x2[:, 39] += 1.0
    assert not torch.allclose(head(x2), out)


def test_config_builds_transformer_heads_that_learn():
    c = cfg({"advantage": {"transformer": SLOT}, "value": {"transformer_encoder": {**SLOT, "n_layers": 2}}})
    check_built(c)  # no longer refused
    spec = network_spec_from_config(c)
    assert spec.advantage_transformer["d_model"] == 32 and spec.value_transformer["n_layers"] == 2
    agent = make_agent(c, device="cpu", seed=0)
    assert isinstance(agent.online.head.advantage, TransformerHead)
    assert isinstance(agent.online.head.value, TransformerHead) and len(agent.online.head.value.stack.layers) == 2
    # the reset's last layer is the advantage head's output layer
    assert last_layer_names(agent.online) == ["head.advantage.out.weight", "head.advantage.out.bias"]
    rng = np.random.default_rng(0)
    b = 16
    batch = ReplayBatch(state_img=None, state_float=rng.normal(size=(b, 4)).astype(np.float32),
                        action=rng.integers(0, 2, b), reward=np.ones(b, np.float32), next_img=None,
                        next_float=rng.normal(size=(b, 4)).astype(np.float32), gamma=np.zeros(b, np.float32),
                        weights=np.ones(b, np.float32), slots=np.arange(b))
    before = {n: p.detach().clone() for n, p in agent.online.named_parameters()}
    losses = [float(agent.train(batch)["losses/td_loss"]) for _ in range(30)]
    assert losses[-1] < losses[0]  # terminal reward 1: the quantiles move towards 1
    assert not torch.equal(agent.online.head.advantage.out.weight, before["head.advantage.out.weight"])


def test_workers_rebuild_the_topology_in_torch():
    c = cfg({"advantage": {"transformer": SLOT}})
    spec = network_spec_from_config(c)
    assert spec.value_transformer is None  # the value head stays an MLP
    net = IQNNetwork(spec).eval()
    # the spec crosses the wire as plain data and rebuilds the same network on a worker
    actor = IQNActor(IQNNetworkSpec.from_dict(spec.to_dict()).to_dict(), iqn_k=4)
    actor.load_weights({k: v.numpy() for k, v in net.state_dict().items()})
    assert not actor.uses_numpy  # no numpy path for a transformer head: the worker acts in torch
    obs = np.array([0.1, -0.2, 0.3, 0.0], np.float32)
    taus = (torch.arange(4, dtype=torch.float32) + 0.5) / 4
    with torch.no_grad():
        expected = mean_q(net, None, torch.from_numpy(obs[None]), 4, taus)[0].numpy()
    np.testing.assert_allclose(actor.q_values(obs, test=True), expected, rtol=1e-5, atol=1e-6)
    assert actor.act(obs, test=True) == int(np.argmax(expected))

def test_policy_learners_refuse_transformer_heads():
    with pytest.raises(ConfigError, match="nn.decoder.value.transformer"):
        check_built(cfg({"value": {"transformer": SLOT}}, algorithm="ppo"))


def test_freeze_flag_covers_a_transformer_head():
    c = cfg({"advantage": {"transformer": SLOT, "freeze": True}})
    agent = make_agent(c, device="cpu", seed=0)
    frozen = {n for n, p in agent.online.named_parameters() if not p.requires_grad}
    assert {"head.advantage.pos", "head.advantage.out.weight"} <= frozen
    assert all(n.startswith("head.advantage.") for n in frozen)
