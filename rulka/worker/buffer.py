"""One segment's worth of steps, as the worker collects them before packing a ``Segment``."""

from __future__ import annotations

from typing import Any

import numpy as np

from rulka.segment import ALLOWED_DTYPES


class EpisodeBuffer:
    """Collects one segment's worth of steps; the last observation carries over to the next."""

    def __init__(self) -> None:
        self.obs: list[dict[str, np.ndarray]] = []
        self.actions: list[Any] = []
        self.rewards: list[float] = []
        self.terminated: list[bool] = []
        self.truncated: list[bool] = []
        self.extras: dict[str, list[Any]] = {}
        self.first_step = 0

    def start(self, obs_arrays: dict[str, np.ndarray], first_step: int) -> None:
        self.__init__()
        self.obs.append(obs_arrays)
        self.first_step = first_step

    def add(self, action: Any, extras: dict[str, Any], reward: float, terminated: bool, truncated: bool,
            next_obs: dict[str, np.ndarray]) -> None:
        self.actions.append(action)
        self.rewards.append(reward)
        self.terminated.append(terminated)
        self.truncated.append(truncated)
        for k, v in extras.items():
            self.extras.setdefault(k, []).append(v)
        self.obs.append(next_obs)

    def __len__(self) -> int:
        return len(self.actions)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {k: np.stack([o[k] for o in self.obs]) for k in self.obs[0]}
        first = np.asarray(self.actions[0])
        if np.issubdtype(first.dtype, np.integer):  # one discrete action, or a block of them (T, N)
            out["action"] = np.asarray(self.actions, np.int64)
        else:
            out["action"] = np.asarray(self.actions, np.float32)
        out["reward"] = np.asarray(self.rewards, np.float32)
        out["terminated"] = np.asarray(self.terminated, bool)
        out["truncated"] = np.asarray(self.truncated, bool)
        for k, vals in self.extras.items():
            if len(vals) != len(self.actions):  # an extra missing at some step is not recorded
                continue
            try:
                arr = np.asarray(vals)
            except ValueError:  # ragged: not an array
                continue
            if arr.dtype == np.float64:
                arr = arr.astype(np.float32)
            if arr.dtype.name in ALLOWED_DTYPES:  # strings and objects never cross the wire
                out[f"extra/{k}"] = arr
        return out
