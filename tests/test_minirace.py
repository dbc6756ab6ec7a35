"""Mini-race arithmetic: the time distribution of the guide's worked example, n-step sums with
discarded exploratory steps, terminal handling at the horizon and at the finish."""

from __future__ import annotations

import numpy as np
import pytest

from rulka.agents.iqn.minirace import collate, draw_mini_race_times, mini_race_time_pmf
from rulka.memory.nstep import NO_FINISH, build_n_step


def test_time_distribution_of_guide_example_exact():
    # D = 140, oversample_long_term_steps = 40, oversample_maximum_term_steps = 5:
    # randint over [-35, 145) = 180 values; |x| - 5 clipped at 0.
    pmf = mini_race_time_pmf(140, 40, 5)
    assert set(pmf) == set(range(140))  # final time always in 0..139
    assert pmf[0] == pytest.approx(11 / 180)  # x in -5..5
    for t in range(1, 31):
        assert pmf[t] == pytest.approx(2 / 180)  # x = +-(t + 5), both in range
    for t in range(31, 140):
        assert pmf[t] == pytest.approx(1 / 180)  # only the positive draw
    assert sum(pmf.values()) == pytest.approx(1.0)


def test_time_distribution_empirical_matches_exact():
    rng = np.random.default_rng(0)
    t = draw_mini_race_times(rng, 360_000, 140, 40, 5)
    assert t.min() == 0 and t.max() == 139
    assert np.mean(t == 0) == pytest.approx(11 / 180, abs=0.002)
    assert np.mean((t >= 1) & (t <= 30)) == pytest.approx(60 / 180, abs=0.004)
    assert np.mean(t >= 31) == pytest.approx(109 / 180, abs=0.004)


def test_n_step_sums_and_discarded_non_greedy_steps():
    r = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    greedy = np.array([True, True, False, True, True])
    b = build_n_step(r, greedy, n_max=3, gamma=0.5, discard_non_greedy=True, count=5, finished=False)
    # i=0: window steps 1,2 -> step 2 exploratory -> n = 2
    # i=1: step 2 exploratory -> n = 1 ; i=2: own action may explore -> n = 3
    # i=3: only 2 steps left -> n = 2 ; i=4: n = 1
    assert b.n_steps.tolist() == [2, 1, 3, 2, 1]
    assert b.next_state.tolist() == [2, 2, 5, 5, 5]
    assert b.rewards[0, :2].tolist() == [1.0, 1.0 + 0.5 * 2]
    assert b.rewards[2].tolist() == [4.0, 4.0 + 0.5 * 8, 4.0 + 4.0 + 0.25 * 16]
    assert np.all(b.terminal_actions == NO_FINISH)
    kept = build_n_step(r, greedy, n_max=3, gamma=0.5, discard_non_greedy=False, count=5, finished=True)
    assert kept.n_steps.tolist() == [3, 3, 3, 2, 1]
    assert kept.terminal_actions.tolist() == [NO_FINISH, NO_FINISH, 3, 2, 1]


def _one(n, time, terminal_actions=NO_FINISH, d=140, rewards=None, pot=(0.0, 0.0), gamma=1.0):
    rewards = np.array([rewards or [1.0, 2.0, 3.0]], np.float32)
    return collate(np.array([n]), rewards, np.array([gamma], np.float32), np.array([terminal_actions]),
                   np.array([pot[0]]), np.array([pot[1]]), None if time is None else np.array([time]), d)


def test_collate_inside_the_horizon_bootstraps():
    c = _one(3, 100)
    assert c.next_time.tolist() == [103] and not c.terminal[0]
    assert c.reward[0] == pytest.approx(3.0) and c.gamma[0] == pytest.approx(1.0)


def test_collate_past_the_horizon_cuts_steps_and_terminates():
    c = _one(3, 138)  # next time 141 >= 140: only 2 steps fit in the mini-race
    assert c.terminal[0] and c.gamma[0] == 0.0
    assert c.reward[0] == pytest.approx(2.0)
    c = _one(3, 137)  # next time exactly 140: terminal, all 3 steps count
    assert c.terminal[0] and c.reward[0] == pytest.approx(3.0)


def test_collate_at_race_finish_is_terminal():
    c = _one(2, 10, terminal_actions=2)
    assert c.terminal[0] and c.gamma[0] == 0.0 and c.reward[0] == pytest.approx(2.0)
    c = _one(2, 10, terminal_actions=3)  # finish further than the window: bootstrap
    assert not c.terminal[0]


def test_collate_potential_shaping_and_discount():
    c = _one(2, 0, pot=(1.5, 4.0), gamma=0.5)
    # reward after 2 steps + gamma^2 * next potential - state potential
    assert c.reward[0] == pytest.approx(2.0 + 0.25 * 4.0 - 1.5)
    assert c.gamma[0] == pytest.approx(0.25)
    c = _one(2, 139, pot=(1.5, 4.0))  # terminal: no next potential
    assert c.reward[0] == pytest.approx(1.0 - 1.5)


def test_collate_without_mini_race_uses_finish_only():
    c = _one(3, None, terminal_actions=3, d=None)
    assert c.time is None and c.terminal[0] and c.reward[0] == pytest.approx(3.0)


def _finish(n, time, terminal_actions, c, gamma=1.0, d=140):
    rewards = np.array([[1.0, 2.0, 3.0]], np.float32)
    return collate(np.array([n]), rewards, np.array([gamma], np.float32), np.array([terminal_actions]),
                   np.array([0.0]), np.array([0.0]), np.array([time]), d, finish_reward_per_action_left=c)


def test_a_finish_inside_the_window_earns_the_reward_for_each_step_left():
    # window 140, at time 10 the race finishes 2 steps on: 140 - 10 - 2 = 128 steps left
    c = _finish(2, 10, 2, c=0.01)
    assert c.terminal[0] and c.reward[0] == pytest.approx(2.0 + 128 * 0.01)
    # one step later to the finish: one step fewer left, as a time penalty of 0.01 per step would charge it
    later = _finish(3, 10, 3, c=0.01)
    assert later.reward[0] - 3.0 == pytest.approx(127 * 0.01)
    # discounted as the steps it stands for: k = 2 .. 5 at time 134 (140 - 134 - 2 = 4 steps left)
    c = _finish(2, 134, 2, c=1.0, gamma=0.5)
    assert c.reward[0] == pytest.approx(2.0 + 0.5 ** 2 + 0.5 ** 3 + 0.5 ** 4 + 0.5 ** 5)


def test_no_finish_reward_without_a_finish_in_the_window():
    assert _finish(2, 10, 3, c=0.01).reward[0] == pytest.approx(2.0)  # the finish is beyond the n steps
    assert _finish(2, 10, NO_FINISH, c=0.01).reward[0] == pytest.approx(2.0)
    past = _finish(3, 138, 3, c=0.01)  # the window ends (140) before the finish (141)
    assert past.terminal[0] and past.reward[0] == pytest.approx(2.0)
    at_end = _finish(2, 138, 2, c=0.01)  # the finish falls on the window's last step: nothing left
    assert at_end.terminal[0] and at_end.reward[0] == pytest.approx(2.0)
