"""``nn.decoder.shared_input: pre_tau`` (rulka.agents.iqn.network): a shared dense layer of width
``dense_hidden_dimension`` runs once per state before the quantile modulation; the heads read
``trunk(features) * phi(tau)``. Hand-computed Q values and row order, the trunk's B rows, the
numpy actor against torch, the freeze flag, and the config's refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rulka.agents.iqn import IQNActor
from rulka.agents.iqn.network import IQNNetwork, IQNNetworkSpec, mean_q
from rulka.config import config_from_dict
from rulka.errors import ConfigError


def hand_network() -> IQNNetwork:
    """float 1 -> float MLP (identity on x >= 0) -> trunk 1 -> 2 (weights 2, 3) ; phi(tau) =
    leaky(cos(pi tau)) on both units; advantage: leaky(u1 + u2) to action 0 (action 1: 0);
    value: leaky(u1)."""
    spec = IQNNetworkSpec(float_dim=1, n_actions=2, float_hidden_dim=1, dense_hidden_dimension=2,
                          embedding_dimension=1, head_hidden_dim=1, head_layers=1, shared_input="pre_tau")
    net = IQNNetwork(spec)
    values = {
        "float_feature_extractor.0.weight": [[1.0]], "float_feature_extractor.0.bias": [0.0],
        "float_feature_extractor.2.weight": [[1.0]], "float_feature_extractor.2.bias": [0.0],
        "trunk.0.weight": [[2.0], [3.0]], "trunk.0.bias": [0.0, 0.0],
        "iqn_fc.0.weight": [[1.0], [1.0]], "iqn_fc.0.bias": [0.0, 0.0],
        "head.advantage.0.weight": [[1.0, 1.0]], "head.advantage.0.bias": [0.0],
        "head.advantage.2.weight": [[1.0], [0.0]], "head.advantage.2.bias": [0.0, 0.0],
        "head.value.0.weight": [[1.0, 0.0]], "head.value.0.bias": [0.0],
        "head.value.2.weight": [[1.0]], "head.value.2.bias": [0.0],
    }
    state = net.state_dict()
    assert set(values) | {"float_mean", "float_std"} == set(state)  # every tensor of the network is set here
    net.load_state_dict({**state, **{k: torch.tensor(v) for k, v in values.items()}})
    return net


def q_by_hand(x: float, tau: float) -> list[float]:
    """Q of ``hand_network`` for state ``x`` (>= 0) and fraction ``tau``, step by step."""
    def leaky(v: float) -> float:
        return v if v >= 0 else 0.01 * v

    u = [2 * x, 3 * x]  # trunk, once per state
    phi = leaky(math.cos(math.pi * tau))  # iqn_fc on the cosine embedding (one frequency)
    m = [u[0] * phi, u[1] * phi]  # the modulation, per (state, tau)
    a = leaky(m[0] + m[1])  # advantage of action 0 (action 1's is 0)
    v = leaky(m[0])
    return [v + a - a / 2, v + 0 - a / 2]  # V + A - mean(A)


def test_pre_tau_q_values_and_row_order_by_hand():
    net = hand_network().eval()
    x = torch.tensor([[1.0], [2.0]])
    # quantile-major rows: row j*B + b is tau j of state b
    taus = torch.tensor([0.25, 0.75, 0.75, 0.25])
    q = net(None, x, taus)
    assert q.shape == (4, 2)
    want = [q_by_hand(1.0, 0.25), q_by_hand(2.0, 0.75), q_by_hand(1.0, 0.75), q_by_hand(2.0, 0.25)]
    np.testing.assert_allclose(q.detach().numpy(), np.array(want), rtol=1e-5, atol=1e-7)
    # the numbers themselves: x=1, tau=1/4 -> phi = 0.70711, m = (1.41421, 2.12132), A0 = 3.53553, V = 1.41421
    np.testing.assert_allclose(want[0], [3.18198, -0.35355], atol=1e-5)
    np.testing.assert_allclose(want[3], [6.36396, -0.70711], atol=1e-5)


def test_pre_tau_runs_the_trunk_once_per_state_and_sizes_the_embedding_to_it():
    spec = IQNNetworkSpec(float_dim=3, n_actions=4, float_hidden_dim=8, dense_hidden_dimension=48,
                          embedding_dimension=6, shared_input="pre_tau")
    net = IQNNetwork(spec)
    assert net.trunk is not None and net.trunk[0].weight.shape == (48, 8)  # features (8) -> dense (48)
    assert net.iqn_fc[0].weight.shape == (48, 6)  # phi(tau) as wide as the trunk
    assert net.head.advantage[0].in_features == 48 and net.head.advantage[0].out_features == 24
    rows = []
    net.trunk.register_forward_hook(lambda _m, inp, _out: rows.append(inp[0].shape[0]))
    b, n = 5, 8
    out = net(None, torch.randn(b, 3), torch.rand(n * b))
    assert out.shape == (n * b, 4) and rows == [b]  # B rows through the trunk, not n*B
    post = IQNNetwork(IQNNetworkSpec(float_dim=3, n_actions=4, float_hidden_dim=8, dense_hidden_dimension=48,
                                     embedding_dimension=6))
    assert post.trunk is None and post.iqn_fc[0].weight.shape == (8, 6)  # post_tau: as before
    assert not any(k.startswith("trunk.") for k in post.state_dict())


@pytest.mark.parametrize("layer_norm", [False, True])
def test_the_numpy_actor_gives_the_torch_q_values_with_pre_tau(layer_norm):
    spec = IQNNetworkSpec(float_dim=4, n_actions=3, float_hidden_dim=16, dense_hidden_dimension=32,
                          embedding_dimension=8, shared_input="pre_tau", use_layer_norm=layer_norm)
    fast = IQNActor(spec.to_dict(), iqn_k=8, seed=0)
    slow = IQNActor(spec.to_dict(), iqn_k=8, seed=0, numpy_inference=False)
    slow.load_weights(fast.get_weights())
    assert fast.uses_numpy and not slow.uses_numpy
    rng = np.random.default_rng(0)
    for _ in range(5):
        obs = rng.standard_normal(4).astype(np.float32)
        np.testing.assert_allclose(fast.q_values(obs, test=True), slow.q_values(obs, test=True), rtol=1e-5, atol=1e-6)
    # and the torch actor is the network's mean_q over the midpoint fractions
    obs = rng.standard_normal(4).astype(np.float32)
    taus = (torch.arange(8, dtype=torch.float32) + 0.5) / 8
    with torch.no_grad():
        want = mean_q(slow.net, None, torch.from_numpy(obs[None]), 8, taus)[0].numpy()
    np.testing.assert_allclose(fast.q_values(obs, test=True), want, rtol=1e-5, atol=1e-6)


def cartpole(**decoder) -> dict:
    return {"environment": {"backend": "gym", "gym_id": "CartPole-v1"}, "training": {"algorithm": "iqn"},
            "nn": {"vis": {"no_image": True}, "float": {"mlp": {"hidden_dim": 16}}, "iqn": {"embedding_dimension": 8},
                   "training": {"use_jit": False}, "decoder": {"dense_hidden_dimension": 32, **decoder}}}


def test_the_config_builds_pre_tau_and_shared_trunk_freeze_freezes_its_trunk():
    from rulka.agents.iqn.settings import make_agent
    from rulka.config.built import check_built

    cfg = config_from_dict(cartpole(shared_input="pre_tau", shared_trunk_freeze=True))
    check_built(cfg)  # no longer "not built"
    agent = make_agent(cfg, device="cpu", seed=0)
    assert agent.spec.shared_input == "pre_tau" and agent.online.trunk is not None
    assert agent.prepared["frozen"] == {"trunk.": 2}
    in_optimizer = {id(p) for g in agent.optimizer.param_groups for p in g["params"]}
    assert all(id(p) not in in_optimizer for p in agent.online.trunk.parameters())
    assert agent.get_actor().spec.shared_input == "pre_tau"  # workers build the same network


def test_the_config_refuses_pre_tau_where_it_means_nothing():
    from rulka.config.built import check_built

    # IQN with post_tau has no trunk to freeze
    with pytest.raises(ConfigError, match="shared_trunk_freeze.*shared_input post_tau"):
        check_built(config_from_dict(cartpole(shared_trunk_freeze=True)))
    # the actor-critic learners have no tau
    for algorithm in ("ppo", "grpo", "dpo"):
        data = cartpole(shared_input="pre_tau")
        data["training"]["algorithm"] = algorithm
        with pytest.raises(ConfigError, match=f"shared_input: pre_tau.*{algorithm} has none"):
            check_built(config_from_dict(data))
    # transformer heads read the modulated features (the guide's rule)
    with pytest.raises(ConfigError, match="transformer heads need `nn.decoder.shared_input: post_tau`"):
        config_from_dict(cartpole(shared_input="pre_tau", advantage={"transformer": {"d_model": 32, "n_heads": 2}}))


def test_pre_tau_with_multi_action_branches_acts_alike_in_numpy_and_torch():
    """The two layouts merged from separate work: a pre_tau trunk under BDQ branch heads."""
    spec = IQNNetworkSpec(float_dim=4, n_actions=3, float_hidden_dim=16, dense_hidden_dimension=32,
                          embedding_dimension=8, shared_input="pre_tau", n_action_branches=2)
    fast = IQNActor(spec.to_dict(), iqn_k=8, seed=0)
    slow = IQNActor(spec.to_dict(), iqn_k=8, seed=0, numpy_inference=False)
    slow.load_weights(fast.get_weights())
    rng = np.random.default_rng(1)
    for _ in range(3):
        obs = rng.standard_normal(4).astype(np.float32)
        np.testing.assert_allclose(fast.q_values(obs, test=True), slow.q_values(obs, test=True), rtol=1e-5, atol=1e-6)
