"""Checkpoints without pickle: tensors in safetensors, everything else in JSON, written atomically.

A checkpoint is a folder ``checkpoints/ckpt-<n>/`` holding

- ``agent.safetensors`` + ``agent.json``: the agent's ``state_dict()`` (model, optimizer,
  schedules, counters): every tensor or array goes to safetensors, the rest of the tree (with
  references to the tensors) to JSON;
- ``trainer.json``: the trainer's counters, dedupe state, RNG states, journal position;
- ``hf_transformer_vis/``, ``hf_transformer_fusion/``: a network's Hugging Face parts in
  transformers' save_pretrained layout, when it has them (``rulka.nn.hf``; the guide's layout);
- ``replay/``: whatever ``Memory.save`` writes. A memory whose ``save`` takes ``chunks`` (the
  IQN and uniform replays) writes its arrays into ``checkpoints/chunks/``, shared by the
  checkpoints: files named by the SHA-256 of their bytes (``rulka.memory.files.ChunkStore``),
  so a checkpoint writes only the chunks whose bytes changed since the previous one (the frames
  stored since, the small transition arrays) and names the others;
- ``manifest.json``: the SHA-256 of every other file and the chunks the replay needs, written last.

The folder is written under a temporary name and renamed (its new chunks are fsynced before);
``checkpoints/latest.json`` (replaced atomically with ``os.replace``) names the newest complete
one, so a crash at any moment leaves the previous checkpoint intact and readable. Chunks no kept
checkpoint names are deleted after the new one is in place. The previous checkpoint is kept as
a fallback: ``load_latest`` checks every file against the manifest and every chunk against its
name and, when the newest checkpoint is damaged (a truncated or zero-filled file or chunk, a
garbage ``latest.json``), loads the one before with a warning. A chunk both checkpoints share
has one copy: if it is damaged, neither loads, and the error names it. Checkpoints whose replay
is one ``replay.npz`` (written before chunks) load as before.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rulka.checkpoint_format import CHUNKS, MANIFEST, load_tree, save_tree, verify_manifest, write_manifest
from rulka.errors import BadInput
from rulka.memory.files import CHUNK_BYTES, ChunkStore

_LATEST = "latest.json"
KEEP = 2  # the newest checkpoint and the one before it (the fallback)

log = logging.getLogger("rulka.trainer")


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never a mix."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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
                     memory: Any | None = None, chunk_bytes: int | None = CHUNK_BYTES,
                     extra: Callable[[Path], Any] | None = None) -> Path:
    """Write checkpoint ``number`` under ``root`` (the run's ``checkpoints/``) and make it the
    latest; older checkpoints, and chunks no kept checkpoint needs, are removed once the new one
    is in place. ``chunk_bytes``: the size of new replay chunks; None writes the replay whole
    (``Memory.save(directory)``, the layout before chunks). ``extra(folder)`` writes more files
    into the folder before its manifest (the Hugging Face parts). Returns its folder."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"ckpt-{number:06d}"
    tmp = root / f".ckpt-{number:06d}.tmp"
    for stale in root.glob(".ckpt-*.tmp"):  # left by a crash during an earlier write
        shutil.rmtree(stale, ignore_errors=True)
    tmp.mkdir()
    save_tree(tmp, "agent", agent_state)
    (tmp / "trainer.json").write_text(json.dumps(trainer_state))
    store = ChunkStore(root / CHUNKS, chunk_bytes) if chunk_bytes else None
    if memory is not None:
        save_memory(memory, tmp / "replay", store)
    if extra is not None:
        extra(tmp)
    written = {} if store is None or not store.used else {
        "chunks_written": store.chunks_written, "bytes_written": store.bytes_written,
        "chunks_reused": store.chunks_reused}
    write_manifest(tmp, number, store.used if store is not None else {}, written)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    atomic_write_text(root / _LATEST, json.dumps({"checkpoint": final.name, "number": number}))
    for old in checkpoint_folders(root)[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    prune_chunks(root)
    if written:
        log.info("checkpoint %s: replay wrote %.1f MB in %d new chunks, %d chunks unchanged", final.name,
                 store.bytes_written / 1e6, store.chunks_written, store.chunks_reused)
    return final


def _takes_chunks(method: Any) -> bool:
    try:
        return "chunks" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def save_memory(memory: Any, directory: Path, chunks: ChunkStore | None) -> None:
    """``memory.save(directory, chunks=chunks)``, or ``memory.save(directory)`` when there is no
    store or its ``save`` takes none (a plugin's memory written before chunks)."""
    if chunks is not None and _takes_chunks(memory.save):
        memory.save(directory, chunks=chunks)
    else:
        memory.save(directory)


def load_memory(memory: Any, directory: Path, chunks: ChunkStore | None) -> None:
    """The counterpart of ``save_memory`` for ``memory.load``."""
    if chunks is not None and _takes_chunks(memory.load):
        memory.load(directory, chunks=chunks)
    else:
        memory.load(directory)


def prune_chunks(root: Path) -> int:
    """Delete the chunks under ``root`` that no checkpoint folder's manifest names (and leftover
    temporary chunk files); nothing when a folder's needs cannot be read. Returns the count."""
    keep: set[str] = set()
    for folder in checkpoint_folders(root):
        try:
            needed = json.loads((folder / MANIFEST).read_text()).get("chunks", {})
            if not isinstance(needed, dict):
                raise TypeError("chunks is not a map")
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning("chunks not pruned: the needs of %s are unknown (%s)", folder.name, exc)
            return 0
        keep.update(str(d) for d in needed)
    return ChunkStore(root / CHUNKS).prune(keep)


def checkpoint_folders(root: Path) -> list[Path]:
    """Complete checkpoint folders under ``root``, newest (highest number) first."""
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        if p.is_dir() and p.name.startswith("ckpt-") and p.name[5:].isdigit():
            found.append((int(p.name[5:]), p))
    return [p for _, p in sorted(found, reverse=True)]


def load_latest(root: Path, memory: Any = None) -> tuple[Path, Any, dict[str, Any]] | None:
    """The newest intact checkpoint under ``root`` as (folder, agent state, trainer state), or
    None when there is none at all. ``memory`` (when given) loads the checkpoint's replay inside
    the same check, so a replay that does not load also falls back to the previous checkpoint.

    Raises UserError (one line naming each damaged checkpoint) when checkpoints exist but none
    is intact."""
    from rulka.errors import UserError

    candidates: list[Path] = []
    try:
        latest = latest_checkpoint(root)
        if latest is not None:
            candidates.append(latest)
    except BadInput as exc:
        log.warning("%s; looking for the newest intact checkpoint", exc)
    candidates += [p for p in checkpoint_folders(root) if p not in candidates]
    if not candidates:
        if (root / _LATEST).exists():
            raise UserError(f"{root / _LATEST} exists but no checkpoint folder is left in {root}")
        return None
    problems = []
    for folder in candidates:
        try:
            verify_manifest(folder)
            agent_state, trainer_state = read_checkpoint(folder)
            if memory is not None:
                load_memory(memory, folder / "replay", ChunkStore(root / CHUNKS))
        except BadInput as exc:
            problems.append(str(exc))
            log.warning("checkpoint %s is damaged: %s", folder.name, exc)
            continue
        except (OSError, ValueError, KeyError, TypeError, MemoryError) as exc:
            problems.append(f"{folder.name}: {type(exc).__name__}: {exc}")
            log.warning("checkpoint %s does not load: %s: %s", folder.name, type(exc).__name__, exc)
            continue
        if folder != candidates[0]:
            log.warning("resuming from the previous checkpoint %s (the newest one is damaged)", folder.name)
        return folder, agent_state, trainer_state
    raise UserError(f"no intact checkpoint in {root}: " + "; ".join(problems))


def oldest_journal_needed(root: Path, default: int) -> int:
    """The lowest journal number a kept checkpoint replays from: journals below it are covered
    by every checkpoint a resume could fall back to, and may be deleted."""
    numbers = [default]
    for folder in checkpoint_folders(root)[:KEEP]:
        try:
            numbers.append(int(json.loads((folder / "trainer.json").read_text())["journal_number"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return min(numbers)


PUBLISHED = "published.json"


def record_published(run_dir: Path, run_id: str, version: int) -> None:
    """Persist the highest weights version published (before it is sent), so that a resumed
    trainer never gives one version number to two different weight sets."""
    atomic_write_text(run_dir / PUBLISHED, json.dumps({"run_id": run_id, "version": version}))


def highest_published(run_dir: Path, run_id: str) -> int:
    """The version ``record_published`` kept for ``run_id`` (0 if none or unreadable)."""
    try:
        data = json.loads((run_dir / PUBLISHED).read_text())
        return int(data["version"]) if data.get("run_id") == run_id else 0
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0


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
