"""Schedules: values that change with the number of environment frames played.

A schedule is a list of knots ``[[frame, value], ...]`` sorted by frame. Before the first knot the
first value holds, after the last knot the last value holds. Three rules fill the gaps:

- :func:`linear_schedule`: straight line between neighbouring knots (exploration, gamma, PPO
  coefficients, engineered rewards).
- :func:`exponential_schedule`: geometric interpolation, ``v0 * (v1 / v0) ** t`` (the learning
  rate: a decay from 1e-3 to 5e-5 halves and halves again instead of dropping almost at once).
- :func:`staircase_schedule`: the value of the last knot reached, no interpolation (replay size,
  tensorboard folder suffix).

Frames may repeat (``[[0, 1], [100, 1], [100, 0.5]]`` is a step at frame 100): at a repeated frame
the later knot wins. Scaling by ``training.global_schedule_speed`` is done by the caller through
:func:`scale_knots`; the functions here take knots as they are.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any, TypeVar

V = TypeVar("V")

Knots = Sequence[Sequence[Any]]


def check_knots(knots: Knots) -> None:
    """Raise ``ValueError`` unless ``knots`` is a non-empty list of ``[frame, value]`` sorted by frame."""
    if len(knots) == 0:
        raise ValueError("a schedule needs at least one [frame, value] knot")
    previous = -math.inf
    for i, knot in enumerate(knots):
        if len(knot) != 2:
            raise ValueError(f"knot {i} must be [frame, value], got {list(knot)!r}")
        frame = knot[0]
        if isinstance(frame, bool) or not isinstance(frame, int | float) or not math.isfinite(frame):
            raise ValueError(f"knot {i}: frame must be a finite number, got {frame!r}")
        if frame < 0:
            raise ValueError(f"knot {i}: frame must be >= 0, got {frame}")
        if frame < previous:
            raise ValueError(
                f"knots must be sorted by frame: knot {i} (frame {frame}) comes after frame {previous}"
            )
        previous = frame


def scale_knots(knots: Knots, speed: float) -> list[tuple[float, Any]]:
    """Knots with every frame multiplied by ``speed`` (``training.global_schedule_speed``)."""
    return [(knot[0] * speed, knot[1]) for knot in knots]


def _bracket(knots: Knots, frame: float) -> tuple[int, int]:
    """Indices (i, j) of the knots around ``frame``; i == j when ``frame`` is outside or on a flat end."""
    frames = [k[0] for k in knots]
    j = bisect.bisect_right(frames, frame)
    if j == 0:
        return 0, 0
    if j == len(frames):
        return j - 1, j - 1
    return j - 1, j


def linear_schedule(knots: Knots, frame: float) -> float:
    """Value at ``frame``, interpolated linearly between knots; constant outside them."""
    i, j = _bracket(knots, frame)
    x0, y0 = knots[i][0], float(knots[i][1])
    if i == j:
        return y0
    x1, y1 = knots[j][0], float(knots[j][1])
    t = (frame - x0) / (x1 - x0)
    return y0 + t * (y1 - y0)


def exponential_schedule(knots: Knots, frame: float) -> float:
    """Value at ``frame``, interpolated geometrically between knots; constant outside them.

    Values must be positive (checked at config load for the learning rate).
    """
    i, j = _bracket(knots, frame)
    x0, y0 = knots[i][0], float(knots[i][1])
    if i == j:
        return y0
    x1, y1 = knots[j][0], float(knots[j][1])
    t = (frame - x0) / (x1 - x0)
    return y0 * (y1 / y0) ** t


def staircase_schedule(knots: Sequence[Sequence[V]], frame: float) -> V:
    """Value of the last knot whose frame is <= ``frame`` (the first knot's value before it)."""
    i, _ = _bracket(knots, frame)
    return knots[i][1]
