"""Built-in sample compressors: Segment <-> bytes, lossless, never pickled.

- ``"zstd"`` (the default): the segment as plain msgpack (``rulka.segment.segment_to_plain``),
  compressed with zstandard. uint8 image observations (``obs/...`` arrays of 2+ dims) are first
  delta-encoded against the previous frame when that makes the compressed segment smaller:
  consecutive frames of a driving game differ in few pixels, so the difference is mostly zeros.
  Frame history is never sent: each frame crosses the wire once and the memory stacks history.
- ``"none"``: plain msgpack, for debugging and for measuring what compression buys.

Both refuse to decompress into more than ``max_output_bytes`` and raise ``BadInput`` on anything
malformed, so a hostile or truncated payload costs a counter, not memory or a crash.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import zstandard

from rulka.errors import BadInput
from rulka.interfaces import SampleCompressor
from rulka.segment import Segment, pack, segment_from_plain, segment_to_plain, unpack

DEFAULT_MAX_OUTPUT_BYTES = 256 * 1024 * 1024
_FORMAT = "rulka-zstd/1"
_PLAIN_FORMAT = "rulka-plain/1"


def delta_encode(frames: np.ndarray) -> np.ndarray:
    """uint8 frames (N, ...) -> first frame, then wrapping differences to the previous frame."""
    out = np.empty_like(frames)
    if len(frames):
        out[0] = frames[0]
        np.subtract(frames[1:], frames[:-1], out=out[1:])  # uint8 arithmetic wraps, as wanted
    return out


def delta_decode(deltas: np.ndarray) -> np.ndarray:
    """Inverse of ``delta_encode`` (a cumulative sum modulo 256)."""
    return np.cumsum(deltas, axis=0, dtype=np.uint8)


def _bounded_decompress(data: bytes, limit: int) -> bytes:
    # ZstdDecompressor.decompress ignores max_output_size when the frame header states a content
    # size, so a crafted header could ask for any amount of memory: read through a stream instead.
    reader = zstandard.ZstdDecompressor().stream_reader(data)
    parts: list[bytes] = []
    total = 0
    try:
        while True:
            chunk = reader.read(min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
            if total > limit:
                raise BadInput("compressed segment", f"decompresses to more than {limit} bytes")
    except zstandard.ZstdError as exc:
        raise BadInput("compressed segment", f"zstd: {exc}"[:200]) from None
    return b"".join(parts)


class ZstdCompressor(SampleCompressor):
    """msgpack + zstd with optional per-array frame delta encoding.

    ``level``: zstd level (3 is fast enough for a 20 Hz loop on one core);
    ``delta``: ``"auto"`` (keep the delta encoding of a frame array only if it compresses
    better), ``True`` (always) or ``False`` (never);
    ``max_output_bytes``: largest segment ``decompress`` accepts.
    """

    def __init__(self, level: int = 3, delta: bool | str = "auto",
                 max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> None:
        if delta not in (True, False, "auto"):
            raise ValueError("delta must be True, False or 'auto'")
        self.level = int(level)
        self.delta = delta
        self.max_output_bytes = int(max_output_bytes)
        self._cctx = zstandard.ZstdCompressor(level=self.level)

    def _compress_bytes(self, raw: bytes) -> bytes:
        return self._cctx.compress(raw)

    def compress(self, segment: Segment) -> bytes:
        plain = segment_to_plain(segment)
        frame_names = [
            name for name, arr in segment.arrays.items()
            if name.startswith("obs/") and arr.dtype == np.uint8 and arr.ndim >= 2 and len(arr) > 1
        ]
        delta_names: list[str] = []
        if self.delta is not False:
            for name in frame_names:
                arr = segment.arrays[name]
                encoded = np.ascontiguousarray(delta_encode(arr)).tobytes()
                if self.delta == "auto":
                    raw = plain["a"][name][2]
                    if len(self._compress_bytes(encoded)) >= len(self._compress_bytes(raw)):
                        continue
                plain["a"][name][2] = encoded
                delta_names.append(name)
        return self._compress_bytes(pack({"f": _FORMAT, "delta": delta_names, "s": plain}))

    def decompress(self, data: bytes) -> Segment:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise BadInput("compressed segment", "payload is not bytes")
        raw = _bounded_decompress(bytes(data), self.max_output_bytes)
        obj = unpack(raw, max_bytes=self.max_output_bytes)
        if not isinstance(obj, dict) or obj.get("f") != _FORMAT or set(obj) != {"f", "delta", "s"}:
            raise BadInput("compressed segment", "not a rulka-zstd/1 segment")
        delta_names = obj["delta"]
        if not isinstance(delta_names, list) or not all(isinstance(n, str) for n in delta_names):
            raise BadInput("compressed segment", "bad delta list")
        segment = segment_from_plain(obj["s"], max_bytes=self.max_output_bytes)
        for name in delta_names:
            arr = segment.arrays.get(name)
            if arr is None or arr.dtype != np.uint8 or not name.startswith("obs/"):
                raise BadInput("compressed segment", f"delta flag on unsuitable array {name!r}")
            segment.arrays[name] = delta_decode(arr)
        return segment


class PlainCompressor(SampleCompressor):
    """No compression: the segment as plain msgpack (``"none"``)."""

    def __init__(self, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> None:
        self.max_output_bytes = int(max_output_bytes)

    def compress(self, segment: Segment) -> bytes:
        return pack({"f": _PLAIN_FORMAT, "s": segment_to_plain(segment)})

    def decompress(self, data: bytes) -> Segment:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise BadInput("plain segment", "payload is not bytes")
        if len(data) > self.max_output_bytes:
            raise BadInput("plain segment", f"larger than {self.max_output_bytes} bytes")
        obj: Any = unpack(bytes(data), max_bytes=self.max_output_bytes)
        if not isinstance(obj, dict) or obj.get("f") != _PLAIN_FORMAT or set(obj) != {"f", "s"}:
            raise BadInput("plain segment", "not a rulka-plain/1 segment")
        return segment_from_plain(obj["s"], max_bytes=self.max_output_bytes)


def make_compressor(name: str = "zstd", **kwargs: Any) -> SampleCompressor:
    """The compressor plugin ``name`` (registry name or ``module:Class``) built with ``kwargs``."""
    from rulka.registry import resolve

    factory = resolve("compressor", name)
    return factory(**kwargs)
