"""``state_normalization``: how float inputs are normalised."""

from __future__ import annotations

from pydantic import (
    PositiveFloat,
)

from rulka.config.sections.common import Section


class StateNormalizationConfig(Section):
    """Float input normalisation (x - mean) / std; null = rulka's defaults for the layout."""

    float_inputs_mean: list[float] | None = None
    """One mean per float input (length float_input_dim)."""
    float_inputs_std: list[PositiveFloat] | None = None
    """One standard deviation per float input, each > 0."""
