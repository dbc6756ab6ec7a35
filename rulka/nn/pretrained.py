"""The folder ``nn.init_from_pretrained`` loads and ``rulka pretrain`` writes.

Layout: ``model.safetensors`` (tensors by parameter name, never pickle) and ``rulka_pretrained.json``
(``{"format": 1, "network": "iqn" | "policy" | "encoder", "source": ..., "spec": {...}}``, the
network spec it was trained with, for the reader's information). Loading copies every tensor whose
name (``_orig_mod.`` removed) exists in the target network with the same shape; tensors the file
lacks keep their fresh initialisation (a visual pretrain holds only ``img_head.*``). A tensor with
the same name and another shape, or a file that matches nothing, is a ConfigError naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from rulka.errors import ConfigError

TENSORS = "model.safetensors"
META = "rulka_pretrained.json"


def normalise_name(name: str) -> str:
    """A parameter name without torch.compile's ``_orig_mod.`` segments."""
    return ".".join(part for part in name.split(".") if part != "_orig_mod")


def save_pretrained(folder: str | Path, tensors: dict[str, torch.Tensor], *, network: str,
                    spec: dict[str, Any] | None = None, source: str = "") -> Path:
    """Write ``tensors`` and the metadata into ``folder`` (created); returns the folder."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    flat = {normalise_name(k): v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    save_file(flat, str(out / TENSORS))
    (out / META).write_text(json.dumps({"format": 1, "network": network, "source": source, "spec": spec or {}},
                                       indent=2) + "\n")
    return out


def read_meta(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / META
    if not path.is_file():
        raise ConfigError(f"config key `nn.init_from_pretrained`: {folder} has no {META} (write it with rulka pretrain)")
    return json.loads(path.read_text())


def load_pretrained(net: nn.Module, folder: str | Path) -> list[str]:
    """Copy the folder's tensors into ``net`` (see the module docstring); returns the names loaded."""
    folder = Path(folder)
    path = folder / TENSORS
    if not path.is_file():
        raise ConfigError(f"config key `nn.init_from_pretrained`: no {TENSORS} in {folder}")
    read_meta(folder)
    saved = load_file(str(path))
    own = {normalise_name(k): v for k, v in net.state_dict().items()}
    loaded, wrong = [], []
    for name, t in saved.items():
        target = own.get(normalise_name(name))
        if target is None:
            continue
        if target.shape != t.shape:
            wrong.append(f"{name} {tuple(t.shape)} vs {tuple(target.shape)}")
            continue
        with torch.no_grad():
            target.copy_(t.to(target.dtype))
        loaded.append(name)
    if wrong:
        raise ConfigError("config key `nn.init_from_pretrained`: shapes differ from this network's: "
                          + "; ".join(wrong[:5]) + (" ..." if len(wrong) > 5 else ""))
    if not loaded:
        raise ConfigError(f"config key `nn.init_from_pretrained`: no tensor in {folder} matches this network's names")
    return sorted(loaded)
