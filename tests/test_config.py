"""Loading, defaults, overrides, computed values, error messages and .env precedence."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rulka.config import (
    RESOLVED_NAME,
    RulkaConfig,
    config_from_dict,
    load_config,
    save_resolved,
    with_overrides,
)
from rulka.config.reference import reference_yaml
from rulka.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _error(**kwargs) -> str:
    kwargs.setdefault("env_file", None)
    with pytest.raises(ConfigError) as exc:
        load_config(**kwargs)
    message = str(exc.value)
    assert "\n" not in message
    return message


# ------------------------------------------------------------------ defaults


def test_defaults_follow_the_guide() -> None:
    cfg = load_config(env_file=None)
    env, nn, tr = cfg.environment, cfg.nn, cfg.training
    assert (env.tm_engine_step_per_action, env.ms_per_tm_engine_step) == (5, 10)
    assert (env.n_zone_centers_in_inputs, env.one_every_n_zone_centers_in_inputs) == (40, 20)
    assert env.distance_between_checkpoints == 0.5
    assert env.temporal_mini_race_duration_ms == 7000
    assert env.cutoff_rollout_if_race_not_finished_within_duration_ms == 300_000
    assert env.cutoff_rollout_if_no_vcp_passed_within_duration_ms == 2000
    assert env.rl_action_offsets_ms == [0]
    assert (nn.w_downsized, nn.h_downsized) == (160, 120)
    assert (nn.float_hidden_dim, nn.dense_hidden_dimension) == (256, 1024)
    assert (nn.iqn_embedding_dimension, nn.iqn_n, nn.iqn_k, nn.iqn_kappa) == (64, 8, 32, 5e-3)
    assert nn.training.use_ddqn is False
    assert (nn.training.clip_grad_value, nn.training.clip_grad_norm) == (1000, 30)
    assert nn.training.number_memories_trained_on_between_target_network_updates == 2048
    assert nn.training.soft_update_tau == 0.02
    assert tr.algorithm == "iqn"
    assert (tr.batch_size, tr.n_steps, tr.adam_epsilon, tr.adam_beta1, tr.adam_beta2) == (
        512,
        3,
        1e-4,
        0.9,
        0.999,
    )
    assert tr.global_schedule_speed == 1.0
    assert [list(k) for k in tr.lr_schedule] == [
        [0, 1e-3],
        [3_000_000, 5e-5],
        [12_000_000, 5e-5],
        [15_000_000, 1e-5],
    ]
    assert (tr.oversample_long_term_steps, tr.oversample_maximum_term_steps) == (40, 5)
    assert cfg.memory.prio_alpha == 0.0 and cfg.memory.prio_epsilon == 2e-3 and cfg.memory.prio_beta == 1.0
    assert cfg.memory.number_times_single_memory_is_used_before_discard == 32
    assert cfg.exploration.tau_epsilon_boltzmann == 0.01
    assert cfg.exploration.multi_action_exploration == "per_action"
    assert cfg.rewards.constant_reward_per_ms == pytest.approx(-0.0012)
    assert cfg.rewards.reward_per_m_advanced_along_centerline == pytest.approx(0.01)
    assert cfg.rewards.final_speed_reward_as_if_duration_s == 0
    assert cfg.map_cycle.entries == []
    perf = cfg.performance
    assert (perf.gpu_collectors_count, perf.max_rollout_queue_size, perf.running_speed) == (4, 1, 160)
    assert (perf.send_shared_network_every_n_batches, perf.update_inference_network_every_n_actions) == (8, 8)
    assert cfg.btr.use_munchausen is False and cfg.btr.noisy_sigma0 == 0.5
    assert (cfg.ppo.gae_lambda, cfg.ppo.clip_coef, cfg.ppo.rollout_steps_per_update) == (0.95, 0.2, 2048)
    assert (cfg.dpo.dpo_beta, cfg.dpo.dpo_data_mode) == (0.1, "online")
    assert (cfg.grpo.grpo_group_size, cfg.grpo.grpo_normalize_group, cfg.grpo.grpo_ref_kl_coef) == (
        4,
        "mean",
        0.0,
    )


def test_rulka_sections_defaults() -> None:
    cfg = load_config(env_file=None)
    assert cfg.environment.backend == "sim" and cfg.environment.track == "default"
    assert cfg.environment.gym_id is None and cfg.environment.gym_kwargs == {}
    assert cfg.environment.continuous_actions is False
    net = cfg.network
    assert (net.server_host, net.port, net.tls, net.allow_plain_tcp) == ("127.0.0.1", 55555, True, False)
    assert net.credentials_dir == Path("~/.rulka/keys")
    assert net.credentials_path == Path.home() / ".rulka" / "keys"
    assert (net.chunk_bytes, net.max_message_bytes, net.reconnect_backoff_s) == (
        262144,
        64 << 20,
        (0.5, 10.0),
    )
    assert net.local_com_port_base is None
    w = cfg.worker
    assert (w.name, w.actor, w.compressor, w.segment_max_steps) == (None, "iqn", "zstd", 200)
    assert (w.unacked_limit_segments, w.unacked_memory_limit_mb, w.spill_dir, w.spill_limit_mb) == (
        10000,
        256,
        None,
        4096,
    )
    assert (w.on_full, w.num_envs, w.actor_kwargs, w.compressor_kwargs) == ("block", 1, {}, {})
    t = cfg.trainer
    assert (t.agent, t.memory, t.checkpoint_every_s, t.verify, t.device) == ("iqn", "iqn", 300, False, "auto")
    assert (t.agent_kwargs, t.memory_kwargs) == ({}, {})
    lg = cfg.logging
    assert (lg.run_dir, lg.log_every_s, lg.progress) == (Path("runs"), 10, "auto")
    assert (lg.wandb.enabled, lg.wandb.mode, lg.wandb.project, lg.wandb.entity) == (
        True,
        "offline",
        "rulka",
        None,
    )
    assert lg.tensorboard.enabled is True


def test_plugins_default_to_the_algorithm_unless_named() -> None:
    cfg = config_from_dict({"training": {"algorithm": "grpo"}})
    assert (cfg.worker.actor, cfg.trainer.agent, cfg.trainer.memory) == ("grpo", "grpo", "grpo")
    cfg = config_from_dict({"training": {"algorithm": "ppo"}, "trainer": {"memory": "my.pkg:Store"}})
    assert (cfg.trainer.agent, cfg.trainer.memory) == ("ppo", "my.pkg:Store")


# ------------------------------------------------------------------ computed values


def test_computed_values_with_defaults() -> None:
    cfg = RulkaConfig()
    assert cfg.ms_per_action == 50  # 5 x 10
    assert cfg.ms_per_block == 50 and cfg.n_actions_per_block == 1
    assert cfg.temporal_mini_race_duration_actions == 140  # 7000 // 50
    # 27 + 3*40 + 4*5 + 4*4 + 1 (guide, and the 184-float Linesight layout)
    assert cfg.float_input_dim == 184
    assert (cfg.w_downsized, cfg.h_downsized) == (160, 120)
    assert cfg.min_horizon_to_update_priority_actions == 100  # 140 - 40
    assert cfg.mini_race_time_sampling_range == (-35, 145)
    assert cfg.environment.max_allowable_distance_to_virtual_checkpoint == pytest.approx(
        (0.25**2 + 45**2) ** 0.5
    )
    assert cfg.inference_update_interval_ms == 400  # guide: 50 ms x 8
    assert cfg.nn.head_hidden_dim("advantage") == 512  # dense_hidden_dimension // 2


def test_computed_values_follow_their_inputs() -> None:
    cfg = config_from_dict(
        {
            "environment": {
                "tm_engine_step_per_action": 3,
                "temporal_mini_race_duration_ms": 6000,
                "n_zone_centers_in_inputs": 16,
                "n_prev_actions_in_inputs": 3,
                "n_contact_material_physics_behavior_types": 5,
            },
            "nn": {"vis": {"image_size": {"w": 64, "h": 48}}},
            "rewards": {"final_speed_reward_as_if_duration_s": 2},
        }
    )
    assert cfg.ms_per_action == 30
    assert cfg.temporal_mini_race_duration_actions == 200  # 6000 // 30
    assert cfg.float_input_dim == 27 + 48 + 12 + 20 + 1 == 108
    assert (cfg.w_downsized, cfg.h_downsized) == (64, 48)
    assert cfg.min_horizon_to_update_priority_actions == 160
    assert cfg.final_speed_reward_per_m_per_s == pytest.approx(0.02)


def test_multi_action_timing() -> None:
    cfg = config_from_dict({"environment": {"rl_action_offsets_ms": [0, 10, 20, 30, 40]}})
    assert cfg.n_actions_per_block == 5
    assert cfg.ms_per_action == 10
    assert cfg.ms_per_block == 50
    assert cfg.temporal_mini_race_duration_actions == 140  # 7000 // 50: counted in blocks
    assert config_from_dict({"environment": {"rl_action_offsets_ms": []}}).n_actions_per_block == 1


def test_gym_backend_may_set_float_input_dim() -> None:
    cfg = config_from_dict(
        {"environment": {"backend": "gym", "gym_id": "CartPole-v1"}, "nn": {"float_input_dim": 4}}
    )
    assert cfg.float_input_dim == 4



def test_the_finish_reward_is_read_by_the_mini_race_memory_and_refused_where_nothing_reads_it() -> None:
    from rulka.agents.iqn.settings import memory_kwargs_from_config

    key = "rewards.finish_reward_per_ms_left_in_mini_race=0.002"
    cfg = load_config(REPO / "configs" / "sim_iqn.yaml", [key], env_file=None)
    # per decision (50 ms on the simulator), as the memory counts the window
    assert memory_kwargs_from_config(cfg)["finish_reward_per_action_left"] == pytest.approx(0.002 * 50)
    assert memory_kwargs_from_config(config_from_dict({}))["finish_reward_per_action_left"] == 0.0
    assert "gym env" in _error(path=REPO / "configs" / "cartpole_iqn.yaml", overrides=[key])
    assert "memory 'ppo'" in _error(path=REPO / "configs" / "sim_ppo.yaml", overrides=[key])


# ------------------------------------------------------------------ loading and round trip


def test_yaml_may_omit_sections_and_keys(tmp_path: Path) -> None:
    path = _write(tmp_path, "training:\n  batch_size: 64\nnn:\n  iqn: {n: 16}\n")
    cfg = load_config(path, env_file=None)
    assert cfg.training.batch_size == 64
    assert cfg.nn.iqn.n == 16 and cfg.nn.iqn.k == 32
    assert cfg.environment == RulkaConfig().environment


def test_empty_file_is_refused(tmp_path: Path) -> None:
    # most likely a truncated copy: running every default instead would go unnoticed (issue 10)
    with pytest.raises(ConfigError, match="is empty"):
        load_config(_write(tmp_path, ""), env_file=None)
    assert load_config(_write(tmp_path, "training: {}\n"), env_file=None) == RulkaConfig()


def test_round_trip_through_yaml(tmp_path: Path) -> None:
    cfg = load_config(
        overrides=[
            "training.global_schedule_speed=2",
            "map_cycle.entries=[{short_name: A01, map_path: A01.Gbx, reference_line_path: A01.npy, repeat: 3}]",
            "worker.spill_dir=/tmp/spill",
            "nn.decoder.advantage.mlp.hidden=128",
        ],
        env_file=None,
    )
    again = load_config(_write(tmp_path, cfg.to_yaml()), env_file=None)
    assert again == cfg
    assert again.to_dict() == cfg.to_dict()
    assert [e.short_name for e in again.map_cycle.expanded()] == ["A01", "A01", "A01"]


def test_save_resolved_reloads_and_records_computed_values(tmp_path: Path) -> None:
    cfg = load_config(
        overrides=["training.batch_size=128", "environment.n_zone_centers_in_inputs=10"], env_file=None
    )
    path = save_resolved(cfg, tmp_path / "runs" / "r1")
    assert path == tmp_path / "runs" / "r1" / RESOLVED_NAME
    text = path.read_text()
    assert "#   float_input_dim: 94" in text  # 27 + 30 + 20 + 16 + 1
    assert load_config(path, env_file=None) == cfg
    assert load_config(path.parent, env_file=None) == cfg  # a run folder stands for its saved config
    assert [p.name for p in path.parent.iterdir()] == [RESOLVED_NAME]  # no temp file left behind


def test_reference_config_file_is_the_defaults() -> None:
    path = REPO / "configs" / "default.yaml"
    assert load_config(path, env_file=None) == RulkaConfig()
    assert path.read_text() == reference_yaml(), (
        "regenerate with: rulka config defaults > configs/default.yaml"
    )


def test_btr_cnn_keys_fill_omitted_vis_cnn_keys() -> None:
    cfg = config_from_dict(
        {
            "btr": {"use_impala_cnn": True, "impala_model_size": 4},
            "nn": {"vis": {"cnn": {"impala_model_size": 3}}},
        }
    )
    assert cfg.nn.vis.cnn.use_impala_cnn is True
    assert cfg.nn.vis.cnn.impala_model_size == 3  # nn.vis.cnn wins when given


def test_config_from_dict_leaves_its_input_alone() -> None:
    data = {"btr": {"use_impala_cnn": True}, "nn": {"vis": {"image_size": {"w": 64}}}}
    before = repr(data)
    config_from_dict(data)
    assert repr(data) == before


def test_legacy_fusion_mode_under_encoder_is_hoisted() -> None:
    cfg = config_from_dict({"nn": {"encoder": {"fusion_mode": "post_concat"}}})
    assert cfg.nn.fusion_mode == "post_concat"


def test_loaded_config_is_read_only() -> None:
    cfg = RulkaConfig()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError for frozen models
        cfg.training.batch_size = 1  # type: ignore[misc]
    assert (
        with_overrides(
            cfg, ["training.batch_size=1", "memory.memory_size_schedule=[[0, [100, 10]]]"]
        ).training.batch_size
        == 1
    )


# ------------------------------------------------------------------ overrides


def test_overrides_nested_lists_booleans_and_null(tmp_path: Path) -> None:
    path = _write(tmp_path, "training:\n  batch_size: 64\n")
    cfg = load_config(
        path,
        [
            "training.batch_size=256",
            "nn.vis.image_size.width=64",
            "network.tls=false",
            "network.allow_plain_tcp=yes",
            "exploration.epsilon_schedule=[[0, 1.0], [1e5, 0.05]]",
            "training.lr_schedule=[[0, 1e-3]]",
            "worker.name=pc-7",
            "network.server_host=10",
            "worker.compressor_kwargs={level: 3}",
            "network.local_com_port_base=null",
        ],
        env_file=None,
    )
    assert cfg.training.batch_size == 256
    assert cfg.nn.vis.image_size.width == 64
    assert cfg.network.tls is False and cfg.network.allow_plain_tcp is True
    assert [list(k) for k in cfg.exploration.epsilon_schedule] == [[0, 1.0], [100000.0, 0.05]]
    assert cfg.training.lr_schedule[0][1] == 1e-3
    assert cfg.worker.name == "pc-7"
    assert cfg.network.server_host == "10"  # host names stay strings
    assert cfg.worker.compressor_kwargs == {"level": 3}


def test_only_true_and_false_are_booleans() -> None:
    # YAML 1.1 would turn these into booleans; a track named "no" must stay a name
    cfg = load_config(
        overrides=["environment.track=no", "training.run_name=off", "worker.compressor=on"], env_file=None
    )
    assert (cfg.environment.track, cfg.training.run_name, cfg.worker.compressor) == ("no", "off", "on")
    assert (
        load_config(overrides=["network.tls=False", "network.allow_plain_tcp=yes"], env_file=None).network.tls
        is False
    )


def test_empty_section_means_defaults(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, "map_cycle:\ntraining:\n  batch_size: 32\n"), env_file=None)
    assert cfg.map_cycle.entries == [] and cfg.training.batch_size == 32


def test_later_override_wins() -> None:
    cfg = load_config(overrides=["training.batch_size=8", "training.batch_size=16"], env_file=None)
    assert cfg.training.batch_size == 16


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("training.batch_size", "expected KEY.PATH=VALUE"),
        ("=3", "expected KEY.PATH=VALUE"),
        ("training..batch_size=3", "empty part"),
        ("training.batch_size=[1,", "--set training.batch_size=[1,: bad YAML"),
        ("training.batch_size.x=3", "config key `training.batch_size` must be an integer, got {'x': 3}"),
    ],
)
def test_bad_override_syntax(override: str, needle: str) -> None:
    assert needle in _error(overrides=[override])


def test_override_below_a_value_is_refused() -> None:
    message = _error(overrides=["training.batch_size=3", "training.batch_size.x=3"])
    assert (
        message == "--set training.batch_size.x=3: config key `training.batch_size` is a value, not a section"
    )


# ------------------------------------------------------------------ error messages


def test_unknown_key_in_section_suggests_the_close_key() -> None:
    message = _error(overrides=["training.batchsize=3"])
    assert "config key `training.batchsize` is unknown; did you mean `training.batch_size`?" in message


def test_unknown_key_in_wrong_section_suggests_the_right_section(tmp_path: Path) -> None:
    path = _write(tmp_path, "memory:\n  batch_size: 256\n")
    message = _error(path=path)
    assert (
        message == f"{path}: config key `memory.batch_size` is unknown; did you mean `training.batch_size`?"
    )


def test_unknown_section_suggests_a_section(tmp_path: Path) -> None:
    message = _error(path=_write(tmp_path, "trainig:\n  batch_size: 3\n"))
    assert "config key `trainig` is unknown; did you mean `training`?" in message


def test_unknown_key_with_no_close_match_lists_known_keys() -> None:
    message = _error(overrides=["btr.zzzzzz=1"])
    assert "config key `btr.zzzzzz` is unknown; known keys in `btr`: use_munchausen" in message


def test_guide_flat_names_and_computed_keys_get_a_specific_hint() -> None:
    assert "did you mean `nn.vis.image_size.width`?" in _error(overrides=["nn.W_downsized=64"])
    assert "did you mean `nn.iqn.n`?" in _error(overrides=["iqn_n=16"])
    message = _error(overrides=["environment.ms_per_action=20"])
    assert message.endswith(
        "config key `environment.ms_per_action` is computed at load from "
        "environment.tm_engine_step_per_action x environment.ms_per_tm_engine_step; set those instead"
    )


def test_unknown_key_in_a_list_item() -> None:
    message = _error(overrides=["map_cycle.entries=[{short_name: a, map_path: b, repet: 2}]"])
    assert message.endswith(
        "config key `map_cycle.entries[0].repet` is unknown; did you mean `map_cycle.entries[0].repeat`?"
    )


def test_unknown_nested_key_uses_yaml_names() -> None:
    message = _error(overrides=["nn.float.mlp.hiden_dim=3"])
    assert (
        "config key `nn.float.mlp.hiden_dim` is unknown; did you mean `nn.float.mlp.hidden_dim`?" in message
    )


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("training.batch_size=abc", "config key `training.batch_size` must be an integer, got 'abc'"),
        ("training.batch_size=2.5", "config key `training.batch_size` must be an integer, got 2.5"),
        ("memory.prio_alpha=[1]", "config key `memory.prio_alpha` must be a number, got [1]"),
        ("network.tls=maybe", "config key `network.tls` must be true or false, got 'maybe'"),
        (
            "training.algorithm=dqn",
            "config key `training.algorithm` must be one of 'iqn', 'ppo', 'dpo', 'grpo' or 'sac'",
        ),
        (
            "network.local_com_port_base=abc",
            "config key `network.local_com_port_base` must be an integer, got 'abc'",
        ),
        ("environment=3", "config key `environment` must be a mapping of keys, got 3"),
        ("training.batch_size=0", "config key `training.batch_size` input should be greater than 0, got 0"),
        ("memory.prio_beta=.nan", "config key `memory.prio_beta` must be a finite number, got nan"),
        (
            "training.lr_schedule=[[0, .inf]]",
            "config key `training.lr_schedule[0][1]` must be a finite number",
        ),
    ],
)
def test_wrong_types_name_the_key_and_the_expected_type(override: str, needle: str) -> None:
    message = _error(overrides=[override])
    assert needle in message
    assert message.startswith(f"--set {override}: ")


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        (["nn.iqn.n=7"], ["nn.iqn.n"]),
        (["nn.iqn.k=33"], ["nn.iqn.k"]),
        (
            [
                "environment.temporal_mini_race_duration_ms=9000",
                "environment.cutoff_rollout_if_race_not_finished_within_duration_ms=8000",
            ],
            [
                "environment.temporal_mini_race_duration_ms",
                "environment.cutoff_rollout_if_race_not_finished_within_duration_ms",
            ],
        ),
        (["nn.vis.image_size.width=0"], ["nn.vis.image_size.width"]),
        (["nn.vis.image_size.h=-3"], ["nn.vis.image_size.h"]),
        (["environment.rl_action_offsets_ms=[0, 20]"], ["environment.rl_action_offsets_ms"]),
        (["environment.backend=gym"], ["environment.gym_id", "environment.backend"]),
        (["nn.float_input_dim=100"], ["nn.float_input_dim"]),
        (["memory.memory_size_schedule=[[0, [100, 200]]]"], ["memory.memory_size_schedule[0]"]),
        (["training.batch_size=100000"], ["training.batch_size", "memory.memory_size_schedule"]),
        (["network.tls=false"], ["network.tls", "network.allow_plain_tcp"]),
        (["network.reconnect_backoff_s=[5, 1]"], ["network.reconnect_backoff_s"]),
        (
            ["nn.vis.transformer={d_model: 100, n_heads: 3}", "nn.vis.cnn=null"],
            ["nn.vis.transformer.d_model"],
        ),
        (["nn.vis.transformer={}", "nn.vis.cnn={}"], ["nn.vis.cnn", "nn.vis.transformer"]),
        (["training.algorithm=dpo", "dpo.dpo_data_mode=offline"], ["dpo.dpo_offline_pairs_jsonl"]),
    ],
)
def test_inconsistent_values_name_the_keys(overrides: list[str], keys: list[str]) -> None:
    message = _error(overrides=overrides)
    for key in keys:
        assert f"`{key}" in message, message


def test_state_normalization_must_match_the_float_input() -> None:
    cfg = config_from_dict(
        {
            "environment": {"n_zone_centers_in_inputs": 1},
            "state_normalization": {"float_inputs_mean": [0.0] * 67},
        }
    )
    assert len(cfg.state_normalization.float_inputs_mean) == cfg.float_input_dim == 67  # 27 + 3 + 20 + 16 + 1
    message = _error(overrides=["state_normalization.float_inputs_std=[1.0, 2.0]"])
    assert "`state_normalization.float_inputs_std` has 2 values; the float input has 184" in message
    assert "`state_normalization.float_inputs_std[0]`" in _error(
        overrides=["state_normalization.float_inputs_std=[0.0]"]
    )


def test_allow_plain_tcp_alone_does_not_turn_tls_off() -> None:
    message = _error(overrides=["network.allow_plain_tcp=true"])
    assert "`network.allow_plain_tcp` is true but `network.tls` is true" in message


def test_network_section_maps_to_transport_settings() -> None:
    from rulka.net.settings import NetworkSettings

    cfg = load_config(
        overrides=[
            "network.server_host=203.0.113.7",
            "network.reconnect_backoff_s=[1, 20]",
            "network.port=4000",
        ],
        env_file=None,
    )
    settings = NetworkSettings.from_config(cfg.network.transport_settings())
    assert (settings.host, settings.port, settings.allow_plain_tcp) == ("203.0.113.7", 4000, False)
    assert (settings.reconnect_backoff_s, settings.reconnect_backoff_max_s) == (1.0, 20.0)
    assert settings.max_message_bytes == 64 << 20


def test_plain_tcp_needs_confirmation_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        cfg = load_config(overrides=["network.tls=false", "network.allow_plain_tcp=true"], env_file=None)
    assert cfg.network.tls is False
    assert any("plain TCP" in r.getMessage() for r in caplog.records)


def test_several_errors_fit_on_one_line() -> None:
    message = _error(overrides=["training.batch_size=x", "memory.prio_alpha=y", "nope=1"])
    assert message.count("config key") == 3


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    assert _error(path=tmp_path / "nope.yaml") == f"config file {tmp_path / 'nope.yaml'} does not exist"
    bad = _write(tmp_path, "training:\n  batch_size: 3\n  lr_schedule: [[0, 1e-3]\nnn: {}\n")
    message = _error(path=bad)
    assert message.startswith(f"{bad}: line 4") and "bad YAML" in message
    dup = _write(tmp_path, "training:\n  batch_size: 3\n  batch_size: 4\n", "dup.yaml")
    assert "duplicate key 'batch_size' (first at line 2)" in _error(path=dup)
    assert "must be a mapping of sections" in _error(path=_write(tmp_path, "- 1\n- 2\n", "list.yaml"))
    assert "is a directory" in _error(path=tmp_path)


def test_yaml_never_builds_python_objects(tmp_path: Path) -> None:
    path = _write(tmp_path, "training:\n  run_name: !!python/object/apply:os.system ['echo hacked']\n")
    assert "bad YAML" in _error(path=path)


# ------------------------------------------------------------------ .env


def test_env_file_values_are_defaults_that_yaml_and_set_override(tmp_path: Path) -> None:
    env = _write(
        tmp_path,
        "WANDB_ENTITY=team-a\nRULKA_SERVER_HOST=10.0.0.5\nRULKA_PORT=6000\nTRACKMANIA_BASE_PATH=D:/TM\n"
        "rulka_worker_name=garage\nUNRELATED=1\nWANDB_PROJECT=from-env\nLINUX_LAUNCH_GAME_PATH=/opt/tm: start.sh\n",
        ".env",
    )
    cfg = load_config(env_file=env)
    assert cfg.logging.wandb.entity == "team-a"
    assert cfg.network.server_host == "10.0.0.5"
    assert cfg.network.port == 6000
    assert cfg.user.trackmania_base_path == "D:/TM"
    assert cfg.worker.name == "garage"  # names are matched case-insensitively
    assert cfg.user.linux_launch_game_path == "/opt/tm: start.sh"  # values are text, not YAML

    yaml_file = _write(tmp_path, "network:\n  port: 7000\nlogging:\n  wandb:\n    project: from-yaml\n")
    cfg = load_config(yaml_file, ["network.server_host=example.org"], env_file=env)
    assert cfg.network.port == 7000  # YAML beats .env
    assert cfg.logging.wandb.project == "from-yaml"
    assert cfg.network.server_host == "example.org"  # --set beats .env
    assert cfg.logging.wandb.entity == "team-a"  # untouched .env value stays

    cfg = load_config(_write(tmp_path, "network:\nlogging:\n", "empty.yaml"), env_file=env)
    assert cfg.network.port == 6000 and cfg.logging.wandb.entity == "team-a"  # empty sections add nothing


def test_env_file_errors_name_the_variable(tmp_path: Path) -> None:
    env = _write(tmp_path, "RULKA_PORT=abc\n", "my.env")
    message = _error(env_file=env)
    assert message.startswith(f"{env} RULKA_PORT: config key `network.port` must be an integer")
    assert "does not exist" in _error(env_file=tmp_path / "missing.env")


def test_default_env_file_is_optional_and_read_from_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config() == RulkaConfig()
    _write(tmp_path, "WANDB_ENTITY=me\n", ".env")
    assert load_config().logging.wandb.entity == "me"
    assert load_config(env_file=None).logging.wandb.entity is None


# ------------------------------------------------------------------ role command helpers, import


def test_add_config_arguments_loads_the_same_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from rulka.config import add_config_arguments, config_from_args

    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "training:\n  batch_size: 64\n")
    parser = argparse.ArgumentParser(prog="rulka-trainer")
    add_config_arguments(parser)
    args = parser.parse_args(["--config", "run.yaml", "--set", "nn.iqn.n=16", "--set", "training.n_steps=5"])
    cfg = config_from_args(args)
    assert (cfg.training.batch_size, cfg.nn.iqn.n, cfg.training.n_steps) == (64, 16, 5)
    assert config_from_args(parser.parse_args([])) == RulkaConfig()


def test_import_reads_nothing(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / ".env").write_text("RULKA_PORT=not-a-number\n")
    code = "import sys, rulka.config, rulka.cli.config; print('dotenv' in sys.modules)"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".env"]
