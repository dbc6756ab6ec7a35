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
from typing import Any, Literal

import torch
from torch import nn

from rulka.errors import ConfigError
from rulka.nn.pretrained import load_pretrained, normalise_name

log = logging.getLogger(__name__)

NetworkKind = Literal["iqn", "policy"]

# flag path -> (IQN prefixes, policy prefixes); an empty tuple: the flag does not apply
FREEZE_FLAGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "nn.vis.freeze": (("img_head.",), ("img_head.",)),
    "nn.float.freeze": (("float_feature_extractor.",), ("float_feature_extractor.",)),
    "nn.encoder.freeze": (("fusion.",), ("fusion.",)),
    "nn.iqn.freeze": (("iqn_fc.",), ()),
    "nn.decoder.shared_trunk_freeze": (("trunk.",), ("trunk.",)),  # IQN: pre_tau only (flag_prefixes)
    "nn.decoder.advantage.freeze": (("head.advantage.",), ("policy_head.",)),
    "nn.decoder.value.freeze": (("head.value.",), ("value_head.",)),
}


def network_kind(cfg: Any) -> NetworkKind | None:
    """``iqn`` or ``policy`` for the learners these flags apply to, else None."""
    algorithm = cfg.training.algorithm
    if algorithm == "iqn":
        return "iqn"
    if algorithm in ("ppo", "grpo", "dpo"):
        return "policy"
    return None


def flag_prefixes(cfg: Any, path: str, kind: NetworkKind) -> tuple[str, ...]:
    """The prefixes freeze flag ``path`` names in this network kind (empty: no such part)."""
    iqn, policy = FREEZE_FLAGS[path]
    if kind == "iqn" and path == "nn.decoder.shared_trunk_freeze" and cfg.nn.decoder.shared_input != "pre_tau":
        return ()  # IQN's trunk exists only with pre_tau
    return iqn if kind == "iqn" else policy


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


RESET_KEYS = ("single_reset_flag", "reset_every_n_frames_generated", "additional_transition_after_reset",
              "last_layer_reset_factor", "overall_reset_mul_factor")


def inert_keys(cfg: Any) -> list[str]:
    """Freeze flags, pretrained init, network topology, IQN transformer heads and IQN reset knobs set away from their
    defaults for a learner they do not apply to (``rulka.config.built.check_built`` refuses them)."""
    from rulka.config.sections import NnTrainingConfig

    out: list[str] = []
    algorithm = cfg.training.algorithm
    kind = network_kind(cfg)
    for path in FREEZE_FLAGS:
        if cfg.get(path) and (kind is None or not flag_prefixes(cfg, path, kind)):
            out.append(f"`{path}` does not apply to training.algorithm {algorithm}"
                       + (" with nn.decoder.shared_input post_tau (IQN's trunk is pre_tau's)" if kind == "iqn" else ""))
    nn_cfg = cfg.nn
    if kind != "iqn" and nn_cfg.decoder.shared_input != "post_tau":
        out.append(f"`nn.decoder.shared_input: {nn_cfg.decoder.shared_input}` places IQN's quantile (tau) modulation; "
                   f"training.algorithm {algorithm} has none (its trunk always reads the features: leave post_tau)")
    if kind is None:
        if nn_cfg.init_from_pretrained:
            out.append(f"`nn.init_from_pretrained` is read by IQN and PPO/GRPO/DPO, not training.algorithm {algorithm}")
        if nn_cfg.fusion_mode != "none" or (nn_cfg.vis.transformer is not None and not nn_cfg.vis.no_image):
            out.append(f"the fusion modes and transformer stems are built for IQN and PPO/GRPO/DPO, "
                       f"not training.algorithm {algorithm}")
    if kind != "iqn":
        if str(cfg.pretrain.demo_episodes).strip():
            out.append(f"`pretrain.demo_episodes` (demonstrations kept in the replay, DQfD) is read by IQN only, "
                       f"not training.algorithm {algorithm}")
        for head in ("advantage", "value"):
            if getattr(nn_cfg.decoder, head).transformer is not None:
                out.append(f"`nn.decoder.{head}.transformer` (IQN's transformer heads) does not apply to "
                           f"training.algorithm {algorithm}")
        default = NnTrainingConfig()
        for key in RESET_KEYS:
            if getattr(nn_cfg.training, key) != getattr(default, key):
                out.append(f"`nn.training.{key}` (IQN resets) does not apply to training.algorithm {algorithm}")
    return out
