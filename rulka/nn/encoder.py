"""The observation encoder shared by the discrete learners (IQN, PPO/GRPO/DPO): an optional image
head (classic CNN, IMPALA CNN, native ViT or a Hugging Face backbone) and a float MLP over
normalised features, concatenated (``fusion_mode: none``) or fused by a trunk (``rulka.nn.fusion``).

``EncoderSpec`` holds the plain-data fields that fix the encoder's shape; each learner's network
spec extends it with its own head fields. ``ImageFloatEncoder`` is a mixin: it puts its modules
and buffers on the network itself, so state-dict names (``img_head.*``,
``float_feature_extractor.*``, ``float_mean``, ``float_std``) are the same as the networks had
before they shared it, and old checkpoints and weights still load.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, TypeVar

import torch
from torch import nn

from rulka.nn.blocks import make_image_head, make_mlp
from rulka.nn.transformer import make_vision_transformer

S = TypeVar("S", bound="EncoderSpec")


@dataclasses.dataclass
class EncoderSpec:
    """Shape of the image + float encoder (plain data, crosses the wire in the actor spec)."""

    float_dim: int
    n_actions: int
    image_height: int = 0  # 0 = no image head (float-only env)
    image_width: int = 0
    float_hidden_dim: int = 256
    use_impala_cnn: bool = False
    impala_model_size: int = 1
    use_adaptive_maxpool: bool = False
    adaptive_maxpool_size: int = 6
    use_spectral_norm: bool = False
    float_mean: list[float] | None = None  # per-feature normalisation; default 0 / 1
    float_std: list[float] | None = None
    # nn.fusion_mode, nn.vis.transformer and nn.encoder as JSON text (rulka.nn.fusion; a string, so
    # the actor spec stays a shallow tree on the wire); None: the plain encoder (CNN or no image)
    topology: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls: type[S], d: dict[str, Any]) -> S:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields: {sorted(unknown)}")
        return cls(**d)

    @property
    def uses_image(self) -> bool:
        return self.image_height > 0 and self.image_width > 0


class ImageFloatEncoder(nn.Module):
    """Mixin for networks over (image, floats); call ``_build_encoder`` in ``__init__``."""

    img_head: nn.Module | None
    fusion: nn.Module | None
    float_mean: torch.Tensor
    float_std: torch.Tensor

    def _build_encoder(self, spec: EncoderSpec, *, layer_norm: bool = False) -> int:
        """Create the image head, float MLP, fusion trunk (``spec.topology``) and normalisation
        buffers; return the feature width."""
        topo = json.loads(spec.topology) if spec.topology else {}
        vt = topo.get("vis_transformer")
        if spec.uses_image and vt is not None:
            self.img_head = make_vision_transformer(spec.image_height, spec.image_width, vt)
            with torch.no_grad():
                img_out = int(self.img_head(torch.zeros(1, 1, spec.image_height, spec.image_width,
                                                        dtype=torch.uint8)).shape[1])
        elif spec.uses_image:
            self.img_head, img_out = make_image_head(
                spec.image_height, spec.image_width, use_impala_cnn=spec.use_impala_cnn,
                impala_model_size=spec.impala_model_size, use_adaptive_maxpool=spec.use_adaptive_maxpool,
                adaptive_maxpool_size=spec.adaptive_maxpool_size, use_spectral_norm=spec.use_spectral_norm)
        else:
            self.img_head, img_out = None, 0
        self.float_feature_extractor = make_mlp(spec.float_dim, spec.float_hidden_dim, None, 2,
                                                layer_norm=layer_norm)
        mean = torch.tensor(spec.float_mean if spec.float_mean is not None else [0.0] * spec.float_dim)
        std = torch.tensor(spec.float_std if spec.float_std is not None else [1.0] * spec.float_dim)
        if mean.shape != (spec.float_dim,) or std.shape != (spec.float_dim,):
            raise ValueError("float_mean/float_std must have float_dim entries")
        self.register_buffer("float_mean", mean.float())
        self.register_buffer("float_std", std.float().clamp(min=1e-6))
        self.fusion = None
        if topo.get("fusion_mode", "none") != "none":
            from rulka.nn.fusion import Fusion

            hw = (spec.image_height, spec.image_width) if spec.uses_image else None
            self.fusion = Fusion(topo, self.img_head, hw, spec.float_dim, spec.float_hidden_dim)
            return self.fusion.out_dim
        return img_out + spec.float_hidden_dim

    @property
    def plain_encoder(self) -> bool:
        """True for the float MLP alone (no image head, no fusion trunk): what numpy actors run."""
        return self.img_head is None and self.fusion is None

    def encode(self, img: torch.Tensor | None, floats: torch.Tensor) -> torch.Tensor:
        """``(B, feature width)``: image features (if any) then float features."""
        x = (floats.float() - self.float_mean) / self.float_std
        f = self.float_feature_extractor(x)
        if self.fusion is not None:
            return self.fusion(self.img_head, img, x, f)
        if self.img_head is None:
            return f
        if img is None:
            raise ValueError("this network needs an image input")
        return torch.cat([self.img_head(img), f], dim=1)
