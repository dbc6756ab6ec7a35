"""From a run config to the policy learners: network spec, hyperparameters, memories, and the
plugin factories the registry names ``ppo``, ``grpo`` and ``dpo`` (agent and memory)."""

from __future__ import annotations

from typing import Any

from rulka.agents.iqn.settings import env_spaces, pipeline_normalization, uses_mini_races
from rulka.agents.policy.base import OptimHyper, PolicyLearner
from rulka.agents.policy.dpo import DPOAgent, DPOHyper
from rulka.agents.policy.grpo import GRPOAgent, GRPOHyper
from rulka.agents.policy.memory import GroupMemory, PairMemory, StepsMemory
from rulka.agents.policy.network import PolicyNetworkSpec
from rulka.agents.policy.ppo import PPOAgent, PPOHyper
from rulka.nn.freeze import prepare_network
from rulka.nn.fusion import float_hidden_dim, topology_from_config


def _knots(cfg: Any, key: str) -> list:
    """Speed-scaled knots of schedule ``key``; an unset optional schedule is ``[[0, scalar]]``."""
    knots = cfg.scaled_knots(key)
    if knots is None:
        return [[0, float(cfg.schedule_at(key, 0))]]
    return [list(k) for k in knots]


def rollout_gamma_knots(cfg: Any) -> list:
    """The on-policy discount as knots, by the guide's precedence: training schedule, legacy
    ``ppo.ppo_gamma_schedule``, ``training.policy_rollout_gamma``, ``ppo.gamma``."""
    for key in ("training.policy_rollout_gamma_schedule", "ppo.ppo_gamma_schedule"):
        if cfg.get(key) is not None:
            return _knots(cfg, key)
    return [[0, float(cfg.policy_rollout_gamma_at(0))]]


def network_spec_from_config(cfg: Any) -> PolicyNetworkSpec:
    """The actor-critic for the configured env: ``nn.vis`` (image head), ``nn.float`` (float MLP),
    ``nn.decoder`` (trunk width, policy head = ``advantage``, value head = ``value``)."""
    float_dim, n_actions, hw = env_spaces(cfg)
    # TrackMania-like floats: the pipeline's normalisation (slot 0, the mini-race time, stays 0 here)
    mean, std = pipeline_normalization(cfg, float_dim) if uses_mini_races(cfg) else (None, None)
    cnn = cfg.nn.vis.cnn
    dec = cfg.nn.decoder
    pol = dec.advantage.mlp
    val = dec.value.mlp
    if pol is None or val is None:
        raise ValueError("the policy learners build MLP heads: nn.decoder.advantage/value must be mlp")
    return PolicyNetworkSpec(
        float_dim=float_dim, n_actions=n_actions, image_height=hw[0] if hw else 0, image_width=hw[1] if hw else 0,
        float_hidden_dim=float_hidden_dim(cfg), topology=topology_from_config(cfg), trunk_hidden_dim=int(dec.dense_hidden_dimension),
        policy_hidden_dim=pol.hidden_dim, policy_layers=int(pol.n_hidden_layers),
        value_hidden_dim=val.hidden_dim, value_layers=int(val.n_hidden_layers),
        use_impala_cnn=bool(cnn.use_impala_cnn) if cnn else False,
        impala_model_size=int(cnn.impala_model_size) if cnn else 1,
        use_adaptive_maxpool=bool(cnn.use_adaptive_maxpool) if cnn else False,
        adaptive_maxpool_size=int(cnn.adaptive_maxpool_size) if cnn else 6,
        use_spectral_norm=bool(cnn.use_spectral_norm) if cnn else False,
        float_mean=None if mean is None else [float(x) for x in mean],
        float_std=None if std is None else [float(x) for x in std],
        n_action_branches=cfg.environment.n_actions_per_block)


def optim_from_config(cfg: Any) -> OptimHyper:
    t = cfg.training
    return OptimHyper(lr_schedule=_knots(cfg, "training.lr_schedule"), adam_epsilon=float(t.adam_epsilon),
                      adam_beta1=float(t.adam_beta1), adam_beta2=float(t.adam_beta2))


def ppo_hyper(cfg: Any) -> PPOHyper:
    p = cfg.ppo
    return PPOHyper(gae_lambda_schedule=_knots(cfg, "ppo.gae_lambda_schedule"), clip_coef=float(p.clip_coef),
                    clip_coef_vf=None if p.clip_coef_vf is None else float(p.clip_coef_vf),
                    ent_coef_schedule=_knots(cfg, "ppo.ent_coef_schedule"),
                    vf_coef_schedule=_knots(cfg, "ppo.vf_coef_schedule"), max_grad_norm=float(p.max_grad_norm),
                    update_epochs=int(p.update_epochs), num_minibatches=int(p.num_minibatches),
                    normalize_advantages=bool(p.normalize_advantages))


def grpo_hyper(cfg: Any) -> GRPOHyper:
    g = cfg.grpo
    return GRPOHyper(group_size=int(g.grpo_group_size), normalize_group=str(g.grpo_normalize_group),
                     ent_coef_schedule=_knots(cfg, "grpo.grpo_ent_coef_schedule"),
                     max_grad_norm_schedule=_knots(cfg, "grpo.grpo_max_grad_norm_schedule"),
                     ref_kl_coef_schedule=_knots(cfg, "grpo.grpo_ref_kl_coef_schedule"),
                     update_epochs=int(g.grpo_update_epochs), ref_sync_every_updates=int(g.grpo_ref_sync_every_updates),
                     objective=str(g.grpo_objective), clip_coef=float(g.grpo_clip_coef))


def dpo_hyper(cfg: Any) -> DPOHyper:
    d = cfg.dpo
    return DPOHyper(beta_schedule=_knots(cfg, "dpo.dpo_beta_schedule"),
                    vf_coef_schedule=_knots(cfg, "dpo.dpo_vf_coef_schedule"),
                    max_grad_norm_schedule=_knots(cfg, "dpo.dpo_max_grad_norm_schedule"),
                    update_epochs=int(d.dpo_update_epochs), ref_sync_every_updates=int(d.dpo_ref_sync_every_updates))


def _device(cfg: Any, device: str | None) -> str:
    import torch

    wanted = device or str(cfg.trainer.device)
    if wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return wanted


def make_agent(cfg: Any = None, device: str | None = None, seed: int | None = None) -> PolicyLearner:
    """Registry factory for agents ``ppo``, ``grpo``, ``dpo`` (by ``training.algorithm``)."""
    if cfg is None:
        raise ValueError("the policy learners need the run config")
    algorithm = cfg.training.algorithm
    spec, optim = network_spec_from_config(cfg), optim_from_config(cfg)
    dev = _device(cfg, device)
    seed = seed if seed is not None else cfg.training.seed
    agent: PolicyLearner
    if algorithm == "ppo":
        agent = PPOAgent(spec, ppo_hyper(cfg), optim, device=dev, seed=seed)
    elif algorithm == "grpo":
        agent = GRPOAgent(spec, grpo_hyper(cfg), optim, device=dev, seed=seed)
    elif algorithm == "dpo":
        agent = DPOAgent(spec, dpo_hyper(cfg), optim, device=dev, seed=seed)
    else:
        raise ValueError(f"training.algorithm {algorithm!r} is not a policy learner (ppo, grpo, dpo)")
    agent.prepared = prepare_network(cfg, agent.net, agent.optimizer, "policy", copies=[agent.ref])
    return agent


def make_memory(cfg: Any = None) -> StepsMemory | GroupMemory | PairMemory:
    """Registry factory for memories ``ppo``, ``grpo``, ``dpo`` (by ``training.algorithm``)."""
    if cfg is None:
        raise ValueError("the policy memories need the run config")
    lag = cfg.trainer.max_policy_lag
    common = dict(gamma_schedule=rollout_gamma_knots(cfg), max_policy_lag=None if lag is None else int(lag),
                  n_actions=env_spaces(cfg)[1], n_action_branches=cfg.environment.n_actions_per_block)
    algorithm = cfg.training.algorithm
    if algorithm == "ppo":
        return StepsMemory(rollout_steps_per_update=int(cfg.ppo.rollout_steps_per_update), **common)
    if algorithm == "grpo":
        return GroupMemory(group_size=int(cfg.grpo.grpo_group_size), **common)
    if algorithm == "dpo":
        offline = None
        if cfg.dpo.dpo_data_mode != "online":
            from rulka.agents.policy.episodes import offline_pair_loader

            offline = offline_pair_loader(cfg.dpo.dpo_offline_pairs_jsonl, n_actions=common["n_actions"],
                                          n_action_branches=common["n_action_branches"])
        return PairMemory(data_mode=str(cfg.dpo.dpo_data_mode), pair_buffer_max=int(cfg.dpo.dpo_pair_buffer_max),
                          offline_pairs=offline, within_start=bool(cfg.dpo.dpo_pair_within_start), **common)
    raise ValueError(f"training.algorithm {algorithm!r} is not a policy learner (ppo, grpo, dpo)")
