"""Saved policies for ``rulka sim render``: actor weights in safetensors with their actor spec.

A policy file is ``policy.safetensors``: the actor's tensors, plus a metadata entry
``actor_spec`` holding JSON ``{"actor": "<registry name or module:Class>", "kwargs": {...}}``
(what ``TrainingAgent.actor_spec()`` returns; ``run_config`` inside it, when present, describes
the env the actor was trained on). Nothing is unpickled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rulka.errors import UserError

POLICY_FILE = "policy.safetensors"


def save_policy(path: str | Path, weights: Mapping[str, Any], actor_spec: Mapping[str, Any]) -> Path:
    """Write ``weights`` (name -> torch tensor or numpy array) and ``actor_spec`` to ``path``."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    tensors = {k: (v if torch.is_tensor(v) else torch.as_tensor(np.asarray(v))).detach().contiguous().cpu()
               for k, v in weights.items()}
    path = Path(path)
    save_file(tensors, str(path), metadata={"actor_spec": json.dumps(dict(actor_spec))})
    return path


def find_policy_file(path: str | Path) -> Path:
    """``path`` itself when it is a file, else ``policy.safetensors`` in it or in its ``weights/``."""
    p = Path(path)
    if p.is_file():
        return p
    for candidate in (p / POLICY_FILE, p / "weights" / POLICY_FILE):
        if candidate.is_file():
            return candidate
    raise UserError(
        f"no policy at '{path}': give a {POLICY_FILE} file (actor tensors with an 'actor_spec' "
        f"metadata entry) or a run folder holding one (or weights/{POLICY_FILE})"
    )


def load_policy(path: str | Path) -> tuple[Any, dict[str, Any]]:
    """The actor saved at ``path`` (built from the registry, weights loaded) and its spec."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    from rulka.registry import resolve

    file = find_policy_file(path)
    try:
        with safe_open(str(file), framework="pt") as fh:
            meta = fh.metadata() or {}
        tensors = load_file(str(file))
    except Exception as exc:  # a corrupt or foreign file: say so in one line
        raise UserError(f"cannot read policy file '{file}': {exc}") from exc
    try:
        spec = json.loads(meta["actor_spec"])
        name = spec["actor"]
    except (KeyError, ValueError, TypeError) as exc:
        raise UserError(f"policy file '{file}' has no valid 'actor_spec' metadata entry") from exc
    actor = resolve("actor", str(name))(**dict(spec.get("kwargs", {})))
    actor.load_weights(tensors)
    return actor, spec
