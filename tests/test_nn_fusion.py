"""The guide's network catalogue (rulka.nn.fusion, rulka.nn.transformer): every fusion mode and
trunk builds for IQN and the actor-critic, with and without an image; the token counts are the
ones the layouts define; every part receives gradient; the topology crosses to the worker's actor
(which then keeps torch: its numpy path only runs the plain float MLP) and gives the same values."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rulka.agents.iqn import IQNActor
from rulka.agents.iqn.network import IQNNetwork, IQNNetworkSpec, mean_q
from rulka.agents.policy.actor import PolicyActor
from rulka.agents.policy.network import ActorCritic, PolicyNetworkSpec
from rulka.config import config_from_dict
from rulka.nn.fusion import topology_from_config
from rulka.nn.transformer import VisionViT

H, W, F = 36, 48, 5
SMALL = {"d_model": 32, "n_layers": 1, "n_heads": 2, "ff_mult": 2, "patch_size": 6}
TRUNKS = ["linear", "native_transformer", "mlp", "cnn"]


def topo(nn: dict) -> str | None:
    return topology_from_config(config_from_dict({"nn": nn}))


def fusion_nn(mode: str, trunk: str | None = None, vit: bool = True, **encoder) -> dict:
    enc = {"transformer": dict(SMALL, **encoder.pop("transformer", {})), **encoder}
    if trunk:
        enc["fusion_encoder"] = trunk
        if trunk == "mlp":
            enc["fusion_mlp"] = {"hidden_dim": 48}
        if trunk == "cnn":
            enc["fusion_cnn"] = {"hidden_channels": [16, 24]}
    out = {"fusion_mode": mode, "encoder": enc}
    if vit:
        out["vis"] = {"image_size": {"width": W, "height": H}, "transformer": dict(SMALL)}
    else:
        out["vis"] = {"image_size": {"width": W, "height": H}, "cnn": {}}
    return out


def specs(topology: str | None, image: bool = True) -> tuple[IQNNetworkSpec, PolicyNetworkSpec]:
    kw = dict(float_dim=F, n_actions=3, image_height=H if image else 0, image_width=W if image else 0,
              float_hidden_dim=16, topology=topology)
    return (IQNNetworkSpec(dense_hidden_dimension=32, embedding_dimension=8, **kw),
            PolicyNetworkSpec(trunk_hidden_dim=32, **kw))


def inputs(b: int = 4, image: bool = True, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    img = torch.randint(0, 256, (b, H, W), dtype=torch.uint8, generator=g) if image else None
    return img, torch.randn(b, F, generator=g)


@pytest.mark.parametrize("mode", ["vision_transformer", "post_concat", "unified"])
@pytest.mark.parametrize("trunk", TRUNKS)
@pytest.mark.parametrize("vit", [True, False], ids=["vit", "cnn"])
def test_every_mode_and_trunk_trains_both_networks(mode, trunk, vit):
    t = topo(fusion_nn(mode, trunk, vit=vit))
    assert json.loads(t)["encoder"]["fusion_encoder"] == trunk
    torch.manual_seed(0)
    iqn_spec, pol_spec = specs(t)
    img, flt = inputs()
    for net, out in ((IQNNetwork(iqn_spec), lambda n: mean_q(n, img, flt, 8)),
                     (ActorCritic(pol_spec), lambda n: n(img, flt)[0] + n(img, flt)[1][:, None])):
        y = out(net)
        assert y.shape == (4, 3) and torch.isfinite(y).all()
        y.square().sum().backward()
        # every tensor of the stem, the float MLP and the fusion trunk takes part
        for name, p in net.named_parameters():
            if name.startswith(("img_head.", "float_feature_extractor.", "fusion.")):
                assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_topology_is_none_for_the_plain_encoder_and_the_default_trunks():
    assert topo({}) is None and topo({"vis": {"no_image": True}}) is None
    assert json.loads(topo({"vis": {"transformer": SMALL}}))["fusion_mode"] == "none"
    inferred = {m: json.loads(topo(fusion_nn(m)))["encoder"]["fusion_encoder"]
                for m in ("vision_transformer", "post_concat", "unified")}
    assert inferred == {"vision_transformer": "linear", "post_concat": "native_transformer",
                        "unified": "native_transformer"}


def test_token_counts_follow_the_layouts():
    patches = (H // 6) * (W // 6)  # 6 x 8 = 48 patches of 6x6 pixels
    cases = {
        # one ViT summary token + one float token
        "vt": (fusion_nn("vision_transformer"), 2),
        # the fused vector reshaped into post_concat_seq_len tokens
        "fused": (fusion_nn("post_concat", transformer={"post_concat_seq_len": 3}), 3),
        # patch tokens + one token per float feature
        "tokens": (dict(fusion_nn("post_concat", post_concat_layout="token_sequence", float_token_layout="per_feature"),
                        vis={"image_size": {"width": W, "height": H},
                             "transformer": dict(SMALL, fusion_tokens="patch_tokens")}), patches + F),
        # summary token + one dense float token from the raw floats
        "dense_raw": (fusion_nn("post_concat", post_concat_layout="token_sequence"), 2),
        # the ViT's summary + patch embeddings and unified_float_tokens float tokens
        "unified": (fusion_nn("unified", transformer={"unified_float_tokens": 3}), 1 + patches + 3),
    }
    for name, (nn, want) in cases.items():
        net = IQNNetwork(specs(topo(nn))[0])
        assert net.fusion.n_tokens == want, name
    # a CNN stem in unified mode: the cells of its last feature map; the classic stem (kernels
    # 4-4-3-3, strides 2-2-2-1) maps 36x48 to 17x23, 7x10, 3x4, then 1x2
    net = IQNNetwork(specs(topo(fusion_nn("unified", vit=False)))[0])
    assert net.fusion.n_tokens == 1 * 2 + 1
    # float-only: the float tokens alone
    assert IQNNetwork(specs(topo(fusion_nn("unified")), image=False)[0]).fusion.n_tokens == 1


def test_native_vit_stem_with_fusion_none_is_concatenated():
    net = IQNNetwork(specs(topo({"vis": {"image_size": {"width": W, "height": H}, "transformer": SMALL}}))[0])
    assert isinstance(net.img_head, VisionViT) and net.fusion is None
    assert net.dense_input_dimension == 32 + 16  # ViT summary (d_model) + float MLP
    assert net.img_head.n_patches == 48


@pytest.mark.parametrize("mode", ["none_vit", "vision_transformer", "post_concat", "unified"])
def test_workers_rebuild_the_topology_from_the_actor_spec(mode):
    nn = {"vis": {"image_size": {"width": W, "height": H}, "transformer": SMALL}} if mode == "none_vit" \
        else fusion_nn(mode)
    iqn_spec, pol_spec = specs(topo(nn))
    torch.manual_seed(1)
    trainer_net = IQNNetwork(iqn_spec).eval()
    # the actor spec crosses the wire as plain data: the topology is one JSON string in it
    wire = json.loads(json.dumps(iqn_spec.to_dict()))
    actor = IQNActor(wire, iqn_k=8)
    actor.load_weights({k: v.clone() for k, v in trainer_net.state_dict().items()})
    img, flt = inputs(1)
    obs = {"img": img[0].numpy(), "float": flt[0].numpy()}
    taus = (torch.arange(8, dtype=torch.float32) + 0.5) / 8
    with torch.no_grad():
        want = mean_q(trainer_net, img, flt, 8, taus)[0].numpy()
    np.testing.assert_allclose(actor.q_values(obs, test=True), want, rtol=1e-4, atol=1e-5)
    pol = ActorCritic(pol_spec).eval()
    pactor = PolicyActor(json.loads(json.dumps(pol_spec.to_dict())))
    pactor.load_weights({k: v.clone() for k, v in pol.state_dict().items()})
    with torch.no_grad():
        logits, _ = pol(img, flt)
    np.testing.assert_allclose(pactor.distribution(obs)[0], torch.log_softmax(logits[0], -1).numpy(),
                               rtol=1e-4, atol=1e-5)


def test_a_float_only_fusion_network_keeps_torch_on_the_worker():
    spec = specs(topo(fusion_nn("post_concat")), image=False)[0]
    actor = IQNActor(spec.to_dict(), iqn_k=8)
    assert not actor.uses_numpy  # the numpy path runs only the plain float MLP, not the trunk
    assert IQNActor(specs(None, image=False)[0].to_dict(), iqn_k=8).uses_numpy


def test_unified_needs_equal_widths_and_a_clear_error_otherwise():
    from rulka.errors import ConfigError

    with pytest.raises(ConfigError, match="unified needs `nn.vis.transformer.d_model`"):
        config_from_dict({"nn": dict(fusion_nn("unified"), encoder={"transformer": dict(SMALL, d_model=64)})})
