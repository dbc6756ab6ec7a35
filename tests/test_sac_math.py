"""SAC's arithmetic against values worked out by hand: the tanh-squashed log-probability, the
critic target (clipped double Q and REDQ's random subset), the temperature loss and its step,
polyak averaging, and a tiny learner update."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rulka.agents.base import soft_update
from rulka.agents.sac import (
    CriticEnsemble,
    SACAgent,
    SacHyper,
    SacNetworkSpec,
    critic_target,
    squashed_log_prob,
    temperature_loss,
)
from rulka.memory.uniform import TransitionBatch


def test_squashed_log_prob_hand_computed():
    # one dimension, u = 0.5 ~ N(0, 1), action range [-2, 2] (scale 2):
    # log N(0.5; 0, 1) = -0.125 - 0.5 log(2 pi); log|da/du| = log 2 + log(1 - tanh(0.5)^2)
    u, mean, log_std, scale = (torch.tensor([[v]]) for v in (0.5, 0.0, 0.0, 2.0))
    expected = -0.125 - 0.5 * math.log(2 * math.pi) - math.log(2.0) - math.log(1 - math.tanh(0.5) ** 2)
    assert squashed_log_prob(u, mean, log_std, scale).item() == pytest.approx(expected, abs=1e-6)


def test_squashed_log_prob_sums_dimensions_and_stays_finite():
    # two dimensions, sigma = e^-1, scale (1, 0.5); the second u is far in the tail where the naive
    # log(1 - tanh(u)^2) is log(0) in float32
    u = torch.tensor([[0.2, 30.0]])
    mean, log_std, scale = torch.tensor([[0.0, 29.0]]), torch.tensor([[-1.0, -1.0]]), torch.tensor([1.0, 0.5])
    sigma = math.exp(-1.0)
    total = 0.0
    for ui, mi, si in ((0.2, 0.0, 1.0), (30.0, 29.0, 0.5)):
        z = (ui - mi) / sigma
        log_n = -0.5 * z * z - math.log(sigma) - 0.5 * math.log(2 * math.pi)
        # log(1 - tanh(u)^2) = log(4) - 2|u| - 2 log(1 + exp(-2|u|)) (exact, in float64)
        log_det = math.log(si) + math.log(4.0) - 2 * abs(ui) - 2 * math.log1p(math.exp(-2 * abs(ui)))
        total += log_n - log_det
    got = squashed_log_prob(u, mean, log_std, scale)
    assert torch.isfinite(got).all()
    assert got.item() == pytest.approx(total, rel=1e-5)


def test_log_prob_matches_the_density_of_sampled_actions():
    # the density of a = tanh(u) under the formula integrates to 1 over (-1, 1)
    mean, log_std, scale = torch.tensor([[0.3]]), torch.tensor([[-0.2]]), torch.tensor([1.0])
    a = torch.linspace(-0.99999, 0.99999, 200001).reshape(-1, 1)
    u = torch.atanh(a)
    density = squashed_log_prob(u.double(), mean.double(), log_std.double(), scale.double()).exp()
    assert torch.trapezoid(density, a[:, 0].double()).item() == pytest.approx(1.0, abs=1e-3)


def test_critic_target_clipped_double_q():
    reward, discount = torch.tensor([1.0, 2.0]), torch.tensor([0.99, 0.0])
    next_q = torch.tensor([[10.0, 5.0], [8.0, 7.0]])  # (critics, batch)
    next_logp = torch.tensor([-1.0, 3.0])
    y = critic_target(reward, discount, next_q, next_logp, 0.2, torch.tensor([0, 1]))
    # item 0: 1 + 0.99 * (min(10, 8) - 0.2 * -1) = 1 + 0.99 * 8.2; item 1: terminal -> reward only
    assert y.tolist() == pytest.approx([1 + 0.99 * 8.2, 2.0])


def test_critic_target_uses_only_the_drawn_subset():
    next_q = torch.tensor([[1.0], [5.0], [3.0], [9.0]])
    y = critic_target(torch.zeros(1), torch.ones(1), next_q, torch.zeros(1), 0.5, torch.tensor([3, 2]))
    assert y.item() == 3.0  # min over critics 3 and 2 only, not the ensemble's min of 1


def test_temperature_loss_and_one_sgd_step():
    log_alpha = torch.tensor(math.log(0.5), requires_grad=True)
    log_prob = torch.tensor([-1.0, -2.0, 0.0])  # entropy estimate 1.0
    target_entropy = -3.0
    loss = temperature_loss(log_alpha, log_prob, target_entropy)
    # -(log 0.5) * mean(log_prob + H) = -(log 0.5) * (-1 - 3) = 4 log 0.5
    assert loss.item() == pytest.approx(4 * math.log(0.5))
    loss.backward()
    assert log_alpha.grad.item() == pytest.approx(4.0)  # d/dlog_alpha = -mean(log_prob + H)
    # entropy 1.0 is above the target -3: gradient descent lowers alpha
    with torch.no_grad():
        log_alpha -= 0.1 * log_alpha.grad
    assert log_alpha.exp().item() == pytest.approx(0.5 * math.exp(-0.4))


def test_soft_update():
    online, target = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    with torch.no_grad():
        online.weight.fill_(1.0)
        target.weight.fill_(3.0)
    soft_update(target, online, 0.25)
    assert target.weight.item() == pytest.approx(0.25 * 1.0 + 0.75 * 3.0)


def test_critic_ensemble_members_are_independent():
    spec = SacNetworkSpec(obs_key="x", obs_dim=3, action_low=(-1.0,), action_high=(1.0,), hidden_dim=8)
    ens = CriticEnsemble(spec, 4)
    obs, act = torch.randn(5, 3), torch.rand(5, 1)
    q = ens(obs, act)
    assert q.shape == (4, 5)
    assert not torch.allclose(q[0], q[1])
    # member 2 computed alone with its own weights gives the same values
    h = torch.cat([obs, act], -1)
    for i, (w, b) in enumerate(zip(ens.weights, ens.biases)):
        h = h @ w[2] + b[2, 0]
        if i < len(ens.weights) - 1:
            h = torch.relu(h)
    assert torch.allclose(h[:, 0], q[2], atol=1e-6)


def _batch(n=32, seed=0):
    rng = np.random.default_rng(seed)
    return TransitionBatch(obs={"x": rng.normal(size=(n, 3)).astype(np.float32)},
                           action=rng.uniform(-2, 2, size=(n, 1)).astype(np.float32),
                           reward=rng.normal(size=n).astype(np.float32),
                           next_obs={"x": rng.normal(size=(n, 3)).astype(np.float32)},
                           discount=np.full(n, 0.99, np.float32))


def test_agent_update_moves_targets_by_tau_and_tunes_alpha():
    spec = SacNetworkSpec(obs_key="x", obs_dim=3, action_low=(-2.0,), action_high=(2.0,), hidden_dim=16)
    agent = SACAgent(spec, SacHyper(tau=0.1, init_alpha=0.2, n_critics=3, target_critics=2), seed=0)
    before_online = [p.detach().clone() for p in agent.critic.parameters()]
    before_target = [p.detach().clone() for p in agent.critic_target.parameters()]
    metrics = agent.train(_batch())
    for b_on, b_t, on, t in zip(before_online, before_target, agent.critic.parameters(),
                                agent.critic_target.parameters()):
        assert torch.allclose(b_on, b_t)
        assert torch.allclose(t, 0.9 * b_t + 0.1 * on.detach(), atol=1e-6)
    assert {"losses/qf_loss", "losses/actor_loss", "losses/alpha", "losses/alpha_loss"} <= set(metrics)
    assert agent.alpha != pytest.approx(0.2)
    assert agent.target_entropy == -1.0


def test_agent_state_round_trip_and_actor_bounds():
    spec = SacNetworkSpec(obs_key="x", obs_dim=3, action_low=(-2.0, 0.0), action_high=(2.0, 1.0), hidden_dim=16)
    agent = SACAgent(spec, SacHyper(), seed=1)
    for k in range(3):
        b = _batch(seed=k)
        b.action = np.concatenate([b.action, np.full_like(b.action, 0.5)], 1)
        agent.train(b)
    other = SACAgent(spec, SacHyper(), seed=2)
    other.load_state_dict(agent.state_dict())
    obs = torch.randn(4, 3)
    assert torch.allclose(other.actor.deterministic(obs), agent.actor.deterministic(obs))
    actor = agent.get_actor()
    acts = np.stack([actor.act(np.random.randn(3)) for _ in range(200)])
    assert (acts[:, 0] >= -2).all() and (acts[:, 0] <= 2).all() and (acts[:, 1] >= 0).all() and (acts[:, 1] <= 1).all()
    assert np.allclose(actor.act(np.zeros(3), test=True), actor.act(np.zeros(3), test=True))
