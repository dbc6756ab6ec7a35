"""The typed sections of a run configuration (one pydantic model per YAML section).

Key names and defaults follow the configuration guide (``environment``, ``nn``, ``training``,
``memory``, ``exploration``, ``rewards``, ``map_cycle``, ``performance``, ``btr``, ``ppo``, ``dpo``,
``grpo``, and ``state_normalization``); rulka adds ``network``, ``worker``, ``trainer``, ``logging``
and ``user``. Every model forbids unknown keys and NaN/infinite numbers, and is frozen: change a
loaded config with
:func:`rulka.config.with_overrides`, which validates again.

Values the guide calls *computed* (``ms_per_action``, ``float_input_dim``, ...) are read-only
properties, never YAML keys. The docstring under each field is its one-line documentation; it is
written next to the key in ``configs/default.yaml`` (read from this source only when that text is
made, so importing stays fast).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from rulka.config.schedules import check_knots


def _knots(value: list[Any]) -> list[Any]:
    check_knots(value)
    return value


def _positive_values(value: list[Any]) -> list[Any]:
    for i, (_, v) in enumerate(value):
        if v <= 0:
            raise ValueError(f"knot {i}: value must be > 0 for an exponential schedule, got {v}")
    return value


def _unit_values(value: list[Any]) -> list[Any]:
    for i, (_, v) in enumerate(value):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"knot {i}: value must be within [0, 1], got {v}")
    return value


Frame = Annotated[int | float, Field(ge=0)]
# [[frame, value], ...] with linear interpolation (unless the field says otherwise)
FloatKnots = Annotated[list[tuple[Frame, float]], AfterValidator(_knots)]
UnitKnots = Annotated[list[tuple[Frame, float]], AfterValidator(_knots), AfterValidator(_unit_values)]
PositiveKnots = Annotated[list[tuple[Frame, float]], AfterValidator(_knots), AfterValidator(_positive_values)]
# [[frame, [buffer_size, start_learning_size]], ...], staircase
MemoryKnots = Annotated[list[tuple[Frame, tuple[PositiveInt, NonNegativeInt]]], AfterValidator(_knots)]
# [[frame, "suffix"], ...], staircase
SuffixKnots = Annotated[list[tuple[Frame, str]], AfterValidator(_knots)]

Algorithm = Literal["iqn", "ppo", "dpo", "grpo", "sac"]


class Section(BaseModel):
    """Base of every config model: unknown keys are errors, loaded values are read-only."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        populate_by_name=True,
    )


# --------------------------------------------------------------------------------------------
# environment
# --------------------------------------------------------------------------------------------


class Tm2020Config(Section):
    """TrackMania 2020 through Openplanet, screen capture and a virtual gamepad (backend: tm2020)."""

    plugin_host: str = "127.0.0.1"
    """Where rulka's Openplanet plugin listens (the game's own PC)."""
    plugin_port: Annotated[int, Field(ge=1, le=65535)] = 9010
    """TCP port of rulka's Openplanet plugin (its Port setting in Openplanet)."""
    window_title: str = "Trackmania"
    """Exact title of the game window to capture."""
    window_width: Annotated[int, Field(ge=8)] = 256
    """Client-area width the game window is resized to (set the game's windowed resolution to match)."""
    window_height: Annotated[int, Field(ge=8)] = 128
    """Client-area height the game window is resized to."""
    capture: Literal["auto", "windows", "linux", "fake"] = "auto"
    """Screen capture: auto (by platform), windows (GDI), linux (X11 + mss, for Proton), fake (rulka's fake game)."""
    control: Literal["gamepad", "keyboard", "fake"] = "gamepad"
    """How actions reach the game: virtual gamepad (analog), keyboard (binary, window focused), fake."""
    observation: Literal["image", "lidar"] = "image"
    """image: the window as a grayscale nn.vis.image_size frame; lidar: TMRL's 19 beams appended to the float inputs."""
    lidar_history: PositiveInt = 4
    """LIDAR scans (this one and the previous ones) in the float inputs (observation: lidar)."""
    lidar_dark_threshold: Annotated[int, Field(ge=1, le=255)] = 55
    """A LIDAR beam stops at the first pixel darker than this on all channels (road borders)."""
    lidar: Literal["rulka", "tmrl"] = "rulka"
    """Which LIDAR (observation: lidar): rulka (origin at the bottom, beams left to right, lengths / frame diagonal) or tmrl (TMRL 0.7.1's own: origin at 44/49 of the height, beams right to left, raw pixel indexes from 20 px out)."""
    start_obs_capture_ms: NonNegativeInt = 40
    """rtgym start_obs_capture: ms into each action step at which telemetry and the frame are read."""
    time_step_timeout_factor: PositiveFloat = 1.0
    """rtgym elasticity: a step may start this many step durations late before the clock restarts."""
    telemetry_timeout_s: PositiveFloat = 2.0
    """Telemetry older than this mid-race ends the episode as a fault (plugin silent)."""
    reset_timeout_s: PositiveFloat = 10.0
    """After pressing respawn, wait this long for the start signal before pressing again."""
    recover_timeout_s: PositiveFloat = 600.0
    """A reset waits this long for the game to come back (plugin, window, unpaused) before failing."""
    reference_line: Path | None = None
    """Reference line file the rewards follow (rulka tm record-line --game tm2020); null with the fake game."""
    fake_fps: PositiveFloat = 60.0
    """Fake game: telemetry records per second."""
    fake_time_scale: PositiveFloat = 1.0
    """Fake game: game seconds per wall-clock second (1 = real time, like the game)."""
    fake_countdown_s: NonNegativeFloat = 1.5
    """Fake game: game seconds between respawn and the start signal."""
    fake_fixed_port: bool = False
    """Fake game: listen on plugin_port instead of a free port (one fake per machine then)."""

    @property
    def lidar_float_inputs(self) -> int:
        """Floats LIDAR adds to the float inputs (0 in image mode)."""
        return 19 * self.lidar_history if self.observation == "lidar" else 0


class EnvironmentConfig(Section):
    """Environment, timing, track geometry and timeouts (guide: Environment Configuration)."""

    backend: Literal["sim", "tmnf", "tm2020", "gym"] = "sim"
    """Which environment workers run: built-in simulator, TrackMania Nations Forever, TrackMania 2020, or any Gymnasium env."""
    gym_id: str | None = None
    """Gymnasium environment id (backend: gym), e.g. CartPole-v1."""
    gym_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for gymnasium.make (backend: gym)."""
    track: str = "default"
    """Simulator track name (backend: sim; backend: tm2020 with the fake game)."""
    continuous_actions: bool = False
    """Continuous gas/brake/steer actions instead of the discrete action set."""
    tm_engine_step_per_action: PositiveInt = 5
    """Game simulation steps (10 ms each) per agent action."""
    ms_per_tm_engine_step: PositiveInt = 10
    """Milliseconds per game simulation step (fixed by the engine at 100 Hz)."""
    rl_action_offsets_ms: list[NonNegativeInt] = Field(default_factory=lambda: [0])
    """Multi-action offsets in ms ([0] = one action per decision; [0, 10, 20] = 3 actions per block at 10 ms)."""
    n_zone_centers_in_inputs: PositiveInt = 40
    """Number of upcoming track waypoints given to the agent."""
    one_every_n_zone_centers_in_inputs: PositiveInt = 20
    """Keep one virtual checkpoint in N as a waypoint input."""
    distance_between_checkpoints: PositiveFloat = 0.5
    """Spacing of virtual checkpoints along the reference line, metres."""
    n_zone_centers_extrapolate_before_start_of_map: NonNegativeInt = 20
    """Virtual waypoints extrapolated before the start line."""
    n_zone_centers_extrapolate_after_end_of_map: NonNegativeInt = 1000
    """Virtual waypoints extrapolated after the finish line."""
    road_width: PositiveFloat = 90
    """Largest lateral distance from the centre line still on track, metres."""
    temporal_mini_race_duration_ms: PositiveInt = 7000
    """Mini-race horizon in ms: Q-values predict the reward of the next this-many ms."""
    margin_to_announce_finish_meters: PositiveFloat = 700
    """Distance-to-finish input is capped at this many metres."""
    n_contact_material_physics_behavior_types: NonNegativeInt = 4
    """Surface categories one-hot encoded per wheel."""
    n_prev_actions_in_inputs: NonNegativeInt = 5
    """Previous actions included in the float inputs (4 flags each)."""
    cutoff_rollout_if_race_not_finished_within_duration_ms: PositiveInt = 300_000
    """End an episode that has not finished after this many ms."""
    cutoff_rollout_if_no_vcp_passed_within_duration_ms: PositiveInt = 2_000
    """End an episode when no virtual checkpoint is passed for this many ms."""
    timeout_during_run_ms: PositiveInt = 30_000
    """Game-interface response timeout while racing, ms."""
    timeout_between_runs_ms: PositiveInt = 600_000_000
    """Game-interface response timeout while parked between runs, ms."""
    tmi_protection_timeout_s: PositiveInt = 500
    """Socket timeout towards the game interface, seconds."""
    game_reboot_interval: PositiveInt = 43_200
    """Restart the game every this many seconds (memory leaks)."""
    game_camera_number: Annotated[int, Field(ge=1, le=3)] = 2
    """Game camera: 1 behind, 2 first person, 3 top."""
    game_launch: Literal["launch", "attach", "fake"] = "launch"
    """How a TMNF worker gets its game: launch it (TMLoader on Windows, user.linux_launch_game_path elsewhere), attach to one the user started, or run rulka's fake game (CI, tests)."""
    game_start_timeout_s: PositiveFloat = 120
    """Seconds to wait for the game's plugin to accept a connection after a launch."""
    sync_virtual_and_real_checkpoints: bool = True
    """Keep virtual checkpoint progress in step with the game's checkpoints."""
    tm2020: Tm2020Config = Field(default_factory=Tm2020Config)
    """TrackMania 2020 worker settings (backend: tm2020)."""

    @field_validator("rl_action_offsets_ms")
    @classmethod
    def _offsets(cls, value: list[int]) -> list[int]:
        if not value:
            return [0]
        expected = [10 * i for i in range(len(value))]
        if value != expected:
            raise ValueError(f"offsets must be consecutive 10 ms steps from 0, e.g. {expected}; got {value}")
        return value

    @property
    def n_actions_per_block(self) -> int:
        """Actions per decision block: len(rl_action_offsets_ms) in multi-action mode, else 1."""
        return len(self.rl_action_offsets_ms)

    @property
    def is_multi_action(self) -> bool:
        return self.n_actions_per_block > 1

    @property
    def ms_per_action(self) -> int:
        """tm_engine_step_per_action x ms_per_tm_engine_step; one engine step in multi-action mode."""
        if self.is_multi_action:
            return self.ms_per_tm_engine_step
        return self.tm_engine_step_per_action * self.ms_per_tm_engine_step

    @property
    def ms_per_block(self) -> int:
        """Milliseconds per decision (one replay transition)."""
        if self.is_multi_action:
            return self.n_actions_per_block * self.ms_per_tm_engine_step
        return self.ms_per_action

    @property
    def temporal_mini_race_duration_actions(self) -> int:
        """Mini-race horizon in decisions: temporal_mini_race_duration_ms // ms_per_block."""
        return self.temporal_mini_race_duration_ms // self.ms_per_block

    @property
    def max_allowable_distance_to_virtual_checkpoint(self) -> float:
        """sqrt((distance_between_checkpoints/2)^2 + (road_width/2)^2), metres."""
        return math.hypot(self.distance_between_checkpoints / 2, self.road_width / 2)

    @property
    def zone_center_spacing_m(self) -> float:
        """Distance between two waypoint inputs, metres."""
        return self.one_every_n_zone_centers_in_inputs * self.distance_between_checkpoints

    @property
    def float_input_dim(self) -> int:
        """Size of the TrackMania float observation (guide formula; 184 with the defaults).

        27 fixed features (mini-race time, 16 wheel and gear values, 9 car-frame velocity and up
        values, distance to finish) + 3 per waypoint + 4 per previous action + 4 wheels x surface
        categories + 1 freewheeling flag. The guide's headline "191" is stale; its own sum is 184.
        """
        return (
            27
            + 3 * self.n_zone_centers_in_inputs
            + 4 * self.n_prev_actions_in_inputs
            + 4 * self.n_contact_material_physics_behavior_types
            + 1
        )


# --------------------------------------------------------------------------------------------
# nn
# --------------------------------------------------------------------------------------------

FusionMode = Literal["none", "vision_transformer", "post_concat", "unified"]


class ImageSizeConfig(Section):
    """Frame size fed to the network (aliases w / h)."""

    width: PositiveInt = Field(default=160, validation_alias=AliasChoices("width", "w"))
    """Frame width in pixels (W_downsized)."""
    height: PositiveInt = Field(default=120, validation_alias=AliasChoices("height", "h"))
    """Frame height in pixels (H_downsized)."""


class VisCnnConfig(Section):
    """Convolutional vision stem."""

    use_impala_cnn: bool = False
    """Residual IMPALA CNN instead of the 4-layer conv stem."""
    impala_model_size: PositiveInt = 2
    """IMPALA channel multiplier."""
    use_adaptive_maxpool: bool = False
    """Adaptive max-pool after the convolutions instead of flatten."""
    adaptive_maxpool_size: PositiveInt = 6
    """Output side of the adaptive max-pool."""
    use_spectral_norm: bool = False
    """Spectral normalisation on conv layers."""


class TransformersConfig(Section):
    """A transformer slot (ViT vision branch or fusion encoder): native stack or a Hugging Face model."""

    use_hf_backbone: bool = False
    """Use a Hugging Face backbone (model_name_or_path) instead of a native stack."""
    model_name_or_path: str = ""
    """Hugging Face model id or local directory."""
    trust_remote_code: bool = False
    """Allow the HF model's own code to run."""
    hidden_dropout_prob: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    """HF hidden dropout."""
    d_model: Annotated[int, Field(ge=32)] = 256
    """Token width."""
    n_layers: NonNegativeInt = 2
    """Transformer layers."""
    n_heads: PositiveInt = 4
    """Attention heads (d_model must be divisible by it)."""
    ff_mult: PositiveInt = 4
    """Feed-forward width multiplier."""
    dropout: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    """Dropout."""
    patch_size: PositiveInt = 8
    """ViT patch side, pixels."""
    post_concat_seq_len: PositiveInt = 4
    """Tokens after post_concat fusion."""
    unified_float_tokens: PositiveInt = 1
    """Float tokens in unified fusion."""
    fusion_tokens: Literal["summary", "patch_tokens"] = "summary"
    """Vision output for fusion: one summary vector or all patch tokens."""


class FloatMlpConfig(Section):
    """Width of the float-feature MLP."""

    hidden_dim: PositiveInt = 256
    """Hidden width (float_hidden_dim)."""


class VisConfig(Section):
    """Vision branch: exactly one of cnn / transformer, or no_image."""

    no_image: bool = False
    """Float inputs only, no image branch."""
    freeze: bool = False
    """Do not train the vision stem."""
    image_size: ImageSizeConfig = Field(default_factory=ImageSizeConfig)
    """Frame size."""
    cnn: VisCnnConfig | None = None
    """CNN stem (the default when neither cnn nor transformer is given)."""
    transformer: TransformersConfig | None = None
    """ViT / HF vision stem."""

    @model_validator(mode="before")
    @classmethod
    def _default_cnn(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("no_image"):
            if data.get("cnn") is None and data.get("transformer") is None:
                data = {**data, "cnn": {}}
        return data

    @model_validator(mode="after")
    def _one_stem(self) -> VisConfig:
        if self.cnn is not None and self.transformer is not None:
            raise ValueError("set only one of `cnn` or `transformer` for the image encoder")
        return self


class FloatBranchConfig(Section):
    """Float-feature branch."""

    freeze: bool = False
    """Do not train the float MLP."""
    mlp: FloatMlpConfig = Field(default_factory=FloatMlpConfig)
    """Float MLP."""


class FusionMlpConfig(Section):
    hidden_dim: Annotated[int, Field(ge=32)] = 512
    """Hidden width."""
    n_layers: PositiveInt = 2
    """Layers."""
    dropout: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    """Dropout."""


class FusionCnnConfig(Section):
    hidden_channels: list[PositiveInt] = Field(default_factory=lambda: [256, 256])
    """Channels per 1-D conv layer."""
    kernel_size: PositiveInt = 3
    """Kernel size."""
    dropout: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    """Dropout."""


class HfEmbeddingConfig(Section):
    model_name_or_path: str = ""
    """Hugging Face encoder fed with inputs_embeds."""
    trust_remote_code: bool = False
    """Allow the HF model's own code to run."""
    hidden_dropout_prob: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    """HF hidden dropout."""


class EncoderConfig(Section):
    """Multimodal fusion trunk (used when nn.fusion_mode is not none)."""

    freeze: bool = False
    """Do not train the fusion trunk."""
    mlp: FloatMlpConfig | None = None
    """Float MLP width override for fusion builds."""
    transformer: TransformersConfig = Field(default_factory=TransformersConfig)
    """Fusion transformer stack."""
    fusion_encoder: Literal["linear", "native_transformer", "mlp", "cnn", "hf_embedding"] | None = None
    """Trunk after early fusion (inferred when null)."""
    fusion_mlp: FusionMlpConfig | None = None
    """Settings for fusion_encoder: mlp."""
    fusion_cnn: FusionCnnConfig | None = None
    """Settings for fusion_encoder: cnn."""
    hf_embedding: HfEmbeddingConfig | None = None
    """Settings for fusion_encoder: hf_embedding."""
    post_concat_layout: Literal["fused_vector", "token_sequence"] = "fused_vector"
    """post_concat only: one fused vector or a token sequence."""
    float_token_input: Literal["raw", "mlp_hidden"] = "raw"
    """token_sequence: floats tokenised raw or after the float MLP."""
    float_token_layout: Literal["dense", "per_feature"] = "dense"
    """token_sequence: dense tokens or one token per float feature."""

    @model_validator(mode="after")
    def _rules(self) -> EncoderConfig:
        if self.transformer.use_hf_backbone and not self.transformer.model_name_or_path.strip():
            raise ValueError("`transformer.use_hf_backbone` needs `transformer.model_name_or_path`")
        if self.float_token_layout == "per_feature":
            if self.post_concat_layout != "token_sequence":
                raise ValueError(
                    "`float_token_layout: per_feature` needs `post_concat_layout: token_sequence`"
                )
            if self.float_token_input != "raw":
                raise ValueError("`float_token_layout: per_feature` needs `float_token_input: raw`")
        return self


class IqnCoreConfig(Section):
    """IQN quantile settings."""

    embedding_dimension: PositiveInt = 64
    """Cosine quantile embedding size (iqn_embedding_dimension)."""
    n: PositiveInt = 8
    """Quantiles sampled per state in training (iqn_n; even)."""
    k: PositiveInt = 32
    """Quantiles sampled per state when acting (iqn_k; even)."""
    kappa: PositiveFloat = 5e-3
    """Quantile Huber loss threshold (iqn_kappa)."""
    freeze: bool = False
    """Do not train the quantile embedding MLP."""


class MlpSlotConfig(Section):
    hidden_dim: PositiveInt | None = Field(
        default=None, validation_alias=AliasChoices("hidden_dim", "hidden")
    )
    """Hidden width (alias hidden); null = decoder.dense_hidden_dimension // 2."""
    n_hidden_layers: PositiveInt = Field(
        default=1, validation_alias=AliasChoices("n_hidden_layers", "layers")
    )
    """Hidden layers (alias layers)."""


class TransformerStackConfig(Section):
    d_model: Annotated[int, Field(ge=32)] = 128
    """Token width."""
    n_layers: PositiveInt = 1
    """Layers."""
    n_heads: PositiveInt = 4
    """Attention heads."""
    ff_mult: PositiveInt = 4
    """Feed-forward width multiplier."""
    dropout: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    """Dropout."""
    use_hf_backbone: bool = False
    """Not supported in head slots yet (must stay false)."""
    model_name_or_path: str = ""
    """Reserved."""
    trust_remote_code: bool = False
    """Reserved."""

    @model_validator(mode="after")
    def _rules(self) -> TransformerStackConfig:
        if self.d_model % self.n_heads:
            raise ValueError(f"`d_model` ({self.d_model}) must be divisible by `n_heads` ({self.n_heads})")
        if self.use_hf_backbone:
            raise ValueError("`use_hf_backbone` is not supported in decoder slots; set it to false")
        return self


class HeadSlotConfig(Section):
    """One decoder head (advantage or value): mlp or transformer."""

    freeze: bool = False
    """Do not train this head."""
    mlp: MlpSlotConfig | None = None
    """MLP head (the default)."""
    transformer: TransformerStackConfig | None = Field(
        default=None, validation_alias=AliasChoices("transformer", "transformer_encoder")
    )
    """Transformer head (alias transformer_encoder)."""

    @model_validator(mode="before")
    @classmethod
    def _default_mlp(cls, data: Any) -> Any:
        if isinstance(data, dict):
            has_t = data.get("transformer") is not None or data.get("transformer_encoder") is not None
            if data.get("mlp") is None and not has_t:
                data = {**data, "mlp": {}}
        return data

    @model_validator(mode="after")
    def _one_body(self) -> HeadSlotConfig:
        if self.mlp is not None and self.transformer is not None:
            raise ValueError("set only one of `mlp` or `transformer` for a decoder head")
        return self


class DecoderConfig(Section):
    """IQN dueling heads / PPO trunk and heads."""

    shared_input: Literal["pre_tau", "post_tau"] = "post_tau"
    """Where heads attach relative to the quantile modulation."""
    dense_hidden_dimension: Annotated[int, Field(ge=32)] = 1024
    """Main hidden width after joining image and float features."""
    shared_trunk_freeze: bool = False
    """PPO: do not train the shared trunk."""
    advantage: HeadSlotConfig = Field(default_factory=HeadSlotConfig)
    """Advantage (PPO: policy) head."""
    value: HeadSlotConfig = Field(default_factory=HeadSlotConfig)
    """Value head."""

    @model_validator(mode="after")
    def _post_tau(self) -> DecoderConfig:
        if self.shared_input == "pre_tau" and (self.advantage.transformer or self.value.transformer):
            raise ValueError("transformer heads need `shared_input: post_tau`")
        return self


class NnTrainingConfig(Section):
    """Optimiser-adjacent IQN knobs (nn.training, not the top-level training section)."""

    use_jit: bool = True
    """Compile networks with TorchScript / torch.compile where supported."""
    use_ddqn: bool = False
    """Double DQN targets: online net picks the action, target net evaluates it."""
    target_action: Literal["quantile_max", "mean_argmax"] = "quantile_max"
    """No-DDQN target: max per target quantile (Linesight) or argmax of the quantile mean (IQN paper)."""
    use_amp: bool = True
    """Mixed precision on CUDA (ignored on CPU)."""
    clip_grad_value: PositiveFloat = 1000
    """Clip each gradient element to +-value."""
    clip_grad_norm: PositiveFloat = 30
    """Clip the gradient L2 norm."""
    number_memories_trained_on_between_target_network_updates: PositiveInt = 2048
    """Transitions trained on between target network updates."""
    soft_update_tau: Annotated[float, Field(ge=0.0, le=1.0)] = 0.02
    """Target update: target = tau * online + (1 - tau) * target."""
    target_self_loss_clamp_ratio: PositiveFloat | None = 4
    """Clamp of the target self-loss rescaling of each item's loss (Linesight); null = off."""
    single_reset_flag: int = 0
    """Bump to trigger one soft reset of the network."""
    reset_every_n_frames_generated: PositiveInt = 40_000_000_000_000
    """Periodic soft reset interval in frames (huge = disabled)."""
    additional_transition_after_reset: NonNegativeInt = 1_600_000
    """Extra transitions collected after a reset."""
    last_layer_reset_factor: Annotated[float, Field(ge=0.0, le=1.0)] = 0.8
    """Share of last-layer weights kept at a reset (0 = full reset)."""
    overall_reset_mul_factor: NonNegativeFloat = 0.01
    """Weight perturbation at a reset."""


class NnConfig(Section):
    """Network architecture (guide: Neural network YAML (nn) - full reference)."""

    fusion_mode: FusionMode = "none"
    """Multimodal fusion: none | vision_transformer | post_concat | unified."""
    init_from_pretrained: str = ""
    """Folder written by `rulka pretrain` (model.safetensors): tensors loaded by name at start."""
    vis: VisConfig = Field(default_factory=VisConfig)
    """Vision branch."""
    float_branch: FloatBranchConfig = Field(
        default_factory=FloatBranchConfig,
        validation_alias=AliasChoices("float", "float_branch"),
        serialization_alias="float",
    )
    """Float-feature branch (YAML key: float)."""
    encoder: EncoderConfig = Field(default_factory=EncoderConfig)
    """Fusion trunk."""
    iqn: IqnCoreConfig = Field(default_factory=IqnCoreConfig)
    """IQN quantile settings."""
    decoder: DecoderConfig = Field(default_factory=DecoderConfig)
    """Heads."""
    training: NnTrainingConfig = Field(default_factory=NnTrainingConfig)
    """Optimiser-adjacent knobs."""
    float_input_dim: PositiveInt | None = None
    """Float input size; null = computed from environment (set it only for backend: gym)."""

    @model_validator(mode="before")
    @classmethod
    def _hoist_from_encoder(cls, data: Any) -> Any:
        # older configs put fusion_mode / init_from_pretrained under nn.encoder
        if not isinstance(data, dict) or not isinstance(data.get("encoder"), dict):
            return data
        out, enc = dict(data), dict(data["encoder"])
        for key in ("fusion_mode", "init_from_pretrained"):
            if key in enc:
                value = enc.pop(key)
                if key in out and out[key] != value:
                    raise ValueError(f"`nn.{key}` conflicts with `nn.encoder.{key}`; set only `nn.{key}`")
                out[key] = value
        out["encoder"] = enc
        return out

    @model_validator(mode="after")
    def _fusion_rules(self) -> NnConfig:
        vt = self.vis.transformer
        if self.fusion_mode == "unified" and vt is not None and not vt.use_hf_backbone:
            if vt.d_model != self.encoder.transformer.d_model:
                raise ValueError(
                    f"`fusion_mode` unified needs `vis.transformer.d_model` ({vt.d_model}) == "
                    f"`encoder.transformer.d_model` ({self.encoder.transformer.d_model})"
                )
        if self.fusion_mode == "post_concat" and vt is not None and vt.fusion_tokens == "patch_tokens":
            if self.encoder.post_concat_layout != "token_sequence":
                raise ValueError(
                    "`vis.transformer.fusion_tokens: patch_tokens` needs `encoder.post_concat_layout: token_sequence`"
                )
        for name, slot in (("vis.transformer", vt), ("encoder.transformer", self.encoder.transformer)):
            if slot is not None and slot.n_layers > 0 and slot.d_model % slot.n_heads:
                raise ValueError(
                    f"`{name}.d_model` ({slot.d_model}) must be divisible by `{name}.n_heads` ({slot.n_heads})"
                )
        return self

    # flat names of the guide
    @property
    def w_downsized(self) -> int:
        return self.vis.image_size.width

    @property
    def h_downsized(self) -> int:
        return self.vis.image_size.height

    @property
    def float_hidden_dim(self) -> int:
        return self.float_branch.mlp.hidden_dim

    @property
    def float_hidden_dim_effective(self) -> int:
        """Float MLP width for fusion builds: encoder.mlp when set, else float.mlp."""
        return self.encoder.mlp.hidden_dim if self.encoder.mlp is not None else self.float_hidden_dim

    @property
    def dense_hidden_dimension(self) -> int:
        return self.decoder.dense_hidden_dimension

    def head_hidden_dim(self, head: Literal["advantage", "value"]) -> int:
        """Hidden width of an MLP head: its hidden_dim, else dense_hidden_dimension // 2."""
        slot = getattr(self.decoder, head)
        if slot.mlp is not None and slot.mlp.hidden_dim is not None:
            return slot.mlp.hidden_dim
        return self.decoder.dense_hidden_dimension // 2

    @property
    def iqn_embedding_dimension(self) -> int:
        return self.iqn.embedding_dimension

    @property
    def iqn_n(self) -> int:
        return self.iqn.n

    @property
    def iqn_k(self) -> int:
        return self.iqn.k

    @property
    def iqn_kappa(self) -> float:
        return self.iqn.kappa


# --------------------------------------------------------------------------------------------
# training, memory, exploration, rewards, map cycle, performance
# --------------------------------------------------------------------------------------------


class TrainingConfig(Section):
    """Run identity, algorithm, optimiser and schedules (guide: Training Configuration)."""

    run_name: str = "rulka"
    """Run identifier: names the run folder, logs and checkpoints."""
    algorithm: Algorithm = "iqn"
    """Learner: iqn (replay, mini-races), ppo, dpo, grpo (on-policy), sac."""
    seed: int | None = None
    """Random seed for the trainer and workers (null = random)."""
    batch_size: PositiveInt = 512
    """Transitions per training batch."""
    adam_epsilon: PositiveFloat = 1e-4
    """Adam epsilon."""
    adam_beta1: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.9
    """Adam beta1."""
    adam_beta2: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.999
    """Adam beta2."""
    weight_decay_lr_ratio: NonNegativeFloat = 0.1
    """IQN: decoupled weight decay per step, weights *= 1 - ratio * lr (Linesight); 0 = off."""
    global_schedule_speed: PositiveFloat = 1.0
    """Multiplies the frame counts of every schedule (>1 stretches training)."""
    lr_schedule: PositiveKnots = Field(
        default_factory=lambda: [(0, 1e-3), (3_000_000, 5e-5), (12_000_000, 5e-5), (15_000_000, 1e-5)]
    )
    """Learning rate vs frames, exponential interpolation."""
    gamma_schedule: UnitKnots = Field(
        default_factory=lambda: [(0, 0.999), (1_500_000, 0.999), (2_500_000, 1.0)]
    )
    """IQN n-step discount vs frames, linear."""
    policy_rollout_gamma: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    """On-policy rollout discount (ppo/dpo/grpo); null = ppo.gamma."""
    policy_rollout_gamma_schedule: UnitKnots | None = None
    """On-policy rollout discount vs frames, linear; wins over ppo.ppo_gamma_schedule."""
    n_steps: PositiveInt = 3
    """n-step returns."""
    discard_non_greedy_actions_in_nsteps: bool = True
    """Cut n-step returns at exploratory actions."""
    tensorboard_suffix_schedule: SuffixKnots = Field(
        default_factory=lambda: [
            (0, ""),
            (6_000_000, "_2"),
            (15_000_000, "_3"),
            (30_000_000, "_4"),
            (45_000_000, "_5"),
            (80_000_000, "_6"),
            (150_000_000, "_7"),
        ]
    )
    """TensorBoard folder suffix vs frames, staircase."""
    oversample_long_term_steps: NonNegativeInt = 40
    """Mini-race time sampling: oversample times with many steps left."""
    oversample_maximum_term_steps: NonNegativeInt = 5
    """Mini-race time sampling: shift and upper margin of the extended range."""


class MemoryConfig(Section):
    """Replay buffer (guide: Memory Configuration)."""

    memory_size_schedule: MemoryKnots = Field(
        default_factory=lambda: [
            (0, (50_000, 20_000)),
            (5_000_000, (100_000, 75_000)),
            (7_000_000, (200_000, 150_000)),
        ]
    )
    """[frames, [buffer size, start-learning size]], staircase."""
    prio_alpha: NonNegativeFloat = 0.0
    """PER priority exponent (0 = uniform sampling)."""
    prio_epsilon: PositiveFloat = 2e-3
    """PER priority offset."""
    prio_beta: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    """PER importance-sampling exponent."""
    number_times_single_memory_is_used_before_discard: PositiveInt = 32
    """Average number of times a stored transition is trained on."""
    buffer_test_ratio: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.05
    """Share of transitions held out as a test buffer."""


class ExplorationConfig(Section):
    """Epsilon-greedy and epsilon-Boltzmann exploration (IQN)."""

    epsilon_schedule: UnitKnots = Field(
        default_factory=lambda: [(0, 1.0), (50_000, 1.0), (300_000, 0.1), (3_000_000, 0.03)]
    )
    """Probability of a uniformly random action vs frames, linear."""
    epsilon_boltzmann_schedule: UnitKnots = Field(default_factory=lambda: [(0, 0.15), (3_000_000, 0.03)])
    """Probability of argmax(Q + tau * noise) vs frames, linear."""
    tau_epsilon_boltzmann: NonNegativeFloat = 0.01
    """Noise scale of Boltzmann exploration."""
    multi_action_exploration: Literal["per_action", "per_block"] = "per_action"
    """Multi-action: random draw per action or per block."""


class RewardsConfig(Section):
    """Reward shaping (guide: Rewards Configuration)."""

    constant_reward_per_ms: float = -6 / 5000
    """Time penalty per millisecond."""
    reward_per_m_advanced_along_centerline: float = 5 / 500
    """Progress reward per metre along the reference line."""
    final_speed_reward_as_if_duration_s: float = 0.0
    """Speed-gain bonus, valued as this many seconds of progress per m/s (0 = off)."""
    shaped_reward_dist_to_cur_vcp: float = -0.1
    """Potential coefficient on the distance to the current virtual checkpoint."""
    shaped_reward_min_dist_to_cur_vcp: float = 2
    """Lower clamp of that distance, metres."""
    shaped_reward_max_dist_to_cur_vcp: float = 25
    """Upper clamp of that distance, metres."""
    shaped_reward_point_to_vcp_ahead: float = 0.0
    """Potential coefficient on pointing towards the next checkpoint (0 = off)."""
    engineered_reward_min_dist_to_cur_vcp: float = 5
    """Lower clamp for the close-to-checkpoint reward, metres."""
    engineered_reward_max_dist_to_cur_vcp: float = 25
    """Upper clamp for the close-to-checkpoint reward, metres."""
    engineered_speedslide_reward_schedule: FloatKnots = Field(default_factory=lambda: [(0, 0.0)])
    """Speedslide reward vs frames, linear."""
    engineered_neoslide_reward_schedule: FloatKnots = Field(default_factory=lambda: [(0, 0.0)])
    """Neoslide (lateral speed >= 2 m/s) reward vs frames, linear."""
    engineered_kamikaze_reward_schedule: FloatKnots = Field(default_factory=lambda: [(0, 0.0)])
    """Kamikaze reward vs frames, linear."""
    engineered_close_to_vcp_reward_schedule: FloatKnots = Field(default_factory=lambda: [(0, 0.0)])
    """Close-to-checkpoint reward vs frames, linear."""

    @property
    def final_speed_reward_per_m_per_s(self) -> float:
        """reward_per_m_advanced_along_centerline x final_speed_reward_as_if_duration_s."""
        return self.reward_per_m_advanced_along_centerline * self.final_speed_reward_as_if_duration_s


class MapCycleEntry(Section):
    """One entry of the map cycle."""

    short_name: str
    """Name used in logs."""
    map_path: str
    """Map file (.Challenge.Gbx / .Map.Gbx) or simulator track name."""
    reference_line_path: str = ""
    """Reference line (.npy, N x 3 floats) for the reward and waypoints."""
    is_exploration: bool = True
    """Explore (true) or evaluate greedily (false)."""
    fill_buffer: bool = True
    """Store this entry's transitions for training."""
    repeat: PositiveInt = 1
    """Times this entry repeats in the cycle."""


class MapCycleConfig(Section):
    """Map training cycle."""

    entries: list[MapCycleEntry] = Field(default_factory=list)
    """Entries, played in order and repeated; empty = environment.track only."""
    keep_best_policy: bool = True
    """Keep the run's best policy: the trainer marks evaluation versions of the weights, workers drive
    greedy episodes with them (the greedy entries, ``is_exploration: false``; without any, the episodes
    ``trainer.best_policy_every_frames`` asks for), and the version that drove best (most maps finished,
    then most under their reference time, then the lowest total race time; a Gymnasium env: the
    highest mean return) is written to ``<run>/best/policy.safetensors`` with ``best.json`` (rulka extension)."""

    def expanded(self) -> list[MapCycleEntry]:
        """The cycle with each entry repeated ``repeat`` times, in order."""
        return [entry for entry in self.entries for _ in range(entry.repeat)]


class PerformanceConfig(Section):
    """Throughput and synchronisation (guide: Performance Configuration)."""

    gpu_collectors_count: PositiveInt = 4
    """Game instances (collectors) per machine."""
    max_rollout_queue_size: PositiveInt = 1
    """Finished rollouts a collector may queue before blocking."""
    running_speed: PositiveFloat = 160
    """Game speed multiplier."""
    send_shared_network_every_n_batches: PositiveInt = 8
    """Learner publishes weights every N batches."""
    update_inference_network_every_n_actions: PositiveInt = 8
    """Collectors refresh their policy every N actions during a rollout."""
    make_highest_prio_figures: bool = False
    """Save images of the highest-priority transitions (PER only)."""
    plot_race_time_left_curves: bool = False
    """Save race-time-left curve plots."""
    n_transitions_to_plot_in_distribution_curves: PositiveInt = 1000
    """Transitions in distribution plots."""
    apply_randomcrop_augmentation: bool = False
    """Random-crop augmentation of frames."""
    n_pixels_to_crop_on_each_side: NonNegativeInt = 2
    """Crop margin for that augmentation."""
    frames_before_save_best_runs: NonNegativeInt = 1_500_000
    """Frames before best runs are saved."""
    threshold_to_save_all_runs_ms: int = -1
    """Save every run faster than this (ms; -1 = off)."""

    def inference_update_interval_ms(self, ms_per_action: int) -> int:
        """Time between policy refreshes during a rollout: ms_per_action x update_inference_network_every_n_actions."""
        return ms_per_action * self.update_inference_network_every_n_actions


class StateNormalizationConfig(Section):
    """Float input normalisation (x - mean) / std; null = rulka's defaults for the layout."""

    float_inputs_mean: list[float] | None = None
    """One mean per float input (length float_input_dim)."""
    float_inputs_std: list[PositiveFloat] | None = None
    """One standard deviation per float input, each > 0."""


class BtrConfig(Section):
    """Optional IQN extras (Munchausen, IMPALA CNN, LayerNorm, NoisyNet)."""

    use_munchausen: bool = False
    """Munchausen soft targets."""
    munchausen_alpha: Annotated[float, Field(ge=0.0, le=1.0)] = 0.9
    """Munchausen scale."""
    munchausen_entropy_tau: PositiveFloat = 0.03
    """Munchausen entropy temperature."""
    munchausen_lo: float = -1.0
    """Lower clip of the Munchausen log-policy term."""
    use_impala_cnn: bool = False
    """Fills nn.vis.cnn.use_impala_cnn when that key is omitted."""
    impala_model_size: PositiveInt = 2
    """Fills nn.vis.cnn.impala_model_size when omitted."""
    use_adaptive_maxpool: bool = False
    """Fills nn.vis.cnn.use_adaptive_maxpool when omitted."""
    adaptive_maxpool_size: PositiveInt = 6
    """Fills nn.vis.cnn.adaptive_maxpool_size when omitted."""
    use_spectral_norm: bool = False
    """Fills nn.vis.cnn.use_spectral_norm when omitted."""
    use_layer_norm: bool = False
    """LayerNorm in the float extractor and heads."""
    use_noisy_linear: bool = False
    """Factorised noisy linear layers in the heads."""
    noisy_sigma0: PositiveFloat = 0.5
    """Initial noise scale of noisy layers."""
    noisy_resample_every_actions: NonNegativeInt = 0
    """Workers' noise sample: redrawn each episode, and every N actions when N > 0 (greedy: none)."""


# --------------------------------------------------------------------------------------------
# on-policy learners
# --------------------------------------------------------------------------------------------


class PpoConfig(Section):
    """PPO loss and update settings (training.algorithm: ppo)."""

    gamma: Annotated[float, Field(ge=0.0, le=1.0)] = 0.99
    """Legacy rollout discount, used when training.policy_rollout_gamma* are unset."""
    gae_lambda: Annotated[float, Field(ge=0.0, le=1.0)] = 0.95
    """GAE lambda."""
    clip_coef: PositiveFloat = 0.2
    """Surrogate clip range."""
    clip_coef_vf: PositiveFloat | None = None
    """Value clip range (null = plain MSE)."""
    ent_coef: NonNegativeFloat = 0.01
    """Entropy bonus coefficient."""
    vf_coef: NonNegativeFloat = 0.5
    """Value loss coefficient."""
    max_grad_norm: PositiveFloat = 0.5
    """Gradient norm clip."""
    update_epochs: PositiveInt = 4
    """Passes over each rollout batch."""
    num_minibatches: PositiveInt = 4
    """Minibatches per epoch."""
    normalize_advantages: bool = True
    """Normalise advantages within each minibatch (as CleanRL / Stable-Baselines3)."""
    rollout_steps_per_update: PositiveInt = 2048
    """Environment steps gathered before one update."""
    ppo_gamma_schedule: UnitKnots | None = None
    """Legacy discount vs frames, linear."""
    gae_lambda_schedule: UnitKnots | None = None
    """GAE lambda vs frames, linear (null = gae_lambda)."""
    ent_coef_schedule: FloatKnots | None = None
    """Entropy coefficient vs frames, linear (null = ent_coef)."""
    vf_coef_schedule: FloatKnots | None = None
    """Value coefficient vs frames, linear (null = vf_coef)."""


class DpoConfig(Section):
    """DPO settings (training.algorithm: dpo)."""

    dpo_beta: PositiveFloat = 0.1
    """Preference loss temperature."""
    dpo_ref_sync_every_updates: PositiveInt = 50
    """Copy the policy into the reference every N pair updates (1 = margin 0 at every pair)."""
    dpo_pair_buffer_max: Annotated[int, Field(ge=2)] = 64
    """Online rollouts kept for pairing."""
    dpo_pair_within_start: bool = True
    """Online pairs: best and worst of one start (worker.rollouts_per_start), not of the whole buffer."""
    dpo_data_mode: Literal["online", "offline", "both"] = "online"
    """Pairs from online rollouts, an offline file, or both."""
    dpo_offline_pairs_jsonl: str | None = None
    """JSONL of {chosen, rejected} rulka episode files (never pickles)."""
    dpo_vf_coef: NonNegativeFloat = 0.1
    """Auxiliary value loss weight (V regressed on the discounted returns; 0 = off)."""
    dpo_update_epochs: PositiveInt = 4
    """Optimiser steps per pair."""
    dpo_num_minibatches: PositiveInt = 4
    """Reserved."""
    dpo_max_grad_norm: PositiveFloat = 0.5
    """Gradient norm clip."""
    dpo_beta_schedule: FloatKnots | None = None
    """dpo_beta vs frames, linear."""
    dpo_vf_coef_schedule: FloatKnots | None = None
    """dpo_vf_coef vs frames, linear."""
    dpo_max_grad_norm_schedule: FloatKnots | None = None
    """dpo_max_grad_norm vs frames, linear."""


class GrpoConfig(Section):
    """GRPO settings (training.algorithm: grpo)."""

    grpo_group_size: Annotated[int, Field(ge=2)] = 4
    """Rollouts per group update."""
    grpo_normalize_group: Literal["mean", "mean_std"] = "mean"
    """Advantages: subtract the group mean, or also divide by the group std."""
    grpo_ent_coef: NonNegativeFloat = 0.01
    """Entropy bonus coefficient."""
    grpo_max_grad_norm: PositiveFloat = 0.5
    """Gradient norm clip."""
    grpo_update_epochs: PositiveInt = 4
    """Passes over each group."""
    grpo_num_minibatches: PositiveInt = 4
    """Reserved."""
    grpo_ref_sync_every_updates: PositiveInt = 50
    """Copy the policy into the reference every N group updates."""
    grpo_ref_kl_coef: NonNegativeFloat = 0.0
    """KL-to-reference weight (0 = off); the KL is exact from the logits."""
    grpo_objective: Literal["reinforce", "clipped"] = "reinforce"
    """reinforce (the guide's; on-policy only) or clipped (DeepSeekMath: ratio, clip, per-step mean)."""
    grpo_clip_coef: PositiveFloat = 0.2
    """Ratio clip range of grpo_objective: clipped."""
    grpo_ent_coef_schedule: FloatKnots | None = None
    """grpo_ent_coef vs frames, linear."""
    grpo_max_grad_norm_schedule: FloatKnots | None = None
    """grpo_max_grad_norm vs frames, linear."""
    grpo_ref_kl_coef_schedule: FloatKnots | None = None
    """grpo_ref_kl_coef vs frames, linear."""


# --------------------------------------------------------------------------------------------
# continuous-action off-policy learners
# --------------------------------------------------------------------------------------------


class SacConfig(Section):
    """SAC and REDQ (training.algorithm: sac): squashed-Gaussian actor, an ensemble of critics,
    polyak targets, automatic entropy tuning, uniform replay. REDQ = n_critics > 2 with a random
    subset of target_critics in the target and updates_per_sample > 1."""

    gamma: Annotated[float, Field(ge=0.0, le=1.0)] = 0.99
    """Discount."""
    actor_lr: PositiveFloat = 3e-4
    """Actor learning rate (Adam)."""
    critic_lr: PositiveFloat = 1e-3
    """Critic learning rate (Adam)."""
    alpha_lr: PositiveFloat = 1e-3
    """Entropy temperature learning rate (Adam, on log alpha)."""
    tau: Annotated[float, Field(gt=0.0, le=1.0)] = 0.005
    """Polyak rate: target <- tau * online + (1 - tau) * target after each critic update."""
    hidden_dim: PositiveInt = 256
    """Width of the actor and critic hidden layers."""
    hidden_layers: PositiveInt = 2
    """Hidden layers of the actor and of each critic."""
    autotune_alpha: bool = True
    """Tune the entropy temperature toward target_entropy (else alpha stays at init_alpha)."""
    init_alpha: PositiveFloat = 1.0
    """Entropy temperature at the start."""
    target_entropy: float | None = None
    """Entropy target of the automatic tuning (null = minus the action dimension)."""
    n_critics: Annotated[int, Field(ge=2)] = 2
    """Critics in the ensemble (2 = SAC's twin critics; REDQ uses 10)."""
    target_critics: Annotated[int, Field(ge=1)] = 2
    """Critics drawn at random for each target's minimum (REDQ's M; 2 of 2 = SAC's clipped double Q)."""
    policy_critic_reduction: Literal["min", "mean"] | None = None
    """Q the actor maximises: min or mean over the critics (null = min for 2 critics, mean for more, as REDQ)."""
    policy_every: PositiveInt | None = None
    """Actor and temperature update every N critic updates (null = round(updates_per_sample): once per sample, as REDQ)."""
    updates_per_sample: PositiveFloat = 1.0
    """Critic updates per env step received (UTD ratio; REDQ uses 20)."""
    start_learning_size: NonNegativeInt = 5000
    """Transitions stored before the first update."""
    random_steps: NonNegativeInt = 5000
    """Each worker's first N steps take uniformly random actions."""
    buffer_size: PositiveInt = 1_000_000
    """Replay capacity in transitions (frames are stored once)."""
    n_steps: PositiveInt = 1
    """n-step returns (1 = SAC's one-step target)."""
    log_std_min: float = -5.0
    """Lower bound of the actor's log standard deviation."""
    log_std_max: float = 2.0
    """Upper bound of the actor's log standard deviation."""


# --------------------------------------------------------------------------------------------
# rulka's own sections
# --------------------------------------------------------------------------------------------


class NetworkConfig(Section):
    """Where the relay is and how roles talk to it."""

    server_host: str = "127.0.0.1"
    """Relay address workers and the trainer connect to."""
    port: Annotated[int, Field(ge=0, le=65535)] = 55555
    """Relay port (0 = pick a free port, tests only)."""
    tls: bool = True
    """Encrypt and authenticate with TLS."""
    allow_plain_tcp: bool = False
    """Must be true to run with tls: false (trusted LAN only; logged as a warning)."""
    credentials_dir: Path = Path("~/.rulka/keys")
    """Folder with certificates and keys (`~` is expanded when used)."""
    chunk_bytes: PositiveInt = 262_144
    """Largest piece a message is split into on the wire."""
    max_message_bytes: PositiveInt = 64 * 1024 * 1024
    """Larger messages are refused and counted."""
    reconnect_backoff_s: tuple[PositiveFloat, PositiveFloat] = (0.5, 10.0)
    """[min, max] delay between reconnection attempts, seconds."""
    local_com_port_base: Annotated[int, Field(ge=1, le=65535)] | None = None
    """First local port for per-process relay links (null = pick automatically)."""
    max_partial_messages: PositiveInt = 16
    """Messages being reassembled at once per receiver."""
    partial_timeout_s: PositiveFloat = 60.0
    """A partly received message idle this long is dropped, seconds."""
    outbox_messages: PositiveInt = 256
    """Messages a link queues before sending blocks the caller."""
    server_queue_bytes: PositiveInt = 1 << 30
    """Bytes the relay queues for an absent trainer; beyond that chunks are dropped and counted."""
    heartbeat_s: PositiveFloat = 1.0
    """How often links check that the relay answers, seconds."""

    @property
    def credentials_path(self) -> Path:
        """credentials_dir with ``~`` expanded."""
        return self.credentials_dir.expanduser()

    def transport_settings(self) -> dict[str, Any]:
        """This section under the names ``rulka.net.settings.NetworkSettings`` takes
        (``host``, a scalar ``reconnect_backoff_s`` plus ``reconnect_backoff_max_s``, ...)."""
        return {
            "host": self.server_host,
            "port": self.port,
            "chunk_bytes": self.chunk_bytes,
            "max_message_bytes": self.max_message_bytes,
            "max_partial_messages": self.max_partial_messages,
            "partial_timeout_s": self.partial_timeout_s,
            "allow_plain_tcp": not self.tls,
            "reconnect_backoff_s": self.reconnect_backoff_s[0],
            "reconnect_backoff_max_s": self.reconnect_backoff_s[1],
            "outbox_messages": self.outbox_messages,
            "server_queue_bytes": self.server_queue_bytes,
            "heartbeat_s": self.heartbeat_s,
        }


class WorkerConfig(Section):
    """A worker (gaming PC): policy, compression, bounded resend queue."""

    name: str | None = None
    """Worker name in logs and credentials (null = host name)."""
    actor: str | None = None
    """ActorModule plugin: registry name or module:Class (null = training.algorithm)."""
    actor_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the actor plugin."""
    compressor: str = "zstd"
    """SampleCompressor plugin: registry name or module:Class."""
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
    """Environments this worker runs."""
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
    pause_for_credit: bool = True
    """Pause between segments while the trainer withholds credit (false: a real-time game).
    The trainer withholds credit while its learner is behind the replay ratio. A real-time game
    that cannot wait keeps acting; the trainer defers, then drops (counted), what its rate
    limiter cannot admit."""


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
    """TrainingAgent plugin: registry name or module:Class (null = training.algorithm)."""
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the agent plugin."""
    memory: str | None = None
    """Memory plugin: registry name or module:Class (null = training.algorithm)."""
    memory_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the memory plugin."""
    max_updates_per_env_step: PositiveFloat | None = None
    """Pause training above this ratio of updates to received env steps (null = no limit but the memory's own)."""
    publish_every_updates: PositiveInt | None = None
    """Publish weights every N updates (null = 1 for the on-policy ppo/grpo/dpo, 100 otherwise).

    On-policy learners need every update to reach the workers; over a network IQN publishes rarer
    than the guide's shared-memory 8."""
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
    """Greedy episodes per map that judge a best-policy candidate the trainer asks for: a race is
    deterministic (one is enough); a Gymnasium env is ranked by the mean return of these episodes."""
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

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        kind, _, index = self.device.partition(":")
        if kind == "cuda":
            if not torch.cuda.is_available():
                raise ConfigError(f"config key `trainer.device` is {self.device} but torch sees no CUDA device")
            if index and int(index) >= torch.cuda.device_count():
                raise ConfigError(
                    f"config key `trainer.device` is {self.device} but torch sees {torch.cuda.device_count()} CUDA device(s)"
                )
        if kind == "mps" and not torch.backends.mps.is_available():
            raise ConfigError("config key `trainer.device` is mps but torch sees no MPS device")
        return self.device


class WandbConfig(Section):
    enabled: bool = True
    """Log to Weights & Biases."""
    mode: Literal["offline", "online", "disabled"] = "offline"
    """wandb mode (offline needs no account; sync later)."""
    project: str = "rulka"
    """wandb project."""
    entity: str | None = None
    """wandb entity (user or team)."""


class TensorboardConfig(Section):
    enabled: bool = True
    """Write TensorBoard event files."""


class LoggingConfig(Section):
    """Where runs are written and which dashboards get metrics (JSONL is always written)."""

    run_dir: Path = Path("runs")
    """Parent folder of run folders."""
    wandb: WandbConfig = Field(default_factory=WandbConfig)
    """Weights & Biases."""
    tensorboard: TensorboardConfig = Field(default_factory=TensorboardConfig)
    """TensorBoard."""
    log_every_s: PositiveFloat = 10
    """Seconds between metric lines."""
    progress: Literal["auto", "always", "never"] = "auto"
    """Progress bar: auto = only on a terminal."""


class UserConfig(Section):
    """Machine-specific values, usually from .env (guide: User-specific settings)."""

    username: str = "Player"
    """TrackMania account / profile name."""
    trackmania_base_path: str = "~/Documents/TrackMania"
    """TrackMania user folder."""
    target_python_link_path: str = "~/Documents/TMInterface/Plugins/RulkaLink.as"
    """Where `rulka tm install-plugin` puts rulka's TMInterface plugin (its folder is TMInterface's plugin folder)."""
    base_tmi_port: Annotated[int, Field(ge=1, le=65535)] = 8478
    """First TMInterface port (one per game instance)."""
    linux_launch_game_path: str | None = None
    """Script that starts the game on Linux."""
    windows_tmloader_path: str = "~/AppData/Local/TMLoader/TMLoader.exe"
    """TMLoader executable on Windows."""
    windows_tmloader_profile_name: str = "default"
    """TMLoader profile."""
