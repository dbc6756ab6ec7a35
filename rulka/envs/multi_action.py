"""Multi-action blocks (``environment.rl_action_offsets_ms``): one decision = N actions.

With ``rl_action_offsets_ms: [0, 10, 20, 30, 40]`` the policy chooses N = 5 actions in one
forward pass, to be applied 0, 10, 20, 30 and 40 ms from the current state; the environment then
runs at one 10 ms engine step per action (``environment.ms_per_action`` is 10, the simulator's
and the TrackMania backends' step period follow it). :class:`ActionBlockEnv` wraps any such env
so that one ``step`` takes the whole block: it steps the inner env once per action, in order,
sums the N rewards (the guide: one replay transition = one block, its reward the SUM of the N
rewards, undiscounted inside the block) and returns the observation after the last step.

If the episode ends inside the block (terminated or truncated after action k < N), the wrapper
stops there: the remaining actions are not applied, ``info["block_steps"]`` says how many were
(k) and ``info["block_cut"]`` is True; a full block has ``block_steps`` N and ``block_cut``
False. The env's own ``info`` of the last step taken is returned with those two keys added.

Nothing here is platform-specific: workers on Windows wrap their game env the same way.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rulka.errors import UserError


class ActionBlockEnv(gym.Wrapper):
    """Takes ``n_actions_per_block`` discrete actions per ``step`` (see the module docstring).

    The inner env must have a ``Discrete(A)`` action space; the block's action space is
    ``MultiDiscrete([A] * N)`` and a ``step`` takes an integer sequence of length N (a wrong
    length or an out-of-range action is a ValueError before anything is stepped)."""

    def __init__(self, env: gym.Env, n_actions_per_block: int) -> None:
        super().__init__(env)
        n = int(n_actions_per_block)
        if n < 1:
            raise UserError(f"a multi-action block needs at least one action, got {n}")
        inner = env.action_space
        if not isinstance(inner, spaces.Discrete):
            raise UserError(
                "environment.rl_action_offsets_ms: multi-action blocks need a discrete action space "
                f"(got {type(inner).__name__}; set environment.continuous_actions: false)")
        self.n_actions_per_block = n
        self.n_actions = int(inner.n)
        self.action_space = spaces.MultiDiscrete(np.full(n, self.n_actions, dtype=np.int64))
        self.blocks = 0  # blocks stepped
        self.cut_blocks = 0  # blocks an episode end cut short

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        actions = np.asarray(action).reshape(-1)
        if len(actions) != self.n_actions_per_block or not np.issubdtype(actions.dtype, np.integer):
            raise ValueError(f"a block takes {self.n_actions_per_block} integer actions, got {np.asarray(action)!r}")
        if actions.min() < 0 or actions.max() >= self.n_actions:
            raise ValueError(f"block actions must be in 0..{self.n_actions - 1}, got {actions.tolist()}")
        total = 0.0
        terminated = truncated = False
        obs: Any = None
        info: dict[str, Any] = {}
        taken = 0
        for a in actions:
            obs, reward, terminated, truncated, info = self.env.step(int(a))
            total += float(reward)
            taken += 1
            if terminated or truncated:
                break
        self.blocks += 1
        cut = taken < self.n_actions_per_block
        self.cut_blocks += int(cut)
        info = dict(info) if isinstance(info, dict) else {}
        info["block_steps"] = taken
        info["block_cut"] = cut
        return obs, total, bool(terminated), bool(truncated), info


def wrap_for_blocks(env: gym.Env, n_actions_per_block: int) -> gym.Env:
    """``env`` itself with one action per decision, else an :class:`ActionBlockEnv` around it."""
    return env if n_actions_per_block <= 1 else ActionBlockEnv(env, n_actions_per_block)
