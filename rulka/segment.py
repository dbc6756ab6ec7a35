"""The Segment: a slice of one episode from one worker, the unit that crosses the wire.

A segment of ``T`` transitions holds ``T + 1`` observations (the one after the last action is
included, so a memory can build every next-state without waiting for the next segment) and
``T`` of everything else. Observations are stored once each: frame history is stacked by the
memory at sample time, never duplicated on the worker.

Array naming convention in ``Segment.arrays``:

- ``obs/<name>``: shape ``(T + 1, ...)``; for TrackMania-like envs ``obs/img`` (uint8, H x W)
  and ``obs/float`` (float32, ``float_input_dim``); a plain-array gym observation is ``obs/x``.
- ``action``: ``(T,)`` int64 for discrete actions, ``(T, N)`` int64 for blocks of N discrete
  actions (multi-action, ``environment.rl_action_offsets_ms``), or ``(T, A)`` float32 for
  continuous ones.
- ``reward``: ``(T,)`` float32; ``terminated`` and ``truncated``: ``(T,)`` bool.
- ``extra/<name>``: ``(T, ...)`` per-step extras from the actor or env (``extra/q_values``,
  ``extra/greedy``, ``extra/logprob``, ``extra/value``, ``extra/progress_m`` ...).

Only numbers and strings: ``encode_arrays`` / ``decode_arrays`` turn a segment into plain
msgpack with raw little-endian buffers and a strict dtype whitelist. Nothing is ever unpickled.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np

from rulka.errors import BadInput

# dtypes allowed to cross the wire; anything else is rejected at encode and at decode.
ALLOWED_DTYPES = frozenset(
    ["bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
     "float16", "float32", "float64"]
)
MAX_NDIM = 8


@dataclasses.dataclass
class Segment:
    """One slice of one episode. See the module docstring for the array layout."""

    run_id: str
    worker_id: str
    episode_id: int
    seq: int  # per-worker sequence number, strictly increasing; (worker_id, seq) is unique
    index_in_episode: int  # 0 for the first segment of an episode
    first_step: int  # step index (within the episode) of the first transition
    policy_version: int  # version of the weights that chose these actions
    arrays: dict[str, np.ndarray]
    episode_done: bool = False  # this segment ends the episode (terminated or truncated)
    map_name: str = ""
    evaluation: bool = False  # collected by the greedy policy (evaluation episode)
    created_at: float = dataclasses.field(default_factory=time.time)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)  # scalars: episode return, race time...

    @property
    def num_transitions(self) -> int:
        return int(len(self.arrays["reward"]))

    def validate(self) -> None:
        """Check the array layout; raise BadInput naming the first problem."""
        if "reward" not in self.arrays or "action" not in self.arrays:
            raise BadInput("segment", "missing 'reward' or 'action'")
        t = self.num_transitions
        for name, arr in self.arrays.items():
            want = t + 1 if name.startswith("obs/") else t
            if arr.shape[:1] != (want,):
                raise BadInput("segment", f"array '{name}' has length {arr.shape[:1]}, expected {want}")
        if self.arrays["action"].ndim not in (1, 2):
            raise BadInput("segment", f"'action' must be (T,) or (T, N) (N actions per block, or a continuous "
                                      f"action's N values); got shape {self.arrays['action'].shape}")
        if not any(k.startswith("obs/") for k in self.arrays):
            raise BadInput("segment", "no 'obs/...' array")

    def header(self) -> dict[str, Any]:
        """Everything but the arrays, as plain data."""
        d = dataclasses.asdict(self)
        d.pop("arrays")
        return d


def _check_scalar_tree(obj: Any, depth: int = 0) -> None:
    if depth > 4:
        raise BadInput("segment", "info nested too deeply")
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if not isinstance(k, str):
                raise BadInput("segment", "info keys must be strings")
            _check_scalar_tree(v, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _check_scalar_tree(v, depth + 1)
    elif not isinstance(obj, (str, int, float, bool, type(None))):
        raise BadInput("segment", f"info value of type {type(obj).__name__} is not plain data")


def encode_arrays(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Arrays -> plain msgpack-able dict of {name: [dtype, shape, raw bytes]}."""
    out: dict[str, Any] = {}
    for name, arr in arrays.items():
        arr = np.asarray(arr)
        dtype = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
        if dtype.name not in ALLOWED_DTYPES:
            raise ValueError(f"array '{name}' has dtype {arr.dtype}, not allowed on the wire")
        out[name] = [dtype.name, list(arr.shape), np.ascontiguousarray(arr, dtype=dtype.newbyteorder("<")).tobytes()]
    return out


def decode_arrays(obj: Any, *, max_bytes: int = 1 << 31) -> dict[str, np.ndarray]:
    """Inverse of ``encode_arrays``; raise BadInput on anything malformed."""
    if not isinstance(obj, dict):
        raise BadInput("arrays", "not a map")
    out: dict[str, np.ndarray] = {}
    total = 0
    for name, spec in obj.items():
        if not isinstance(name, str) or not isinstance(spec, (list, tuple)) or len(spec) != 3:
            raise BadInput("arrays", f"bad entry {name!r}")
        dtype_name, shape, raw = spec
        if dtype_name not in ALLOWED_DTYPES:
            raise BadInput("arrays", f"dtype {dtype_name!r} not allowed")
        if (not isinstance(shape, (list, tuple)) or len(shape) > MAX_NDIM
                or not all(isinstance(s, int) and 0 <= s < 1 << 31 for s in shape)):
            raise BadInput("arrays", f"bad shape for {name!r}")
        if not isinstance(raw, (bytes, bytearray)):
            raise BadInput("arrays", f"payload of {name!r} is not bytes")
        dtype = np.dtype(dtype_name).newbyteorder("<")
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if expected != len(raw):
            raise BadInput("arrays", f"{name!r}: {len(raw)} bytes for shape {shape} of {dtype_name}")
        total += expected
        if total > max_bytes:
            raise BadInput("arrays", "decoded size over limit")
        out[name] = np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="), copy=False)
    return out


def segment_to_plain(segment: Segment) -> dict[str, Any]:
    """Segment -> plain dict (msgpack-able) without compression."""
    segment.validate()
    _check_scalar_tree(segment.info)
    return {"h": segment.header(), "a": encode_arrays(segment.arrays)}


_HEADER_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": (str,), "worker_id": (str,), "episode_id": (int,), "seq": (int,),
    "index_in_episode": (int,), "first_step": (int,), "policy_version": (int,),
    "episode_done": (bool,), "map_name": (str,), "evaluation": (bool,),
    "created_at": (float, int), "info": (dict,),
}


def segment_from_plain(obj: Any, *, max_bytes: int = 1 << 31) -> Segment:
    """Inverse of ``segment_to_plain``; raise BadInput on anything malformed."""
    if not isinstance(obj, dict) or set(obj) != {"h", "a"}:
        raise BadInput("segment", "not a segment map")
    h = obj["h"]
    if not isinstance(h, dict) or set(h) != set(_HEADER_TYPES):
        raise BadInput("segment", "bad header fields")
    for key, types in _HEADER_TYPES.items():
        value = h[key]
        if not isinstance(value, types) or (bool in (type(value),) and bool not in types):
            raise BadInput("segment", f"header field {key!r} has type {type(value).__name__}")
    _check_scalar_tree(h["info"])
    seg = Segment(arrays=decode_arrays(obj["a"], max_bytes=max_bytes), **h)
    seg.validate()
    return seg


def pack(obj: Any) -> bytes:
    """msgpack with binary-safe settings."""
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data: bytes, *, max_bytes: int = 1 << 31) -> Any:
    """msgpack decode with limits and no extension types; raise BadInput on failure."""
    if len(data) > max_bytes:
        raise BadInput("msgpack", f"{len(data)} bytes is over the {max_bytes}-byte limit")
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, ext_hook=_reject_ext, use_list=True)
    except BadInput:
        raise
    except Exception as exc:  # msgpack raises several exception types on garbage
        raise BadInput("msgpack", f"{type(exc).__name__}: {exc}"[:200]) from None


def _reject_ext(code: int, data: bytes) -> Any:
    raise BadInput("msgpack", f"extension type {code} not allowed")
