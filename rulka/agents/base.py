"""What the built-in learners share, written once: the learning rate of ``training.lr_schedule``
times the cooldown's factor, soft target updates, the checkpoint's state from a list of what is
saved, and ``get_actor`` from the actor class and the published weights.

A learner lists what it saves: ``saved`` names its attributes with ``state_dict`` /
``load_state_dict`` (networks, optimizers, scalers; one that is None is skipped; a pair
``(key, attribute)`` saves an attribute under another key), ``counters``
its integer counters (saved under ``"counters"``). What else it keeps (a spec, a tensor) goes
through ``extra_state`` / ``load_extra_state``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rulka.config.schedules import exponential_schedule
from rulka.interfaces import ActorModule, TrainingAgent


@torch.no_grad()
def soft_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """``target <- tau * online + (1 - tau) * target`` for the parameters, in place; buffers (an
    input normalisation, running statistics) are copied."""
    for t, o in zip(target.parameters(), online.parameters()):
        t.lerp_(o.detach(), tau)
    for b_t, b_o in zip(target.buffers(), online.buffers()):
        b_t.copy_(b_o)


class Learner(TrainingAgent):
    """A ``TrainingAgent`` with the shared parts above. Subclasses set ``saved``, ``counters`` and
    ``actor_class`` and implement ``train``, ``actor_spec`` and ``actor_weights``."""

    saved: tuple[str | tuple[str, str], ...] = ()
    counters: tuple[str, ...] = ()
    actor_class: type[ActorModule]  # built with ``actor_spec()["kwargs"]`` and a seed of its own

    frames_played = 0
    actor_seeds: np.random.Generator | None = None  # the actors' seeds (None: fresh entropy)

    def scheduled_lr(self, knots: list) -> float:
        """The rate ``knots`` give at ``frames_played``, times the cooldown's ``lr_factor``."""
        return float(exponential_schedule(knots, self.frames_played) * self.lr_factor)

    def get_actor(self) -> ActorModule:
        seeds = self.actor_seeds if self.actor_seeds is not None else np.random.default_rng()
        actor = self.actor_class(**self.actor_spec()["kwargs"], seed=int(seeds.integers(2**31)))
        actor.load_weights(self.actor_weights())
        return actor

    @staticmethod
    def module_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """A network's tensors as published (detached, not copied: the trainer encodes them at once)."""
        return {k: v.detach() for k, v in module.state_dict().items()}

    # -- checkpoints ----------------------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        """What it saves besides ``saved`` and ``counters``."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Read back what ``extra_state`` wrote (``state`` is the whole saved state)."""

    def _saved_parts(self) -> list[tuple[str, Any]]:
        """(key, object) of each part in ``saved`` that is there (not None)."""
        pairs = [(entry, entry) if isinstance(entry, str) else entry for entry in self.saved]
        return [(key, getattr(self, attr)) for key, attr in pairs if getattr(self, attr) is not None]

    def state_dict(self) -> dict[str, Any]:
        state = {key: part.state_dict() for key, part in self._saved_parts()}
        state["counters"] = {name: int(getattr(self, name)) for name in self.counters}
        return {**state, **self.extra_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_extra_state(state)
        for key, part in self._saved_parts():
            if state.get(key):
                part.load_state_dict(state[key])
        counters = state.get("counters", state)  # checkpoints written before had them at the top
        for name in self.counters:
            if name in counters:
                setattr(self, name, int(counters[name]))
