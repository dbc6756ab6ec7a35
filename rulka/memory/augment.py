"""Random-crop augmentation of replayed images (``performance.apply_randomcrop_augmentation``).

Each image of a sampled batch is padded by ``n`` pixels on every side, repeating its edge pixels,
and an ``H x W`` window is cut from it at an offset drawn uniformly in ``0 .. 2n`` on each axis: the
image moves by up to ``n`` pixels in each direction, and the strip it uncovers repeats the edge.
An item's state and next state get the same shift (the target is computed on the same view as the
online estimate); each item of the batch gets its own. This runs on the learner's sampled batch
only: workers and the stored frames never see it, and trajectory batches (PPO, GRPO) are left as
they are.

Linesight pads with ``padding_mode="edge"`` and crops the original size back the same way; its code
draws one offset per batch, where its comment says one per item: here each item draws its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


def shift_images(images: np.ndarray, dy: np.ndarray, dx: np.ndarray) -> np.ndarray:
    """``images`` (B, ..., H, W) with item ``b`` moved by ``(dy[b], dx[b])`` pixels, edge-padded.

    ``out[b, ..., y, x] == images[b, ..., clip(y + dy[b]), clip(x + dx[b])]``: a positive ``dy``
    shows the content lower in the image (it moves up). This equals padding by ``n`` with the edge
    and cropping at offset ``(dy + n, dx + n)`` whenever ``|dy|, |dx| <= n``.
    """
    images = np.asarray(images)
    if images.ndim < 3:
        raise ValueError(f"images need shape (batch, ..., H, W), got {images.shape}")
    b, h, w = images.shape[0], images.shape[-2], images.shape[-1]
    dy = np.asarray(dy, dtype=np.int64).reshape(b)
    dx = np.asarray(dx, dtype=np.int64).reshape(b)
    lead = (1,) * (images.ndim - 3)
    rows = np.clip(np.arange(h)[None, :] + dy[:, None], 0, h - 1).reshape(b, *lead, h, 1)
    cols = np.clip(np.arange(w)[None, :] + dx[:, None], 0, w - 1).reshape(b, *lead, 1, w)
    out = np.take_along_axis(images, rows, axis=-2)
    return np.take_along_axis(out, cols, axis=-1)


class RandomCrop:
    """Pad-and-crop of a sampled batch's ``state_img`` and ``next_img`` by up to ``n`` pixels.

    ``RandomCrop(n, seed)(batch)`` returns a copy of ``batch`` (a dataclass such as
    :class:`rulka.agents.iqn.replay.ReplayBatch`) with both image arrays shifted; a batch without
    images comes back unchanged. ``n = 0`` is the identity.
    """

    def __init__(self, n_pixels: int, seed: int | None = None) -> None:
        if n_pixels < 0:
            raise ValueError(f"n_pixels_to_crop_on_each_side must be >= 0, got {n_pixels}")
        self.n = int(n_pixels)
        self.rng = np.random.default_rng(seed)

    def offsets(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-item shifts (dy, dx), each uniform in ``-n .. n`` (crop offset minus ``n``)."""
        dy = self.rng.integers(0, 2 * self.n + 1, size=batch_size) - self.n
        dx = self.rng.integers(0, 2 * self.n + 1, size=batch_size) - self.n
        return dy, dx

    def __call__(self, batch: Any) -> Any:
        state_img = getattr(batch, "state_img", None)
        if state_img is None or self.n == 0 or not dataclasses.is_dataclass(batch):
            return batch
        next_img = getattr(batch, "next_img", None)
        dy, dx = self.offsets(len(state_img))
        changes = {"state_img": shift_images(state_img, dy, dx)}
        if next_img is not None:
            changes["next_img"] = shift_images(next_img, dy, dx)
        return dataclasses.replace(batch, **changes)

    @classmethod
    def for_config(cls, cfg: Any) -> RandomCrop | None:
        """The augmentation ``performance`` asks for, or None when it is off."""
        perf = cfg.performance
        if not perf.apply_randomcrop_augmentation:
            return None
        return cls(perf.n_pixels_to_crop_on_each_side, cfg.training.seed)
