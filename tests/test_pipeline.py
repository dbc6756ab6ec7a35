"""TrackmaniaPipeline: observation layout, progress, finish, cut-offs, against hand-computed cases."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from rulka.envs import materials as M
from rulka.envs.actions import ACTION_FLAGS
from rulka.envs.car_state import CarState, yaw_orientation
from rulka.envs.pipeline import (
    PipelineParams,
    TrackmaniaPipeline,
    default_normalization,
    flags_history,
    float_feature_names,
    layout_dim,
    make_reference_line,
    normalization_from_samples,
)
from rulka.envs.reference_line import ReferenceLine
from rulka.errors import ConfigError

SMALL = dict(
    n_zone_centers_in_inputs=4,
    one_every_n_zone_centers_in_inputs=20,
    n_zone_centers_extrapolate_before_start_of_map=20,
    n_zone_centers_extrapolate_after_end_of_map=100,
    distance_between_checkpoints=0.5,
    n_prev_actions_in_inputs=2,
    margin_to_announce_finish_meters=700,
)


def straight_line(length: float, p: PipelineParams) -> ReferenceLine:
    return make_reference_line(np.array([[0.0, 0.0, 0.0], [0.0, 0.0, length]]), p)


def car(z: float, t_ms: int, x: float = 0.0, speed: float = 0.0, yaw: float = 0.0, **kw) -> CarState:
    rot = yaw_orientation(yaw)
    return CarState(
        position=[x, 0.0, z], orientation=rot, velocity=rot[:, 2] * speed, race_time_ms=t_ms, **kw
    )


def block(pipe: TrackmaniaPipeline, obs: np.ndarray, name: str) -> np.ndarray:
    return obs[pipe.slices[name]]


def test_layout_length_matches_float_input_dim_for_two_configs() -> None:
    default = PipelineParams()
    assert layout_dim(default) == 184  # the guide's 27 + 3*40 + 4*5 + 4*4 + 1
    assert len(float_feature_names(default)) == 184
    small = PipelineParams(
        **SMALL, n_contact_material_physics_behavior_types=3, float_input_dim=28 + 8 + 12 + 12
    )
    pipe = TrackmaniaPipeline(small, straight_line(200.0, small))
    obs, _ = pipe.reset(car(0.0, 0))
    assert obs.shape == (60,) and obs.dtype == np.float32
    assert pipe.float_input_dim == small.float_input_dim == len(pipe.feature_names)
    with pytest.raises(ValueError, match="float_input_dim is 190"):
        PipelineParams(float_input_dim=190)


def test_feature_names_follow_the_documented_order() -> None:
    names = float_feature_names(PipelineParams(**SMALL))
    assert names[0] == "mini_race_time"
    assert names[1:5] == [f"prev_action2/{f}" for f in ("accelerate", "brake", "left", "right")]
    assert names[5:9] == [f"prev_action1/{f}" for f in ("accelerate", "brake", "left", "right")]
    assert names[9] == "wheel_sliding/fl" and names[21:25] == [
        "gearbox_state",
        "gear",
        "rpm",
        "gearbox_counter",
    ]
    assert names[25] == "material/fl/asphalt" and names[28] == "material/fl/turbo"
    assert names[-2:] == ["distance_to_finish", "freewheeling"]
    assert names[-14:-11] == ["zone0/lateral", "zone0/up", "zone0/forward"]


def test_straight_line_zone_centres_and_progress() -> None:
    p = PipelineParams(**SMALL)
    pipe = TrackmaniaPipeline(p, straight_line(1000.0, p))
    obs, info = pipe.reset(car(0.0, 0))
    assert info["zone"] == 20 and info["progress_m"] == pytest.approx(0.0)
    # Zone centres every 20 * 0.5 = 10 m straight ahead.
    np.testing.assert_allclose(
        block(pipe, obs, "zones").reshape(4, 3), [[0, 0, 0], [0, 0, 10], [0, 0, 20], [0, 0, 30]]
    )
    assert obs[0] == 0.0  # mini-race slot: left for the memory

    obs, reward, term, trunc, info = pipe.step(car(2.6, 50, speed=52.0), 0)
    assert (term, trunc) == (False, False)
    assert info["zone"] == 25  # nearest centre to z=2.6 is 2.5
    assert info["progress_m"] == pytest.approx(2.6) and info["progress_delta_m"] == pytest.approx(2.6)
    # Centres seen from z = 2.6: 2.5, 12.5, 22.5, 32.5.
    np.testing.assert_allclose(
        block(pipe, obs, "zones").reshape(4, 3)[:, 2], [-0.1, 9.9, 19.9, 29.9], atol=1e-5
    )
    np.testing.assert_allclose(block(pipe, obs, "velocity"), [0, 0, 52.0], atol=1e-5)
    np.testing.assert_allclose(block(pipe, obs, "world_up"), [0, 1, 0])
    # Default rewards: -6/5000 per ms over 50 ms, +5/500 per metre over 2.6 m.
    assert info["reward/time"] == pytest.approx(-0.06)
    assert info["reward/progress"] == pytest.approx(0.026)
    assert reward == pytest.approx(-0.06 + 0.026)


def test_circle_zone_centres_in_car_frame_and_arc_progress() -> None:
    radius = 40.0
    p = PipelineParams(**SMALL)
    t = np.linspace(0.0, math.pi, 4000)
    pts = np.stack([radius * (1 - np.cos(t)), np.zeros_like(t), radius * np.sin(t)], axis=1)
    line = ReferenceLine(pts, 0.5, 20, 100)
    pipe = TrackmaniaPipeline(p, line)
    pipe.reset(car(0.0, 0))
    theta = 0.5  # car on the line, heading along the tangent (yaw = theta turns toward +x)
    pos = np.array([radius * (1 - math.cos(theta)), 0.0, radius * math.sin(theta)])
    state = CarState(position=pos, orientation=yaw_orientation(theta), race_time_ms=50)
    obs, _, _, _, info = pipe.step(state, 1)
    assert info["progress_m"] == pytest.approx(radius * theta, abs=0.01)
    zones = block(pipe, obs, "zones").reshape(4, 3)
    # Centre k of the obs sits alpha_k further along the arc; by hand, in the car frame it is
    # (lateral, up, forward) = (R (1 - cos a), 0, R sin a), with the circle's centre on the left.
    zone_arc = (info["zone"] - line.start_zone) * line.spacing
    for k in range(4):
        alpha = (zone_arc + k * 10.0 * line.spacing / 0.5) / radius - theta
        expected = [radius * (1 - math.cos(alpha)), 0.0, radius * math.sin(alpha)]
        np.testing.assert_allclose(zones[k], expected, atol=0.02)


def test_finish_crossing_terminates_and_counts_only_time_in_race() -> None:
    p = PipelineParams(**SMALL)
    pipe = TrackmaniaPipeline(p, straight_line(100.0, p))
    pipe.reset(car(0.0, 0))
    for k in range(1, 34):  # drive to z = 99 in 3 m steps, 50 ms each
        _, _, _, _, info = pipe.step(car(3.0 * k, 50 * k, speed=60.0), 0)
    assert info["distance_to_finish_m"] == pytest.approx(1.0)
    # The next centres in the inputs lie on the extrapolated line after the finish.
    obs = pipe.observe(car(99.0, 1650))
    np.testing.assert_allclose(
        block(pipe, obs, "zones").reshape(4, 3)[:, 2], [0.0, 10.0, 20.0, 30.0], atol=1e-6
    )
    # The car crosses at 1675 ms and is at z = 101 at the end of the action.
    obs, reward, term, trunc, info = pipe.step(car(101.0, 1675, speed=40.0, finished=True), 0)
    assert (term, trunc) == (True, False)
    assert info["progress_m"] == pytest.approx(100.0)  # capped at the finish
    assert info["reward/progress"] == pytest.approx(0.01 * 1.0)
    assert info["reward/time"] == pytest.approx(-0.0012 * 25)
    assert info["zone"] > pipe.line.finish_zone  # tracked into the extrapolated zones
    assert block(pipe, obs, "distance_to_finish")[0] == pytest.approx(0.0)
    # The game may report the finish a little before the line's end: the rest is credited.
    pipe.reset(car(0.0, 0))
    for k in range(1, 34):
        pipe.step(car(3.0 * k, 50 * k), 0)
    *_, term, _, info = pipe.step(car(99.5, 1660, finished=True), 0)
    assert term and info["progress_delta_m"] == pytest.approx(1.0)


def test_driving_past_the_finish_without_finishing_earns_no_progress() -> None:
    """Issue 17's stall: the simulator lets a car go round the finish line on the verge (greedy
    PPO crossed the finish plane 13 m off-centre on grass, half-width 8 m) and on into the run-out,
    where the extrapolated zones went on paying progress up to 59 m past the finish. Progress stops
    at the finish unless the backend reports the race finished."""
    p = PipelineParams(**SMALL)
    pipe = TrackmaniaPipeline(p, straight_line(100.0, p))
    pipe.reset(car(0.0, 0))
    for k in range(1, 34):  # z = 99 in 3 m steps
        pipe.step(car(3.0 * k, 50 * k), 0)
    *_, info = pipe.step(car(102.0, 1700), 0)  # 2 m past the line, not finished
    assert info["progress_m"] == pytest.approx(100.0)
    assert info["reward/progress"] == pytest.approx(0.01 * 1.0)  # only the metre up to the line
    obs, _, term, _, info = pipe.step(car(130.0, 1750), 0)  # on down the run-out
    assert not term
    assert info["progress_delta_m"] == 0.0 and info["reward/progress"] == 0.0
    assert block(pipe, obs, "distance_to_finish")[0] == pytest.approx(0.0)


def test_distance_to_finish_capped_at_margin() -> None:
    p = PipelineParams(**{**SMALL, "margin_to_announce_finish_meters": 700})
    pipe = TrackmaniaPipeline(p, straight_line(1000.0, p))
    obs, _ = pipe.reset(car(0.0, 0))
    assert block(pipe, obs, "distance_to_finish")[0] == pytest.approx(700.0)  # 1000 m left
    z = 0.0
    for k in range(1, 41):  # drive to z = 400 in 10 m steps (within reach of the zone search)
        z = 10.0 * k
        obs, *_ = pipe.step(car(z, 50 * k), 0)
    assert block(pipe, obs, "distance_to_finish")[0] == pytest.approx(600.0)


def test_cutoff_when_no_checkpoint_is_passed() -> None:
    p = PipelineParams(**SMALL, cutoff_rollout_if_no_vcp_passed_within_duration_ms=2000)
    pipe = TrackmaniaPipeline(p, straight_line(500.0, p))
    pipe.reset(car(0.0, 0))
    # Creeping forward 0.1 m per action: a new zone (0.5 m) every 5 actions, never cut.
    for k in range(1, 60):
        *_, trunc, info = pipe.step(car(0.1 * k, 50 * k), 0)
        assert not trunc
    last = 50 * 59
    # Standing still from here: the last zone gain happened at or before `last`.
    gained_at = last - 50 * ((59 - 3) % 5)  # zones change when z crosses x.25 / x.75
    steps = 0
    while True:
        steps += 1
        t = last + 50 * steps
        *_, trunc, info = pipe.step(car(0.1 * 59, t), 3)
        if trunc:
            break
    assert info["cutoff"] == "no_progress"
    assert t - gained_at > 2000 and t - 50 - gained_at <= 2000


def test_cutoff_at_max_race_duration() -> None:
    p = PipelineParams(**SMALL, cutoff_rollout_if_race_not_finished_within_duration_ms=1000)
    pipe = TrackmaniaPipeline(p, straight_line(500.0, p))
    pipe.reset(car(0.0, 0))
    for k in range(1, 20):
        *_, term, trunc, info = pipe.step(car(2.0 * k, 50 * k), 0)
        if k < 20 and 50 * k < 1000:
            assert not trunc
    *_, term, trunc, info = pipe.step(car(40.0, 1000), 0)
    assert trunc and not term and info["cutoff"] == "max_duration"
    # Finishing on the very last allowed step is a finish, not a cut-off.
    pipe.reset(car(0.0, 0))
    *_, term, trunc, info = pipe.step(car(3.0, 1000, finished=True), 0)
    assert term and not trunc and info["cutoff"] == ""


def test_previous_action_flags_oldest_first() -> None:
    p = PipelineParams(**{**SMALL, "n_prev_actions_in_inputs": 3})
    pipe = TrackmaniaPipeline(p, straight_line(500.0, p))
    obs, _ = pipe.reset(car(0.0, 0))
    # Before any action: "accelerate" padding.
    np.testing.assert_array_equal(block(pipe, obs, "prev_actions"), [1, 0, 0, 0] * 3)
    obs, *_ = pipe.step(car(1.0, 50), 7)  # brake + left
    np.testing.assert_array_equal(block(pipe, obs, "prev_actions"), [1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0])
    obs, *_ = pipe.step(car(2.0, 100), 11)  # brake + accelerate + right
    obs, *_ = pipe.step(car(3.0, 150), 3)  # nothing
    expected = np.concatenate([ACTION_FLAGS[7], ACTION_FLAGS[11], ACTION_FLAGS[3]])
    np.testing.assert_array_equal(block(pipe, obs, "prev_actions"), expected)
    np.testing.assert_array_equal(flags_history([7, 11, 3], 3), expected)
    # A continuous action is recorded as analog flags: steer -0.5 = half left.
    obs, *_ = pipe.step(car(4.0, 200), np.array([0.75, 0.0, -0.5]))
    np.testing.assert_allclose(block(pipe, obs, "prev_actions")[-4:], [0.75, 0.0, 0.5, 0.0])


def test_material_one_hot_and_wheel_blocks() -> None:
    p = PipelineParams(**SMALL)
    pipe = TrackmaniaPipeline(p, straight_line(500.0, p))
    state = car(
        0.0,
        0,
        wheel_material=[M.ASPHALT, M.GRASS, M.TURBO, M.ICE],
        wheel_contact=[True, True, True, True],
        wheel_sliding=[False, True, False, True],
        gear=3,
        rpm=6500.0,
        is_freewheeling=True,
    )
    obs, _ = pipe.reset(state)
    np.testing.assert_array_equal(
        block(pipe, obs, "material").reshape(4, 4),
        [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]],  # ice is "other": all zeros
    )
    np.testing.assert_array_equal(block(pipe, obs, "wheel_sliding"), [0, 1, 0, 1])
    assert block(pipe, obs, "gear")[0] == 3 and block(pipe, obs, "rpm")[0] == 6500
    assert block(pipe, obs, "freewheeling")[0] == 1.0
    # An airborne wheel shows no surface even if the backend still reports one.
    state.wheel_contact = np.array([False, True, True, True])
    obs = pipe.observe(state)
    np.testing.assert_array_equal(block(pipe, obs, "material")[:4], [0, 0, 0, 0])
    np.testing.assert_array_equal(block(pipe, obs, "wheel_contact"), [0, 1, 1, 1])


def test_gearbox_counter_counts_steps_while_shifting() -> None:
    p = PipelineParams(**SMALL)
    pipe = TrackmaniaPipeline(p, straight_line(500.0, p))
    pipe.reset(car(0.0, 0))
    values = []
    for k, gb in enumerate([1, 1, 1, 0, 2], start=1):
        obs, *_ = pipe.step(car(1.0 * k, 50 * k, gearbox_state=gb), 0)
        values.append(float(block(pipe, obs, "gearbox_counter")[0]))
    assert values == [1, 2, 3, 0, 1]


def test_angular_velocity_and_velocity_in_car_frame() -> None:
    p = PipelineParams(**SMALL)
    pipe = TrackmaniaPipeline(p, straight_line(500.0, p))
    # Car heading +x (yaw 90 degrees): its forward is world +x, its lateral is world -z.
    state = CarState(
        orientation=yaw_orientation(math.pi / 2), velocity=[30.0, 0.0, 4.0], angular_velocity=[0.0, 0.7, 0.0]
    )
    obs, _ = pipe.reset(state)
    np.testing.assert_allclose(block(pipe, obs, "velocity"), [-4.0, 0.0, 30.0], atol=1e-5)
    np.testing.assert_allclose(block(pipe, obs, "angular_velocity"), [0.0, 0.7, 0.0], atol=1e-6)


def test_normalize_uses_config_vectors_and_defaults_fit_layout() -> None:
    dim = layout_dim(PipelineParams(**SMALL))
    mean = tuple(float(i) for i in range(dim))
    std = tuple(2.0 for _ in range(dim))
    p = PipelineParams(**SMALL, float_inputs_mean=mean, float_inputs_std=std)
    pipe = TrackmaniaPipeline(p, straight_line(500.0, p))
    obs, _ = pipe.reset(car(0.0, 0))
    np.testing.assert_allclose(pipe.normalize(obs), (obs - np.arange(dim)) / 2.0, rtol=1e-6)
    batch = np.stack([obs, obs])
    assert pipe.normalize(batch).shape == (2, dim)
    m, s = default_normalization(PipelineParams())
    assert m.shape == s.shape == (184,) and (s > 0).all()
    assert m[0] == pytest.approx(70.0) and m[-2] == pytest.approx(700.0)
    with pytest.raises(ValueError, match="has 3 values"):
        PipelineParams(float_inputs_mean=(1.0, 2.0, 3.0))
    samples = np.array([[0.0, 1.0], [2.0, 1.0]])
    m2, s2 = normalization_from_samples(samples)
    np.testing.assert_allclose(m2, [1.0, 1.0])
    np.testing.assert_allclose(s2, [1.0, 0.01])


def test_bad_car_state_truncates_and_is_counted() -> None:
    p = PipelineParams(**SMALL)
    pipe = TrackmaniaPipeline(p, straight_line(500.0, p))
    first, _ = pipe.reset(car(0.0, 0))
    obs, reward, term, trunc, info = pipe.step(car(float("nan"), 50), 0)
    assert trunc and not term and reward == 0.0 and info["cutoff"] == "bad_car_state"
    assert np.isfinite(obs).all()
    assert pipe.counters["bad_car_state"] == 1
    np.testing.assert_array_equal(obs, first)  # the last good observation
    # The episode context was not corrupted: the next good state continues normally.
    _, _, _, trunc, info = pipe.step(car(1.0, 100), 0)
    assert not trunc and info["progress_m"] == pytest.approx(1.0)
    bad = car(0.0, 0)
    bad.velocity = np.array([0.0, 0.0, np.nan])
    with pytest.raises(ValueError, match="NaN or infinite"):
        pipe.reset(bad)


def test_step_before_reset_is_an_error() -> None:
    p = PipelineParams(**SMALL)
    pipe = TrackmaniaPipeline(p, straight_line(500.0, p))
    with pytest.raises(RuntimeError, match="before reset"):
        pipe.step(car(0.0, 0), 0)


def test_from_config_reads_the_typed_sections() -> None:
    cfg = {
        "environment": {
            "tm_engine_step_per_action": 4,
            "ms_per_tm_engine_step": 10,
            "n_zone_centers_in_inputs": 10,
            "n_prev_actions_in_inputs": 3,
            "sync_virtual_and_real_checkpoints": False,
        },
        "rewards": {
            "constant_reward_per_ms": -0.002,
            "engineered_neoslide_reward_schedule": [[0, 0.0], [1000, 1.0]],
        },
        "training": {"global_schedule_speed": 2.0},
        "nn": {"float_input_dim": 28 + 12 + 16 + 30},
    }
    p = PipelineParams.from_config(cfg)
    assert p.ms_per_action == 40 and p.n_zone_centers_in_inputs == 10 and p.n_prev_actions_in_inputs == 3
    assert p.constant_reward_per_ms == -0.002 and p.sync_virtual_and_real_checkpoints is False
    assert p.mini_race_actions == 7000 // 40
    # the schedule's frames are stretched by training.global_schedule_speed
    assert p.engineered_neoslide_reward_schedule == ((0.0, 0.0), (2000.0, 1.0))
    multi = {"environment": {"rl_action_offsets_ms": [0, 10, 20]}}
    assert PipelineParams.from_config(multi).ms_per_action == 10  # multi-action runs 10 ms steps
    with pytest.raises(ConfigError, match="float_input_dim"):
        PipelineParams.from_config({**cfg, "nn": {"float_input_dim": 184}})
    with pytest.raises(ConfigError, match="n_zone_centers_extrapolate_before_start_of_map"):
        PipelineParams.from_config({"environment": {"n_zone_centers_extrapolate_before_start_of_map": 0}})


def test_defaults_are_the_config_models() -> None:
    from rulka.config import RulkaConfig

    built, derived = PipelineParams(), PipelineParams.from_config(RulkaConfig())
    assert built.mini_race_actions == derived.mini_race_actions and layout_dim(built) == derived.float_input_dim
    assert dataclasses.replace(derived, temporal_mini_race_duration_actions=None, float_input_dim=None) == built


@pytest.mark.parametrize(
    "environment",
    [
        {},
        {
            "n_zone_centers_in_inputs": 12,
            "n_prev_actions_in_inputs": 3,
            "n_contact_material_physics_behavior_types": 2,
        },
    ],
)
def test_observation_length_equals_run_config_float_input_dim(environment: dict) -> None:
    from rulka.config import config_from_dict

    cfg = config_from_dict({"environment": environment})
    p = PipelineParams.from_config(cfg)
    pipe = TrackmaniaPipeline(p, straight_line(300.0, p))
    obs, _ = pipe.reset(car(0.0, 0))
    assert obs.shape == (cfg.float_input_dim,) == (p.float_input_dim,)
    assert p.ms_per_action == cfg.environment.ms_per_action
    assert p.shaped_reward_dist_to_cur_vcp == cfg.rewards.shaped_reward_dist_to_cur_vcp


def test_make_reference_line_follows_params_and_sync_flag() -> None:
    pts = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 100.0]])
    cps = np.array([[0.0, 0.0, 50.0]])
    on = PipelineParams(**SMALL)
    line = make_reference_line(pts, on, cps)
    assert line.start_zone == 20 and line.n_zones == 20 + 201 + 100
    assert line.checkpoint_zones.tolist() == [20 + 100]
    off = PipelineParams(**SMALL, sync_virtual_and_real_checkpoints=False)
    assert make_reference_line(pts, off, cps).checkpoint_zones.tolist() == []


def test_reset_starts_a_fresh_episode() -> None:
    p = PipelineParams(**SMALL, cutoff_rollout_if_no_vcp_passed_within_duration_ms=500)
    pipe = TrackmaniaPipeline(p, straight_line(500.0, p))
    first, _ = pipe.reset(car(0.0, 0))
    for k in range(1, 6):
        pipe.step(car(5.0 * k, 50 * k, gearbox_state=1), 8)
    again, info = pipe.reset(car(0.0, 0))
    np.testing.assert_array_equal(again, first)  # action history, gearbox counter, zone: all new
    assert info["zone"] == pipe.line.start_zone and info["furthest_zone"] == pipe.line.start_zone
    # The no-progress clock restarts with the episode.
    *_, trunc, _ = pipe.step(car(0.0, 500), 0)
    assert not trunc
    *_, trunc, info = pipe.step(car(0.0, 550), 0)
    assert trunc and info["cutoff"] == "no_progress"
    assert pipe.counters["episodes"] == 2
