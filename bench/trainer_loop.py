"""Benchmark: does the trainer role keep its learner busy? Updates/s of the whole trainer
(``rulka run``: server, trainer and N unpaced workers as processes, real TLS on loopback) over
``IQNAgent.train`` alone, in the same run, and the samples per insert it achieved.

For each config and worker count: ``launch`` the run (``worker.max_steps_per_s`` cleared, metrics
every 2 s), wait for learning to start, count updates and stored transitions over ``--seconds``
from ``metrics.jsonl`` (``spi`` = samples per insert over that window, updates x batch /
transitions stored, against the target; the share of it the learner spent inside ``agent.train``,
``perf/learner_busy``, and the share it waited with nothing to train, ``perf/learner_starved``:
the workers were too slow), stop the run (it writes its final checkpoint).

The bare learner (``BareLearner``): the same agent and memory built from the run's resolved config
with that checkpoint (weights and replay), the trainer's torch threads and allocator settings,
timing ``agent.train(memory.sample())``: the learner's ceiling on this machine at this moment.
With ``--paired K`` (the default, 9): the run is resumed and measured in K windows, each between
two windows of the bare learner taken seconds before and after with the whole run paused
(``paired_windows``); ``ratio`` = the median over the K windows of trainer / bare (target
>= 0.9). The bare learner's speed swings by up to 25% between 3 s windows on the 2-core machine
with nothing else running (2026-11-25), so only a comparison seconds apart, repeated, can judge a
10% target. ``--paired 0``: the bare learner after the run, in ``--alone-rounds`` fresh
processes. ``ratio_when_fed`` = ratio / (1 - starved): the learner's speed when it had data.

    python -m bench.trainer_loop [--quick] [--configs cartpole,sim_image] [--workers 1,2,4] [--seconds 20]
        [--paired K] [--worker-priorities below_normal,normal] [--pinning on,off] [--no-loaded-baseline]
        [--repeat N]

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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import child_command, child_env

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIGS: dict[str, tuple[str, list[str]]] = {
    "cartpole": ("configs/cartpole_iqn.yaml", []),
    # the default sim run with its 48x36 camera image (the CPU default runs without it)
    "sim_image": ("configs/sim_iqn.yaml", ["nn.vis.no_image=false"]),
    # issue 67's GPU trainer: the guide-size network (160x120 image, float MLP 256, dense 1024) at batch
    # 512 with docs/performance.md's GPU settings; give it --trainer-device cuda (bench/cuda_check.sh)
    "guide": ("configs/sim_iqn.yaml", ["nn.vis.no_image=false", "nn.vis.image_size.width=160",
                                       "nn.vis.image_size.height=120", "nn.float.mlp.hidden_dim=256",
                                       "nn.decoder.dense_hidden_dimension=1024", "training.batch_size=512",
                                       "nn.training.use_amp=true", "nn.training.amp_dtype=bfloat16",
                                       "memory.batch_device=auto"]),
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


def wait_for_training(run: Any, run_dir: Path, timeout_s: float = 240.0) -> dict[str, Any] | None:
    """The first metrics record of ``run`` with an update in it; None if none came within
    ``timeout_s`` or the run stopped."""
    t_start = time.monotonic()
    while time.monotonic() - t_start < timeout_s and run.alive():
        recs = [r for r in _records(run_dir) if r["metrics"].get("charts/batches_trained", 0) > 0]
        if recs:
            return recs[0]
        time.sleep(1.0)
    return None


def _mean_of(metrics: list[dict[str, Any]], key: str) -> float | None:
    xs = [m[key] for m in metrics if isinstance(m.get(key), int | float)]
    return round(sum(xs) / len(xs), 3) if xs else None


def role_groups(run: Any) -> list[int]:
    """The process groups of a launched run's roles, relay first (each role leads its own)."""
    return [run.server.process.pid, run.trainer.pid, *(p.pid for p in run.workers.values())]


def measure_role(config: str, overrides: list[str], workers: int, seconds: float, run_dir: Path,
                 start_timeout_s: float = 240.0, worker_priority: str = "below_normal",
                 pin_cores: bool = True, record_to: Path | None = None) -> dict[str, Any]:
    """Launch the run, time ``seconds`` of training after the first update, stop it. With
    ``record_to``, the run's journal (the segments its workers sent, as they sent them) is copied
    there before the stop: ``--feed``'s recorded set (bench.feed)."""
    from rulka.cli.run import launch

    log = open(run_dir.parent / f"{run_dir.name}.log", "w")  # noqa: SIM115 - closed below
    run = launch(REPO_ROOT / config, workers=workers, run_dir=run_dir, overrides=[*COMMON, *overrides],
                 trainer_output=log, worker_priority=worker_priority, pin_cores=pin_cores)
    worker_cores = getattr(run, "worker_cores", None)
    try:
        first = wait_for_training(run, run_dir, start_timeout_s)
        if first is None:
            return {"error": f"no update within {start_timeout_s:.0f} s (see {run_dir}.log)"}
        time.sleep(seconds)
        last = _records(run_dir)[-1]
        if record_to is not None:
            from bench.feed import copy_journal

            copy_journal(run_dir, record_to)
    finally:
        run.stop()
        log.close()
    m0, m1 = first["metrics"], last["metrics"]
    dt_s = float(last["wall_time"]) - float(first["wall_time"])
    updates = m1["charts/batches_trained"] - m0["charts/batches_trained"]
    inserts = m1["charts/samples_received"] - m0["charts/samples_received"]
    window = [r["metrics"] for r in _records(run_dir) if first["wall_time"] < r["wall_time"] <= last["wall_time"]]
    return {"seconds": round(dt_s, 1), "updates": int(updates), "transitions": int(inserts),
            "updates_per_s": round(updates / dt_s, 2) if dt_s > 0 else None,
            "spi_target": m1.get("perf/samples_per_insert_target"),
            "learner_busy": _mean_of(window, "perf/learner_busy"),
            "learner_starved": _mean_of(window, "perf/learner_starved"), "limiter_dropped": m1.get("perf/limiter_dropped"),
            "_inserts": inserts, "_updates": updates, "_worker_cores": worker_cores}


def _agent_from_run(run_dir: Path) -> tuple[Any, Any, Path]:
    """(config, agent with the run's final weights, checkpoint folder), torch threads as the trainer's."""
    import torch
    import yaml

    from rulka.config import config_from_dict
    from rulka.plugins import build_plugin
    from rulka.trainer import checkpoint_store as ckpt

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


class BareLearner:
    """``agent.train(memory.sample())`` on the run's final checkpoint (weights and replay), with the
    trainer's torch threads and allocator settings, warmed up by three updates."""

    def __init__(self, run_dir: Path) -> None:
        from rulka.plugins import build_plugin
        from rulka.trainer.allocator import keep_freed_memory

        keep_freed_memory()  # as rulka-trainer does

        cfg, self.agent, folder = _agent_from_run(run_dir)
        self.memory = build_plugin("memory", str(cfg.trainer.memory), cfg.trainer.memory_kwargs, cfg)
        self.memory.load(folder / "replay")
        self.batch_size = int(self.agent.batch_size or cfg.training.batch_size)
        for _ in range(3):
            self.agent.train(self.memory.sample(self.batch_size))

    def updates_per_s(self, seconds: float) -> float:
        from bench.learner import train_for

        n, elapsed = train_for(self.agent, self.memory, self.batch_size, seconds)
        return round(n / elapsed, 2)


def alone(run_dir: Path, seconds: float) -> dict[str, Any]:
    """The bare learner alone for ``seconds`` in this process."""
    import torch

    bare = BareLearner(run_dir)
    return {"updates_per_s": bare.updates_per_s(seconds), "torch_threads": torch.get_num_threads(),
            "memory_size": len(bare.memory), "batch_size": bare.batch_size}


def alone_serve(run_dir: Path) -> None:
    """The bare learner kept ready: each stdin line ``S`` times it for S seconds and prints
    ``{"updates_per_s": ...}``; EOF ends it. ``paired_windows`` asks it while the run is paused."""
    bare = BareLearner(run_dir)
    print(json.dumps({"ready": True, "batch_size": bare.batch_size, "memory_size": len(bare.memory)}), flush=True)
    for line in sys.stdin:
        print(json.dumps({"updates_per_s": bare.updates_per_s(float(line))}), flush=True)


class BareLearnerProcess:
    """``alone_serve`` in a child process (on ``cores`` if given): ``ready`` holds its batch and
    memory size (None if it did not start), ``updates_per_s(S)`` times it for S seconds."""

    def __init__(self, run_dir: Path, cores: list[int] | None = None) -> None:
        self.proc = subprocess.Popen(child_command("bench.trainer_loop", "--alone-serve", str(run_dir)),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env())
        if cores:
            for tid in os.listdir(f"/proc/{self.proc.pid}/task"):  # before torch starts its threads
                os.sched_setaffinity(int(tid), cores)
        line = self.proc.stdout.readline() if self.proc.stdout is not None else ""
        self.ready: dict[str, Any] | None = json.loads(line) if line.startswith("{") else None

    def updates_per_s(self, seconds: float) -> float | None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{seconds}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        return json.loads(line)["updates_per_s"] if line.startswith("{") else None

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _signal_groups(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass


def _window(run_dir: Path, seconds: float, timeout_s: float = 60.0) -> dict[str, Any] | None:
    """Updates/s, busy and starved between the first metrics record written from now on and the
    first one ``seconds`` later (records every ``logging.log_every_s``); None if none came."""
    def next_record(after: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            recs = [r for r in _records(run_dir) if float(r["wall_time"]) >= after]
            if recs:
                return recs[0]
            time.sleep(0.2)
        return None

    first = next_record(time.time())
    if first is None:
        return None
    time.sleep(seconds)
    last = next_record(float(first["wall_time"]) + seconds)
    if last is None:
        return None
    inside = [r["metrics"] for r in _records(run_dir) if first["wall_time"] < r["wall_time"] <= last["wall_time"]]
    dt_s = float(last["wall_time"]) - float(first["wall_time"])
    updates = last["metrics"]["charts/batches_trained"] - first["metrics"]["charts/batches_trained"]
    return {"updates_per_s": round(updates / dt_s, 2) if dt_s > 0 else None, "seconds": round(dt_s, 1),
            "learner_busy": _mean_of(inside, "perf/learner_busy"),
            "learner_starved": _mean_of(inside, "perf/learner_starved"),
            # what came in: transitions stored/s, MB/s received, segments held back by the rate limiter
            "ingest_samples_per_s": _mean_of(inside, "perf/samples_per_s"),
            "ingest_mb_per_s": _mean_of(inside, "perf/ingest_mb_per_s"),
            "deferred_segments": _mean_of(inside, "perf/deferred_segments")}


def _median(xs: list[Any]) -> float | None:
    """The median of the figures measured (None where a window failed); None if there is none."""
    got = [x for x in xs if isinstance(x, int | float)]
    return round(statistics.median(got), 3) if got else None


def pair_ratios(role: list[float | None], alone: list[float | None],
                loaded: list[float | None]) -> tuple[list[float | None], list[float | None]]:
    """Trainer window k over the mean of the bare learner's windows k (just before) and k+1 (just
    after), and over the loaded window k (just after); None where a figure is missing."""
    ratios: list[float | None] = []
    vs_loaded: list[float | None] = []
    for k, r in enumerate(role):
        base = [x for x in alone[k:k + 2] if x]
        ratios.append(round(r / (sum(base) / len(base)), 3) if r and base else None)
        lo = loaded[k] if k < len(loaded) else None
        vs_loaded.append(round(r / lo, 3) if r and lo else None)
    return ratios, vs_loaded


def feed_rate(spec: str, bare_updates_per_s: float, batch: int, spi_target: float | None) -> float:
    """The feed's transitions/s from ``--feed``: ``N`` as given, or ``Kx``: K times what the bare
    learner (``bare_updates_per_s``) consumes at the run's samples-per-insert target."""
    if spec.endswith("x"):
        return float(spec[:-1]) * bare_updates_per_s * batch / float(spi_target or 1.0)
    return float(spec)


def _run_torch_threads(run_dir: Path) -> int:
    """The trainer's torch threads in the run's resolved config (what ``rulka run`` gave it beside
    its workers): a run resumed without workers would otherwise take every core, the feeders' too."""
    import yaml

    cfg = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())
    return int(cfg["trainer"]["torch_threads"] or 1)


def _start_feed(run: Any, args: argparse.Namespace, recorded_dir: Path, rate: float,
                cores: list[int] | None, priority: str) -> Any:
    """``--feeders`` synthetic workers (bench.feed), enrolled in the run's keys, fed ``rate``
    transitions/s from ``recorded_dir``, below normal priority and on ``cores`` like the workers."""
    from bench.feed import FeederProcesses, enroll

    names = enroll(run.keys, args.feeders)
    feed = FeederProcesses(run.keys, names, "127.0.0.1", run.port, recorded_dir, rate, procs=args.feed_procs,
                           place=(cores, 10 if priority == "below_normal" else 0))
    feed.start(time.time() + 36_000)  # until results() stops it
    return feed


def _feed_summary(feed: Any, rate: float, recorded_dir: Path, role: list[dict[str, Any] | None]) -> dict[str, Any]:
    """The feed's set rate, its feeders' counters summed (their time held back by the trainer's
    credit included) and the trainer's ingest per window."""
    got = feed.results()
    total = {k: round(sum(f[k] for f in got), 2) for k in ("segments_queued", "transitions_queued", "acked",
                                                           "unacked", "resent", "credit_wait_s", "encode_s")}
    return {"rate_transitions_per_s": round(rate, 1), "feeders": len(got), "recorded": str(recorded_dir), **total,
            "ingest_samples_per_s": [w["ingest_samples_per_s"] if w else None for w in role],
            "ingest_mb_per_s": [w["ingest_mb_per_s"] if w else None for w in role],
            "deferred_segments": [w["deferred_segments"] if w else None for w in role]}


def paired_windows(config: str, overrides: list[str], workers: int, run_dir: Path, args: argparse.Namespace,
                   worker_priority: str, pin_cores: bool, worker_cores: list[int] | None,
                   spi_target: float | None = None, recorded_dir: Path | None = None) -> dict[str, Any]:
    """The trainer and the bare learner measured in turns seconds apart, not a minute apart: the
    run resumed from its checkpoint, then ``args.paired`` times: a window of the running trainer,
    the whole run paused (SIGSTOP to every role's process group), the bare learner on the same
    checkpoint (and, unless ``--no-loaded-baseline``, beside the actor load on the workers'
    cores), the run continued. Each trainer window is divided by the mean of the bare learner's
    windows just before and just after it (this machine's speed swings between seconds and
    drifts between minutes). Linux only (signals); the heartbeat is slowed to 5 s so that a pause of a
    few seconds does not read as a lost connection (links would reconnect and resend).

    With ``args.feed`` (``recorded_dir`` set) the run resumes with no worker: ``args.feeders``
    synthetic workers (bench.feed) feed it recorded segments through the relay at ``feed_rate``,
    set from a first window of the bare learner taken before the run resumes."""
    import signal

    bare = BareLearnerProcess(run_dir)
    load: list[subprocess.Popen] = []
    run = None
    feed: Any = None
    rate, first_alone, feed_out = 0.0, None, None
    role: list[dict[str, Any] | None] = []
    try:
        ready = bare.ready
        if ready is None:
            return {"error": "the bare learner did not start"}
        if not args.no_loaded_baseline:
            load = _start_load(run_dir, workers, worker_cores if pin_cores else None, 7200.0)
            for p in load:
                p.send_signal(signal.SIGSTOP)

        def alone_for(seconds: float, loaded: bool = False) -> float | None:
            for p in load if loaded else []:
                p.send_signal(signal.SIGCONT)
            rate = bare.updates_per_s(seconds)
            for p in load if loaded else []:
                p.send_signal(signal.SIGSTOP)
            return rate

        from rulka.cli.run import launch

        extra: list[str] = []
        if recorded_dir is not None:
            first_alone = bare.updates_per_s(args.alone_seconds)
            rate = feed_rate(args.feed, first_alone or 0.0, int(ready["batch_size"]), spi_target)
            extra = [f"trainer.torch_threads={_run_torch_threads(run_dir)}"]  # as with the workers, not all cores
        log = open(run_dir.parent / f"{run_dir.name}.paired.log", "w")  # noqa: SIM115 - closed with the run
        run = launch(REPO_ROOT / config, workers=0 if recorded_dir is not None else workers, run_dir=run_dir,
                     resume=True, trainer_output=log, overrides=[*COMMON, *overrides, *extra, "network.heartbeat_s=5"],
                     worker_priority=worker_priority, pin_cores=pin_cores)
        run.log_files.append(log)
        groups = role_groups(run)
        if recorded_dir is not None:
            feed = _start_feed(run, args, recorded_dir, rate, worker_cores if pin_cores else None, worker_priority)
            groups += feed.pids
        # learning again: a window of the resumed run with updates in it
        t_start = time.monotonic()
        while time.monotonic() - t_start < 240 and run.alive():
            w = _window(run_dir, 2.0)
            if w and w["updates_per_s"]:
                break
        else:
            return {"error": "the resumed run did not train"}
        time.sleep(args.settle_seconds)

        def paused(fn: Any, *a: Any) -> Any:
            _signal_groups(groups, signal.SIGSTOP)
            try:
                return fn(*a)
            finally:
                _signal_groups(groups[::-1], signal.SIGCONT)
                time.sleep(args.settle_seconds)

        alone = [paused(alone_for, args.alone_seconds)]
        loaded: list[float | None] = []
        for _ in range(args.paired):
            role.append(_window(run_dir, args.window_seconds))

            def both() -> tuple[float | None, float | None]:
                lo = alone_for(args.alone_seconds, loaded=True) if load else None
                return lo, alone_for(args.alone_seconds)

            lo, a = paused(both)
            loaded.append(lo)
            alone.append(a)
    finally:
        feed_out = _feed_summary(feed, rate, recorded_dir, role) if feed is not None and recorded_dir else None
        if feed is not None:
            feed.close()
        if run is not None:
            run.stop()
        for p in load:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()
        bare.close()
    role_rates = [w["updates_per_s"] if w else None for w in role]
    ratios, vs_loaded = pair_ratios(role_rates, alone, loaded)
    out: dict[str, Any] = {
        "windows": len(role), "window_seconds": args.window_seconds, "alone_seconds": args.alone_seconds,
        "role_updates_per_s": role_rates,
        "alone_updates_per_s": alone, "loaded_updates_per_s": loaded if load else None,
        "learner_busy": [w["learner_busy"] if w else None for w in role],
        "learner_starved": [w["learner_starved"] if w else None for w in role],
        "ratios": ratios, "ratio": _median(ratios), "batch_size": ready["batch_size"],
        "memory_size": ready["memory_size"]}
    if feed_out is not None:
        out["feed"] = {**feed_out, "set_from_bare_updates_per_s": first_alone}
        # what the trainer's time went to besides updates: waiting with nothing to train (starved),
        # and the rest (intake, checkpoints, metrics, the link)
        out["learner_other"] = [round(1 - w["learner_busy"] - w["learner_starved"], 3)
                                if w and w["learner_busy"] is not None and w["learner_starved"] is not None else None
                                for w in role]
    if load:
        out["ratios_vs_loaded"] = vs_loaded
        out["ratio_vs_loaded"] = _median(vs_loaded)
    return out


def _start_load(run_dir: Path, procs: int, cores: list[int] | None, seconds: float) -> list[subprocess.Popen]:
    """``procs`` actor-load processes, each started and past its setup (it printed ``ready``)."""
    load = []
    for _ in range(procs):
        cmd = child_command("bench.trainer_loop", "--actor-load", str(run_dir), "--alone-seconds", str(seconds))
        if cores:
            cmd += ["--load-cores", ",".join(map(str, cores))]
        load.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=child_env()))
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
            out = subprocess.run(child_command("bench.trainer_loop", "--alone", str(run_dir), "--alone-seconds", str(seconds)),
                                 capture_output=True, text=True, timeout=600, env=child_env())
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
    overrides = [*overrides, *([f"trainer.device={args.trainer_device}"] if args.trainer_device else [])]
    record_to = run_dir.parent / f"{run_dir.name}-recorded" if args.feed and not args.recorded else None
    role = measure_role(config, overrides, n, seconds, run_dir, worker_priority=priority, pin_cores=pin == "on",
                        record_to=record_to)
    row: dict[str, Any] = {"config": name, "workers": n, "worker_priority": priority,
                           "pinned": pin == "on", "trainer": role}
    if "error" in role:
        return row
    inserts, updates = role.pop("_inserts"), role.pop("_updates")
    worker_cores = role.pop("_worker_cores", None)
    if args.paired:
        return _paired_row(row, config, overrides, n, priority, pin, args, run_dir, worker_cores, inserts, updates,
                           record_to)
    row["alone"] = alone_median(run_dir, args.alone_seconds, args.alone_rounds)
    a = row["alone"].get("updates_per_s")
    if a and role["updates_per_s"] is not None:
        row["ratio"] = round(role["updates_per_s"] / a, 3)
    if not args.no_loaded_baseline:
        # the load sits where the run put its workers (pinned) or anywhere (not pinned)
        row["alone_loaded"] = alone_median(run_dir, args.alone_seconds, args.alone_rounds, load_procs=n,
                                           load_cores=worker_cores if pin == "on" else None)
        al = row["alone_loaded"].get("updates_per_s")
        if al and role["updates_per_s"] is not None:
            row["ratio_vs_loaded"] = round(role["updates_per_s"] / al, 3)
    return _finish_row(row, updates, inserts, int(row["alone"].get("batch_size", 64)), role.get("learner_starved"))


def _paired_row(row: dict[str, Any], config: str, overrides: list[str], n: int, priority: str, pin: str,
                args: argparse.Namespace, run_dir: Path, worker_cores: list[int] | None, inserts: int,
                updates: int, recorded: Path | None = None) -> dict[str, Any]:
    """``measure_row`` with ``--paired``: the continuous window gives samples per insert, busy and
    starved; the ratio comes from ``paired_windows``."""
    recorded_dir = None
    if args.feed:
        from bench.feed import cached_recording, recorded_payloads

        recorded_dir = Path(args.recorded) if args.recorded else recorded
        if recorded_dir is None or len(recorded_payloads(recorded_dir, 8)) < 8:
            recorded_dir = cached_recording(row["config"])  # the run's own journal held too few
    pw = paired_windows(config, overrides, n, run_dir, args, priority, pin == "on", worker_cores,
                        spi_target=row["trainer"].get("spi_target"), recorded_dir=recorded_dir)
    row["paired"] = pw
    if "error" in pw:
        return row
    row["ratio"], row["ratio_pairs"] = pw["ratio"], pw["ratios"]
    row["alone"] = {"updates_per_s": _median(pw["alone_updates_per_s"]),
                    "updates_per_s_rounds": pw["alone_updates_per_s"]}
    if pw.get("loaded_updates_per_s"):
        row["alone_loaded"] = {"updates_per_s": _median(pw["loaded_updates_per_s"]),
                               "updates_per_s_rounds": pw["loaded_updates_per_s"]}
        row["ratio_vs_loaded"], row["ratio_vs_loaded_pairs"] = pw["ratio_vs_loaded"], pw["ratios_vs_loaded"]
    row["trainer"]["updates_per_s_paired"] = _median(pw["role_updates_per_s"])
    return _finish_row(row, updates, inserts, int(pw["batch_size"]), _median(pw["learner_starved"]))


def _finish_row(row: dict[str, Any], updates: int, inserts: int, batch: int, starved: float | None) -> dict[str, Any]:
    """Samples per insert over the continuous window (against its target) and the ratio over the
    time the learner had data."""
    if row.get("ratio") is not None and starved is not None and starved < 1:
        row["ratio_when_fed"] = round(row["ratio"] / (1 - starved), 3)
    spi_target = row["trainer"].get("spi_target")
    if inserts and spi_target:
        row["spi"] = round(updates * batch / inserts, 2)
        row["spi_vs_target"] = round(row["spi"] / spi_target, 3)
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


def print_results(bench: str, results: list[dict[str, Any]]) -> None:
    """The script's one JSON line: its rows, the machine and the date (``bench/colocation.py`` too)."""
    print(json.dumps({"bench": bench, "results": results,
                      "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
                      "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="cartpole, 2 workers, 30 s")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ", ".join(CONFIGS))
    parser.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")
    parser.add_argument("--seconds", type=float, default=20.0, help="timed window of each run")
    parser.add_argument("--alone-seconds", type=float, default=None,
                        help="each round of the bare learner (default 3 with --paired, else 6)")
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
    parser.add_argument("--paired", type=int, default=9, metavar="K",
                        help="K trainer windows, each between two windows of the bare learner taken with the run "
                             "paused (the ratio: the median of the K); 0: the bare learner only after the run, in "
                             "--alone-rounds fresh processes")
    parser.add_argument("--window-seconds", type=float, default=4.0, help="each trainer window with --paired")
    parser.add_argument("--settle-seconds", type=float, default=2.0,
                        help="wait after the run continues before the next trainer window (--paired)")
    parser.add_argument("--feed", default="",
                        help="with --paired: resume the run with no worker, fed recorded segments through the relay by "
                             "--feeders synthetic workers (bench.feed) at N transitions/s, or Kx: K times what the bare "
                             "learner consumes at the samples-per-insert target (e.g. 1.5x)")
    parser.add_argument("--feeders", type=int, default=4, help="synthetic workers of --feed")
    parser.add_argument("--feed-procs", type=int, default=1, help="processes the feeders are spread over")
    parser.add_argument("--recorded", default="",
                        help="the recorded set for --feed (bench.feed --record); default: the first phase's own "
                             "journal (its workers' segments), else one recorded per config in ~/.cache/rulka")
    parser.add_argument("--trainer-device", default="", help="trainer.device of the runs (e.g. cuda)")
    parser.add_argument("--no-loaded-baseline", action="store_true",
                        help="skip alone_loaded (the bare learner beside the workers' inference load)")
    parser.add_argument("--alone", type=Path, default=None, help=argparse.SUPPRESS)  # internal: one run folder
    parser.add_argument("--alone-serve", type=Path, default=None, help=argparse.SUPPRESS)  # internal
    parser.add_argument("--actor-load", type=Path, default=None, help=argparse.SUPPRESS)  # internal: one load process
    parser.add_argument("--load-cores", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.alone_seconds is None:
        args.alone_seconds = 3.0 if args.paired else 6.0
    if args.alone is not None:
        print(json.dumps(alone(args.alone, args.alone_seconds)))
        return 0
    if args.alone_serve is not None:
        alone_serve(args.alone_serve)
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
    print_results("trainer_loop", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
