"""The IQN network: image head + float MLP, multiplied by a cosine quantile embedding, then
dueling advantage/value heads. Built from a plain-data ``IQNNetworkSpec`` so a worker can
rebuild exactly the trainer's network from the actor spec."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from rulka.nn import DuelingHead, NoisyLinear, cosine_embedding, init_orthogonal, make_image_head, make_mlp
from rulka.nn.blocks import LEAKY_SLOPE, leaky_gain


@dataclasses.dataclass
class IQNNetworkSpec:
    """Everything that fixes the network's shape (plain data, crosses the wire in actor_spec)."""

    float_dim: int
    n_actions: int
    image_height: int = 0  # 0 = no image head (float-only env)
    image_width: int = 0
    float_hidden_dim: int = 256
    dense_hidden_dimension: int = 1024
    embedding_dimension: int = 64
    head_hidden_dim: int | None = None  # default dense_hidden_dimension // 2
    head_layers: int = 1
    use_impala_cnn: bool = False
    impala_model_size: int = 1
    use_adaptive_maxpool: bool = False
    adaptive_maxpool_size: int = 6
    use_spectral_norm: bool = False
    use_layer_norm: bool = False
    use_noisy_linear: bool = False
    noisy_sigma0: float = 0.5
    float_mean: list[float] | None = None  # per-feature normalisation; default 0 / 1
    float_std: list[float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IQNNetworkSpec:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown IQN network fields: {sorted(unknown)}")
        return cls(**d)

    @property
    def uses_image(self) -> bool:
        return self.image_height > 0 and self.image_width > 0


def stratified_mirrored_taus(batch_size: int, n: int, *, generator: torch.Generator | None = None,
                             device: torch.device | str = "cpu") -> torch.Tensor:
    """Quantile fractions for a batch, shape ``(n * batch_size,)``, quantile-major.

    Row ``j * batch_size + b`` is quantile ``j`` of item ``b``. For ``j < n/2`` it is drawn
    uniformly in the stratum ``[j/n, (j+1)/n)``; row ``j + n/2`` mirrors it as ``1 - tau``, so
    every item gets n/2 taus below 0.5 and their mirror images above it. ``n`` must be even.
    """
    if n % 2:
        raise ValueError(f"number of quantiles must be even, got {n}")
    half = n // 2
    u = torch.rand(half * batch_size, generator=generator, device=device)
    low = (torch.arange(half, device=device, dtype=torch.float32).repeat_interleave(batch_size) + u) / n
    return torch.cat([low, 1.0 - low])


class IQNNetwork(nn.Module):
    """Q-quantiles for ``n`` taus per item. ``forward(img, floats, taus)`` with ``img`` uint8
    ``(B, H, W)`` (or None without image), ``floats`` ``(B, F)`` and ``taus`` ``(n*B,)``
    quantile-major returns ``(n*B, n_actions)``."""

    def __init__(self, spec: IQNNetworkSpec) -> None:
        super().__init__()
        self.spec = spec
        self.n_actions = spec.n_actions
        self.embedding_dimension = spec.embedding_dimension
        if spec.uses_image:
            self.img_head, img_out = make_image_head(
                spec.image_height, spec.image_width, use_impala_cnn=spec.use_impala_cnn,
                impala_model_size=spec.impala_model_size, use_adaptive_maxpool=spec.use_adaptive_maxpool,
                adaptive_maxpool_size=spec.adaptive_maxpool_size, use_spectral_norm=spec.use_spectral_norm)
        else:
            self.img_head, img_out = None, 0
        self.float_feature_extractor = make_mlp(
            spec.float_dim, spec.float_hidden_dim, None, 2, layer_norm=spec.use_layer_norm)
        dense_in = img_out + spec.float_hidden_dim
        self.dense_input_dimension = dense_in
        self.iqn_fc = nn.Sequential(nn.Linear(spec.embedding_dimension, dense_in), nn.LeakyReLU(LEAKY_SLOPE))
        # cos(.) has variance 1/2: double the weight variance so iqn_fc's output has unit scale
        init_orthogonal(self.iqn_fc[0], math.sqrt(2.0) * leaky_gain())
        head_hidden = spec.head_hidden_dim or spec.dense_hidden_dimension // 2
        self.head = DuelingHead(dense_in, head_hidden, spec.n_actions, spec.head_layers,
                                layer_norm=spec.use_layer_norm, noisy=spec.use_noisy_linear,
                                noisy_sigma0=spec.noisy_sigma0)
        mean = torch.tensor(spec.float_mean if spec.float_mean is not None else [0.0] * spec.float_dim)
        std = torch.tensor(spec.float_std if spec.float_std is not None else [1.0] * spec.float_dim)
        if mean.shape != (spec.float_dim,) or std.shape != (spec.float_dim,):
            raise ValueError("float_mean/float_std must have float_dim entries")
        self.register_buffer("float_mean", mean.float())
        self.register_buffer("float_std", std.float().clamp(min=1e-6))

    def features(self, img: torch.Tensor | None, floats: torch.Tensor) -> torch.Tensor:
        """Per-item features before the quantile embedding, ``(B, dense_input_dimension)``."""
        f = self.float_feature_extractor((floats.float() - self.float_mean) / self.float_std)
        if self.img_head is None:
            return f
        if img is None:
            raise ValueError("this network needs an image input")
        return torch.cat([self.img_head(img), f], dim=1)

    def quantiles_from_features(self, feats: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        n = taus.numel() // feats.shape[0]
        emb = self.iqn_fc(cosine_embedding(taus, self.embedding_dimension))
        return self.head(feats.repeat(n, 1) * emb)

    def forward(self, img: torch.Tensor | None, floats: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        return self.quantiles_from_features(self.features(img, floats), taus)

    def reset_noise(self) -> None:
        for m in self.modules():
            if isinstance(m, NoisyLinear):
                m.reset_noise()


def mean_q(network: IQNNetwork, img: torch.Tensor | None, floats: torch.Tensor, k: int,
           taus: torch.Tensor | None = None) -> torch.Tensor:
    """Expected Q per action, ``(B, n_actions)``, averaged over ``k`` stratified mirrored taus."""
    b = floats.shape[0]
    if taus is None:
        taus = stratified_mirrored_taus(b, k, device=floats.device)
    q = network(img, floats, taus)
    return q.reshape(k, b, -1).mean(dim=0)


def float_normalisation(float_dim: int, mini_race_actions: int | None,
                        mean: Sequence[float] | None = None, std: Sequence[float] | None = None
                        ) -> tuple[list[float], list[float]]:
    """Default per-feature mean/std: 0/1 everywhere, and for the mini-race time slot (index 0)
    mean = std = duration/2 as in the guide."""
    m = list(mean) if mean is not None else [0.0] * float_dim
    s = list(std) if std is not None else [1.0] * float_dim
    if mini_race_actions and mean is None:
        m[0] = mini_race_actions / 2.0
        s[0] = mini_race_actions / 2.0
    return m, s
