"""``map_cycle``: which maps the workers drive, in what order, exploring or greedy."""

from __future__ import annotations

from pydantic import (
    Field,
    PositiveInt,
)

from rulka.config.sections.common import Section


class MapCycleEntry(Section):
    """One entry of the map cycle."""

    short_name: str
    """Name used in logs."""
    map_path: str
    """Map file (.Challenge.Gbx / .Map.Gbx) or simulator track name."""
    reference_line_path: str = ""
    """Reference line (.npy, N x 3 floats) for the reward and waypoints."""
    is_exploration: bool = True
    """Explore (true) or evaluate greedily (false)."""
    fill_buffer: bool = True
    """Store this entry's transitions for training."""
    repeat: PositiveInt = 1
    """Times this entry repeats in the cycle."""


class MapCycleConfig(Section):
    """Map training cycle."""

    entries: list[MapCycleEntry] = Field(default_factory=list)
    """Entries, played in order and repeated; empty = environment.track only."""
    keep_best_policy: bool = True
    """Keep the run's best policy: the trainer marks evaluation versions of the weights, workers drive
    greedy episodes with them (the greedy entries, ``is_exploration: false``; without any, the episodes
    ``trainer.best_policy_every_frames`` asks for), and the version that drove best (most maps finished,
    then most under their reference time, then the lowest total race time; a Gymnasium env: the
    highest mean return) is written to ``<run>/best/policy.safetensors`` with ``best.json`` (rulka extension)."""

    def expanded(self) -> list[MapCycleEntry]:
        """The cycle with each entry repeated ``repeat`` times, in order."""
        return [entry for entry in self.entries for _ in range(entry.repeat)]
