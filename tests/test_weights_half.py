"""Half-precision weights change nothing an IQN worker decides: the greedy actions of the float32
weights and of the float16 blob a worker loads are the same on a fixed set of observations (the
trainer publishes float16 by default for iqn: ``trainer.weights_dtype``)."""

from __future__ import annotations

import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.weights_codec import build_actor, greedy, observations, train
from rulka.net.weights import WeightsBlob, decode_weights, encode_weights
from rulka.trainer.publishing import signed_encoder

KEY = Ed25519PrivateKey.generate()


@pytest.mark.parametrize("overrides", [[], ["nn.vis.no_image=false"]], ids=["float184", "image48x36"])
def test_float16_weights_give_the_same_greedy_actions(overrides):
    torch.manual_seed(0)
    actor, spec = build_actor("configs/sim_iqn.yaml", overrides)
    train(actor.net, spec, updates=5, lr=1e-3, batch=2)  # weights an optimizer moved, not only the init
    weights = {k: v.detach().clone() for k, v in actor.net.state_dict().items()}
    published = signed_encoder(KEY)(WeightsBlob("run", 1, weights, {}))  # the trainer's default for iqn
    loaded = decode_weights(published, KEY.public_key())
    assert loaded.dtype == "float16"
    assert any(t.dtype == torch.float16 for t in loaded.tensors.values())
    full32 = len(encode_weights(WeightsBlob("run", 1, weights, {}), KEY))
    assert len(published) < 0.6 * full32  # half the bytes (zstd gains little on float32 weights)
    obs = observations(spec, 64)
    assert greedy(spec, loaded.tensors, obs) == greedy(spec, weights, obs)


def test_trainer_default_weights_dtype_follows_the_algorithm():
    from rulka.config.loader import load_config

    assert load_config("configs/sim_iqn.yaml", env_file=None).trainer.weights_dtype is None  # auto
    cfg = load_config("configs/sim_iqn.yaml", ["trainer.weights_dtype=float32"], env_file=None)
    assert cfg.trainer.weights_dtype == "float32"
    blob = WeightsBlob("run", 1, {"w": torch.randn(4096)}, {})
    assert decode_weights(signed_encoder(KEY, "float32")(blob), KEY.public_key()).tensors["w"].dtype == torch.float32
