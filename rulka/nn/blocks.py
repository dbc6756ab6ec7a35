"""Building blocks for value and policy networks.

Images enter as uint8 ``(B, H, W)`` or ``(B, C, H, W)`` and are normalised inside the head
(``(x - 128) / 128``), so callers never convert frames to float themselves.
"""

from __future__ import annotations

import math

import torch
from torch import nn

LEAKY_SLOPE = 1e-2


def leaky_gain() -> float:
    return nn.init.calculate_gain("leaky_relu", LEAKY_SLOPE)


def init_orthogonal(module: nn.Module, gain: float = 1.0) -> None:
    """Orthogonal weights with ``gain`` and zero bias for a Linear or Conv layer."""
    weight = getattr(module, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() >= 2:
        nn.init.orthogonal_(weight, gain)
    bias = getattr(module, "bias", None)
    if isinstance(bias, torch.Tensor):
        nn.init.zeros_(bias)


def _to_float_image(img: torch.Tensor) -> torch.Tensor:
    if img.dim() == 3:  # (B, H, W) single grey frame
        img = img.unsqueeze(1)
    if img.dtype == torch.uint8:
        return (img.float() - 128.0) / 128.0
    return img.float()


class ClassicConvHead(nn.Module):
    """The classic 4-conv stack (16-32-64-32 channels, kernels 4-4-3-3, strides 2-2-2-1)."""

    def __init__(self, in_channels: int = 1, spectral_norm: bool = False,
                 adaptive_maxpool_size: int | None = None) -> None:
        super().__init__()
        chans = [in_channels, 16, 32, 64, 32]
        specs = [(4, 2), (4, 2), (3, 2), (3, 1)]
        layers: list[nn.Module] = []
        for i, (k, s) in enumerate(specs):
            conv = nn.Conv2d(chans[i], chans[i + 1], kernel_size=k, stride=s)
            init_orthogonal(conv, leaky_gain())
            if spectral_norm:
                conv = nn.utils.parametrizations.spectral_norm(conv)
            layers += [conv, nn.LeakyReLU(LEAKY_SLOPE)]
        if adaptive_maxpool_size:
            layers.append(nn.AdaptiveMaxPool2d(adaptive_maxpool_size))
        layers.append(nn.Flatten())
        self.body = nn.Sequential(*layers)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.body(_to_float_image(img))


class _ResBlock(nn.Module):
    def __init__(self, channels: int, spectral_norm: bool) -> None:
        super().__init__()
        convs = []
        for _ in range(2):
            conv = nn.Conv2d(channels, channels, 3, padding=1)
            init_orthogonal(conv, math.sqrt(2.0))
            convs.append(nn.utils.parametrizations.spectral_norm(conv) if spectral_norm else conv)
        self.conv0, self.conv1 = convs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ImpalaCNN(nn.Module):
    """IMPALA CNN (three conv + maxpool + 2 residual-block stages), channels scaled by
    ``model_size``; optional adaptive max-pool to a fixed spatial size before flattening."""

    def __init__(self, in_channels: int = 1, model_size: int = 1, spectral_norm: bool = False,
                 adaptive_maxpool_size: int | None = None) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = in_channels
        for c in (16 * model_size, 32 * model_size, 32 * model_size):
            conv = nn.Conv2d(c_in, c, 3, padding=1)
            init_orthogonal(conv, math.sqrt(2.0))
            layers += [conv, nn.MaxPool2d(3, stride=2, padding=1),
                       _ResBlock(c, spectral_norm), _ResBlock(c, spectral_norm)]
            c_in = c
        layers.append(nn.ReLU())
        if adaptive_maxpool_size:
            layers.append(nn.AdaptiveMaxPool2d(adaptive_maxpool_size))
        layers.append(nn.Flatten())
        self.body = nn.Sequential(*layers)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.body(_to_float_image(img))


def make_image_head(height: int, width: int, *, in_channels: int = 1, use_impala_cnn: bool = False,
                    impala_model_size: int = 1, use_adaptive_maxpool: bool = False,
                    adaptive_maxpool_size: int = 6, use_spectral_norm: bool = False
                    ) -> tuple[nn.Module, int]:
    """Build the image head named by ``nn.vis.cnn`` options; return (module, output size)."""
    pool = adaptive_maxpool_size if use_adaptive_maxpool else None
    if use_impala_cnn:
        head: nn.Module = ImpalaCNN(in_channels, impala_model_size, use_spectral_norm, pool)
    else:
        head = ClassicConvHead(in_channels, use_spectral_norm, pool)
    with torch.no_grad():
        out = head(torch.zeros(1, in_channels, height, width, dtype=torch.uint8))
    return head, int(out.shape[1])


class NoisyLinear(nn.Module):
    """Factorised Gaussian noisy linear layer (NoisyNet, Fortunato et al. 2018). Noise is redrawn
    by ``reset_noise``. In training mode the layer uses its sampled weights; in eval mode the mean
    weights, unless ``act_with_noise`` is set (an exploring actor: eval mode for everything else,
    the current noise sample here)."""

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 / math.sqrt(in_features)))
        self.bias_mu = nn.Parameter(torch.zeros(out_features))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 / math.sqrt(in_features)))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)
        bound = 1.0 / math.sqrt(in_features)
        nn.init.uniform_(self.weight_mu, -bound, bound)
        self.act_with_noise = False
        self.reset_noise()

    @property
    def weight(self) -> torch.Tensor:  # lets init_orthogonal reach the mean weights
        return self.weight_mu

    @property
    def bias(self) -> torch.Tensor:
        return self.bias_mu

    @staticmethod
    def _f(x: torch.Tensor) -> torch.Tensor:
        return x.sign() * x.abs().sqrt()

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw new factorised noise ``f(eps_in)``, ``f(eps_out)``, ``f(x) = sign(x) sqrt(|x|)``
        (from ``generator``, e.g. an actor's own, else torch's global generator)."""
        self.eps_in.copy_(self._f(torch.randn(self.in_features, generator=generator)))
        self.eps_out.copy_(self._f(torch.randn(self.out_features, generator=generator)))

    def sampled_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight, bias) of the current noise sample: ``mu + sigma * noise``."""
        w = self.weight_mu + self.weight_sigma * torch.outer(self.eps_out, self.eps_in)
        return w, self.bias_mu + self.bias_sigma * self.eps_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training or self.act_with_noise):
            return nn.functional.linear(x, self.weight_mu, self.bias_mu)
        return nn.functional.linear(x, *self.sampled_weights())


def _linear(i: int, o: int, noisy: bool, sigma0: float) -> nn.Module:
    return NoisyLinear(i, o, sigma0) if noisy else nn.Linear(i, o)


def make_mlp(in_dim: int, hidden_dim: int, out_dim: int | None, n_hidden_layers: int = 1, *,
             layer_norm: bool = False, noisy: bool = False, noisy_sigma0: float = 0.5,
             last_gain: float = 1.0) -> nn.Sequential:
    """``n_hidden_layers`` x (Linear [+ LayerNorm] + LeakyReLU), then a Linear to ``out_dim``
    (omitted when ``out_dim`` is None). Orthogonal init with the LeakyReLU gain."""
    layers: list[nn.Module] = []
    d = in_dim
    for _ in range(n_hidden_layers):
        lin = _linear(d, hidden_dim, noisy, noisy_sigma0)
        init_orthogonal(lin, leaky_gain())
        layers.append(lin)
        if layer_norm:
            layers.append(nn.LayerNorm(hidden_dim))
        layers.append(nn.LeakyReLU(LEAKY_SLOPE))
        d = hidden_dim
    if out_dim is not None:
        lin = _linear(d, out_dim, noisy, noisy_sigma0)
        init_orthogonal(lin, last_gain)
        layers.append(lin)
    return nn.Sequential(*layers)


def cosine_embedding(tau: torch.Tensor, dim: int) -> torch.Tensor:
    """IQN quantile embedding: ``cos(pi * i * tau)`` for i = 1..dim; ``tau`` (N,) or (N, 1) -> (N, dim)."""
    i = torch.arange(1, dim + 1, device=tau.device, dtype=torch.float32)
    return torch.cos(math.pi * i * tau.reshape(-1, 1).float())


class DuelingHead(nn.Module):
    """Q = V + A - mean_a(A), from separate advantage and value MLPs. The value MLP has its own
    width and depth when ``value_hidden_dim`` / ``value_hidden_layers`` are given (else the
    advantage MLP's)."""

    def __init__(self, in_dim: int, hidden_dim: int, n_actions: int, n_hidden_layers: int = 1, *,
                 value_hidden_dim: int | None = None, value_hidden_layers: int | None = None,
                 layer_norm: bool = False, noisy: bool = False, noisy_sigma0: float = 0.5,
                 advantage_module: nn.Module | None = None, value_module: nn.Module | None = None) -> None:
        super().__init__()
        kw = dict(layer_norm=layer_norm, noisy=noisy, noisy_sigma0=noisy_sigma0)
        # a given module (e.g. rulka.nn.transformer.TransformerHead) replaces that head's MLP
        self.advantage = advantage_module or make_mlp(in_dim, hidden_dim, n_actions, n_hidden_layers, **kw)
        self.value = value_module or make_mlp(in_dim, value_hidden_dim or hidden_dim, 1,
                                              value_hidden_layers or n_hidden_layers, **kw)

    @staticmethod
    def combine(value: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
        return value + advantage - advantage.mean(dim=-1, keepdim=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.combine(self.value(x), self.advantage(x))


def normalise_name(name: str) -> str:
    """A parameter name without torch.compile's ``_orig_mod.`` segments."""
    return ".".join(part for part in name.split(".") if part != "_orig_mod")
