"""Benchmark: IQN learner throughput (training batches/s and samples/s) at batch 512.

Two networks: the default run's (configs/sim_iqn.yaml: 48x36 image, dense 256) and a
Linesight-size one (160x120 image, float hidden 256, dense 1024). Batches come from a
``MiniRaceReplayMemory`` filled with synthetic segments, so sampling + collate is included
(also reported alone). Prints one JSON object per device (CPU always, CUDA when available).

    python bench/learner.py [--seconds 20] [--batch-size 512] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from typing import Any

import numpy as np
import torch

from rulka.agents.iqn import IQNAgent, IQNHyper, IQNNetworkSpec
from rulka.agents.iqn.replay import MiniRaceReplayMemory
from rulka.segment import Segment

FLOAT_DIM = 184  # the guide's float_input_dim with default environment settings
N_ACTIONS = 12

NETWORKS = {
    "default_48x36_dense256": dict(image_height=36, image_width=48, float_hidden_dim=128, dense_hidden_dimension=256),
    "linesight_160x120_dense1024": dict(image_height=120, image_width=160, float_hidden_dim=256,
                                        dense_hidden_dimension=1024),
}


def filled_memory(h: int, w: int, batch_size: int, transitions: int = 6000, seed: int = 0) -> MiniRaceReplayMemory:
    rng = np.random.default_rng(seed)
    mem = MiniRaceReplayMemory(batch_size=batch_size, memory_size_schedule=[[0, (transitions * 2, 1)]],
                               mini_race_duration_actions=140, seed=seed)
    t = 200
    for ep in range(transitions // t):
        arrays = {"obs/img": rng.integers(0, 255, (t + 1, h, w), dtype=np.uint8),
                  "obs/float": rng.normal(size=(t + 1, FLOAT_DIM)).astype(np.float32),
                  "action": rng.integers(0, N_ACTIONS, t), "reward": rng.normal(size=t).astype(np.float32),
                  "terminated": np.zeros(t, bool), "truncated": np.zeros(t, bool),
                  "extra/greedy": rng.random(t) > 0.1}
        mem.append(Segment("bench", "w", ep, ep, 0, 0, 0, arrays, episode_done=True))
    return mem


def measure(name: str, net_kw: dict[str, Any], device: str, batch_size: int, seconds: float) -> dict[str, Any]:
    spec = IQNNetworkSpec(float_dim=FLOAT_DIM, n_actions=N_ACTIONS, embedding_dimension=64, **net_kw)
    cuda = device == "cuda"
    agent = IQNAgent(spec, IQNHyper(use_amp=cuda, use_jit=False), device=device, seed=0)
    mem = filled_memory(spec.image_height, spec.image_width, batch_size)
    # sampling alone
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < min(3.0, seconds / 4):
        mem.sample(batch_size)
        n += 1
    sample_s = (time.perf_counter() - t0) / n
    for _ in range(2):  # warm-up (allocations, cudnn autotune)
        agent.train(mem.sample(batch_size))
    if cuda:
        torch.cuda.synchronize()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds or n < 3:
        agent.train(mem.sample(batch_size))
        n += 1
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    return {"network": name, "device": device, "batch_size": batch_size, "batches": n,
            "batches_per_s": round(n / elapsed, 3), "samples_per_s": round(n * batch_size / elapsed, 1),
            "sample_collate_ms": round(1000 * sample_s, 2),
            "parameters": sum(p.numel() for p in agent.online.parameters())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="timed training per network and device")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--networks", default=",".join(NETWORKS), help="comma-separated subset of " + ", ".join(NETWORKS))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        results = [measure(n, NETWORKS[n], device, args.batch_size, args.seconds) for n in args.networks.split(",")]
        print(json.dumps({"bench": "learner", "device": device, "torch": torch.__version__,
                          "cpu_threads": torch.get_num_threads(), "machine": platform.machine(),
                          "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
                          "results": results}), flush=True)


if __name__ == "__main__":
    main()
