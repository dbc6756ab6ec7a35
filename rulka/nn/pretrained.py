"""The folders ``nn.init_from_pretrained`` loads, and the one ``rulka pretrain`` writes.

``rulka pretrain``'s layout: ``model.safetensors`` (tensors by parameter name, never pickle) and
``rulka_pretrained.json`` (``{"format": 1, "network": "iqn" | "policy" | "encoder", "source": ...,
"spec": {...}}``, the network spec it was trained with, for the reader's information).

A trainer's folders load too (``read_folder``): a run folder (its ``weights/``), ``weights/`` or
``best/`` (``policy.safetensors``: the published actor tensors, named as the network's), or a
checkpoint ``checkpoints/ckpt-N/`` (``agent.safetensors`` + ``agent.json``, checked against its
manifest: the online network of IQN, the network of PPO/GRPO/DPO). Each of these also holds the
guide's ``hf_transformer_vis/`` / ``hf_transformer_fusion/`` when the network has Hugging Face
parts (``rulka.nn.hf.save_hf_parts``); rulka's own file already carries their tensors, so loading
the folder reads that file alone. One of those sub-folders named itself loads that part only (its
tensors under the part's place in rulka's networks, ``rulka.nn.hf.HF_PARTS``); they are also for
transformers users (``AutoModel.from_pretrained``, or a later run's ``model_name_or_path``).

Loading copies every tensor whose name (``_orig_mod.`` removed) exists in the target network with
the same shape; tensors the file lacks keep their fresh initialisation (a visual pretrain holds only
``img_head.*``), and tensors the network lacks are skipped (IQN's ``exploration`` entry). A tensor
with the same name and another shape, or a folder that matches nothing, is a ConfigError naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from rulka.errors import ConfigError
from rulka.nn.blocks import normalise_name  # noqa: F401 - the name lives below both pretrained and hf

TENSORS = "model.safetensors"
META = "rulka_pretrained.json"


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


POLICY = "policy.safetensors"  # rulka.envs.sim.policy.POLICY_FILE: a trainer's weights/ and best/
AGENT = "agent.safetensors"  # a trainer checkpoint folder (rulka.trainer.checkpoint_store)


def read_folder(folder: str | Path) -> dict[str, torch.Tensor]:
    """The network tensors of a folder ``nn.init_from_pretrained`` may name (the module docstring
    lists them), by parameter name; a ConfigError says what the folder lacks."""
    key = "config key `nn.init_from_pretrained`"
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{key}: {folder} is not a folder")
    from rulka.nn.hf import HF_PARTS

    if folder.name in HF_PARTS and (folder / "config.json").is_file() and not (folder / META).is_file():
        return _hf_part(folder, HF_PARTS[folder.name])
    if (folder / TENSORS).is_file():
        read_meta(folder)
        return load_file(str(folder / TENSORS))
    for policy in (folder / POLICY, folder / "weights" / POLICY):
        if policy.is_file():
            try:
                return load_file(str(policy))
            except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: say so in one line
                raise ConfigError(f"{key}: cannot read {policy}: {str(exc).splitlines()[0]}") from None
    if (folder / AGENT).is_file():
        return _checkpoint_network(folder)
    raise ConfigError(f"{key}: {folder} holds none of {TENSORS} (rulka pretrain), {POLICY} (a run's weights/ "
                      f"or best/, or the run folder) or {AGENT} (a checkpoint folder)")


def _hf_part(folder: Path, prefix: str) -> dict[str, torch.Tensor]:
    """One HF part in transformers' layout, its tensors under the part's place in rulka's networks.
    Read through transformers (its files may name tensors otherwise than the model in memory
    does); trust_remote_code stays off."""
    from rulka.nn.hf import check_safetensors_folder, require_transformers

    tf = require_transformers("`nn.init_from_pretrained` on a transformers folder")
    check_safetensors_folder(str(folder), "config key `nn.init_from_pretrained`")
    try:
        model = tf.AutoModel.from_pretrained(str(folder), use_safetensors=True)
    except Exception as exc:  # noqa: BLE001 - missing, pickle-only or damaged weights: one line
        raise ConfigError(f"config key `nn.init_from_pretrained`: cannot load {folder} with transformers: "
                          f"{str(exc).splitlines()[0]}") from None
    return {prefix + k: v for k, v in model.state_dict().items()}


def _checkpoint_network(folder: Path) -> dict[str, torch.Tensor]:
    """The learner's network from a trainer checkpoint folder: IQN's ``online``, the actor-critic's ``net``."""
    from rulka.checkpoint_format import load_tree, verify_manifest
    from rulka.errors import BadInput

    try:
        verify_manifest(folder)
        state = load_tree(folder, "agent")
    except BadInput as exc:
        raise ConfigError(f"config key `nn.init_from_pretrained`: checkpoint {folder} is damaged: {exc}") from None
    for part in ("online", "net"):
        tensors = state.get(part) if isinstance(state, dict) else None
        if isinstance(tensors, dict) and tensors and all(torch.is_tensor(v) for v in tensors.values()):
            return tensors
    raise ConfigError(f"config key `nn.init_from_pretrained`: checkpoint {folder} holds no IQN (online) or "
                      f"PPO/GRPO/DPO (net) network")


def load_pretrained(net: nn.Module, folder: str | Path) -> list[str]:
    """Copy the folder's tensors into ``net`` (see the module docstring); returns the names loaded."""
    folder = Path(folder)
    saved = read_folder(folder)
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
