"""The guide's RL parameter freeze flags and ``nn.init_from_pretrained``, applied to a learner's
network right after it is built.

Freeze flags (all under ``nn``) name parameter-name prefixes of rulka's networks:

=================================  ===========================  ==============================
flag                               IQN (``IQNNetwork``)         PPO / GRPO / DPO (``ActorCritic``)
=================================  ===========================  ==============================
``vis.freeze``                     ``img_head.``                ``img_head.``
``float.freeze``                   ``float_feature_extractor.`` ``float_feature_extractor.``
``encoder.freeze``                 ``fusion.``                  ``fusion.``
``iqn.freeze``                     ``iqn_fc.``                  (IQN only: refused)
``decoder.shared_trunk_freeze``    ``trunk.`` (pre_tau only)     ``trunk.``
``decoder.advantage.freeze``       ``head.advantage.``          ``policy_head.``
``decoder.value.freeze``           ``head.value.``              ``value_head.``
=================================  ===========================  ==============================

IQN has a shared trunk only with ``nn.decoder.shared_input: pre_tau`` (``rulka.agents.iqn.network``):
with post_tau ``shared_trunk_freeze`` is refused as for a learner without one.

Names are matched after removing torch.compile's ``_orig_mod.`` segments, so a compiled module's
``_orig_mod.img_head.0.weight`` is frozen by ``img_head.``. A frozen tensor gets
``requires_grad=False`` and leaves the optimizer's parameter groups; the active prefixes (those
matching at least one tensor of this network) are logged at start. IQN resets
(``rulka.agents.iqn.reset``) skip the same tensors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from rulka.errors import ConfigError
from rulka.nn.pretrained import load_pretrained, normalise_name
from rulka.nn.topology import (  # noqa: F401  (the torch-free half, re-exported for its callers)
    FREEZE_FLAGS,
    RESET_KEYS,
    NetworkKind,
    flag_prefixes,
    network_kind,
)

log = logging.getLogger(__name__)


def freeze_prefixes(cfg: Any, kind: NetworkKind) -> list[str]:
    """The prefixes the config's freeze flags name for this network kind; ConfigError for a flag
    set on a learner it does not apply to (``iqn.freeze`` on PPO, ``shared_trunk_freeze`` on IQN
    without pre_tau)."""
    out: list[str] = []
    for path in FREEZE_FLAGS:
        if not cfg.get(path):
            continue
        prefixes = flag_prefixes(cfg, path, kind)
        if not prefixes:
            raise ConfigError(f"config key `{path}` does not apply to training.algorithm "
                              f"{cfg.training.algorithm} (no such part in its network)")
        out.extend(prefixes)
    return out


def matches(name: str, prefixes: Iterable[str]) -> bool:
    n = normalise_name(name)
    return any(n.startswith(p) for p in prefixes)


def apply_freeze(module: nn.Module, prefixes: Iterable[str]) -> dict[str, int]:
    """``requires_grad=False`` on every parameter whose normalised name starts with a prefix;
    returns ``{active prefix: number of tensors}`` (prefixes matching nothing are left out)."""
    prefixes = list(prefixes)
    counts: dict[str, int] = {}
    for name, p in module.named_parameters():
        n = normalise_name(name)
        for pre in prefixes:
            if n.startswith(pre):
                p.requires_grad_(False)
                counts[pre] = counts.get(pre, 0) + 1
    return counts


def drop_frozen(optimizer: torch.optim.Optimizer) -> int:
    """Remove parameters with ``requires_grad=False`` from the optimizer's groups (before its first
    step); returns how many were removed."""
    removed = 0
    for group in optimizer.param_groups:
        keep = [p for p in group["params"] if p.requires_grad]
        removed += len(group["params"]) - len(keep)
        group["params"] = keep
    return removed


def prepare_network(cfg: Any, net: nn.Module, optimizer: torch.optim.Optimizer, kind: NetworkKind,
                    copies: Iterable[nn.Module | None] = ()) -> dict[str, Any]:
    """Load the Hugging Face backbones' pretrained weights (``rulka.nn.hf``), then
    ``nn.init_from_pretrained``, into ``net`` and its ``copies`` (IQN's target, GRPO/DPO's
    reference); then apply the freeze flags to ``net`` and take the frozen tensors out of the
    optimizer. Returns what it did (``loaded``: tensor names, ``frozen``: active prefixes)."""
    info: dict[str, Any] = {"loaded": [], "frozen": {}, "hub_tensors": 0}
    if any(type(m).__name__ in ("HfVisionBackbone", "HfEmbeddingTrunk") for m in net.modules()):
        from rulka.nn.hf import load_hub_weights

        info["hub_tensors"] = load_hub_weights(net)  # the pretrained HF weights, then rulka's own
        for other in copies:
            if other is not None:
                other.load_state_dict(net.state_dict())
        log.info("Hugging Face backbones: %d pretrained tensors loaded", info["hub_tensors"])
    folder = str(cfg.nn.init_from_pretrained or "").strip()
    if folder:
        info["loaded"] = load_pretrained(net, folder)
        for other in copies:
            if other is not None:
                other.load_state_dict(net.state_dict())
        log.info("nn.init_from_pretrained: %d tensors from %s", len(info["loaded"]), folder)
    prefixes = freeze_prefixes(cfg, kind)
    if prefixes:
        counts = apply_freeze(net, prefixes)
        missing = [p for p in prefixes if p not in counts]
        drop_frozen(optimizer)
        info["frozen"] = counts
        log.info("frozen parameter prefixes: %s%s",
                 ", ".join(f"{p} ({n} tensors)" for p, n in counts.items()) or "none",
                 f"; not in this network: {', '.join(missing)}" if missing else "")
    return info
