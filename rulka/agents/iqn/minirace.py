"""The mini-race arithmetic: the sample-time collate (n-step building is ``rulka.memory.nstep``).

A mini-race reinterprets each transition as happening at a random time ``t`` (in actions)
inside a window of ``D`` actions (``temporal_mini_race_duration_actions``); Q becomes "the sum
of rewards over the rest of the window", which lets IQN learn with gamma = 1.
"""

from __future__ import annotations

import dataclasses

import numpy as np


def draw_mini_race_times(rng: np.random.Generator, size: int, duration_actions: int,
                         oversample_long_term_steps: int, oversample_maximum_term_steps: int) -> np.ndarray:
    """Current times in the mini-race, as the guide specifies:
    ``clip(|randint(-long + max_term, D + max_term)| - max_term, 0)`` (upper bound excluded)."""
    low = -oversample_long_term_steps + oversample_maximum_term_steps
    high = duration_actions + oversample_maximum_term_steps
    t = np.abs(rng.integers(low, high, size=size, dtype=np.int64)) - oversample_maximum_term_steps
    return np.clip(t, 0, None)


def mini_race_time_pmf(duration_actions: int, oversample_long_term_steps: int,
                       oversample_maximum_term_steps: int) -> dict[int, float]:
    """Exact distribution of ``draw_mini_race_times`` by enumerating the randint range."""
    low = -oversample_long_term_steps + oversample_maximum_term_steps
    high = duration_actions + oversample_maximum_term_steps
    values = np.clip(np.abs(np.arange(low, high)) - oversample_maximum_term_steps, 0, None)
    keys, counts = np.unique(values, return_counts=True)
    return {int(k): c / (high - low) for k, c in zip(keys, counts)}


@dataclasses.dataclass
class Collated:
    time: np.ndarray | None  # (B,) current mini-race time, None without mini-races
    next_time: np.ndarray | None
    reward: np.ndarray  # (B,) n-step reward incl. shaping
    gamma: np.ndarray  # (B,) discount in front of the bootstrap; 0 when terminal
    terminal: np.ndarray  # (B,) bool


def collate(n_steps: np.ndarray, rewards: np.ndarray, gamma_per_step: np.ndarray,
            terminal_actions: np.ndarray, state_potential: np.ndarray, next_potential: np.ndarray,
            time: np.ndarray | None, duration_actions: int | None,
            finish_reward_per_action_left: float = 0.0) -> Collated:
    """Mini-race collate for a batch.

    With ``time`` (mini-race on): next_time = time + n; the window may cut the transition to
    ``n' = n - max(next_time - D, 0)`` steps; it is terminal when ``n' >= terminal_actions`` (race
    finished within reach) or ``next_time >= D`` (past the horizon). The reward is the stored
    reward after n' steps plus ``gamma^n' * next_potential`` (only when not terminal) minus
    ``state_potential``; the bootstrap discount is ``gamma^n'``, or 0 when terminal.

    ``finish_reward_per_action_left`` (``rewards.finish_reward_per_ms_left_in_mini_race`` x ms per
    decision; mini-races only): a transition whose race finishes inside the window, ``f =
    terminal_actions`` steps from its state, also earns that much for each step of the window left
    after the finish, discounted as those steps: ``c * sum(gamma^k for k in f .. D - time - 1)``.
    """
    n = n_steps.astype(np.int64)
    if time is not None:
        assert duration_actions is not None
        next_time = time + n
        reduced = n - np.clip(next_time - duration_actions, 0, None)
        terminal = (reduced >= terminal_actions) | (next_time >= duration_actions)
    else:
        next_time = None
        reduced = n
        terminal = reduced >= terminal_actions
    reward = np.take_along_axis(rewards, (reduced - 1)[:, None], axis=1)[:, 0].astype(np.float64)
    disc = np.power(gamma_per_step.astype(np.float64), reduced)
    disc = np.where(terminal, 0.0, disc)
    reward = reward + disc * next_potential - state_potential
    if finish_reward_per_action_left and time is not None:
        finished = reduced >= terminal_actions  # the race ends inside the window
        f = np.minimum(terminal_actions, reduced)
        left = np.where(finished, np.clip(duration_actions - time - f, 0, None), 0)
        g = gamma_per_step.astype(np.float64)
        # sum over k = f .. f + left - 1 of g^k (left steps); g == 1: left
        safe = np.where(g == 1.0, 0.5, g)
        geometric = np.power(safe, f) * (1.0 - np.power(safe, left)) / (1.0 - safe)
        reward = reward + finish_reward_per_action_left * np.where(g == 1.0, left, geometric)
    return Collated(time=time, next_time=next_time, reward=reward.astype(np.float32),
                    gamma=disc.astype(np.float32), terminal=terminal)
