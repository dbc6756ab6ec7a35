"""Hugging Face backbones (extra rulka[hf]): tiny models built from a config and saved to a temporary
folder, loaded by ``model_name_or_path``; nothing downloads. The trainer's learner gets their
pretrained weights; a worker rebuilds the architecture from the topology alone; trust_remote_code
is passed through, off by default; without transformers the error names the extra."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest
import torch

from rulka.config import config_from_dict
from rulka.errors import ConfigError
from rulka.nn.fusion import topology_from_config

transformers = pytest.importorskip("transformers")

H, W, F = 36, 48, 5


@pytest.fixture
def hub(tmp_path):
    """Tiny ViT (one channel, 32x32, 8x8 patches) and BERT encoders saved like hub models."""
    torch.manual_seed(0)
    vit = transformers.ViTModel(transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                       intermediate_size=64, image_size=32, patch_size=8,
                                                       num_channels=1))
    vit.save_pretrained(tmp_path / "vit")
    bert = transformers.BertModel(transformers.BertConfig(vocab_size=16, hidden_size=48, num_hidden_layers=1,
                                                          num_attention_heads=2, intermediate_size=64,
                                                          max_position_embeddings=64))
    bert.save_pretrained(tmp_path / "bert")
    return {"vit": (tmp_path / "vit", vit), "bert": (tmp_path / "bert", bert)}


def hf_nn(hub, mode="post_concat") -> dict:
    return {"fusion_mode": mode,
            "vis": {"image_size": {"width": W, "height": H},
                    "transformer": {"use_hf_backbone": True, "model_name_or_path": str(hub["vit"][0])}},
            "encoder": {"fusion_encoder": "hf_embedding", "transformer": {"d_model": 32, "n_layers": 1, "n_heads": 2},
                        "hf_embedding": {"model_name_or_path": str(hub["bert"][0])}}}


def specs(topology):
    from rulka.agents.iqn.network import IQNNetworkSpec
    from rulka.agents.policy.network import PolicyNetworkSpec

    kw = dict(float_dim=F, n_actions=3, image_height=H, image_width=W, float_hidden_dim=16, topology=topology)
    return IQNNetworkSpec(dense_hidden_dimension=32, embedding_dimension=8, **kw), PolicyNetworkSpec(trunk_hidden_dim=32, **kw)


def test_hf_vision_and_fusion_train_load_hub_weights_and_rebuild_on_a_worker(hub, tmp_path):
    from rulka.agents.iqn import IQNActor
    from rulka.agents.iqn.network import IQNNetwork, mean_q
    from rulka.agents.policy.network import ActorCritic
    from rulka.nn.freeze import prepare_network
    from rulka.nn.hf import HfEmbeddingTrunk, HfVisionBackbone, save_hf_parts

    cfg = config_from_dict({"environment": {"backend": "sim"}, "training": {"algorithm": "iqn"}, "nn": hf_nn(hub)})
    topology = topology_from_config(cfg)
    topo = json.loads(topology)
    assert topo["vis_transformer"]["hf_config"]["model_type"] == "vit"
    assert topo["encoder"]["hf_config"]["model_type"] == "bert"
    iqn_spec, pol_spec = specs(topology)
    net = IQNNetwork(iqn_spec)
    assert isinstance(net.img_head, HfVisionBackbone) and isinstance(net.fusion.trunk, HfEmbeddingTrunk)
    # from the config alone: not the saved weights yet
    vit_saved = hub["vit"][1].state_dict()
    name = "embeddings.patch_embeddings.projection.weight"
    assert not torch.equal(net.img_head.model.state_dict()[name], vit_saved[name])
    opt = torch.optim.Adam(net.parameters())
    info = prepare_network(cfg, net, opt, "iqn")
    assert info["hub_tensors"] > 0
    assert torch.equal(net.img_head.model.state_dict()[name], vit_saved[name])
    bert_saved = hub["bert"][1].state_dict()
    assert all(torch.equal(v, bert_saved[k]) for k, v in net.fusion.trunk.model.state_dict().items() if k in bert_saved)
    # trains: gradient reaches both HF models
    img = torch.randint(0, 256, (2, H, W), dtype=torch.uint8)
    flt = torch.randn(2, F)
    mean_q(net, img, flt, 4).square().sum().backward()
    for part in (net.img_head.model, net.fusion.trunk.model):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters())
    ActorCritic(pol_spec)(img, flt)  # the actor-critic builds the same stack
    # the guide's checkpoint layout beside rulka's safetensors
    assert save_hf_parts(net, tmp_path / "ckpt") == ["hf_transformer_vis", "hf_transformer_fusion"]
    assert (tmp_path / "ckpt" / "hf_transformer_vis" / "config.json").is_file()
    # a worker: the model folders are gone, the topology alone rebuilds the network; weights by message
    shutil.rmtree(hub["vit"][0])
    shutil.rmtree(hub["bert"][0])
    actor = IQNActor(json.loads(json.dumps(iqn_spec.to_dict())), iqn_k=4)
    actor.load_weights({k: v.detach().clone() for k, v in net.state_dict().items()})
    net.eval()
    taus = (torch.arange(4, dtype=torch.float32) + 0.5) / 4
    with torch.no_grad():
        want = mean_q(net, img[:1], flt[:1], 4, taus)[0].numpy()
    got = actor.q_values({"img": img[0].numpy(), "float": flt[0].numpy()}, test=True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_trust_remote_code_needs_the_command_line_and_is_off_by_default(hub, monkeypatch):
    """A config's trust_remote_code reaches transformers only when this process was started with
    --trust-remote-code (rulka.trust); without it the config is refused, naming the key."""
    from rulka import trust

    seen = []
    real = transformers.AutoConfig.from_pretrained

    def spy(path, *args, **kwargs):
        seen.append(kwargs.get("trust_remote_code"))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", spy)
    nn = hf_nn(hub)
    topology_from_config(config_from_dict({"nn": nn}))
    assert seen == [False, False]
    nn["vis"]["transformer"]["trust_remote_code"] = True
    nn["encoder"]["hf_embedding"]["trust_remote_code"] = True
    seen.clear()
    with pytest.raises(ConfigError, match=r"`nn.vis.transformer.trust_remote_code`.*--trust-remote-code"):
        topology_from_config(config_from_dict({"nn": nn}))
    assert seen == []
    trust.allow_remote_code(True)
    topology_from_config(config_from_dict({"nn": nn}))
    assert seen == [True, True]


def test_a_missing_extra_is_a_clear_error(hub, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    with pytest.raises(ConfigError, match=r'needs the optional extra with transformers: pip install "rulka\[hf\]"'):
        topology_from_config(config_from_dict({"nn": hf_nn(hub)}))


def test_hf_vision_cannot_join_unified_and_hf_trunk_needs_a_model():
    from rulka.config.built import check_built

    with pytest.raises(ConfigError, match="cannot join fusion_mode unified"):
        check_built(config_from_dict({"nn": {"fusion_mode": "unified", "vis": {"transformer": {
            "use_hf_backbone": True, "model_name_or_path": "x"}}}}))
    with pytest.raises(ConfigError, match="hf_embedding needs"):
        check_built(config_from_dict({"nn": {"fusion_mode": "post_concat", "encoder": {"fusion_encoder": "hf_embedding"}}}))
