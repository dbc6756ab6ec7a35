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
  socket, conversion) over float-only runs of the same actions (alternated, best of two each);
- the worker's own cost (``worker_own``): a real ``Worker`` (segments, compression, outbox, over
  an in-process link) driving the fake at 160x120 with an actor that costs nothing (the same
  seeded actions), ms per action over the simulator alone: everything but the game and the policy
  forward, with the game in the worker's process and in its own; ``loop_ms_per_action`` is the
  part of it the worker's loop adds over the bare env; ``cpu_ms_per_action_process`` is the
  worker process's own CPU time per action with the game in its own process (the wall figures
  also count the fake's side of the socket, Python here and the plugin in the real game, and the
  waits for its replies);
- instances (``instances``): 1, 2 and 4 processes at once, each a TMNF fake at 160x120 (in its
  process) acted on by the guide-size network (``IQNActor.accelerate`` on the device:
  ``worker.device``; on CPU with int8 heads and ONNX Runtime where it is installed, as
  ``worker.cpu_runtime: auto`` runs), actions/s per instance; on CUDA with the memory each process's context
  takes (one process per instance, each with its own CUDA context: docs/performance.md);
- layouts (``layouts``, opt-in, CPU): the same instances with every game in a process of its own,
  as N worker processes and as one process driving N threads (``rulka-worker --instances N``),
  alternated, actions/s per instance (issue 65 item 2).

Prints one JSON object.

    python -m bench.tmnf_fake [--quick] [--devices cpu,cuda] [--parts env,worker,instances]
    python -m bench.tmnf_fake --parts layouts --seconds 10 --layout-counts 1,2
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

TARGETS = {"worker_own_ms_per_action_inproc_max": 0.3, "worker_own_ms_per_action_process_max": 0.8,
           "cuda_guide_instance_actions_per_s_min": 200}


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
    env, _ = _env(cfg(image), process)
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


class FreeActor:
    """An actor that costs nothing: the seeded actions in turn (the worker's own cost alone)."""

    def __init__(self, acts: list[int]) -> None:
        self.acts, self.i = acts, 0

    def act_with_info(self, obs, test: bool = False):
        self.i += 1
        return self.acts[self.i % len(self.acts)], {}

    def act(self, obs, test: bool = False):
        return self.act_with_info(obs, test)[0]

    def reset(self) -> None:
        pass

    def load_weights(self, weights) -> None:
        pass


def run_worker(acts: list[int], process: bool) -> tuple[float, float]:
    """Actions/s of a ``Worker`` (free actor, in-process link, no credit pauses) on the fake at 160x120,
    and the worker's CPU ms per action: this process's, less the game thread's when the game runs in it."""
    from rulka.net.local import LocalHub
    from rulka.worker.worker import Worker

    c = config_from_dict({"environment": {"backend": "tmnf", "game_launch": "fake", "tmi_protection_timeout_s": 30},
                          "nn": {"vis": {"no_image": False, "image_size": {"width": 160, "height": 120}}},
                          "worker": {"pause_for_credit": False}})
    env, tmp = _env(c, process)
    worker = Worker(c, LocalHub(queue_size=100_000).worker_link("w0"), env=env, actor=FreeActor(acts),
                    state_dir=tempfile.mkdtemp(), wait_for_welcome=False)
    try:
        worker.run(max_steps=20, drain_timeout_s=0)  # connect, build the track, first segment
        games = [] if process else env.launcher.games

        def game_cpu() -> float:
            return sum(g.thread_cpu_s for g in games)

        t0, c0, g0 = time.perf_counter(), time.process_time(), game_cpu()
        stats = worker.run(max_steps=len(acts), drain_timeout_s=0)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0 - (game_cpu() - g0)
        return (stats.steps / wall, cpu / stats.steps * 1000) if stats.steps else (0.0, float("nan"))
    finally:
        worker.close()
        env.close()


def _env(c, process: bool):
    from rulka.envs.tmnf.env import TmnfEnv
    from rulka.envs.tmnf.game import FakeLauncher, ScriptLauncher

    if not process:
        return TmnfEnv(c, launcher=FakeLauncher(countdown_ms=-100), port=0), None
    tmp = Path(tempfile.mkdtemp()) / "launch_fake.sh"
    tmp.write_text(f"#!/bin/sh\nexec {sys.executable} -m rulka.envs.tmnf.fake --port $1 --countdown-ms -100\n")
    tmp.chmod(tmp.stat().st_mode | stat.S_IEXEC)
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return TmnfEnv(c, launcher=ScriptLauncher(str(tmp)), port=port), tmp


def worker_own(acts: list[int]) -> dict:
    """ms per action of the worker over the simulator alone (image on both), game in process and
    apart, and of the worker's loop over the bare env (in process); best of two each."""
    from rulka.envs.sim.env import SimTrackEnv

    ms = lambda rate: 1000.0 / rate  # noqa: E731
    sim, bare, inproc, proc, inproc_cpu, proc_cpu = [], [], [], [], [], []
    for _ in range(2):
        env = SimTrackEnv(config=cfg(True), image=True)
        sim.append(len(acts) / drive(env, acts)[0])
        bare.append(run_tmnf(acts, image=True, process=False)[0])
        rate, cpu_ms = run_worker(acts, process=False)
        inproc.append(rate)
        inproc_cpu.append(cpu_ms)
        rate, cpu_ms = run_worker(acts, process=True)
        proc.append(rate)
        proc_cpu.append(cpu_ms)
    s, b, i, p = max(sim), max(bare), max(inproc), max(proc)
    return {"sim_image_actions_per_s": round(s, 1), "tmnf_image_bare_actions_per_s": round(b, 1),
            "worker_inproc_actions_per_s": round(i, 1), "worker_process_actions_per_s": round(p, 1),
            "ms_per_action_inproc": round(ms(i) - ms(s), 3), "ms_per_action_process": round(ms(p) - ms(s), 3),
            "loop_ms_per_action": round(ms(i) - ms(b), 3),
            # the worker process's own CPU per action with the game in another process: the client's
            # side of the protocol, the frame conversion, the loop, packing and compression; not the
            # game's side of the socket (the wall figures above count it, and the waits for replies)
            "cpu_ms_per_action_process": round(min(proc_cpu), 3),
            # the same with the game in this process, less its thread's CPU (as of its last message)
            "cpu_ms_per_action_inproc": round(min(inproc_cpu), 3)}


def _pair(device: str, game_apart: bool = False):
    """The guide-size actor on ``device`` (as a worker builds it, warmed and built) and a TMNF fake
    at 160x120: in this process, or with ``game_apart`` in its own (as a real game is)."""
    import torch

    torch.set_num_threads(1)
    from bench.actor import IMAGE_NETWORKS, actor_for
    from rulka.envs.tmnf.env import TmnfEnv
    from rulka.envs.tmnf.game import FakeLauncher
    from rulka.nn.inference import onnxruntime_missing

    actor = actor_for(IMAGE_NETWORKS["guide160x120"])
    # what a worker runs by default there: worker.cpu_int8, and worker.cpu_runtime auto on the CPU
    runtime = "onnxruntime" if device == "cpu" and onnxruntime_missing() is None else "torch"
    actor.accelerate(device, int8=True, runtime=runtime)
    env = _env(cfg(True), True)[0] if game_apart else TmnfEnv(cfg(True), launcher=FakeLauncher(countdown_ms=-100),
                                                               port=0)
    obs, _ = env.reset()
    actor.act(obs)
    if actor._fast is not None:
        actor._fast.wait_built(300)  # the int8 heads and the ONNX Runtime graph, before the clock starts
    return actor, env, runtime


def _timed(actor, env, seconds: float) -> float:
    """Actions per second of ``actor`` driving ``env`` for ``seconds`` after 20 warm-up actions."""
    obs, _ = env.reset()
    n, t0, warm = 0, time.perf_counter(), 20
    while True:
        obs, _, terminated, truncated, _ = env.step(actor.act(obs))
        if terminated or truncated:
            obs, _ = env.reset()
        n += 1
        if n == warm:
            t0 = time.perf_counter()
        elif n > warm and time.perf_counter() - t0 >= seconds:
            return (n - warm) / (time.perf_counter() - t0)


def _instance(device: str, seconds: float, out, game_apart: bool = False, barrier=None) -> None:
    """One instance: the guide-size actor on ``device`` and its TMNF fake (see ``_pair``); with
    ``barrier``, timed only once every instance is built (a build takes the CPU the others time)."""
    import torch

    actor, env, runtime = _pair(device, game_apart)
    try:
        if barrier is not None:
            barrier.wait(600)
        row = {"actions_per_s": _timed(actor, env, seconds), "runtime": runtime}
        if device.startswith("cuda"):
            free, total = torch.cuda.mem_get_info()
            row.update(torch_reserved_mb=round(torch.cuda.memory_reserved() / 2**20, 1),
                       device_used_mb=round((total - free) / 2**20, 1))
        out.put(row)
    finally:
        env.close()


def _threads(device: str, seconds: float, out, n: int) -> None:
    """One process driving ``n`` instances on ``n`` threads, as ``rulka-worker --instances n``
    does: each thread its own actor and its own game (in a process of its own)."""
    import threading

    pairs = [_pair(device, game_apart=True) for _ in range(n)]
    rates: list[float] = [0.0] * n
    try:
        threads = [threading.Thread(target=lambda i=i: rates.__setitem__(i, _timed(*pairs[i][:2], seconds)))
                   for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in rates:
            out.put({"actions_per_s": r, "runtime": pairs[0][2]})
    finally:
        for _, env, _ in pairs:
            env.close()


def layouts(device: str, seconds: float, counts: tuple[int, ...] = (1, 2)) -> list[dict]:
    """Issue 65 item 2 on the CPU: N instances as N processes against one process with N threads
    (``rulka-worker --instances N``), every game in its own process, the rows alternated."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")  # as on Windows
    rows = []
    for n in counts:
        for layout in ("processes", "threads"):
            q = ctx.Queue()
            if layout == "processes":
                barrier = ctx.Barrier(n)  # every process built before any is timed, as the threads are
                procs = [ctx.Process(target=_instance, args=(device, seconds, q, True, barrier)) for _ in range(n)]
            else:
                procs = [ctx.Process(target=_threads, args=(device, seconds, q, n))]
            for p in procs:
                p.start()
            rates = [q.get(timeout=seconds + 300)["actions_per_s"] for _ in range(n)]
            for p in procs:
                p.join(30)
            rows.append({"device": device, "layout": layout, "instances": n,
                         "actions_per_s_per_instance": round(float(np.mean(rates)), 1),
                         "slowest": round(min(rates), 1), "total_actions_per_s": round(sum(rates), 1)})
    return rows


def instances(devices: list[str], seconds: float) -> list[dict]:
    import multiprocessing as mp

    import torch

    ctx = mp.get_context("spawn")  # as on Windows
    rows = []
    for device in devices:
        if device == "cuda" and not torch.cuda.is_available():
            rows += [{"device": "cuda", "instances": n, "actions_per_s_per_instance": "not measured"} for n in (1, 2, 4)]
            continue
        for n in (1, 2, 4):
            q = ctx.Queue()
            procs = [ctx.Process(target=_instance, args=(device, seconds, q)) for _ in range(n)]
            for p in procs:
                p.start()
            got = [q.get(timeout=seconds + 240) for _ in procs]
            for p in procs:
                p.join(30)
            rates = [g["actions_per_s"] for g in got]
            row = {"device": device, "instances": n, "runtime": got[0]["runtime"],
                   "actions_per_s_per_instance": round(float(np.mean(rates)), 1),
                   "slowest": round(min(rates), 1), "total_actions_per_s": round(sum(rates), 1)}
            if device == "cuda":
                row["device_used_mb_all"] = max(g["device_used_mb"] for g in got)
                row["torch_reserved_mb_per_process"] = max(g["torch_reserved_mb"] for g in got)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer actions (a smoke run)")
    parser.add_argument("--devices", default="cpu,cuda", help="instances rows: comma-separated cpu, cuda")
    parser.add_argument("--parts", default="env,worker,instances",
                        help="comma-separated: env, worker, instances, layouts (opt-in: N processes against one "
                             "process with N threads, games apart, at --layout-counts)")
    parser.add_argument("--layout-counts", default="1,2", help="layouts rows: instance counts")
    parser.add_argument("--seconds", type=float, default=10.0, help="each instance's timed run")
    args = parser.parse_args()
    n = 300 if args.quick else 3000
    acts = actions(n)
    parts = args.parts.split(",")
    t_start = time.time()
    result: dict = {"bench": "tmnf_fake", "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                    "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version()}, "actions": n,
                    "targets": TARGETS}
    if "env" in parts:
        result.update(env_rows(acts, n, args.quick))
    if "worker" in parts:
        result["worker_own"] = worker_own(acts[: max(n // 3, 200)])
    if "instances" in parts:
        result["instances"] = instances(args.devices.split(","), 3.0 if args.quick else args.seconds)
        one_gpu = [r for r in result["instances"] if r["device"] == "cuda" and r["instances"] == 1]
        result["cuda_guide_instance_actions_per_s"] = one_gpu[0]["actions_per_s_per_instance"] if one_gpu else "not measured"
    if "layouts" in parts:
        counts = tuple(int(c) for c in args.layout_counts.split(","))
        result["layouts"] = layouts("cpu", 3.0 if args.quick else args.seconds, counts)
    result["seconds"] = round(time.time() - t_start, 1)
    print(json.dumps(result))


def env_rows(acts: list[int], n: int, quick: bool) -> dict:
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
    return {
        "sim_actions_per_s": round(sim, 1),
        "tmnf_inproc_actions_per_s": round(inproc, 1),
        "tmnf_process_actions_per_s": round(proc, 1),
        "overhead_ms_per_action_inproc": round(ms(inproc) - ms(sim), 3),
        "overhead_ms_per_action_process": round(ms(proc) - ms(sim), 3),
        "image_160x120_actions_per_s": round(img, 1),
        "frame_path_ms_per_action_160x120": round(ms(img) - ms(flat), 3),
        "frame_conversion_ms_160x120": round(frame_conversion_ms(200 if quick else 2000), 4),
        "episodes": {"inproc": c_in["episodes"], "process": c_proc["episodes"], "image": c_img["episodes"]},
        "game_lost": c_in["game_lost"] + c_proc["game_lost"] + c_img["game_lost"],
    }


if __name__ == "__main__":
    main()
