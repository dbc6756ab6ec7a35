"""Benchmark: IQN actor decisions per second at batch 1 on one core (what bounds a worker on a fast env).

For each network a worker runs (configs/cartpole_iqn.yaml's, the CPU default sim run's 184-float
one, and the sim's 48x36 image one), ``IQNActor.act_with_info`` exploring (sampled taus) and
greedy (``test=True``), through the numpy path a float-only network takes on CPU and through
torch (``numpy_inference=False``) in the same run. Rounds alternate between the two paths and the
median is kept. Prints one JSON object.

    python -m bench.actor [--quick] [--seconds 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from rulka.agents.iqn import IQNActor, IQNNetworkSpec  # noqa: E402

NETWORKS: dict[str, dict[str, Any]] = {
    "cartpole": dict(float_dim=4, n_actions=2, float_hidden_dim=128, dense_hidden_dimension=256),
    "sim_float184": dict(float_dim=184, n_actions=12, float_hidden_dim=128, dense_hidden_dimension=256),
    "sim_image48x36": dict(float_dim=184, n_actions=12, float_hidden_dim=128, dense_hidden_dimension=256,
                           image_height=36, image_width=48),
}


def rate(actor: IQNActor, obs: Any, test: bool, seconds: float) -> float:
    for _ in range(20):
        actor.act_with_info(obs, test)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(50):
            actor.act_with_info(obs, test)
        n += 50
    return n / (time.perf_counter() - t0)


def measure(name: str, net: dict[str, Any], seconds: float, rounds: int) -> dict[str, Any]:
    spec = dataclasses.asdict(IQNNetworkSpec(embedding_dimension=64, **net))
    rng = np.random.default_rng(0)
    flt = rng.standard_normal(net["float_dim"]).astype(np.float32)
    obs: Any = flt
    if net.get("image_height"):
        obs = {"img": rng.integers(0, 255, (1, net["image_height"], net["image_width"]), dtype=np.uint8), "float": flt}
    actors = {"numpy": IQNActor(spec, iqn_k=32, epsilon=0.05, seed=0),
              "torch": IQNActor(spec, iqn_k=32, epsilon=0.05, seed=0, numpy_inference=False)}
    actors["torch"].load_weights(actors["numpy"].get_weights())
    row: dict[str, Any] = {"network": name, "numpy_path": actors["numpy"].uses_numpy}
    for mode, test in (("exploring", False), ("greedy", True)):
        rounds_of: dict[str, list[float]] = {"numpy": [], "torch": []}
        for _ in range(rounds):
            for path, actor in actors.items():
                rounds_of[path].append(rate(actor, obs, test, seconds))
        med = {p: float(np.median(v)) for p, v in rounds_of.items()}
        row[mode] = {"numpy_acts_per_s": round(med["numpy"]), "torch_acts_per_s": round(med["torch"]),
                     "speedup": round(med["numpy"] / med["torch"], 2)}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="0.5 s rounds, 1 round")
    parser.add_argument("--seconds", type=float, default=2.0, help="each timed round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per path (median)")
    args = parser.parse_args()
    seconds, rounds = (0.5, 1) if args.quick else (args.seconds, args.rounds)
    torch.set_num_threads(1)
    results = [measure(name, net, seconds, rounds) for name, net in NETWORKS.items()]
    print(json.dumps({"bench": "actor", "k": 32, "torch_threads": 1, "results": results,
                      "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
                      "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}))


if __name__ == "__main__":
    main()
