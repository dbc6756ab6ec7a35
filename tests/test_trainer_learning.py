"""Learning through the roles: the built-in DQN learns CartPole in one-process mode (the same
trainer, worker, segments, acks and signed weights as a distributed run)."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_simple_dqn_learns_cartpole_through_the_roles():
    from rulka.agents.simple import SimpleDQNAgent
    from rulka.config import load_config
    from rulka.local import run_local

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = load_config(ROOT / "configs" / "cartpole_simple.yaml",
                      ["logging.wandb.enabled=false", "trainer.agent_kwargs.seed=0"], env_file=None)
    agent = SimpleDQNAgent(**cfg.trainer.agent_kwargs)
    # pace the worker so the trainer can hold the configured replay ratio on a small machine
    result = run_local(cfg, n_workers=1, agent=agent, max_updates=12000, max_seconds=240,
                       worker_kwargs={"max_steps_per_s": 400})
    assert not result.worker_errors
    assert result.trainer["updates"] >= 4000
    assert result.workers["local-0"].weights_version >= 10

    actor = agent.get_actor()
    env = gymnasium.make("CartPole-v1")
    returns = []
    for episode in range(10):
        obs, _ = env.reset(seed=1000 + episode)
        done, total = False, 0.0
        while not done:
            obs, r, term, trunc, _ = env.step(actor.act(obs, test=True))
            total += r
            done = term or trunc
        returns.append(total)
    # random play averages about 22 and always pushing one way about 9; measured here: 97 after
    # 12,000 updates (2 cores shared with other jobs), 73.5 in one CI run on an idle machine
    # (2026-11-27: the paced worker and the trainer's threads make each run differ): 60 is well
    # clear of both baselines without failing on such a run
    assert np.mean(returns) >= 60, returns
