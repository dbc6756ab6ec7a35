"""Car physics of the built-in simulator: a TrackMania-like car on a flat track.

Fixed 10 ms steps. Forward motion comes from a five-gear engine (with rpm) against aero drag and
rolling resistance; steering sets a yaw rate whose lateral acceleration is capped by the tyres'
grip on the surfaces under the wheels, so a car that enters a corner too fast slides wide
(understeer) and reports sliding wheels. Surfaces: asphalt (high grip), dirt (less grip, more
drag), grass (low grip, strong drag), turbo (a boost), walls (collisions that kill speed; the car
cannot pass through).

The state is plain Python floats: a step is scalar math, which is much faster than small numpy
arrays in this inner loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rulka.envs.sim.tracks import DIRT, FINISH, GRASS, LINE, ROAD, START, TURBO, WALL, Track

DT = 0.01  # seconds per physics step (TrackMania's 10 ms tick)
MS_PER_STEP = 10

# Per raster code: grip (max tyre acceleration, m/s^2), rolling decel (m/s^2), extra quadratic drag,
# TrackMania contact material id (rulka.envs: 16 Asphalt, 2 Grass, 6 Dirt, 7 Turbo).
_GRIP = {ROAD: 17.0, LINE: 17.0, START: 17.0, FINISH: 17.0, TURBO: 17.0, DIRT: 11.0, GRASS: 7.0, WALL: 17.0}
_ROLL = {ROAD: 0.25, LINE: 0.25, START: 0.25, FINISH: 0.25, TURBO: 0.25, DIRT: 1.2, GRASS: 4.5, WALL: 0.25}
_DRAG = {ROAD: 0.0, LINE: 0.0, START: 0.0, FINISH: 0.0, TURBO: 0.0, DIRT: 0.0009, GRASS: 0.004, WALL: 0.0}
MATERIAL_ID = {ROAD: 16, LINE: 16, START: 16, FINISH: 16, TURBO: 7, DIRT: 6, GRASS: 2, WALL: 16}
_N_CODES = 8
GRIP = tuple(_GRIP[c] for c in range(_N_CODES))
ROLL = tuple(_ROLL[c] for c in range(_N_CODES))
DRAG_EXTRA = tuple(_DRAG[c] for c in range(_N_CODES))

# Engine and gearbox: top speed (m/s) and peak drive acceleration (m/s^2) per forward gear 1..5.
GEAR_TOP = (0.0, 19.0, 33.0, 48.0, 64.0, 92.0)
GEAR_ACCEL = (0.0, 13.0, 10.0, 7.5, 5.6, 4.4)
SHIFT_TIME = 0.08  # seconds without drive while shifting
IDLE_RPM, MAX_RPM = 1000.0, 10500.0
AERO_DRAG = 0.00045  # m^-1: top speed on asphalt is about 87 m/s (313 km/h)
BRAKE_DECEL = 20.0
REVERSE_ACCEL, REVERSE_TOP = 6.0, 12.0
TURBO_ACCEL, TURBO_TIME = 11.0, 1.2  # extra push while on a pad and for a while after
WHEELBASE = 2.6
STEER_RATE = 8.0  # full lock to centre in 1/8 s
STEER_MAX = 0.6  # wheel angle (rad) at rest; shrinks with speed
STEER_SPEED_SCALE = 18.0
YAW_GRIP_MARGIN = 1.3  # heading may rotate faster than grip can follow: that is a slide
SLIDE_GRIP = 0.85  # sliding tyres grip less than rolling ones
SLIDE_THRESHOLD = 1.0  # m/s of lateral slip at which wheels report sliding
WALL_RESTITUTION = 0.1
WALL_FRICTION = 0.55  # fraction of the along-wall speed kept at an impact
# wheel positions in the car frame (left, forward): FL, FR, RL, RR (rulka.envs.car_state order)
WHEELS = ((0.85, 1.35), (-0.85, 1.35), (0.85, -1.25), (-0.85, -1.25))


_SURFACES: dict[tuple[int, int, int, int], tuple[float, float, float, bool]] = {}


def _surface_mix(codes: tuple[int, int, int, int]) -> tuple[float, float, float, bool]:
    """(grip, rolling decel, drag coefficient, on turbo) for the surfaces under the four wheels."""
    mix = (
        sum(GRIP[c] for c in codes) * 0.25,
        sum(ROLL[c] for c in codes) * 0.25,
        AERO_DRAG + sum(DRAG_EXTRA[c] for c in codes) * 0.25,
        TURBO in codes,
    )
    _SURFACES[codes] = mix
    return mix


@dataclass
class Controls:
    """What the driver holds for the next action: gas and brake in [0, 1], steer in [-1, 1]
    (positive = left)."""

    gas: float = 0.0
    brake: float = 0.0
    steer: float = 0.0

    @classmethod
    def from_flags(cls, accelerate: bool, brake: bool, left: bool, right: bool) -> Controls:
        """Keyboard-style controls from the four TrackMania input flags."""
        return cls(1.0 if accelerate else 0.0, 1.0 if brake else 0.0, float(left) - float(right))


class CarPhysics:
    """One car on one track. ``reset()`` puts it on the start line; ``step(controls, n)`` runs
    ``n`` 10 ms ticks. Read the state from the attributes (all floats/ints, world frame)."""

    def __init__(self, track: Track) -> None:
        self.track = track
        fx, fz, tx, tz, half = track.finish_line
        self._finish = (fx, fz, tx, tz, half + 1.0)
        self.reset()

    def reset(self, x: float | None = None, z: float | None = None, heading: float | None = None) -> None:
        """Standstill at the start line (or at the given pose), race time 0."""
        sx, sz, sh = self.track.start_pose
        self.x = sx if x is None else x
        self.z = sz if z is None else z
        self.heading = sh if heading is None else heading
        self.vx = 0.0
        self.vz = 0.0
        self.yaw_rate = 0.0
        self.steer = 0.0  # current steering position in [-1, 1]
        self.gear = 1
        self.rpm = IDLE_RPM
        self.shift_timer = 0.0
        self.turbo_timer = 0.0
        self.slip = 0.0  # lateral slip speed, m/s (signed, positive = sliding left)
        self.sliding = False
        self.race_time_ms = 0
        self.finished = False
        self.finish_time_ms: int | None = None
        self.wall_hits = 0
        self.wheel_codes = [ROAD, ROAD, ROAD, ROAD]
        self._update_wheels()

    # --- derived quantities ------------------------------------------------------------------
    @property
    def speed(self) -> float:
        """Speed over ground, m/s."""
        return math.hypot(self.vx, self.vz)

    @property
    def forward_speed(self) -> float:
        """Speed along the car's heading, m/s (negative when reversing)."""
        return self.vx * math.sin(self.heading) + self.vz * math.cos(self.heading)

    def _update_wheels(self) -> list[int]:
        s, c = math.sin(self.heading), math.cos(self.heading)
        cell = self.track.cell
        x, z = self.x, self.z
        codes = self.wheel_codes
        for i, (lat, fwd) in enumerate(WHEELS):
            # left of heading h is (cos h, -sin h); forward is (sin h, cos h)
            codes[i] = cell(x + lat * c + fwd * s, z - lat * s + fwd * c)
        return codes

    # --- stepping ---------------------------------------------------------------------------
    def step(self, controls: Controls, n_steps: int = 5) -> None:
        """Advance ``n_steps`` ticks of 10 ms holding ``controls``."""
        gas = min(max(float(controls.gas), 0.0), 1.0)
        brake = min(max(float(controls.brake), 0.0), 1.0)
        target_steer = min(max(float(controls.steer), -1.0), 1.0)
        # The whole loop works on locals: attribute access dominates scalar Python code.
        track = self.track
        flat = track._flat
        rows, cols = track.materials.shape
        ox0, oz0 = track.origin
        inv_cell = 1.0 / track.cell_size
        sin, cos, tan, sqrt, hypot = math.sin, math.cos, math.tan, math.sqrt, math.hypot
        x, z, h, vx, vz = self.x, self.z, self.heading, self.vx, self.vz
        steer, gear, rpm = self.steer, self.gear, self.rpm
        shift_timer, turbo_timer, sliding = self.shift_timer, self.turbo_timer, self.sliding
        codes = self.wheel_codes
        c0, c1, c2, c3 = codes
        yaw = self.yaw_rate
        v = self.slip
        fx, fz, tx, tz, half = self._finish
        lat_k = WHEELS[0][0] * inv_cell  # the wheel layout is symmetric: FL, FR, RL, RR
        front_k = WHEELS[0][1] * inv_cell
        rear_k = -WHEELS[2][1] * inv_cell
        max_ds = STEER_RATE * DT
        race_time, finished = self.race_time_ms, self.finished
        sh, ch = sin(h), cos(h)
        surfaces = _SURFACES
        for _ in range(n_steps):
            surf = surfaces.get((c0, c1, c2, c3))
            if surf is None:
                surf = _surface_mix((c0, c1, c2, c3))
            grip, roll, drag, on_turbo = surf
            if on_turbo:
                turbo_timer = TURBO_TIME
            # steering: the wheel follows the input at a finite rate; less lock at speed
            d = target_steer - steer
            steer += max_ds if d > max_ds else (-max_ds if d < -max_ds else d)
            u = vx * sh + vz * ch
            au = u if u >= 0.0 else -u
            yaw = u * tan(steer * STEER_MAX / (1.0 + au / STEER_SPEED_SCALE)) / WHEELBASE
            # the heading may turn a little faster than rolling grip can follow; once sliding,
            # the tyres hold less (kinetic grip) and the slide grows: that is a breakaway
            yaw_cap = YAW_GRIP_MARGIN * grip / (au if au > 1.0 else 1.0)
            if sliding:
                grip *= SLIDE_GRIP
            if yaw > yaw_cap:
                yaw = yaw_cap
            elif yaw < -yaw_cap:
                yaw = -yaw_cap
            h += yaw * DT
            sh, ch = sin(h), cos(h)
            # velocity in the new car frame: u forward, v left (left of h is (cos h, -sin h))
            u = vx * sh + vz * ch
            v = vx * ch - vz * sh

            # longitudinal: engine / reverse, brakes, rolling and air resistance
            a = 0.0
            if shift_timer > 0.0:
                shift_timer -= DT
            if brake > 0.0 and gas == 0.0 and u < 0.5:
                if u > -REVERSE_TOP:
                    a -= REVERSE_ACCEL * brake
                gear = 0
                rpm = IDLE_RPM + (MAX_RPM - IDLE_RPM) * min(-u / REVERSE_TOP, 1.0) if u < 0.0 else IDLE_RPM
            else:
                g = gear if gear > 0 else 1
                frac = u / GEAR_TOP[g] if u > 0.0 else 0.0
                if frac > 0.97 and g < 5 and gas > 0.0:
                    g += 1
                    shift_timer = SHIFT_TIME
                elif g > 1 and u < 0.7 * GEAR_TOP[g - 1]:
                    g -= 1
                    shift_timer = SHIFT_TIME
                gear = g
                frac = u / GEAR_TOP[g] if u > 0.0 else 0.0
                rpm = IDLE_RPM + (MAX_RPM - IDLE_RPM) * (frac if frac < 1.0 else 1.0)
                if gas > 0.0 and shift_timer <= 0.0 and frac < 1.0:
                    # a flat-topped torque curve: 80 % at both ends, 100 % mid-range
                    a += gas * GEAR_ACCEL[g] * (0.8 + 0.8 * frac * (1.0 - frac))
                if brake > 0.0 and u > 0.0:
                    a -= BRAKE_DECEL * brake
            if turbo_timer > 0.0:
                turbo_timer -= DT
                if u > -0.5:
                    a += TURBO_ACCEL
            # tyres cannot transmit more than their grip
            if a > grip:
                a = grip
            elif a < -grip:
                a = -grip
            resist = (roll + drag * u * u) * DT
            if u > 0.0:
                u += a * DT - resist
                if u < 0.0 and a >= 0.0:
                    u = 0.0
            elif u < 0.0:
                u += a * DT + resist
                if u > 0.0 and a <= 0.0:
                    u = 0.0
            elif a > roll or a < -roll:
                u = a * DT

            # lateral: the tyres pull the velocity towards the heading, within the grip left over
            lat_grip = sqrt(max(grip * grip - a * a, 0.09 * grip * grip)) * DT
            if v <= lat_grip and v >= -lat_grip:
                v = 0.0
                sliding = False
            else:
                v -= lat_grip if v > 0.0 else -lat_grip
                speed = hypot(u, v)
                # a sliding car scrubs speed
                scrub = 1.0 - 0.15 * grip * DT * min(abs(v) / speed, 1.0) / (speed if speed > 1.0 else 1.0)
                u *= scrub
                v *= scrub
                sliding = v > SLIDE_THRESHOLD or v < -SLIDE_THRESHOLD
            vx = u * sh + v * ch
            vz = u * ch - v * sh

            # move, look up the surface under each wheel, then resolve walls
            px, pz = x, z
            x += vx * DT
            z += vz * DT
            # wheel positions in raster cells: axle centres ahead/behind, then +- half track
            bx = (x - ox0) * inv_cell
            bz = (z - oz0) * inv_cell
            sx, sz = ch * lat_k, -sh * lat_k  # half track to the left
            fx_, fz_ = bx + sh * front_k, bz + ch * front_k  # front axle centre
            rx_, rz_ = bx - sh * rear_k, bz - ch * rear_k  # rear axle centre
            cc = int(fx_ + sx)
            rr = int(fz_ + sz)
            c0 = flat[rr * cols + cc] if 0 <= cc < cols and 0 <= rr < rows else WALL
            cc = int(fx_ - sx)
            rr = int(fz_ - sz)
            c1 = flat[rr * cols + cc] if 0 <= cc < cols and 0 <= rr < rows else WALL
            cc = int(rx_ + sx)
            rr = int(rz_ + sz)
            c2 = flat[rr * cols + cc] if 0 <= cc < cols and 0 <= rr < rows else WALL
            cc = int(rx_ - sx)
            rr = int(rz_ - sz)
            c3 = flat[rr * cols + cc] if 0 <= cc < cols and 0 <= rr < rows else WALL
            if c0 == WALL or c1 == WALL or c2 == WALL or c3 == WALL:
                self.x, self.z, self.heading = x, z, h
                codes[0], codes[1], codes[2], codes[3] = c0, c1, c2, c3
                vx, vz = self._hit_wall(px, pz, vx, vz)
                x, z = self.x, self.z
                c0, c1, c2, c3 = codes
                turbo_timer = 0.0
                u = vx * sh + vz * ch
                v = vx * ch - vz * sh

            race_time += MS_PER_STEP
            if not finished:
                before = (px - fx) * tx + (pz - fz) * tz
                after = (x - fx) * tx + (z - fz) * tz
                if before < 0.0 <= after and abs((x - fx) * tz - (z - fz) * tx) <= half:
                    finished = self.finished = True
                    self.finish_time_ms = race_time
        self.race_time_ms = race_time
        self.x, self.z, self.heading, self.vx, self.vz = x, z, h, vx, vz
        self.steer, self.gear, self.rpm, self.yaw_rate, self.slip = steer, gear, rpm, yaw, v
        self.shift_timer, self.turbo_timer, self.sliding = shift_timer, turbo_timer, sliding
        codes[0], codes[1], codes[2], codes[3] = c0, c1, c2, c3

    def _hit_wall(self, ox: float, oz: float, vx: float, vz: float) -> tuple[float, float]:
        """Collision: stay out of the wall, lose the speed into it and much of the rest."""
        self.wall_hits += 1
        s, c = math.sin(self.heading), math.cos(self.heading)
        # normal at the offending wheel(s)
        nx = nz = 0.0
        for (lat, fwd), code in zip(WHEELS, self.wheel_codes):
            if code == WALL:
                wx, wz = self.track.wall_normal(self.x + lat * c + fwd * s, self.z - lat * s + fwd * c)
                nx += wx
                nz += wz
        n = math.hypot(nx, nz)
        if n < 1e-9:  # deep inside a wall (should not happen): stop where we were
            self.x, self.z = ox, oz
            self._update_wheels()
            return 0.0, 0.0
        nx /= n
        nz /= n
        vn = vx * nx + vz * nz
        tvx, tvz = vx - vn * nx, vz - vn * nz
        if vn < 0.0:
            vn = -WALL_RESTITUTION * vn
            tvx *= WALL_FRICTION
            tvz *= WALL_FRICTION
        # back to the previous position, nudged out of the wall
        self.x, self.z = ox + nx * 0.05, oz + nz * 0.05
        self._update_wheels()
        return tvx + vn * nx, tvz + vn * nz
