"""Benchmark: does the trainer role keep its learner busy? Updates/s of the whole trainer
(``rulka run``: server, trainer and N unpaced workers as processes, real TLS on loopback) over
``IQNAgent.train`` alone, in the same run, and the samples per insert it achieved.

For each config and worker count: ``launch`` the run (``worker.max_steps_per_s`` cleared, metrics
every 2 s), wait for learning to start, count updates and stored transitions over ``--seconds``
from ``metrics.jsonl``, stop the run (it writes its final checkpoint). Then, in a fresh process
with the trainer's own torch thread count, build the same agent and memory from the run's
resolved config, load that checkpoint (weights and replay) and time ``agent.train(memory.sample())``
alone: the learner's ceiling on this machine at this moment. ``ratio`` = trainer / alone (target
>= 0.9); ``spi`` = samples per insert over the window (updates x batch / transitions stored),
against the target. Also reported: the share of the window the learner spent inside
``agent.train`` (``perf/learner_busy``) and the share it waited with nothing to train
(``perf/learner_starved``: no data yet, or the ratio reached; the workers were too slow on this
machine), and ``ratio_when_fed`` = ratio / (1 - starved): the learner's speed when it had data,
over its speed alone; what the trainer's own overhead costs it.

    python bench/trainer_loop.py [--quick] [--configs cartpole,sim_image] [--workers 1,2,4] [--seconds 20]
        [--worker-priorities below_normal,normal] [--pinning on,off] [--no-loaded-baseline] [--repeat N]

Workers run as ``rulka run`` starts them: below normal priority (nice 10), kept with the relay off
the trainer's cores (``--pinning on``); ``--pinning off`` (measured in the same run by default, the
baseline) lets the OS place them, ``--worker-priorities normal`` measures equal sharing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIGS: dict[str, tuple[str, list[str]]] = {
    "cartpole": ("configs/cartpole_iqn.yaml", []),
    # the default sim run with its 48x36 camera image (the CPU default runs without it)
    "sim_image": ("configs/sim_iqn.yaml", ["nn.vis.no_image=false"]),
}
COMMON = ["worker.max_steps_per_s=null", "logging.log_every_s=2", "logging.progress=never",
          "logging.wandb.enabled=false"]


def _records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("metrics"), dict):
            out.append(rec)
    return out


def measure_role(config: str, overrides: list[str], workers: int, seconds: float, run_dir: Path,
                 start_timeout_s: float = 240.0, worker_priority: str = "below_normal",
                 pin_cores: bool = True) -> dict[str, Any]:
    """Launch the run, time ``seconds`` of training after the first update, stop it."""
    from rulka.cli.run import launch

    log = open(run_dir.parent / f"{run_dir.name}.log", "w")  # noqa: SIM115 - closed below
    run = launch(REPO_ROOT / config, workers=workers, run_dir=run_dir, overrides=[*COMMON, *overrides],
                 trainer_output=log, worker_priority=worker_priority, pin_cores=pin_cores)
    worker_cores = getattr(run, "worker_cores", None)
    try:
        t_start = time.monotonic()
        first = None
        while time.monotonic() - t_start < start_timeout_s and run.alive():
            recs = [r for r in _records(run_dir) if r["metrics"].get("charts/batches_trained", 0) > 0]
            if recs:
                first = recs[0]
                break
            time.sleep(1.0)
        if first is None:
            return {"error": f"no update within {start_timeout_s:.0f} s (see {run_dir}.log)"}
        time.sleep(seconds)
        last = _records(run_dir)[-1]
    finally:
        run.stop()
        log.close()
    m0, m1 = first["metrics"], last["metrics"]
    dt_s = float(last["wall_time"]) - float(first["wall_time"])
    updates = m1["charts/batches_trained"] - m0["charts/batches_trained"]
    inserts = m1["charts/samples_received"] - m0["charts/samples_received"]
    window = [r["metrics"] for r in _records(run_dir) if first["wall_time"] < r["wall_time"] <= last["wall_time"]]
    def mean_of(key: str) -> float | None:
        xs = [w[key] for w in window if isinstance(w.get(key), int | float)]
        return round(sum(xs) / len(xs), 3) if xs else None

    return {"seconds": round(dt_s, 1), "updates": int(updates), "transitions": int(inserts),
            "updates_per_s": round(updates / dt_s, 2) if dt_s > 0 else None,
            "spi_target": m1.get("perf/samples_per_insert_target"),
            "learner_busy": mean_of("perf/learner_busy"), "learner_starved": mean_of("perf/learner_starved"),
            "limiter_dropped": m1.get("perf/limiter_dropped"),
            "_inserts": inserts, "_updates": updates, "_worker_cores": worker_cores}


def _agent_from_run(run_dir: Path) -> tuple[Any, Any, Path]:
    """(config, agent with the run's final weights, checkpoint folder), torch threads as the trainer's."""
    import torch
    import yaml

    from rulka.config import config_from_dict
    from rulka.plugins import build_plugin
    from rulka.trainer import checkpoint as ckpt

    cfg = config_from_dict(yaml.safe_load((run_dir / "config.resolved.yaml").read_text()))
    if cfg.trainer.torch_threads:
        torch.set_num_threads(cfg.trainer.torch_threads)
    agent = build_plugin("agent", str(cfg.trainer.agent), cfg.trainer.agent_kwargs, cfg)
    folder = ckpt.latest_checkpoint(run_dir / "checkpoints")
    agent_state, _ = ckpt.read_checkpoint(folder)
    agent.load_state_dict(agent_state)
    return cfg, agent, folder


def actor_load(run_dir: Path, seconds: float, cores: list[int] | None) -> None:
    """One worker's policy inference flat out (the load beside ``alone_loaded``): the run's actor on
    random observations of its input shapes, one torch thread, below normal priority, on ``cores``."""
    import numpy as np
    import torch

    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)
    os.nice(10)  # rulka run's below_normal workers
    torch.set_num_threads(1)
    _, agent, _ = _agent_from_run(run_dir)
    actor = agent.get_actor()
    spec, rng = actor.spec, np.random.default_rng(0)
    flt = rng.standard_normal(spec.float_dim).astype(np.float32)
    if spec.uses_image:  # one grayscale frame, as the workers' observations carry it
        obs: Any = {"img": rng.integers(0, 255, (1, spec.image_height, spec.image_width), dtype=np.uint8),
                    "float": flt}
    else:
        obs = flt
    print("ready", flush=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        actor.act(obs)


def alone(run_dir: Path, seconds: float) -> dict[str, Any]:
    """``agent.train`` alone on the run's memory (its final checkpoint), with the trainer's threads."""
    import torch

    from rulka.plugins import build_plugin

    cfg, agent, folder = _agent_from_run(run_dir)
    memory = build_plugin("memory", str(cfg.trainer.memory), cfg.trainer.memory_kwargs, cfg)
    memory.load(folder / "replay")
    batch_size = int(agent.batch_size or cfg.training.batch_size)
    for _ in range(3):
        agent.train(memory.sample(batch_size))
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        agent.train(memory.sample(batch_size))
        n += 1
    return {"updates_per_s": round(n / (time.perf_counter() - t0), 2), "torch_threads": torch.get_num_threads(),
            "memory_size": len(memory), "batch_size": batch_size}


def _start_load(run_dir: Path, procs: int, cores: list[int] | None, seconds: float) -> list[subprocess.Popen]:
    """``procs`` actor-load processes, each started and past its setup (it printed ``ready``)."""
    load = []
    for _ in range(procs):
        cmd = [sys.executable, __file__, "--actor-load", str(run_dir), "--alone-seconds", str(seconds)]
        if cores:
            cmd += ["--load-cores", ",".join(map(str, cores))]
        load.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    for p in load:
        if p.stdout is not None:
            p.stdout.readline()  # "ready", or "" if it died
    return load


def alone_median(run_dir: Path, seconds: float, rounds: int, load_procs: int = 0,
                 load_cores: list[int] | None = None) -> dict[str, Any]:
    """``alone`` in ``rounds`` fresh processes, one after the other: the median updates/s (one
    10 s figure varied by ~10% between runs of the same config, 2026-11-24) and every round's.
    With ``load_procs``, each round runs beside that many actor-load processes on ``load_cores``."""
    figures: list[dict[str, Any]] = []
    for _ in range(rounds):
        # the load outlives the timed window (setup of the bare learner included), then is killed
        load = _start_load(run_dir, load_procs, load_cores, seconds + 120) if load_procs else []
        try:
            out = subprocess.run([sys.executable, __file__, "--alone", str(run_dir), "--alone-seconds", str(seconds)],
                                 capture_output=True, text=True, timeout=600)
        finally:
            for p in load:
                p.kill()
                p.wait()
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            return {"error": out.stderr[-300:]}
        figures.append(json.loads(lines[-1]))
    rates = sorted(f["updates_per_s"] for f in figures)
    return {**figures[0], "updates_per_s": rates[len(rates) // 2],
            "updates_per_s_rounds": [f["updates_per_s"] for f in figures]}


def measure_row(name: str, n: int, priority: str, pin: str, seconds: float, args: argparse.Namespace,
                run_dir: Path) -> dict[str, Any]:
    """One row: the trainer role with ``n`` workers, then the bare learner (and loaded) on its checkpoint."""
    config, overrides = CONFIGS[name]
    role = measure_role(config, overrides, n, seconds, run_dir, worker_priority=priority, pin_cores=pin == "on")
    row: dict[str, Any] = {"config": name, "workers": n, "worker_priority": priority,
                           "pinned": pin == "on", "trainer": role}
    if "error" in role:
        return row
    row["alone"] = alone_median(run_dir, args.alone_seconds, args.alone_rounds)
    a = row["alone"].get("updates_per_s")
    inserts, updates = role.pop("_inserts"), role.pop("_updates")
    worker_cores = role.pop("_worker_cores", None)
    if a and role["updates_per_s"] is not None:
        row["ratio"] = round(role["updates_per_s"] / a, 3)
        starved = role.get("learner_starved")
        if starved is not None and starved < 1:
            row["ratio_when_fed"] = round(row["ratio"] / (1 - starved), 3)
    if not args.no_loaded_baseline:
        # the load sits where the run put its workers (pinned) or anywhere (not pinned)
        row["alone_loaded"] = alone_median(run_dir, args.alone_seconds, args.alone_rounds, load_procs=n,
                                           load_cores=worker_cores if pin == "on" else None)
        al = row["alone_loaded"].get("updates_per_s")
        if al and role["updates_per_s"] is not None:
            row["ratio_vs_loaded"] = round(role["updates_per_s"] / al, 3)
    batch = int(row["alone"].get("batch_size", 64))
    if inserts and role.get("spi_target"):
        row["spi"] = round(updates * batch / inserts, 2)
        row["spi_vs_target"] = round(row["spi"] / role["spi_target"], 3)
    return row


def median_row(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """The repeat with the median ratio (the lower of the two middle ones for an even count), with
    every repeat's ratio and ratio over the loaded baseline beside it; one repeat: itself."""
    if len(reps) == 1:
        return reps[0]
    measured = sorted((r for r in reps if isinstance(r.get("ratio"), int | float)), key=lambda r: r["ratio"])
    row = dict(measured[(len(measured) - 1) // 2] if measured else reps[0])
    row["ratio_repeats"] = [r.get("ratio") for r in reps]
    row["ratio_vs_loaded_repeats"] = [r.get("ratio_vs_loaded") for r in reps]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="cartpole, 2 workers, 30 s")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ", ".join(CONFIGS))
    parser.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")
    parser.add_argument("--seconds", type=float, default=20.0, help="timed window of each run")
    parser.add_argument("--alone-seconds", type=float, default=6.0, help="each round of the bare learner")
    parser.add_argument("--alone-rounds", type=int, default=3, help="rounds of the bare learner (median)")
    parser.add_argument("--worker-priorities", default="below_normal",
                        help="comma-separated worker priorities to measure, each as its own run (rulka run's default "
                             "is below_normal; normal: the OS shares the cores equally)")
    parser.add_argument("--pinning", default="on,off",
                        help="on: workers and relay kept off the trainer's cores (rulka run's default); off: "
                             "the OS places them (rulka run --no-pin); comma-separated, each its own run")
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure each row this many times (run, bare learner, loaded) and keep the repeat "
                             "with the median ratio, every repeat's ratio beside it (the bare CartPole learner measured "
                             "150 and 181 updates/s in rows minutes apart of one run, 2026-11-24)")
    parser.add_argument("--no-loaded-baseline", action="store_true",
                        help="skip alone_loaded (the bare learner beside the workers' inference load)")
    parser.add_argument("--alone", type=Path, default=None, help=argparse.SUPPRESS)  # internal: one run folder
    parser.add_argument("--actor-load", type=Path, default=None, help=argparse.SUPPRESS)  # internal: one load process
    parser.add_argument("--load-cores", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.alone is not None:
        print(json.dumps(alone(args.alone, args.alone_seconds)))
        return 0
    if args.actor_load is not None:
        actor_load(args.actor_load, args.alone_seconds, [int(c) for c in args.load_cores.split(",") if c] or None)
        return 0
    configs, counts, seconds = args.configs.split(","), [int(n) for n in args.workers.split(",")], args.seconds
    if args.quick:
        configs, counts, seconds = ["cartpole"], [2], 30.0
    results = []
    with tempfile.TemporaryDirectory(prefix="rulka-trainer-loop-") as tmp:
        for name in configs:
            for n, priority, pin in ((n, p, pin) for n in counts for p in args.worker_priorities.split(",")
                                     for pin in args.pinning.split(",")):
                reps = [measure_row(name, n, priority, pin, seconds, args, Path(tmp) / f"{name}-{n}-{priority}-{pin}-{k}")
                        for k in range(args.repeat)]
                row = median_row(reps)
                print(json.dumps(row), file=sys.stderr, flush=True)
                results.append(row)
    print(json.dumps({"bench": "trainer_loop", "results": results,
                      "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
                      "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
