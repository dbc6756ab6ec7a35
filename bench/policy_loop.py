"""The on-policy learners' loop without the network, shared by ``bench/policy_cartpole.py`` and the
learning tests: a collector that runs an env with an actor and cuts segments exactly as a worker
does (extras recorded per step, version in the header), and a greedy evaluation."""

from __future__ import annotations

from typing import Any

import numpy as np

from rulka.segment import Segment


def greedy_return(env: Any, actor: Any, episodes: int, seed: int) -> float:
    """The mean return of ``episodes`` greedy episodes (``act(obs, test=True)``) from seeds ``seed``, ``seed + 1``, ..."""
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done, total = False, 0.0
        while not done:
            obs, r, te, tr, _ = env.step(actor.act(obs, test=True))
            total += r
            done = te or tr
        returns.append(total)
    return float(np.mean(returns))


class SegmentCollector:
    """One env driven by an actor; ``collect(actor, version)`` returns the next segment (at most
    ``segment_max_steps`` steps, shorter when the episode ends). Episodes carry across calls."""

    def __init__(self, env: Any, name: str, seed: int, segment_max_steps: int = 128,
                 rollouts_per_start: int = 1) -> None:
        self.env, self.name, self.seed = env, name, seed
        self.segment_max_steps = segment_max_steps
        self.rollouts_per_start = rollouts_per_start
        self.episode = -1
        self.seq = 0
        self.obs = None
        self.index = 0
        self.step = 0
        self.ret = 0.0
        self.returns: list[float] = []
        self.start_id = seed
        self._left = 0

    def _reset(self) -> None:
        self.episode += 1
        if self.rollouts_per_start > 1:
            if self._left == 0:
                self.start_id = self.seed * 100_003 + self.episode
                self._left = self.rollouts_per_start
            self._left -= 1
            self.obs, _ = self.env.reset(seed=self.start_id)
        else:
            self.obs, _ = self.env.reset(seed=self.seed * 100_003 + self.episode)
        self.index = self.step = 0
        self.ret = 0.0

    def collect(self, actor: Any, version: int) -> Segment:
        if self.obs is None:
            self._reset()
        observations, actions, rewards, terms, truncs, logps, values = [self.obs], [], [], [], [], [], []
        done = False
        info: dict[str, Any] = {}
        first_step = self.step
        while not done and len(actions) < self.segment_max_steps:
            action, extra = actor.act_with_info(self.obs)
            self.obs, r, te, tr, _ = self.env.step(action)
            observations.append(self.obs)
            actions.append(action)
            rewards.append(r)
            terms.append(te)
            truncs.append(tr)
            logps.append(extra["logprob"])
            values.append(extra["value"])
            self.ret += float(r)
            self.step += 1
            done = bool(te or tr)
        if done:
            info = {"episode_return": self.ret, "episode_length": self.step}
            if self.rollouts_per_start > 1:
                info["start_id"] = int(self.start_id)
            self.returns.append(self.ret)
        arrays = {"obs/x": np.asarray(observations, np.float32), "action": np.asarray(actions, np.int64),
                  "reward": np.asarray(rewards, np.float32), "terminated": np.asarray(terms, bool),
                  "truncated": np.asarray(truncs, bool), "extra/logprob": np.asarray(logps, np.float32),
                  "extra/value": np.asarray(values, np.float32)}
        seg = Segment(run_id="test", worker_id=self.name, episode_id=self.episode, seq=self.seq,
                      index_in_episode=self.index, first_step=first_step, policy_version=version,
                      arrays=arrays, episode_done=done, info=info)
        self.seq += 1
        self.index += 1
        if done:
            self.obs = None
        return seg


def train_on_policy(cfg: Any, *, n_envs: int, max_frames: int, target: float, eval_every: int,
                    eval_episodes: int = 10, rollouts_per_start: int = 1, eval_from: float = 0.0,
                    log: bool = True, stats: dict[str, Any] | None = None) -> tuple[float, int, Any]:
    """Train the config's policy learner through actor -> Segment -> memory -> agent with
    ``n_envs`` collectors (as many workers); every ``eval_every`` updates, once the recent sampled
    returns average ``eval_from``, the greedy policy plays ``eval_episodes`` (fixed seeds).
    Returns (best greedy average, frames, agent); ``stats`` (if given) receives
    ``sampled_475_frames``: the frames when the last 10 sampled episodes first averaged 475."""
    import gymnasium as gym

    from rulka.agents.policy.settings import make_agent, make_memory

    agent = make_agent(cfg, device="cpu", seed=0)
    memory = make_memory(cfg)
    envs = [SegmentCollector(gym.make(cfg.environment.gym_id), f"w{i}", seed=i,
                             segment_max_steps=cfg.worker.segment_max_steps,
                             rollouts_per_start=rollouts_per_start) for i in range(n_envs)]
    eval_env = gym.make(cfg.environment.gym_id)
    actor, version, best, frames = agent.get_actor(), 1, 0.0, 0
    finished: list[float] = []
    memory.set_policy_version(version)
    while frames < max_frames:
        while not memory.ready():
            for c in envs:
                seg = c.collect(actor, version)
                frames += seg.num_transitions
                if seg.episode_done:
                    finished.append(float(seg.info["episode_return"]))
                    if (stats is not None and "sampled_475_frames" not in stats and len(finished) >= 10
                            and np.mean(finished[-10:]) >= 475):
                        stats["sampled_475_frames"] = frames
                memory.append(seg)
        agent.train(memory.take())
        version += 1
        memory.set_policy_version(version)
        actor = agent.get_actor()
        recent = np.mean([r for c in envs for r in c.returns[-5:]] or [0.0])
        if agent.updates % eval_every == 0 and recent >= eval_from:
            score = greedy_return(eval_env, actor, eval_episodes, seed=10_000)
            best = max(best, score)
            if log:
                print(f"update {agent.updates} frames {frames} sampled {recent:.0f} greedy {score:.0f}", flush=True)
            if best >= target:
                break
    return best, frames, agent
