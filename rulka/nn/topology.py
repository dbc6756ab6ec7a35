"""What a config's ``nn`` section builds, worked out without torch.

The fusion ``topology`` that :func:`topology_from_config` writes into the network spec (the modes
and trunks are described in ``rulka.nn.fusion``, which builds them), the network kind the freeze
flags name (``rulka.nn.freeze`` applies them), and :func:`inert_keys`: the ``nn`` keys set away
from their default that the configured network would not read, which
``rulka.config.built.check_built`` refuses. ``rulka config validate`` needs only this module, so it
never imports torch (``tests/test_cli_light.py`` checks that).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

FUSION_ENCODERS = ("linear", "native_transformer", "mlp", "cnn", "hf_embedding")

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


def default_fusion_encoder(mode: str, encoder: Mapping[str, Any]) -> str:
    """The trunk when ``nn.encoder.fusion_encoder`` is null: ``hf_embedding`` with an HF fusion
    backbone, ``linear`` for vision_transformer, ``native_transformer`` for post_concat / unified."""
    if encoder["transformer"].get("use_hf_backbone"):
        return "hf_embedding"
    return "linear" if mode == "vision_transformer" else "native_transformer"


def topology_from_config(cfg: Any) -> str | None:
    """The topology of ``cfg.nn`` for the network spec, as JSON text; None for the plain encoder
    (``fusion_mode: none`` with a CNN stem or no image), which keeps older specs unchanged."""
    from rulka.config.sections import FusionCnnConfig, FusionMlpConfig, HfEmbeddingConfig

    nn_cfg = cfg.nn
    vt = None if nn_cfg.vis.no_image else nn_cfg.vis.transformer
    if nn_cfg.fusion_mode == "none" and vt is None:
        return None
    enc = nn_cfg.encoder
    encoder = {
        "transformer": enc.transformer.model_dump(),
        "fusion_mlp": (enc.fusion_mlp or FusionMlpConfig()).model_dump(),
        "fusion_cnn": (enc.fusion_cnn or FusionCnnConfig()).model_dump(),
        "hf_embedding": (enc.hf_embedding or HfEmbeddingConfig()).model_dump(),
        "post_concat_layout": enc.post_concat_layout,
        "float_token_input": enc.float_token_input,
        "float_token_layout": enc.float_token_layout,
    }
    encoder["fusion_encoder"] = enc.fusion_encoder or default_fusion_encoder(nn_cfg.fusion_mode, encoder)
    topology = {"fusion_mode": nn_cfg.fusion_mode, "vis_transformer": None if vt is None else vt.model_dump(),
                "encoder": encoder}
    if (vt is not None and vt.use_hf_backbone) or (nn_cfg.fusion_mode != "none" and encoder["fusion_encoder"] == "hf_embedding"):
        from rulka.nn.hf import add_hf_configs

        add_hf_configs(topology)  # the model configs travel with the topology: workers never download
    return json.dumps(topology, sort_keys=True)


def float_hidden_dim(cfg: Any) -> int:
    """The float MLP's width: ``nn.encoder.mlp`` overrides ``nn.float.mlp`` in fusion builds."""
    nn_cfg = cfg.nn
    return nn_cfg.float_hidden_dim_effective if nn_cfg.fusion_mode != "none" else nn_cfg.float_hidden_dim


RESET_KEYS = ("single_reset_flag", "reset_every_n_frames_generated", "additional_transition_after_reset",
              "last_layer_reset_factor", "overall_reset_mul_factor")


def learner_inert_keys(cfg: Any) -> list[str]:
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


def inert_keys(cfg: Any) -> list[str]:
    """``nn`` keys set away from their default that the configured topology does not read, each
    with the reason (``rulka.config.built.check_built`` refuses them, so none validates "ok" and
    does nothing)."""
    from rulka.config.sections import EncoderConfig, TransformersConfig

    nn_cfg = cfg.nn
    out: list[str] = learner_inert_keys(cfg)
    mode, enc = nn_cfg.fusion_mode, nn_cfg.encoder
    if mode == "none":
        if enc.model_dump() != EncoderConfig().model_dump():
            out.append("`nn.encoder` is read only when `nn.fusion_mode` is not none")
    default_slot = TransformersConfig()
    vt = nn_cfg.vis.transformer
    if vt is not None and not nn_cfg.vis.no_image:
        for key in ("post_concat_seq_len", "unified_float_tokens"):
            if getattr(vt, key) != getattr(default_slot, key):
                out.append(f"`nn.vis.transformer.{key}` is not read: the fusion stack's is "
                           f"`nn.encoder.transformer.{key}`")
        if vt.fusion_tokens != default_slot.fusion_tokens and not (
                mode == "post_concat" and enc.post_concat_layout == "token_sequence"):
            out.append("`nn.vis.transformer.fusion_tokens` is read only with post_concat + token_sequence")
        if vt.use_hf_backbone and mode == "unified":
            out.append("`nn.vis.transformer.use_hf_backbone` cannot join fusion_mode unified "
                       "(its layers are not rulka's); use post_concat or vision_transformer")
        if not vt.use_hf_backbone:
            for key in ("model_name_or_path", "trust_remote_code", "hidden_dropout_prob"):
                if getattr(vt, key) != getattr(default_slot, key):
                    out.append(f"`nn.vis.transformer.{key}` is read only with use_hf_backbone")
    if mode != "none":
        slot = enc.transformer
        kind = enc.fusion_encoder or default_fusion_encoder(mode, {"transformer": slot.model_dump()})
        for key in ("patch_size", "fusion_tokens"):
            if getattr(slot, key) != getattr(default_slot, key):
                out.append(f"`nn.encoder.transformer.{key}` is not read (a vision setting: nn.vis.transformer)")
        if kind != "native_transformer":
            for key in ("n_layers", "n_heads", "ff_mult", "dropout"):
                if getattr(slot, key) != getattr(default_slot, key):
                    out.append(f"`nn.encoder.transformer.{key}` is read only by fusion_encoder native_transformer")
        if slot.use_hf_backbone and kind != "hf_embedding":
            out.append("`nn.encoder.transformer.use_hf_backbone` is read only by fusion_encoder hf_embedding")
        for key, wanted in (("fusion_mlp", "mlp"), ("fusion_cnn", "cnn"), ("hf_embedding", "hf_embedding")):
            if getattr(enc, key) is not None and kind != wanted:
                out.append(f"`nn.encoder.{key}` is read only by fusion_encoder {wanted}")
        if kind == "hf_embedding" and not (slot.use_hf_backbone or (enc.hf_embedding and
                                                                   enc.hf_embedding.model_name_or_path)):
            out.append("fusion_encoder hf_embedding needs `nn.encoder.hf_embedding.model_name_or_path` "
                       "(or encoder.transformer.use_hf_backbone with its model_name_or_path)")
        if mode != "post_concat" or enc.post_concat_layout != "token_sequence":
            for key, default in (("float_token_input", "raw"), ("float_token_layout", "dense")):
                if getattr(enc, key) != default:
                    out.append(f"`nn.encoder.{key}` is read only with post_concat + token_sequence")
            if mode != "post_concat" and enc.post_concat_layout != "fused_vector":
                out.append("`nn.encoder.post_concat_layout` is read only with fusion_mode post_concat")
        if mode == "post_concat" and enc.post_concat_layout == "token_sequence" and \
                slot.post_concat_seq_len != default_slot.post_concat_seq_len:
            out.append("`nn.encoder.transformer.post_concat_seq_len` is read only with post_concat_layout fused_vector")
        if mode != "post_concat" and slot.post_concat_seq_len != default_slot.post_concat_seq_len:
            out.append("`nn.encoder.transformer.post_concat_seq_len` is read only with fusion_mode post_concat")
        if mode != "unified" and slot.unified_float_tokens != default_slot.unified_float_tokens:
            out.append("`nn.encoder.transformer.unified_float_tokens` is read only with fusion_mode unified")
    return out
