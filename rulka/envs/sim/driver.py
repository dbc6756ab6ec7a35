"""A scripted driver for the simulator: pure pursuit on the centreline with a speed plan.

It proves every track is drivable and sets the track's reference time, the mark a learned policy
has to beat. The speed plan takes the highest cornering speed that the grip of the surface under
the centreline allows, then works backwards from every corner with the braking the car can do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rulka.envs.actions import flags_to_discrete
from rulka.envs.sim.physics import (
    BRAKE_DECEL,
    GRIP,
    MS_PER_STEP,
    STEER_MAX,
    STEER_SPEED_SCALE,
    WHEELBASE,
    CarPhysics,
    Controls,
)
from rulka.envs.sim.tracks import SAMPLE_STEP, Track

MAX_PLANNED_SPEED = 95.0


def speed_plan(track: Track, grip_fraction: float = 0.8, brake_fraction: float = 0.55) -> np.ndarray:
    """Target speed (m/s) at each centreline sample of ``track``."""
    pts = track.centerline[:, [0, 2]]
    d = np.gradient(pts, axis=0)
    heading = np.unwrap(np.arctan2(d[:, 0], d[:, 1]))
    # curvature over +-3 m, so the plan sees the whole corner entry, not one sample
    k = 6
    curv = np.zeros(len(pts))
    curv[k:-k] = np.abs(heading[2 * k :] - heading[: -2 * k]) / (2 * k * SAMPLE_STEP)
    grip = np.array([GRIP[track.cell(x, z)] for x, z in pts])
    # grass and dirt also drag: plan for the lower grip of any surface within the road's middle
    v = np.sqrt(grip_fraction * grip / np.maximum(curv, 1e-6))
    v = np.minimum(v, MAX_PLANNED_SPEED)
    decel = brake_fraction * np.minimum(grip, BRAKE_DECEL)
    for i in range(len(v) - 2, -1, -1):  # backwards: arrive at every corner slow enough
        v[i] = min(v[i], math.sqrt(v[i + 1] ** 2 + 2 * decel[i] * SAMPLE_STEP))
    return v


@dataclass
class DriverConfig:
    """Knobs of the scripted driver."""

    lookahead_min: float = 7.0  # metres
    lookahead_time: float = 0.35  # seconds of travel added to the lookahead
    grip_fraction: float = 0.8
    brake_fraction: float = 0.55
    steer_deadband: float = 0.12  # discrete mode: steer only beyond this fraction of lock


class ScriptedDriver:
    """Pure-pursuit driver. ``controls(car)`` returns continuous controls; ``action(car)`` the
    discrete action index (TrackMania's 12 key combinations)."""

    def __init__(self, track: Track, config: DriverConfig | None = None) -> None:
        self.track = track
        self.config = config or DriverConfig()
        self.plan = speed_plan(track, self.config.grip_fraction, self.config.brake_fraction)
        self._xz = track.centerline[:, [0, 2]].copy()
        self.index = track.start_index

    def reset(self) -> None:
        """Call at the start of each episode."""
        self.index = self.track.start_index

    def _track_index(self, x: float, z: float) -> int:
        # local search ahead of the last index: the course may pass near itself
        lo = max(self.index - 10, 0)
        hi = min(self.index + 60, len(self._xz))
        seg = self._xz[lo:hi]
        i = lo + int(np.argmin((seg[:, 0] - x) ** 2 + (seg[:, 1] - z) ** 2))
        self.index = i
        return i

    def controls(self, car: CarPhysics) -> Controls:
        """Continuous controls for the car's current state (steer positive = left)."""
        cfg = self.config
        i = self._track_index(car.x, car.z)
        u = car.forward_speed
        look = cfg.lookahead_min + cfg.lookahead_time * max(u, 0.0)
        j = min(i + int(look / SAMPLE_STEP), len(self._xz) - 1)
        tx, tz = self._xz[j]
        dx, dz = tx - car.x, tz - car.z
        # angle of the target left of the heading (left of h is (cos h, -sin h))
        s, c = math.sin(car.heading), math.cos(car.heading)
        fwd = dx * s + dz * c
        left = dx * c - dz * s
        alpha = math.atan2(left, fwd)
        dist = max(math.hypot(dx, dz), 1e-3)
        delta = math.atan(2.0 * WHEELBASE * math.sin(alpha) / dist)
        lock = STEER_MAX / (1.0 + abs(u) / STEER_SPEED_SCALE)
        steer = max(-1.0, min(1.0, delta / lock))
        # speed: look a little ahead, the car needs time to react
        k = min(i + int((2.0 + 0.15 * max(u, 0.0)) / SAMPLE_STEP), len(self.plan) - 1)
        target = float(self.plan[i:k + 1].min())
        if u < target - 0.3:
            gas, brake = 1.0, 0.0
        elif u > target + 1.5:
            gas, brake = 0.0, 1.0
        else:
            gas, brake = 0.0, 0.0
        return Controls(gas=gas, brake=brake, steer=steer)

    def action(self, car: CarPhysics) -> int:
        """The discrete action closest to :meth:`controls` (keyboard driving)."""
        ctl = self.controls(car)
        band = self.config.steer_deadband
        flags = np.array([ctl.gas > 0.5, ctl.brake > 0.5, ctl.steer > band, ctl.steer < -band], dtype=np.float32)
        return flags_to_discrete(flags)


def drive(
    track: Track,
    discrete: bool = True,
    steps_per_action: int = 5,
    max_race_time_ms: int = 180_000,
    config: DriverConfig | None = None,
    record: bool = False,
) -> dict[str, object]:
    """Run the scripted driver on ``track`` from the start line until it finishes (or time is up).

    Returns ``{"finished", "race_time_ms", "wall_hits", "trace"}``; ``trace`` (with ``record``) is
    an (N, 3) array of x, z, speed per action.
    """
    from rulka.envs.actions import discrete_to_flags

    car = CarPhysics(track)
    driver = ScriptedDriver(track, config)
    trace: list[tuple[float, float, float]] = []
    while not car.finished and car.race_time_ms < max_race_time_ms:
        if discrete:
            acc, brk, left, right = discrete_to_flags(driver.action(car))
            ctl = Controls.from_flags(bool(acc), bool(brk), bool(left), bool(right))
        else:
            ctl = driver.controls(car)
        car.step(ctl, steps_per_action)
        if record:
            trace.append((car.x, car.z, car.speed))
    return {
        "finished": car.finished,
        "race_time_ms": car.finish_time_ms if car.finished else car.race_time_ms,
        "wall_hits": car.wall_hits,
        "trace": np.asarray(trace, dtype=np.float64).reshape(-1, 3),
        "ms_per_step": MS_PER_STEP,
    }


def reference_time_ms(track: Track) -> int:
    """The track's reference time: the scripted driver's race time with discrete (keyboard) actions.

    Raises ``RuntimeError`` if the driver does not finish (the track is not drivable)."""
    result = drive(track, discrete=True)
    if not result["finished"]:
        raise RuntimeError(f"the scripted driver did not finish track '{track.name}'")
    return int(result["race_time_ms"])  # type: ignore[call-overload]
