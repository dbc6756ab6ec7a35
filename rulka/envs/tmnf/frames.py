"""Frames from the game: ``W x H x 4`` BGRA bytes -> the (H, W) uint8 grayscale image the learner sees."""

from __future__ import annotations

import cv2
import numpy as np


def bgra_to_gray(data: bytes, width: int, height: int, out_size: tuple[int, int] | None = None) -> np.ndarray:
    """Grayscale (``cv2.COLOR_BGRA2GRAY``, as Linesight converts) of a BGRA frame, rows top first,
    resized (area averaging) to ``out_size = (width, height)`` when that differs."""
    if len(data) != width * height * 4:
        raise ValueError(f"frame of {len(data)} bytes is not {width}x{height}x4")
    bgra = np.frombuffer(data, dtype=np.uint8).reshape(height, width, 4)
    gray = cv2.cvtColor(bgra, cv2.COLOR_BGRA2GRAY)
    if out_size is not None and (width, height) != tuple(out_size):
        gray = cv2.resize(gray, tuple(out_size), interpolation=cv2.INTER_AREA)
    return gray
