"""Bytes on the wire per transition: rulka's segment compressors on simulator frames.

Drives the built-in simulator (64x64 grayscale camera, the default) with its scripted driver,
cuts the run into segments of ``worker.segment_max_steps`` transitions exactly as a worker does,
and prints JSON with the compressed size per transition for each compressor, plus the time to
compress a segment. Frame history is not sent (each frame crosses once); TMRL sends its 4-frame
history with every sample (about 4.4 KB per transition at this size). Target: <= 1.5 KB.

    python -m bench.compress [--steps 2000] [--segment 200]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def collect(steps: int, seed: int = 0) -> list[dict[str, list]]:
    """Episodes of the scripted driver (observations, actions, rewards, done flags)."""
    from rulka.envs.sim.driver import ScriptedDriver
    from rulka.envs.sim.env import SimTrackEnv

    env = SimTrackEnv()
    episodes = []
    total = 0
    while total < steps:
        obs, _ = env.reset(seed=seed + len(episodes))
        driver = ScriptedDriver(env.track)
        ep: dict[str, list] = {"obs": [obs], "action": [], "reward": [], "done": []}
        while total < steps:
            a = driver.action(env.car)
            obs, r, term, trunc, _ = env.step(a)
            ep["obs"].append(obs)
            ep["action"].append(a)
            ep["reward"].append(r)
            ep["done"].append(bool(term or trunc))
            total += 1
            if term or trunc:
                break
        episodes.append(ep)
    return episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--segment", type=int, default=200)
    args = parser.parse_args()
    from rulka.compress import PlainCompressor, ZstdCompressor
    from rulka.segment import Segment

    segments = []
    n = 0
    for run in collect(args.steps):
        steps = len(run["action"])
        n += steps
        for start in range(0, steps, args.segment):
            end = min(steps, start + args.segment)
            obs = run["obs"][start:end + 1]
            arrays = {"obs/img": np.stack([o["img"] for o in obs]), "obs/float": np.stack([o["float"] for o in obs]),
                      "action": np.asarray(run["action"][start:end], np.int64),
                      "reward": np.asarray(run["reward"][start:end], np.float32),
                      "terminated": np.asarray(run["done"][start:end], bool),
                      "truncated": np.zeros(end - start, bool),
                      "extra/q_values": np.zeros((end - start, 12), np.float32)}
            segments.append(Segment("bench", "w", 0, len(segments), len(segments), start, 1, arrays))
    result = {"transitions": n, "segment_max_steps": args.segment,
              "image_shape": list(segments[0].arrays["obs/img"].shape[1:]),
              "float_dim": int(segments[0].arrays["obs/float"].shape[1])}
    for name, comp in [("zstd", ZstdCompressor()), ("zstd_no_delta", ZstdCompressor(delta=False)),
                       ("none", PlainCompressor())]:
        t0 = time.perf_counter()
        total = sum(len(comp.compress(s)) for s in segments)
        dt = time.perf_counter() - t0
        result[f"{name}_bytes_per_transition"] = round(total / n, 1)
        result[f"{name}_ms_per_segment"] = round(1000 * dt / len(segments), 2)
    result["target_bytes_per_transition"] = 1536
    print(json.dumps(result))


if __name__ == "__main__":
    main()
