"""From a rulka run config (``rulka.config``) to the IQN network spec, learner hyperparameters
and replay-memory arguments, using the configuration guide's key names. Also the plugin
factories the registry names ``"iqn"`` (``make_agent``, ``make_memory``)."""

from __future__ import annotations

from typing import Any

from rulka.agents.iqn.agent import IQNAgent, IQNHyper
from rulka.agents.iqn.network import IQNNetworkSpec, float_normalisation
from rulka.agents.iqn.reset import IQNResetter, ResetSettings
from rulka.config import ConfigLike, RulkaConfig, as_config
from rulka.config.sections import MlpSlotConfig, VisCnnConfig
from rulka.nn.freeze import freeze_prefixes, prepare_network
from rulka.nn.fusion import float_hidden_dim, topology_from_config


def _knots(cfg: RulkaConfig, key: str) -> list:
    """Schedule ``key``'s knots with frames stretched by ``training.global_schedule_speed``."""
    return [list(k) for k in cfg.scaled_knots(key) or ()]


def uses_mini_races(cfg: RulkaConfig) -> bool:
    """Mini-races need the TrackMania-like float layout (time slot 0): every backend but ``gym``."""
    return cfg.environment.backend != "gym"


def env_spaces(cfg: RulkaConfig) -> tuple[int, int, tuple[int, int] | None]:
    """(float dim, number of actions, image (H, W) or None) for the configured env."""
    if not uses_mini_races(cfg):
        import gymnasium

        env = gymnasium.make(cfg.environment.gym_id, **cfg.environment.gym_kwargs)
        try:
            obs, act = env.observation_space, env.action_space
        finally:
            env.close()
        if not hasattr(act, "n"):
            raise ValueError("IQN needs a discrete action space")
        return int(obs.shape[0]), int(act.n), None
    from rulka.envs.actions import N_ACTIONS

    hw = None if cfg.nn.vis.no_image else (cfg.h_downsized, cfg.w_downsized)
    return cfg.float_input_dim, N_ACTIONS, hw


def pipeline_normalization(cfg: RulkaConfig, float_dim: int) -> tuple[list[float], list[float]]:
    """Per-feature (mean, std) of the TrackMania-like float observation: ``state_normalization``
    when set, else the pipeline's domain-derived defaults; inputs a backend appends after the
    pipeline's (tm2020 LIDAR beams in [0, 1]) get mean 0.5, std 0.3."""
    from rulka.envs.pipeline import PipelineParams, default_normalization

    params = PipelineParams.from_config(cfg)
    if params.float_inputs_mean is not None and params.float_inputs_std is not None:
        mean, std = list(params.float_inputs_mean), list(params.float_inputs_std)
    else:
        m, s = default_normalization(params)
        mean, std = m.tolist(), s.tolist()
    if len(mean) < float_dim:
        extra = float_dim - len(mean)
        mean, std = mean + [0.5] * extra, std + [0.3] * extra
    return mean, std


def network_spec_from_config(cfg: RulkaConfig) -> IQNNetworkSpec:
    """The IQN network for the configured env: ``nn.vis.cnn`` (image head), ``nn.float``,
    ``nn.iqn``, ``nn.decoder`` (the advantage and value heads' MLPs) and ``btr`` (layer norm,
    noisy linears)."""
    float_dim, n_actions, hw = env_spaces(cfg)
    mini = cfg.temporal_mini_race_duration_actions if uses_mini_races(cfg) else None
    mean, std = pipeline_normalization(cfg, float_dim) if mini else (None, None)
    mean, std = float_normalisation(float_dim, mini, mean, std)
    nn_cfg, btr = cfg.nn, cfg.btr
    # no image or a ViT stem (the topology): the cnn section is unset and unused
    cnn = nn_cfg.vis.cnn or VisCnnConfig()
    dec = nn_cfg.decoder
    # each head is its mlp or its transformer slot (MlpSlotConfig defaults when it is a transformer)
    adv, val = dec.advantage.mlp or MlpSlotConfig(), dec.value.mlp or MlpSlotConfig()
    adv_t, val_t = dec.advantage.transformer, dec.value.transformer
    return IQNNetworkSpec(
        float_dim=float_dim, n_actions=n_actions,
        image_height=hw[0] if hw else 0, image_width=hw[1] if hw else 0,
        float_hidden_dim=float_hidden_dim(cfg), topology=topology_from_config(cfg),
        dense_hidden_dimension=nn_cfg.decoder.dense_hidden_dimension,
        embedding_dimension=nn_cfg.iqn.embedding_dimension,
        head_hidden_dim=nn_cfg.head_hidden_dim("advantage"), head_layers=adv.n_hidden_layers,
        value_hidden_dim=nn_cfg.head_hidden_dim("value"), value_layers=val.n_hidden_layers,
        advantage_transformer=adv_t.model_dump() if adv_t is not None else None,
        value_transformer=val_t.model_dump() if val_t is not None else None,
        shared_input=dec.shared_input,
        use_impala_cnn=cnn.use_impala_cnn, impala_model_size=cnn.impala_model_size,
        use_adaptive_maxpool=cnn.use_adaptive_maxpool, adaptive_maxpool_size=cnn.adaptive_maxpool_size,
        use_spectral_norm=cnn.use_spectral_norm,
        use_layer_norm=btr.use_layer_norm, use_noisy_linear=btr.use_noisy_linear, noisy_sigma0=btr.noisy_sigma0,
        float_mean=[float(x) for x in mean], float_std=[float(x) for x in std],
        n_action_branches=cfg.environment.n_actions_per_block)


def hyper_from_config(cfg: RulkaConfig) -> IQNHyper:
    """The learner's hyperparameters (``IQNHyper``) from the config, schedules speed-scaled."""
    iqn, t, btr, exp = cfg.nn.iqn, cfg.nn.training, cfg.btr, cfg.exploration
    tr = cfg.training
    return IQNHyper(
        iqn_n=iqn.n, iqn_k=iqn.k, iqn_kappa=iqn.kappa,
        lr_schedule=_knots(cfg, "training.lr_schedule"),
        adam_epsilon=tr.adam_epsilon, adam_beta1=tr.adam_beta1, adam_beta2=tr.adam_beta2,
        use_ddqn=t.use_ddqn, target_action=t.target_action,
        target_self_loss_clamp_ratio=t.target_self_loss_clamp_ratio, weight_decay_lr_ratio=tr.weight_decay_lr_ratio,
        clip_grad_norm=t.clip_grad_norm, clip_grad_value=t.clip_grad_value,
        soft_update_tau=t.soft_update_tau,
        number_memories_trained_on_between_target_network_updates=(
            t.number_memories_trained_on_between_target_network_updates),
        use_munchausen=btr.use_munchausen, munchausen_alpha=btr.munchausen_alpha,
        munchausen_entropy_tau=btr.munchausen_entropy_tau, munchausen_lo=btr.munchausen_lo,
        epsilon_schedule=_knots(cfg, "exploration.epsilon_schedule"),
        epsilon_boltzmann_schedule=_knots(cfg, "exploration.epsilon_boltzmann_schedule"),
        tau_epsilon_boltzmann=exp.tau_epsilon_boltzmann, multi_action_exploration=exp.multi_action_exploration,
        epsilon_z_exponent=exp.epsilon_z_exponent, epsilon_z_max_actions=exp.epsilon_z_max_actions,
        noisy_resample_every_actions=btr.noisy_resample_every_actions,
        mini_race_actions=cfg.temporal_mini_race_duration_actions if uses_mini_races(cfg) else None,
        use_jit=t.use_jit, use_amp=t.use_amp, amp_dtype=t.amp_dtype, compile_mode=t.compile_mode,
    )


def memory_kwargs_from_config(cfg: RulkaConfig) -> dict[str, Any]:
    """``MiniRaceReplayMemory``'s arguments from the config, schedules speed-scaled."""
    mini = uses_mini_races(cfg)
    tr, mem = cfg.training, cfg.memory
    return dict(
        batch_size=tr.batch_size,
        n_steps=tr.n_steps,
        memory_size_schedule=_knots(cfg, "memory.memory_size_schedule"),
        gamma_schedule=_knots(cfg, "training.gamma_schedule"),
        discard_non_greedy_actions_in_nsteps=tr.discard_non_greedy_actions_in_nsteps,
        mini_race_duration_actions=cfg.temporal_mini_race_duration_actions if mini else None,
        oversample_long_term_steps=tr.oversample_long_term_steps,
        oversample_maximum_term_steps=tr.oversample_maximum_term_steps,
        number_times_single_memory_is_used_before_discard=float(mem.number_times_single_memory_is_used_before_discard),
        prio_alpha=mem.prio_alpha, prio_epsilon=mem.prio_epsilon, prio_beta=mem.prio_beta,
        min_horizon_to_update_priority_actions=cfg.min_horizon_to_update_priority_actions if mini else None,
        buffer_test_ratio=mem.buffer_test_ratio,
        finish_reward_per_action_left=(cfg.rewards.finish_reward_per_ms_left_in_mini_race * cfg.environment.ms_per_block
                                       if mini else 0.0),
        # random crops (performance.apply_randomcrop_augmentation) work on numpy batches: host there
        batch_device="host" if cfg.performance.apply_randomcrop_augmentation else mem.batch_device,
        device=cfg.trainer.torch_device(), device_frames_max_gb=mem.device_frames_max_gb,
    )


def make_agent(cfg: ConfigLike = None, device: str | None = None, seed: int | None = None,
               **overrides: Any) -> IQNAgent:
    """Registry factory for agent ``"iqn"``: an ``IQNAgent`` built from the run config
    (``rulka.config.as_config``; None: the built-in defaults). ``overrides`` replace ``IQNHyper``
    fields (``trainer.agent_kwargs``)."""
    import dataclasses

    cfg = as_config(cfg)
    hyper = dataclasses.replace(hyper_from_config(cfg), **overrides)
    dev = device or cfg.trainer.torch_device()
    agent = IQNAgent(network_spec_from_config(cfg), hyper, device=dev,
                     seed=seed if seed is not None else cfg.training.seed)
    agent.batch_size = cfg.training.batch_size
    agent.prepared = prepare_network(cfg, agent.online, agent.optimizer, "iqn", copies=[agent.target])
    agent.resetter = IQNResetter(ResetSettings.from_config(cfg), freeze_prefixes(cfg, "iqn"))
    if str(cfg.pretrain.demo_episodes).strip():  # demonstrations kept for the whole run (DQfD)
        from rulka.agents.iqn.demos import demo_loss_from_config

        agent.auxiliary_loss = demo_loss_from_config(cfg, make_memory=make_memory,
                                                     seed=seed if seed is not None else cfg.training.seed)
    return agent


def make_memory(cfg: ConfigLike = None, seed: int | None = None, **overrides: Any) -> Any:
    """Registry factory for memory ``"iqn"``: a ``MiniRaceReplayMemory`` from the run config
    (``rulka.config.as_config``; None: the built-in defaults)."""
    from rulka.agents.iqn.replay import MiniRaceReplayMemory

    cfg = as_config(cfg)
    kw = memory_kwargs_from_config(cfg)
    kw.update(overrides)
    if "n_actions" not in kw:
        kw["n_actions"] = env_spaces(cfg)[1]
    kw.setdefault("n_action_branches", cfg.environment.n_actions_per_block)
    return MiniRaceReplayMemory(**kw, seed=seed if seed is not None else cfg.training.seed)
