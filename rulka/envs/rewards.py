"""Reward terms of the TrackMania pipeline, one small function each (config keys under ``rewards``).

Per step (one action of ``ms_per_action`` ms) the pipeline's reward is

    constant_reward_per_ms * ms_in_race
  + reward_per_m_advanced_along_centerline * metres_advanced
  + final_speed_reward_per_m_per_s * (speed_now - speed_before)      (only while moving forward)
  + engineered terms (coefficients from schedules over frames played)

Potential-based shaping (Ng, Harada & Russell 1999) is *not* folded into that reward: the
pipeline reports the potential ``phi(s)`` of every observation and the learner adds
``gamma^n * phi(s') - phi(s)`` itself, because ``gamma`` and ``n`` are only known when a
transition is sampled (n-step returns, mini-races). ``shaping_term`` does that sum for learners
that want it folded.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def schedule_value(knots: Sequence[Sequence[float]], frame: float) -> float:
    """Linear interpolation of ``[[frame, value], ...]`` at ``frame``; constant outside the knots."""
    if len(knots) == 1:
        return float(knots[0][1])
    frames = [float(k[0]) for k in knots]
    values = [float(k[1]) for k in knots]
    return float(np.interp(frame, frames, values))


def time_reward(constant_reward_per_ms: float, ms_in_race: float) -> float:
    """The constant time penalty for ``ms_in_race`` milliseconds (negative coefficient)."""
    return constant_reward_per_ms * ms_in_race


def progress_reward(reward_per_m: float, metres_advanced: float) -> float:
    """Reward for metres advanced along the centreline (negative when driving backwards)."""
    return reward_per_m * metres_advanced


def speed_gain_reward(
    reward_per_m: float,
    as_if_duration_s: float,
    speed_before: float,
    speed_now: float,
    forward_speed_now: float,
) -> float:
    """Bonus for gaining speed: one m/s gained is worth ``as_if_duration_s`` metres of progress.

    Only while the car moves forward (its forward velocity component is positive), so reversing
    fast is not rewarded.
    """
    if as_if_duration_s == 0.0 or forward_speed_now <= 0.0:
        return 0.0
    return reward_per_m * as_if_duration_s * (speed_now - speed_before)


def potential(
    zone_center_car: np.ndarray,
    next_zone_center_car: np.ndarray,
    coef_dist: float,
    min_dist: float,
    max_dist: float,
    coef_point_ahead: float,
) -> float:
    """Shaping potential phi(s) from the current zone centre and the next one used in the inputs,
    both in the car frame (lateral, up, forward).

    ``coef_dist * clip(|zone_center|, min_dist, max_dist)`` (a negative coefficient pulls the car
    toward the centreline) plus ``coef_point_ahead * (f - 1)`` where ``f`` is the forward component
    of the unit vector from the current centre to the next (1 when the car points along the road).
    """
    phi = 0.0
    if coef_dist != 0.0:
        d = float(np.linalg.norm(zone_center_car))
        phi += coef_dist * min(max(d, min_dist), max_dist)
    if coef_point_ahead != 0.0:
        ahead = np.asarray(next_zone_center_car, dtype=np.float64) - zone_center_car
        n = float(np.linalg.norm(ahead))
        if n > 1e-9:
            phi += coef_point_ahead * (float(ahead[2]) / n - 1.0)
    return phi


def shaping_term(phi_s: float, phi_next: float, gamma_n: float, terminal: bool) -> float:
    """``gamma^n * phi(s') - phi(s)``; the potential of a terminal state counts as 0."""
    return (0.0 if terminal else gamma_n * phi_next) - phi_s


def max_side_friction(forward_speed: float) -> float:
    """TrackMania's maximum side friction on tarmac as a function of forward speed (m/s).

    The figures (80 at standstill, falling to 55 at 500 km/h) are the community's measurements
    of TMNF's tarmac grip, as used for speed-slide analysis.
    """
    kmh = abs(forward_speed) * 3.6
    return float(np.interp(kmh, [0, 100, 200, 300, 400, 500], [80, 80, 75, 67, 60, 55]))


def speedslide_quality(lateral_speed: float, forward_speed: float) -> float:
    """How much of the tarmac speed-slide potential a slide uses: 0 when not sliding hard enough,
    1 for a perfect speed slide, above 1 when the drift starts to cost speed."""
    limit = max_side_friction(forward_speed)
    side = 20.0 * abs(lateral_speed)
    return (side - limit) / limit if side > limit else 0.0


def speedslide_reward(
    coef: float, lateral_speed: float, forward_speed: float, all_wheels_grounded: bool
) -> float:
    """``coef * max(0, 1 - |quality - 1|)`` with all wheels on the ground; peaks at a perfect slide."""
    if coef == 0.0 or not all_wheels_grounded:
        return 0.0
    q = speedslide_quality(lateral_speed, forward_speed)
    return coef * max(0.0, 1.0 - abs(q - 1.0))


NEOSLIDE_MIN_LATERAL_SPEED = 2.0  # m/s


def neoslide_reward(coef: float, lateral_speed: float) -> float:
    """``coef`` while the car moves sideways at 2 m/s or more (a neo-slide style drift)."""
    return coef if abs(lateral_speed) >= NEOSLIDE_MIN_LATERAL_SPEED else 0.0


def kamikaze_reward(coef: float, accelerate: float, brake: float, n_wheels_grounded: int) -> float:
    """``coef`` when the car goes full gas (accelerate without brake) with at most one wheel on
    the ground: committing to a jump or a wall ride instead of lifting."""
    if coef == 0.0:
        return 0.0
    return coef if (accelerate > 0.5 and brake <= 0.5 and n_wheels_grounded <= 1) else 0.0


def close_to_vcp_reward(
    coef: float, distance_to_zone_center: float, min_dist: float, max_dist: float
) -> float:
    """``coef * clip(distance to the current zone centre, min_dist, max_dist)`` (use coef < 0)."""
    if coef == 0.0:
        return 0.0
    return coef * min(max(distance_to_zone_center, min_dist), max_dist)
