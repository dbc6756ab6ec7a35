"""``SACActor``: the SAC/REDQ policy a worker runs.

Training episodes sample from the squashed Gaussian; ``test=True`` takes the squashed mean.
A worker's first ``random_steps`` steps take uniformly random actions inside the bounds (the
usual SAC warm-up, counted per worker).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rulka.agents.sac.network import SacNetworkSpec, SquashedGaussianActor
from rulka.interfaces import ActorModule, Weights


class SACActor(ActorModule):
    """Acts with a ``SquashedGaussianActor`` built from ``network`` (a ``SacNetworkSpec`` dict)."""

    def __init__(self, network: Mapping[str, Any], random_steps: int = 0, seed: int | None = None,
                 device: str = "cpu") -> None:
        self.spec = SacNetworkSpec.from_dict(dict(network))
        self.device = torch.device(device)
        self.net = SquashedGaussianActor(self.spec).to(self.device).eval()
        self.random_steps = int(random_steps)
        self.steps = 0
        self.rng = np.random.default_rng(seed)
        self.low = np.asarray(self.spec.action_low, np.float32)
        self.high = np.asarray(self.spec.action_high, np.float32)

    def _obs(self, obs: Any) -> torch.Tensor:
        x = obs[self.spec.obs_key] if isinstance(obs, Mapping) else obs
        return torch.as_tensor(np.asarray(x, np.float32).reshape(1, -1), device=self.device)

    def act(self, obs: Any, test: bool = False) -> np.ndarray:
        """A float32 action of the env's ``Box`` shape."""
        if not test:
            self.steps += 1
            if self.steps <= self.random_steps:
                return self.rng.uniform(self.low, self.high).astype(np.float32)
        with torch.inference_mode():
            x = self._obs(obs)
            action = self.net.deterministic(x) if test else self.net.sample(x)[0]
        return action[0].cpu().numpy().astype(np.float32)

    def load_weights(self, weights: Weights) -> None:
        self.net.load_state_dict({k: torch.as_tensor(np.asarray(v)) if not torch.is_tensor(v) else v
                                  for k, v in weights.items()})

    def get_weights(self) -> dict[str, Any]:
        return {k: v.detach().cpu().clone() for k, v in self.net.state_dict().items()}
