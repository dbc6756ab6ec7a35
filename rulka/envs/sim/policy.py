"""Saved policies for ``rulka sim render``: actor weights in safetensors with their actor spec.

A policy file is ``policy.safetensors``: the actor's tensors, plus a metadata entry
``actor_spec`` holding JSON ``{"actor": "<registry name>", "kwargs": {...}}`` (a ``module:Class``
actor is built only when the command line allows its module, ``--allow-plugin``; the kwargs are
plain data, checked against the actor's declared parameters before it is built)
(what ``TrainingAgent.actor_spec()`` returns; ``run_config`` inside it, when present, describes
the env the actor was trained on). Nothing is unpickled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rulka.errors import UserError, one_line

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


def read_policy_file(path: str | Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """(file, tensors, actor spec) of the policy at ``path``; a missing, truncated or foreign file,
    or one without a valid ``actor_spec``, raises a one-line UserError."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    file = find_policy_file(path)
    try:
        with safe_open(str(file), framework="pt") as fh:
            meta = fh.metadata() or {}
        tensors = load_file(str(file))
    except Exception as exc:  # noqa: BLE001 - a corrupt or foreign file: say so in one line
        raise UserError(f"cannot read policy file '{file}': {one_line(exc)}") from exc
    try:
        spec = json.loads(meta["actor_spec"])
        if not isinstance(spec, dict) or not isinstance(spec["actor"], str):
            raise TypeError("actor_spec is not {'actor': name, ...}")
        if not isinstance(spec.get("kwargs", {}), dict):
            raise TypeError("actor_spec kwargs is not a mapping")
    except (KeyError, ValueError, TypeError) as exc:
        raise UserError(f"policy file '{file}' has no valid 'actor_spec' metadata entry") from exc
    return file, tensors, spec


def spec_config(spec: Mapping[str, Any]) -> Any:
    """The run config a policy file carries (``rulka.net.messages.RunConfig``: ``run_config_json``,
    what rulka-trainer writes, or a plain ``run_config`` mapping) as a RulkaConfig; None when it
    carries none."""
    from rulka.errors import BadInput
    from rulka.net.messages import RunConfig

    carried = RunConfig.from_wire(spec)
    if carried is None:
        return None
    try:
        return carried.build()
    except BadInput as exc:
        raise UserError(f"the policy's run config is unreadable: {exc}") from None


def load_policy(path: str | Path, cfg: Any = None) -> tuple[Any, dict[str, Any]]:
    """The actor saved at ``path`` and its spec. The actor is built as a worker builds it (registry
    name, or an allowed ``module:Class``; the spec's kwargs, plus ``cfg`` when it takes one) and its weights
    loaded; any mismatch between the file and its actor is a one-line UserError."""
    from rulka.plugins import build_plugin

    file, tensors, spec = read_policy_file(path)
    name = spec["actor"]
    try:
        actor = build_plugin("actor", name, spec.get("kwargs"), cfg)
    except UserError as exc:  # a refused or unknown actor, or arguments it does not declare
        raise UserError(f"policy file '{file}': actor_spec: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - kwargs the actor refuses (a damaged or foreign spec)
        raise UserError(f"policy file '{file}': actor '{name}' cannot be built from its spec: "
                        f"{one_line(exc)}") from exc
    try:
        actor.load_weights(tensors)
    except Exception as exc:  # noqa: BLE001 - wrong shapes, missing or extra tensors
        raise UserError(f"policy file '{file}' does not fit its actor '{name}': {one_line(exc)}") from exc
    return actor, spec
