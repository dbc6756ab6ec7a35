"""The run's best policy: the weights that drove the greedy evaluation episodes best.

A greedy policy keeps changing while it trains: on the simulator's five bundled tracks, one
run's in-run greedy race on one track swung by 1-3 s from one weights version to the next
(BENCHMARKS.md, issue 17), so the final weights are a draw. The trainer therefore keeps
candidates: every so often it marks a published version as an *evaluation version* (the weights'
header says ``candidate``), keeps a copy of those weights, and the workers drive every greedy
map-cycle entry with the newest evaluation version they have (switching only between episodes),
tagging each such episode with ``eval_policy_version``. Once a candidate has a greedy result on
every greedy map of the cycle, it is scored; the best so far is written to
``<run>/best/policy.safetensors`` (a policy file like ``<run>/weights/``, for ``rulka eval``,
``rulka sim render --policy``, ``nn.init_from_pretrained``; the network's Hugging Face parts beside
it, as in ``weights/``) with ``<run>/best/best.json`` (version, frames, per-map results).
Every complete candidate is appended to ``<run>/best/candidates.jsonl``: how the greedy policy's
races evolved over the run, one line per version.

Score, as a TrackMania player ranks runs: more maps finished first; then more maps finished
faster than the map's reference time, where the env reports one (``reference_time_ms``: a
medal or author time, a recorded line's time; on rulka's simulator the scripted driver's time);
then the lower sum of the finished race times; then more metres covered on the unfinished maps.
An env without reference times is ranked by finishes and total time alone. A Gymnasium env
(``environment.backend: gym``: no finish line, no race time) is ranked by its greedy return: the
mean over ``trainer.best_policy_episodes`` episodes per map (``RETURN``).

Every run keeps one. With greedy map-cycle entries the workers' greedy entries are the
evaluation episodes. Without them (a single track, a Gymnasium env, a cycle of exploring entries
only) the trainer asks for them: every ``trainer.best_policy_every_frames`` frames the candidate's
weights carry a ``CandidateRequest`` (``rulka.net.messages``: one pass of the cycle times
``best_policy_episodes``, from the workers in turn), and that worker drives them greedily with the
candidate (``rulka.worker``), not stored for training. A map's result is the median of its
``best_policy_episodes`` races (``median_race``): on the simulator, where a race from the start line
repeats exactly, they start from the line moved by up to ``trainer.best_policy_start_noise`` metres
and degrees, the k-th start the same for every candidate. One race from the line picks the
luckiest version more often than the best one (BENCHMARKS.md, readme_frames_1m).

A run that ends on the average of its weights (``training.lr_cooldown_end_on_average``) ends on weights
that were never a candidate, and in 3 of 5 runs they raced faster than the best candidate
(BENCHMARKS.md, readme_frames_1m_mean). Inside its cooldown every other candidate is therefore the
average so far (``AVERAGE``; the trainer publishes it as that version, so the workers also act with
it until the next version, a few hundred frames): ``best/`` holds the average when it races best,
and ``best.json`` says ``"weights": "average"``.

A new candidate is marked when the last one is complete (and, for requested episodes, once
``best_policy_every_frames`` frames have been played since the last mark), or when it has waited
``TIMEOUT_S`` (a worker stopped mid-pass).
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

from rulka.net.messages import CandidateRequest

log = logging.getLogger("rulka.trainer")

BEST_DIR = "best"
BEST_JSON = "best.json"
CANDIDATES_LOG = "candidates.jsonl"
TIMEOUT_S = 300.0  # a candidate not complete after this long is replaced (its results still count)
KEEP_CANDIDATES = 3  # candidates whose results may still arrive (the newest and two before it)
RACE = "race"  # ranked by finishes, references beaten, race time, metres (TrackMania-like envs)
RETURN = "return"  # ranked by the mean greedy return (Gymnasium envs)
TRAINED = "trained"  # a candidate of the learner's weights
AVERAGE = "average"  # a candidate of the run's averaged weights (rulka.trainer.average), not the learner's


@dataclasses.dataclass(frozen=True)
class MapResult:
    finished: bool
    race_time_ms: float | None
    progress_m: float
    reference_time_ms: float | None = None
    episode_return: float | None = None  # the mean over the map's episodes (RETURN ranking)
    race_times_ms: tuple[float | None, ...] = ()  # RACE with several episodes: each race (None: unfinished)

    @property
    def beats_reference(self) -> bool:
        return (self.finished and self.race_time_ms is not None and self.reference_time_ms is not None
                and self.race_time_ms < self.reference_time_ms)


Key = tuple[int, int, float, float]


def _number(x: Any) -> float | None:
    """``x`` as a float when it is a real number (not a bool), else None."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def score(results: Mapping[str, MapResult], ranking: str = RACE) -> Key:
    """Sort key, lower is better: (-maps finished, -maps faster than their reference time, sum of
    the finished race times in ms, -metres covered on the unfinished maps). ``RETURN``:
    (0, 0, -sum over maps of the mean greedy return, 0)."""
    if ranking == RETURN:
        return (0, 0, -float(sum(r.episode_return or 0.0 for r in results.values())), 0.0)
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
    kind: str = TRAINED  # or AVERAGE: the run's averaged weights, not the learner's
    results: dict[str, MapResult] = dataclasses.field(default_factory=dict)
    returns: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # RETURN: per map, so far
    races: dict[str, list[MapResult]] = dataclasses.field(default_factory=dict)  # RACE: per map, so far


def race_order(finished: bool, race_time: float | None, progress_m: float) -> tuple[int, float, float]:
    """Sort key of one race, better first: finished races by time, then unfinished ones by distance
    (further is better)."""
    return (0, race_time, 0.0) if finished and race_time is not None else (1, 0.0, -progress_m)


def median_race(races: list[MapResult]) -> MapResult:
    """The median of a map's races (``race_order``), the lower middle (of 4, the 2nd best); with
    more than one race, every race's time beside it (``race_times_ms``)."""
    ranked = sorted(races, key=lambda r: race_order(r.finished, r.race_time_ms, r.progress_m))
    median = ranked[(len(ranked) - 1) // 2]
    if len(races) == 1:
        return median
    times = tuple(r.race_time_ms if r.finished else None for r in races)
    return dataclasses.replace(median, race_times_ms=times)


class BestPolicy:
    """Candidates, their greedy results per map, and the best complete one (see the module doc).

    ``maps``: the short names of the map cycle's greedy entries; ``folder``: where the best policy
    goes (None: kept in memory only). ``ranking``: ``RACE`` or ``RETURN``; ``episodes``: greedy
    episodes per map whose median race (``RACE``) or mean return (``RETURN``) is the map's result.
    ``request_episodes`` > 0: the trainer asks a worker for that many greedy episodes per
    candidate, a candidate at most every ``every_frames`` frames, started up to ``start_noise``
    metres and degrees off the start line (the simulator; the k-th on a map from the k-th start);
    ``single``: every result counts for the one map (a run without a map cycle: the map names
    episodes carry do not matter)."""

    def __init__(self, maps: Iterable[str], folder: Path | None, clock: Any = time.monotonic, *,
                 ranking: str = RACE, episodes: int = 1, request_episodes: int = 0, every_frames: int = 0,
                 single: bool = False, start_noise: float = 0.0) -> None:
        self.maps = sorted(set(maps))
        if not self.maps:
            raise ValueError("BestPolicy needs at least one greedy map")
        if ranking not in (RACE, RETURN):
            raise ValueError(f"ranking must be {RACE!r} or {RETURN!r}, not {ranking!r}")
        if single and len(self.maps) != 1:
            raise ValueError("single: one map only")
        self.folder = folder
        self.clock = clock
        self.ranking = ranking
        self.episodes = max(1, int(episodes))
        self.request_episodes = int(request_episodes)
        self.every_frames = int(every_frames)
        self.single = single
        self.start_noise = float(start_noise)
        self._last_mark_frames: int | None = None
        self._candidates: OrderedDict[int, _Candidate] = OrderedDict()
        self.best: dict[str, Any] | None = None  # what best.json holds
        self.best_key: Key | None = None
        self._best_weights: dict[str, Any] | None = None  # the best candidate's weights (this invocation)
        self.completed = 0  # candidates with a result on every map
        self.improved = 0  # times the best was replaced
        self.dropped = 0  # candidates given up before they were complete
        if folder is not None:
            self._load()

    @classmethod
    def for_config(cls, cfg: Any, folder: Path | None) -> BestPolicy | None:
        """The run's best policy as ``cfg`` asks for it (see the module doc), or None when it is
        turned off (``map_cycle.keep_best_policy: false``, or no greedy entries and
        ``trainer.best_policy_every_frames: 0``)."""
        if not cfg.map_cycle.keep_best_policy:
            return None
        ranking = RETURN if cfg.environment.backend == "gym" else RACE
        tc = cfg.trainer
        entries = cfg.map_cycle.entries
        greedy = {e.short_name for e in entries if not e.is_exploration}
        if greedy:  # the workers' greedy entries are the evaluation episodes
            return cls(greedy, folder, ranking=ranking)
        if not tc.best_policy_every_frames:
            return None
        episodes = int(tc.best_policy_episodes)
        noise = float(tc.best_policy_start_noise)
        if entries:  # exploring entries only: a requested pass of the cycle, each map greedily
            return cls({e.short_name for e in entries}, folder, ranking=ranking, episodes=episodes,
                       request_episodes=episodes * len(cfg.map_cycle.expanded()),
                       every_frames=tc.best_policy_every_frames, start_noise=noise)
        env = cfg.environment.gym_id if cfg.environment.backend == "gym" else cfg.environment.track
        return cls([str(env) or cfg.environment.backend], folder, ranking=ranking, episodes=episodes,
                   request_episodes=episodes, every_frames=tc.best_policy_every_frames, single=True,
                   start_noise=noise)

    def map_key(self, map_name: str) -> str:
        """The map a greedy episode counts for: its own name, or the one map (``single``)."""
        return self.maps[0] if self.single else map_name

    # -- the trainer's side ---------------------------------------------------------------------
    def wants_candidate(self, frames: int = 0) -> bool:
        """True when the next published version should be marked: no candidate yet, the newest one
        complete (and, when the trainer requests the episodes, ``every_frames`` frames since the
        last mark), or waiting for longer than ``TIMEOUT_S``."""
        if not self._candidates:
            return True
        newest = next(reversed(self._candidates.values()))
        if self.clock() - newest.marked_t > TIMEOUT_S:
            return True
        if len(newest.results) < len(self.maps):
            return False
        return self._last_mark_frames is None or frames - self._last_mark_frames >= self.every_frames

    def request(self, worker: str) -> CandidateRequest | None:
        """What a candidate's weights carry so that ``worker`` drives its greedy episodes (None when
        the map cycle's greedy entries do)."""
        if not self.request_episodes:
            return None
        return CandidateRequest(self.request_episodes, worker, self.start_noise)

    def mark(self, version: int, weights: Mapping[str, Any], spec: Mapping[str, Any], frames: int,
             updates: int, kind: str = TRAINED) -> None:
        """Keep ``weights`` (copied) as the candidate of ``version``; ``kind`` ``AVERAGE``: they are the
        run's averaged weights (``best.json`` and ``candidates.jsonl`` say ``"weights": "average"``)."""
        import torch

        copied = {k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in weights.items()}
        self._candidates[int(version)] = _Candidate(int(version), copied, dict(spec), int(frames), int(updates),
                                                    self.clock(), kind=str(kind))
        self._last_mark_frames = int(frames)
        while len(self._candidates) > KEEP_CANDIDATES:
            _, old = self._candidates.popitem(last=False)
            if len(old.results) < len(self.maps):
                self.dropped += 1

    def add_result(self, version: int, map_name: str, finished: bool, race_time_ms: float | None,
                   progress_m: Any, reference_time_ms: Any = None, episode_return: Any = None) -> bool:
        """A greedy episode of candidate ``version`` on ``map_name``; True when it completed the
        candidate and made it the new best (written to ``folder``). ``RACE``: the median race of
        the first ``episodes`` results per map (``median_race``); ``RETURN``: the mean return of
        the first ``episodes`` results. ``progress_m``, ``reference_time_ms`` and
        ``episode_return`` come from a worker's episode info: anything but a number is None."""
        cand = self._candidates.get(int(version))
        map_name = self.map_key(map_name)
        if cand is None or map_name not in self.maps or map_name in cand.results:
            return False
        race = MapResult(bool(finished), None if race_time_ms is None else float(race_time_ms),
                         _number(progress_m) or 0.0, _number(reference_time_ms))
        if self.ranking == RETURN:
            returns = cand.returns.setdefault(map_name, [])
            returns.append(_number(episode_return) or 0.0)
            if len(returns) < self.episodes:
                return False
            cand.results[map_name] = dataclasses.replace(race, episode_return=sum(returns) / len(returns))
        else:
            races = cand.races.setdefault(map_name, [])
            races.append(race)
            if len(races) < self.episodes:
                return False
            cand.results[map_name] = median_race(races)
        if len(cand.results) < len(self.maps):
            return False
        self.completed += 1
        key = score(cand.results, self.ranking)
        summary = {
            "version": cand.version, "frames": cand.frames, "updates": cand.updates,
            "scored_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "ranking": self.ranking,
            **({"weights": cand.kind} if cand.kind != TRAINED else {}),
            **self._summary(key),
            "maps": {name: dataclasses.asdict(r) for name, r in sorted(cand.results.items())},
        }
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(self.folder / CANDIDATES_LOG, "a", encoding="utf-8") as f:
                f.write(json.dumps(summary) + "\n")
        if self.best_key is not None and key >= self.best_key:
            return False
        self.best_key, self.best = key, summary
        self._best_weights = cand.weights
        self.improved += 1
        if self.folder is not None:
            self._write(cand)
        return True

    def best_weights(self) -> dict[str, Any] | None:
        """The best policy's weights: the candidate's copy when this invocation scored it, else
        ``<folder>/policy.safetensors`` (a resumed run); None when there is no best yet or its file
        cannot be read (logged)."""
        if self._best_weights is not None:
            return self._best_weights
        if self.best is None or self.folder is None:
            return None
        from rulka.envs.sim.policy import POLICY_FILE, read_policy_file
        from rulka.errors import UserError

        try:
            _, tensors, _ = read_policy_file(self.folder / POLICY_FILE)
        except (UserError, OSError) as exc:
            log.warning("best policy weights unreadable: %s", exc)
            return None
        return dict(tensors)

    def _summary(self, key: Key) -> dict[str, Any]:
        """What a score says, as ``best.json`` fields."""
        if self.ranking == RETURN:
            return {"return_mean": -key[2] / len(self.maps)}
        return {"maps_finished": -key[0], "maps_beating_reference": -key[1], "race_time_total_ms": key[2]}

    def describe(self) -> str:
        """The best so far in a few words (the progress line): ``best v12 3/5 finished 101.2s``."""
        if self.best is None:
            return ""
        out = f"best v{self.best['version']}" + (f" ({self.best['weights']})" if self.best.get("weights") else "")
        if self.ranking == RETURN:
            return f"{out} return {self.best['return_mean']:.1f}"
        if len(self.maps) > 1:
            out += f" {self.best['maps_finished']}/{len(self.maps)} finished"
        if self.best["maps_finished"]:
            out += f" {self.best['race_time_total_ms'] / 1000:.2f}s"
        if self.best["maps_finished"] < len(self.maps):  # how far it got where it did not finish
            # a car that backed off the line has negative progress: it got nowhere, not -1 m
            metres = sum(max(float(r.get("progress_m") or 0.0), 0.0)
                         for r in self.best["maps"].values() if not r.get("finished"))
            out += f" {metres:.0f}m"
        return out

    def metrics(self) -> dict[str, float]:
        out = {"eval/best_policy/candidates_completed": float(self.completed),
               "eval/best_policy/candidates_dropped": float(self.dropped)}
        if self.best is not None:
            out["eval/best_policy/version"] = float(self.best["version"])
            out["eval/best_policy/frames"] = float(self.best["frames"])
            if self.ranking == RETURN:
                out["eval/best_policy/return_mean"] = float(self.best["return_mean"])
            else:
                out["eval/best_policy/maps_finished"] = float(self.best["maps_finished"])
                out["eval/best_policy/maps_beating_reference"] = float(self.best["maps_beating_reference"])
                out["eval/best_policy/race_time_total_ms"] = float(self.best["race_time_total_ms"])
        return out

    # -- files ----------------------------------------------------------------------------------
    def _write(self, cand: _Candidate) -> None:
        from rulka.envs.sim.policy import POLICY_FILE, save_policy
        from rulka.nn.hf import save_hf_parts_from_weights
        from rulka.trainer.checkpoint_store import atomic_write_text

        assert self.folder is not None and self.best is not None
        self.folder.mkdir(parents=True, exist_ok=True)
        save_hf_parts_from_weights(cand.weights, cand.spec, self.folder)  # none without HF parts
        tmp = self.folder / f".{POLICY_FILE}.tmp"
        save_policy(tmp, cand.weights, cand.spec)
        os.replace(tmp, self.folder / POLICY_FILE)
        atomic_write_text(self.folder / BEST_JSON, json.dumps(self.best, indent=2) + "\n")
        log.info("best policy: v%d at %d frames: %s", cand.version, cand.frames, self.describe())

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
                                         number(v.get("reference_time_ms")), number(v.get("episode_return")))
                       for k, v in best["maps"].items()}
            ranking = best.get("ranking", RACE)
            key = score(results, self.ranking)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring an unreadable %s (the first complete candidate replaces it): %s", path, exc)
            return
        if sorted(results) != self.maps or ranking != self.ranking:  # another map cycle or env: no comparison
            log.warning("%s scores other maps (%s) or ranks by %s; the first complete candidate replaces it", path,
                        ", ".join(sorted(results)), ranking)
            return
        # the summary fields follow from the races (a file written before a field existed has them too)
        best.update(ranking=self.ranking, **self._summary(key))
        self.best, self.best_key = best, key
