"""Seeing a run: metrics (JSON lines, TensorBoard, wandb), terminal progress, metric names.

Roles create one ``MetricsLogger`` per run (``from_config(cfg, run_dir)``), call
``log({"charts/...": x, "perf/...": y}, step=frames)`` every ``logging.log_every_s`` and
``close()`` at the end; ``Progress`` shows a status line while they run. Importing this package
imports neither torch, TensorBoard nor wandb.
"""

from __future__ import annotations

from rulka.telemetry import metrics
from rulka.telemetry.logger import (
    METRICS_FILE,
    JsonlSink,
    MetricsLogger,
    TensorBoardSink,
    WandbSink,
    from_config,
    read_metrics,
    staircase_suffix,
)
from rulka.telemetry.metrics import (
    STANDARD_METRICS,
    EpisodeStats,
    LagStats,
    RateMeter,
    per_map,
    per_worker,
    split_scoped,
)
from rulka.telemetry.progress import Progress, format_value

__all__ = [
    "METRICS_FILE",
    "STANDARD_METRICS",
    "EpisodeStats",
    "JsonlSink",
    "LagStats",
    "MetricsLogger",
    "Progress",
    "RateMeter",
    "TensorBoardSink",
    "WandbSink",
    "format_value",
    "from_config",
    "metrics",
    "per_map",
    "per_worker",
    "read_metrics",
    "split_scoped",
    "staircase_suffix",
]
