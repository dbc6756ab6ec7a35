"""Pendulum-v1 that records each finished episode, for side-by-side learning-speed benchmarks.

``gymnasium.make("bench.recorded_pendulum:RecordedPendulum-v1")`` (the module registers the id on
import) is Pendulum-v1 (200-step time limit) whose every finished episode appends one JSON line
``{"t": unix time, "steps": env steps taken by this env so far, "return": episode return}`` to the
file named by the environment variable ``RULKA_BENCH_EPISODES`` (nothing is written without it).
The same file serves any framework that makes its env with ``gymnasium.make``, so both sides of a
comparison are measured by the same code.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import gymnasium

ENV_ID = "RecordedPendulum-v1"
LOG_VARIABLE = "RULKA_BENCH_EPISODES"


class EpisodeRecorder(gymnasium.Wrapper):
    """Appends ``{"t", "steps", "return"}`` per finished episode to ``$RULKA_BENCH_EPISODES``."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self.path = os.environ.get(LOG_VARIABLE)
        self.steps = 0
        self.episode_return = 0.0

    def reset(self, **kwargs: Any) -> Any:
        self.episode_return = 0.0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        self.episode_return += float(reward)
        if (terminated or truncated) and self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"t": time.time(), "steps": self.steps, "return": self.episode_return}) + "\n")
        return obs, reward, terminated, truncated, info


def make(**kwargs: Any) -> gymnasium.Env:
    return EpisodeRecorder(gymnasium.make("Pendulum-v1", **kwargs))


if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point=make)
