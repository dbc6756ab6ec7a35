"""εz-greedy (``exploration.epsilon_z_exponent``, Dabney, Ostrovski and Barreto, ICLR 2021): a random
action, once drawn, is held for a zeta-distributed number of actions. The durations follow the
truncated zeta law (hand-computed), the actor replays draw by draw as documented, a hold ends at
an episode start and never touches greedy (test) actions, and the key reaches the workers' actors
from a config, refused where it would do nothing."""

from __future__ import annotations

import numpy as np
import pytest

from rulka.agents.iqn import IQNActor
from rulka.agents.iqn.settings import make_agent
from rulka.config import config_from_dict, load_config
from rulka.config.built import check_built
from rulka.errors import ConfigError
from rulka.plugins import build_plugin

SPEC = dict(float_dim=5, n_actions=4, float_hidden_dim=16, dense_hidden_dimension=16, embedding_dimension=8)


def test_durations_follow_the_truncated_zeta_law():
    actor = IQNActor(SPEC, iqn_k=2, seed=0, epsilon_z_exponent=2.0, epsilon_z_max_actions=5)
    # P(n) = n^-2 / (1 + 1/4 + 1/9 + 1/16 + 1/25), the sum being 1.463611...
    total = 1 + 1 / 4 + 1 / 9 + 1 / 16 + 1 / 25
    expected = np.array([1.0, 1 / 4, 1 / 9, 1 / 16, 1 / 25]) / total
    assert expected[0] == pytest.approx(0.683242, abs=1e-6) and expected[4] == pytest.approx(0.027329, abs=1e-6)
    draws = np.array([actor.draw_duration() for _ in range(100_000)])
    assert draws.min() == 1 and draws.max() == 5
    freq = np.bincount(draws, minlength=6)[1:] / len(draws)
    np.testing.assert_allclose(freq, expected, atol=0.006)
    # exponent 1 on 1..2: P(1) = 2/3
    one = IQNActor(SPEC, iqn_k=2, seed=1, epsilon_z_exponent=1.0, epsilon_z_max_actions=2)
    assert np.mean([one.draw_duration() == 1 for _ in range(50_000)]) == pytest.approx(2 / 3, abs=0.01)
    plain = IQNActor(SPEC, iqn_k=2, seed=0)
    assert {plain.draw_duration() for _ in range(100)} == {1}
    with pytest.raises(ValueError, match="epsilon_z_exponent"):
        IQNActor(SPEC, iqn_k=2, epsilon_z_exponent=0.0)


def test_a_random_action_is_held_for_its_duration_without_new_draws():
    """Replayed from a twin of the actor's generator: r < epsilon draws an action and then a
    duration n, and the next n - 1 actions are that action with no draw at all; otherwise the
    plain rule (Boltzmann, greedy)."""
    actor = IQNActor(SPEC, iqn_k=2, seed=7, epsilon=0.2, epsilon_boltzmann=0.2, tau_epsilon_boltzmann=1e-9,
                     epsilon_z_exponent=1.5, epsilon_z_max_actions=8)
    cdf = np.cumsum(np.arange(1, 9, dtype=np.float64) ** -1.5)
    cdf /= cdf[-1]
    twin = np.random.default_rng(7)
    obs = np.linspace(-1, 1, 5).astype(np.float32)
    held, left, holds, longest = 0, 0, 0, 0
    for _ in range(2000):
        action, info = actor.act_with_info(obs)
        greedy = int(np.argmax(info["q_values"]))
        if left > 0:
            left -= 1
            expected = held
        else:
            r = twin.random()
            if r < 0.2:
                expected = held = int(twin.integers(4))
                n = int(np.searchsorted(cdf, twin.random(), side="right")) + 1
                left, holds, longest = n - 1, holds + 1, max(longest, n)
            elif r < 0.4:
                twin.standard_normal(4)
                expected = greedy
            else:
                expected = greedy
        assert action == expected
        assert info["greedy"] == (action == greedy)
    assert holds > 100 and longest >= 5  # the rule was exercised, long holds included


def test_a_hold_ends_at_an_episode_start_and_greedy_actions_ignore_it():
    actor = IQNActor(SPEC, iqn_k=2, seed=3, epsilon=1.0, epsilon_z_exponent=0.01, epsilon_z_max_actions=50)
    obs = np.ones(5, np.float32)
    first = actor.act(obs)
    assert actor._held_left > 0  # exponent ~0: durations nearly uniform on 1..50
    greedy = int(np.argmax(actor.q_values(obs, test=True)))
    left = actor._held_left
    for _ in range(3):
        assert actor.act(obs, test=True) == greedy
    assert actor._held_left == left  # test actions neither use nor spend the hold
    assert actor.act(obs) == first and actor._held_left == left - 1
    actor.reset()
    assert actor._held_left == 0


def test_the_key_reaches_the_workers_actor_and_is_refused_where_it_does_nothing():
    cfg = load_config("configs/sim_iqn.yaml", ["exploration.epsilon_z_exponent=2", "exploration.epsilon_z_max_actions=40",
                                               "logging.wandb.enabled=false"], env_file=None)
    check_built(cfg)
    agent = make_agent(cfg, device="cpu", seed=0)
    spec = agent.actor_spec()
    assert spec["kwargs"]["epsilon_z_exponent"] == 2.0 and spec["kwargs"]["epsilon_z_max_actions"] == 40
    actor = build_plugin("actor", spec["actor"], spec["kwargs"], cfg)  # as a worker builds it
    assert actor._duration_cdf is not None and len(actor._duration_cdf) == 40
    plain = make_agent(load_config("configs/sim_iqn.yaml", ["exploration.epsilon_z_exponent=null",
                                                             "logging.wandb.enabled=false"], env_file=None),
                       device="cpu", seed=0)
    assert "epsilon_z_exponent" not in plain.actor_spec()["kwargs"]
    with pytest.raises(ConfigError, match="epsilon_z_exponent.*one action per decision"):
        check_built(config_from_dict({"environment": {"rl_action_offsets_ms": [0, 10, 20]},
                                      "exploration": {"epsilon_z_exponent": 2.0}}))
    with pytest.raises(ConfigError, match="epsilon_z_exponent.*'ppo'"):
        check_built(config_from_dict({"training": {"algorithm": "ppo"}, "exploration": {"epsilon_z_exponent": 2.0}}))
    with pytest.raises(ConfigError, match="epsilon_z_max_actions.*off"):
        check_built(config_from_dict({"exploration": {"epsilon_z_max_actions": 20}}))
