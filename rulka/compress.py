"""Built-in sample compressors: Segment <-> bytes, lossless, never pickled.

- ``"zstd"`` (the default): the segment as plain msgpack (``rulka.segment.segment_to_plain``),
  compressed with zstandard. uint8 image observations (``obs/...`` arrays of 2+ dims) are first
  delta-encoded against the previous frame when that makes the compressed segment smaller:
  consecutive frames of a driving game differ in few pixels, so the difference is mostly zeros.
  Frame history is never sent: each frame crosses the wire once and the memory stacks history.
- ``"none"``: plain msgpack, for debugging and for measuring what compression buys.

Both refuse to decompress into more than ``max_output_bytes`` and raise ``BadInput`` on anything
malformed, so a hostile or truncated payload costs a counter, not memory or a crash.

On the wire a segment is a short header naming its codec, then the compressor's bytes
(:func:`frame_segment`); the trainer decodes each segment with the codec its header names
(:class:`SegmentDecoder`), so ``worker.compressor`` is the only setting and the two sides cannot
disagree.
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
    """Inverse of ``delta_encode`` (a cumulative sum modulo 256 along the frame axis).

    One in-place uint8 add per frame: ``np.cumsum(axis=0)`` walks the array with a frame-sized
    stride and was ~15x slower on a 200-frame 160x120 segment."""
    out = np.empty_like(deltas)
    if len(deltas):
        out[0] = deltas[0]
        for i in range(1, len(deltas)):
            np.add(out[i - 1], deltas[i], out=out[i])  # uint8 arithmetic wraps, as wanted
    return out


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
    better; both ways are tried on one segment in ``AUTO_RECHECK_SEGMENTS`` per array name and
    the choice is kept for the segments between: trying both on every segment tripled the
    worker's compression time), ``True`` (always) or ``False`` (never);
    ``max_output_bytes``: largest segment ``decompress`` accepts.
    """

    codec = "zstd"
    AUTO_RECHECK_SEGMENTS = 16

    def __init__(self, level: int = 3, delta: bool | str = "auto",
                 max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> None:
        if delta not in (True, False, "auto"):
            raise ValueError("delta must be True, False or 'auto'")
        self.level = int(level)
        self.delta = delta
        self.max_output_bytes = int(max_output_bytes)
        self._cctx = zstandard.ZstdCompressor(level=self.level)
        self._auto: dict[str, tuple[bool, int]] = {}  # "auto": array name -> (delta?, segments left to reuse it)

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
                if self.delta == "auto":
                    use, left = self._auto.get(name, (False, 0))
                    if left <= 0:
                        trial = np.ascontiguousarray(delta_encode(arr)).tobytes()
                        use = len(self._compress_bytes(trial)) < len(self._compress_bytes(plain["a"][name][2]))
                        left = self.AUTO_RECHECK_SEGMENTS
                    self._auto[name] = (use, left - 1)
                    if not use:  # the delta encoding is not even computed
                        continue
                plain["a"][name][2] = np.ascontiguousarray(delta_encode(arr)).tobytes()
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

    codec = "none"

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


# ---------------------------------------------------------------------------------------------
# the segment header: which codec made the bytes
# ---------------------------------------------------------------------------------------------

SEGMENT_MAGIC = b"rulka-seg/1:"
"""Start of a framed segment (neither a zstd frame nor a msgpack map starts like this)."""
_MAX_CODEC_NAME = 200


def codec_name(compressor: SampleCompressor, configured: str | None = None) -> str:
    """The name a segment's header gives for ``compressor``: its ``codec`` attribute, else the
    name it was configured under, else its ``module:Class``."""
    if getattr(compressor, "codec", ""):
        return str(compressor.codec)
    if configured:
        return configured
    return f"{type(compressor).__module__}:{type(compressor).__qualname__}"


def frame_segment(codec: str, body: bytes) -> bytes:
    """``body`` (a compressor's output) behind a header naming ``codec``."""
    name = codec.encode("ascii")
    if not 0 < len(name) <= _MAX_CODEC_NAME:
        raise ValueError(f"codec name {codec!r} must be 1-{_MAX_CODEC_NAME} ASCII characters")
    return SEGMENT_MAGIC + bytes([len(name)]) + name + body


def split_segment(data: bytes) -> tuple[str | None, bytes | memoryview]:
    """(codec named in the header, compressor bytes); codec None for a payload without a header
    (written before headers existed). Raises BadInput on a broken header."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BadInput("segment", "payload is not bytes")
    view = memoryview(data)
    if bytes(view[: len(SEGMENT_MAGIC)]) != SEGMENT_MAGIC:
        return None, data
    start = len(SEGMENT_MAGIC) + 1
    if len(view) < start:
        raise BadInput("segment", "truncated header")
    length = view[start - 1]
    raw_name = bytes(view[start : start + length])
    if length == 0 or len(raw_name) != length:
        raise BadInput("segment", "bad codec name in header")
    try:
        name = raw_name.decode("ascii")
    except UnicodeDecodeError:
        raise BadInput("segment", "codec name is not ASCII") from None
    return name, view[start + length :]


class SegmentDecoder:
    """Trainer side: decodes framed segments with the codec each header names.

    Codecs are looked up by name: registered compressors (built with default arguments), plus
    ``default`` under its own name (with the configured arguments). A ``module:Class`` name is
    decoded only when it is the configured one: a header from the network never makes the trainer
    import a module it was not told to. A payload without a header is decoded by ``default``.
    """

    def __init__(self, default: SampleCompressor, default_codec: str | None = None) -> None:
        self.default = default
        self.default_codec = codec_name(default, default_codec)
        self._codecs: dict[str, SampleCompressor] = {self.default_codec: default}

    def _codec(self, name: str) -> SampleCompressor:
        codec = self._codecs.get(name)
        if codec is not None:
            return codec
        from rulka.registry import is_registered, resolve

        if not is_registered("compressor", name):
            raise BadInput("segment", f"unknown codec {name[:60]!r} (not a registered compressor)")
        codec = self._codecs[name] = resolve("compressor", name)()
        return codec

    def decompress(self, data: bytes) -> Segment:
        """The segment in ``data``; BadInput on an unknown codec or malformed bytes."""
        name, body = split_segment(data)
        codec = self.default if name is None else self._codec(name)
        return codec.decompress(body if isinstance(body, bytes) else bytes(body))
