"""The fast, hand-inlined ``CarPhysics.step`` agrees with the plainly written reference
(rulka.envs.sim.physics_reference) over random action sequences on every bundled track and two
generated ones: the same state after every action, walls, turbo, dirt, grass and finishes included."""

from __future__ import annotations

import random

import pytest

from rulka.envs.sim.driver import ScriptedDriver
from rulka.envs.sim.physics import CarPhysics, Controls
from rulka.envs.sim.physics_reference import reference_step
from rulka.envs.sim.tracks import bundled_track_names, generate_track, get_track

STATE = ("x", "z", "heading", "vx", "vz", "yaw_rate", "steer", "gear", "rpm", "shift_timer", "turbo_timer",
         "slip", "sliding", "race_time_ms", "finished", "finish_time_ms", "wall_hits", "wheel_codes")
TRACKS = [*bundled_track_names(), "gen:1", "gen:2"]


def _track(name: str):
    return generate_track(int(name[4:])) if name.startswith("gen:") else get_track(name)


def _random_controls(rng: random.Random) -> Controls:
    """Keyboard flags half of the time, else analog values, some outside their range (clamped)."""
    if rng.random() < 0.5:
        return Controls.from_flags(rng.random() < 0.8, rng.random() < 0.2, rng.random() < 0.3, rng.random() < 0.3)
    return Controls(rng.uniform(-0.2, 1.2), rng.uniform(-0.2, 1.0), rng.uniform(-1.3, 1.3))


def _state(car: CarPhysics) -> tuple:
    return tuple(list(v) if isinstance(v, list) else v for v in (getattr(car, f) for f in STATE))


def _agree(fast: CarPhysics, slow: CarPhysics, where: str) -> None:
    for field, a, b in zip(STATE, _state(fast), _state(slow)):
        same = abs(a - b) <= 1e-9 + 1e-12 * abs(b) if isinstance(a, float) else a == b
        assert same, f"{where}: {field} fast {a!r}, reference {b!r}"


@pytest.mark.parametrize("name", TRACKS)
def test_the_fast_step_agrees_with_the_reference_over_random_actions(name):
    track = _track(name)
    rng = random.Random(name)
    walls = 0
    for episode in range(2):
        fast, slow = CarPhysics(track), CarPhysics(track)
        for k in range(200):
            controls, n = _random_controls(rng), rng.choice((1, 5, 10))
            fast.step(controls, n)
            reference_step(slow, controls, n)
            _agree(fast, slow, f"{name} episode {episode} action {k} ({controls}, {n} ticks)")
        walls += fast.wall_hits
    assert walls > 0  # the sequences reach the walls: collisions are compared too


@pytest.mark.parametrize("name", TRACKS)
def test_the_fast_step_agrees_with_the_reference_on_a_noisy_driver_to_the_finish(name):
    """The scripted driver with its steering jittered: surfaces, turbo pads and the finish line."""
    track = _track(name)
    rng = random.Random(f"driver {name}")
    fast, slow = CarPhysics(track), CarPhysics(track)
    driver = ScriptedDriver(track)
    for k in range(6000):
        c = driver.controls(fast)
        controls = Controls(c.gas, c.brake, c.steer + rng.uniform(-0.15, 0.15))
        fast.step(controls, 5)
        reference_step(slow, controls, 5)
        _agree(fast, slow, f"{name} action {k}")
        if fast.finished:
            break
    assert fast.finished and slow.finish_time_ms == fast.finish_time_ms
