"""The discrete actor-critic shared by PPO, GRPO and DPO.

Image head (``nn.vis``: classic CNN or IMPALA CNN) and float MLP (``nn.float``) feed a shared
trunk (``nn.decoder.dense_hidden_dimension``), then a policy head (``nn.decoder.advantage``) giving
logits over the discrete actions and a value head (``nn.decoder.value``) giving V(s). Built from a
plain-data ``PolicyNetworkSpec`` so a worker rebuilds exactly the trainer's network.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from rulka.nn import init_orthogonal, make_image_head, make_mlp
from rulka.nn.blocks import LEAKY_SLOPE, leaky_gain


@dataclasses.dataclass
class PolicyNetworkSpec:
    """Everything that fixes the actor-critic's shape (plain data, crosses the wire in actor_spec)."""

    float_dim: int
    n_actions: int
    image_height: int = 0  # 0 = no image head (float-only env)
    image_width: int = 0
    float_hidden_dim: int = 256
    trunk_hidden_dim: int = 1024
    policy_hidden_dim: int | None = None  # default trunk_hidden_dim // 2
    policy_layers: int = 1
    value_hidden_dim: int | None = None
    value_layers: int = 1
    use_impala_cnn: bool = False
    impala_model_size: int = 1
    use_adaptive_maxpool: bool = False
    adaptive_maxpool_size: int = 6
    use_spectral_norm: bool = False
    float_mean: list[float] | None = None  # per-feature normalisation; default 0 / 1
    float_std: list[float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PolicyNetworkSpec:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown policy network fields: {sorted(unknown)}")
        return cls(**d)

    @property
    def uses_image(self) -> bool:
        return self.image_height > 0 and self.image_width > 0


class ActorCritic(nn.Module):
    """``forward(img, floats)`` -> ``(logits (B, A), value (B,))``; ``img`` uint8 ``(B, H, W)`` or
    None without image, ``floats`` ``(B, F)``."""

    def __init__(self, spec: PolicyNetworkSpec) -> None:
        super().__init__()
        self.spec = spec
        if spec.uses_image:
            self.img_head, img_out = make_image_head(
                spec.image_height, spec.image_width, use_impala_cnn=spec.use_impala_cnn,
                impala_model_size=spec.impala_model_size, use_adaptive_maxpool=spec.use_adaptive_maxpool,
                adaptive_maxpool_size=spec.adaptive_maxpool_size, use_spectral_norm=spec.use_spectral_norm)
        else:
            self.img_head, img_out = None, 0
        self.float_feature_extractor = make_mlp(spec.float_dim, spec.float_hidden_dim, None, 2)
        self.trunk = nn.Sequential(nn.Linear(img_out + spec.float_hidden_dim, spec.trunk_hidden_dim),
                                   nn.LeakyReLU(LEAKY_SLOPE))
        init_orthogonal(self.trunk[0], leaky_gain())
        half = max(1, spec.trunk_hidden_dim // 2)
        # small initial logits (near-uniform policy) and unit-scale values, as PPO practice has it
        self.policy_head = make_mlp(spec.trunk_hidden_dim, spec.policy_hidden_dim or half, spec.n_actions,
                                    spec.policy_layers, last_gain=0.01)
        self.value_head = make_mlp(spec.trunk_hidden_dim, spec.value_hidden_dim or half, 1,
                                   spec.value_layers, last_gain=1.0)
        mean = torch.tensor(spec.float_mean if spec.float_mean is not None else [0.0] * spec.float_dim)
        std = torch.tensor(spec.float_std if spec.float_std is not None else [1.0] * spec.float_dim)
        if mean.shape != (spec.float_dim,) or std.shape != (spec.float_dim,):
            raise ValueError("float_mean/float_std must have float_dim entries")
        self.register_buffer("float_mean", mean.float())
        self.register_buffer("float_std", std.float().clamp(min=1e-6))

    def features(self, img: torch.Tensor | None, floats: torch.Tensor) -> torch.Tensor:
        f = self.float_feature_extractor((floats.float() - self.float_mean) / self.float_std)
        if self.img_head is not None:
            if img is None:
                raise ValueError("this network needs an image input")
            f = torch.cat([self.img_head(img), f], dim=1)
        return self.trunk(f)

    def forward(self, img: torch.Tensor | None, floats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.features(img, floats)
        return self.policy_head(h), self.value_head(h)[:, 0]

    def evaluate_actions(self, img: torch.Tensor | None, floats: torch.Tensor, actions: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log pi(a|s) (B,), entropy (B,), V(s) (B,)) for the given actions."""
        logits, value = self(img, floats)
        logp_all = torch.log_softmax(logits.float(), dim=-1)
        logp = logp_all.gather(1, actions.long()[:, None])[:, 0]
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy, value.float()
