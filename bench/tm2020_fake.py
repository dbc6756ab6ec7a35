"""Benchmark: the TrackMania 2020 worker loop on the fake game, at the game's 20 Hz.

Runs ``TM2020Env`` (rtgym real-time loop, telemetry over localhost TCP from the fake plugin at
60 records/s, fake window capture, 64x64 grayscale conversion, the shared pipeline) for a fixed,
seeded action sequence and reports:

- loop timing: step period p50/p99 and jitter (|period - 50 ms|) p50/p99, overruns;
- capture + conversion + pipeline milliseconds per step (what the loop spends reading the game),
  in image mode and in LIDAR mode;
- the parts alone on the same frames: fake window grab, 64x64 gray conversion, LIDAR, pipeline;
- baseline: rtgym's own loop at 20 Hz with an interface that does nothing, in the same run, so
  the jitter the machine adds by itself is visible next to the backend's.

Prints one JSON object.

    python -m bench.tm2020_fake [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import platform
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from gymnasium import spaces  # noqa: E402
from rtgym import DEFAULT_CONFIG_DICT, RealTimeGymInterface  # noqa: E402

from rulka.envs.sim.tracks import get_track  # noqa: E402
from rulka.envs.tm2020.capture import Lidar, to_image  # noqa: E402
from rulka.envs.tm2020.fake import FakeTM2020, FakeWindow  # noqa: E402
from rulka.envs.tm2020.telemetry import TelemetryClient  # noqa: E402

STEP_S = 0.05


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values), q)), 3) if values else float("nan")


def actions(n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    return [0 if rng.random() < 0.7 else int(rng.integers(12)) for _ in range(n)]


def run_env(n_steps: int, observation: str) -> dict[str, float]:
    from rulka.envs.tm2020.env import TM2020Env

    nn = {"vis": {"image_size": {"width": 64, "height": 64}}} if observation == "image" else {"vis": {"no_image": True}}
    cfg = {"environment": {"backend": "tm2020", "tm2020": {"capture": "fake", "observation": observation,
                                                           "fake_countdown_s": 0.3}}, "nn": nn}
    with FakeTM2020(countdown_s=0.3, fps=60) as game:
        env = TM2020Env(cfg, fake=game)
        try:
            env.reset()
            periods: list[float] = []
            obs_ms: list[float] = []
            episodes = 0
            last = None
            for a in actions(n_steps):
                _, _, te, tr, info = env.step(a)
                now = time.perf_counter()
                if last is not None:
                    periods.append(1000 * (now - last))
                last = now
                obs_ms.append(float(info.get("obs_ms", np.nan)))
                if te or tr:
                    env.reset()
                    episodes += 1
                    last = None
            jitter = [abs(p - 1000 * STEP_S) for p in periods]
            return {
                "steps": n_steps, "episodes": episodes,
                "step_ms_p50": _pct(periods, 50), "step_ms_p99": _pct(periods, 99),
                "jitter_ms_p50": _pct(jitter, 50), "jitter_ms_p99": _pct(jitter, 99),
                "overruns": env.overruns,
                "capture_pipeline_ms_p50": _pct(obs_ms, 50), "capture_pipeline_ms_p99": _pct(obs_ms, 99),
            }
        finally:
            env.close()


class _Idle(RealTimeGymInterface):
    def get_observation_space(self) -> spaces.Tuple:
        return spaces.Tuple([spaces.Box(-1, 1, (1,), np.float32)])

    def get_action_space(self) -> spaces.Space:
        return spaces.Discrete(12)

    def get_default_action(self) -> int:
        return 3

    def send_control(self, control: object) -> None:
        pass

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[list, dict]:
        return [np.zeros(1, np.float32)], {}

    def get_obs_rew_terminated_info(self) -> tuple[list, float, bool, dict]:
        return [np.zeros(1, np.float32)], 0.0, False, {}


def run_baseline(n_steps: int) -> dict[str, float]:
    import sys

    import rtgym  # noqa: F401 - registers the ids

    cfg = dict(DEFAULT_CONFIG_DICT, interface=_Idle, time_step_duration=STEP_S, start_obs_capture=0.04,
               act_in_obs=False, ep_max_length=10 ** 9)
    env = gym.make("real-time-gym-v1" if sys.platform == "win32" else "real-time-gym-ts-v1", config=cfg,
                   disable_env_checker=True)
    env.reset()
    periods = []
    last = None
    for _ in range(n_steps):
        env.step(0)
        now = time.perf_counter()
        if last is not None:
            periods.append(1000 * (now - last))
        last = now
    jitter = [abs(p - 1000 * STEP_S) for p in periods]
    return {"step_ms_p50": _pct(periods, 50), "step_ms_p99": _pct(periods, 99),
            "jitter_ms_p50": _pct(jitter, 50), "jitter_ms_p99": _pct(jitter, 99)}


def parts(n: int) -> dict[str, float]:
    """Each part alone, best of 3 runs over the same frames (ms per call)."""
    from rulka.envs.pipeline import PipelineParams, TrackmaniaPipeline, make_reference_line

    track = get_track("default")
    params = PipelineParams()
    pipeline = TrackmaniaPipeline(params, make_reference_line(track.race_line(), params))
    with FakeTM2020(countdown_s=0.0, fps=60) as game, TelemetryClient(port=game.port) as client:
        window = FakeWindow(game)
        game.set_inputs(1.0, 0.0, 0.0)
        time.sleep(0.5)
        rec = client.wait_newer(None, 5.0)
        assert rec is not None
        frames = [window.grab() for _ in range(8)]
        lidar = Lidar(frames[0].shape[1], frames[0].shape[0])
        pipeline.reset(rec.car_state())

        def best(fn) -> float:
            out = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                for i in range(n):
                    fn(i)
                out = min(out, (time.perf_counter() - t0) / n)
            return round(1000 * out, 4)

        return {
            "window_grab_ms": best(lambda i: window.grab()),
            "to_gray_64x64_ms": best(lambda i: to_image(frames[i % 8], 64, 64)),
            "lidar_ms": best(lambda i: lidar.measure(frames[i % 8])),
            "telemetry_to_car_state_ms": best(lambda i: rec.car_state()),
            "pipeline_step_ms": best(lambda i: pipeline.step(rec.car_state(), 0)),
            "window_size": list(game.window_size),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    n = 100 if args.quick else 600
    t0 = time.perf_counter()
    result = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": platform.platform(),
        "rate_hz": 1 / STEP_S,
        "baseline_rtgym_idle": run_baseline(n),
        "image_64x64": run_env(n, "image"),
        "lidar": run_env(n, "lidar"),
        "parts": parts(200 if args.quick else 1000),
    }
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
