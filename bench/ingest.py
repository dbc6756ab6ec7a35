"""Benchmark: how many transitions per second one trainer ingests, at 160x120 frames + 184 floats.

Synthetic episodes of a driving game (each frame a small shift of the previous one plus noise,
so the worker's delta + zstd compression sees realistic redundancy) are compressed as a worker
does. Then, per thread count (1, 2 and every core):

- ``decode``: ``ZstdCompressor.decompress`` of every segment through a thread pool;
- ``ingest``: ``Trainer.ingest`` (decode with ``trainer.ingest_threads``, dedupe, journal and
  accepted log on disk, acks, insert into the IQN mini-race memory), batches of 8 segments, rate
  limiter in throughput mode so nothing is deferred.

Prints one JSON object. The issue's target: one trainer >= 20,000 transitions/s.

    python -m bench.ingest [--quick] [--segments 60]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rulka.compress import ZstdCompressor
from rulka.net.link import Message
from rulka.net.local import LocalHub
from rulka.segment import Segment

H, W, FLOATS, STEPS = 120, 160, 184, 200


def segments(n: int, seed: int = 0) -> list[Segment]:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (H, W * 2), dtype=np.uint8)
    out = []
    for i in range(n):
        shifts = (np.arange(STEPS + 1) + i * STEPS) % W
        img = np.stack([base[:, s:s + W] for s in shifts])
        img = (img + (rng.random(img.shape) < 0.02).astype(np.uint8) * 17).astype(np.uint8)
        arrays = {"obs/img": img, "obs/float": rng.normal(size=(STEPS + 1, FLOATS)).astype(np.float32),
                  "action": rng.integers(0, 12, STEPS), "reward": rng.normal(size=STEPS).astype(np.float32),
                  "terminated": np.zeros(STEPS, bool), "truncated": np.zeros(STEPS, bool),
                  "extra/greedy": np.ones(STEPS, bool)}
        out.append(Segment("bench", "w0", i // 5, i, i % 5, (i % 5) * STEPS, 0, arrays, episode_done=i % 5 == 4))
    return out


def decode_rate(payloads: list[bytes], threads: int) -> float:
    comp = ZstdCompressor()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(comp.decompress, payloads[:4]))  # warm-up
        t0 = time.perf_counter()
        list(pool.map(comp.decompress, payloads))
        return len(payloads) * STEPS / (time.perf_counter() - t0)


def ingest_rate(payloads: list[bytes], threads: int, folder: str) -> dict[str, Any]:
    from rulka.agents.iqn.settings import make_memory
    from rulka.config import load_config
    from rulka.interfaces import TrainingAgent
    from rulka.trainer.trainer import Trainer

    class NoAgent(TrainingAgent):  # ingest only: the learner is not part of this measurement
        batch_size = 512

        def train(self, batch: Any) -> dict[str, float]:
            raise NotImplementedError

        def get_actor(self) -> Any:
            raise NotImplementedError

        def actor_spec(self) -> dict[str, Any]:
            return {}

        def state_dict(self) -> dict[str, Any]:
            return {}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            pass

    cfg = load_config(overrides=["nn.vis.no_image=false", "nn.vis.image_size.width=160",
                                 "nn.vis.image_size.height=120", "trainer.rate_limit.mode=throughput",
                                 "memory.memory_size_schedule=[[0, [5000, 1000]]]",
                                 f"trainer.ingest_threads={threads}", "logging.wandb.enabled=false",
                                 "logging.tensorboard.enabled=false"], env_file=None)
    memory = make_memory(cfg, seed=0)
    trainer = Trainer(cfg, LocalHub().trainer_link(), agent=NoAgent(), memory=memory,
                      run_dir=f"{folder}/run-{threads}", signing_key=Ed25519PrivateKey.generate(),
                      metrics=False)
    messages = [Message("segment", "w0", p) for p in payloads]
    t0 = time.perf_counter()
    for k in range(0, len(messages), 8):
        trainer.ingest(messages[k:k + 8])
    elapsed = time.perf_counter() - t0
    stored = trainer.state.samples
    trainer.close()
    return {"transitions_per_s": round(stored / elapsed), "stored": stored,
            "bad": {k: v for k, v in trainer.state.counters.items() if k.startswith("bad_")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 segments")
    parser.add_argument("--segments", type=int, default=60, help="segments of 200 steps")
    args = parser.parse_args()
    n = 20 if args.quick else args.segments
    comp = ZstdCompressor()
    segs = segments(n)
    payloads = [comp.compress(s) for s in segs]
    cores = os.cpu_count() or 1
    counts = sorted({1, 2, cores})
    result: dict[str, Any] = {
        "bench": "ingest", "frame": f"{W}x{H} uint8 + {FLOATS} float32", "segment_steps": STEPS,
        "segments": n, "compressed_kb_per_transition": round(sum(map(len, payloads)) / n / STEPS / 1024, 2),
        "decode_transitions_per_s": {}, "ingest": {}}
    with tempfile.TemporaryDirectory(prefix="rulka-ingest-") as folder:
        for t in counts:
            result["decode_transitions_per_s"][f"threads_{t}"] = round(decode_rate(payloads, t))
            result["ingest"][f"threads_{t}"] = ingest_rate(payloads, t, folder)
    result["machine"] = {"platform": platform.platform(), "cpus": cores}
    result["date"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
