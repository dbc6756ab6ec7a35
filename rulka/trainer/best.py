"""The run's best policy: the weights that drove the map cycle's greedy entries fastest.

A greedy policy keeps changing while it trains: on the simulator's five bundled tracks, one
run's in-run greedy race on one track swung by 1-3 s from one weights version to the next
(BENCHMARKS.md, issue 17), so the final weights are a draw. The trainer therefore keeps
candidates: every so often it marks a published version as an *evaluation version* (the weights
carry ``eval_policy``), keeps a copy of those weights, and the workers drive every greedy
map-cycle entry with the newest evaluation version they have (switching only between episodes),
tagging each such episode with ``eval_policy_version``. Once a candidate has a greedy result on
every greedy map of the cycle, it is scored; the best so far is written to
``<run>/best/policy.safetensors`` (a policy file like ``<run>/weights/``, for ``rulka eval``,
``rulka sim render --policy``) with ``<run>/best/best.json`` (version, frames, per-map results).
Every complete candidate is appended to ``<run>/best/candidates.jsonl``: how the greedy policy's
races evolved over the run, one line per version.

Score, as a TrackMania player ranks runs: more maps finished first; then more maps finished
faster than the map's reference time, where the env reports one (``reference_time_ms``: a
medal or author time, a recorded line's time; on rulka's simulator the scripted driver's time);
then the lower sum of the finished race times; then more metres covered on the unfinished maps.
An env without reference times is ranked by finishes and total time alone.

A new candidate is marked when the last one is complete, or when it has waited
``TIMEOUT_S`` (a worker stopped mid-pass): the passes go as fast as the workers drive.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("rulka.trainer")

BEST_DIR = "best"
BEST_JSON = "best.json"
CANDIDATES_LOG = "candidates.jsonl"
TIMEOUT_S = 300.0  # a candidate not complete after this long is replaced (its results still count)
KEEP_CANDIDATES = 3  # candidates whose results may still arrive (the newest and two before it)


@dataclasses.dataclass(frozen=True)
class MapResult:
    finished: bool
    race_time_ms: float | None
    progress_m: float
    reference_time_ms: float | None = None

    @property
    def beats_reference(self) -> bool:
        return (self.finished and self.race_time_ms is not None and self.reference_time_ms is not None
                and self.race_time_ms < self.reference_time_ms)


Key = tuple[int, int, float, float]


def _number(x: Any) -> float | None:
    """``x`` as a float when it is a real number (not a bool), else None."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def score(results: Mapping[str, MapResult]) -> Key:
    """Sort key, lower is better: (-maps finished, -maps faster than their reference time, sum of
    the finished race times in ms, -metres covered on the unfinished maps)."""
    finished = [r for r in results.values() if r.finished and r.race_time_ms is not None]
    unfinished = [r for r in results.values() if not (r.finished and r.race_time_ms is not None)]
    return (-len(finished), -sum(r.beats_reference for r in finished),
            float(sum(r.race_time_ms for r in finished)),  # type: ignore[misc]
            -float(sum(r.progress_m for r in unfinished)))


@dataclasses.dataclass
class _Candidate:
    version: int
    weights: dict[str, Any]
    spec: dict[str, Any]
    frames: int
    updates: int
    marked_t: float
    results: dict[str, MapResult] = dataclasses.field(default_factory=dict)


class BestPolicy:
    """Candidates, their greedy results per map, and the best complete one (see the module doc).

    ``maps``: the short names of the map cycle's greedy entries; ``folder``: where the best policy
    goes (None: kept in memory only)."""

    def __init__(self, maps: Iterable[str], folder: Path | None, clock: Any = time.monotonic) -> None:
        self.maps = sorted(set(maps))
        if not self.maps:
            raise ValueError("BestPolicy needs at least one greedy map")
        self.folder = folder
        self.clock = clock
        self._candidates: OrderedDict[int, _Candidate] = OrderedDict()
        self.best: dict[str, Any] | None = None  # what best.json holds
        self.best_key: Key | None = None
        self.completed = 0  # candidates with a result on every map
        self.improved = 0  # times the best was replaced
        self.dropped = 0  # candidates given up before they were complete
        if folder is not None:
            self._load()

    # -- the trainer's side ---------------------------------------------------------------------
    def wants_candidate(self) -> bool:
        """True when the next published version should be marked: no candidate yet, the newest one
        complete, or waiting for longer than ``TIMEOUT_S``."""
        if not self._candidates:
            return True
        newest = next(reversed(self._candidates.values()))
        return len(newest.results) >= len(self.maps) or self.clock() - newest.marked_t > TIMEOUT_S

    def mark(self, version: int, weights: Mapping[str, Any], spec: Mapping[str, Any], frames: int,
             updates: int) -> None:
        """Keep ``weights`` (copied) as the candidate of ``version``."""
        import torch

        copied = {k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in weights.items()}
        self._candidates[int(version)] = _Candidate(int(version), copied, dict(spec), int(frames), int(updates),
                                                    self.clock())
        while len(self._candidates) > KEEP_CANDIDATES:
            _, old = self._candidates.popitem(last=False)
            if len(old.results) < len(self.maps):
                self.dropped += 1

    def add_result(self, version: int, map_name: str, finished: bool, race_time_ms: float | None,
                   progress_m: Any, reference_time_ms: Any = None) -> bool:
        """A greedy episode of candidate ``version`` on ``map_name``; True when it completed the
        candidate and made it the new best (written to ``folder``). The first result per map counts
        (a greedy race of one version is the same race each time). ``progress_m`` and
        ``reference_time_ms`` come from a worker's episode info: anything but a number is None."""
        cand = self._candidates.get(int(version))
        if cand is None or map_name not in self.maps or map_name in cand.results:
            return False
        cand.results[map_name] = MapResult(bool(finished), None if race_time_ms is None else float(race_time_ms),
                                           _number(progress_m) or 0.0, _number(reference_time_ms))
        if len(cand.results) < len(self.maps):
            return False
        self.completed += 1
        key = score(cand.results)
        summary = {
            "version": cand.version, "frames": cand.frames, "updates": cand.updates,
            "maps_finished": -key[0], "maps_beating_reference": -key[1], "race_time_total_ms": key[2],
            "maps": {name: dataclasses.asdict(r) for name, r in sorted(cand.results.items())},
        }
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(self.folder / CANDIDATES_LOG, "a", encoding="utf-8") as f:
                f.write(json.dumps(summary) + "\n")
        if self.best_key is not None and key >= self.best_key:
            return False
        self.best_key, self.best = key, summary
        self.improved += 1
        if self.folder is not None:
            self._write(cand)
        return True

    def metrics(self) -> dict[str, float]:
        out = {"eval/best_policy/candidates_completed": float(self.completed),
               "eval/best_policy/candidates_dropped": float(self.dropped)}
        if self.best is not None:
            out["eval/best_policy/version"] = float(self.best["version"])
            out["eval/best_policy/maps_finished"] = float(self.best["maps_finished"])
            out["eval/best_policy/maps_beating_reference"] = float(self.best["maps_beating_reference"])
            out["eval/best_policy/race_time_total_ms"] = float(self.best["race_time_total_ms"])
        return out

    # -- files ----------------------------------------------------------------------------------
    def _write(self, cand: _Candidate) -> None:
        from rulka.envs.sim.policy import POLICY_FILE, save_policy
        from rulka.trainer.checkpoint import atomic_write_text

        assert self.folder is not None and self.best is not None
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{POLICY_FILE}.tmp"
        save_policy(tmp, cand.weights, cand.spec)
        os.replace(tmp, self.folder / POLICY_FILE)
        atomic_write_text(self.folder / BEST_JSON, json.dumps(self.best, indent=2) + "\n")
        log.info("best policy: v%d, %d/%d maps finished, %d faster than their reference, %.2f s in all",
                 cand.version, self.best["maps_finished"], len(self.maps), self.best["maps_beating_reference"],
                 self.best["race_time_total_ms"] / 1000)

    def _load(self) -> None:
        """A resumed run keeps the best it had: a later candidate must beat it."""
        assert self.folder is not None
        path = self.folder / BEST_JSON
        if not path.is_file():
            return
        def number(x: Any) -> float | None:
            return None if x is None else float(x)

        try:
            best = json.loads(path.read_text(encoding="utf-8"))
            results = {str(k): MapResult(bool(v["finished"]), number(v["race_time_ms"]), float(v["progress_m"]),
                                         number(v.get("reference_time_ms"))) for k, v in best["maps"].items()}
            key = score(results)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring an unreadable %s (the first complete candidate replaces it): %s", path, exc)
            return
        if sorted(results) != self.maps:  # another map cycle: its score does not compare
            log.warning("%s scores other maps (%s); the first complete candidate replaces it", path,
                        ", ".join(sorted(results)))
            return
        # the summary fields follow from the races (a file written before a field existed has them too)
        best.update(maps_finished=-key[0], maps_beating_reference=-key[1], race_time_total_ms=key[2])
        self.best, self.best_key = best, key
