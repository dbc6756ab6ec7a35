"""The scripted driver finishes every bundled track and sets its reference time."""

from __future__ import annotations

import pytest

from rulka.envs.sim.driver import drive, speed_plan
from rulka.envs.sim.tracks import build_track, bundled_track_names, get_track


@pytest.mark.parametrize("name", bundled_track_names())
def test_driver_finishes_bundled_track_at_reference_time(name):
    track = get_track(name)
    result = drive(track, discrete=True)
    assert result["finished"], f"scripted driver did not finish {name}"
    # the stored reference time is what the driver achieves; re-run `rulka sim reference` after
    # a change to the physics or the driver
    assert result["race_time_ms"] == pytest.approx(track.reference_time_ms, rel=0.02)


def test_continuous_driver_finishes_and_records_trace():
    track = get_track("hairpins")
    result = drive(track, discrete=False, record=True)
    assert result["finished"]
    trace = result["trace"]
    assert trace.shape[1] == 3 and len(trace) == pytest.approx(result["race_time_ms"] / 50, abs=2)
    assert trace[:, 2].max() > 20.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_driver_finishes_generated_tracks(seed):
    assert drive(get_track(f"gen:{seed}"))["finished"]


def test_speed_plan_brakes_before_a_corner():
    track = build_track({"name": "c", "pieces": [{"straight": 150}, {"turn": 90, "radius": 15}, {"straight": 30}]})
    plan = speed_plan(track)
    corner_start = track.start_index + int(150 / 0.5)
    apex = corner_start + int(0.5 * 15 * 3.1416 / 2 / 0.5)
    assert plan[apex] < 20.0
    assert plan[track.start_index + 20] > plan[corner_start] > plan[apex]


@pytest.mark.slow
def test_driver_finishes_many_generated_tracks():
    failures = [s for s in range(30) if not drive(get_track(f"gen:{s}"))["finished"]]
    assert not failures, f"generated tracks the scripted driver cannot finish: {failures}"
