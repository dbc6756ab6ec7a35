"""``worker`` (rulka's own): the episode loop, segments, outbox."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
)

from rulka.config.sections.common import Section
from rulka.errors import ConfigError


class WorkerConfig(Section):
    """A worker (gaming PC): policy, compression, bounded resend queue."""

    name: str | None = None
    """Worker name in logs and credentials (null = host name)."""
    actor: str | None = None
    """ActorModule plugin: registry name, or module:Class from a module allowed by --allow-plugin (null = training.algorithm)."""
    actor_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the actor plugin."""
    compressor: str = "zstd"
    """SampleCompressor plugin: registry name, or module:Class from a module allowed by --allow-plugin."""
    compressor_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the compressor plugin."""
    segment_max_steps: PositiveInt = 200
    """Steps per segment sent to the trainer (episodes are split into segments)."""
    unacked_limit_segments: PositiveInt = 10_000
    """Unacknowledged segments kept for resending."""
    unacked_memory_limit_mb: PositiveInt = 256
    """RAM for unacknowledged segments before spilling to disk."""
    spill_dir: Path | None = None
    """Folder for spilled segments (null = a folder in the run directory)."""
    spill_limit_mb: NonNegativeInt = 4096
    """Disk for spilled segments."""
    on_full: Literal["block", "drop_oldest"] = "block"
    """When the resend queue is full: pause collection, or drop the oldest segment (counted)."""
    num_envs: PositiveInt = 1
    """TMNF: game instance slots on this PC (ports user.base_tmi_port + 0..num_envs-1), one per game."""
    rollouts_per_start: PositiveInt = 1
    """Episodes run from one start (same reset seed) before drawing another; GRPO groups by start.

    Set it to grpo.grpo_group_size so each GRPO group compares rollouts from one start state;
    1 = a fresh start each episode."""
    max_steps_per_s: PositiveFloat | None = None
    """Cap on env steps per second (null = as fast as the env goes). A fast simulator would
    otherwise take the CPU a trainer on the same machine needs; a real game sets its own pace."""
    torch_threads: PositiveInt = 1
    """CPU threads torch may use for inference in the worker (1: fastest for one observation).
    One observation at a time: more threads only take cores from the game. numpy's BLAS gets
    the same limit (float-only IQN networks act in numpy on CPU)."""
    device: str = "auto"
    """Device the worker acts on: auto (cuda where torch sees a GPU), cpu, cuda, cuda:N.

    On CUDA the policy step runs in fp16 autocast with the CNN in channels_last,
    captured once as a CUDA graph; new weights are copied into it in place (docs/performance.md).
    cuda on a PC whose torch sees no GPU stops the worker with a one-line error."""
    cpu_int8: bool = True
    """CPU: an image network's dense heads act with int8 weights, float32 deciding near ties.

    The heads run with int8 weights (torch's dynamic quantisation), and the float32 advantages decide whenever the two best actions are within 10% of the spread of
    Q, so the greedy action stays float32's (bench/actor.py: the fastest CPU path that acts as
    eager on the recorded frames). The value stream, the same for every action, is left out, so
    the recorded extra/q_values are the advantages (Q less the state's value). false: float32
    throughout. Float-only networks act in numpy."""
    cpu_runtime: Literal["auto", "torch", "onnxruntime"] = "auto"
    """CPU: what runs an image network's policy step: torch, or ONNX Runtime (the rulka[onnx] extra).

    onnxruntime: the network is exported to ONNX in memory for each weights version (on a thread
    of its own; torch acts meanwhile) and ONNX Runtime runs it on torch_threads threads: the whole step where
    the heads stay float32, the CNN and float MLP where cpu_int8's int8 heads apply
    (docs/performance.md has the measured rows). auto: onnxruntime where it is installed, else
    torch. onnxruntime without the package stops the worker with a one-line error."""
    pause_for_credit: bool = True
    """Pause between segments while the trainer withholds credit (false: a real-time game).
    The trainer withholds credit while its learner is behind the replay ratio. A real-time game
    that cannot wait keeps acting; the trainer defers, then drops (counted), what its rate
    limiter cannot admit."""

    @field_validator("device")
    @classmethod
    def _device_name(cls, value: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
            raise ValueError(f"must be auto, cpu, cuda or cuda:N, got {value!r}")
        return value

    def torch_device(self) -> str:
        """``device`` with ``auto`` resolved on this machine (imports torch); raises ConfigError
        naming ``worker.device`` when a named GPU is not there."""
        from rulka.nn.inference import resolve_device

        return str(resolve_device(self.device, "worker.device"))

    def cpu_runtime_here(self) -> str:
        """``cpu_runtime`` with ``auto`` resolved on this machine (torch or onnxruntime); raises
        ConfigError naming ``worker.cpu_runtime`` when onnxruntime is asked for but not installed."""
        from rulka.nn.inference import onnxruntime_missing

        missing = onnxruntime_missing() if self.cpu_runtime != "torch" else None
        if missing and self.cpu_runtime == "onnxruntime":
            raise ConfigError(f"config key `worker.cpu_runtime` is onnxruntime but {missing}; set it to auto or torch")
        return "torch" if missing or self.cpu_runtime == "torch" else "onnxruntime"

    def check_acting(self) -> str:
        """Where a worker acts, checked on this machine before anything starts: the torch device
        (``torch_device``) and, on the CPU, ``cpu_runtime_here``; ConfigError naming the key."""
        device = self.torch_device()
        if device == "cpu":
            self.cpu_runtime_here()
        return device
