"""IQN network resets: the guide's ``nn.training`` reset knobs, a shrink-and-perturb reset of the
online network (the lineage's periodic soft reset).

A reset is due when ``reset_every_n_frames_generated`` env frames were generated since the last one,
or once when ``single_reset_flag`` differs from the value the run last saw (bump it in the config
and resume the run: one reset at the next update). A reset

1. draws a freshly initialised network ``fresh`` of the same spec and moves every online tensor
   toward it: ``w <- (1 - overall_reset_mul_factor) * w + overall_reset_mul_factor * fresh``
   (0: nothing happens, 1: a full re-initialisation);
2. then resets the advantage head's last layer harder:
   ``w <- last_layer_reset_factor * w + (1 - last_layer_reset_factor) * fresh`` (0: that layer is
   fully re-initialised, 1: it keeps step 1's value);
3. grants the learner ``additional_transition_after_reset`` extra samples (transitions trained on)
   without new data, so the network re-learns from the replay memory at once: the trainer takes the
   credit with ``take_sample_credit`` and hands it to its rate limiter.

Tensors the freeze flags name (``rulka.nn.freeze``) are left as they are in both steps. The target
network is not touched: it follows the online network through its soft updates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from rulka.nn.freeze import matches


@dataclasses.dataclass
class ResetSettings:
    single_reset_flag: int = 0
    reset_every_n_frames_generated: int = 40_000_000_000_000
    additional_transition_after_reset: int = 1_600_000
    last_layer_reset_factor: float = 0.8
    overall_reset_mul_factor: float = 0.01

    @classmethod
    def from_config(cls, cfg: Any) -> ResetSettings:
        t = cfg.nn.training
        return cls(single_reset_flag=int(t.single_reset_flag),
                   reset_every_n_frames_generated=int(t.reset_every_n_frames_generated),
                   additional_transition_after_reset=int(t.additional_transition_after_reset),
                   last_layer_reset_factor=float(t.last_layer_reset_factor),
                   overall_reset_mul_factor=float(t.overall_reset_mul_factor))


def last_layer_names(net: nn.Module) -> list[str]:
    """Parameter names of the advantage head's last layer (its last module with parameters); with
    action branches (``rulka.agents.iqn.branching``) the last layer of every branch's stream."""
    head = net.head.advantage
    branches = getattr(head, "branches", None)
    if branches is not None:
        return [n for i, b in enumerate(branches) for n in _last_layer(b, f"head.advantage.branches.{i}")]
    return _last_layer(head, "head.advantage")


def _last_layer(head: nn.Module, prefix: str) -> list[str]:
    last = [name for name, m in head.named_children() if any(True for _ in m.parameters(recurse=False))][-1]
    return [f"{prefix}.{last}.{p}" for p, _ in getattr(head, last).named_parameters()]


@torch.no_grad()
def shrink_and_perturb(net: nn.Module, fresh: nn.Module, overall: float, last_layer: float,
                       last_names: Iterable[str], skip_prefixes: Iterable[str] = ()) -> list[str]:
    """Steps 1 and 2 of the module docstring on ``net`` in place; returns the names changed."""
    skip = list(skip_prefixes)
    last_names = set(last_names)
    new = dict(fresh.named_parameters())
    changed = []
    for name, p in net.named_parameters():
        if matches(name, skip):
            continue
        f = new[name].to(p.device, p.dtype)
        p.mul_(1.0 - overall).add_(f, alpha=overall)
        if name in last_names:
            p.mul_(last_layer).add_(f, alpha=1.0 - last_layer)
        changed.append(name)
    return changed


class IQNResetter:
    """Decides when the online network is reset and does it (see the module docstring)."""

    def __init__(self, settings: ResetSettings, skip_prefixes: Iterable[str] = ()) -> None:
        self.settings = settings
        self.skip_prefixes = list(skip_prefixes)
        self.last_reset_frames = 0
        self.flag_seen = settings.single_reset_flag
        self.resets = 0
        self._credit = 0

    def due(self, frames_played: int) -> bool:
        s = self.settings
        return (frames_played - self.last_reset_frames >= s.reset_every_n_frames_generated
                or self.flag_seen != s.single_reset_flag)

    def step(self, agent: Any) -> bool:
        """Reset ``agent.online`` if due at ``agent.frames_played``; returns whether it did."""
        if not self.due(agent.frames_played):
            return False
        from rulka.agents.iqn.network import IQNNetwork

        s = self.settings
        fresh = IQNNetwork(agent.spec)
        shrink_and_perturb(agent.online, fresh, s.overall_reset_mul_factor, s.last_layer_reset_factor,
                           last_layer_names(agent.online), self.skip_prefixes)
        self.last_reset_frames = int(agent.frames_played)
        self.flag_seen = s.single_reset_flag
        self.resets += 1
        self._credit += s.additional_transition_after_reset
        return True

    def take_sample_credit(self) -> int:
        """Extra samples granted by resets since the last call (the trainer's limiter takes them)."""
        credit, self._credit = self._credit, 0
        return credit

    def state_dict(self) -> dict[str, int]:
        return {"last_reset_frames": self.last_reset_frames, "flag_seen": self.flag_seen, "resets": self.resets}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last_reset_frames = int(state.get("last_reset_frames", 0))
        self.flag_seen = int(state.get("flag_seen", self.settings.single_reset_flag))
        self.resets = int(state.get("resets", 0))
