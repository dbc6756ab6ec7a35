"""The simulator recipes of the trajectory-scored learners (GRPO's R_i, DPO's pair ranking: a
race's summed shaped reward, no value bootstrap) must rank races the way a driver would.

Pinned cause (sim GRPO, 2026-11-24): with PPO's time penalty (-0.0002/ms) a race that stands
still until the 2 s no-progress cut-off scored -0.33, above the average random start (-0.52), and
GRPO learned to stand still (1,000 updates at -0.44). And with a rollout discount below 1 the
potential shaping no longer telescopes in an undiscounted sum: each step paid -(1 - gamma) * phi,
so long races scored more than finished ones.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rulka.agents.policy.rollout import build_rollout
from rulka.agents.policy.settings import rollout_gamma_knots
from rulka.config import load_config
from rulka.plugins import POTENTIAL_KEY, make_env, obs_to_arrays
from rulka.segment import Segment

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
GAS, NOTHING = 0, 3  # the 12 TrackMania actions: 0 = forward, 3 = no input


def _race(env, pick, gamma: float, seed: int = 0):
    obs, info = env.reset(seed=seed)
    frames, actions, rewards, term, trunc = [obs_to_arrays(obs, info)], [], [], [], []
    done = False
    while not done:
        action = pick()
        obs, reward, te, tr, info = env.step(action)
        frames.append(obs_to_arrays(obs, info))
        actions.append(action), rewards.append(reward), term.append(te), trunc.append(tr)
        done = te or tr
    arrays = {k: np.stack([f[k] for f in frames]) for k in frames[0]}
    arrays.update(action=np.array(actions, np.int64), reward=np.array(rewards, np.float32),
                  terminated=np.array(term), truncated=np.array(trunc))
    seg = Segment(run_id="r", worker_id="w", episode_id=0, seq=0, index_in_episode=0, first_step=0,
                  policy_version=0, arrays=arrays, episode_done=True)
    return build_rollout([seg], gamma, min_steps=1), arrays


@pytest.mark.parametrize("config", ["sim_grpo.yaml", "sim_dpo.yaml"])
def test_standing_still_scores_below_a_random_start_and_shaping_telescopes(config):
    cfg = load_config(CONFIGS / config)
    assert cfg.environment.backend == "sim"
    gamma = float(rollout_gamma_knots(cfg)[0][1])
    env = make_env(cfg)
    rng = np.random.default_rng(0)
    still, _ = _race(env, lambda: NOTHING, gamma)
    gas, gas_arrays = _race(env, lambda: GAS, gamma)
    starts = [_race(env, lambda: int(rng.integers(12)), gamma)[0].score for _ in range(8)]
    assert still.score < float(np.mean(starts)) < gas.score, (still.score, starts, gas.score)
    # the shaping adds phi(last) - phi(first) to a race's sum, however long the race
    pot = gas_arrays[POTENTIAL_KEY].astype(np.float64)
    last = 0.0 if gas_arrays["terminated"][-1] else pot[-1]
    raw = float(np.sum(gas_arrays["reward"], dtype=np.float64))
    assert gas.score - raw == pytest.approx(last - pot[0], abs=1e-3)
