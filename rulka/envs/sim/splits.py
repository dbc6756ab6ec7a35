"""Split times: where a policy gains and loses time against the scripted driver on a track.

A TrackMania player compares runs checkpoint by checkpoint; here the checkpoints are marks every
``every_m`` metres along the track's reference line (the progress the rewards count). Both runs are
driven through the same env from the same start line, the policy greedily, so a policy that replays
the driver's actions splits exactly as the driver does. Each sector also says how both drove it: brake
actions, the share of actions that left the car sliding, the lowest speed and gear; a policy that
slides through a corner the driver brakes for shows there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Sample:
    """The car after one action: race time (ms), metres along the reference line, speed (m/s); and
    how it was driven: the brake held in that action, the car sliding after it, the engine gear."""

    time_ms: float
    progress_m: float
    speed: float
    brake: bool = False
    sliding: bool = False
    gear: int = 0


@dataclasses.dataclass(frozen=True)
class Race:
    samples: tuple[Sample, ...]
    finished: bool
    race_time_ms: float | None  # the finish time, None when the race did not finish
    wall_hits: int


def drive(env: Any, actor: Any, max_steps: int, options: dict[str, Any] | None = None) -> Race:
    """One greedy episode of ``actor`` on ``env`` (a ``SimTrackEnv``, possibly wrapped) from seed 0."""
    from rulka.evaluation import run_episode

    sim = getattr(env, "unwrapped", env)
    samples: list[Sample] = [Sample(0.0, 0.0, 0.0)]  # the start line (no action ended there)
    recorder = _BrakeRecorder(actor, env.action_space)

    def on_step(_env: Any, _step: int, info: dict[str, Any]) -> None:
        car = sim.car
        samples.append(Sample(float(info["race_time_ms"]), float(info["progress_m"]), float(info["speed"]),
                              recorder.brake, bool(car.sliding), int(car.gear)))

    result = run_episode(env, recorder, seed=0, options=options, max_steps=max_steps, on_step=on_step)
    finished = bool(result.finished)
    race_ms = float(result.race_time_ms) if finished and result.race_time_ms is not None else None
    return Race(tuple(samples), finished, race_ms, int(getattr(sim.car, "wall_hits", 0)))


class _BrakeRecorder:
    """The actor, passed through, noting whether each action it takes holds the brake: the brake key,
    an analog brake over half, or the brake in any action of a multi-action block."""

    def __init__(self, actor: Any, action_space: Any) -> None:
        from gymnasium import spaces

        self.actor = actor
        self.block = isinstance(action_space, spaces.MultiDiscrete)
        self.brake = False

    def reset(self) -> None:
        if hasattr(self.actor, "reset"):
            self.actor.reset()

    def act(self, obs: Any, test: bool = False) -> Any:
        from rulka.envs.actions import action_to_flags

        action = self.actor.act(obs, test=test)
        parts = [int(a) for a in np.asarray(action).reshape(-1)] if self.block else [action]
        self.brake = any(float(action_to_flags(a)[1]) > 0.5 for a in parts)
        return action


def sector_driving(samples: Sequence[Sample], start_m: float, end_m: float | None) -> dict[str, Any] | None:
    """How the actions that ended between ``start_m`` (exclusive) and ``end_m`` (inclusive; None: to
    the end) were driven: actions, brake actions, the share of them that left the car sliding, the
    lowest speed and gear; None when no action ended there."""
    inside = [x for x in samples[1:] if x.progress_m > start_m and (end_m is None or x.progress_m <= end_m)]
    if not inside:
        return None
    return {"actions": len(inside), "brake_actions": sum(x.brake for x in inside),
            "sliding_share": round(sum(x.sliding for x in inside) / len(inside), 2),
            "min_speed": round(min(x.speed for x in inside), 1), "min_gear": min(x.gear for x in inside)}


def time_at(samples: Sequence[Sample], mark_m: float) -> tuple[float, float] | None:
    """(race time in ms, speed) when the car first reached ``mark_m`` metres, interpolated within the
    action that crossed it; None if it never did."""
    for prev, cur in zip(samples, samples[1:], strict=False):
        if cur.progress_m >= mark_m:
            span = cur.progress_m - prev.progress_m
            f = (mark_m - prev.progress_m) / span if span > 0 else 1.0  # prev is short of the mark
            return (prev.time_ms + f * (cur.time_ms - prev.time_ms), prev.speed + f * (cur.speed - prev.speed))
    return None


def _at(race: Race, mark_m: float | None) -> tuple[float, float] | None:
    """(ms, speed) of ``race`` at ``mark_m`` metres, or at its finish (``None``)."""
    if mark_m is None:
        return (race.race_time_ms, race.samples[-1].speed) if race.race_time_ms is not None else None
    return time_at(race.samples, mark_m)


def splits(reference: Race, policy: Race, every_m: float, length_m: float) -> list[dict[str, Any]]:
    """Per mark (every ``every_m`` metres short of ``length_m``, then the finish): both races' times
    and speeds there, the policy's total gap (s, positive = behind) and the gap it made in that
    sector, and how each race drove the sector (``sector_driving``; None where it drove none of it).
    The rows stop after the first mark the policy did not reach."""
    if every_m <= 0:
        raise ValueError("every_m must be > 0")
    marks: list[float | None] = [every_m * k for k in range(1, math.ceil(length_m / every_m) + 1)
                                 if every_m * k < length_m - 1e-6]
    rows: list[dict[str, Any]] = []
    last_gap = 0.0
    start = 0.0
    for mark in [*marks, None]:
        ref, pol = _at(reference, mark), _at(policy, mark)
        row: dict[str, Any] = {"mark_m": round(length_m if mark is None else mark, 1), "finish": mark is None,
                               "reference_s": None if ref is None else round(ref[0] / 1000, 3),
                               "policy_s": None if pol is None else round(pol[0] / 1000, 3),
                               "reference_speed": None if ref is None else round(ref[1], 1),
                               "policy_speed": None if pol is None else round(pol[1], 1),
                               "gap_s": None, "sector_s": None,
                               "reference_driving": sector_driving(reference.samples, start, mark),
                               "policy_driving": sector_driving(policy.samples, start, mark)}
        start = mark if mark is not None else start
        if ref is not None and pol is not None:
            gap = (pol[0] - ref[0]) / 1000
            row["gap_s"], row["sector_s"] = round(gap, 3), round(gap - last_gap, 3)
            last_gap = gap
        rows.append(row)
        if pol is None:
            break
    return rows
