"""A slow, plainly written ``CarPhysics.step``: the reference the fast one is checked against.

``CarPhysics.step`` (rulka.envs.sim.physics) is hand-inlined for speed: locals instead of
attributes, the wheels' raster cells computed in place, surface mixes cached. This module says the
same physics one 10 ms tick at a time, one named part at a time, on the car's own attributes, with
the wheels looked up through ``Track.cell``. ``tests/test_sim_physics_reference.py`` drives both
with random action sequences and requires the same states; change the physics here first, then
make the fast step agree.
"""

from __future__ import annotations

import math

from rulka.envs.sim.physics import (
    AERO_DRAG,
    BRAKE_DECEL,
    DRAG_EXTRA,
    DT,
    GEAR_ACCEL,
    GEAR_TOP,
    GRIP,
    IDLE_RPM,
    MAX_RPM,
    MS_PER_STEP,
    REVERSE_ACCEL,
    REVERSE_TOP,
    ROLL,
    SHIFT_TIME,
    SLIDE_GRIP,
    SLIDE_THRESHOLD,
    STEER_MAX,
    STEER_RATE,
    STEER_SPEED_SCALE,
    TURBO_ACCEL,
    TURBO_TIME,
    WHEELBASE,
    YAW_GRIP_MARGIN,
    CarPhysics,
    Controls,
)
from rulka.envs.sim.tracks import TURBO, WALL


def reference_step(car: CarPhysics, controls: Controls, n_steps: int = 5) -> None:
    """Advance ``car`` ``n_steps`` ticks of 10 ms holding ``controls`` (what ``car.step`` does)."""
    gas = min(max(float(controls.gas), 0.0), 1.0)
    brake = min(max(float(controls.brake), 0.0), 1.0)
    steer = min(max(float(controls.steer), -1.0), 1.0)
    for _ in range(n_steps):
        _tick(car, gas, brake, steer)


def _tick(car: CarPhysics, gas: float, brake: float, target_steer: float) -> None:
    codes = car.wheel_codes
    grip = sum(GRIP[c] for c in codes) * 0.25
    roll = sum(ROLL[c] for c in codes) * 0.25
    drag = AERO_DRAG + sum(DRAG_EXTRA[c] for c in codes) * 0.25
    if TURBO in codes:
        car.turbo_timer = TURBO_TIME
    _steer(car, target_steer, grip)
    if car.sliding:
        grip *= SLIDE_GRIP  # sliding tyres hold less
    u, v = _car_frame(car.vx, car.vz, car.heading)
    a = _drive(car, u, gas, brake)
    a = min(max(a, -grip), grip)  # tyres cannot transmit more than their grip
    u = _resist(u, a, roll, drag)
    u, v = _lateral(car, u, v, a, grip)
    car.vx, car.vz = _world_frame(u, v, car.heading)
    px, pz = car.x, car.z
    car.x += car.vx * DT
    car.z += car.vz * DT
    car._update_wheels()
    if WALL in car.wheel_codes:
        car.vx, car.vz = car._hit_wall(px, pz, car.vx, car.vz)
        car.turbo_timer = 0.0
        u, v = _car_frame(car.vx, car.vz, car.heading)
    car.slip = v
    car.race_time_ms += MS_PER_STEP
    if not car.finished and _crossed_finish(car, px, pz):
        car.finished = True
        car.finish_time_ms = car.race_time_ms


def _car_frame(vx: float, vz: float, heading: float) -> tuple[float, float]:
    """World velocity -> (forward, left) in the frame of ``heading``."""
    s, c = math.sin(heading), math.cos(heading)
    return vx * s + vz * c, vx * c - vz * s


def _world_frame(u: float, v: float, heading: float) -> tuple[float, float]:
    s, c = math.sin(heading), math.cos(heading)
    return u * s + v * c, u * c - v * s


def _steer(car: CarPhysics, target: float, grip: float) -> None:
    """The wheel follows the input at ``STEER_RATE``; the yaw rate follows the wheel angle (less
    lock at speed), capped a little above what rolling grip can follow, and turns the heading."""
    max_step = STEER_RATE * DT
    car.steer += min(max(target - car.steer, -max_step), max_step)
    u = _car_frame(car.vx, car.vz, car.heading)[0]
    yaw = u * math.tan(car.steer * STEER_MAX / (1.0 + abs(u) / STEER_SPEED_SCALE)) / WHEELBASE
    cap = YAW_GRIP_MARGIN * grip / max(abs(u), 1.0)
    car.yaw_rate = min(max(yaw, -cap), cap)
    car.heading += car.yaw_rate * DT


def _drive(car: CarPhysics, u: float, gas: float, brake: float) -> float:
    """Longitudinal acceleration from the engine (gears, shifts, rpm), reverse, brakes and turbo."""
    a = 0.0
    if car.shift_timer > 0.0:
        car.shift_timer -= DT
    if brake > 0.0 and gas == 0.0 and u < 0.5:  # reverse
        if u > -REVERSE_TOP:
            a -= REVERSE_ACCEL * brake
        car.gear = 0
        car.rpm = IDLE_RPM + (MAX_RPM - IDLE_RPM) * min(-u / REVERSE_TOP, 1.0) if u < 0.0 else IDLE_RPM
    else:
        gear = max(car.gear, 1)
        if u > 0.0 and u / GEAR_TOP[gear] > 0.97 and gear < 5 and gas > 0.0:
            gear += 1
            car.shift_timer = SHIFT_TIME
        elif gear > 1 and u < 0.7 * GEAR_TOP[gear - 1]:
            gear -= 1
            car.shift_timer = SHIFT_TIME
        car.gear = gear
        frac = u / GEAR_TOP[gear] if u > 0.0 else 0.0
        car.rpm = IDLE_RPM + (MAX_RPM - IDLE_RPM) * min(frac, 1.0)
        if gas > 0.0 and car.shift_timer <= 0.0 and frac < 1.0:
            a += gas * GEAR_ACCEL[gear] * (0.8 + 0.8 * frac * (1.0 - frac))  # flat-topped torque
        if brake > 0.0 and u > 0.0:
            a -= BRAKE_DECEL * brake
    if car.turbo_timer > 0.0:
        car.turbo_timer -= DT
        if u > -0.5:
            a += TURBO_ACCEL
    return a


def _resist(u: float, a: float, roll: float, drag: float) -> float:
    """Forward speed after one tick of ``a`` against rolling and air resistance (which stop a
    car, never push it backwards)."""
    resist = (roll + drag * u * u) * DT
    if u > 0.0:
        u += a * DT - resist
        return 0.0 if u < 0.0 and a >= 0.0 else u
    if u < 0.0:
        u += a * DT + resist
        return 0.0 if u > 0.0 and a <= 0.0 else u
    return a * DT if abs(a) > roll else u


def _lateral(car: CarPhysics, u: float, v: float, a: float, grip: float) -> tuple[float, float]:
    """The tyres pull the velocity towards the heading within the grip the drive leaves; a slide
    scrubs speed."""
    lat_grip = math.sqrt(max(grip * grip - a * a, 0.09 * grip * grip)) * DT
    if abs(v) <= lat_grip:
        car.sliding = False
        return u, 0.0
    v -= math.copysign(lat_grip, v)
    speed = math.hypot(u, v)
    scrub = 1.0 - 0.15 * grip * DT * min(abs(v) / speed, 1.0) / max(speed, 1.0)
    car.sliding = abs(v * scrub) > SLIDE_THRESHOLD
    return u * scrub, v * scrub


def _crossed_finish(car: CarPhysics, px: float, pz: float) -> bool:
    """Whether the move from (px, pz) crossed the finish line forwards, within its width."""
    fx, fz, tx, tz, half = car._finish
    before = (px - fx) * tx + (pz - fz) * tz
    after = (car.x - fx) * tx + (car.z - fz) * tz
    return before < 0.0 <= after and abs((car.x - fx) * tz - (car.z - fz) * tx) <= half
