"""Where a replay memory assembles the learner's batches (``memory.batch_device``).

``host`` (what CPU training uses): the batch is numpy arrays; the agent copies them to its device
inside its update. The two others hand the agent tensors already on its device, built by whoever
calls ``sample`` (on a GPU trainer the prefetch thread, during the previous update):

- ``pinned``: each field is gathered from the host frame ring straight into page-locked memory
  and copied to the device without blocking (the copy overlaps the update the GPU is running);
- ``device``: the image ring is mirrored on the device (new frames are uploaded as they are
  sampled past) and each batch is gathered there by index; the small fields still travel as in
  ``pinned``. It costs the ring's size in GPU memory: ``auto`` picks it only when the largest ring
  the memory schedule can ask for fits in ``memory.device_frames_max_gb``.

The rows and their order are exactly the host path's: the same seed gives the same batch
(tests/test_batch_device.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

BATCH_DEVICES = ("auto", "host", "pinned", "device")


def resolve_batch_device(setting: str, device: str, ring_bytes: int, max_bytes: int) -> str:
    """The mode ``setting`` means for a learner on ``device`` whose image ring may grow to
    ``ring_bytes`` bytes: auto is host on CPU, and on CUDA device when the ring fits in
    ``max_bytes``, else pinned. pinned on a CPU learner is host (nothing to copy)."""
    if setting not in BATCH_DEVICES:
        raise ValueError(f"memory.batch_device must be one of {', '.join(BATCH_DEVICES)}, got {setting!r}")
    on_cpu = str(device).split(":")[0] == "cpu"
    if setting == "auto":
        if on_cpu:
            return "host"
        return "device" if ring_bytes <= max_bytes else "pinned"
    if setting == "pinned" and on_cpu:
        return "host"
    return setting


class DeviceBatcher:
    """Turns a sampled batch's numpy fields into tensors on ``device`` (``mode`` pinned or
    device), gathering frames from a ``FrameStore``'s rings. Used from one thread at a time (the
    memory's sample lock), never while the memory appends (``Memory.sample_while_training``)."""

    def __init__(self, mode: str, device: str) -> None:
        import torch

        if mode not in ("pinned", "device"):
            raise ValueError(f"a DeviceBatcher assembles pinned or device batches, not {mode!r}")
        self.torch = torch
        self.mode = mode
        self.device = torch.device(device)
        # page-locked staging only where there is a GPU to copy to (a CPU build cannot pin)
        self.pin = self.device.type == "cuda"
        self._mirrors: dict[str, _Mirror] = {}
        self.uploaded_frames = 0  # frames copied into the device mirrors so far

    def tensor(self, a: np.ndarray) -> Any:
        """A small host array on the device (through page-locked memory on a GPU)."""
        t = self.torch.from_numpy(np.ascontiguousarray(a))
        if self.pin:
            t = t.pin_memory()
        return t.to(self.device, non_blocking=True)

    def gather(self, frames: Any, name: str, slots: np.ndarray) -> Any:
        """``frames[name][slots]`` as a tensor on the device (``slots``: ring slots)."""
        torch = self.torch
        ring = frames[name]
        if self.mode == "device":
            mirror = self._mirrors.setdefault(name, _Mirror())
            self.uploaded_frames += mirror.sync(torch, ring, frames.written, frames.capacity, self.device)
            return mirror.tensor.index_select(0, torch.from_numpy(slots).to(self.device, non_blocking=True))
        idx = torch.from_numpy(np.ascontiguousarray(slots, dtype=np.int64))
        out = torch.empty((len(slots),) + ring.shape[1:], dtype=torch.from_numpy(ring[:0]).dtype, pin_memory=self.pin)
        torch.index_select(torch.from_numpy(ring), 0, idx, out=out)
        return out.to(self.device, non_blocking=True)

    def mirrored_bytes(self) -> int:
        return sum(m.tensor.numel() * m.tensor.element_size() for m in self._mirrors.values() if m.tensor is not None)


class _Mirror:
    """A device copy of one frame ring, brought up to date before each gather: the frames stored
    since the last sync are uploaded; a ring reallocated (grown, restored) is uploaded whole."""

    def __init__(self) -> None:
        self.tensor: Any = None
        self.ring: np.ndarray | None = None
        self.written = 0

    def sync(self, torch: Any, ring: np.ndarray, written: int, capacity: int, device: Any) -> int:
        new = written - self.written
        if self.tensor is None or ring is not self.ring or len(ring) != capacity or new >= capacity or new < 0:
            self.tensor = None  # free the old copy before the new one is allocated
            self.tensor = torch.from_numpy(ring).to(device)
            self.ring, self.written = ring, written
            return capacity
        if new:
            slots = (self.written + np.arange(new, dtype=np.int64)) % capacity
            rows = torch.from_numpy(ring[slots])
            self.tensor.index_copy_(0, torch.from_numpy(slots).to(device), rows.to(device))
            self.written = written
        return new


def ring_bytes(frame_shapes: Mapping[str, tuple[tuple[int, ...], Any]], frames: int) -> int:
    """Bytes of ``frames`` frames of the given ``{name: (shape, dtype)}`` layout."""
    return sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in frame_shapes.values()) * int(frames)
