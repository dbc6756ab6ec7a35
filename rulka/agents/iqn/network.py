"""The IQN network: image head + float MLP, multiplied by a cosine quantile embedding, then
dueling advantage/value heads. Built from a plain-data ``IQNNetworkSpec`` so a worker can
rebuild exactly the trainer's network from the actor spec.

``nn.decoder.shared_input`` says where the quantile modulation sits (``shared_input``):

* ``post_tau`` (the default; Linesight's and the IQN paper's layout): the heads read
  ``features(s) * phi(tau)``, with ``phi(tau) = iqn_fc(cos(pi i tau))`` as wide as the features
  (``dense_input_dimension``). Everything after the encoder runs once per (state, tau) pair.
* ``pre_tau``: a shared dense layer (``trunk``: Linear + [LayerNorm] + LeakyReLU, width
  ``dense_hidden_dimension``) runs on the features once per state, before the modulation; the
  heads read ``trunk(features(s)) * phi(tau)`` with ``phi`` of width ``dense_hidden_dimension``.
  The trunk runs on the B states of a batch (a layer post_tau would run on B*n rows); the heads
  are as in post_tau, on B*n rows of ``dense_hidden_dimension`` inputs. Transformer heads need
  post_tau (the config refuses the pair, as the guide says). The original Rulka declared the key
  without building pre_tau ("schema-only", its ``docs/source/models/iqn_architecture.rst``);
  this layout is rulka's own reading of it. ``decoder.shared_trunk_freeze`` freezes ``trunk.``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from rulka.nn import DuelingHead, NoisyLinear, cosine_embedding, init_orthogonal
from rulka.nn.blocks import LEAKY_SLOPE, leaky_gain, make_mlp
from rulka.nn.encoder import EncoderSpec, ImageFloatEncoder
from rulka.nn.transformer import optional_transformer_head


@dataclasses.dataclass
class IQNNetworkSpec(EncoderSpec):
    """Everything that fixes the network's shape (plain data, crosses the wire in actor_spec):
    the shared encoder's fields plus the quantile embedding and dueling head."""

    dense_hidden_dimension: int = 1024
    embedding_dimension: int = 64
    head_hidden_dim: int | None = None  # default dense_hidden_dimension // 2
    head_layers: int = 1
    value_hidden_dim: int | None = None  # the value head's MLP; None: as the advantage head's
    value_layers: int | None = None
    # a head's transformer slot (nn.decoder.<head>.transformer dumped); None: that head is an MLP
    advantage_transformer: dict[str, Any] | None = None
    value_transformer: dict[str, Any] | None = None
    use_layer_norm: bool = False
    use_noisy_linear: bool = False
    noisy_sigma0: float = 0.5
    # multi-action blocks: one advantage head per action offset (rulka.agents.iqn.branching)
    n_action_branches: int = 1
    shared_input: str = "post_tau"  # nn.decoder.shared_input: post_tau | pre_tau (see the module docstring)


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


class IQNNetwork(ImageFloatEncoder):
    """Q-quantiles for ``n`` taus per item. ``forward(img, floats, taus)`` with ``img`` uint8
    ``(B, H, W)`` (or None without image), ``floats`` ``(B, F)`` and ``taus`` ``(n*B,)``
    quantile-major returns ``(n*B, n_actions)``."""

    def __init__(self, spec: IQNNetworkSpec) -> None:
        super().__init__()
        self.spec = spec
        self.n_actions = spec.n_actions
        self.embedding_dimension = spec.embedding_dimension
        dense_in = self._build_encoder(spec, layer_norm=spec.use_layer_norm)
        self.dense_input_dimension = dense_in
        self.trunk: nn.Sequential | None = None
        if spec.shared_input == "pre_tau":
            if spec.advantage_transformer is not None or spec.value_transformer is not None:
                raise ValueError("transformer heads need shared_input post_tau")
            # the shared dense layer, once per state before the quantile modulation
            self.trunk = make_mlp(dense_in, spec.dense_hidden_dimension, None, 1, layer_norm=spec.use_layer_norm)
            dense_in = spec.dense_hidden_dimension
        elif spec.shared_input != "post_tau":
            raise ValueError(f"shared_input must be pre_tau or post_tau, got {spec.shared_input!r}")
        self.iqn_fc = nn.Sequential(nn.Linear(spec.embedding_dimension, dense_in), nn.LeakyReLU(LEAKY_SLOPE))
        # cos(.) has variance 1/2: double the weight variance so iqn_fc's output has unit scale
        init_orthogonal(self.iqn_fc[0], math.sqrt(2.0) * leaky_gain())
        head_hidden = spec.head_hidden_dim or spec.dense_hidden_dimension // 2
        self.head = DuelingHead(dense_in, head_hidden, spec.n_actions, spec.head_layers,
                                value_hidden_dim=spec.value_hidden_dim, value_hidden_layers=spec.value_layers,
                                layer_norm=spec.use_layer_norm, noisy=spec.use_noisy_linear,
                                noisy_sigma0=spec.noisy_sigma0,
                                advantage_module=optional_transformer_head(dense_in, spec.n_actions, spec.advantage_transformer),
                                value_module=optional_transformer_head(dense_in, 1, spec.value_transformer))
        if spec.n_action_branches > 1:  # BDQ: the value stream above, one advantage stream per offset
            from rulka.agents.iqn.branching import branched_head

            self.head = branched_head(self.head, dense_in, head_hidden, spec)

    def features(self, img: torch.Tensor | None, floats: torch.Tensor) -> torch.Tensor:
        """Per-item features before the quantile embedding: ``(B, dense_input_dimension)``, or with
        pre_tau the shared trunk's ``(B, dense_hidden_dimension)``."""
        feats = self.encode(img, floats)
        return feats if self.trunk is None else self.trunk(feats)

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
    """Expected Q per action, ``(B, n_actions)`` (``(B, N * n_actions)`` with N action branches,
    branch-major), averaged over ``k`` stratified mirrored taus."""
    b = floats.shape[0]
    if taus is None:
        taus = stratified_mirrored_taus(b, k, device=floats.device)
    q = network(img, floats, taus)
    return q.reshape(k, b, -1).mean(dim=0)


def float_normalisation(float_dim: int, mini_race_actions: int | None,
                        mean: Sequence[float] | None = None, std: Sequence[float] | None = None
                        ) -> tuple[list[float], list[float]]:
    """Per-feature mean/std: the given ones (default 0/1 everywhere), and with mini-races the time
    slot (index 0) always mean = std = duration/2 as in the guide, whatever the given or
    sample-derived values say (workers send 0 there, so a sample estimate is mean 0, std ~0)."""
    m = list(mean) if mean is not None else [0.0] * float_dim
    s = list(std) if std is not None else [1.0] * float_dim
    if mini_race_actions:
        m[0] = mini_race_actions / 2.0
        s[0] = mini_race_actions / 2.0
    return m, s
