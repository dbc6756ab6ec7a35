"""From a rulka run config (``rulka.config``) to the IQN network spec, learner hyperparameters
and replay-memory arguments, using the configuration guide's key names. Also the plugin
factories the registry names ``"iqn"`` (``make_agent``, ``make_memory``)."""

from __future__ import annotations

from typing import Any

from rulka.agents.iqn.agent import IQNAgent, IQNHyper
from rulka.agents.iqn.network import IQNNetworkSpec, float_normalisation


def _get(cfg: Any, path: str, default: Any = None) -> Any:
    node = cfg
    for part in path.split("."):
        if node is None:
            return default
        if isinstance(node, dict):
            node = node.get(part, default if part == path.rsplit(".", 1)[-1] else None)
        else:
            node = getattr(node, part, None)
    return default if node is None else node


def _knots(cfg: Any, key: str) -> list:
    scaled = getattr(cfg, "scaled_knots", None)
    if callable(scaled):
        return [list(k) for k in scaled(key)]
    return [list(k) for k in _get(cfg, key)]


def uses_mini_races(cfg: Any) -> bool:
    """Mini-races need the TrackMania-like float layout (time slot 0): every backend but ``gym``."""
    return _get(cfg, "environment.backend", "sim") != "gym"


def _env_spaces(cfg: Any) -> tuple[int, int, tuple[int, int] | None]:
    """(float dim, number of actions, image (H, W) or None) for the configured env."""
    if not uses_mini_races(cfg):
        import gymnasium

        env = gymnasium.make(_get(cfg, "environment.gym_id"), **dict(_get(cfg, "environment.gym_kwargs", {}) or {}))
        try:
            obs, act = env.observation_space, env.action_space
        finally:
            env.close()
        if not hasattr(act, "n"):
            raise ValueError("IQN needs a discrete action space")
        return int(obs.shape[0]), int(act.n), None
    from rulka.envs.actions import N_ACTIONS

    hw = None if _get(cfg, "nn.vis.no_image", False) else (int(cfg.h_downsized), int(cfg.w_downsized))
    return int(cfg.float_input_dim), N_ACTIONS, hw


def pipeline_normalization(cfg: Any, float_dim: int) -> tuple[list[float], list[float]]:
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


def network_spec_from_config(cfg: Any) -> IQNNetworkSpec:
    float_dim, n_actions, hw = _env_spaces(cfg)
    mini = cfg.temporal_mini_race_duration_actions if uses_mini_races(cfg) else None
    mean, std = pipeline_normalization(cfg, float_dim) if mini else (None, None)
    mean, std = float_normalisation(float_dim, mini, mean, std)
    cnn = _get(cfg, "nn.vis.cnn")
    btr = _get(cfg, "btr")
    adv = _get(cfg, "nn.decoder.advantage.mlp")
    return IQNNetworkSpec(
        float_dim=float_dim, n_actions=n_actions,
        image_height=hw[0] if hw else 0, image_width=hw[1] if hw else 0,
        float_hidden_dim=int(_get(cfg, "nn.float_branch.mlp.hidden_dim", 256)),
        dense_hidden_dimension=int(_get(cfg, "nn.decoder.dense_hidden_dimension", 1024)),
        embedding_dimension=int(_get(cfg, "nn.iqn.embedding_dimension", 64)),
        head_hidden_dim=_get(adv, "hidden_dim"), head_layers=int(_get(adv, "n_hidden_layers", 1)),
        use_impala_cnn=bool(_get(cnn, "use_impala_cnn", False)),
        impala_model_size=int(_get(cnn, "impala_model_size", 1)),
        use_adaptive_maxpool=bool(_get(cnn, "use_adaptive_maxpool", False)),
        adaptive_maxpool_size=int(_get(cnn, "adaptive_maxpool_size", 6)),
        use_spectral_norm=bool(_get(cnn, "use_spectral_norm", False)),
        use_layer_norm=bool(_get(btr, "use_layer_norm", False)),
        use_noisy_linear=bool(_get(btr, "use_noisy_linear", False)),
        noisy_sigma0=float(_get(btr, "noisy_sigma0", 0.5)),
        float_mean=[float(x) for x in mean], float_std=[float(x) for x in std])


def hyper_from_config(cfg: Any) -> IQNHyper:
    t = "nn.training"
    return IQNHyper(
        iqn_n=int(_get(cfg, "nn.iqn.n", 8)), iqn_k=int(_get(cfg, "nn.iqn.k", 32)),
        iqn_kappa=float(_get(cfg, "nn.iqn.kappa", 5e-3)),
        lr_schedule=_knots(cfg, "training.lr_schedule"),
        adam_epsilon=float(_get(cfg, "training.adam_epsilon", 1e-4)),
        adam_beta1=float(_get(cfg, "training.adam_beta1", 0.9)),
        adam_beta2=float(_get(cfg, "training.adam_beta2", 0.999)),
        use_ddqn=bool(_get(cfg, f"{t}.use_ddqn", False)),
        clip_grad_norm=float(_get(cfg, f"{t}.clip_grad_norm", 30)),
        clip_grad_value=float(_get(cfg, f"{t}.clip_grad_value", 1000)),
        soft_update_tau=float(_get(cfg, f"{t}.soft_update_tau", 0.02)),
        number_memories_trained_on_between_target_network_updates=int(
            _get(cfg, f"{t}.number_memories_trained_on_between_target_network_updates", 2048)),
        use_munchausen=bool(_get(cfg, "btr.use_munchausen", False)),
        munchausen_alpha=float(_get(cfg, "btr.munchausen_alpha", 0.9)),
        munchausen_entropy_tau=float(_get(cfg, "btr.munchausen_entropy_tau", 0.03)),
        munchausen_lo=float(_get(cfg, "btr.munchausen_lo", -1.0)),
        epsilon_schedule=_knots(cfg, "exploration.epsilon_schedule"),
        epsilon_boltzmann_schedule=_knots(cfg, "exploration.epsilon_boltzmann_schedule"),
        tau_epsilon_boltzmann=float(_get(cfg, "exploration.tau_epsilon_boltzmann", 0.01)),
        mini_race_actions=cfg.temporal_mini_race_duration_actions if uses_mini_races(cfg) else None,
        use_jit=bool(_get(cfg, f"{t}.use_jit", False)),
        use_amp=bool(_get(cfg, f"{t}.use_amp", True)),
    )


def memory_kwargs_from_config(cfg: Any) -> dict[str, Any]:
    mini = uses_mini_races(cfg)
    return dict(
        batch_size=int(_get(cfg, "training.batch_size", 512)),
        n_steps=int(_get(cfg, "training.n_steps", 3)),
        memory_size_schedule=_knots(cfg, "memory.memory_size_schedule"),
        gamma_schedule=_knots(cfg, "training.gamma_schedule"),
        discard_non_greedy_actions_in_nsteps=bool(_get(cfg, "training.discard_non_greedy_actions_in_nsteps", True)),
        mini_race_duration_actions=cfg.temporal_mini_race_duration_actions if mini else None,
        oversample_long_term_steps=int(_get(cfg, "training.oversample_long_term_steps", 40)),
        oversample_maximum_term_steps=int(_get(cfg, "training.oversample_maximum_term_steps", 5)),
        number_times_single_memory_is_used_before_discard=float(
            _get(cfg, "memory.number_times_single_memory_is_used_before_discard", 32)),
        prio_alpha=float(_get(cfg, "memory.prio_alpha", 0.0)),
        prio_epsilon=float(_get(cfg, "memory.prio_epsilon", 2e-3)),
        prio_beta=float(_get(cfg, "memory.prio_beta", 1.0)),
        min_horizon_to_update_priority_actions=cfg.min_horizon_to_update_priority_actions if mini else None,
        buffer_test_ratio=float(_get(cfg, "memory.buffer_test_ratio", 0.05)),
    )


def make_agent(cfg: Any = None, device: str | None = None, seed: int | None = None, **overrides: Any) -> IQNAgent:
    """Registry factory for agent ``"iqn"``: an ``IQNAgent`` built from the run config.
    ``overrides`` replace ``IQNHyper`` fields (``trainer.agent_kwargs``)."""
    import dataclasses

    if cfg is None:
        raise ValueError("the iqn agent needs the run config")
    hyper = dataclasses.replace(hyper_from_config(cfg), **overrides)
    dev = device or cfg.trainer.torch_device()
    agent = IQNAgent(network_spec_from_config(cfg), hyper, device=dev,
                     seed=seed if seed is not None else _get(cfg, "training.seed"))
    agent.batch_size = int(_get(cfg, "training.batch_size", 512))
    return agent


def make_memory(cfg: Any = None, seed: int | None = None, **overrides: Any) -> Any:
    """Registry factory for memory ``"iqn"``: a ``MiniRaceReplayMemory`` from the run config."""
    from rulka.agents.iqn.replay import MiniRaceReplayMemory

    if cfg is None:
        raise ValueError("the iqn memory needs the run config")
    kw = memory_kwargs_from_config(cfg)
    kw.update(overrides)
    if "n_actions" not in kw:
        kw["n_actions"] = _env_spaces(cfg)[1]
    return MiniRaceReplayMemory(**kw, seed=seed if seed is not None else _get(cfg, "training.seed"))
