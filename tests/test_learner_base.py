"""The learner base (rulka.agents.base): what every built-in learner shares is written once and
behaves the same for each: the saved-state list, the counters, the scheduled learning rate with
the cooldown's factor, soft target updates, and get_actor."""

from __future__ import annotations

import pytest
import torch

from rulka.agents.base import Learner, soft_update
from rulka.agents.simple import SimpleDQNActor, SimpleDQNAgent
from rulka.interfaces import TrainingAgent


def _trained_simple(seed: int) -> SimpleDQNAgent:
    agent = SimpleDQNAgent(obs_dim=4, n_actions=2, batch_size=8, target_update_every=2, seed=seed)
    batch = {"obs": torch.randn(8, 4), "next_obs": torch.randn(8, 4), "action": torch.randint(0, 2, (8,)),
             "reward": torch.randn(8), "done": torch.zeros(8)}
    for _ in range(3):
        agent.train(batch)
    return agent


def test_the_saved_list_round_trips_networks_optimizer_and_counters():
    agent = _trained_simple(0)
    state = agent.state_dict()
    assert set(state) == {"net", "target", "optimizer", "counters"} and state["counters"] == {"updates": 3}
    other = SimpleDQNAgent(obs_dim=4, n_actions=2, seed=1)
    other.load_state_dict(state)
    assert other.updates == 3
    for a, b in zip(agent.net.parameters(), other.net.parameters()):
        assert torch.equal(a, b)
    assert other.optimizer.state_dict()["state"].keys() == agent.optimizer.state_dict()["state"].keys()


def test_a_checkpoint_with_its_counters_at_the_top_still_loads():
    """SAC and the small DQN saved ``updates`` beside the networks before the base put counters
    under ``counters``: such a checkpoint loads with its count."""
    state = _trained_simple(0).state_dict()
    old = {**{k: v for k, v in state.items() if k != "counters"}, "updates": 7}
    other = SimpleDQNAgent(obs_dim=4, n_actions=2, seed=1)
    other.load_state_dict(old)
    assert other.updates == 7


def test_get_actor_builds_the_declared_actor_with_the_published_weights():
    agent = _trained_simple(0)
    actor = agent.get_actor()
    assert isinstance(actor, SimpleDQNActor)
    assert all(torch.equal(actor.get_weights()[k], v) for k, v in agent.actor_weights().items())


def test_the_scheduled_rate_follows_the_frames_and_the_cooldown_factor():
    learner: Learner = SimpleDQNAgent(obs_dim=4, n_actions=2)
    knots = [[0, 1e-3], [100, 1e-5]]
    assert learner.scheduled_lr(knots) == pytest.approx(1e-3)
    learner.frames_played = 50
    assert learner.scheduled_lr(knots) == pytest.approx(1e-4)  # exponential between the knots
    learner.lr_factor = 0.25
    assert learner.scheduled_lr(knots) == pytest.approx(0.25e-4)


def test_soft_update_moves_parameters_by_tau_and_copies_buffers():
    online, target = torch.nn.BatchNorm1d(2), torch.nn.BatchNorm1d(2)
    with torch.no_grad():
        online.weight.fill_(1.0)
        target.weight.fill_(3.0)
        online.running_mean.fill_(5.0)
    soft_update(target, online, 0.25)
    assert target.weight.tolist() == pytest.approx([2.5, 2.5])  # 0.25 * 1 + 0.75 * 3
    assert target.running_mean.tolist() == [5.0, 5.0]


def test_the_interface_declares_the_optional_abilities_off():
    """An agent that declares nothing has no schedule to cool and cannot take weights back; asking
    it to raises instead of doing nothing."""
    assert not TrainingAgent.follows_lr_schedule and not TrainingAgent.loads_actor_weights
    agent = SimpleDQNAgent(obs_dim=4, n_actions=2)
    assert agent.take_sample_credit() == 0
    with pytest.raises(NotImplementedError):
        agent.load_actor_weights({})
