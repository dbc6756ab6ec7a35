"""n-step transitions from a stretch of one episode (shared by the replay memories).

For step i of a stretch of L steps, the transition looks n = min(n_max, L - i) steps ahead
(cut earlier at exploratory actions when asked) and stores the cumulative discounted rewards
after 1..n_max steps, so a memory can shorten a transition at sample time (the IQN mini-race
collate does) without recomputing anything.
"""

from __future__ import annotations

import dataclasses

import numpy as np

NO_FINISH = np.iinfo(np.int32).max  # terminal_actions of a transition whose episode did not end in reach


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
