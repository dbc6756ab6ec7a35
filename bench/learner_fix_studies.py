"""Seed studies of the learner fixes of issue 31 on CartPole-v1 (deterministic, frame-budgeted).

``grpo``: ``grpo.grpo_objective`` reinforce vs clipped, with the workers' weights ``--lag``
updates behind the learner (a distributed run publishes after each update, and rollouts arrive
from weights a version or more old; lag 0 is the one-machine case). One collector process runs
the config's 8-episodes-per-start groups through the real actor -> Segment -> GroupMemory ->
GRPOAgent path (``tests/policy_helpers.SegmentCollector``); every 5 updates the greedy policy
plays 10 fixed-seed episodes. Reported per seed: the env steps at which the greedy average first
reached 475 (or None within ``--frames``) and the best greedy average.

    nice python bench/learner_fix_studies.py grpo --seeds 0 1 2 --frames 40000 --lag 1

(the NoisyNet and DPO studies use ``bench/recipe.py`` and ``rulka run``: see the report in
``bench/history/learner_fix_studies.json``.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the collector and greedy evaluation the tests use


def grpo_run(objective: str, seed: int, frames_cap: int, lag: int, target: float = 475.0) -> dict:
    import gymnasium as gym
    import torch
    from policy_helpers import SegmentCollector, greedy_return

    from rulka.agents.policy.settings import make_agent, make_memory
    from rulka.config import load_config

    torch.set_num_threads(1)
    cfg = load_config(REPO / "configs" / "cartpole_grpo.yaml", [f"grpo.grpo_objective={objective}"])
    agent, memory = make_agent(cfg, device="cpu", seed=seed), make_memory(cfg)
    collector = SegmentCollector(gym.make(cfg.environment.gym_id), "w0", seed=1000 + seed,
                                 segment_max_steps=cfg.worker.segment_max_steps,
                                 rollouts_per_start=cfg.worker.rollouts_per_start)
    eval_env = gym.make(cfg.environment.gym_id)
    version, actor, actor_version = 1, agent.get_actor(), 1
    published = {1: agent.actor_weights()}  # version -> weights, as the trainer publishes them
    frames, best, reached, history = 0, 0.0, None, []
    memory.set_policy_version(version)
    while frames < frames_cap:
        while not memory.ready():
            seg = collector.collect(actor, actor_version)
            frames += seg.num_transitions
            memory.append(seg)
        agent.train(memory.take())
        version += 1
        memory.set_policy_version(version)
        published[version] = agent.actor_weights()
        # the workers act with the weights published `lag` updates ago
        actor_version = max(1, version - lag)
        actor.load_weights(published[actor_version])
        published = {v: w for v, w in published.items() if v >= actor_version}
        if agent.updates % 5 == 0:
            score = greedy_return(eval_env, agent.get_actor(), 10, seed=10_000)
            history.append([frames, round(score, 1)])
            best = max(best, score)
            if score >= target:
                reached = frames
                break
    return {"objective": objective, "seed": seed, "lag": lag, "reached_475_env_steps": reached,
            "best_greedy": round(best, 1), "env_steps": frames, "updates": agent.updates, "history": history}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("study", choices=["grpo"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--frames", type=int, default=40_000)
    p.add_argument("--lag", type=int, default=1)
    p.add_argument("--objectives", nargs="+", default=["reinforce", "clipped"])
    args = p.parse_args()
    t0 = time.time()
    rows = [grpo_run(o, s, args.frames, args.lag) for o in args.objectives for s in args.seeds]
    print(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "study": args.study,
                      "frames_cap": args.frames, "lag": args.lag, "seconds": round(time.time() - t0),
                      "command": "python bench/learner_fix_studies.py " + " ".join(sys.argv[1:]), "runs": rows}))


if __name__ == "__main__":
    main()
