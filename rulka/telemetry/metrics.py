"""Metric names shared by the roles, the tests and `rulka plot`, plus small aggregators.

Names are namespaced like CleanRL's: ``charts/...`` (what the policy does), ``losses/...`` (what
the optimiser sees), ``perf/...`` (whether the system is the bottleneck), ``eval/...`` (greedy
test episodes: the policy's level without exploration; same leaves as ``charts/``). Per-map and per-worker
variants put the map or worker name in the middle: ``charts/<map>/race_time_ms``,
``perf/<worker>/samples_per_s``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

# -- what the policy does -------------------------------------------------------------------------
EPISODIC_RETURN = "charts/episodic_return"
RACE_TIME_MS = "charts/race_time_ms"  # finished episodes only
FINISH_RATE = "charts/finish_rate"  # fraction of episodes that reached the finish
EPISODES = "charts/episodes"  # cumulative count
REFERENCE_TIME_MS = "charts/reference_time_ms"  # the track's reference time, logged once per map
LEARNING_RATE = "charts/learning_rate"
EPSILON = "charts/epsilon"  # probability of a uniformly random action
EPSILON_BOLTZMANN = "charts/epsilon_boltzmann"  # probability of a noisy-Q action
Q_MEAN = "charts/q_mean"
Q_STD = "charts/q_std"
WEIGHTS_VERSION = "charts/weights_version"
SAMPLES_RECEIVED = "charts/samples_received"  # cumulative transitions stored by the trainer
BATCHES_TRAINED = "charts/batches_trained"  # cumulative

# -- what the optimiser sees ------------------------------------------------------------------------
TD_LOSS = "losses/td_loss"
TEST_LOSS = "losses/test_loss"  # loss on held-out transitions (Linesight's test buffer)
GRAD_NORM = "losses/grad_norm"

# -- whether the system keeps up --------------------------------------------------------------------
SAMPLES_PER_S = "perf/samples_per_s"  # per worker: perf/<worker>/samples_per_s
ACTIONS_PER_S = "perf/actions_per_s"
BATCHES_PER_S = "perf/batches_per_s"
SAMPLES_TRAINED_PER_SAMPLE_RECEIVED = "perf/samples_trained_per_sample_received"
INGEST_MB_PER_S = "perf/ingest_mb_per_s"
QUEUE_DEPTH = "perf/queue_depth"
SEGMENTS_DROPPED = "perf/segments_dropped"
SEGMENTS_DUPLICATE = "perf/segments_duplicate"
SEGMENTS_RESENT = "perf/segments_resent"
UNSENT_SEGMENTS = "perf/unsent_segments"
WORKERS_CONNECTED = "perf/workers_connected"
POLICY_LAG_MIN = "perf/policy_lag_min"
POLICY_LAG_AVG = "perf/policy_lag_avg"
POLICY_LAG_MAX = "perf/policy_lag_max"

# -- greedy test episodes (trainer.eval_every_versions): the charts/ episode metrics under eval/ -------
EVAL_RETURN = "eval/episodic_return"
EVAL_RACE_TIME_MS = "eval/race_time_ms"
EVAL_FINISH_RATE = "eval/finish_rate"
EVAL_EPISODES = "eval/episodes"

NAMESPACES = ("charts", "losses", "perf", "eval")

STANDARD_METRICS: tuple[str, ...] = (
    EPISODIC_RETURN, RACE_TIME_MS, FINISH_RATE, EPISODES, REFERENCE_TIME_MS, LEARNING_RATE,
    EPSILON, EPSILON_BOLTZMANN, Q_MEAN, Q_STD, WEIGHTS_VERSION, SAMPLES_RECEIVED, BATCHES_TRAINED, TD_LOSS,
    TEST_LOSS, GRAD_NORM, EVAL_RETURN, EVAL_RACE_TIME_MS, EVAL_FINISH_RATE, EVAL_EPISODES, SAMPLES_PER_S,
    ACTIONS_PER_S, BATCHES_PER_S, SAMPLES_TRAINED_PER_SAMPLE_RECEIVED,
    INGEST_MB_PER_S, QUEUE_DEPTH, SEGMENTS_DROPPED, SEGMENTS_DUPLICATE, SEGMENTS_RESENT,
    UNSENT_SEGMENTS, WORKERS_CONNECTED, POLICY_LAG_MIN, POLICY_LAG_AVG, POLICY_LAG_MAX,
)


def _scoped(metric: str, scope: str) -> str:
    namespace, _, leaf = metric.partition("/")
    if not leaf or namespace not in NAMESPACES:
        raise ValueError(f"{metric!r} is not a namespaced metric name like 'charts/race_time_ms'")
    if not scope or "/" in scope:
        raise ValueError(f"scope name {scope!r} must be non-empty and contain no '/'")
    return f"{namespace}/{scope}/{leaf}"


def _valid_scope(scope: str) -> bool:
    return bool(scope) and "/" not in scope


def per_map(metric: str, map_name: str) -> str:
    """``per_map("charts/race_time_ms", "A01") == "charts/A01/race_time_ms"``."""
    return _scoped(metric, map_name)


def per_worker(metric: str, worker: str) -> str:
    """``per_worker("perf/samples_per_s", "pc1") == "perf/pc1/samples_per_s"``."""
    return _scoped(metric, worker)


def split_scoped(name: str) -> tuple[str | None, str]:
    """Undo ``per_map``/``per_worker``: ``"charts/A01/race_time_ms" -> ("A01", "charts/race_time_ms")``;
    an unscoped name gives ``(None, name)``."""
    parts = name.split("/")
    if len(parts) == 3:
        return parts[1], f"{parts[0]}/{parts[2]}"
    return None, name


class RateMeter:
    """Events per second over a sliding window (e.g. samples/s, MB/s).

    ``add(n)`` records ``n`` units now; ``rate()`` is the units added in the last ``window_s``
    seconds divided by the time covered, which is shorter than the window right after start.
    Thread-safe.
    """

    def __init__(self, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self._clock = clock
        self._start = clock()
        self._events: deque[tuple[float, float]] = deque()
        self._in_window = 0.0
        self.total = 0.0
        self._lock = threading.Lock()

    def add(self, amount: float = 1.0) -> None:
        with self._lock:
            now = self._clock()
            self._events.append((now, float(amount)))
            self._in_window += amount
            self.total += amount
            self._expire(now)

    def _expire(self, now: float) -> None:
        while self._events and self._events[0][0] < now - self.window_s:
            _, amount = self._events.popleft()
            self._in_window -= amount

    def rate(self) -> float:
        with self._lock:
            now = self._clock()
            self._expire(now)
            span = min(self.window_s, now - self._start)
            if span <= 0:
                return 0.0
            return max(self._in_window, 0.0) / span


class LagStats:
    """Policy lag: how many weight versions behind the trainer a segment's policy was.

    Feed ``add(trainer_version - segment_version)`` per segment; ``pop_metrics()`` returns
    ``perf/policy_lag_min/avg/max`` since the previous call (empty when nothing arrived).
    """

    def __init__(self, prefix: str = "perf/policy_lag") -> None:
        self.prefix = prefix
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.count = 0
        self._sum = 0.0
        self._min = math.inf
        self._max = -math.inf

    def add(self, lag: float) -> None:
        with self._lock:
            self.count += 1
            self._sum += lag
            self._min = min(self._min, lag)
            self._max = max(self._max, lag)

    def add_versions(self, trainer_version: int, segment_version: int) -> None:
        self.add(trainer_version - segment_version)

    def pop_metrics(self) -> dict[str, float]:
        with self._lock:
            if self.count == 0:
                return {}
            out = {
                f"{self.prefix}_min": float(self._min),
                f"{self.prefix}_avg": self._sum / self.count,
                f"{self.prefix}_max": float(self._max),
            }
            self._reset()
            return out


class EpisodeStats:
    """Per-map episode results between two logging points.

    ``add(map_name, episodic_return, race_time_ms, finished)`` per episode; ``pop_metrics()``
    returns mean return, mean race time of finished episodes and finish rate, both overall and
    per map (``charts/<map>/...``), plus the cumulative episode counts. ``namespace="eval"``
    names them ``eval/...`` instead (greedy test episodes).
    """

    def __init__(self, namespace: str = "charts") -> None:
        if namespace not in NAMESPACES:
            raise ValueError(f"namespace must be one of {NAMESPACES}, got {namespace!r}")
        self.namespace = namespace
        self._lock = threading.Lock()
        self._pending: dict[str, list[tuple[float, float | None, bool]]] = {}
        self._episodes: dict[str, int] = {}

    def add_segment(self, segment: Any) -> bool:
        """Record the episode a ``rulka.segment.Segment`` ends (``episode_done``), from the info the
        worker attaches (``episode_return``, ``race_time_ms``, ``finished``); the map is the
        segment's ``map_name`` (else info ``map_name``/``track``). Returns whether it counted."""
        info = getattr(segment, "info", None) or {}
        ret = info.get("episode_return")
        if not getattr(segment, "episode_done", False) or not isinstance(ret, int | float) or isinstance(ret, bool):
            return False
        map_name = getattr(segment, "map_name", "") or info.get("map_name") or info.get("track") or ""
        race_time = info.get("race_time_ms")
        race_time = float(race_time) if isinstance(race_time, int | float) and not isinstance(race_time, bool) else None
        self.add(str(map_name), float(ret), race_time, bool(info.get("finished", False)))
        return True

    def add(self, map_name: str, episodic_return: float, race_time_ms: float | None, finished: bool) -> None:
        """One finished episode; ``map_name`` may be empty (then it counts only in the overall figures)."""
        with self._lock:
            self._pending.setdefault(map_name, []).append(
                (float(episodic_return), None if race_time_ms is None else float(race_time_ms), bool(finished))
            )
            self._episodes[map_name] = self._episodes.get(map_name, 0) + 1

    @staticmethod
    def _summarise(rows: list[tuple[float, float | None, bool]]) -> dict[str, float]:
        out = {
            EPISODIC_RETURN: sum(r[0] for r in rows) / len(rows),
            FINISH_RATE: sum(1 for r in rows if r[2]) / len(rows),
        }
        times = [r[1] for r in rows if r[2] and r[1] is not None]
        if times:
            out[RACE_TIME_MS] = sum(times) / len(times)
        return out

    def pop_metrics(self) -> dict[str, float]:
        with self._lock:
            pending, self._pending = self._pending, {}
            episodes = dict(self._episodes)
        out: dict[str, float] = {}
        every = [row for rows in pending.values() for row in rows]
        if every:
            out.update(self._summarise(every))
        for map_name, rows in pending.items():
            if _valid_scope(map_name):
                for name, value in self._summarise(rows).items():
                    out[per_map(name, map_name)] = value
        if episodes:
            out[EPISODES] = float(sum(episodes.values()))
            for map_name, count in episodes.items():
                if _valid_scope(map_name):
                    out[per_map(EPISODES, map_name)] = float(count)
        if self.namespace != "charts":
            out = {f"{self.namespace}/{name.partition('/')[2]}": value for name, value in out.items()}
        return out
