"""Benchmark: what a trainer checkpoint costs with a realistic replay, incremental chunks vs the
whole rewrite (one ``replay.npz``) checkpoints did before, measured in the same run.

The IQN mini-race memory from the default config with 160x120 images and 184 floats, sized by
``--transitions`` (default 50,000: a frame ring of about 64,000 frames, 1.3 GB), is filled with
distinct frames. Then, for each layout, checkpoint 1 of the full memory; then 5% of the ring
more frames arrive and checkpoint 2 is written. Per checkpoint: seconds of ``write_checkpoint``
(what the learner waits for), MB passed to ``write()`` (``/proc/self/io`` ``wchar``: every byte
the checkpoint writes, manifest and agent included) and, for the chunked layout, chunks written
and reused. Last, the seconds a resume takes to load and check the newest checkpoint.

Prints one JSON object.

    python -m bench.checkpoint [--quick] [--transitions 50000] [--new-fraction 0.05]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from rulka.segment import Segment

H, W, FLOATS, STEPS = 120, 160, 184, 200


def written_bytes() -> int | None:
    """Bytes this process has passed to write() so far (Linux ``/proc/self/io``), else None."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


class Frames:
    """Distinct 160x120 frames cheaply: a pool of random frames, each copy stamped with its
    serial number (so no two chunks of the ring hold the same bytes)."""

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.pool = rng.integers(0, 255, (STEPS + 1, H, W), dtype=np.uint8)
        self.rng = rng
        self.serial = 0

    def segment(self, episode: int) -> Segment:
        img = self.pool.copy()
        stamps = (self.serial + np.arange(STEPS + 1, dtype=np.int64)).view(np.uint8).reshape(STEPS + 1, 8)
        img[:, 0, :8] = stamps
        self.serial += STEPS + 1
        arrays = {"obs/img": img, "obs/float": self.rng.normal(size=(STEPS + 1, FLOATS)).astype(np.float32),
                  "action": self.rng.integers(0, 12, STEPS), "reward": self.rng.normal(size=STEPS).astype(np.float32),
                  "terminated": np.zeros(STEPS, bool), "truncated": np.zeros(STEPS, bool),
                  "extra/greedy": np.ones(STEPS, bool)}
        return Segment("bench", "w0", episode, 0, 0, 0, 0, arrays, episode_done=True)


def fill(memory: Any, frames: Frames, count: int, episode: int) -> int:
    """Append segments until ``count`` more frames are stored; return the next episode id."""
    target = memory.frames.written + count
    while memory.frames.written < target:
        memory.append(frames.segment(episode))
        episode += 1
    return episode


def timed_checkpoint(root: Path, number: int, memory: Any, agent_state: Any, chunk_bytes: int | None) -> dict[str, Any]:
    from rulka.trainer import checkpoint_store as ckpt

    before = written_bytes()
    t0 = time.perf_counter()
    folder = ckpt.write_checkpoint(root, number, agent_state, {"number": number}, memory, chunk_bytes=chunk_bytes)
    out: dict[str, Any] = {"seconds": round(time.perf_counter() - t0, 2)}
    after = written_bytes()
    if before is not None and after is not None:
        out["mb_written"] = round((after - before) / 1e6, 1)
    replay = json.loads((folder / "manifest.json").read_text()).get("replay_written")
    if replay:
        out.update(chunks_written=replay["chunks_written"], chunks_reused=replay["chunks_reused"],
                   replay_mb_in_new_chunks=round(replay["bytes_written"] / 1e6, 1))
    out["disk_mb_after"] = round(sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 1e6, 1)
    return out


def timed_resume(root: Path, make: Any) -> float:
    from rulka.trainer import checkpoint_store as ckpt

    fresh = make()
    t0 = time.perf_counter()
    ckpt.load_latest(root, fresh)
    seconds = time.perf_counter() - t0
    del fresh
    return round(seconds, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5,000 transitions")
    parser.add_argument("--transitions", type=int, default=50_000, help="replay size (memory_size_schedule)")
    parser.add_argument("--new-fraction", type=float, default=0.05, help="share of the ring new between checkpoints")
    args = parser.parse_args()
    transitions = 5_000 if args.quick else args.transitions

    import torch

    from rulka.agents.iqn.settings import make_memory
    from rulka.config import load_config
    from rulka.memory.files import CHUNK_BYTES

    cfg = load_config(overrides=["nn.vis.no_image=false", "nn.vis.image_size.width=160", "nn.vis.image_size.height=120",
                                 f"memory.memory_size_schedule=[[0, [{transitions}, 1000]]]"], env_file=None)

    def make() -> Any:
        return make_memory(cfg, seed=0)

    memory = make()
    frames = Frames()
    t0 = time.perf_counter()
    episode = fill(memory, frames, memory.frames.capacity, 0)  # a full ring
    fill_s = time.perf_counter() - t0
    ring_bytes = sum(v.nbytes for v in memory.frames.fields.values())
    new_frames = int(args.new_fraction * memory.frames.capacity)
    agent_state = {"weights": torch.zeros(1 << 18)}  # 1 MB: the replay is what this measures
    result: dict[str, Any] = {
        "bench": "checkpoint", "frame": f"{W}x{H} uint8 + {FLOATS} float32", "transitions": len(memory),
        "ring_frames": memory.frames.capacity, "replay_mb": round(ring_bytes / 1e6, 1),
        "new_frames_between": new_frames, "chunk_mb": round(CHUNK_BYTES / 2**20, 1), "fill_seconds": round(fill_s, 1)}
    layouts = {"whole_npz": None, "chunked": CHUNK_BYTES}
    with tempfile.TemporaryDirectory(prefix="rulka-ckpt-", dir=os.environ.get("RULKA_BENCH_TMP")) as tmp:
        roots = {name: Path(tmp) / name for name in layouts}
        for name, chunk_bytes in layouts.items():
            result[name] = {"first": timed_checkpoint(roots[name], 1, memory, agent_state, chunk_bytes)}
        fill(memory, frames, new_frames, episode)
        for name, chunk_bytes in reversed(layouts.items()):  # the other order: neither always goes first
            result[name]["second"] = timed_checkpoint(roots[name], 2, memory, agent_state, chunk_bytes)
        del memory
        for name in layouts:
            result[name]["resume_seconds"] = timed_resume(roots[name], make)
        shutil.rmtree(tmp, ignore_errors=True)
    whole, chunked = result["whole_npz"]["second"], result["chunked"]["second"]
    result["second_checkpoint"] = {
        "seconds_whole_over_chunked": round(whole["seconds"] / max(chunked["seconds"], 1e-3), 1),
        "mb_written_whole_over_chunked": (round(whole["mb_written"] / max(chunked["mb_written"], 1e-3), 1)
                                          if "mb_written" in whole and "mb_written" in chunked else None)}
    result["machine"] = {"platform": platform.platform(), "cpus": os.cpu_count()}
    result["date"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
