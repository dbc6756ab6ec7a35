"""Native transformer stacks (``torch.nn.TransformerEncoder``) and the native ViT stem.

``make_stack`` builds a pre-norm encoder stack from a transformer slot's settings (``d_model``,
``n_layers``, ``n_heads``, ``ff_mult``, ``dropout``); zero layers is the identity. ``VisionViT`` is
the vision stem ``nn.vis.transformer`` names when ``use_hf_backbone`` is false: non-overlapping
``patch_size`` patches embedded by a strided convolution, a learned summary token and learned
positions, then ``n_layers`` encoder layers and a final LayerNorm. Images enter as uint8 and are
normalised like the CNN heads' (``(x - 128) / 128``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from rulka.nn.blocks import _to_float_image


def make_stack(d_model: int, n_layers: int, n_heads: int, ff_mult: int = 4, dropout: float = 0.0) -> nn.Module:
    """A ``torch.nn.TransformerEncoder`` of ``n_layers`` pre-norm layers (GELU feed-forward of
    width ``ff_mult * d_model``), batch first; ``nn.Identity`` when ``n_layers`` is 0."""
    if n_layers <= 0:
        return nn.Identity()
    if d_model % n_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
    layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=ff_mult * d_model, dropout=dropout,
                                       activation="gelu", batch_first=True, norm_first=True)
    return nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)


def stack_from(slot: Mapping[str, Any]) -> nn.Module:
    """``make_stack`` from a slot dict (a ``TransformersConfig`` / ``TransformerStackConfig`` dump)."""
    return make_stack(int(slot["d_model"]), int(slot["n_layers"]), int(slot["n_heads"]),
                      int(slot.get("ff_mult", 4)), float(slot.get("dropout", 0.0)))


class VisionViT(nn.Module):
    """Native ViT stem. ``embed(img)`` -> ``(B, 1 + N, d_model)`` (summary token, then the ``N``
    patch tokens, positions added); ``stack`` runs the layers; ``forward(img)`` -> the summary
    vector ``(B, d_model)`` after the layers and the final norm; ``tokens(img)`` -> all tokens."""

    def __init__(self, height: int, width: int, slot: Mapping[str, Any], in_channels: int = 1) -> None:
        super().__init__()
        p, d = int(slot["patch_size"]), int(slot["d_model"])
        if height < p or width < p:
            raise ValueError(f"vis.transformer.patch_size ({p}) is larger than the image ({height}x{width})")
        self.d_model = d
        self.n_patches = (height // p) * (width // p)
        self.patch = nn.Conv2d(in_channels, d, kernel_size=p, stride=p)
        self.summary = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, 1 + self.n_patches, d) * 0.02)
        self.stack = stack_from(slot)
        self.norm = nn.LayerNorm(d)

    def embed(self, img: torch.Tensor) -> torch.Tensor:
        x = self.patch(_to_float_image(img)).flatten(2).transpose(1, 2)  # (B, N, d)
        x = torch.cat([self.summary.expand(x.shape[0], -1, -1), x], dim=1)
        return x + self.pos

    def tokens(self, img: torch.Tensor) -> torch.Tensor:
        return self.norm(self.stack(self.embed(img)))

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.tokens(img)[:, 0]


def make_vision_transformer(height: int, width: int, slot: Mapping[str, Any]) -> nn.Module:
    """The ``nn.vis.transformer`` stem: the native ViT, or with ``use_hf_backbone`` a Hugging Face
    vision backbone (``rulka.nn.hf``, extra ``rulka[hf]``)."""
    if slot.get("use_hf_backbone"):
        from rulka.nn.hf import HfVisionBackbone

        return HfVisionBackbone(height, width, slot)
    return VisionViT(height, width, slot)


class TransformerHead(nn.Module):
    """A decoder head (``nn.decoder.advantage.transformer`` / ``value.transformer``) over one
    feature vector per row: the vector is zero-padded to a multiple of ``d_model`` and cut into
    ``ceil(in_dim / d_model)`` tokens of ``d_model`` features, each token gets a learned position,
    the ``n_layers`` pre-norm stack mixes them, and the LayerNorm'd mean token goes through a
    linear layer to ``out_dim`` outputs. ``(N, in_dim) -> (N, out_dim)``.
    """

    def __init__(self, in_dim: int, out_dim: int, slot: Mapping[str, Any]) -> None:
        super().__init__()
        self.d_model = int(slot["d_model"])
        self.in_dim = int(in_dim)
        self.n_tokens = -(-self.in_dim // self.d_model)
        self.pos = nn.Parameter(torch.zeros(1, self.n_tokens, self.d_model))
        nn.init.normal_(self.pos, std=0.02)
        self.stack = stack_from(slot)
        self.norm = nn.LayerNorm(self.d_model)
        self.out = nn.Linear(self.d_model, out_dim)  # registered last: the reset's "last layer"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = self.n_tokens * self.d_model - self.in_dim
        if pad:
            x = nn.functional.pad(x, (0, pad))
        tokens = x.reshape(x.shape[0], self.n_tokens, self.d_model) + self.pos
        return self.out(self.norm(self.stack(tokens).mean(dim=1)))


def optional_transformer_head(in_dim: int, out_dim: int, slot: dict[str, Any] | None) -> nn.Module | None:
    """A ``TransformerHead`` for a decoder slot's ``transformer`` entry, None when the slot has none."""
    return None if slot is None else TransformerHead(in_dim, out_dim, slot)
