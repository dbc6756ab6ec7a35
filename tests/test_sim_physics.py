"""Physics sanity of the built-in simulator: engine, brakes, surfaces, turbo, walls, grip."""

from __future__ import annotations

import functools
import math

import pytest

from rulka.envs.sim.physics import DT, GEAR_ACCEL, CarPhysics, Controls
from rulka.envs.sim.tracks import GRASS, WALL, build_track

GAS = Controls(gas=1.0)
BRAKE = Controls(brake=1.0)


def straight(width: float = 16.0, patches: list | None = None, length: float = 400.0, runoff: float = 8.0):
    return build_track({"name": "straight", "width": width, "runoff": runoff,
                        "pieces": [{"straight": length}], "patches": patches or []})


@pytest.fixture(scope="module")
def road():
    return straight()


def speed_after(track, seconds: float, controls: Controls = GAS) -> CarPhysics:
    car = CarPhysics(track)
    car.step(controls, int(round(seconds / DT)))
    return car


def test_first_tick_from_standstill_matches_first_gear_drive(road):
    car = CarPhysics(road)
    car.step(GAS, 1)
    # gear 1 at standstill: 80 % of the peak drive acceleration for one 10 ms tick
    assert car.forward_speed == pytest.approx(GEAR_ACCEL[1] * 0.8 * DT)
    assert car.gear == 1 and car.race_time_ms == 10


def test_accelerating_increases_speed_and_shifts_gears(road):
    car = CarPhysics(road)
    speeds, gears = [], []
    for _ in range(80):  # 4 s
        car.step(GAS, 5)
        speeds.append(car.speed)
        gears.append(car.gear)
    assert all(b >= a - 0.1 for a, b in zip(speeds, speeds[1:]))  # gear shifts cost a little
    assert 25.0 < speeds[-1] < 50.0  # 0-100 km/h in about 2.5 s, like a TrackMania car
    assert gears[0] == 1 and max(gears) >= 3
    assert 1000 <= car.rpm <= 10500


def test_braking_stops_the_car(road):
    car = speed_after(road, 3.0)
    v0 = car.speed
    assert v0 > 25
    z0 = car.z
    ticks = 0
    while car.forward_speed > 0.05 and ticks < 1000:
        car.step(BRAKE, 1)
        ticks += 1
    # braking at about 17-20 m/s^2: v^2 / (2 a) metres, v / a seconds
    assert ticks * DT < v0 / 12.0
    assert car.z - z0 < v0 * v0 / (2 * 12.0)
    car.step(Controls(), 50)
    assert car.speed < 0.5


def test_brake_at_standstill_reverses(road):
    car = CarPhysics(road)
    car.step(BRAKE, 100)
    assert car.forward_speed < -2.0
    assert car.gear == 0


def test_grass_and_dirt_are_slower_than_asphalt():
    full = [{"from": -20, "to": 400, "surface": s} for s in ("grass",)]
    grass = speed_after(straight(patches=full), 4.0).speed
    dirt = speed_after(straight(patches=[{"from": -20, "to": 400, "surface": "dirt"}]), 4.0).speed
    asphalt = speed_after(straight(), 4.0).speed
    assert grass < dirt < asphalt
    assert grass < 0.7 * asphalt


def test_turbo_boosts():
    pad = straight(patches=[{"from": 5, "to": 12, "surface": "turbo"}])
    boosted = speed_after(pad, 3.0)
    plain = speed_after(straight(), 3.0)
    assert boosted.speed > plain.speed + 5.0


def test_wall_stops_car_and_is_never_entered():
    # 40 m of road, then the run-out ends in a wall across the track
    track = straight(length=40.0)
    car = CarPhysics(track)
    top = 0.0
    for _ in range(900):
        car.step(GAS, 1)
        top = max(top, car.speed)
        assert track.cell(car.x, car.z) != WALL
    assert car.wall_hits > 0
    assert car.speed < 0.5 * top


def test_side_wall_keeps_car_on_track():
    track = straight(width=10.0, runoff=0.0)
    car = CarPhysics(track)
    car.step(GAS, 150)
    for _ in range(100):
        car.step(Controls(gas=1.0, steer=1.0), 1)
        assert track.cell(car.x, car.z) != WALL
    assert car.wall_hits > 0
    x0 = track.start_pose[0]
    assert abs(car.x - x0) < 5.0 + 1.0  # half the road width, plus the car's half width


@functools.cache
def wide_track(surface: str | None):
    patches = [{"from": -20, "to": 200, "surface": surface}] if surface else []
    return straight(width=120.0, patches=patches, length=200.0)


def corner(speed: float, surface: str | None = None) -> CarPhysics:
    """Full left lock for up to one second, coasting from ``speed`` m/s on a very wide road."""
    car = CarPhysics(wide_track(surface))
    car.step(Controls(), 1)  # settle the wheels' surface lookup
    car.vx, car.vz = math.sin(car.heading) * speed, math.cos(car.heading) * speed
    for _ in range(100):
        car.step(Controls(steer=1.0), 1)
        if car.sliding:
            break
    return car


def test_cornering_too_fast_slides_slow_does_not():
    slow = corner(7.0)
    fast = corner(40.0)
    assert not slow.sliding
    assert fast.sliding
    assert fast.slip < -1.0  # in a left turn the velocity lags to the right of the heading: a drift outwards


def test_dirt_slides_where_asphalt_grips():
    # full lock at 10 m/s asks for about 14 m/s^2 sideways: asphalt holds 17, dirt only 11
    assert not corner(10.0).sliding
    assert corner(10.0, "dirt").sliding


def test_finish_line_crossing_sets_finish_time():
    track = straight(length=30.0)
    car = CarPhysics(track)
    while not car.finished and car.race_time_ms < 20_000:
        car.step(GAS, 5)
    assert car.finished
    # 30 m from standstill at about 10 m/s^2: roughly 2.4-3 s
    assert 2000 < car.finish_time_ms < 3500
    assert car.finish_time_ms % 10 == 0


def test_heading_convention_left_turn_increases_heading(road):
    car = speed_after(road, 1.0)
    h0 = car.heading
    car.step(Controls(gas=1.0, steer=1.0), 20)
    assert car.heading > h0
    assert math.isclose(car.speed, math.hypot(car.vx, car.vz))



@pytest.mark.parametrize("lateral", [10.5, -14.0])
def test_a_car_crossing_the_finish_on_the_verge_finishes(lateral):
    # road half width 8 m plus an 8 m grass verge: the finish gate spans the block wall to wall, as in
    # TrackMania, so a car on the grass beside the road finishes when it crosses the line
    track = straight(length=30.0)
    sx, sz, heading = track.start_pose
    car = CarPhysics(track)
    car.reset(x=sx + lateral * math.cos(heading), z=sz - lateral * math.sin(heading), heading=heading)
    assert set(car.wheel_codes) == {GRASS}
    while not car.finished and car.race_time_ms < 20_000:
        car.step(GAS, 5)
    assert car.finished
    assert track.finish_line[4] == pytest.approx(16.0)
