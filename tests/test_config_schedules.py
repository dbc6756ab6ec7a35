"""Schedules: values at knots, between knots (hand-computed), outside them, and speed scaling."""

from __future__ import annotations

import math

import pytest

from rulka.config import config_from_dict, exponential_schedule, linear_schedule, staircase_schedule
from rulka.errors import ConfigError

EPS = [(0, 1.0), (50_000, 1.0), (300_000, 0.1), (3_000_000, 0.03)]


def test_linear_at_knots_between_and_outside() -> None:
    # the guide's example: (0, 1.0), (1000, 0.5), (2000, 0.1)
    knots = [(0, 1.0), (1000, 0.5), (2000, 0.1)]
    assert linear_schedule(knots, 0) == 1.0
    assert linear_schedule(knots, 1000) == 0.5
    assert linear_schedule(knots, 500) == pytest.approx(0.75)
    assert linear_schedule(knots, 1500) == pytest.approx(0.3)
    assert linear_schedule(knots, 2000) == pytest.approx(0.1)
    assert linear_schedule(knots, 10**9) == pytest.approx(0.1)
    assert linear_schedule([(100, 2.0), (200, 4.0)], 0) == 2.0  # before the first knot


def test_linear_default_epsilon_between_knots() -> None:
    # 175k is halfway from 50k (1.0) to 300k (0.1): 0.55
    assert linear_schedule(EPS, 175_000) == pytest.approx(0.55)
    # 1_650_000 is halfway from 300k (0.1) to 3M (0.03): 0.065
    assert linear_schedule(EPS, 1_650_000) == pytest.approx(0.065)
    assert linear_schedule(EPS, 25_000) == 1.0


def test_repeated_frame_is_a_step_taken_by_the_later_knot() -> None:
    knots = [(0, 1.0), (100, 1.0), (100, 0.5), (200, 0.0)]
    assert linear_schedule(knots, 99.999) == pytest.approx(1.0)
    assert linear_schedule(knots, 100) == 0.5
    assert linear_schedule(knots, 150) == pytest.approx(0.25)


def test_exponential_is_geometric_between_knots() -> None:
    knots = [(0, 1e-3), (3_000_000, 5e-5), (12_000_000, 5e-5), (15_000_000, 1e-5)]
    assert exponential_schedule(knots, 0) == pytest.approx(1e-3)
    assert exponential_schedule(knots, 3_000_000) == pytest.approx(5e-5)
    # halfway: geometric mean sqrt(1e-3 * 5e-5)
    assert exponential_schedule(knots, 1_500_000) == pytest.approx(math.sqrt(1e-3 * 5e-5))
    # one third of the way: 1e-3 * (0.05) ** (1/3)
    assert exponential_schedule(knots, 1_000_000) == pytest.approx(1e-3 * 0.05 ** (1 / 3))
    assert exponential_schedule(knots, 7_000_000) == pytest.approx(5e-5)
    assert exponential_schedule(knots, 13_500_000) == pytest.approx(math.sqrt(5e-5 * 1e-5))
    assert exponential_schedule(knots, 10**10) == pytest.approx(1e-5)


def test_staircase_holds_the_last_reached_value() -> None:
    knots = [(0, ""), (6_000_000, "_2"), (15_000_000, "_3")]
    assert staircase_schedule(knots, 0) == ""
    assert staircase_schedule(knots, 5_999_999) == ""
    assert staircase_schedule(knots, 6_000_000) == "_2"
    assert staircase_schedule(knots, 14_000_000) == "_2"
    assert staircase_schedule(knots, 10**9) == "_3"
    assert staircase_schedule([(10, "a"), (20, "b")], 0) == "a"


def test_config_schedules_follow_their_rule() -> None:
    cfg = config_from_dict({})
    assert cfg.lr_at(1_500_000) == pytest.approx(math.sqrt(1e-3 * 5e-5))  # exponential
    assert cfg.gamma_at(2_000_000) == pytest.approx(0.9995)  # linear from 0.999 to 1
    assert cfg.epsilon_at(175_000) == pytest.approx(0.55)
    assert cfg.epsilon_boltzmann_at(1_500_000) == pytest.approx(0.09)  # 0.15 -> 0.03 over 3M
    assert cfg.memory_size_at(0) == (50_000, 20_000)
    assert cfg.memory_size_at(6_000_000) == (100_000, 75_000)  # staircase, no interpolation
    assert cfg.memory_size_at(7_000_000) == (200_000, 150_000)
    assert cfg.tensorboard_suffix_at(20_000_000) == "_3"
    assert cfg.engineered_reward_at("speedslide", 10**6) == 0.0


def test_global_schedule_speed_scales_every_frame_count() -> None:
    cfg = config_from_dict({"training": {"global_schedule_speed": 2.0}})
    assert cfg.epsilon_at(350_000) == pytest.approx(0.55)  # 175k doubled
    assert cfg.lr_at(3_000_000) == pytest.approx(math.sqrt(1e-3 * 5e-5))
    assert cfg.memory_size_at(12_000_000) == (100_000, 75_000)  # 5M doubled is 10M; 7M doubled is 14M
    assert cfg.tensorboard_suffix_at(11_999_999) == ""
    assert cfg.tensorboard_suffix_at(12_000_000) == "_2"
    slow = config_from_dict({"training": {"global_schedule_speed": 0.5}})
    assert slow.epsilon_at(87_500) == pytest.approx(0.55)
    # the stored knots stay as written, so saving and reloading does not scale twice
    assert cfg.training.lr_schedule[1][0] == 3_000_000
    assert cfg.scaled_knots("training.lr_schedule")[1][0] == 6_000_000


def test_on_policy_schedules_fall_back_to_their_scalar() -> None:
    cfg = config_from_dict(
        {"ppo": {"ent_coef": 0.02}, "grpo": {"grpo_ref_kl_coef_schedule": [[0, 0.0], [1000, 1.0]]}}
    )
    assert cfg.ppo_ent_coef_at(123) == 0.02
    assert cfg.grpo_ref_kl_coef_at(250) == pytest.approx(0.25)
    assert cfg.dpo_beta_at(10**9) == 0.1


def test_policy_rollout_gamma_precedence() -> None:
    assert config_from_dict({}).policy_rollout_gamma_at(0) == 0.99  # ppo.gamma
    assert config_from_dict({"training": {"policy_rollout_gamma": 0.9}}).policy_rollout_gamma_at(0) == 0.9
    cfg = config_from_dict(
        {
            "training": {"policy_rollout_gamma": 0.9},
            "ppo": {"ppo_gamma_schedule": [[0, 0.5], [100, 0.7]]},
        }
    )
    assert cfg.policy_rollout_gamma_at(50) == pytest.approx(0.6)
    cfg = config_from_dict(
        {
            "training": {"policy_rollout_gamma_schedule": [[0, 0.8], [100, 1.0]]},
            "ppo": {"ppo_gamma_schedule": [[0, 0.5], [100, 0.7]]},
        }
    )
    assert cfg.policy_rollout_gamma_at(50) == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (
            {"training": {"lr_schedule": []}},
            "`training.lr_schedule` is invalid: a schedule needs at least one",
        ),
        (
            {"exploration": {"epsilon_schedule": [[100, 0.5], [50, 0.1]]}},
            "`exploration.epsilon_schedule` is invalid: knots must be sorted by frame",
        ),
        (
            {"training": {"lr_schedule": [[0, 0.0]]}},
            "`training.lr_schedule` is invalid: knot 0: value must be > 0",
        ),
        (
            {"exploration": {"epsilon_schedule": [[0, 1.5]]}},
            "`exploration.epsilon_schedule` is invalid: knot 0",
        ),
        ({"training": {"gamma_schedule": [[-5, 0.99]]}}, "`training.gamma_schedule[0][0]`"),
        ({"training": {"gamma_schedule": [[0]]}}, "`training.gamma_schedule[0]` has too few items"),
        ({"memory": {"memory_size_schedule": [[0, 5000]]}}, "`memory.memory_size_schedule[0][1]`"),
    ],
)
def test_bad_knots_name_the_key(data: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict(data)
    assert needle in str(exc.value)
