"""The checkpoint folder format below every role: a state tree as JSON + safetensors (no pickle)
and the manifest of SHA-256 checksums written last. ``rulka.trainer.checkpoint_store`` writes and
rotates checkpoints with it; ``nn.init_from_pretrained`` (``rulka.nn.pretrained``) reads a
trainer's checkpoint folder with it, without importing the trainer."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from rulka.errors import BadInput
from rulka.memory.files import ChunkStore

log = logging.getLogger("rulka.trainer")

MANIFEST = "manifest.json"
CHUNKS = "chunks"  # the replay chunks the checkpoints under a root share


# -- tree <-> (JSON, tensors) ---------------------------------------------------------------------
def flatten_state(tree: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """Split a state tree into a JSON-able tree and a flat dict of tensors it references.

    Tensors become ``{"__tensor__": key}``, numpy arrays ``{"__ndarray__": key}``, dicts with
    non-string keys (optimizer state is keyed by int) ``{"__items__": [[k, v], ...]}``, tuples
    ``{"__tuple__": [...]}``.
    """
    tensors: dict[str, torch.Tensor] = {}

    def walk(obj: Any) -> Any:
        if torch.is_tensor(obj):
            key = f"t{len(tensors)}"
            tensors[key] = obj.detach().cpu().contiguous().clone()
            return {"__tensor__": key}
        if isinstance(obj, np.ndarray):
            key = f"t{len(tensors)}"
            tensors[key] = torch.from_numpy(np.ascontiguousarray(obj).copy())
            return {"__ndarray__": key}
        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, dict):
            if all(isinstance(k, str) for k in obj) and not any(k.startswith("__") for k in obj):
                return {k: walk(v) for k, v in obj.items()}
            return {"__items__": [[walk(k), walk(v)] for k, v in obj.items()]}
        if isinstance(obj, tuple):
            return {"__tuple__": [walk(v) for v in obj]}
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        raise TypeError(f"cannot checkpoint a value of type {type(obj).__name__}")

    return walk(tree), tensors


def unflatten_state(tree: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of ``flatten_state``."""

    def walk(obj: Any) -> Any:
        if isinstance(obj, dict):
            if "__tensor__" in obj:
                return tensors[obj["__tensor__"]]
            if "__ndarray__" in obj:
                return tensors[obj["__ndarray__"]].numpy()
            if "__items__" in obj:
                return {_hashable(walk(k)): walk(v) for k, v in obj["__items__"]}
            if "__tuple__" in obj:
                return tuple(walk(v) for v in obj["__tuple__"])
            return {k: walk(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        return obj

    try:
        return walk(tree)
    except (KeyError, TypeError) as exc:
        raise BadInput("checkpoint", f"state tree references a missing tensor ({exc})") from None


def _hashable(obj: Any) -> Any:
    return tuple(obj) if isinstance(obj, list) else obj


def save_tree(directory: Path, name: str, tree: Any) -> None:
    """Write ``tree`` as ``<name>.json`` + ``<name>.safetensors`` in ``directory``."""
    plain, tensors = flatten_state(tree)
    save_file(tensors, str(directory / f"{name}.safetensors"))
    (directory / f"{name}.json").write_text(json.dumps(plain))


def load_tree(directory: Path, name: str) -> Any:
    """Read back what ``save_tree`` wrote."""
    try:
        plain = json.loads((directory / f"{name}.json").read_text())
        tensors = load_file(str(directory / f"{name}.safetensors"))
    except (OSError, ValueError) as exc:
        raise BadInput("checkpoint", f"{directory / name}: {exc}") from None
    return unflatten_state(plain, tensors)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(folder: Path, number: int, chunks: dict[str, int] | None = None,
                   written: dict[str, int] | None = None) -> None:
    """Record the SHA-256 of every file in ``folder`` and the replay chunks it needs
    (``{digest: bytes}``; their names are their checksums), fsynced: the checksums must hit the
    disk before the folder is named the latest. ``written``: what writing the replay cost."""
    files = {p.relative_to(folder).as_posix(): _sha256(p) for p in sorted(folder.rglob("*"))
             if p.is_file() and p.name != MANIFEST}
    manifest: dict[str, Any] = {"number": number, "sha256": files, "chunks": dict(sorted((chunks or {}).items()))}
    if written:
        manifest["replay_written"] = written
    with open(folder / MANIFEST, "w", encoding="utf-8") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())


def verify_manifest(folder: Path) -> None:
    """Raise BadInput unless every file the manifest lists is present with its checksum and
    every chunk it needs is present with its size (a chunk's bytes are checked when the replay
    reads it)."""
    if not (folder / MANIFEST).exists():
        log.warning("%s has no %s (written before checksums): its files are not verified", folder, MANIFEST)
        return
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = manifest["sha256"]
        if not isinstance(files, dict):
            raise TypeError("sha256 is not a map")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput("checkpoint", f"{folder / MANIFEST} is missing or damaged ({exc})") from None
    for rel, digest in files.items():
        path = folder / rel
        if not isinstance(rel, str) or Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise BadInput("checkpoint", f"{folder / MANIFEST} names a file outside the checkpoint: {rel!r}")
        if not path.is_file():
            raise BadInput("checkpoint", f"{path} is missing")
        if _sha256(path) != digest:
            raise BadInput("checkpoint", f"{path} is damaged (checksum mismatch)")
    needed = manifest.get("chunks", {})
    if not isinstance(needed, dict):
        raise BadInput("checkpoint", f"{folder / MANIFEST} is damaged (chunks is not a map)")
    store = ChunkStore(folder.parent / CHUNKS)
    for digest, size in needed.items():
        if not isinstance(size, int) or not store.has(digest, size):
            raise BadInput("checkpoint", f"replay chunk {store.path(digest)} is missing or not {size} bytes")
