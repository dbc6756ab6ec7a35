"""Checkpoints without pickle: tensors in safetensors, everything else in JSON, written atomically.

A checkpoint is a folder ``checkpoints/ckpt-<n>/`` holding

- ``agent.safetensors`` + ``agent.json``: the agent's ``state_dict()`` (model, optimizer,
  schedules, counters): every tensor or array goes to safetensors, the rest of the tree (with
  references to the tensors) to JSON;
- ``trainer.json``: the trainer's counters, dedupe state, RNG states, journal position;
- ``replay/``: whatever ``Memory.save`` writes.

The folder is written under a temporary name and renamed; ``checkpoints/latest.json`` (replaced
atomically with ``os.replace``) names the newest complete one, so a crash at any moment leaves
the previous checkpoint intact and readable.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from rulka.errors import BadInput

_LATEST = "latest.json"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never a mix."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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


# -- RNG ----------------------------------------------------------------------------------------
def rng_state() -> dict[str, Any]:
    """The process-wide RNG states (Python, numpy's legacy global, torch CPU) as plain data."""
    np_state = np.random.get_state()
    return {
        "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of ``rng_state``."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    npst = state["numpy"]
    np.random.set_state((npst[0], np.asarray(npst[1], np.uint32), npst[2], npst[3], npst[4]))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


# -- checkpoint folders -------------------------------------------------------------------------
def write_checkpoint(root: Path, number: int, agent_state: Any, trainer_state: dict[str, Any],
                     memory: Any | None = None) -> Path:
    """Write checkpoint ``number`` under ``root`` (the run's ``checkpoints/``) and make it the
    latest; older checkpoints are removed once the new one is in place. Returns its folder."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"ckpt-{number:06d}"
    tmp = root / f".ckpt-{number:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_tree(tmp, "agent", agent_state)
    (tmp / "trainer.json").write_text(json.dumps(trainer_state))
    if memory is not None:
        memory.save(tmp / "replay")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    atomic_write_text(root / _LATEST, json.dumps({"checkpoint": final.name, "number": number}))
    for old in root.iterdir():
        if old.name.startswith("ckpt-") and old.name != final.name:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(root: Path) -> Path | None:
    """The folder named by ``latest.json``, or None when there is no checkpoint yet."""
    path = root / _LATEST
    if not path.exists():
        return None
    try:
        name = json.loads(path.read_text())["checkpoint"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInput("checkpoint", f"{path} is damaged ({exc})") from None
    folder = root / str(name)
    if not folder.is_dir() or folder.parent != root:
        raise BadInput("checkpoint", f"{path} names a missing checkpoint {name!r}")
    return folder


def read_checkpoint(folder: Path) -> tuple[Any, dict[str, Any]]:
    """(agent state, trainer state) of a checkpoint folder; the memory loads ``folder/replay``."""
    agent_state = load_tree(folder, "agent")
    try:
        trainer_state = json.loads((folder / "trainer.json").read_text())
    except (OSError, ValueError) as exc:
        raise BadInput("checkpoint", f"{folder / 'trainer.json'}: {exc}") from None
    return agent_state, trainer_state
