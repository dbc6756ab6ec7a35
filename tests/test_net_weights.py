from __future__ import annotations

import numpy as np
import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rulka.errors import BadInput
from rulka.net.weights import WeightsBlob, decode_weights, encode_weights, read_weights_header
from rulka.segment import pack, unpack

TRAINER = Ed25519PrivateKey.generate()
WORKER = Ed25519PrivateKey.generate()


def blob(version=3, dtype="float32"):
    return WeightsBlob(
        run_id="run-1", version=version, dtype=dtype,
        tensors={"fc.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4,
                 "fc.bias": np.array([1.5, -2.0], dtype=np.float32),
                 "steps": torch.tensor([7], dtype=torch.int64)},
        header={"net": "mlp", "hidden": [64, 64], "n_actions": 12},
    )


@pytest.mark.parametrize("compress", [True, False])
def test_round_trip(compress):
    data = encode_weights(blob(), TRAINER, compress=compress)
    out = decode_weights(data, TRAINER.public_key())
    assert (out.run_id, out.version, out.dtype) == ("run-1", 3, "float32")
    assert out.header == {"net": "mlp", "hidden": [64, 64], "n_actions": 12}
    assert torch.equal(out.tensors["fc.weight"], torch.tensor([[0.0, 0.25, 0.5], [0.75, 1.0, 1.25]]))
    assert torch.equal(out.tensors["fc.bias"], torch.tensor([1.5, -2.0]))
    assert out.tensors["steps"].dtype == torch.int64 and out.tensors["steps"].item() == 7


def test_float16_halves_large_float_tensors_only():
    b = blob(dtype="float16")
    b.tensors["big"] = torch.linspace(-2, 2, 2048)
    b.tensors["huge"] = torch.full((2048,), 1e6)  # beyond float16's range: stays float32
    out = decode_weights(encode_weights(b, TRAINER), TRAINER.public_key())
    assert out.tensors["big"].dtype == torch.float16
    assert torch.equal(out.tensors["big"].float(), torch.linspace(-2, 2, 2048).half().float())
    assert out.tensors["huge"].dtype == torch.float32 and float(out.tensors["huge"][0]) == 1e6
    # small tensors (biases, exploration rates) stay exact
    assert out.tensors["fc.weight"].dtype == torch.float32 and out.tensors["fc.bias"].dtype == torch.float32
    assert out.tensors["steps"].dtype == torch.int64


def test_zstd_compresses_redundant_weights():
    b = WeightsBlob("r", 1, {"w": torch.zeros(100_000)})
    assert len(encode_weights(b, TRAINER)) < 10_000 < len(encode_weights(b, TRAINER, compress=False))


def test_blob_signed_by_a_worker_is_rejected():
    data = encode_weights(blob(), WORKER)
    with pytest.raises(BadInput, match="signature"):
        decode_weights(data, TRAINER.public_key())


def test_tampered_tensors_or_header_are_rejected():
    outer = unpack(encode_weights(blob(), TRAINER, compress=False))
    t = bytearray(outer["t"])
    t[-1] ^= 1
    with pytest.raises(BadInput):
        decode_weights(pack({**outer, "t": bytes(t)}), TRAINER.public_key())
    meta = unpack(outer["m"])
    meta["version"] = 99
    with pytest.raises(BadInput):
        decode_weights(pack({**outer, "m": pack(meta)}), TRAINER.public_key())


def test_rollback_to_an_older_or_same_version_is_refused():
    data = encode_weights(blob(version=5), TRAINER)
    assert decode_weights(data, TRAINER.public_key(), newer_than=4).version == 5
    for current in (5, 6):
        with pytest.raises(BadInput, match="stale"):
            decode_weights(data, TRAINER.public_key(), newer_than=current)


def test_header_readable_without_decoding_tensors():
    h = read_weights_header(encode_weights(blob(version=9), TRAINER), TRAINER.public_key())
    assert (h["version"], h["run_id"], h["actor_spec"]["n_actions"]) == (9, "run-1", 12)


@pytest.mark.parametrize("data", [b"", b"garbage", pack([1, 2]), pack({"m": b"", "t": b"", "sig": 1})])
def test_garbage_is_bad_input(data):
    with pytest.raises(BadInput):
        decode_weights(data, TRAINER.public_key())


def test_non_plain_actor_spec_is_refused_at_encode():
    b = blob()
    b.header = {"fn": object()}
    with pytest.raises(BadInput):
        encode_weights(b, TRAINER)
