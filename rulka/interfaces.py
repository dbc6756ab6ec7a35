"""The pluggable interfaces shared by the three roles.

A run names its plugins in YAML by registry name, or ``module:Class`` from a module the command line
allows (``--allow-plugin``; see ``rulka.registry`` and ``rulka.trust``):

- worker side: the env, the ``ActorModule`` (the policy a worker runs) and the
  ``SampleCompressor`` (segment -> bytes);
- trainer side: the ``Memory`` (bytes -> segment -> stored transitions -> batches) and the
  ``TrainingAgent`` (batch -> update -> new actor weights).

Off-policy learners (IQN, SAC) sample random batches from a replay ``Memory``; on-policy,
trajectory-level learners (PPO, GRPO, DPO) take whole trajectories when ``Memory.ready()``.
Both go through the same worker, server and segment format.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rulka.segment import Segment

if TYPE_CHECKING:
    from rulka.memory.files import ChunkStore

Weights = Mapping[str, Any]  # name -> torch.Tensor or np.ndarray; crosses the wire as safetensors


class ActorModule(ABC):
    """The policy a worker runs next to the env. Inference happens on the worker."""

    @abstractmethod
    def act(self, obs: Any, test: bool = False) -> Any:
        """Return the action for ``obs``; ``test=True`` asks for the greedy/evaluation action."""

    def act_with_info(self, obs: Any, test: bool = False) -> tuple[Any, dict[str, Any]]:
        """Action plus per-step extras recorded in the segment as ``extra/<name>``
        (e.g. ``q_values``, ``greedy``, ``logprob``). Default: no extras."""
        return self.act(obs, test), {}

    def reset(self) -> None:  # noqa: B027 - optional hook
        """Called at the start of each episode."""

    @abstractmethod
    def load_weights(self, weights: Weights) -> None:
        """Replace the parameters with ``weights`` (as published by the trainer)."""

    @abstractmethod
    def get_weights(self) -> dict[str, Any]:
        """Current parameters, name -> tensor/array."""


class SampleCompressor(ABC):
    """Worker side: turns a Segment into bytes (and back, for the memory and for verify mode).

    Must be lossless for everything a Memory uses; must never pickle.
    """

    codec: str = ""
    """Name written in each segment's header, by which the trainer finds the decoder (a registered
    compressor name); empty: the name the config gives the plugin."""

    @abstractmethod
    def compress(self, segment: Segment) -> bytes: ...

    @abstractmethod
    def decompress(self, data: bytes) -> Segment:
        """Raise ``rulka.errors.BadInput`` on malformed data."""


class Memory(ABC):
    """Trainer side: stores what workers collected and hands batches to the agent."""

    @abstractmethod
    def append(self, segment: Segment) -> int:
        """Store one segment (already decompressed, deduplicated and authenticated).
        Return the number of transitions added."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of transitions stored (trainable)."""

    samples_per_insert: float | None = None
    """How many times, on average, each stored transition should be trained on; the trainer's
    rate limiter holds it (None: ``trainer.rate_limit.samples_per_insert``, else
    ``trainer.max_updates_per_env_step`` x batch size, else no limit)."""

    start_learning_size: int = 0
    """Transitions stored before training starts."""

    sample_while_training: bool = False
    """Whether ``sample`` may run on another thread while the agent trains on the previous batch
    (the trainer's ``trainer.prefetch_batches``). Set it only if nothing the agent calls during
    ``train`` (e.g. a batch's priority callback) writes what ``sample`` reads, or both take a lock.
    ``append`` and every other call still come from one thread, never during a prefetch."""

    @property
    def held_out_transitions(self) -> int:
        """Transitions appended so far (cumulative, counted in ``append``'s return) that are
        not trained on, e.g. a held-out test store. The trainer's rate limiter counts inserts
        without them: they are not trainable samples. Default 0 (every transition is trained on)."""
        return 0

    def sample(self, batch_size: int) -> Any:
        """Off-policy: a random batch. On-policy memories may not implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not sample random batches")

    def ready(self) -> bool:
        """On-policy: whether a full batch of trajectories is available for ``take()``."""
        return False

    def take(self) -> Any:
        """On-policy: remove and return the next batch of trajectories."""
        raise NotImplementedError(f"{type(self).__name__} is not a trajectory memory")

    def set_policy_version(self, version: int) -> None:  # noqa: B027 - optional hook
        """The trainer has just published weights ``version``. On-policy memories use it to drop
        data collected by weights older than their policy-lag cap; replay memories ignore it."""

    def rebuild_transitions(self, segment: Segment) -> list[dict[str, np.ndarray]]:
        """Verify mode: the transitions this memory would build from ``segment``, in order,
        each as ``{"obs": ..., "action": ..., "reward": ..., "next_obs": ..., "done": ...}``."""
        raise NotImplementedError

    def save(self, directory: Path, chunks: ChunkStore | None = None) -> None:  # noqa: B027 - optional
        """Write the stored contents into ``directory`` (own files, not the checkpoint).

        ``chunks``: the chunk store the checkpoints share (``rulka.memory.files``); arrays
        written there as chunks cost disk writes only where their bytes changed since an earlier
        checkpoint. A memory whose ``save`` and ``load`` have no ``chunks`` parameter is called
        with ``directory`` alone and writes all of its files every checkpoint."""

    def load(self, directory: Path, chunks: ChunkStore | None = None) -> None:  # noqa: B027 - optional
        """Read back what ``save`` wrote (``chunks``: the store ``save`` was given)."""


class TrainingAgent(ABC):
    """Trainer side: one ``train`` call is one update on one batch."""

    batch_size: int | None = None
    """Transitions per batch the trainer samples for this agent (None: ``training.batch_size``)."""

    device: Any = "cpu"
    """Where it trains (``trainer.prefetch_batches: auto`` prefetches on CUDA)."""

    # -- optional abilities: the trainer uses them where the flag says the agent has them ----------
    follows_lr_schedule: bool = False
    """Whether it follows ``training.lr_schedule`` and multiplies its rate by ``lr_factor`` (what
    ``training.lr_cooldown_fraction`` needs)."""

    lr_factor: float = 1.0
    """The learning-rate multiplier the trainer's cooldown sets (``rulka.trainer.cooldown``)."""

    loads_actor_weights: bool = False
    """Whether ``load_actor_weights`` and ``reset_optimizer`` work (what ``training.lr_cooldown_from_best``
    and ``training.lr_cooldown_end_on_average`` need)."""

    def load_actor_weights(self, weights: dict[str, Any]) -> None:
        """Put published weights (``actor_weights()`` of an earlier version) into the networks it
        trains; ValueError when they do not fit. Only where ``loads_actor_weights``."""
        raise NotImplementedError(f"{type(self).__name__} cannot load published weights")

    def reset_optimizer(self) -> None:
        """Forget the optimizer's moments (``training.lr_cooldown_reset_optimizer``). Only where
        ``loads_actor_weights``."""
        raise NotImplementedError(f"{type(self).__name__} cannot reset its optimizer")

    def take_sample_credit(self) -> int:
        """Samples it may draw beyond the replay ratio without new data (granted by network resets;
        the trainer takes them after each update). 0 by default."""
        return 0

    @abstractmethod
    def train(self, batch: Any) -> dict[str, float]:
        """Update on ``batch``; return metrics with namespaced names (``losses/...``). Values are
        floats or 0-dim tensors still on the device: the trainer keeps the last update's metrics and
        reads them with ``float()`` only when it logs, so a GPU update need not wait for the host."""

    @abstractmethod
    def get_actor(self) -> ActorModule:
        """An ActorModule with the current weights (what workers will run)."""

    def actor_weights(self) -> dict[str, Any]:
        """The tensors workers load into their actor (what the trainer publishes). The default
        builds an actor with ``get_actor``; override it to hand out the trained network's tensors
        directly (no actor is built per publish)."""
        return self.get_actor().get_weights()

    @abstractmethod
    def actor_spec(self) -> dict[str, Any]:
        """Plain data a worker needs to build the matching ActorModule
        (``{"actor": "<registry name>", "kwargs": {...}}``, plain data); sent with the weights. A
        ``module:Class`` actor is built by a worker only when its command line allows the module."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: model, optimizer, schedules, counters."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
