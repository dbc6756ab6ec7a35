"""Recording reference lines from a driven run, for every game backend (``rulka tm record-line``).

A backend feeds ``LineRecorder`` the car's position as the run goes (and the position at each
real checkpoint it passes); ``save_recorded_line`` writes what ``ReferenceLine.load`` reads:

- ``NAME.npy``: the (N, 3) float64 points resampled every ``distance_between_checkpoints`` metres,
  rounded to 4 decimals, as Linesight stores its ``*_0.5m_*.npy`` lines (no checkpoints);
- ``NAME.json``: the same points in rulka's format plus the real checkpoint positions and the
  recording's metadata (map, race time, source, date, backend); ``ReferenceLine.load`` uses the
  checkpoints to keep the virtual checkpoints in step with the game's.

Point either file at ``map_cycle.entries[].reference_line_path``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rulka.envs.reference_line import FILE_FORMAT, FILE_VERSION, resample_polyline
from rulka.errors import UserError


@dataclass
class LineRecorder:
    """Positions of one driven run; ``add`` skips a car standing still (within ``min_step_m``)."""

    min_step_m: float = 0.05
    points: list[tuple[float, float, float]] = field(default_factory=list)
    checkpoints: list[tuple[float, float, float]] = field(default_factory=list)

    def add(self, position: Any) -> None:
        p = tuple(float(v) for v in np.asarray(position, dtype=np.float64).reshape(3))
        if not all(np.isfinite(p)):
            return
        if self.points and np.linalg.norm(np.subtract(p, self.points[-1])) < self.min_step_m:
            return
        self.points.append(p)  # type: ignore[arg-type]

    def add_checkpoint(self, position: Any) -> None:
        self.checkpoints.append(tuple(float(v) for v in np.asarray(position, dtype=np.float64).reshape(3)))  # type: ignore[arg-type]


def save_recorded_line(recorder: LineRecorder, out: str | Path, spacing: float = 0.5,
                       metadata: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """Write ``out`` with suffixes ``.npy`` and ``.json`` (see module doc); returns both paths.

    The finish checkpoint (the last one) is not stored as a real checkpoint: the line ends there."""
    if len(recorder.points) < 2:
        raise UserError("the recorded run has fewer than two distinct positions: drive from the start to the finish")
    base = Path(out).expanduser()
    if base.suffix in (".npy", ".json"):
        base = base.with_suffix("")
    base.parent.mkdir(parents=True, exist_ok=True)
    points = np.round(resample_polyline(np.asarray(recorder.points), spacing), 4)
    npy, js = base.with_suffix(".npy"), base.with_suffix(".json")
    np.save(npy, points.astype(np.float64), allow_pickle=False)
    doc: dict[str, Any] = {
        "format": FILE_FORMAT, "version": FILE_VERSION, "distance_between_checkpoints": float(spacing),
        "points": points.tolist(),
        "recorded_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        **(metadata or {}),
    }
    cps = recorder.checkpoints[:-1]
    if cps:
        doc["checkpoints"] = np.round(np.asarray(cps), 4).tolist()
    js.write_text(json.dumps(doc))
    return npy, js
