"""``FrameStore``: every observation a worker sends, stored once, addressed by serial number.

A replay memory keeps its transitions as a few integers (the serial numbers of the state and
next-state frames) plus whatever per-step values it needs; the frames themselves (images,
float vectors, shaping potentials) live here, in one ring per observation field. Serial
numbers only grow; a serial older than ``written - capacity`` has been overwritten
(``valid`` tells). The ring grows on demand and keeps its newest frames when it does.

Used by the IQN mini-race memory (``rulka.agents.iqn.replay``) and the uniform replay
(``rulka.memory.uniform``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rulka.errors import BadInput
from rulka.memory.files import ChunkStore


class FrameStore:
    """Rings of frames, one per field (``{"float": (F,) float32, "img": (H, W) uint8, ...}``).

    The layout (field names, per-frame shapes and dtypes) is fixed by the first ``store`` call;
    a later call with other fields or shapes raises ``BadInput``.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, int(capacity))
        self.written = 0  # frames ever stored; the next frame gets this serial
        self.fields: dict[str, np.ndarray] = {}
        # the last put_chunks (or chunked restore): folder, capacity, serial count, entries
        self._chunked: dict[str, Any] | None = None

    def __contains__(self, name: str) -> bool:
        return name in self.fields

    def __getitem__(self, name: str) -> np.ndarray:
        """The raw ring of ``name`` (index it with ``slots(serials)``)."""
        return self.fields[name]

    @property
    def allocated(self) -> bool:
        return bool(self.fields)

    def layout(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Field name -> (per-frame shape, dtype name)."""
        return {k: (v.shape[1:], v.dtype.name) for k, v in self.fields.items()}

    def check(self, frames: Mapping[str, np.ndarray]) -> None:
        """Raise ``BadInput`` unless ``frames`` (each ``(n, ...)``) match the stored layout
        (anything matches before the first ``store``)."""
        lengths = {len(v) for v in frames.values()}
        if len(lengths) > 1:
            raise BadInput("segment", "observation arrays have different lengths")
        if not self.fields:
            return
        if set(frames) != set(self.fields):
            raise BadInput("segment", f"observation fields {sorted(frames)} differ from the stored {sorted(self.fields)}")
        for k, v in frames.items():
            ring = self.fields[k]
            if v.shape[1:] != ring.shape[1:] or np.asarray(v).dtype != ring.dtype:
                raise BadInput("segment", f"observation '{k}' {v.dtype}{list(v.shape[1:])} differs from the "
                                          f"stored {ring.dtype}{list(ring.shape[1:])}")

    def store(self, frames: Mapping[str, np.ndarray]) -> np.ndarray:
        """Append ``n`` frames (every field ``(n, ...)``); return their serial numbers."""
        self.check(frames)
        if not self.fields:
            self.fields = {k: np.zeros((self.capacity,) + np.asarray(v).shape[1:], np.asarray(v).dtype)
                           for k, v in frames.items()}
        n = len(next(iter(frames.values()))) if frames else 0
        serials = self.written + np.arange(n, dtype=np.int64)
        slots = serials % self.capacity
        for k, v in frames.items():
            self.fields[k][slots] = v
        self.written += n
        return serials

    def slots(self, serials: np.ndarray) -> np.ndarray:
        return np.asarray(serials, dtype=np.int64) % self.capacity

    def valid(self, serials: np.ndarray) -> np.ndarray:
        """Whether each serial still holds its frame (not overwritten)."""
        return np.asarray(serials) >= self.written - self.capacity

    def get(self, name: str, serials: np.ndarray) -> np.ndarray:
        """A copy of field ``name`` at ``serials``."""
        return self.fields[name][self.slots(serials)]

    def grow(self, capacity: int) -> None:
        """Make room for ``capacity`` frames, keeping the newest ones at their serials."""
        if capacity <= self.capacity:
            return
        old = self.capacity
        n = min(self.written, old)
        logical = np.arange(self.written - n, self.written)
        for k, a in self.fields.items():
            b = np.zeros((capacity,) + a.shape[1:], a.dtype)
            b[logical % capacity] = a[logical % old]
            self.fields[k] = b
        self.capacity = int(capacity)

    # ---------------------------------------------------------------- persistence (no pickle)
    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The rings as ``{prefix + name: array}`` for an npz/safetensors file."""
        return {prefix + k: v for k, v in self.fields.items()}

    def meta(self) -> dict[str, int]:
        return {"frame_capacity": self.capacity, "frames_written": self.written}

    def put_chunks(self, store: ChunkStore, prefix: str) -> dict[str, dict[str, Any]]:
        """Put every ring into ``store`` (``ChunkStore.put_array``); return the entries as
        ``{prefix + name: entry}`` for ``write_replay(..., stored=...)``.

        Frames are only ever written by ``store``, at the slots of serials ``written`` onwards:
        the chunks that no serial since the previous ``put_chunks`` into (or chunked ``restore``
        from) the same folder landed in keep their digests without being read or hashed again."""
        last = self._chunked
        if last is not None and (last["folder"] != str(store.folder.resolve()) or last["capacity"] != self.capacity):
            last = None
        changed: list[tuple[int, int]] | None = None
        if last is not None and 0 <= self.written - last["written"] < self.capacity:
            start = last["written"] % self.capacity
            stop = start + self.written - last["written"]
            changed = [(start, min(stop, self.capacity))] + ([(0, stop - self.capacity)] if stop > self.capacity else [])
        entries = {k: store.put_array(v, None if last is None else last["entries"].get(k), changed)
                   for k, v in self.fields.items()}
        self._chunked = {"folder": str(store.folder.resolve()), "capacity": self.capacity, "written": self.written,
                         "entries": entries}
        return {prefix + k: e for k, e in entries.items()}

    def restore(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray], prefix: str) -> None:
        """Inverse of ``arrays`` + ``meta`` (``read_replay``'s output, either layout)."""
        self.capacity = int(meta["frame_capacity"])
        self.written = int(meta["frames_written"])
        # arrays the reader allocated are taken as they are (a copy would double a large ring)
        self.fields = {k[len(prefix):]: np.require(arrays[k], requirements=["C", "W", "O"])
                       for k in arrays if k.startswith(prefix)}
        for k, v in self.fields.items():
            if len(v) != self.capacity:
                raise BadInput("replay", f"saved frames '{k}' hold {len(v)} rows, expected {self.capacity}")
        self._chunked = None
        chunked = meta.get("chunks")
        if isinstance(chunked, Mapping):  # the next put_chunks into that folder rewrites only new frames
            entries = chunked["arrays"]
            self._chunked = {"folder": chunked["folder"], "capacity": self.capacity, "written": self.written,
                             "entries": {k: entries[prefix + k] for k in self.fields}}
