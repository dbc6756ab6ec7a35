"""Benchmark: cost of the TrackMania observation/reward pipeline per action, on one core.

Drives a car along a winding reference line (no physics, no image: only what
``TrackmaniaPipeline.step`` and ``ReferenceLine.project`` cost), with the default layout (184
floats) and with a small one. Prints one JSON object.

    python -m bench.pipeline [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from rulka.envs.car_state import CarState, yaw_orientation  # noqa: E402
from rulka.envs.pipeline import PipelineParams, TrackmaniaPipeline  # noqa: E402
from rulka.envs.reference_line import ReferenceLine  # noqa: E402


def winding_line(length: float = 3000.0) -> np.ndarray:
    s = np.linspace(0.0, length, 3001)
    heading = 0.8 * np.sin(s / 150.0)  # gentle S-bends
    x = np.cumsum(np.sin(heading)) * (s[1] - s[0])
    z = np.cumsum(np.cos(heading)) * (s[1] - s[0])
    return np.stack([x, 2.0 * np.sin(s / 400.0), z], axis=1)


def car_states(line: ReferenceLine, n: int, speed: float, ms_per_action: int) -> list[CarState]:
    out = []
    for k in range(n):
        prog = (k * speed * ms_per_action / 1000.0) % (line.length - 1.0)
        pos = line.point_at(prog) + np.array([1.5 * math.sin(k / 7.0), 0.0, 0.0])
        t = line.tangent_at(prog)
        rot = yaw_orientation(math.atan2(t[0], t[2]))
        out.append(
            CarState(
                position=pos, orientation=rot, velocity=rot[:, 2] * speed, race_time_ms=k * ms_per_action
            )
        )
    return out


def measure(params: PipelineParams, n_steps: int) -> dict[str, float]:
    line = ReferenceLine(
        winding_line(),
        params.distance_between_checkpoints,
        params.n_zone_centers_extrapolate_before_start_of_map,
        params.n_zone_centers_extrapolate_after_end_of_map,
    )
    pipe = TrackmaniaPipeline(params, line)
    states = car_states(line, 2000, speed=60.0, ms_per_action=params.ms_per_action)
    t0 = time.perf_counter()
    pipe.reset(states[0])
    done_steps = 0
    while done_steps < n_steps:
        pipe.reset(states[0])
        for k in range(1, len(states)):
            pipe.step(states[k], k % 12)
            done_steps += 1
            if done_steps >= n_steps:
                break
    dt = time.perf_counter() - t0
    t1 = time.perf_counter()
    for k in range(n_steps):
        line.project(states[k % len(states)].position, line.start_zone + 12 * (k % len(states)))
    dt_proj = time.perf_counter() - t1
    return {
        "float_input_dim": pipe.float_input_dim,
        "steps_per_s": round(n_steps / dt, 1),
        "us_per_step": round(1e6 * dt / n_steps, 2),
        "us_per_project": round(1e6 * dt_proj / n_steps, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    args = parser.parse_args()
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    n = 3000 if args.quick else 30000
    result = {
        "benchmark": "pipeline",
        "python": platform.python_version(),
        "steps": n,
        "default_layout": measure(PipelineParams(), n),
        "small_layout": measure(
            PipelineParams(
                n_zone_centers_in_inputs=10, n_prev_actions_in_inputs=2, distance_between_checkpoints=1.0
            ),
            n,
        ),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
