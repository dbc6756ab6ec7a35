"""Level-0 visual pretraining (``rulka pretrain visual``): the image stem the config builds
(``nn.vis``: CNN or native ViT, the same parameter names as in the RL network) is trained on
recorded frames without labels, as the encoder of an autoencoder. A linear decoder maps its
features to the frame average-pooled by ``pool`` (normalised like the stem's input,
``(x - 128) / 128``); the loss is the mean squared error. Only the stem (``img_head.*``) is
saved: the decoder exists for this objective alone."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from rulka.errors import UserError
from rulka.pretrain.bc import build_network, fit

log = logging.getLogger(__name__)


@dataclass
class VisualResult:
    stem: dict[str, torch.Tensor]  # img_head.* tensors, named as in the RL network
    kind: str
    spec: dict[str, Any]
    first_loss: float
    last_loss: float


def pooled_target(img: torch.Tensor, pool: int) -> torch.Tensor:
    x = (img.float()[:, None] - 128.0) / 128.0
    return nn.functional.avg_pool2d(x, pool).flatten(1)


def train_visual(cfg: Any, frames: np.ndarray, *, updates: int = 1000, batch_size: int = 64, lr: float = 1e-3,
                 pool: int = 4, seed: int = 0, log_every: int = 250) -> VisualResult:
    """Train the stem on ``frames`` (uint8 ``(N, H, W)``); see the module docstring."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net, kind, spec = build_network(cfg)
    if net.img_head is None:
        raise UserError("the config's network has no image stem (nn.vis.no_image is true)")
    if frames.ndim != 3 or frames.shape[1:] != (spec.image_height, spec.image_width):
        raise UserError(f"frames of shape {frames.shape[1:]} do not fit the stem's "
                        f"{(spec.image_height, spec.image_width)} (nn.vis.image_size)")
    stem = net.img_head
    frames = np.ascontiguousarray(frames, dtype=np.uint8).copy()
    probe = torch.from_numpy(frames[:1])
    with torch.no_grad():
        width, target_width = stem(probe).shape[1], pooled_target(probe, pool).shape[1]
    decoder = nn.Linear(width, target_width)
    opt = torch.optim.Adam([*stem.parameters(), *decoder.parameters()], lr=lr)
    def batch_loss() -> torch.Tensor:
        img = torch.from_numpy(frames[rng.integers(0, len(frames), size=min(batch_size, len(frames)))])
        return nn.functional.mse_loss(decoder(stem(img)), pooled_target(img, pool))

    first, last = fit(opt, updates, batch_loss, label="visual", log_every=log_every, digits=5)
    tensors = {f"img_head.{k}": v for k, v in stem.state_dict().items()}
    return VisualResult(tensors, kind, spec.to_dict(), first, last)
