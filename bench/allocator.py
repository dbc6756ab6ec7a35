"""Benchmark: the IQN learner's updates/s and page faults per update with glibc's default malloc
thresholds and with ``rulka.trainer.allocator.keep_freed_memory`` (what rulka-trainer sets).

Each round runs the bare learner (``agent.train(memory.sample())``, one torch thread, a
``MiniRaceReplayMemory`` of synthetic segments as in ``bench/learner.py``) in two fresh processes
one after the other, default then kept, for each network and batch size; ``speedup`` is the median
over rounds of kept / default updates/s measured in the same round (seconds apart: this shared
machine drifts between minutes). Linux with glibc only.

    python -m bench.allocator [--rounds 3] [--seconds 6]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys

from bench import child_command, child_env

# (bench/learner.py network, batch size): the sim image config's learner and the Linesight-size one
CASES = [("default_48x36_dense256", 64), ("default_48x36_dense256", 512), ("linesight_160x120_dense1024", 64)]


def child(network: str, batch_size: int, seconds: float, kept: bool) -> dict:
    import torch

    from rulka.trainer.allocator import keep_freed_memory

    applied = keep_freed_memory() if kept else False
    torch.set_num_threads(1)
    from bench.learner import NETWORKS, build_agent, filled_memory, train_for

    agent = build_agent(NETWORKS[network], "cpu")
    mem = filled_memory(agent.spec.image_height, agent.spec.image_width, batch_size)
    for _ in range(3):
        agent.train(mem.sample(batch_size))
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    n, elapsed = train_for(agent, mem, batch_size, seconds, min_updates=3)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    return {"updates_per_s": round(n / elapsed, 2), "page_faults_per_update": round(faults / n, 1),
            "kept": applied}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0, help="timed training per process")
    parser.add_argument("--child", nargs=4, metavar=("NETWORK", "BATCH", "SECONDS", "KEPT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        net, batch, seconds, kept = args.child
        print(json.dumps(child(net, int(batch), float(seconds), kept == "1")))
        return 0
    results = []
    for network, batch in CASES:
        rounds = []
        for _ in range(args.rounds):
            pair = {}
            for kept in ("0", "1"):
                out = subprocess.run(child_command("bench.allocator", "--child", network, str(batch), str(args.seconds),
                                                   kept), capture_output=True, text=True, timeout=900, env=child_env())
                lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
                pair["kept" if kept == "1" else "default"] = json.loads(lines[-1]) if lines else {"error": out.stderr[-300:]}
            rounds.append(pair)
        ratios = [r["kept"]["updates_per_s"] / r["default"]["updates_per_s"] for r in rounds
                  if "updates_per_s" in r["kept"] and "updates_per_s" in r["default"]]
        row = {"network": network, "batch_size": batch, "rounds": rounds,
               "speedup": round(statistics.median(ratios), 3) if ratios else None,
               "speedup_rounds": [round(x, 3) for x in ratios]}
        print(json.dumps(row), file=sys.stderr, flush=True)
        results.append(row)
    print(json.dumps({"bench": "allocator", "results": results, "torch_threads": 1,
                      "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
                      "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
