"""Benchmark: built-in simulator actions per second on one core (physics + pipeline [+ image]).

Runs ``SimTrackEnv`` on the default track with a fixed, seeded action sequence (mostly
accelerate, some steering and braking; episodes reset when they end), with the 64x64 camera
image, without image, and with a 160x120 image, and times each part alone. Torch is not involved.
Prints one JSON object. Target: >= 5,000 actions/s with the default image.

    python -m bench.sim [--quick] [--track NAME]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import cv2  # noqa: E402
import numpy as np  # noqa: E402

from rulka.envs.sim.env import SimTrackEnv  # noqa: E402
from rulka.envs.sim.physics import Controls  # noqa: E402


def pin_one_core() -> str:
    """Run on one CPU core where the OS allows it; say what happened."""
    cv2.setNumThreads(1)
    if hasattr(os, "sched_setaffinity"):
        core = sorted(os.sched_getaffinity(0))[-1]
        os.sched_setaffinity(0, {core})
        return f"pinned to core {core}"
    return "not pinned (no sched_setaffinity)"


def actions(n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    # 60 % accelerate, the rest any of the 12 actions: the car moves and turns like a learner's
    return [0 if rng.random() < 0.6 else int(rng.integers(12)) for _ in range(n)]


def env_rate(track: str, image: bool, n: int, repeats: int, size: tuple[int, int] = (64, 64)) -> dict[str, float]:
    env = SimTrackEnv(track=track, image=image, image_size=size)
    acts = actions(n)
    best = best_cpu = float("inf")
    episodes = 0
    for _ in range(repeats):
        env.reset(seed=0)
        t0, c0 = time.perf_counter(), time.process_time()
        for a in acts:
            _, _, term, trunc, _ = env.step(a)
            if term or trunc:
                env.reset()
                episodes += 1
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    # wall-clock rate, and the rate per CPU-second of this process (robust to other processes
    # sharing the core; the two agree on an idle machine)
    return {"actions_per_s": round(n / best, 1), "us_per_action": round(1e6 * best / n, 2),
            "actions_per_cpu_s": round(n / max(best_cpu, 1e-9), 1), "episodes": episodes}


def part_costs(track: str, n: int) -> dict[str, float]:
    env = SimTrackEnv(track=track, image=True)
    env.reset(seed=0)
    car = env.car
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    for k in range(n):
        if k % 400 == 0:
            car.reset()
        car.step(Controls(gas=1.0, steer=0.2 if k % 40 < 20 else -0.2), 5)
    out["us_physics_5_ticks"] = round(1e6 * (time.perf_counter() - t0) / n, 2)
    t0 = time.perf_counter()
    for _ in range(n):
        env.car_state()
    out["us_car_state"] = round(1e6 * (time.perf_counter() - t0) / n, 2)
    state = env.car_state()
    env.pipeline.reset(state)
    t0 = time.perf_counter()
    for _ in range(n):
        env.pipeline.step(state, 0)
    out["us_pipeline_step"] = round(1e6 * (time.perf_counter() - t0) / n, 2)
    cam = env.camera
    assert cam is not None
    t0 = time.perf_counter()
    for k in range(n):
        cam.render(car.x, car.z + 0.01 * k, car.heading)
    out["us_camera_64x64"] = round(1e6 * (time.perf_counter() - t0) / n, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer actions (a smoke run)")
    parser.add_argument("--track", default="default", help="track name (default: default)")
    args = parser.parse_args()
    n, repeats = (2000, 1) if args.quick else (20000, 3)
    pinning = pin_one_core()
    with_image = env_rate(args.track, True, n, repeats)
    without_image = env_rate(args.track, False, n, repeats)
    # the run config's default nn.vis.image_size is TrackMania's 160x120: report it too
    with_large_image = env_rate(args.track, True, n, repeats, (160, 120))
    result = {
        "benchmark": "sim",
        "track": args.track,
        "image_size": [64, 64],
        "actions": n,
        "with_image": with_image,
        "without_image": without_image,
        "with_image_160x120": with_large_image,
        "parts": part_costs(args.track, n // 2),
        "target_actions_per_s_with_image": 5000,
        "meets_target": with_image["actions_per_s"] >= 5000,
        "meets_target_per_cpu_s": with_image["actions_per_cpu_s"] >= 5000,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
            "pinning": pinning,
        },
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
