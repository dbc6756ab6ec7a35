"""A deliberately small DQN for float observations (CartPole and friends): the plugin set that
proves the roles work end to end without the simulator or the flagship learner.

- ``SimpleDQNActor`` (actor ``"simple_dqn"``): an MLP Q-network run on the worker,
  epsilon-greedy with epsilon decaying linearly over the worker's own steps; extras
  ``q_values`` and ``greedy`` are recorded in segments.
- ``SimpleReplayMemory`` (memory ``"simple"``): a ring of transitions built from ``obs/x``
  segments; uniform sampling; saves to safetensors.
- ``SimpleDQNAgent`` (agent ``"simple_dqn"``): double DQN with a target network and Huber loss.

Everything is plain torch and numpy in one file, readable top to bottom.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from torch import nn

from rulka.agents.base import Learner
from rulka.errors import BadInput
from rulka.interfaces import ActorModule, Memory, Weights
from rulka.segment import Segment


def build_qnet(obs_dim: int, n_actions: int, hidden: int) -> nn.Module:
    """obs (B, obs_dim) -> Q-values (B, n_actions)."""
    return nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, n_actions))


class SimpleDQNActor(ActorModule):
    """Epsilon-greedy policy over an MLP Q-network; ``test=True`` is greedy."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64, epsilon_start: float = 1.0,
                 epsilon_end: float = 0.05, epsilon_decay_steps: int = 5000, seed: int | None = None) -> None:
        self.obs_dim, self.n_actions = int(obs_dim), int(n_actions)
        self.net = build_qnet(self.obs_dim, self.n_actions, int(hidden))
        self.epsilon_start, self.epsilon_end = float(epsilon_start), float(epsilon_end)
        self.epsilon_decay_steps = max(1, int(epsilon_decay_steps))
        self.steps = 0
        self.rng = np.random.default_rng(seed)

    def epsilon(self) -> float:
        frac = min(1.0, self.steps / self.epsilon_decay_steps)
        return self.epsilon_start + frac * (self.epsilon_end - self.epsilon_start)

    def act_with_info(self, obs: Any, test: bool = False) -> tuple[int, dict[str, Any]]:
        with torch.no_grad():
            q = self.net(torch.as_tensor(np.asarray(obs, np.float32)).reshape(1, -1))[0].numpy()
        greedy_action = int(q.argmax())
        action = greedy_action
        if not test:
            self.steps += 1
            if self.rng.random() < self.epsilon():
                action = int(self.rng.integers(self.n_actions))
        return action, {"q_values": q.astype(np.float32), "greedy": action == greedy_action}

    def act(self, obs: Any, test: bool = False) -> int:
        return self.act_with_info(obs, test)[0]

    def load_weights(self, weights: Weights) -> None:
        self.net.load_state_dict({k: torch.as_tensor(np.asarray(v)) if not torch.is_tensor(v) else v
                                  for k, v in weights.items()})

    def get_weights(self) -> dict[str, Any]:
        return {k: v.detach().clone() for k, v in self.net.state_dict().items()}


class SimpleReplayMemory(Memory):
    """Uniform replay of single-step transitions from segments with a float ``obs/x``."""

    def __init__(self, capacity: int = 50000, min_samples_to_train: int = 500, seed: int | None = None) -> None:
        self.capacity = int(capacity)
        self.min_samples_to_train = int(min_samples_to_train)
        self.start_learning_size = self.min_samples_to_train
        self.rng = np.random.default_rng(seed)
        self._arrays: dict[str, np.ndarray] | None = None
        self._next = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def rebuild_transitions(self, segment: Segment) -> list[dict[str, np.ndarray]]:
        if "obs/x" not in segment.arrays:
            raise BadInput("segment", "SimpleReplayMemory needs an 'obs/x' array")
        obs = np.asarray(segment.arrays["obs/x"], np.float32).reshape(segment.num_transitions + 1, -1)
        action = segment.arrays["action"]
        reward = segment.arrays["reward"].astype(np.float32)
        # a truncated episode (time limit) is not a terminal state: bootstrap through it
        done = segment.arrays["terminated"].astype(np.float32) if "terminated" in segment.arrays \
            else np.zeros(segment.num_transitions, np.float32)
        return [{"obs": obs[i], "action": np.asarray(action[i]), "reward": reward[i],
                 "next_obs": obs[i + 1], "done": done[i]} for i in range(segment.num_transitions)]

    def append(self, segment: Segment) -> int:
        transitions = self.rebuild_transitions(segment)
        if not transitions:
            return 0
        if self._arrays is None:
            self._arrays = {k: np.zeros((self.capacity, *np.shape(v)), np.asarray(v).dtype)
                            for k, v in transitions[0].items()}
        for tr in transitions:
            for k, v in tr.items():
                self._arrays[k][self._next] = v
            self._next = (self._next + 1) % self.capacity
            self._size = min(self._size + 1, self.capacity)
        return len(transitions)

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        if self._arrays is None or self._size == 0:
            raise RuntimeError("cannot sample an empty memory")
        idx = self.rng.integers(0, self._size, size=batch_size)
        return {k: torch.as_tensor(v[idx]) for k, v in self._arrays.items()}

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {k: np.ascontiguousarray(v[: self._size]) for k, v in (self._arrays or {}).items()}
        meta = {"next": str(self._next), "size": str(self._size), "capacity": str(self.capacity)}
        save_file(tensors, str(directory / "replay.safetensors"), metadata=meta)

    def load(self, directory: Path) -> None:
        path = Path(directory) / "replay.safetensors"
        if not path.exists():
            return
        tensors = load_file(str(path))
        if not tensors:
            return
        size = len(next(iter(tensors.values())))
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
        self._arrays = {k: np.zeros((self.capacity, *v.shape[1:]), v.dtype) for k, v in tensors.items()}
        n = min(size, self.capacity)
        for k, v in tensors.items():
            self._arrays[k][:n] = v[:n]
        self._size = n
        self._next = int(meta.get("next", n)) % self.capacity


class SimpleDQNAgent(Learner):
    """Double DQN with a periodically copied target network."""

    saved = ("net", "target", "optimizer")
    counters = ("updates",)
    actor_class = SimpleDQNActor

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64, lr: float = 1e-3, gamma: float = 0.99,
                 batch_size: int = 64, target_update_every: int = 250, epsilon_start: float = 1.0,
                 epsilon_end: float = 0.05, epsilon_decay_steps: int = 5000, seed: int | None = None) -> None:
        if seed is not None:
            torch.manual_seed(seed)
        self.obs_dim, self.n_actions, self.hidden = int(obs_dim), int(n_actions), int(hidden)
        self.gamma = float(gamma)
        self.batch_size = int(batch_size)
        self.target_update_every = int(target_update_every)
        self.actor_kwargs = {"obs_dim": self.obs_dim, "n_actions": self.n_actions, "hidden": self.hidden,
                             "epsilon_start": float(epsilon_start), "epsilon_end": float(epsilon_end),
                             "epsilon_decay_steps": int(epsilon_decay_steps)}
        self.net = build_qnet(self.obs_dim, self.n_actions, self.hidden)
        self.target = copy.deepcopy(self.net)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=lr)
        self.updates = 0

    def train(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        obs, next_obs = batch["obs"].float(), batch["next_obs"].float()
        action = batch["action"].long().reshape(-1, 1)
        q = self.net(obs).gather(1, action).squeeze(1)
        with torch.no_grad():
            best_next = self.net(next_obs).argmax(1, keepdim=True)
            next_q = self.target(next_obs).gather(1, best_next).squeeze(1)
            target = batch["reward"].float() + self.gamma * (1.0 - batch["done"].float()) * next_q
        loss = nn.functional.smooth_l1_loss(q, target)
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.net.parameters(), 10.0)
        self.optimizer.step()
        self.updates += 1
        if self.updates % self.target_update_every == 0:
            self.target.load_state_dict(self.net.state_dict())
        return {"losses/td_loss": loss.item(), "losses/q_mean": q.detach().mean().item()}

    def actor_weights(self) -> dict[str, torch.Tensor]:
        return self.module_weights(self.net)

    def actor_spec(self) -> dict[str, Any]:
        return {"actor": "simple_dqn", "kwargs": dict(self.actor_kwargs)}
