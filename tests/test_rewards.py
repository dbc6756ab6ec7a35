"""Reward terms and shaping potential, alone and through the pipeline, against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rulka.envs import rewards as R
from rulka.envs.car_state import CarState, yaw_orientation
from rulka.envs.pipeline import PipelineParams, TrackmaniaPipeline
from rulka.envs.reference_line import ReferenceLine

BASE = dict(
    n_zone_centers_in_inputs=3,
    one_every_n_zone_centers_in_inputs=20,
    n_zone_centers_extrapolate_before_start_of_map=20,
    n_zone_centers_extrapolate_after_end_of_map=100,
    n_prev_actions_in_inputs=1,
)


def make(**kw) -> TrackmaniaPipeline:
    p = PipelineParams(**{**BASE, **kw})
    line = ReferenceLine(np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 500.0]]), 0.5, 20, 100, p.road_width)
    return TrackmaniaPipeline(p, line)


def car(z: float, t: int, speed: float = 0.0, x: float = 0.0, yaw: float = 0.0, **kw) -> CarState:
    rot = yaw_orientation(yaw)
    return CarState(position=[x, 0.0, z], orientation=rot, velocity=rot[:, 2] * speed, race_time_ms=t, **kw)


def test_time_penalty_per_action_uses_ms_per_action() -> None:
    pipe = make(ms_per_action=40, constant_reward_per_ms=-0.001, reward_per_m_advanced_along_centerline=0.0)
    pipe.reset(car(0.0, 0))
    for k in range(1, 4):
        _, reward, *_ = pipe.step(car(0.0, 40 * k), 3)
        assert reward == pytest.approx(-0.04)


def test_progress_reward_per_metre_including_backwards() -> None:
    pipe = make(constant_reward_per_ms=0.0, reward_per_m_advanced_along_centerline=0.02)
    pipe.reset(car(0.0, 0))
    _, r1, *_ = pipe.step(car(5.0, 50), 0)
    _, r2, *_ = pipe.step(car(3.5, 100), 6)
    assert r1 == pytest.approx(0.1)
    assert r2 == pytest.approx(-0.03)


def test_speed_gain_bonus() -> None:
    # 1 m/s gained is worth as_if_duration_s = 2 metres at 0.01 per metre -> 0.02 per m/s.
    pipe = make(
        constant_reward_per_ms=0.0,
        reward_per_m_advanced_along_centerline=0.01,
        final_speed_reward_as_if_duration_s=2.0,
    )
    pipe.reset(car(0.0, 0, speed=10.0))
    _, _, _, _, info = pipe.step(car(0.0, 50, speed=15.0), 0)
    assert info["reward/speed"] == pytest.approx(0.02 * 5.0)
    _, _, _, _, info = pipe.step(car(0.0, 100, speed=12.0), 6)
    assert info["reward/speed"] == pytest.approx(-0.02 * 3.0)
    # Reversing (forward velocity < 0) earns nothing, even when speeding up.
    state = car(0.0, 150)
    state.velocity = np.array([0.0, 0.0, -20.0])
    _, _, _, _, info = pipe.step(state, 6)
    assert info["reward/speed"] == 0.0


def test_shaping_potential_distance_and_heading() -> None:
    pipe = make(
        shaped_reward_dist_to_cur_vcp=-0.1,
        shaped_reward_min_dist_to_cur_vcp=2.0,
        shaped_reward_max_dist_to_cur_vcp=25.0,
        shaped_reward_point_to_vcp_ahead=0.5,
    )
    # 5 m beside the centreline at a zone centre, facing along the road: phi = -0.1 * 5.
    _, info = pipe.reset(car(0.0, 0, x=5.0))
    assert info["potential"] == pytest.approx(-0.5)
    # On the line: distance 0 is clamped up to 2 -> -0.2.
    _, _, _, _, info = pipe.step(car(0.0, 50), 0)
    assert info["potential"] == pytest.approx(-0.2)
    # Turned 90 degrees: the road ahead is sideways, forward component 0 -> +0.5 * (0 - 1).
    _, _, _, _, info = pipe.step(car(0.0, 100, yaw=math.pi / 2), 0)
    assert info["potential"] == pytest.approx(-0.2 - 0.5)
    # 40 m away (clamped to 25): only reachable as a potential, not a zone change.
    assert R.potential(
        np.array([40.0, 0, 0]), np.array([40.0, 0, 10]), -0.1, 2.0, 25.0, 0.0
    ) == pytest.approx(-2.5)


def test_shaping_is_not_in_the_step_reward_and_folds_as_gamma_difference() -> None:
    pipe = make(
        constant_reward_per_ms=0.0,
        reward_per_m_advanced_along_centerline=0.0,
        shaped_reward_dist_to_cur_vcp=-0.1,
    )
    _, info0 = pipe.reset(car(0.0, 0, x=10.0))
    _, reward, _, _, info1 = pipe.step(car(0.0, 50, x=4.0), 0)
    assert reward == 0.0
    assert R.shaping_term(info0["potential"], info1["potential"], 0.99, False) == pytest.approx(
        0.99 * -0.4 + 1.0
    )
    assert R.shaping_term(info0["potential"], info1["potential"], 0.99, True) == pytest.approx(1.0)


def test_engineered_rewards_follow_their_schedules() -> None:
    pipe = make(
        constant_reward_per_ms=0.0,
        reward_per_m_advanced_along_centerline=0.0,
        engineered_close_to_vcp_reward_schedule=((0, 0.0), (1000, -0.2)),
        engineered_neoslide_reward_schedule=((0, 0.3),),
        engineered_kamikaze_reward_schedule=((0, 0.0), (100, 1.0)),
        engineered_reward_min_dist_to_cur_vcp=5.0,
        engineered_reward_max_dist_to_cur_vcp=25.0,
    )
    pipe.reset(car(0.0, 0))
    pipe.set_frames_played(500)  # close-to-vcp coefficient -0.1, kamikaze 1.0
    state = car(0.0, 50, x=8.0)
    state.velocity = np.array([3.0, 0.0, 20.0])  # 3 m/s sideways: a neo-slide
    _, _, _, _, info = pipe.step(state, 0)
    assert info["reward/close_to_vcp"] == pytest.approx(-0.1 * 8.0)
    assert info["reward/neoslide"] == pytest.approx(0.3)
    assert info["reward/kamikaze"] == 0.0  # all wheels on the ground
    airborne = car(0.0, 100, wheel_contact=[False, False, False, True])
    _, reward, _, _, info = pipe.step(airborne, 2)  # accelerate + right, one wheel down
    assert info["reward/kamikaze"] == pytest.approx(1.0)
    assert info["reward/close_to_vcp"] == pytest.approx(-0.1 * 5.0)  # 0 m clamped up to 5
    assert reward == pytest.approx(1.0 - 0.5)
    _, _, _, _, info = pipe.step(car(0.0, 150, wheel_contact=[False] * 4), 6)  # braking: no kamikaze
    assert info["reward/kamikaze"] == 0.0


def test_speedslide_quality_and_reward() -> None:
    # At 100 km/h or less the side-friction limit is 80: lateral 4 m/s -> side 80, quality 0;
    # lateral 8 m/s -> side 160 -> quality 1 (perfect slide), reward = coef.
    fwd = 20.0
    assert R.speedslide_quality(4.0, fwd) == 0.0
    assert R.speedslide_quality(8.0, fwd) == pytest.approx(1.0)
    assert R.speedslide_reward(0.5, 8.0, fwd, True) == pytest.approx(0.5)
    assert R.speedslide_reward(0.5, 6.0, fwd, True) == pytest.approx(0.5 * 0.5)  # quality 0.5
    assert R.speedslide_reward(0.5, 8.0, fwd, False) == 0.0
    # At 200 km/h the limit is 75.
    assert R.max_side_friction(200 / 3.6) == pytest.approx(75.0)


def test_schedule_value_interpolates_linearly() -> None:
    knots = ((0, 0.0), (100, 1.0), (300, -1.0))
    assert R.schedule_value(knots, -5) == 0.0
    assert R.schedule_value(knots, 50) == pytest.approx(0.5)
    assert R.schedule_value(knots, 200) == pytest.approx(0.0)
    assert R.schedule_value(knots, 1e9) == -1.0
    assert R.schedule_value(((0, 0.25),), 123) == 0.25
