"""RulkaConfig: the whole run configuration, its computed values and its schedules."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, model_validator

from rulka.config import schedules as sch
from rulka.config.sections import (
    BtrConfig,
    DpoConfig,
    EnvironmentConfig,
    ExplorationConfig,
    GrpoConfig,
    LoggingConfig,
    MapCycleConfig,
    MemoryConfig,
    NetworkConfig,
    NnConfig,
    PerformanceConfig,
    PpoConfig,
    PretrainConfig,
    RewardsConfig,
    SacConfig,
    Section,
    StateNormalizationConfig,
    TrainerConfig,
    TrainingConfig,
    UserConfig,
    WorkerConfig,
)
from rulka.errors import ConfigError

log = logging.getLogger(__name__)

# how each schedule key fills the gaps between its knots (guide: Schedules)
SCHEDULE_KINDS: dict[str, str] = {
    "training.lr_schedule": "exponential",
    "training.gamma_schedule": "linear",
    "training.policy_rollout_gamma_schedule": "linear",
    "training.tensorboard_suffix_schedule": "staircase",
    "memory.memory_size_schedule": "staircase",
    "exploration.epsilon_schedule": "linear",
    "exploration.epsilon_boltzmann_schedule": "linear",
    "rewards.engineered_speedslide_reward_schedule": "linear",
    "rewards.engineered_neoslide_reward_schedule": "linear",
    "rewards.engineered_kamikaze_reward_schedule": "linear",
    "rewards.engineered_close_to_vcp_reward_schedule": "linear",
    "ppo.ppo_gamma_schedule": "linear",
    "ppo.gae_lambda_schedule": "linear",
    "ppo.ent_coef_schedule": "linear",
    "ppo.vf_coef_schedule": "linear",
    "dpo.dpo_beta_schedule": "linear",
    "dpo.dpo_vf_coef_schedule": "linear",
    "dpo.dpo_max_grad_norm_schedule": "linear",
    "grpo.grpo_ent_coef_schedule": "linear",
    "grpo.grpo_max_grad_norm_schedule": "linear",
    "grpo.grpo_ref_kl_coef_schedule": "linear",
}

# optional schedules fall back to this scalar when null (guide: "implicit [[0, scalar]]")
_SCHEDULE_FALLBACK: dict[str, str] = {
    "ppo.gae_lambda_schedule": "ppo.gae_lambda",
    "ppo.ent_coef_schedule": "ppo.ent_coef",
    "ppo.vf_coef_schedule": "ppo.vf_coef",
    "dpo.dpo_beta_schedule": "dpo.dpo_beta",
    "dpo.dpo_vf_coef_schedule": "dpo.dpo_vf_coef",
    "dpo.dpo_max_grad_norm_schedule": "dpo.dpo_max_grad_norm",
    "grpo.grpo_ent_coef_schedule": "grpo.grpo_ent_coef",
    "grpo.grpo_max_grad_norm_schedule": "grpo.grpo_max_grad_norm",
    "grpo.grpo_ref_kl_coef_schedule": "grpo.grpo_ref_kl_coef",
}

_TM_BACKENDS = ("sim", "tmnf", "tm2020")
# learners that train on trajectories of the current policy: every update is published
ON_POLICY_ALGORITHMS = ("ppo", "dpo", "grpo")


class RulkaConfig(Section):
    """One run: every section of the YAML, validated, plus computed values and schedules.

    Build it with :func:`rulka.config.load_config` or :func:`rulka.config.config_from_dict`;
    ``RulkaConfig()`` is the built-in default. Plugin names left null (``worker.actor``,
    ``trainer.agent``, ``trainer.memory``) are filled with ``training.algorithm``.
    """

    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    """Environment, timing, geometry, timeouts."""
    nn: NnConfig = Field(default_factory=NnConfig)
    """Network architecture."""
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    """Algorithm, optimiser, schedules."""
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    """Replay buffer."""
    exploration: ExplorationConfig = Field(default_factory=ExplorationConfig)
    """Exploration schedules."""
    rewards: RewardsConfig = Field(default_factory=RewardsConfig)
    """Reward shaping."""
    map_cycle: MapCycleConfig = Field(default_factory=MapCycleConfig)
    """Map training cycle."""
    performance: PerformanceConfig = Field(default_factory=PerformanceConfig)
    """Throughput and synchronisation."""
    state_normalization: StateNormalizationConfig = Field(default_factory=StateNormalizationConfig)
    """Float input normalisation."""
    btr: BtrConfig = Field(default_factory=BtrConfig)
    """Optional IQN extras."""
    ppo: PpoConfig = Field(default_factory=PpoConfig)
    """PPO."""
    dpo: DpoConfig = Field(default_factory=DpoConfig)
    """DPO."""
    grpo: GrpoConfig = Field(default_factory=GrpoConfig)
    """GRPO."""
    sac: SacConfig = Field(default_factory=SacConfig)
    """SAC and REDQ."""
    pretrain: PretrainConfig = Field(default_factory=PretrainConfig)
    """Demonstrations kept during an IQN run (DQfD)."""
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    """Relay address, TLS, credentials, message limits."""
    worker: WorkerConfig = Field(default_factory=WorkerConfig)
    """Worker role."""
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    """Trainer role."""
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    """Run folder and dashboards."""
    user: UserConfig = Field(default_factory=UserConfig)
    """Machine-specific paths (usually from .env)."""

    @model_validator(mode="before")
    @classmethod
    def _plugins_from_algorithm(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        training = data.get("training")
        algorithm = training.get("algorithm", "iqn") if isinstance(training, dict) else "iqn"
        if not isinstance(algorithm, str):
            return data  # the type error is reported by the field itself
        data = dict(data)
        for section, key in (("worker", "actor"), ("trainer", "agent"), ("trainer", "memory")):
            block = data.get(section, {})
            if isinstance(block, dict) and block.get(key) is None:
                data[section] = {**block, key: algorithm}
        block = data.get("trainer", {})
        if isinstance(block, dict) and block.get("publish_every_updates") is None:
            data["trainer"] = {**block, "publish_every_updates": 1 if algorithm in ON_POLICY_ALGORITHMS else 100}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> RulkaConfig:
        check_consistency(self)
        return self

    # ---------------------------------------------------------------- computed values

    @property
    def ms_per_action(self) -> int:
        return self.environment.ms_per_action

    @property
    def ms_per_block(self) -> int:
        return self.environment.ms_per_block

    @property
    def n_actions_per_block(self) -> int:
        return self.environment.n_actions_per_block

    @property
    def temporal_mini_race_duration_actions(self) -> int:
        return self.environment.temporal_mini_race_duration_actions

    @property
    def float_input_dim(self) -> int:
        """nn.float_input_dim when set, else the guide's formula over environment.

        For ``backend: gym`` the formula does not apply: the size is the env's observation size,
        which only the env knows (set nn.float_input_dim to record it).
        """
        if self.nn.float_input_dim is not None:
            return self.nn.float_input_dim
        env = self.environment
        extra = env.tm2020.lidar_float_inputs if env.backend == "tm2020" else 0
        return env.float_input_dim + extra

    @property
    def w_downsized(self) -> int:
        return self.nn.w_downsized

    @property
    def h_downsized(self) -> int:
        return self.nn.h_downsized

    @property
    def min_horizon_to_update_priority_actions(self) -> int | None:
        """PER priorities are updated only for mini-race times below this: duration_actions - 40
        (Linesight's rule); None (every item) for a mini-race of 40 actions or fewer, where that
        rule would leave every priority at its first value."""
        d = self.temporal_mini_race_duration_actions
        return d - 40 if d > 40 else None

    @property
    def mini_race_time_sampling_range(self) -> tuple[int, int]:
        """[low, high) of the extended draw before abs/shift/clip (guide: -35, 145 by default)."""
        low = -self.training.oversample_long_term_steps + self.training.oversample_maximum_term_steps
        high = self.temporal_mini_race_duration_actions + self.training.oversample_maximum_term_steps
        return low, high

    @property
    def final_speed_reward_per_m_per_s(self) -> float:
        return self.rewards.final_speed_reward_per_m_per_s

    @property
    def inference_update_interval_ms(self) -> int:
        return self.performance.inference_update_interval_ms(self.ms_per_action)

    def computed(self) -> dict[str, Any]:
        """Every value derived at load, by name (written beside the config of each run)."""
        env = self.environment
        low, high = self.mini_race_time_sampling_range
        return {
            "ms_per_action": self.ms_per_action,
            "n_actions_per_block": self.n_actions_per_block,
            "ms_per_block": self.ms_per_block,
            "temporal_mini_race_duration_actions": self.temporal_mini_race_duration_actions,
            "float_input_dim": self.float_input_dim,
            "w_downsized": self.w_downsized,
            "h_downsized": self.h_downsized,
            "max_allowable_distance_to_virtual_checkpoint": round(
                env.max_allowable_distance_to_virtual_checkpoint, 6
            ),
            "zone_center_spacing_m": env.zone_center_spacing_m,
            "min_horizon_to_update_priority_actions": self.min_horizon_to_update_priority_actions,
            "mini_race_time_sampling_range": [low, high],
            "final_speed_reward_per_m_per_s": self.final_speed_reward_per_m_per_s,
            "float_hidden_dim_effective": self.nn.float_hidden_dim_effective,
            "advantage_hidden_dim": self.nn.head_hidden_dim("advantage"),
            "value_hidden_dim": self.nn.head_hidden_dim("value"),
            "inference_update_interval_ms": self.inference_update_interval_ms,
            "map_cycle_length": len(self.map_cycle.expanded()),
        }

    # ---------------------------------------------------------------- schedules

    def get(self, key: str) -> Any:
        """The value at a dotted key path, e.g. ``cfg.get("training.batch_size")``."""
        node: Any = self
        for part in key.split("."):
            if part == "float" and isinstance(node, NnConfig):
                part = "float_branch"
            if not isinstance(node, Section) or part not in type(node).model_fields:
                raise KeyError(key)
            node = getattr(node, part)
        return node

    def scaled_knots(self, key: str) -> list[tuple[float, Any]] | None:
        """Knots of schedule ``key`` with frames multiplied by training.global_schedule_speed (None if unset)."""
        if key not in SCHEDULE_KINDS:
            raise KeyError(f"{key} is not a schedule (known: {', '.join(SCHEDULE_KINDS)})")
        knots = self.get(key)
        if knots is None:
            return None
        return sch.scale_knots(knots, self.training.global_schedule_speed)

    def schedule_at(self, key: str, frames: float) -> Any:
        """Value of schedule ``key`` after ``frames`` environment frames (speed-scaled, rule per key)."""
        knots = self.scaled_knots(key)
        if knots is None:
            if key in _SCHEDULE_FALLBACK:
                return float(self.get(_SCHEDULE_FALLBACK[key]))
            raise KeyError(f"schedule {key} is not set")
        kind = SCHEDULE_KINDS[key]
        if kind == "exponential":
            return sch.exponential_schedule(knots, frames)
        if kind == "staircase":
            return sch.staircase_schedule(knots, frames)
        return sch.linear_schedule(knots, frames)

    def lr_at(self, frames: float) -> float:
        """Learning rate (exponential interpolation)."""
        return self.schedule_at("training.lr_schedule", frames)

    def gamma_at(self, frames: float) -> float:
        """IQN n-step discount."""
        return self.schedule_at("training.gamma_schedule", frames)

    def epsilon_at(self, frames: float) -> float:
        return self.schedule_at("exploration.epsilon_schedule", frames)

    def epsilon_boltzmann_at(self, frames: float) -> float:
        return self.schedule_at("exploration.epsilon_boltzmann_schedule", frames)

    def memory_size_at(self, frames: float) -> tuple[int, int]:
        """(buffer size, start-learning size), staircase."""
        size, start = self.schedule_at("memory.memory_size_schedule", frames)
        return int(size), int(start)

    def tensorboard_suffix_at(self, frames: float) -> str:
        return self.schedule_at("training.tensorboard_suffix_schedule", frames)

    def engineered_reward_at(self, name: str, frames: float) -> float:
        """``name`` is speedslide, neoslide, kamikaze or close_to_vcp."""
        return self.schedule_at(f"rewards.engineered_{name}_reward_schedule", frames)

    def policy_rollout_gamma_at(self, frames: float) -> float:
        """On-policy rollout discount: training schedule, else ppo schedule, else training scalar, else ppo.gamma."""
        if self.training.policy_rollout_gamma_schedule is not None:
            return self.schedule_at("training.policy_rollout_gamma_schedule", frames)
        if self.ppo.ppo_gamma_schedule is not None:
            return self.schedule_at("ppo.ppo_gamma_schedule", frames)
        if self.training.policy_rollout_gamma is not None:
            return self.training.policy_rollout_gamma
        return self.ppo.gamma

    def gae_lambda_at(self, frames: float) -> float:
        return self.schedule_at("ppo.gae_lambda_schedule", frames)

    def ppo_ent_coef_at(self, frames: float) -> float:
        return self.schedule_at("ppo.ent_coef_schedule", frames)

    def ppo_vf_coef_at(self, frames: float) -> float:
        return self.schedule_at("ppo.vf_coef_schedule", frames)

    def dpo_beta_at(self, frames: float) -> float:
        return self.schedule_at("dpo.dpo_beta_schedule", frames)

    def dpo_vf_coef_at(self, frames: float) -> float:
        return self.schedule_at("dpo.dpo_vf_coef_schedule", frames)

    def dpo_max_grad_norm_at(self, frames: float) -> float:
        return self.schedule_at("dpo.dpo_max_grad_norm_schedule", frames)

    def grpo_ent_coef_at(self, frames: float) -> float:
        return self.schedule_at("grpo.grpo_ent_coef_schedule", frames)

    def grpo_max_grad_norm_at(self, frames: float) -> float:
        return self.schedule_at("grpo.grpo_max_grad_norm_schedule", frames)

    def grpo_ref_kl_coef_at(self, frames: float) -> float:
        return self.schedule_at("grpo.grpo_ref_kl_coef_schedule", frames)

    # ---------------------------------------------------------------- export

    def to_dict(self) -> dict[str, Any]:
        """Plain YAML-ready data (lists, not tuples; paths as strings) that reloads to an equal config."""
        return _plain(self.model_dump(mode="python", by_alias=True))

    def to_yaml(self) -> str:
        """The config as block-style YAML (short lists such as schedule knots stay on one line)."""
        return dump_yaml(self.to_dict())



class _Dumper(yaml.SafeDumper):
    pass


def _is_flat(value: Any) -> bool:
    return not isinstance(value, dict | list) or (isinstance(value, list) and all(_is_flat(v) for v in value))


def _represent_list(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.Node:
    # knots like [0, [50000, 20000]] read best on one line; lists of mappings do not
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=_is_flat(value))


_Dumper.add_representer(list, _represent_list)


def dump_yaml(data: Any) -> str:
    """YAML text for plain data: block mappings, one-line flat lists, keys in their given order."""
    return yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=110, allow_unicode=True
    )


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _check_tmnf(cfg: RulkaConfig) -> None:
    """``backend: tmnf`` needs maps with reference lines (unless it runs the fake game) and binary
    actions, and refuses the simulator's and gym's own keys, which it would not read."""
    env = cfg.environment
    if env.continuous_actions:
        raise ConfigError(
            "config key `environment.continuous_actions` must be false for backend tmnf: rulka's TMInterface "
            "plugin sets the game's binary inputs"
        )
    # compared with the defaults, not "set in the file": a resolved config (sent to workers,
    # saved in the run folder) states every key
    defaults = type(env)()
    unread = [f"environment.{k}" for k in ("gym_id", "gym_kwargs") if getattr(env, k) != getattr(defaults, k)]
    if env.game_launch != "fake" and env.track != defaults.track:
        unread.append("environment.track")
    if unread:
        raise ConfigError(
            f"config keys {', '.join(f'`{k}`' for k in unread)} are not read by backend tmnf (it plays "
            "`map_cycle.entries`; environment.track names a simulator track and is read only with game_launch: fake)"
        )
    if env.game_launch == "fake":
        return
    missing = [] if cfg.map_cycle.entries else ["map_cycle.entries"]
    missing += [f"map_cycle.entries[{i}].reference_line_path" for i, e in enumerate(cfg.map_cycle.entries)
                if not e.reference_line_path]
    if missing:
        named = ", ".join(f"`{k}`" for k in missing)
        raise ConfigError(
            (f"config key {named} is" if len(missing) == 1 else f"config keys {named} are")
            + " required by backend tmnf: the maps to play, each with map_path and reference_line_path "
            "(record one with `rulka tm record-line`), unless environment.game_launch is fake"
        )


def _check_best_policy(cfg: RulkaConfig) -> None:
    """The best-policy keys that judge requested episodes are refused where no episode is requested."""
    tc, cycle = cfg.trainer, cfg.map_cycle
    greedy = any(not e.is_exploration for e in cycle.entries)
    requested = cycle.keep_best_policy and not greedy and tc.best_policy_every_frames > 0
    if tc.best_policy_episodes > 1 and greedy:
        raise ConfigError(
            f"config key `trainer.best_policy_episodes` ({tc.best_policy_episodes}) judges the greedy episodes the "
            "trainer asks for; this map cycle has greedy entries, which are the evaluation episodes (a candidate's "
            "first race on each map counts): leave the key at 1, or make the entries exploring ones to have the "
            "trainer ask for the episodes"
        )
    if tc.best_policy_start_noise > 0:
        if cfg.environment.backend != "sim":
            raise ConfigError(
                "config key `trainer.best_policy_start_noise` moves the simulator's start line; the "
                f"{cfg.environment.backend} backend has no such start (set it to 0)"
            )
        if not requested:
            raise ConfigError(
                "config key `trainer.best_policy_start_noise` applies to the greedy episodes the trainer asks for; "
                "this run asks for none (greedy map-cycle entries, `trainer.best_policy_every_frames: 0` or "
                "`map_cycle.keep_best_policy: false`): set it to 0"
            )
        if tc.best_policy_episodes < 2:
            raise ConfigError(
                "config key `trainer.best_policy_start_noise` needs `trainer.best_policy_episodes` > 1: one race "
                "from one moved start is still one draw (5 gives a median of 5 starts)"
            )


def check_consistency(cfg: RulkaConfig) -> None:
    """Raise ConfigError when values that are each valid contradict each other."""
    env, nn, tr = cfg.environment, cfg.nn, cfg.training
    for key, value in (("nn.iqn.n", nn.iqn.n), ("nn.iqn.k", nn.iqn.k)):
        if value % 2:
            raise ConfigError(
                f"config key `{key}` must be even (quantiles are drawn in symmetric pairs), got {value}"
            )
    if env.temporal_mini_race_duration_ms > env.cutoff_rollout_if_race_not_finished_within_duration_ms:
        raise ConfigError(
            "config key `environment.temporal_mini_race_duration_ms` "
            f"({env.temporal_mini_race_duration_ms}) is longer than "
            "`environment.cutoff_rollout_if_race_not_finished_within_duration_ms` "
            f"({env.cutoff_rollout_if_race_not_finished_within_duration_ms}); the mini-race horizon must fit in a race"
        )
    if env.temporal_mini_race_duration_actions < 1:
        raise ConfigError(
            f"config key `environment.temporal_mini_race_duration_ms` ({env.temporal_mini_race_duration_ms}) "
            f"is shorter than one decision ({env.ms_per_block} ms)"
        )
    if env.backend == "tm2020" and env.tm2020.observation == "lidar" and not nn.vis.no_image:
        raise ConfigError(
            "config key `environment.tm2020.observation` is lidar: set `nn.vis.no_image: true` "
            "(the beams go into the float inputs; there is no image)"
        )
    if tr.lr_cooldown_start_ratio < tr.lr_cooldown_final_ratio:
        raise ConfigError(
            f"config key `training.lr_cooldown_start_ratio` ({tr.lr_cooldown_start_ratio:g}) is below "
            f"`training.lr_cooldown_final_ratio` ({tr.lr_cooldown_final_ratio:g}): the cooldown only lowers the "
            "learning rate"
        )
    tc, cycle = cfg.trainer, cfg.map_cycle
    keeps_best = cycle.keep_best_policy and (any(not e.is_exploration for e in cycle.entries)
                                             or tc.best_policy_every_frames > 0)  # BestPolicy.for_config
    if tr.lr_cooldown_from_best and not keeps_best:
        raise ConfigError("config key `training.lr_cooldown_from_best`: the run keeps no best policy "
                          "(map_cycle.keep_best_policy, trainer.best_policy_every_frames): set it to false")
    if tr.lr_cooldown_end_on_average and not tc.average_policy_frames:
        raise ConfigError("config key `training.lr_cooldown_end_on_average`: the run keeps no average "
                          "(trainer.average_policy_frames is 0): set it to false")
    if cfg.sac.target_critics > cfg.sac.n_critics:
        raise ConfigError(
            f"config key `sac.target_critics` ({cfg.sac.target_critics}) exceeds `sac.n_critics` "
            f"({cfg.sac.n_critics}): the target draws its subset from the ensemble"
        )
    if cfg.sac.log_std_min >= cfg.sac.log_std_max:
        raise ConfigError("config key `sac.log_std_min` must be below `sac.log_std_max`")
    if tr.algorithm == "sac" and env.backend in _TM_BACKENDS:
        if not env.continuous_actions:
            raise ConfigError("config key `environment.continuous_actions` must be true for training.algorithm sac "
                              "(SAC acts with analog gas, brake and steer)")
        if not nn.vis.no_image:
            raise ConfigError("config key `nn.vis.no_image` must be true for training.algorithm sac "
                              "(rulka's SAC reads the float observation only)")
    if env.backend == "gym" and not env.gym_id:
        raise ConfigError("config key `environment.gym_id` is required when `environment.backend` is gym")
    if env.backend == "gym" and cfg.map_cycle.entries:
        raise ConfigError(
            "config key `map_cycle.entries` needs a TrackMania-like backend (sim, tmnf, tm2020); a gym env has no maps"
        )
    if env.backend == "tmnf":
        _check_tmnf(cfg)
    _check_best_policy(cfg)
    tm_dim = env.float_input_dim + (env.tm2020.lidar_float_inputs if env.backend == "tm2020" else 0)
    if (
        nn.float_input_dim is not None
        and env.backend in _TM_BACKENDS
        and nn.float_input_dim != tm_dim
    ):
        raise ConfigError(
            f"config key `nn.float_input_dim` ({nn.float_input_dim}) disagrees with the {env.backend} observation "
            f"({tm_dim}, from environment.n_zone_centers_in_inputs, n_prev_actions_in_inputs and "
            "n_contact_material_physics_behavior_types); remove it to use the computed value"
        )
    for i, (_, (size, start)) in enumerate(cfg.memory.memory_size_schedule):
        if start > size:
            raise ConfigError(
                f"config key `memory.memory_size_schedule[{i}]`: start-learning size {start} exceeds buffer size {size}"
            )
    if tr.algorithm == "iqn" and tr.batch_size > cfg.memory.memory_size_schedule[0][1][0]:
        raise ConfigError(
            f"config key `training.batch_size` ({tr.batch_size}) is larger than the first replay size "
            f"in `memory.memory_size_schedule` ({cfg.memory.memory_size_schedule[0][1][0]})"
        )
    if cfg.btr.use_munchausen and nn.training.use_ddqn:
        raise ConfigError(
            "config key `nn.training.use_ddqn` cannot be combined with `btr.use_munchausen`: the Munchausen "
            "target takes a softmax expectation over the next actions, not the max that Double DQN decouples "
            "(M-DQN and BTR use no Double DQN); turn one off"
        )
    if cfg.rewards.finish_reward_per_ms_left_in_mini_race and (env.backend == "gym" or cfg.trainer.memory != "iqn"):
        raise ConfigError(
            "config key `rewards.finish_reward_per_ms_left_in_mini_race` is read by the IQN mini-race memory "
            "(trainer.memory iqn) on a race backend (sim, tmnf, tm2020); this run "
            + ("is a gym env, whose episodes end without a finish line" if env.backend == "gym"
               else f"stores its samples in memory '{cfg.trainer.memory}'")
            + ": set it to 0"
        )
    if cfg.rewards.shaped_reward_min_dist_to_cur_vcp > cfg.rewards.shaped_reward_max_dist_to_cur_vcp:
        raise ConfigError(
            "config key `rewards.shaped_reward_min_dist_to_cur_vcp` is larger than `rewards.shaped_reward_max_dist_to_cur_vcp`"
        )
    if cfg.rewards.engineered_reward_min_dist_to_cur_vcp > cfg.rewards.engineered_reward_max_dist_to_cur_vcp:
        raise ConfigError(
            "config key `rewards.engineered_reward_min_dist_to_cur_vcp` is larger than "
            "`rewards.engineered_reward_max_dist_to_cur_vcp`"
        )
    norm = cfg.state_normalization
    for key, values in (
        ("float_inputs_mean", norm.float_inputs_mean),
        ("float_inputs_std", norm.float_inputs_std),
    ):
        if values is not None and len(values) != cfg.float_input_dim:
            raise ConfigError(
                f"config key `state_normalization.{key}` has {len(values)} values; "
                f"the float input has {cfg.float_input_dim} (float_input_dim)"
            )
    low, high = cfg.network.reconnect_backoff_s
    if low > high:
        raise ConfigError(f"config key `network.reconnect_backoff_s` must be [min, max], got [{low}, {high}]")
    if cfg.network.chunk_bytes > cfg.network.max_message_bytes:
        raise ConfigError("config key `network.chunk_bytes` is larger than `network.max_message_bytes`")
    if cfg.network.tls and cfg.network.allow_plain_tcp:
        raise ConfigError(
            "config key `network.allow_plain_tcp` is true but `network.tls` is true; "
            "set `network.tls: false` too to run without TLS, or remove allow_plain_tcp"
        )
    if not cfg.network.tls:
        if not cfg.network.allow_plain_tcp:
            raise ConfigError(
                "config key `network.tls` is false but `network.allow_plain_tcp` is not true; "
                "plain TCP sends weights and samples unencrypted and unauthenticated, set both to confirm"
            )
        log.warning("network.tls is off: traffic is plain TCP, unencrypted and unauthenticated")
    if (
        cfg.dpo.dpo_data_mode in ("offline", "both")
        and tr.algorithm == "dpo"
        and not cfg.dpo.dpo_offline_pairs_jsonl
    ):
        raise ConfigError(
            f"config key `dpo.dpo_offline_pairs_jsonl` is required when `dpo.dpo_data_mode` is {cfg.dpo.dpo_data_mode}"
        )
