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


def test_int8_weights_are_per_row_within_half_a_step_and_half_the_bytes_of_float16():
    """trainer.weights_dtype=int8 (opt-in): matrices travel as int8 with one float32 scale per row
    and come back float32 within half a quantisation step of each row; small tensors and vectors
    travel as float16 rules say. bench/weights_codec.py counts the greedy actions this changes."""
    from rulka.config.loader import load_config
    from rulka.errors import BadInput
    from rulka.net.weights import SCALE_PREFIX, read_weights_header

    assert load_config("configs/sim_iqn.yaml", ["trainer.weights_dtype=int8"], env_file=None).trainer.weights_dtype == "int8"
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(256, 512, generator=gen) * 0.02
    w[3] *= 50  # rows of very different scales each keep their own precision
    w[7] = 0.0
    weights = {"fc.weight": w, "fc.bias": torch.randn(256, generator=gen), "big.vec": torch.randn(4096, generator=gen)}
    data = signed_encoder(KEY, "int8")(WeightsBlob("run", 1, weights, {}))
    blob = decode_weights(data, KEY.public_key())
    assert blob.dtype == "int8" and set(blob.tensors) == set(weights)
    got = blob.tensors["fc.weight"]
    assert got.dtype == torch.float32 and got.shape == w.shape
    step = w.abs().amax(dim=1, keepdim=True) / 127
    assert bool(((got - w).abs() <= step / 2 + 1e-7).all()) and bool((got[7] == 0).all())
    assert blob.tensors["fc.bias"].dtype == torch.float32 and blob.tensors["big.vec"].dtype == torch.float16
    half = signed_encoder(KEY, "float16")(WeightsBlob("run", 1, weights, {}))
    assert len(data) < 0.6 * len(half)
    # a blob whose scales do not match its int8 tensor is refused with one clear reason
    from rulka.net.weights import _dequantize
    with pytest.raises(BadInput, match="per-row scales"):
        _dequantize({"a": torch.zeros(4, 4, dtype=torch.int8), SCALE_PREFIX + "a": torch.ones(3)})
    with pytest.raises(BadInput, match="without scales"):
        _dequantize({"a": torch.zeros(4, 4, dtype=torch.int8)})
    assert read_weights_header(data, KEY.public_key())["dtype"] == "int8"
    with pytest.raises(ValueError, match="reserved"):
        signed_encoder(KEY, "int8")(WeightsBlob("run", 1, {SCALE_PREFIX + "x": w}, {}))
