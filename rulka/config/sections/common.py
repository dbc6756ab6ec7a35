"""The base model, the schedule knot types and their validators shared by every section."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
)

from rulka.config.schedules import check_knots


def _knots(value: list[Any]) -> list[Any]:
    check_knots(value)
    return value


def _positive_values(value: list[Any]) -> list[Any]:
    for i, (_, v) in enumerate(value):
        if v <= 0:
            raise ValueError(f"knot {i}: value must be > 0 for an exponential schedule, got {v}")
    return value


def _unit_values(value: list[Any]) -> list[Any]:
    for i, (_, v) in enumerate(value):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"knot {i}: value must be within [0, 1], got {v}")
    return value


Frame = Annotated[int | float, Field(ge=0)]
# [[frame, value], ...] with linear interpolation (unless the field says otherwise)
FloatKnots = Annotated[list[tuple[Frame, float]], AfterValidator(_knots)]
UnitKnots = Annotated[list[tuple[Frame, float]], AfterValidator(_knots), AfterValidator(_unit_values)]
PositiveKnots = Annotated[list[tuple[Frame, float]], AfterValidator(_knots), AfterValidator(_positive_values)]
# [[frame, [buffer_size, start_learning_size]], ...], staircase
MemoryKnots = Annotated[list[tuple[Frame, tuple[PositiveInt, NonNegativeInt]]], AfterValidator(_knots)]
# [[frame, "suffix"], ...], staircase
SuffixKnots = Annotated[list[tuple[Frame, str]], AfterValidator(_knots)]

Algorithm = Literal["iqn", "ppo", "dpo", "grpo", "sac"]


class Section(BaseModel):
    """Base of every config model: unknown keys are errors, loaded values are read-only."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        populate_by_name=True,
    )
