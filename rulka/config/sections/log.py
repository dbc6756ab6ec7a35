"""``logging`` (rulka's own): wandb and TensorBoard."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import (
    Field,
    PositiveFloat,
)

from rulka.config.sections.common import Section


class WandbConfig(Section):
    enabled: bool = True
    """Log to Weights & Biases."""
    mode: Literal["offline", "online", "disabled"] = "offline"
    """wandb mode (offline needs no account; sync later)."""
    project: str = "rulka"
    """wandb project."""
    entity: str | None = None
    """wandb entity (user or team)."""


class TensorboardConfig(Section):
    enabled: bool = True
    """Write TensorBoard event files."""


class LoggingConfig(Section):
    """Where runs are written and which dashboards get metrics (JSONL is always written)."""

    run_dir: Path = Path("runs")
    """Parent folder of run folders."""
    wandb: WandbConfig = Field(default_factory=WandbConfig)
    """Weights & Biases."""
    tensorboard: TensorboardConfig = Field(default_factory=TensorboardConfig)
    """TensorBoard."""
    log_every_s: PositiveFloat = 10
    """Seconds between metric lines."""
    progress: Literal["auto", "always", "never"] = "auto"
    """Progress bar: auto = only on a terminal."""
