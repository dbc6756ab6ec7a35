"""Benchmark: bytes per published weights version, and whether half precision changes actions.

For each IQN network a worker runs (configs/sim_iqn.yaml's 184-float one, the same with its
48x36 image, and configs/default.yaml's guide-size 160x120 one, 6.58M parameters), this

1. trains the network with Adam on a synthetic regression loss for ``--updates`` steps per
   version (the trainer's default ``publish_every_updates`` is 100) at ``--lr`` (default 5e-5,
   the guide schedule's plateau; the early 1e-3 moves weights 20x more per step), so that two
   consecutive versions differ as much as an optimizer moves them;
2. encodes each version as the trainer publishes it (``rulka.net.weights.encode_weights``,
   signed, zstd level 3) in float32, float16 and int8 (per-row scales; opt-in, lossy), and
   measures delta encodings against a version the worker already has: zstd of the XOR of the
   float16 bit patterns, plain and byte-shuffled (high bytes, then low bytes), against the version
   before and against the one ``--versions`` before (a worker that skipped versions; exact: the
   worker rebuilds the float16 weights bit for bit, so its actions equal the full version's);
3. compares the greedy actions (``IQNActor.act(obs, test=True)``, same seed) of the float32
   weights and of the float16 and int8 blobs loaded by a worker, on ``--observations`` frames
   recorded from the simulator (``bench.actor.recorded_frames``; the network's float inputs
   normalised by the frames' own mean and std, as a run's ``state_normalization`` does), for the
   initial and the trained weights.

Prints one JSON object.

    python -m bench.weights_codec [--quick] [--updates 100] [--lr 5e-5] [--observations 256] [--versions 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import zstandard  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from rulka.net.weights import WeightsBlob, decode_weights, encode_weights  # noqa: E402

NETWORKS = {
    "sim_float184": ("configs/sim_iqn.yaml", []),
    "sim_image48x36": ("configs/sim_iqn.yaml", ["nn.vis.no_image=false"]),
    "guide_160x120": ("configs/default.yaml", []),
}


def build_actor(config: str, overrides: list[str]) -> Any:
    from rulka.agents.iqn import IQNActor
    from rulka.agents.iqn.settings import network_spec_from_config
    from rulka.config.loader import load_config

    spec = dataclasses.asdict(network_spec_from_config(load_config(config, overrides, env_file=None)))
    return IQNActor(spec, iqn_k=32, seed=0), spec


def observations(spec: dict[str, Any], n: int) -> list[Any]:
    rng = np.random.default_rng(1)
    out = []
    for _ in range(n):
        flt = rng.standard_normal(spec["float_dim"]).astype(np.float32)
        if spec["image_height"]:
            img = rng.integers(0, 255, (1, spec["image_height"], spec["image_width"]), dtype=np.uint8)
            out.append({"img": img, "float": flt})
        else:
            out.append(flt)
    return out


def greedy(spec: dict[str, Any], weights: dict[str, Any], obs: list[Any]) -> list[Any]:
    from rulka.agents.iqn import IQNActor

    actor = IQNActor(spec, iqn_k=32, seed=0)
    actor.load_weights(weights)
    return [np.asarray(actor.act(o, test=True)).tolist() for o in obs]


def train(net: torch.nn.Module, spec: dict[str, Any], updates: int, lr: float, batch: int) -> float:
    """``updates`` Adam steps on a random regression target; returns seconds taken."""
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(2)
    t0 = time.perf_counter()
    for _ in range(updates):
        img = (torch.randint(0, 255, (batch, spec["image_height"], spec["image_width"]), dtype=torch.uint8, generator=gen)
               if spec["image_height"] else None)
        flt = torch.randn(batch, spec["float_dim"], generator=gen)
        taus = torch.rand(8 * batch, generator=gen)
        out = net(img, flt, taus)
        loss = ((out - torch.randn(out.shape, generator=gen)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - t0


def half_bits(tensors: dict[str, torch.Tensor]) -> bytes:
    """The float16 bit patterns of the tensors that travel in float16 (as the blob carries them)."""
    blob = decode_weights(encode_weights(WeightsBlob("r", 1, tensors, {}, "float16"), KEY, compress=False),
                          KEY.public_key())
    return b"".join(t.contiguous().view(torch.int16).numpy().tobytes() if t.dtype == torch.float16
                    else t.contiguous().numpy().tobytes() for _, t in sorted(blob.tensors.items()))


KEY = Ed25519PrivateKey.generate()


def recorded(spec: dict[str, Any], n: int) -> tuple[dict[str, Any], list[Any]]:
    """``spec`` normalised by ``n`` recorded simulator frames, and the frames as the actor takes them."""
    from bench.actor import normalised, recorded_frames

    frames = recorded_frames(n, spec["image_width"] or 48, spec["image_height"] or 36)
    spec = normalised(spec, frames)
    if spec["image_height"]:
        return spec, [{"img": f["img"][None], "float": f["float"]} for f in frames]
    return spec, [f["float"] for f in frames]


def xor_delta_bytes(old: bytes, new: bytes) -> dict[str, int]:
    """zstd-3 bytes of the XOR of two float16 bit-pattern strings, plain and byte-shuffled."""
    a, b = np.frombuffer(old, np.uint8), np.frombuffer(new, np.uint8)
    xor = np.bitwise_xor(a, b)
    even = xor[: len(xor) // 2 * 2].reshape(-1, 2)
    shuffled = np.concatenate([even[:, 1], even[:, 0], xor[len(even) * 2:]]).tobytes()  # high bytes first
    z = zstandard.ZstdCompressor(level=3)
    return {"plain": len(z.compress(xor.tobytes())), "shuffled": len(z.compress(shuffled))}


def measure(name: str, config: str, overrides: list[str], updates: int, lr: float, n_obs: int, batch: int,
            steps: int = 2) -> dict[str, Any]:
    torch.manual_seed(0)  # the same initial weights every run
    actor, spec = build_actor(config, overrides)
    net = actor.net
    params = sum(p.numel() for p in net.parameters())
    spec, obs = recorded(spec, n_obs)
    row: dict[str, Any] = {"network": name, "parameters": params, "updates_per_version": updates, "lr": lr}

    def snapshot() -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in net.state_dict().items()}

    versions = [snapshot()]
    train_s = 0.0
    for _ in range(max(2, steps)):
        train_s += train(net, spec, updates, lr, batch)
        versions.append(snapshot())
    row["train_s"] = round(train_s, 1)
    sizes = {}
    for dtype in ("float32", "float16", "int8"):
        t0 = time.perf_counter()
        data = encode_weights(WeightsBlob("r", 2, versions[-1], {}, dtype), KEY)
        enc_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        decode_weights(data, KEY.public_key())
        sizes[dtype] = {"bytes": len(data), "encode_s": round(enc_s, 3), "decode_s": round(time.perf_counter() - t0, 3)}
    raw16 = len(encode_weights(WeightsBlob("r", 2, versions[-1], {}, "float16"), KEY, compress=False))
    sizes["float16_uncompressed_bytes"] = raw16
    a, b = np.frombuffer(half_bits(versions[-2]), np.uint8), np.frombuffer(half_bits(versions[-1]), np.uint8)
    xor = np.bitwise_xor(a, b).tobytes()
    delta = len(zstandard.ZstdCompressor(level=3).compress(xor))
    delta19 = len(zstandard.ZstdCompressor(level=19).compress(xor))
    row["bytes"] = sizes
    row["delta_xor_float16_zstd3_bytes"] = delta
    row["delta_xor_float16_zstd19_bytes"] = delta19
    row["delta_ratio_vs_full_float16"] = round(delta / sizes["float16"]["bytes"], 3)
    full16 = sizes["float16"]["bytes"]
    for label, old in (("1_behind", versions[-2]), (f"{len(versions) - 1}_behind", versions[0])):
        d = xor_delta_bytes(half_bits(old), half_bits(versions[-1]))
        row[f"delta_xor_float16_{label}"] = {**d, "ratio_plain": round(d["plain"] / full16, 3),
                                             "ratio_shuffled": round(d["shuffled"] / full16, 3)}
    row["int8_ratio_vs_float16"] = round(sizes["int8"]["bytes"] / full16, 3)
    row["changed_half_values_share"] = round(float(np.mean(
        np.frombuffer(xor, np.uint16) != 0)) if len(xor) % 2 == 0 else 0.0, 3)
    agree = {}
    agree8 = {}
    for label, w in (("initial", versions[0]), ("trained", versions[-1])):
        full = greedy(spec, w, obs)
        got = {dt: greedy(spec, decode_weights(encode_weights(WeightsBlob("r", 1, w, {}, dt), KEY),
                                               KEY.public_key()).tensors, obs) for dt in ("float16", "int8")}
        for out, dt in ((agree, "float16"), (agree8, "int8")):
            out[label] = {"observations": len(obs), "distinct_actions_float32": len({str(a) for a in full}),
                          "different_greedy_actions": sum(x != y for x, y in zip(full, got[dt], strict=True))}
    row["greedy_float32_vs_float16"] = agree
    row["greedy_float32_vs_int8"] = agree8
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 updates per version, 64 observations, no guide network")
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--observations", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--networks", default=",".join(NETWORKS))
    parser.add_argument("--versions", type=int, default=2, help="versions trained; deltas against 1 and this many back")
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = [n for n in args.networks.split(",") if n]
    if args.quick:
        args.updates, args.observations = 10, 64
        names = [n for n in names if n != "guide_160x120"]
    rows = [measure(n, *NETWORKS[n], args.updates, args.lr, args.observations, args.batch, args.versions)
            for n in names]
    print(json.dumps({"benchmark": "weights_codec", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
