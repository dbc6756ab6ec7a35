"""SAC's networks and the squashed-Gaussian arithmetic.

- ``SacNetworkSpec``: plain data that builds both networks (crosses the wire in the actor spec).
- ``SquashedGaussianActor``: observation -> mean and log-std of a Gaussian over pre-squash
  actions ``u``; the action is ``a = bias + scale * tanh(u)``, inside the env's ``Box`` bounds.
- ``squashed_log_prob``: log-density of ``a`` given the Gaussian over ``u`` (change of variables
  through tanh and the affine rescale).
- ``CriticEnsemble``: N independent Q(s, a) MLPs evaluated in one batched matrix product per
  layer (SAC's twin critics are N = 2; REDQ uses N = 10).

Observations are float vectors (``obs/x`` of a gym env, ``obs/float`` of the simulator and the
TrackMania backends), normalised by the spec's per-feature mean and std.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

LOG_2 = math.log(2.0)


@dataclasses.dataclass(frozen=True)
class SacNetworkSpec:
    """What builds the actor and the critics (all plain data)."""

    obs_key: str  # observation name in segments and in dict observations: "x" or "float"
    obs_dim: int
    action_low: Sequence[float]
    action_high: Sequence[float]
    hidden_dim: int = 256
    hidden_layers: int = 2
    obs_mean: Sequence[float] | None = None
    obs_std: Sequence[float] | None = None
    log_std_min: float = -5.0
    log_std_max: float = 2.0

    @property
    def action_dim(self) -> int:
        return len(self.action_low)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SacNetworkSpec:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def squashed_log_prob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor,
                      scale: torch.Tensor) -> torch.Tensor:
    """log pi(a) for ``a = bias + scale * tanh(u)``, ``u ~ N(mean, exp(log_std))``, summed over
    action dimensions: ``log N(u) - sum_i [log scale_i + log(1 - tanh(u_i)^2)]``, with
    ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))`` (exact, and finite for large |u|)."""
    normal = torch.distributions.Normal(mean, log_std.exp())
    log_det = torch.log(scale) + 2.0 * (LOG_2 - u - F.softplus(-2.0 * u))
    return (normal.log_prob(u) - log_det).sum(-1)


def mlp(sizes: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class _Normalizer(nn.Module):
    def __init__(self, spec: SacNetworkSpec) -> None:
        super().__init__()
        mean = torch.tensor(spec.obs_mean if spec.obs_mean is not None else [0.0] * spec.obs_dim)
        std = torch.tensor(spec.obs_std if spec.obs_std is not None else [1.0] * spec.obs_dim)
        self.register_buffer("mean", mean.float(), persistent=False)
        self.register_buffer("std", std.float().clamp_min(1e-6), persistent=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs - self.mean) / self.std


class SquashedGaussianActor(nn.Module):
    """Policy network; ``sample`` draws a reparameterised action with its log-probability."""

    def __init__(self, spec: SacNetworkSpec) -> None:
        super().__init__()
        self.spec = spec
        self.norm = _Normalizer(spec)
        self.trunk = mlp([spec.obs_dim] + [spec.hidden_dim] * spec.hidden_layers)
        self.mean = nn.Linear(spec.hidden_dim, spec.action_dim)
        self.log_std = nn.Linear(spec.hidden_dim, spec.action_dim)
        low = torch.tensor(spec.action_low, dtype=torch.float32)
        high = torch.tensor(spec.action_high, dtype=torch.float32)
        self.register_buffer("scale", (high - low) / 2.0, persistent=False)
        self.register_buffer("bias", (high + low) / 2.0, persistent=False)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) of the pre-squash Gaussian; log_std is squashed smoothly into
        [log_std_min, log_std_max]."""
        h = F.relu(self.trunk(self.norm(obs)))
        lo, hi = self.spec.log_std_min, self.spec.log_std_max
        log_std = lo + 0.5 * (hi - lo) * (torch.tanh(self.log_std(h)) + 1.0)
        return self.mean(h), log_std

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(action, log pi(action)) with a reparameterised draw (gradients flow through both)."""
        mean, log_std = self(obs)
        u = mean + log_std.exp() * torch.randn_like(mean)
        action = self.bias + self.scale * torch.tanh(u)
        return action, squashed_log_prob(u, mean, log_std, self.scale)

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """The evaluation action: the squashed mean."""
        mean, _ = self(obs)
        return self.bias + self.scale * torch.tanh(mean)


class CriticEnsemble(nn.Module):
    """N Q-networks with separate weights, computed together: ``forward(obs, action)`` -> (N, B)."""

    def __init__(self, spec: SacNetworkSpec, n_critics: int) -> None:
        super().__init__()
        self.n = int(n_critics)
        self.norm = _Normalizer(spec)
        sizes = [spec.obs_dim + spec.action_dim] + [spec.hidden_dim] * spec.hidden_layers + [1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            bound = 1.0 / math.sqrt(fan_in)  # the spread nn.Linear's default init gives
            self.weights.append(nn.Parameter(torch.empty(self.n, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(self.n, 1, fan_out).uniform_(-bound, bound)))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.norm(obs), action], dim=-1)
        h = x.unsqueeze(0).expand(self.n, *x.shape)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(b, h, w)
            if i < last:
                h = F.relu(h)
        return h.squeeze(-1)
