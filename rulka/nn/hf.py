"""Hugging Face backbones (optional extra: ``pip install "rulka[hf]"``, which brings transformers).

* ``nn.vis.transformer`` with ``use_hf_backbone: true``: the vision stem is the model at
  ``model_name_or_path`` (``AutoModel``, e.g. a ViT), fed ``pixel_values``: the grey frame
  normalised like the other stems, repeated to the model's ``num_channels`` and resized to its
  ``image_size``. Summary vector: the mean of ``last_hidden_state``; tokens: all of them.
* ``nn.encoder.fusion_encoder: hf_embedding``: the fusion trunk is the encoder at
  ``hf_embedding.model_name_or_path`` (or ``encoder.transformer.model_name_or_path`` with
  ``use_hf_backbone``), fed ``inputs_embeds`` (the fusion tokens, projected to its hidden size);
  output: the mean of ``last_hidden_state``.

``model_name_or_path`` is a local folder or a hub id, resolved as transformers resolves it;
weights are read from safetensors only (``use_safetensors=True``: a folder holding only a pickle
``pytorch_model.bin`` is refused, naming the file). ``trust_remote_code`` in a config asks to run
the model folder's own Python files; it takes effect only when this process's command line says
``--trust-remote-code`` (:mod:`rulka.trust`; a warning line names the folder), on the trainer and on
each worker alike, so a config file or the trainer's network description alone never runs code. The model's config (``config.json``)
is read once by the trainer and travels inside the network topology, so a worker builds the same
architecture with ``from_config`` and gets the weights from the trainer: workers never download.
The trainer loads the pretrained weights (``from_pretrained``) when it builds its learner
(``rulka.nn.freeze.prepare_network``), before ``nn.init_from_pretrained``. Nothing is imported or
downloaded unless a config names a Hugging Face backbone.

Checkpoints in the guide's layout: beside rulka's safetensors, ``hf_transformer_vis/`` (the HF
vision stem) and ``hf_transformer_fusion/`` (the HF fusion trunk) in transformers' save_pretrained
layout (``AutoModel.from_pretrained`` loads them; so does a later run's ``model_name_or_path``).
The trainer writes them into every checkpoint folder, ``<run>/weights/`` and ``<run>/best/``
(``save_hf_parts_from_weights``, from the published weights and their actor spec), ``rulka pretrain
bc`` into its output (``save_hf_parts``); each sub-folder is replaced atomically
(``replace_folder``). A network without HF modules writes none and pays a dictionary look-up.
Rulka's native fusion transformers have no transformers layout: their tensors are in rulka's
safetensors only (the original Rulka wrapped its whole fusion policy as a transformers model there;
``nn.init_from_pretrained`` loads rulka's files instead, ``rulka.nn.pretrained``).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rulka.errors import ConfigError

EXTRA = 'pip install "rulka[hf]"'


def require_transformers(what: str = "a Hugging Face backbone") -> Any:
    """The transformers module, or a ConfigError naming the extra that installs it."""
    try:
        import transformers
    except ImportError:
        raise ConfigError(f"{what} needs the optional extra with transformers: {EXTRA}") from None
    return transformers


VIS_KEY = "nn.vis.transformer.trust_remote_code"
FUSION_KEYS = ("nn.encoder.hf_embedding.trust_remote_code", "nn.encoder.transformer.trust_remote_code")


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= 300 else text[:297] + "..."


def remote_code(requested: bool, path: str, key: str = VIS_KEY) -> bool:
    """``trust_remote_code`` for transformers: what the config asks, allowed only by the command line
    (``rulka.trust.check_remote_code``: a ConfigError without ``--trust-remote-code``)."""
    from rulka.trust import check_remote_code

    return check_remote_code(bool(requested), key, path)


def check_safetensors_folder(path: str, what: str) -> None:
    """A local model folder must hold safetensors weights: one holding only pickle files
    (``pytorch_model.bin``, ``*.pt``, ``*.ckpt``) is refused, naming the file (nothing is unpickled)."""
    folder = Path(path)
    if not folder.is_dir() or any(folder.glob("*.safetensors")):
        return
    pickles = sorted(p.name for pattern in ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl") for p in folder.glob(pattern))
    if pickles:
        raise ConfigError(f"{what}: {folder / pickles[0]} holds pickle weights, which rulka never loads; "
                          f"save the model with safetensors (model.save_pretrained(folder, safe_serialization=True))")


def read_hf_config(path: str, trust_remote_code: bool = False, hidden_dropout_prob: float | None = None,
                   what: str = "a Hugging Face backbone", key: str = VIS_KEY) -> dict[str, Any]:
    """The model's config as plain data (what travels to the workers)."""
    tf = require_transformers(what)
    trust = remote_code(trust_remote_code, path, key)
    try:
        conf = tf.AutoConfig.from_pretrained(path, trust_remote_code=trust)
    except Exception as exc:  # noqa: BLE001 - any loading error is one line naming the folder
        raise ConfigError(f"{what}: cannot read the model config at {path!r}: {_first_line(exc)}") from None
    if hidden_dropout_prob is not None and hasattr(conf, "hidden_dropout_prob"):
        conf.hidden_dropout_prob = float(hidden_dropout_prob)
    return json.loads(conf.to_json_string())


def _config_from_dict(d: Mapping[str, Any], path: str, trust_remote_code: bool) -> Any:
    tf = require_transformers()
    d = dict(d)
    model_type = d.pop("model_type", None)
    try:
        return tf.AutoConfig.for_model(model_type, **d)
    except (ValueError, KeyError):
        if not trust_remote_code:
            raise
        # a model with its own code: its config class comes from its folder or hub repo
        conf = tf.AutoConfig.from_pretrained(path, trust_remote_code=True)
        for k, v in d.items():
            setattr(conf, k, v)
        return conf


class _HfModule(nn.Module):
    """An ``AutoModel`` built from the config dict of a slot (``hf_config``, ``model_name_or_path``,
    ``trust_remote_code``)."""

    def __init__(self, hf_config: Mapping[str, Any], path: str, trust_remote_code: bool, key: str = VIS_KEY) -> None:
        super().__init__()
        tf = require_transformers()
        self.path = path
        self.trust_remote_code = remote_code(trust_remote_code, path, key)
        try:
            self.model = tf.AutoModel.from_config(_config_from_dict(hf_config, path, self.trust_remote_code),
                                                  trust_remote_code=self.trust_remote_code)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - a config transformers cannot build: one line
            raise ConfigError(f"cannot build the Hugging Face model of {path!r}: {_first_line(exc)}") from None
        self.hidden_size = int(self.model.config.hidden_size)

    def load_hub_weights(self) -> int:
        """Copy the pretrained weights at ``model_name_or_path`` into the model (safetensors only);
        returns how many tensors were loaded."""
        tf = require_transformers()
        what = f"the pretrained weights at {self.path!r}"
        check_safetensors_folder(self.path, what)
        try:
            src = tf.AutoModel.from_pretrained(self.path, config=self.model.config, use_safetensors=True,
                                               trust_remote_code=self.trust_remote_code)
        except Exception as exc:  # noqa: BLE001 - missing, pickle-only or damaged weights: one line
            raise ConfigError(f"cannot load {what} (safetensors only): {_first_line(exc)}") from None
        missing, unexpected = self.model.load_state_dict(src.state_dict(), strict=False)
        return len(src.state_dict()) - len(unexpected)

    def save_pretrained(self, folder: str | Path) -> None:
        self.model.save_pretrained(str(folder))


class HfVisionBackbone(_HfModule):
    """The ``nn.vis.transformer`` stem with ``use_hf_backbone`` (see the module docstring)."""

    def __init__(self, height: int, width: int, slot: Mapping[str, Any]) -> None:
        if not slot.get("hf_config"):
            raise ConfigError("nn.vis.transformer.use_hf_backbone: the topology carries no model config")
        super().__init__(slot["hf_config"], str(slot["model_name_or_path"]), bool(slot.get("trust_remote_code")),
                         VIS_KEY)
        conf = self.model.config
        self.d_model = self.hidden_size
        self.channels = int(getattr(conf, "num_channels", 3))
        size = getattr(conf, "image_size", None)
        self.size = None if size is None else ((size, size) if isinstance(size, int) else tuple(size))

    def _pixels(self, img: torch.Tensor) -> torch.Tensor:
        from rulka.nn.blocks import _to_float_image

        x = _to_float_image(img)
        if x.shape[1] != self.channels:
            x = x[:, :1].expand(-1, self.channels, -1, -1)
        if self.size is not None and tuple(x.shape[2:]) != self.size:
            x = nn.functional.interpolate(x, size=self.size, mode="bilinear", align_corners=False)
        return x

    def tokens(self, img: torch.Tensor) -> torch.Tensor:
        """``(B, 1 + T, hidden)``: the mean token, then the model's ``T`` output tokens."""
        h = self.model(pixel_values=self._pixels(img)).last_hidden_state
        return torch.cat([h.mean(dim=1, keepdim=True), h], dim=1)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=self._pixels(img)).last_hidden_state.mean(dim=1)


def _fusion_source(encoder: Mapping[str, Any]) -> tuple[str, bool, float | None]:
    hf, tr = encoder.get("hf_embedding") or {}, encoder["transformer"]
    if hf.get("model_name_or_path"):
        return str(hf["model_name_or_path"]), bool(hf.get("trust_remote_code")), hf.get("hidden_dropout_prob")
    return str(tr.get("model_name_or_path") or ""), bool(tr.get("trust_remote_code")), tr.get("hidden_dropout_prob")


def _fusion_key(encoder: Mapping[str, Any]) -> str:
    """The config key whose ``trust_remote_code`` the fusion trunk takes."""
    return FUSION_KEYS[0] if (encoder.get("hf_embedding") or {}).get("model_name_or_path") else FUSION_KEYS[1]


class HfEmbeddingTrunk(_HfModule):
    """The ``hf_embedding`` fusion trunk (see the module docstring)."""

    def __init__(self, encoder: Mapping[str, Any]) -> None:
        path, trust, _ = _fusion_source(encoder)
        if not encoder.get("hf_config"):
            raise ConfigError("nn.encoder.fusion_encoder hf_embedding: the topology carries no model config")
        super().__init__(encoder["hf_config"], path, trust, _fusion_key(encoder))
        d = int(encoder["transformer"]["d_model"])
        self.proj = nn.Linear(d, self.hidden_size) if d != self.hidden_size else nn.Identity()
        self.out_dim = self.hidden_size

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(inputs_embeds=self.proj(tokens)).last_hidden_state.mean(dim=1)


def add_hf_configs(topology: dict[str, Any]) -> dict[str, Any]:
    """Read the model configs the topology's HF slots name into it (``hf_config``; the trainer does
    this once, in ``rulka.nn.fusion.topology_from_config``)."""
    vt = topology.get("vis_transformer")
    if vt and vt.get("use_hf_backbone"):
        vt["hf_config"] = read_hf_config(vt["model_name_or_path"], bool(vt.get("trust_remote_code")),
                                         vt.get("hidden_dropout_prob"), "nn.vis.transformer.use_hf_backbone", VIS_KEY)
    enc = topology["encoder"]
    if enc.get("fusion_encoder") == "hf_embedding" and topology["fusion_mode"] != "none":
        path, trust, dropout = _fusion_source(enc)
        enc["hf_config"] = read_hf_config(path, trust, dropout, "nn.encoder.fusion_encoder hf_embedding",
                                          _fusion_key(enc))
    return topology


def load_hub_weights(net: nn.Module) -> int:
    """Pretrained weights into every HF module of ``net``; returns the tensors loaded."""
    return sum(m.load_hub_weights() for m in net.modules() if isinstance(m, _HfModule))


# The guide's checkpoint layout: each HF module of a network in transformers' save_pretrained form,
# in a sub-folder of the folder holding rulka's safetensors; and where the shared encoder
# (rulka.nn.encoder) puts the module, so the parts can be cut out of a weights dict.
HF_PARTS: dict[str, str] = {"hf_transformer_vis": "img_head.model.", "hf_transformer_fusion": "fusion.trunk.model."}


def save_hf_parts(net: nn.Module, folder: str | Path) -> list[str]:
    """``hf_transformer_vis/`` and ``hf_transformer_fusion/`` (save_pretrained layout) for the HF
    modules of ``net``, each written atomically (``replace_folder``); returns the sub-folders
    written (none, and nothing imported, for a network without HF modules)."""
    out = []
    for m in net.modules():
        if isinstance(m, HfVisionBackbone):
            name = "hf_transformer_vis"
        elif isinstance(m, HfEmbeddingTrunk):
            name = "hf_transformer_fusion"
        else:
            continue
        replace_folder(Path(folder), name, m.save_pretrained)
        out.append(name)
    return out


def hf_slots(network: Mapping[str, Any]) -> dict[str, tuple[Mapping[str, Any], str, bool]]:
    """The HF modules a network spec (an actor spec's ``kwargs["network"]``) builds: part name ->
    (model config, ``model_name_or_path``, ``trust_remote_code``). Empty, without parsing the
    topology, for a network with none (the no-op every save of such a network pays)."""
    topology = network.get("topology")
    if not topology or "hf_config" not in topology:
        return {}
    topo = json.loads(topology)
    out: dict[str, tuple[Mapping[str, Any], str, bool]] = {}
    vt = topo.get("vis_transformer") or {}
    if vt.get("use_hf_backbone") and vt.get("hf_config") and int(network.get("image_height") or 0) > 0:
        out["hf_transformer_vis"] = (vt["hf_config"], str(vt["model_name_or_path"]), bool(vt.get("trust_remote_code")))
    enc = topo.get("encoder") or {}
    if topo.get("fusion_mode", "none") != "none" and enc.get("fusion_encoder") == "hf_embedding" and enc.get("hf_config"):
        path, trust, _ = _fusion_source(enc)
        out["hf_transformer_fusion"] = (enc["hf_config"], path, trust)
    return out


def save_hf_parts_from_weights(weights: Mapping[str, Any], actor_spec: Mapping[str, Any],
                               folder: str | Path) -> list[str]:
    """The same sub-folders as ``save_hf_parts``, from a published weights dict and its actor spec
    (what the trainer's ``weights/`` and ``best/`` hold): each HF model is rebuilt from the config
    in the topology, given its tensors (``HF_PARTS`` prefix cut off) and saved. Returns the
    sub-folders written; a network without HF modules writes nothing and imports nothing."""
    from rulka.nn.blocks import normalise_name

    network = (actor_spec.get("kwargs") or {}).get("network") or {}
    slots = hf_slots(network) if isinstance(network, Mapping) else {}
    if not slots:
        return []
    flat = {normalise_name(k): v for k, v in weights.items()}
    out = []
    for name, (hf_config, path, trust) in slots.items():
        prefix = HF_PARTS[name]
        sub = {k[len(prefix):]: torch.as_tensor(v).detach().cpu() for k, v in flat.items() if k.startswith(prefix)}
        key = VIS_KEY if name == "hf_transformer_vis" else FUSION_KEYS[0]
        replace_folder(Path(folder), name, _with_weights(hf_config, path, trust, sub, key).save_pretrained)
        out.append(name)
    return out


def _with_weights(hf_config: Mapping[str, Any], path: str, trust: bool, tensors: dict[str, torch.Tensor],
                  key: str = VIS_KEY) -> _HfModule:
    """The model of ``hf_config`` holding ``tensors`` (strict: every tensor of the model). Built on
    the meta device and given the tensors themselves, so no random initialisation is paid (a
    ViT-base: 0.2 s instead of 9-22 s on a 2-core machine); a model that cannot be built there
    is built on the CPU."""
    try:
        with torch.device("meta"):
            module = _HfModule(hf_config, path, trust, key)
        module.model.load_state_dict(tensors, assign=True)
    except (RuntimeError, NotImplementedError, ValueError, TypeError):
        module = _HfModule(hf_config, path, trust, key)
        module.model.load_state_dict(tensors)
    return module


def replace_folder(parent: Path, name: str, write: Callable[[Path], None]) -> Path:
    """Write the folder ``parent/name`` with ``write(path)`` so that a reader finds the previous
    complete folder or the new complete one, never a half-written one: ``write`` fills
    ``.<name>.tmp`` (deleted if ``write`` raises), its files are fsynced, the old folder steps
    aside to ``.<name>.old``, the new one takes its name, the old one is deleted. A crash between the two renames leaves no
    ``name`` but a complete ``.<name>.old``, which the next call puts back before anything else."""
    parent.mkdir(parents=True, exist_ok=True)
    final, tmp, old = parent / name, parent / f".{name}.tmp", parent / f".{name}.old"
    if old.is_dir() and not final.exists():
        os.replace(old, final)  # an earlier call stopped between its two renames
    for stale in (tmp, old):
        shutil.rmtree(stale, ignore_errors=True)
    try:
        write(tmp)
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "r+b") as fh:  # write access: Windows' FlushFileBuffers needs it
                    os.fsync(fh.fileno())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a killed process leaves it: the next call clears it
        raise
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final
