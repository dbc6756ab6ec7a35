"""The map cycle (``map_cycle.entries``): which map each episode of a worker plays, and how.

Every backend runs it (the simulator's tracks, TMNF maps, TM2020 maps): the worker asks
``MapCycle.next()`` before each episode and passes ``MapCycle.reset_options(entry)`` to
``env.reset(options=...)``; an entry with ``is_exploration: false`` is played greedily (an
evaluation episode), one with ``fill_buffer: false`` is sent to the trainer for its metrics but
not stored for training. Entries repeat ``repeat`` times in order, then the cycle starts over.
"""

from __future__ import annotations

from rulka.config import ConfigLike, as_config
from rulka.config.sections import MapCycleEntry


class MapCycle:
    """Entries in order, each ``repeat`` times, forever."""

    def __init__(self, entries: list[MapCycleEntry]) -> None:
        if not entries:
            raise ValueError("a map cycle needs at least one entry")
        self.entries = list(entries)
        self._next = 0

    @classmethod
    def from_config(cls, cfg: ConfigLike) -> MapCycle | None:
        """The config's cycle, or None when ``map_cycle.entries`` is empty (then the env plays
        its own default: ``environment.track``)."""
        entries = as_config(cfg).map_cycle.expanded()
        return cls(entries) if entries else None

    def next(self) -> MapCycleEntry:
        entry = self.entries[self._next]
        self._next = (self._next + 1) % len(self.entries)
        return entry

    @staticmethod
    def reset_options(entry: MapCycleEntry) -> dict[str, str]:
        """What ``env.reset(options=...)`` takes to play ``entry`` (every rulka TrackMania-like env)."""
        return {"map": entry.map_path, "reference_line": entry.reference_line_path, "short_name": entry.short_name}
