"""A replay memory's files: arrays in ``replay.npz`` and plain data in ``replay.json``, each
replaced atomically; read back without unpickling anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rulka.errors import BadInput


def write_replay(directory: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Write ``arrays`` and ``meta`` into ``directory`` (created if needed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / "replay.npz.tmp"
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    tmp.replace(directory / "replay.npz")
    (directory / "replay.json.tmp").write_text(json.dumps(meta))
    (directory / "replay.json.tmp").replace(directory / "replay.json")


def read_replay(directory: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(meta, arrays) as ``write_replay`` wrote them; ``BadInput`` when they cannot be read."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / "replay.json").read_text())
        with np.load(directory / "replay.npz", allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise BadInput("replay", f"cannot read saved memory in {directory}: {exc}") from None
    return meta, arrays
