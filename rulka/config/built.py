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

# Dotted YAML key paths (as `rulka config keys` prints them). A section path covers every key
# under it. Edit this set when you build a key: remove its entry, and make sure code reads it.
NOT_BUILT: frozenset[str] = frozenset(
    {
        # environment: multi-action blocks
        "environment.rl_action_offsets_ms",
        # nn: fusion trunks, transformer stems and heads, pretrained init, freezing
        "nn.fusion_mode",
        "nn.init_from_pretrained",
        "nn.encoder",
        "nn.vis.transformer",
        "nn.vis.freeze",
        "nn.float.freeze",
        "nn.iqn.freeze",
        "nn.decoder.shared_input",
        "nn.decoder.shared_trunk_freeze",
        "nn.decoder.advantage.freeze",
        "nn.decoder.advantage.transformer",
        "nn.decoder.value.freeze",
        "nn.decoder.value.transformer",
        # nn.training: the network resets
        "nn.training.single_reset_flag",
        "nn.training.reset_every_n_frames_generated",
        "nn.training.additional_transition_after_reset",
        "nn.training.last_layer_reset_factor",
        "nn.training.overall_reset_mul_factor",
        "exploration.multi_action_exploration",
        # sections for learners and features not built yet
        # performance: all but running_speed (the TMNF game speed)
        "performance.gpu_collectors_count",
        "performance.max_rollout_queue_size",
        "performance.send_shared_network_every_n_batches",
        "performance.update_inference_network_every_n_actions",
        "performance.make_highest_prio_figures",
        "performance.plot_race_time_left_curves",
        "performance.n_transitions_to_plot_in_distribution_curves",
        "performance.apply_randomcrop_augmentation",
        "performance.n_pixels_to_crop_on_each_side",
        "performance.frames_before_save_best_runs",
        "performance.threshold_to_save_all_runs_ms",
        # reserved by the guide for within-pair / within-group minibatching
        "dpo.dpo_num_minibatches",
        "grpo.grpo_num_minibatches",
        # rulka's own keys that nothing acts on yet
        "worker.actor",
        "worker.actor_kwargs",
        "network.local_com_port_base",
    }
)

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
    """Raise ConfigError naming every key set away from its default that no code acts on yet."""
    keys = not_built_keys(cfg)
    if not keys:
        return
    named = ", ".join(f"`{k}`" for k in keys)
    subject = f"config key {named} is" if len(keys) == 1 else f"config keys {named} are"
    raise ConfigError(f"{subject} not built yet (documented, but nothing acts on it); remove it or use the default")


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
    plugins = check_plugins(cfg, import_plugins=import_plugins)
    check_resources(cfg, replay=replay)
    return plugins


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
            raise ConfigError(
                f"config key `{key}`: unknown {kind} plugin '{name}' (registered: {built}; or give 'module:Class')"
            )
        if import_plugins:
            try:
                registry.resolve(kind, name)
            except Exception as exc:  # noqa: BLE001 - any import failure is reported by its key
                raise ConfigError(f"config key `{key}`: {str(exc).splitlines()[0]}") from None
        checked.append(f"{kind}={name}")
    return checked
