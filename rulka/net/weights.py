"""Weights blobs: what the trainer publishes and every worker loads.

A blob is safetensors bytes (never pickle, never ``torch.load``), optionally zstd-compressed,
plus a small plain-data header (run id, version, dtype, and the ``header`` map of
``rulka.net.messages.WeightsHeader``: the actor a worker builds, the run config, evaluation
requests; stored under the key ``actor_spec``, its name before), signed by the trainer's Ed25519 key::

    encoded = msgpack {"m": packed header, "t": tensors (safetensors, maybe zstd), "sig": signature}
    signature = Ed25519(b"rulka-weights\\0" + sha256(m) + sha256(t))

``decode_weights`` checks the signature before decoding anything, and refuses a version that
is not newer than the one the caller already runs (rollback / replay of an old blob).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
from typing import Any

import numpy as np
import torch
import zstandard
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from rulka.errors import BadInput
from rulka.segment import _check_scalar_tree, pack, unpack

FORMAT = "rulka-weights"
FORMAT_VERSION = 1
MAX_WEIGHTS_BYTES = 1 << 31  # decoded tensors; far above any network a worker runs
_DOMAIN = b"rulka-weights\0"


@dataclasses.dataclass
class WeightsBlob:
    """Published weights. ``tensors`` maps parameter names to tensors (torch or numpy);
    ``header`` is plain data (str/int/float/bool/None, lists, string-keyed maps): the wire form of
    a ``rulka.net.messages.WeightsHeader``."""

    run_id: str
    version: int
    tensors: dict[str, Any]
    header: dict[str, Any] = dataclasses.field(default_factory=dict)
    # "float32", "float16" or "int8": how floating tensors travel; with "float16" only the large
    # ones (HALF_MIN_ELEMENTS and up, all finite and within float16's range): the worker loads them
    # into its float32 network, and tests/test_weights_half.py checks greedy actions do not change.
    # "int8" (opt-in, lossy): large matrices (2+ dimensions) as int8 with a float32 scale per row
    # (the first dimension), the rest as float16; decoding gives them back as float32
    dtype: str = "float32"


HALF_MIN_ELEMENTS = 1024  # with dtype float16, smaller tensors (biases, norms, exploration rates) stay float32
HALF_MAX = 65504.0  # the largest finite float16: a tensor beyond it stays float32
DTYPES = ("float32", "float16", "int8")
SCALE_PREFIX = "rulka.int8_scale:"  # name of the per-row scales of an int8 tensor ``name``


def _quantize_rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 values and float32 scales, one per row (first dimension): value x scale ~ t."""
    rows = t.reshape(t.shape[0], -1).to(torch.float32)
    scale = rows.abs().amax(dim=1) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(rows / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q.reshape(t.shape).contiguous(), scale.contiguous()


def _dequantize(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """int8 tensors with their per-row scales -> float32 (the decoded blob's form)."""
    out = {k: v for k, v in tensors.items() if not k.startswith(SCALE_PREFIX)}
    for key, scale in tensors.items():
        if not key.startswith(SCALE_PREFIX):
            continue
        name = key[len(SCALE_PREFIX):]
        q = out.get(name)
        if (q is None or q.dtype != torch.int8 or q.dim() < 2 or scale.dtype != torch.float32
                or scale.shape != (q.shape[0],)):
            raise BadInput("weights", f"int8 tensor {name!r} without matching per-row scales")
        out[name] = (q.reshape(q.shape[0], -1).to(torch.float32) * scale[:, None]).reshape(q.shape)
    if any(v.dtype == torch.int8 for v in out.values()):
        raise BadInput("weights", "int8 tensor without scales")
    return out


def _wire_tensors(tensors: dict[str, Any], dtype: str) -> dict[str, torch.Tensor]:
    """The tensors as they travel in ``dtype``."""
    out: dict[str, torch.Tensor] = {}
    for name, value in tensors.items():
        if name.startswith(SCALE_PREFIX):
            raise ValueError(f"weights entry {name!r}: names starting {SCALE_PREFIX!r} are reserved")
        t = _to_torch(name, value, "float16" if dtype == "int8" else dtype)
        if dtype == "int8" and t.dtype == torch.float16 and t.dim() >= 2:
            out[name], out[SCALE_PREFIX + name] = _quantize_rows(_to_torch(name, value, "float32"))
        else:
            out[name] = t
    return out


def _to_torch(name: str, value: Any, dtype: str) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"weights entry {name!r} is a {type(value).__name__}, not a tensor or array")
    t = t.detach().to("cpu")
    if t.is_floating_point():
        half = (dtype == "float16" and t.numel() >= HALF_MIN_ELEMENTS
                and bool(torch.isfinite(t).all()) and float(t.abs().max()) <= HALF_MAX)
        t = t.to(torch.float16 if half else torch.float32)
    return t.contiguous()


def _signed_digest(meta: bytes, tensors: bytes) -> bytes:
    return _DOMAIN + hashlib.sha256(meta).digest() + hashlib.sha256(tensors).digest()


def encode_weights(blob: WeightsBlob, signing_key: Ed25519PrivateKey, *, compress: bool = True,
                   level: int = 3) -> bytes:
    """Serialize and sign ``blob`` (the trainer's key). ``compress`` uses zstd at ``level``."""
    if blob.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, not {blob.dtype!r}")
    if not isinstance(blob.version, int) or blob.version < 0:
        raise ValueError("version must be a non-negative int")
    _check_scalar_tree(blob.header)
    raw = st_save(_wire_tensors(blob.tensors, blob.dtype))
    body = zstandard.ZstdCompressor(level=level).compress(raw) if compress else raw
    meta = pack({"format": FORMAT, "fv": FORMAT_VERSION, "run_id": blob.run_id, "version": blob.version,
                 "dtype": blob.dtype, "actor_spec": blob.header,
                 "compression": "zstd" if compress else "none", "raw_len": len(raw)})
    sig = signing_key.sign(_signed_digest(meta, body))
    return pack({"m": meta, "t": body, "sig": sig})


def read_weights_header(data: bytes, verify_key: Ed25519PublicKey) -> dict[str, Any]:
    """Verify the signature and return the blob's metadata (run_id, version, dtype, ``actor_spec``: the header map, ...)
    without decoding tensors. Raises BadInput (reason ``weights``) on anything wrong."""
    outer = unpack(data)
    if not isinstance(outer, dict) or set(outer) != {"m", "t", "sig"} or not all(
            isinstance(outer[k], bytes) for k in outer):
        raise BadInput("weights", "not a weights blob")
    try:
        verify_key.verify(outer["sig"], _signed_digest(outer["m"], outer["t"]))
    except InvalidSignature:
        raise BadInput("weights", "signature does not verify against the trainer key") from None
    meta = unpack(outer["m"])
    want = {"format": str, "fv": int, "run_id": str, "version": int, "dtype": str,
            "actor_spec": dict, "compression": str, "raw_len": int}
    if not isinstance(meta, dict) or set(meta) != set(want) or not all(
            isinstance(meta[k], t) for k, t in want.items()):
        raise BadInput("weights", "bad header")
    if meta["format"] != FORMAT or meta["fv"] != FORMAT_VERSION:
        raise BadInput("weights", f"unknown format {meta['format']!r} v{meta['fv']}")
    if meta["compression"] not in ("zstd", "none") or not 0 <= meta["raw_len"] <= MAX_WEIGHTS_BYTES:
        raise BadInput("weights", "bad compression or size")
    if meta["dtype"] not in DTYPES:
        raise BadInput("weights", f"unknown dtype {meta['dtype']!r}")
    meta["_body"] = outer["t"]
    return meta


def decode_weights(data: bytes, verify_key: Ed25519PublicKey, *, newer_than: int | None = None) -> WeightsBlob:
    """Verify and decode a blob. ``newer_than``: the version the caller runs now; a blob that is
    not newer raises BadInput (reason ``weights``, "stale") so an old blob is never loaded again.
    Tensors come back as CPU torch tensors in the blob's dtype (int8 ones as float32)."""
    meta = read_weights_header(data, verify_key)
    if newer_than is not None and meta["version"] <= newer_than:
        raise BadInput("weights", f"stale version {meta['version']} (running {newer_than})")
    body = meta.pop("_body")
    if meta["compression"] == "zstd":
        try:
            raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read(meta["raw_len"] + 1)
        except zstandard.ZstdError as exc:
            raise BadInput("weights", f"zstd: {exc}") from None
    else:
        raw = body
    if len(raw) != meta["raw_len"]:
        raise BadInput("weights", "tensor bytes have the wrong length")
    try:
        tensors = st_load(raw)
    except Exception as exc:  # safetensors raises its own error types on a bad header
        raise BadInput("weights", f"safetensors: {type(exc).__name__}") from None
    tensors = _dequantize(dict(tensors)) if meta["dtype"] == "int8" else dict(tensors)
    return WeightsBlob(meta["run_id"], meta["version"], tensors, meta["actor_spec"], meta["dtype"])

