"""``EpisodeStitcher``: joins the segments of one episode into stretches a memory can cut into
transitions, storing each frame once.

A worker cuts an episode into segments (``T`` steps, ``T + 1`` observations: the first
observation of a segment is the last one of the previous segment). Segments of many workers
arrive interleaved. A transition that looks ``n`` steps ahead needs frames that may only come
with the next segment, so the stitcher holds back the last ``hold_back`` steps of an unfinished
episode (its "tail") and prepends them to the next segment of that episode. A missing segment
closes the tail as a cut-off stretch (counted in ``episode_gaps``); more than
``max_pending`` open episodes drop the oldest tail (``dropped_pending``).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping

import numpy as np


@dataclasses.dataclass
class Stretch:
    """Consecutive steps of one episode: ``frames`` (L + 1 serials, state of step i is
    ``frames[i]``), per-step arrays ``steps`` (each of length L). The first ``ready`` steps can
    become transitions now; ``finished``: frame L is the episode's terminal state."""

    frames: np.ndarray
    steps: dict[str, np.ndarray]
    ready: int
    finished: bool

    def __len__(self) -> int:
        return len(self.frames) - 1


class EpisodeStitcher:
    """Keeps the tails of unfinished episodes, keyed by (run, worker, episode)."""

    def __init__(self, hold_back: int, max_pending: int = 256) -> None:
        self.hold_back = max(0, int(hold_back))
        self.max_pending = max(1, int(max_pending))
        self.tails: OrderedDict[Hashable, tuple[Stretch, int]] = OrderedDict()
        self.counters = {"episode_gaps": 0, "dropped_pending": 0}

    def drop(self, key: Hashable) -> None:
        """Forget an episode's tail (its segments are not being stored)."""
        self.tails.pop(key, None)

    def restart(self, saved_counters: Mapping[str, int]) -> None:
        """After a memory is loaded: take back the saved counters; forget the tails (not saved)."""
        self.counters.update({k: int(v) for k, v in saved_counters.items() if k in self.counters})
        self.tails.clear()

    def join(self, key: Hashable, index_in_episode: int, episode_done: bool, finished: bool,
             store_frames: Callable[[int], np.ndarray], steps: Mapping[str, np.ndarray]) -> list[Stretch]:
        """Add one segment (``steps``: per-step arrays of length T) and return the stretches
        ready to become transitions. ``store_frames(first)`` must store the segment's frames
        from index ``first`` on (0 or 1: the first frame is skipped when a tail already holds it)
        and return their serials. ``finished``: the segment ends the episode in a terminal state."""
        out: list[Stretch] = []
        held = self.tails.pop(key, None)
        if held is not None and held[1] != index_in_episode:
            # a segment of this episode went missing: what we have is a cut-off stretch
            self.counters["episode_gaps"] += 1
            tail = held[0]
            out.append(Stretch(tail.frames, tail.steps, len(tail), False))
            held = None
        if held is not None:
            tail = held[0]
            frames = np.concatenate([tail.frames, store_frames(1)])
            merged = {k: np.concatenate([tail.steps[k], np.asarray(v)]) for k, v in steps.items()}
        else:
            frames = store_frames(0)
            merged = {k: np.asarray(v) for k, v in steps.items()}
        length = len(frames) - 1
        ready = length if episode_done else max(0, length - self.hold_back)
        out.append(Stretch(frames, merged, ready, bool(finished and episode_done)))
        if not episode_done:
            rest = Stretch(frames[ready:], {k: v[ready:] for k, v in merged.items()}, 0, False)
            self.tails[key] = (rest, index_in_episode + 1)
            while len(self.tails) > self.max_pending:
                self.tails.popitem(last=False)
                self.counters["dropped_pending"] += 1
        return out
