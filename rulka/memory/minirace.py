"""The mini-race arithmetic: n-step transition building and the sample-time collate.

A mini-race reinterprets each transition as happening at a random time ``t`` (in actions)
inside a window of ``D`` actions (``temporal_mini_race_duration_actions``); Q becomes "the sum
of rewards over the rest of the window", which lets IQN learn with gamma = 1.
"""

from __future__ import annotations

import dataclasses

import numpy as np

NO_FINISH = np.iinfo(np.int32).max  # terminal_actions of a transition whose race did not finish in reach


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
class BuiltTransitions:
    """Transitions built from one stretch of one episode, indices relative to that stretch."""

    state: np.ndarray  # (M,) frame position of the state
    next_state: np.ndarray  # (M,) frame position of the n-step next state
    n_steps: np.ndarray  # (M,) int
    rewards: np.ndarray  # (M, n_max) cumulative discounted reward after 1..n_max steps
    terminal_actions: np.ndarray  # (M,) steps from state to race finish, NO_FINISH if not in reach


def build_n_step(rewards: np.ndarray, greedy: np.ndarray, *, n_max: int, gamma: float,
                 discard_non_greedy: bool, count: int, finished: bool) -> BuiltTransitions:
    """Build the first ``count`` n-step transitions of a stretch of ``L = len(rewards)`` steps
    whose frames are positions ``0..L``.

    For step i: n = min(n_max, L - i); with ``discard_non_greedy`` the window stops before the
    first non-greedy action among steps i+1 .. i+n-1 (the action at i itself may be exploratory).
    ``rewards[i, j] = sum_{k<=j} gamma^k r[i+k]``. ``finished``: frame L is the race finish, so
    ``terminal_actions = L - i`` when that is at most ``n_max`` (else NO_FINISH).
    """
    length = len(rewards)
    i = np.arange(count, dtype=np.int64)
    n = np.minimum(n_max, length - i)
    if discard_non_greedy:
        g = np.asarray(greedy, dtype=bool)
        # walk the (few) offsets; stop a window at the first exploratory action after its start
        for j in range(1, n_max):
            idx = i + j
            inside = idx < np.minimum(length, i + n)
            bad = inside & ~g[np.minimum(idx, length - 1)]
            n = np.where(bad, np.minimum(n, j), n)
    r = np.asarray(rewards, dtype=np.float64)
    cum = np.zeros((count, n_max), dtype=np.float64)
    acc = np.zeros(count, dtype=np.float64)
    for j in range(n_max):
        idx = i + j
        take = j < n
        acc = acc + np.where(take, (gamma ** j) * r[np.minimum(idx, length - 1)], 0.0)
        cum[:, j] = acc
    to_finish = length - i
    # only a finish within reach of the longest window can matter to the collate
    terminal = np.where(finished & (to_finish <= n_max), to_finish, NO_FINISH)
    return BuiltTransitions(state=i, next_state=i + n, n_steps=n, rewards=cum.astype(np.float32),
                            terminal_actions=np.asarray(terminal, dtype=np.int64))


@dataclasses.dataclass
class Collated:
    time: np.ndarray | None  # (B,) current mini-race time, None without mini-races
    next_time: np.ndarray | None
    reward: np.ndarray  # (B,) n-step reward incl. shaping
    gamma: np.ndarray  # (B,) discount in front of the bootstrap; 0 when terminal
    terminal: np.ndarray  # (B,) bool


def collate(n_steps: np.ndarray, rewards: np.ndarray, gamma_per_step: np.ndarray,
            terminal_actions: np.ndarray, state_potential: np.ndarray, next_potential: np.ndarray,
            time: np.ndarray | None, duration_actions: int | None) -> Collated:
    """Mini-race collate for a batch.

    With ``time`` (mini-race on): next_time = time + n; the window may cut the transition to
    ``n' = n - max(next_time - D, 0)`` steps; it is terminal when ``n' >= terminal_actions`` (race
    finished within reach) or ``next_time >= D`` (past the horizon). The reward is the stored
    reward after n' steps plus ``gamma^n' * next_potential`` (only when not terminal) minus
    ``state_potential``; the bootstrap discount is ``gamma^n'``, or 0 when terminal.
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
    return Collated(time=time, next_time=next_time, reward=reward.astype(np.float32),
                    gamma=disc.astype(np.float32), terminal=terminal)
