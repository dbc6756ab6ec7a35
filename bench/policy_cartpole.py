"""PPO, GRPO and DPO on CartPole-v1 through the real actor -> segment -> memory -> learner path:
env steps and wall-clock seconds until the greedy policy averages 475 over 10 fixed-seed episodes
(PPO, GRPO) or the best greedy average reached (DPO), one torch thread.

A peer's figures measured by hand on the same machine (CleanRL's ppo.py, which rulka does not ship
or run) are read from ``--peer-json`` (default ``bench/history/peer_cleanrl_cartpole.json``, which says how
they were taken) and reported beside rulka's under ``peer``. Also reported: the env steps at which
rulka's sampled episodes first average 475 over 10 (the figure CleanRL prints).

    python -m bench.policy_cartpole [--quick] [--peer-json FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(algorithm: str, max_frames: int, target: float) -> dict:
    import torch

    from bench.policy_loop import train_on_policy
    from rulka.config import load_config

    torch.set_num_threads(1)
    cfg = load_config(REPO / "configs" / f"cartpole_{algorithm}.yaml")
    n_envs = {"ppo": 4, "grpo": 1, "dpo": 2}[algorithm]
    t0 = time.perf_counter()
    stats: dict = {}
    best, frames, agent = train_on_policy(cfg, n_envs=n_envs, max_frames=max_frames, target=target, eval_every=5,
                                          rollouts_per_start=cfg.worker.rollouts_per_start, eval_from=100, log=False,
                                          stats=stats)
    seconds = time.perf_counter() - t0
    return {"config": f"configs/cartpole_{algorithm}.yaml", "workers_simulated": n_envs, "target": target,
            "reached": best >= target, "best_greedy": round(best, 1), "env_steps": frames,
            "seconds": round(seconds, 1), "env_steps_per_s": round(frames / seconds, 1), "updates": agent.updates,
            "sampled_mean10_475_env_steps": stats.get("sampled_475_frames")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="PPO only, capped at 60k env steps")
    parser.add_argument("--peer-json", type=Path, default=Path(__file__).parent / "history" / "peer_cleanrl_cartpole.json")
    args = parser.parse_args()
    out: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    out["ppo"] = run("ppo", 60_000 if args.quick else 400_000, 475)
    if not args.quick:
        out["grpo"] = run("grpo", 300_000, 475)
        out["dpo"] = run("dpo", 100_000, 475)
    if args.peer_json is not None and args.peer_json.exists():
        out["peer"] = json.loads(args.peer_json.read_text())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
