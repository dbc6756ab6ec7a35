"""``trainer`` (rulka's own): memory and agent plugins, rate limiting, publishing, checkpoints."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from rulka.config.sections.common import Section


class RateLimitConfig(Section):
    """The trainer's rate limiter (after Reverb's SampleToInsertRatio): how many times a
    transition is trained on, held within a window in both directions."""

    mode: Literal["ratio", "throughput"] = "ratio"
    """ratio: hold samples per insert both ways; throughput: never slow the workers.
    ratio: the learner waits for data when ahead, and workers are slowed (credit withheld) when
    it is behind. throughput: the learner trains as fast as it can up to the ratio, and the
    achieved ratio sinks when data comes faster than it trains."""
    samples_per_insert: PositiveFloat | None = None
    """Mean times a transition is sampled (null = the memory's own, else max_updates_per_env_step x batch).
    The memory's own: memory.number_times_single_memory_is_used_before_discard for IQN. Neither
    set: no limit."""
    error_buffer: PositiveFloat | None = None
    """Half-width of the window, in samples (null = 0.1 x samples_per_insert x start size).
    At least half a batch, so that a batch always fits in the window."""
    credit_segments: PositiveInt = 4
    """Segments each worker may produce beyond the last one the trainer received.
    Counted in steps (credit_segments x worker.segment_max_steps): a worker whose segments are
    shorter (episodes that end early) may send more of them, up to 16x credit_segments."""
    max_deferred_segments: PositiveInt = 256
    """Segments held back while the learner is behind; above this the oldest is dropped (counted).
    Held back: received, journaled and acknowledged, not yet in the memory."""


class TrainerConfig(Section):
    """The trainer (GPU box): plugins, update ratio, publishing, checkpoints."""

    agent: str | None = None
    """TrainingAgent plugin: registry name, or module:Class from a module allowed by --allow-plugin (null = training.algorithm)."""
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the agent plugin."""
    memory: str | None = None
    """Memory plugin: registry name, or module:Class from a module allowed by --allow-plugin (null = training.algorithm)."""
    memory_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the memory plugin."""
    max_updates_per_env_step: PositiveFloat | None = None
    """Pause training above this ratio of updates to received env steps (null = no limit but the memory's own)."""
    publish_every_updates: PositiveInt | None = None
    """Publish weights every N updates (null = 1 for the on-policy ppo/grpo/dpo, 100 otherwise).

    On-policy learners need every update to reach the workers; over a network IQN publishes rarer
    than the guide's shared-memory 8."""
    weights_dtype: Literal["float16", "float32", "int8"] | None = None
    """How published weights travel (zstd either way): float16 halves the bytes per version (tensors of 1024+ values; workers act in float32). null = float16 for iqn (greedy actions checked unchanged), float32 otherwise. int8 (opt-in, lossy: a few greedy actions change, docs/operations.md sizing) sends large matrices as int8 with a scale per row, about 0.55 of float16's bytes."""
    max_policy_lag: NonNegativeInt | None = 4
    """ppo/grpo/dpo: drop (and count) data from weights more than N versions old (null = keep all)."""
    checkpoint_every_s: PositiveFloat = 300
    """Seconds between checkpoints."""
    eval_every_versions: NonNegativeInt = 0
    """Every N weights versions, ask one worker (in turn) for greedy test episodes, logged as eval/... and not trained on (0 = never)."""
    eval_episodes: PositiveInt = 1
    """Greedy test episodes per request."""
    best_policy_every_frames: NonNegativeInt = 20000
    """Runs without greedy map-cycle entries: every N frames played, the next weights version is a
    best-policy candidate and one worker (in turn) drives ``best_policy_episodes`` greedy episodes with
    it (per map of an exploring cycle), not trained on; the best candidate goes to ``<run>/best``
    (``map_cycle.keep_best_policy``; 0 = no requested episodes, no best policy without greedy entries)."""
    best_policy_episodes: PositiveInt = 1
    """Greedy episodes per map that judge a best-policy candidate the trainer asks for: a race ranks
    the candidate by its median race (the lower middle; finished races by time, then unfinished ones
    by distance), a Gymnasium env by the mean return. On the simulator a race from the start line is
    exactly repeatable, so more than one needs ``best_policy_start_noise``; a game's races vary."""
    best_policy_start_noise: NonNegativeFloat = 0.0
    """Simulator only: the candidate's k-th greedy episode on a map starts from the start line moved
    up to N metres sideways and turned up to N degrees, the k-th such start the same for every
    candidate (and not one of the starts ``bench/study/runs.py`` judges on); 0 = every race from the line. One race from the line can pick a lucky version:
    a greedy race time moves by seconds between weights a few updates apart (BENCHMARKS.md,
    readme_frames_1m). Needs ``best_policy_episodes`` > 1 and requested episodes (no greedy map-cycle
    entries, ``best_policy_every_frames`` > 0)."""
    average_policy_frames: NonNegativeInt = 0
    """Keep an exponential moving average of the published weights with a horizon of N frames and
    save it at each checkpoint to ``<run>/average/policy.safetensors`` (``rulka eval RUN --average``);
    never published to workers (0 = none kept). When ``training.lr_cooldown_from_best`` puts the best
    policy back, the average starts again from it."""
    average_policy_kind: Literal["moving", "mean"] = "moving"
    """How ``average_policy_frames`` averages: ``moving``, the exponential moving average (each version's
    share is the frames since the last one over N); ``mean``, every version since the average (re)started
    counts the same (the n-th gets 1/n) until the moving share is larger: with N at least the cooldown's
    length (``training.lr_cooldown_fraction`` of the run's budget), the plain mean of the cooldown's
    versions. Needs ``average_policy_frames`` > 0."""
    verify: bool = False
    """Check that the memory rebuilds exactly what workers saw."""
    device: str = "auto"
    """Torch device the learner trains on: auto (cuda when torch sees a GPU, else cpu), cpu, cuda, cuda:1, mps."""
    torch_threads: PositiveInt | None = None
    """CPU threads torch may use in the trainer (null = every core; `rulka run`: what workers leave).
    `rulka run` gives it the cores its workers leave, at least 1."""
    rate_limit: RateLimitConfig = Field(default_factory=RateLimitConfig)
    """Samples per insert and backpressure to workers."""
    ingest_threads: PositiveInt = 1
    """Threads that decompress each batch of received segments (zstd releases the GIL).
    More than 1 pays off with image segments and spare cores (bench/ingest.py)."""
    prefetch_batches: Literal["auto", "on", "off"] = "auto"
    """Sample the next replay batch on a second thread while the agent trains (auto = on CUDA only).
    The learner no longer waits for sampling and collate between updates: on an H200 the 160x120
    network's learner went from 44.7 to 59.2 batches/s at batch 512 (bench/learner.py --prefetch).
    On CPU the thread takes a core from torch's own threads, so auto leaves it off there."""

    @model_validator(mode="after")
    def _average_kind_needs_an_average(self) -> TrainerConfig:
        if self.average_policy_kind != "moving" and not self.average_policy_frames:
            raise ValueError("average_policy_kind: mean averages the weights kept with average_policy_frames > 0; "
                             "set average_policy_frames (or leave the kind moving)")
        return self

    @field_validator("device")
    @classmethod
    def _device_name(cls, value: str) -> str:
        if not re.fullmatch(r"auto|cpu|mps|(cuda|xpu)(:\d+)?", value):
            raise ValueError(f"must be auto, cpu, cuda, cuda:N, xpu, xpu:N or mps, got {value!r}")
        return value

    def torch_device(self) -> str:
        """The device to train on: ``device`` with ``auto`` resolved (imports torch).

        Raises ConfigError when a named accelerator is not available here.
        """
        import torch

        from rulka.errors import ConfigError

        kind = self.device.partition(":")[0]
        if self.device == "auto" or kind == "cuda":  # the check the worker's device shares
            from rulka.nn.inference import resolve_device

            return str(resolve_device(self.device, "trainer.device"))
        if kind == "mps" and not torch.backends.mps.is_available():
            raise ConfigError("config key `trainer.device` is mps but torch sees no MPS device")
        return self.device
