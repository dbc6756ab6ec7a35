"""From a rulka run config to SAC's network spec, learner settings and replay arguments; the
plugin factories the registry names ``"sac"`` (``make_agent``, ``make_memory``)."""

from __future__ import annotations

from typing import Any

from rulka.agents.sac.agent import SACAgent, SacHyper
from rulka.agents.sac.network import SacNetworkSpec
from rulka.errors import UserError
from rulka.memory.uniform import UniformReplayMemory


def _sac(cfg: Any) -> Any:
    if cfg is None:
        raise ValueError("the sac plugins need the run config")
    return cfg.sac


def network_spec_from_config(cfg: Any) -> SacNetworkSpec:
    """Observation and action layout of the configured env, plus ``sac.hidden_*``/``log_std_*``.

    gym backend: the env's ``Box`` observation (``obs/x``) and ``Box`` actions. Simulator and
    TrackMania backends: the float observation (``obs/float``, normalised as IQN does) and the
    analog ``(gas, brake, steer)`` actions; they need ``environment.continuous_actions: true``
    and ``nn.vis.no_image: true`` (SAC here reads floats only).
    """
    s = _sac(cfg)
    env = cfg.environment
    common = dict(hidden_dim=int(s.hidden_dim), hidden_layers=int(s.hidden_layers),
                  log_std_min=float(s.log_std_min), log_std_max=float(s.log_std_max))
    if env.backend == "gym":
        import gymnasium
        import numpy as np

        made = gymnasium.make(env.gym_id, **dict(env.gym_kwargs or {}))
        try:
            obs_space, act_space = made.observation_space, made.action_space
        finally:
            made.close()
        if not isinstance(act_space, gymnasium.spaces.Box) or not isinstance(obs_space, gymnasium.spaces.Box):
            raise UserError(f"SAC needs Box observations and Box actions; {env.gym_id} has "
                            f"{type(obs_space).__name__} observations and {type(act_space).__name__} actions")
        low, high = np.asarray(act_space.low, float).reshape(-1), np.asarray(act_space.high, float).reshape(-1)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise UserError(f"SAC squashes actions into bounds; {env.gym_id}'s action space is unbounded")
        return SacNetworkSpec(obs_key="x", obs_dim=int(np.prod(obs_space.shape)), action_low=tuple(low.tolist()),
                              action_high=tuple(high.tolist()), **common)
    if not env.continuous_actions:
        raise UserError("SAC needs analog actions: set `environment.continuous_actions: true`")
    if not cfg.nn.vis.no_image:
        raise UserError("SAC reads the float observation only: set `nn.vis.no_image: true`")
    from rulka.agents.iqn.settings import pipeline_normalization
    from rulka.envs.actions import CONTINUOUS_HIGH, CONTINUOUS_LOW

    mean, std = pipeline_normalization(cfg, int(cfg.float_input_dim))
    return SacNetworkSpec(obs_key="float", obs_dim=int(cfg.float_input_dim), action_low=tuple(CONTINUOUS_LOW),
                          action_high=tuple(CONTINUOUS_HIGH), obs_mean=tuple(mean), obs_std=tuple(std), **common)


def hyper_from_config(cfg: Any) -> SacHyper:
    s = _sac(cfg)
    return SacHyper(gamma=float(s.gamma), actor_lr=float(s.actor_lr), critic_lr=float(s.critic_lr),
                    alpha_lr=float(s.alpha_lr), tau=float(s.tau), autotune_alpha=bool(s.autotune_alpha),
                    init_alpha=float(s.init_alpha), target_entropy=s.target_entropy, n_critics=int(s.n_critics),
                    target_critics=int(s.target_critics), policy_critic_reduction=s.policy_critic_reduction,
                    policy_every=policy_every(s), random_steps=int(s.random_steps))


def policy_every(s: Any) -> int:
    """``sac.policy_every``, or when null once per env step: ``round(updates_per_sample)`` critic
    updates per actor update (REDQ, Chen et al. 2021, updates the policy once per G critic steps)."""
    if s.policy_every is not None:
        return int(s.policy_every)
    return max(1, round(float(s.updates_per_sample)))


def memory_kwargs_from_config(cfg: Any) -> dict[str, Any]:
    s = _sac(cfg)
    return dict(capacity=int(s.buffer_size), batch_size=int(cfg.training.batch_size), n_steps=int(s.n_steps),
                gamma=float(s.gamma), start_learning_size=int(s.start_learning_size),
                updates_per_sample=float(s.updates_per_sample))


def make_agent(cfg: Any = None, device: str | None = None, seed: int | None = None, **overrides: Any) -> SACAgent:
    """Registry factory for agent ``"sac"``; ``overrides`` replace ``SacHyper`` fields
    (``trainer.agent_kwargs``)."""
    import dataclasses

    hyper = dataclasses.replace(hyper_from_config(cfg), **overrides)
    dev = device or cfg.trainer.torch_device()
    agent = SACAgent(network_spec_from_config(cfg), hyper, device=dev,
                     seed=seed if seed is not None else cfg.training.seed)
    agent.batch_size = int(cfg.training.batch_size)
    return agent


def make_memory(cfg: Any = None, seed: int | None = None, **overrides: Any) -> UniformReplayMemory:
    """Registry factory for memory ``"sac"``: a ``UniformReplayMemory``
    sized and rated by ``sac.*``; ``overrides`` replace its arguments (``trainer.memory_kwargs``)."""
    kw = memory_kwargs_from_config(cfg)
    kw.update(overrides)
    return UniformReplayMemory(**kw, seed=seed if seed is not None else cfg.training.seed)
