"""The multimodal fusion trunks of ``nn.fusion_mode`` (the guide's topology catalogue).

A network's encoder (``rulka.nn.encoder.ImageFloatEncoder``) has an image stem ``img_head``
(``nn.vis.cnn``: classic or IMPALA CNN; ``nn.vis.transformer``: the native ViT, or a Hugging Face
backbone) and a float MLP ``float_feature_extractor`` (``nn.float``). With ``fusion_mode: none``
their outputs are concatenated, as always. Any other mode turns them into a token sequence of
width ``D = nn.encoder.transformer.d_model`` and runs it through a fusion trunk, the submodule
``fusion`` (so ``nn.encoder.freeze`` is the prefix ``fusion.``):

* ``vision_transformer``: the ViT's summary vector and the float MLP's output, one token each
  (a CNN stem's flattened features stand in for the summary). Default trunk: ``linear``.
* ``post_concat``: ``nn.encoder.post_concat_layout``

  - ``fused_vector``: ``[vision features, float features]`` projected to
    ``transformer.post_concat_seq_len`` tokens;
  - ``token_sequence``: the vision tokens (the ViT's patch tokens when
    ``vis.transformer.fusion_tokens: patch_tokens``, else one summary token) followed by the float
    tokens: ``float_token_layout: dense`` gives one token from the raw normalised floats
    (``float_token_input: raw``) or from the float MLP (``mlp_hidden``); ``per_feature`` gives one
    token per float feature, ``x_i * w_i + b_i``.

  Default trunk: ``native_transformer``.
* ``unified``: one sequence of image tokens and ``transformer.unified_float_tokens`` float tokens
  (from the float MLP). With the ViT stem the image tokens are its summary and patch embeddings
  and the ViT's own layers already run over the whole joint sequence (hence the guide's rule that
  both ``d_model`` match); with a CNN stem the tokens are the cells of its last feature map.
  Default trunk: ``native_transformer``.

Learned positions are added to the sequence, then the trunk ``nn.encoder.fusion_encoder``:
``linear`` (flatten, Linear to D, LeakyReLU), ``native_transformer`` (``torch.nn.TransformerEncoder``
of ``nn.encoder.transformer``, final LayerNorm, mean over tokens), ``mlp`` (flatten, the
``fusion_mlp`` MLP), ``cnn`` (``fusion_cnn``'s 1-D convolutions along the tokens, mean over
tokens) or ``hf_embedding`` (a Hugging Face encoder fed ``inputs_embeds``; ``rulka[hf]``).

Everything that fixes the shapes is the ``topology`` (JSON text) that
:func:`topology_from_config` writes into the network spec, so a worker rebuilds the same network
from the actor spec it receives with the weights. It and the other config arithmetic
(:func:`inert_keys`) live in the torch-free ``rulka.nn.topology``, re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from rulka.nn.blocks import LEAKY_SLOPE, _to_float_image, make_mlp
from rulka.nn.topology import (  # noqa: F401  (the torch-free half, re-exported for its callers)
    FUSION_ENCODERS,
    default_fusion_encoder,
    float_hidden_dim,
    inert_keys,
    topology_from_config,
)
from rulka.nn.transformer import VisionViT, stack_from


def cnn_feature_map(head: nn.Module, img: torch.Tensor) -> torch.Tensor:
    """A CNN stem's last feature map as tokens ``(B, cells, channels)`` (its body without Flatten)."""
    x = head.body[:-1](_to_float_image(img))
    return x.flatten(2).transpose(1, 2)


class _Flatten(nn.Module):
    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.body(tokens.flatten(1))


class _Transformer(nn.Module):
    def __init__(self, slot: Mapping[str, Any]) -> None:
        super().__init__()
        self.stack = stack_from(slot)
        self.norm = nn.LayerNorm(int(slot["d_model"]))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.norm(self.stack(tokens)).mean(dim=1)


class _Conv1d(nn.Module):
    def __init__(self, d: int, channels: list[int], kernel: int, dropout: float) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = d
        for c in channels:
            layers += [nn.Conv1d(c_in, c, kernel, padding=kernel // 2), nn.LeakyReLU(LEAKY_SLOPE), nn.Dropout(dropout)]
            c_in = c
        self.body = nn.Sequential(*layers)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.body(tokens.transpose(1, 2)).mean(dim=2)


def make_trunk(kind: str, n_tokens: int, encoder: Mapping[str, Any]) -> tuple[nn.Module, int]:
    """The fusion trunk ``(B, T, D) -> (B, out)`` and its output width."""
    slot = encoder["transformer"]
    d = int(slot["d_model"])
    if kind == "linear":
        return _Flatten(nn.Sequential(nn.Linear(n_tokens * d, d), nn.LeakyReLU(LEAKY_SLOPE))), d
    if kind == "native_transformer":
        return _Transformer(slot), d
    if kind == "mlp":
        m = encoder["fusion_mlp"]
        body = nn.Sequential(make_mlp(n_tokens * d, int(m["hidden_dim"]), None, int(m["n_layers"])),
                             nn.Dropout(float(m["dropout"])))
        return _Flatten(body), int(m["hidden_dim"])
    if kind == "cnn":
        c = encoder["fusion_cnn"]
        channels = [int(x) for x in c["hidden_channels"]]
        if not channels:
            raise ValueError("nn.encoder.fusion_cnn.hidden_channels needs at least one layer")
        return _Conv1d(d, channels, int(c["kernel_size"]), float(c["dropout"])), channels[-1]
    if kind == "hf_embedding":
        from rulka.nn.hf import HfEmbeddingTrunk

        trunk = HfEmbeddingTrunk(encoder)
        return trunk, trunk.out_dim
    raise ValueError(f"unknown nn.encoder.fusion_encoder {kind!r} (one of {', '.join(FUSION_ENCODERS)})")


class Fusion(nn.Module):
    """Tokenisers, learned positions and trunk of one fusion mode (see the module docstring).
    ``forward(img_head, img, floats_norm, float_hidden)`` -> ``(B, out_dim)``."""

    def __init__(self, topology: Mapping[str, Any], img_head: nn.Module | None, image_hw: tuple[int, int] | None,
                 float_dim: int, float_hidden: int) -> None:
        super().__init__()
        mode = topology["fusion_mode"]
        enc = topology["encoder"]
        vt = topology.get("vis_transformer")
        d = int(enc["transformer"]["d_model"])
        self.mode, self.d = mode, d
        self.layout = enc["post_concat_layout"]
        self.float_input = enc["float_token_input"]
        self.float_layout = enc["float_token_layout"]
        self.vit = isinstance(img_head, VisionViT)
        self.patch_tokens = bool(self.vit and vt and vt.get("fusion_tokens") == "patch_tokens")
        self.unified_k = int(enc["transformer"]["unified_float_tokens"])
        dummy = None
        vis_out = 0
        if img_head is not None:
            if image_hw is None:
                raise ValueError("an image stem needs the image size")
            dummy = torch.zeros(1, 1, *image_hw, dtype=torch.uint8)
            with torch.no_grad():
                vis_out = int(img_head(dummy).shape[1])
        vis_d = getattr(img_head, "d_model", vis_out)
        if mode == "vision_transformer":
            self.vis_proj = nn.Linear(vis_d if self.vit else vis_out, d) if img_head is not None else None
            self.float_proj = nn.Linear(float_hidden, d)
        elif mode == "post_concat":
            if self.layout == "fused_vector":
                self.seq_len = int(enc["transformer"]["post_concat_seq_len"])
                self.fused_proj = nn.Linear(vis_out + float_hidden, self.seq_len * d)
            else:
                if img_head is not None:
                    self.vis_proj = nn.Linear(vis_d if self.patch_tokens else vis_out, d)
                if self.float_layout == "per_feature":
                    self.feature_w = nn.Parameter(torch.randn(float_dim, d) * 0.02)
                    self.feature_b = nn.Parameter(torch.zeros(float_dim, d))
                else:
                    self.float_proj = nn.Linear(float_dim if self.float_input == "raw" else float_hidden, d)
        elif mode == "unified":
            if img_head is not None and not self.vit:
                with torch.no_grad():
                    channels = cnn_feature_map(img_head, dummy).shape[2]
                self.map_proj = nn.Linear(int(channels), d)
            elif self.vit and vis_d != d:
                raise ValueError(f"fusion_mode unified needs vis.transformer.d_model ({vis_d}) == "
                                 f"encoder.transformer.d_model ({d})")
            self.float_proj = nn.Linear(float_hidden, self.unified_k * d)
        else:
            raise ValueError(f"unknown nn.fusion_mode {mode!r}")
        with torch.no_grad():
            n_tokens = self.tokens(img_head, dummy, torch.zeros(1, float_dim), torch.zeros(1, float_hidden)).shape[1]
        self.n_tokens = int(n_tokens)
        self.pos = nn.Parameter(torch.randn(1, self.n_tokens, d) * 0.02)
        self.trunk, self.out_dim = make_trunk(enc["fusion_encoder"], self.n_tokens, enc)

    def tokens(self, img_head: nn.Module | None, img: torch.Tensor | None, x: torch.Tensor,
               f: torch.Tensor) -> torch.Tensor:
        """The token sequence ``(B, T, D)`` before positions and trunk."""
        b = x.shape[0]
        if img_head is not None and img is None:
            raise ValueError("this network needs an image input")
        if self.mode == "vision_transformer":
            toks = [self.float_proj(f)[:, None]]
            if img_head is not None:
                toks.insert(0, self.vis_proj(img_head(img))[:, None])
            return torch.cat(toks, dim=1)
        if self.mode == "post_concat":
            if self.layout == "fused_vector":
                v = f if img_head is None else torch.cat([img_head(img), f], dim=1)
                return self.fused_proj(v).reshape(b, self.seq_len, self.d)
            toks = []
            if img_head is not None:
                vis = img_head.tokens(img)[:, 1:] if self.patch_tokens else img_head(img)[:, None]
                toks.append(self.vis_proj(vis))
            if self.float_layout == "per_feature":
                toks.append(x[:, :, None] * self.feature_w + self.feature_b)
            else:
                toks.append(self.float_proj(x if self.float_input == "raw" else f)[:, None])
            return torch.cat(toks, dim=1)
        # unified
        ftoks = self.float_proj(f).reshape(b, self.unified_k, self.d)
        if img_head is None:
            return ftoks
        if self.vit:
            return img_head.norm(img_head.stack(torch.cat([img_head.embed(img), ftoks], dim=1)))
        return torch.cat([self.map_proj(cnn_feature_map(img_head, img)), ftoks], dim=1)

    def forward(self, img_head: nn.Module | None, img: torch.Tensor | None, x: torch.Tensor,
                f: torch.Tensor) -> torch.Tensor:
        return self.trunk(self.tokens(img_head, img, x, f) + self.pos)
