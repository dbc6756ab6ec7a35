"""``nn``: the network catalogue (image and float branches, fusion, IQN core, decoder heads, nn.training)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from rulka.config.sections.common import Section

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
    """Allow the HF model's own code to run; takes effect only with ``--trust-remote-code`` on the
    command line of each process that builds the model (a config file alone cannot turn it on)."""
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
    """Allow the HF model's own code to run; takes effect only with ``--trust-remote-code`` on the
    command line of each process that builds the model (a config file alone cannot turn it on)."""
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
    """Transformer head (alias transformer_encoder; IQN only): the head's input cut into d_model tokens."""

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
    """IQN: heads read features*phi(tau) (post_tau) or dense(features)*phi(tau) (pre_tau, dense once per state).

    post_tau: the quantile embedding phi(tau) is as wide as the encoder's output. pre_tau: a
    shared dense layer of width dense_hidden_dimension runs once per state before the modulation
    (B rows instead of B*n through it); phi(tau) has that width. Transformer heads need post_tau.
    PPO/GRPO/DPO have no tau: pre_tau is refused there."""
    dense_hidden_dimension: Annotated[int, Field(ge=32)] = 1024
    """Hidden width after the features: PPO's trunk; IQN's heads get half; IQN pre_tau's shared dense layer."""
    shared_trunk_freeze: bool = False
    """Do not train the shared trunk (PPO/GRPO/DPO; IQN with shared_input pre_tau)."""
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
    """Compile networks with TorchScript / torch.compile where supported.
    IQN compiles on CUDA only: its update's forwards and loss as one function with gradients always on
    and static shapes (no recompile on grad mode or shapes; compile_mode picks torch.compile's mode).
    On an H200 the earlier per-network compile was slower than eager in every paired row of
    bench/learner.py --compile (docs/performance.md); this one is not measured on a GPU yet, so the
    shipped configs keep it off."""
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = "default"
    """torch.compile's mode with use_jit (IQN on CUDA; reduce-overhead: CUDA graphs).

    reduce-overhead replays the compiled forwards and backward as CUDA graphs (fewer kernel
    launches, more GPU memory). Not measured on a GPU yet (bench/learner.py --steps)."""
    use_ddqn: bool = False
    """Double DQN targets: online net picks the action, target net evaluates it."""
    target_action: Literal["quantile_max", "mean_argmax"] = "quantile_max"
    """No-DDQN target: max per target quantile (Linesight) or argmax of the quantile mean (IQN paper)."""
    use_amp: bool = True
    """Mixed precision on CUDA (ignored on CPU)."""
    amp_dtype: Literal["float16", "bfloat16"] = "float16"
    """Autocast dtype with use_amp (IQN): float16 (with a loss scaler) or bfloat16 (none needed).

    float16 scales the loss (a GradScaler, which reads its inf check back from the GPU every
    update); bfloat16 keeps float32's range and needs neither (Ampere and newer GPUs). Not
    measured on a GPU yet (bench/learner.py --steps)."""
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
    """Tensors loaded by name at start from: a `rulka pretrain` folder, a run folder, its weights/ or best/, a checkpoint, an hf_transformer_* part."""
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
