"""Keys that are documented but not built yet, and the check that refuses them before a run starts.

The configuration guide is the target: every key it names exists in the config model with its
documentation, even when no code acts on it yet. Such a key must not validate as "ok" with a value
that would silently do nothing, so :func:`check_built` refuses any non-default value of a key in
:data:`NOT_BUILT`. When you build one, delete its entry here and read the key in code;
``tests/test_config_coverage.py`` fails when a key is neither read by code nor listed here.

:func:`check_startable` is what ``rulka config validate`` and every role answer before starting:
the not-built keys, and whether the learner and environment the config names exist.
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING

from rulka.errors import ConfigError

if TYPE_CHECKING:
    from rulka.config.model import RulkaConfig

# Dotted YAML key paths (as `rulka config keys` prints them) -> why the key is refused. A section
# path covers every key under it. Edit this map when you build a key: remove its entry, and make
# sure code reads it. `rulka config defaults` prints each reason beside its key.
NOT_BUILT: dict[str, str] = {
    # nn: the fusion trunks, ViT stem, freeze flags, pretrained init, resets and IQN's transformer
    # heads are built (rulka.nn.fusion, rulka.nn.freeze, rulka.agents.iqn.reset, rulka.nn.transformer), and
    # nn.decoder.shared_input pre_tau (rulka.agents.iqn.network)
    # performance: Linesight's single-machine knobs; rulka's own concept named in each reason
    "performance.gpu_collectors_count": "rulka's collectors are worker processes or machines: "
                                        "`rulka run --workers N` or one rulka-worker per game",
    "performance.max_rollout_queue_size": "workers send segments through the server; their backlog is "
                                          "bounded by the worker outbox and the trainer's rate limiter",
    "performance.send_shared_network_every_n_batches": "the trainer publishes weights every "
                                                       "trainer.publish_every_updates updates",
    "performance.update_inference_network_every_n_actions": "workers load new weights between segments "
                                                            "(worker.segment_max_steps)",
    "performance.make_highest_prio_figures": "Linesight's matplotlib figures; rulka logs to metrics.jsonl, "
                                             "TensorBoard and W&B, and `rulka plot` draws them",
    "performance.plot_race_time_left_curves": "Linesight's matplotlib figures; see `rulka plot`",
    "performance.n_transitions_to_plot_in_distribution_curves": "Linesight's matplotlib figures; see `rulka plot`",
    "performance.frames_before_save_best_runs": "Linesight saves game inputs of best runs; rulka keeps the best "
                                                "policy per map (best/) and `rulka eval` replays it",
    "performance.threshold_to_save_all_runs_ms": "Linesight saves game inputs of good runs; rulka keeps the best "
                                                 "policy per map (best/)",
    # reserved by the guide for within-pair / within-group minibatching
    "dpo.dpo_num_minibatches": "reserved by the guide for within-pair minibatching (one pair per update here)",
    "grpo.grpo_num_minibatches": "reserved by the guide for within-group minibatching (one group per update here)",
    # rulka's own keys that nothing acts on yet
    "worker.actor": "workers build the actor the trainer's weights name (actor_spec)",
    "worker.actor_kwargs": "workers build the actor the trainer's weights name (actor_spec)",
    "network.local_com_port_base": "rulka's roles talk over the server's TLS port (network.port)",
}

# keys whose default depends on another key (filled by the config model at load)
_DEFAULT_FROM: dict[str, str] = {"worker.actor": "training.algorithm"}


def not_built_keys(cfg: RulkaConfig) -> list[str]:
    """The keys of :data:`NOT_BUILT` whose value in ``cfg`` differs from the default, sorted."""
    from rulka.config.model import RulkaConfig

    default = RulkaConfig()
    out = []
    for path in sorted(NOT_BUILT):
        value = cfg.get(path)
        expected = cfg.get(_DEFAULT_FROM[path]) if path in _DEFAULT_FROM else default.get(path)
        if value != expected:
            out.append(path)
    return out


def check_built(cfg: RulkaConfig) -> None:
    """Raise ConfigError naming every key set away from its default that no code acts on yet, and
    every ``nn`` key the configured topology does not read (``rulka.nn.topology.inert_keys``, torch-free)."""
    from rulka.nn.topology import inert_keys

    inert = inert_keys(cfg)
    if inert:
        raise ConfigError("config: " + "; ".join(inert))
    check_multi_action(cfg)
    check_temporally_extended(cfg)
    keys = not_built_keys(cfg)
    if not keys:
        return
    named = ", ".join(f"`{k}`" for k in keys)
    subject = f"config key {named} is" if len(keys) == 1 else f"config keys {named} are"
    why = "; ".join(f"{k}: {NOT_BUILT[k]}" for k in keys)
    raise ConfigError(f"{subject} not built yet (documented, but nothing acts on it: {why}); "
                      f"remove it or use the default")


def check_temporally_extended(cfg: RulkaConfig) -> None:
    """``exploration.epsilon_z_exponent`` (εz-greedy) acts in the IQN actor with one action per
    decision only, and ``exploration.epsilon_z_max_actions`` only with it: refused elsewhere."""
    exp, env = cfg.exploration, cfg.environment
    z = exp.epsilon_z_exponent
    if z is None:
        if exp.epsilon_z_max_actions != type(exp).model_fields["epsilon_z_max_actions"].default:
            raise ConfigError(
                f"config key `exploration.epsilon_z_max_actions` ({exp.epsilon_z_max_actions}) caps εz-greedy's "
                "holds, which are off (`exploration.epsilon_z_exponent` is null): set the exponent (the paper's: 2) "
                "or remove it")
        return
    agent = str(cfg.trainer.agent)
    if env.is_multi_action or agent != "iqn":
        raise ConfigError(
            f"config key `exploration.epsilon_z_exponent` ({z}) holds IQN's random actions for several "
            f"decisions; it is built for the iqn learner with one action per decision (learner {agent!r}, "
            f"`environment.rl_action_offsets_ms` {env.rl_action_offsets_ms}): remove it")


MULTI_ACTION_LEARNERS = ("iqn", "ppo", "grpo", "dpo")  # learners that take N actions per decision


def check_multi_action(cfg: RulkaConfig) -> None:
    """Multi-action blocks (``environment.rl_action_offsets_ms`` with N > 1 offsets) are built for
    the IQN learner (action branching, ``rulka.agents.iqn.branching``) and the PPO / GRPO / DPO
    actor-critic (a factorised categorical, ``rulka.agents.policy.network``) on a discrete action
    space (``rulka.envs.multi_action``); any other learner (SAC, REDQ, a plugin) is refused by name.
    ``exploration.multi_action_exploration`` away from its default where it would do nothing (one
    action per decision, or a policy learner, which samples its actions) is refused too."""
    env = cfg.environment
    if not env.is_multi_action:
        if cfg.exploration.multi_action_exploration != "per_action":
            raise ConfigError(
                f"config key `exploration.multi_action_exploration` ({cfg.exploration.multi_action_exploration}) "
                "acts only with several actions per decision; `environment.rl_action_offsets_ms` is "
                f"{env.rl_action_offsets_ms} (one action): remove it or set the offsets, e.g. [0, 10, 20, 30, 40]")
        return
    agent = str(cfg.trainer.agent)
    if agent not in MULTI_ACTION_LEARNERS:
        raise ConfigError(
            f"config key `environment.rl_action_offsets_ms` ({env.rl_action_offsets_ms}): multi-action blocks "
            f"are built for the {', '.join(MULTI_ACTION_LEARNERS)} learners, not for `training.algorithm` / "
            f"`trainer.agent` {agent!r}; "
            "use [0] (one action per decision) with this learner")
    if agent != "iqn" and cfg.exploration.multi_action_exploration != "per_action":
        raise ConfigError(
            f"config key `exploration.multi_action_exploration` ({cfg.exploration.multi_action_exploration}) "
            f"applies IQN's epsilon-greedy to a block; the {agent} policy samples each action of a block "
            "from its own distribution: remove it")
    if env.continuous_actions:
        raise ConfigError(
            f"config key `environment.rl_action_offsets_ms` ({env.rl_action_offsets_ms}): multi-action blocks "
            "need discrete actions; `environment.continuous_actions` is true")


def check_startable(cfg: RulkaConfig, import_plugins: bool = False, replay: bool = True) -> list[str]:
    """What a role checks before it starts: no not-built key is set, and the learner and the
    environment the config names exist (``training.algorithm`` through ``trainer.agent`` and
    ``trainer.memory``, ``environment.backend``, ``worker.compressor``). With ``import_plugins``
    every plugin is also imported. Then ``rulka.config.resources.check_resources``: the track
    name, the segment length and (``replay``; not on a worker, which keeps no replay) the replay
    memory against this machine's RAM. Returns the ``kind=name`` pairs checked; raises
    ConfigError naming the key otherwise.
    """
    from rulka.config.resources import check_resources

    check_built(cfg)
    check_remote_code_keys(cfg)
    plugins = check_plugins(cfg, import_plugins=import_plugins)
    check_resources(cfg, replay=replay)
    return plugins


def check_remote_code_keys(cfg: RulkaConfig) -> None:
    """Any ``trust_remote_code`` the config turns on (a Hugging Face model slot) needs
    ``--trust-remote-code`` on this command line (``rulka.trust``): a ConfigError naming the key
    otherwise; with it, a warning line names the model whose code will run."""
    from rulka.trust import check_remote_code

    vis, enc = cfg.nn.vis.transformer, cfg.nn.encoder
    slots = [("nn.vis.transformer", vis), ("nn.encoder.transformer", enc.transformer),
             ("nn.encoder.hf_embedding", enc.hf_embedding)]
    for key, slot in slots:
        if slot is not None and slot.trust_remote_code:
            check_remote_code(True, f"{key}.trust_remote_code", str(slot.model_name_or_path))


def check_plugins(cfg: RulkaConfig, import_plugins: bool = False) -> list[str]:
    """Check the plugins the config names (see :func:`check_startable`)."""
    from rulka import registry
    from rulka.config.sections import Algorithm, EnvironmentConfig

    algorithm = cfg.training.algorithm
    wanted: list[tuple[str, str, str]] = [
        ("worker.compressor", "compressor", cfg.worker.compressor),
        # a plugin left at its default is named after training.algorithm: report that key
        ("training.algorithm" if cfg.trainer.agent == algorithm else "trainer.agent", "agent", str(cfg.trainer.agent)),
        ("training.algorithm" if cfg.trainer.memory == algorithm else "trainer.memory", "memory",
         str(cfg.trainer.memory)),
    ]
    if cfg.environment.backend != "gym":  # gym envs come from gymnasium.make, not a plugin
        wanted.append(("environment.backend", "env", cfg.environment.backend))
    else:
        from rulka.plugins import check_gym_id

        check_gym_id(cfg.environment.gym_id or "")
    # names the guide documents, which a later version builds
    documented = {
        "env": {str(v) for v in typing.get_args(EnvironmentConfig.model_fields["backend"].annotation)},
        "agent": set(typing.get_args(Algorithm)),
        "memory": set(typing.get_args(Algorithm)),
    }
    checked = []
    for key, kind, name in wanted:
        built = ", ".join(registry.registered(kind)) or "none"
        if not registry.is_known(kind, name):
            if name in documented.get(kind, set()):
                raise ConfigError(f"config key `{key}`: {name} is not built yet (built {kind} plugins: {built})")
            raise ConfigError(f"config key `{key}`: {registry.refusal(kind, name)}")
        if import_plugins:
            try:
                registry.resolve(kind, name)
            except Exception as exc:  # noqa: BLE001 - any import failure is reported by its key
                raise ConfigError(f"config key `{key}`: {str(exc).splitlines()[0]}") from None
        checked.append(f"{kind}={name}")
    return checked
