"""Benchmark: the TMNF worker path on the fake game (rulka's TMInterface protocol over localhost TCP).

For the same seeded action sequence on the default track it measures:

- ``sim``: the simulator alone (``SimTrackEnv``), actions per second: the baseline;
- ``tmnf_inproc``: ``TmnfEnv`` driving the fake game in the same process (what
  ``configs/tmnf_fake.yaml`` runs), actions per second;
- ``tmnf_process``: ``TmnfEnv`` driving the fake game in its own process started through the
  Linux launch-script path (``ScriptLauncher``), as a real game runs beside the worker;
- per-step overhead of the client and protocol: ms per action of each TMNF variant minus the
  simulator's, in the same run (negative for ``tmnf_process`` on a multi-core machine: the
  physics runs in the game's process, in parallel with the worker's pipeline);
- frames at 160x120: actions per second with the image, ms per frame on the client (BGRA ->
  grayscale) and the frame path's extra ms per action (pause, request, render, 76.8 kB over the
  socket, conversion) over float-only runs of the same actions (alternated, best of two each).

Prints one JSON object.

    python -m bench.tmnf_fake [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import stat
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from rulka.config import config_from_dict  # noqa: E402


def actions(n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    return [0 if rng.random() < 0.7 else int(rng.integers(12)) for _ in range(n)]


def cfg(image: bool):
    vis = {"no_image": not image, "image_size": {"width": 160, "height": 120}}
    return config_from_dict({"environment": {"backend": "tmnf", "game_launch": "fake", "tmi_protection_timeout_s": 30},
                             "nn": {"vis": vis}})


def drive(env, acts: list[int]) -> tuple[float, int]:
    """Seconds for ``acts`` (resetting at episode ends), episodes."""
    env.reset()
    episodes = 0
    t0 = time.perf_counter()
    for a in acts:
        _, _, terminated, truncated, _ = env.step(a)
        if terminated or truncated:
            episodes += 1
            env.reset()
    return time.perf_counter() - t0, episodes


def run_sim(acts: list[int]) -> float:
    from rulka.envs.sim.env import SimTrackEnv

    env = SimTrackEnv(config=cfg(False), image=False)
    s, _ = drive(env, acts)
    return len(acts) / s


def run_tmnf(acts: list[int], image: bool, process: bool) -> tuple[float, dict]:
    from rulka.envs.tmnf.env import TmnfEnv
    from rulka.envs.tmnf.game import FakeLauncher, ScriptLauncher

    tmp = None
    if process:
        tmp = Path(tempfile.mkdtemp()) / "launch_fake.sh"
        tmp.write_text(f"#!/bin/sh\nexec {sys.executable} -m rulka.envs.tmnf.fake --port $1 --countdown-ms -100\n")
        tmp.chmod(tmp.stat().st_mode | stat.S_IEXEC)
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        env = TmnfEnv(cfg(image), launcher=ScriptLauncher(str(tmp)), port=port)
    else:
        env = TmnfEnv(cfg(image), launcher=FakeLauncher(countdown_ms=-100), port=0)
    try:
        s, episodes = drive(env, acts)
        counters = {"episodes": episodes, "game_lost": env.counters["game_lost"]}
    finally:
        env.close()
    return len(acts) / s, counters


def frame_conversion_ms(n: int) -> float:
    from rulka.envs.tmnf.frames import bgra_to_gray

    data = np.random.default_rng(0).integers(0, 256, 160 * 120 * 4, dtype=np.uint8).tobytes()
    t0 = time.perf_counter()
    for _ in range(n):
        bgra_to_gray(data, 160, 120)
    return (time.perf_counter() - t0) / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer actions (a smoke run)")
    args = parser.parse_args()
    n = 300 if args.quick else 3000
    acts = actions(n)
    t_start = time.time()
    sim = run_sim(acts)
    inproc, c_in = run_tmnf(acts, image=False, process=False)
    proc, c_proc = run_tmnf(acts, image=False, process=True)
    # the frame path: image and float-only runs of the same actions, alternated, best of two each
    # (the machine's load drifts; the best run is the least disturbed)
    n_img = max(n // 3, 100)
    img_rates, flat_rates, c_img = [], [], {"episodes": 0, "game_lost": 0}
    for _ in range(2):
        rate, c = run_tmnf(acts[:n_img], image=True, process=True)
        img_rates.append(rate)
        c_img = {k: c_img[k] + c[k] for k in c_img}
        flat_rates.append(run_tmnf(acts[:n_img], image=False, process=True)[0])
    img, flat = max(img_rates), max(flat_rates)
    ms = lambda rate: 1000.0 / rate  # noqa: E731
    result = {
        "bench": "tmnf_fake",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version()},
        "actions": n,
        "sim_actions_per_s": round(sim, 1),
        "tmnf_inproc_actions_per_s": round(inproc, 1),
        "tmnf_process_actions_per_s": round(proc, 1),
        "overhead_ms_per_action_inproc": round(ms(inproc) - ms(sim), 3),
        "overhead_ms_per_action_process": round(ms(proc) - ms(sim), 3),
        "image_160x120_actions_per_s": round(img, 1),
        "frame_path_ms_per_action_160x120": round(ms(img) - ms(flat), 3),
        "frame_conversion_ms_160x120": round(frame_conversion_ms(200 if args.quick else 2000), 4),
        "episodes": {"inproc": c_in["episodes"], "process": c_proc["episodes"], "image": c_img["episodes"]},
        "game_lost": c_in["game_lost"] + c_proc["game_lost"] + c_img["game_lost"],
        "seconds": round(time.time() - t_start, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
