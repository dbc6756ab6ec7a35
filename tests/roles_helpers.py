"""Small deterministic plugins for role tests (shared by tests/test_delivery*, test_trainer*, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch

from rulka.interfaces import ActorModule, Memory, TrainingAgent
from rulka.segment import Segment


class CountingEnv(gymnasium.Env):
    """obs = [episode, step] as float32; every episode lasts ``length`` steps; reward = step."""

    def __init__(self, length: int = 7) -> None:
        self.length = length
        self.observation_space = gymnasium.spaces.Box(-1e9, 1e9, (2,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.episode = -1
        self.t = 0
        self.step_calls = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.episode += 1
        self.t = 0
        return np.array([self.episode, 0], np.float32), {}

    def step(self, action):
        self.t += 1
        self.step_calls += 1
        done = self.t >= self.length
        return np.array([self.episode, self.t], np.float32), float(self.t), done, False, {"race_time_ms": 50 * self.t}


class ConstActor(ActorModule):
    """Acts 0; remembers the weight it was given (``w``) and which thread loaded it."""

    def __init__(self, **_: Any) -> None:
        self.w = torch.zeros(1)
        self.loads: list[float] = []

    def act(self, obs, test=False):
        return 0

    def act_with_info(self, obs, test=False):
        return 0, {"w": float(self.w[0])}

    def load_weights(self, weights):
        self.w = torch.as_tensor(weights["w"]).clone()
        self.loads.append(float(self.w[0]))

    def get_weights(self):
        return {"w": self.w.clone()}


class ListMemory(Memory):
    """Keeps every segment it is given; one transition per step."""

    def __init__(self, **_: Any) -> None:
        self.segments: list[Segment] = []
        self.loaded_keys: list[str] = []
        self.start_learning_size = 1

    def append(self, segment):
        self.segments.append(segment)
        return segment.num_transitions

    def __len__(self):
        return sum(s.num_transitions for s in self.segments)

    def sample(self, batch_size):
        return batch_size

    def rebuild_transitions(self, segment):
        a = segment.arrays
        return [{"obs": a["obs/x"][i], "action": a["action"][i], "reward": a["reward"][i],
                 "next_obs": a["obs/x"][i + 1], "done": a["terminated"][i]} for i in range(segment.num_transitions)]

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        keys = sorted({f"{s.worker_id} {s.seq}" for s in self.segments} | set(getattr(self, "loaded_keys", [])))
        (directory / "keys.txt").write_text("\n".join(keys))

    def load(self, directory: Path) -> None:
        path = directory / "keys.txt"
        self.loaded_keys = [k for k in path.read_text().split("\n") if k] if path.exists() else []


class UnallocatableMemory(ListMemory):
    """A memory sized beyond the machine (what ``capacity: 1e12`` does to a ring buffer): its
    first append cannot allocate."""

    def append(self, segment):
        raise MemoryError("Unable to allocate 14.6 TiB for an array with shape (1000000000000, 4) and data type "
                          "float32")


class CountingAgent(TrainingAgent):
    """Each update adds 1 to a parameter ``w`` (so weights differ between versions) and steps an
    Adam optimizer (so the checkpoint carries optimizer state)."""

    batch_size = 4

    def __init__(self, **_: Any) -> None:
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.opt = torch.optim.Adam([self.w], lr=0.1)
        self.trained = 0

    def train(self, batch):
        self.opt.zero_grad()
        (self.w * 0.0 + (self.w - 100) ** 2).sum().backward()
        self.opt.step()
        with torch.no_grad():
            self.w.copy_(torch.tensor([float(self.trained + 1)]))
        self.trained += 1
        return {"losses/fake": float(self.trained)}

    def get_actor(self):
        a = ConstActor()
        a.load_weights({"w": self.w.detach()})
        return a

    def actor_spec(self):
        return {"actor": "roles_helpers:ConstActor", "kwargs": {}}

    def state_dict(self):
        return {"w": self.w.detach().clone(), "opt": self.opt.state_dict(), "trained": self.trained}

    def load_state_dict(self, state):
        with torch.no_grad():
            self.w.copy_(state["w"])
        self.opt.load_state_dict(state["opt"])
        self.trained = state["trained"]


class LossyCompressor:
    """Halves rewards on the way (a wrong scale factor): the kind of bug verify mode must catch."""

    def __init__(self) -> None:
        from rulka.compress import ZstdCompressor

        self.inner = ZstdCompressor()

    def compress(self, segment: Segment) -> bytes:
        import copy

        seg = copy.deepcopy(segment)
        seg.arrays["reward"] = (seg.arrays["reward"] * 0.5).astype(np.float32)
        return self.inner.compress(seg)

    def decompress(self, data: bytes) -> Segment:
        return self.inner.decompress(data)


MOVED_STARTS = 4  # greedy races from starts moved up to 0.3 m and 0.3 degrees, beside the one from the start line


def greedy_sim_results(run_dir, moved: int = MOVED_STARTS) -> list[tuple[bool, object, object]]:
    """Drive the simulator greedily with the policy a run saved (its end weights, ``weights/``): one
    race from the start line, then ``moved`` races from starts moved up to 0.3 m sideways and 0.3
    degrees (the simulator's ``start_noise``, start seeds 1..moved: what ``bench/study/runs.py
    --perturbed-races`` drives). The simulator repeats a greedy race exactly, so the start line
    alone is one race however often it is driven. Per race (finished, race ms, metres), the start
    line's first. Shared by the learning tests that hold a saved policy to a race time."""
    import json

    import torch

    from bench.study.tracks import PERTURBED_START_NOISE
    from rulka.config import config_from_dict
    from rulka.envs.sim.env import SimTrackEnv
    from rulka.envs.sim.policy import load_policy

    torch.set_num_threads(1)
    actor, spec = load_policy(run_dir)
    sim = SimTrackEnv(config=config_from_dict(json.loads(spec["run_config_json"])))
    results = []
    for seed in range(moved + 1):
        sim.start_noise = 0.0 if seed == 0 else PERTURBED_START_NOISE
        if hasattr(actor, "reset"):
            actor.reset()
        obs, info = sim.reset(seed=seed)
        done = False
        while not done:
            obs, _, terminated, truncated, info = sim.step(actor.act(obs, test=True))
            done = terminated or truncated
        results.append((bool(info.get("finished")), info.get("race_time_ms"), info.get("progress_m")))
    return results


def assert_race_time_within(results: list[tuple[bool, object, object]], bar: float, track: str = "default") -> None:
    """The race from the start line and the median race from the moved starts (``greedy_sim_results``)
    both finish within ``bar`` x the scripted driver's time on ``track``: a race time from two
    different starts, not one race that merely finished."""
    from bench.study.tracks import scripted_time_s

    limit_ms = bar * scripted_time_s(track) * 1000
    shown = (f"greedy races (finished, race ms, metres), the start line's first: {results}; bar {bar:g} x the "
             f"scripted driver = {limit_ms / 1000:.2f} s")
    print(shown)
    line, moved = results[0], results[1:]
    assert moved, "no race from a moved start"
    # the lower middle, as bench/study/tracks.py ranks races: a finish before any cut-off, then the faster
    ranked = sorted(moved, key=lambda r: (not r[0], r[1] if r[0] else -(r[2] or 0.0)))
    median = ranked[(len(ranked) - 1) // 2]
    for what, race in (("from the start line", line), ("median from moved starts", median)):
        assert race[0] and race[1] is not None and race[1] <= limit_ms, f"{what}: {race}; {shown}"
