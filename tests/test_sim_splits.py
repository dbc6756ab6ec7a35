"""``rulka sim splits``: a policy's split times against the scripted driver (rulka.envs.sim.splits)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_eval import ReplayActor  # noqa: F401 - the policy files below name it

from rulka.cli import main
from rulka.envs.actions import discrete_to_flags, flags_to_discrete
from rulka.envs.sim.env import SimTrackEnv
from rulka.envs.sim.policy import save_policy
from rulka.envs.sim.splits import Race, Sample, sector_driving, splits, time_at

COAST = flags_to_discrete(np.zeros(4, np.float32))  # no key pressed


def _driver_actions(track: str) -> list[int]:
    from rulka.envs.sim.driver import ScriptedDriver

    env = SimTrackEnv(track=track, image=False)
    env.reset(seed=0)
    driver = ScriptedDriver(env.track)
    actions = []
    for _ in range(2000):
        actions.append(driver.action(env.car))
        _, _, terminated, truncated, _ = env.step(actions[-1])
        if terminated or truncated:
            return actions
    raise AssertionError("the driver did not finish")


def _policy(path: Path, actions: list[int], track: str = "slalom") -> Path:
    run_config = {"environment": {"track": track}, "nn": {"vis": {"no_image": True}}}
    return save_policy(path, {"actions": np.asarray(actions, np.int64)},
                       {"actor": "test_eval:ReplayActor", "kwargs": {}, "run_config_json": json.dumps(run_config)})


def _splits_json(capsys, *args: str) -> dict:
    assert main(["sim", "splits", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_time_at_a_mark_is_interpolated_inside_the_action_that_crossed_it():
    samples = [Sample(0, 0, 0), Sample(50, 1, 10), Sample(100, 3, 20)]
    assert time_at(samples, 2) == pytest.approx((75.0, 15.0))
    assert time_at(samples, 1) == pytest.approx((50.0, 10.0))
    assert time_at(samples, 3.5) is None


def test_sectors_add_up_to_the_gap_and_stop_where_the_policy_stopped():
    ref = Race((Sample(0, 0, 0), Sample(1000, 10, 10), Sample(2000, 20, 10)), True, 2000, 0)
    pol = Race((Sample(0, 0, 0), Sample(1500, 10, 8), Sample(2500, 20, 10)), True, 2500, 0)
    rows = splits(ref, pol, 10, 20)
    assert [r["mark_m"] for r in rows] == [10, 20] and rows[-1]["finish"]
    assert [r["gap_s"] for r in rows] == [0.5, 0.5] and [r["sector_s"] for r in rows] == [0.5, 0.0]
    stuck = Race((Sample(0, 0, 0), Sample(1000, 5, 5)), False, None, 0)
    rows = splits(ref, stuck, 4, 20)
    assert [r["mark_m"] for r in rows] == [4, 8] and rows[-1]["policy_s"] is None and rows[-1]["gap_s"] is None


def test_a_policy_that_drives_as_the_driver_splits_as_the_driver(tmp_path, capsys):
    path = _policy(tmp_path / "policy.safetensors", _driver_actions("slalom"))
    out = _splits_json(capsys, "--policy", str(path), "--every", "40")
    assert out["track"] == "slalom" and out["policy"] == out["driver"]
    assert out["splits"][-1]["finish"] and len(out["splits"]) >= 5
    assert all(r["gap_s"] == 0 and r["policy_s"] == r["reference_s"] for r in out["splits"])


def test_a_late_start_shows_as_a_gap_from_the_first_sector(tmp_path, capsys):
    actions = _driver_actions("slalom")
    path = _policy(tmp_path / "policy.safetensors", [COAST] * 20 + actions)  # one second without gas first
    out = _splits_json(capsys, "--policy", str(path), "--every", "40")
    first = out["splits"][0]
    assert first["sector_s"] > 0.5 and first["gap_s"] == first["sector_s"]
    assert all(r["gap_s"] > 0.5 for r in out["splits"] if r["gap_s"] is not None)
    # the table says where the most time went
    assert main(["sim", "splits", "--policy", str(path), "--every", "40"]) == 0
    text = capsys.readouterr().out
    assert "slalom: policy" in text and "most time lost in the sector ending at 40 m" in text
    assert main(["sim", "splits", "--policy", str(path), "--every", "0"]) != 0  # a clear error, not a hang


def test_sector_driving_counts_the_actions_that_ended_inside_the_sector():
    samples = [Sample(0, 0, 0), Sample(50, 5, 10, brake=False, gear=1), Sample(100, 10, 8, brake=True, sliding=True, gear=2),
               Sample(150, 15, 6, brake=True, gear=1), Sample(200, 20, 9, sliding=True, gear=2)]
    # (5, 15]: the actions that ended at 10 m and 15 m; the start mark belongs to the sector before
    assert sector_driving(samples, 5, 15) == {"actions": 2, "brake_actions": 2, "sliding_share": 0.5,
                                              "min_speed": 6, "min_gear": 1}
    assert sector_driving(samples, 15, None) == {"actions": 1, "brake_actions": 0, "sliding_share": 1.0,
                                                 "min_speed": 9, "min_gear": 2}
    assert sector_driving(samples, 20, None) is None


def test_the_sectors_say_where_each_race_braked_and_slid(tmp_path, capsys):
    actions = _driver_actions("hairpins")
    path = _policy(tmp_path / "policy.safetensors", actions, track="hairpins")
    out = _splits_json(capsys, "--policy", str(path), "--every", "50")
    rows = out["splits"]
    assert all(r["policy_driving"] == r["reference_driving"] for r in rows)
    brakes = sum(1 for a in actions if discrete_to_flags(a)[1] > 0.5)
    assert brakes > 0 and sum(r["policy_driving"]["brake_actions"] for r in rows) == brakes
    assert sum(r["policy_driving"]["actions"] for r in rows) == len(actions)
    # a race that skips the brakes (brake actions driven as coasting) shows none there, and is faster at the mark
    coast = _policy(tmp_path / "coast.safetensors",
                    [COAST if discrete_to_flags(a)[1] > 0.5 else a for a in actions], track="hairpins")
    out = _splits_json(capsys, "--policy", str(coast), "--every", "50")
    first_braking = next(r for r in out["splits"] if r["reference_driving"]["brake_actions"])
    assert first_braking["policy_driving"]["brake_actions"] == 0
    assert first_braking["policy_speed"] > first_braking["reference_speed"]
    assert main(["sim", "splits", "--policy", str(path), "--every", "50"]) == 0
    text = capsys.readouterr().out
    assert "brake actions, % of actions sliding, lowest speed (m/s), lowest gear" in text
