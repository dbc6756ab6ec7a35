"""The map cycle (``map_cycle.entries``): which map each episode of a worker plays, and how.

Every backend runs it (the simulator's tracks, TMNF maps, TM2020 maps): the worker asks
``MapCycle.next()`` before each episode and passes ``MapCycle.reset_options(entry)`` to
``env.reset(options=...)``; an entry with ``is_exploration: false`` is played greedily (an
evaluation episode), one with ``fill_buffer: false`` is sent to the trainer for its metrics but
not stored for training. Entries repeat ``repeat`` times in order, then the cycle starts over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CycleEntry:
    """One episode's map (``map_cycle.entries[i]`` after ``repeat`` expansion)."""

    short_name: str
    map_path: str
    reference_line_path: str = ""
    is_exploration: bool = True
    fill_buffer: bool = True


class MapCycle:
    """Entries in order, each ``repeat`` times, forever."""

    def __init__(self, entries: list[CycleEntry]) -> None:
        if not entries:
            raise ValueError("a map cycle needs at least one entry")
        self.entries = list(entries)
        self._next = 0

    @classmethod
    def from_config(cls, cfg: Any) -> MapCycle | None:
        """The config's cycle, or None when ``map_cycle.entries`` is empty (then the env plays
        its own default: ``environment.track``)."""
        from rulka.plugins import opt

        raw = opt(cfg, "map_cycle.entries", []) or []
        entries: list[CycleEntry] = []
        for e in raw:
            get = (lambda k, d=None, e=e: e.get(k, d)) if isinstance(e, dict) else (lambda k, d=None, e=e: getattr(e, k, d))
            entry = CycleEntry(str(get("short_name")), str(get("map_path")), str(get("reference_line_path", "") or ""),
                               bool(get("is_exploration", True)), bool(get("fill_buffer", True)))
            entries.extend([entry] * int(get("repeat", 1) or 1))
        return cls(entries) if entries else None

    def next(self) -> CycleEntry:
        entry = self.entries[self._next]
        self._next = (self._next + 1) % len(self.entries)
        return entry

    @staticmethod
    def reset_options(entry: CycleEntry) -> dict[str, str]:
        """What ``env.reset(options=...)`` takes to play ``entry`` (every rulka TrackMania-like env)."""
        return {"map": entry.map_path, "reference_line": entry.reference_line_path, "short_name": entry.short_name}
