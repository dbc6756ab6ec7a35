"""Trajectory memories of the on-policy learners: ``ready()`` says a batch is there, ``take()``
removes and returns it as a ``PolicyBatch``.

- ``StepsMemory`` (PPO): every segment is a rollout; ready once the rollouts hold at least
  ``ppo.rollout_steps_per_update`` steps over all workers.
- ``GroupMemory`` (GRPO): whole episodes, assembled from their segments; ready once exactly
  ``grpo.grpo_group_size`` of them share a start (``info["start_id"]`` from a worker running
  ``worker.rollouts_per_start`` episodes per start; without it, any episodes group together).
- ``PairMemory`` (DPO): whole episodes in a FIFO of ``dpo_pair_buffer_max``; a pair is the best
  and the worst by summed shaped reward among the episodes of one start (``dpo_pair_within_start``;
  both removed), or an offline pair, per ``dpo_data_mode``.

Staleness: the trainer tells the memory each version it publishes (``set_policy_version``);
data whose weights are more than ``max_policy_lag`` versions older is dropped and counted
(``stale_dropped``). Evaluation (greedy) segments are not trained on (``skipped_evaluation``).
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rulka.agents.policy.rollout import MIN_ROLLOUT_STEPS, Rollout, build_rollout
from rulka.config.schedules import linear_schedule
from rulka.errors import BadInput
from rulka.interfaces import Memory
from rulka.memory.files import ChunkStore
from rulka.segment import Segment, decode_arrays, encode_arrays, pack, unpack

MEMORY_FILE = "policy_memory.msgpack"


@dataclasses.dataclass
class PolicyBatch:
    """What ``take()`` returns: rollouts (for DPO: ``[chosen, rejected]``) and memory counters."""

    rollouts: list[Rollout]
    frames_played: int
    stats: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def steps(self) -> int:
        return sum(len(r) for r in self.rollouts)


class _PolicyMemory(Memory):
    """Shared part: gamma schedule, staleness, episode assembly, counters, files."""

    def __init__(self, *, gamma_schedule: Sequence[Sequence[float]] = ((0, 0.99),),
                 max_policy_lag: int | None = None, min_rollout_steps: int = MIN_ROLLOUT_STEPS,
                 n_actions: int | None = None, n_action_branches: int = 1, max_pending_episodes: int = 256) -> None:
        self.gamma_schedule = [tuple(k) for k in gamma_schedule]
        self.max_policy_lag = max_policy_lag
        self.min_steps = int(min_rollout_steps)
        self.n_actions = n_actions
        self.n_action_branches = int(n_action_branches)
        self.max_pending = int(max_pending_episodes)
        self.policy_version = 0
        self.frames_played = 0
        self.takes = 0
        self.pending: OrderedDict[tuple[str, int], list[Segment]] = OrderedDict()
        self.counters: dict[str, int] = {"segments": 0, "rollouts": 0, "stale_dropped": 0, "stale_steps": 0,
                                         "too_short": 0, "skipped_evaluation": 0, "episode_gaps": 0,
                                         "dropped_pending": 0}
        self._lags: list[int] = []

    # -- schedules and staleness ----------------------------------------------------------------
    @property
    def gamma(self) -> float:
        """The on-policy discount at the current frame count."""
        return float(linear_schedule(self.gamma_schedule, self.frames_played))

    def set_policy_version(self, version: int) -> None:
        """The trainer published ``version``: data older than the lag cap goes now."""
        self.policy_version = max(self.policy_version, int(version))
        self._drop_stale()

    def is_stale(self, version: int) -> bool:
        return self.max_policy_lag is not None and self.policy_version - int(version) > self.max_policy_lag

    def _count_stale(self, steps: int) -> None:
        self.counters["stale_dropped"] += 1
        self.counters["stale_steps"] += int(steps)

    def _fresh(self, rollouts: list[Rollout]) -> list[Rollout]:
        """``rollouts`` without the stale ones (counted)."""
        keep = []
        for r in rollouts:
            if self.is_stale(r.policy_version):
                self._count_stale(len(r))
            else:
                keep.append(r)
        return keep

    def _drop_stale(self) -> None:
        for key in [k for k, segs in self.pending.items() if self.is_stale(min(s.policy_version for s in segs))]:
            self._count_stale(sum(s.num_transitions for s in self.pending.pop(key)))

    def trainable_updates(self, frames_played: int | None = None) -> int:
        """On-policy memories are trained on through ``ready()``/``take()``, never sampled: 0."""
        return 0

    # -- append -----------------------------------------------------------------------------------
    def append(self, segment: Segment) -> int:
        t = segment.num_transitions
        self.frames_played += t
        self.counters["segments"] += 1
        if segment.evaluation:
            self.counters["skipped_evaluation"] += 1
            return 0
        if self.is_stale(segment.policy_version):
            self._count_stale(t)
            return 0
        self._lags.append(max(0, self.policy_version - segment.policy_version))
        return self._add(segment)

    def _add(self, segment: Segment) -> int:
        raise NotImplementedError

    def _episode(self, segment: Segment) -> list[Segment] | None:
        """Collect ``segment`` into its episode; the whole episode's segments once it is done."""
        key = (segment.worker_id, segment.episode_id)
        segs = self.pending.get(key)
        if segs is None:
            if segment.index_in_episode != 0:
                self.counters["episode_gaps"] += 1  # its start was lost or dropped as stale
                return None
            segs = self.pending[key] = []
        elif segs[-1].index_in_episode + 1 != segment.index_in_episode:
            self.counters["episode_gaps"] += 1
            del self.pending[key]
            return None
        segs.append(segment)
        if segment.episode_done:
            return self.pending.pop(key)
        while len(self.pending) > self.max_pending:
            self.pending.popitem(last=False)
            self.counters["dropped_pending"] += 1
        return None

    def _build(self, segments: Sequence[Segment]) -> Rollout | None:
        start = segments[-1].info.get("start_id")
        key = (segments[-1].worker_id, start) if isinstance(start, int) and not isinstance(start, bool) else None
        rollout = build_rollout(segments, self.gamma, min_steps=self.min_steps, n_actions=self.n_actions,
                                start_key=key, n_action_branches=self.n_action_branches)
        if rollout is None:
            self.counters["too_short"] += 1
        else:
            self.counters["rollouts"] += 1
        return rollout

    def _batch(self, rollouts: list[Rollout]) -> PolicyBatch:
        self.takes += 1
        stats = {f"memory/{k}": float(v) for k, v in self.counters.items()}
        if self._lags:
            stats["memory/policy_lag_avg"] = float(np.mean(self._lags))
            stats["memory/policy_lag_max"] = float(max(self._lags))
        self._lags = []
        return PolicyBatch(rollouts=rollouts, frames_played=self.frames_played, stats=stats)

    # -- files ------------------------------------------------------------------------------------
    def _stored(self) -> dict[str, list[Rollout]]:
        return {}

    def _restore(self, stored: dict[str, list[Rollout]]) -> None:
        pass

    def save(self, directory: Path, chunks: ChunkStore | None = None) -> None:
        """Buffered rollouts and counters as msgpack with raw arrays (no pickle): with ``chunks``,
        each rollout is a chunk of its own there (one already saved by an earlier checkpoint is
        not written again) and the file names them; without, all in the file. Segments of
        unfinished episodes are not saved: the trainer's journal replays what came after."""
        directory.mkdir(parents=True, exist_ok=True)
        stored = {name: [{"meta": meta, "arrays": encode_arrays(arrays)}
                         for meta, arrays in (r.to_arrays() for r in rollouts)]
                  for name, rollouts in self._stored().items()}
        state: dict[str, Any] = {"frames_played": self.frames_played, "takes": self.takes,
                                 "policy_version": self.policy_version, "counters": self.counters}
        if chunks is None:
            state["stored"] = stored
        else:
            blobs = {name: [pack(item) for item in items] for name, items in stored.items()}
            state["stored_chunks"] = {name: [[chunks.put(np.frombuffer(b, np.uint8)), len(b)] for b in items]
                                      for name, items in blobs.items()}
            chunks.commit()
            state["chunk_folder"] = chunks.folder_from(directory)
        (directory / MEMORY_FILE).write_bytes(pack(state))

    def load(self, directory: Path, chunks: ChunkStore | None = None) -> None:
        """Read back what ``save`` wrote, either layout (``chunks``: the store it was given;
        default: the folder the file names); every chunk is checked against its SHA-256."""
        path = directory / MEMORY_FILE
        if not path.exists():
            return
        state = unpack(path.read_bytes())
        try:
            if "stored_chunks" in state:
                store = chunks if chunks is not None else ChunkStore(directory / str(state["chunk_folder"]))
                items = {str(name): [unpack(store.read_bytes(str(digest), size, f"{name} rollout"))
                                     for digest, size in refs] for name, refs in state["stored_chunks"].items()}
            else:
                items = state["stored"]
            self.frames_played = int(state["frames_played"])
            self.takes = int(state["takes"])
            self.policy_version = int(state["policy_version"])
            self.counters.update({str(k): int(v) for k, v in state["counters"].items()})
            stored = {str(name): [Rollout.from_arrays(dict(item["meta"]), decode_arrays(item["arrays"]))
                                  for item in rollouts] for name, rollouts in items.items()}
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise BadInput("policy memory", f"malformed {path.name}: {exc}") from None
        self._restore(stored)


class StepsMemory(_PolicyMemory):
    """PPO: each segment is a rollout; ``take()`` returns all of them once they hold at least
    ``rollout_steps_per_update`` steps (the last segment may overshoot). A 1-step segment is kept
    (GAE needs no second step: an episode whose length is 1 mod ``segment_max_steps`` ends in one)."""

    def __init__(self, *, rollout_steps_per_update: int = 2048, **kw: Any) -> None:
        kw.setdefault("min_rollout_steps", 1)
        super().__init__(**kw)
        self.rollout_steps_per_update = int(rollout_steps_per_update)
        self.rollouts: list[Rollout] = []

    def __len__(self) -> int:
        return sum(len(r) for r in self.rollouts)

    def _add(self, segment: Segment) -> int:
        rollout = self._build([segment])
        if rollout is None:
            return 0
        self.rollouts.append(rollout)
        return len(rollout)

    def _drop_stale(self) -> None:
        super()._drop_stale()
        self.rollouts = self._fresh(self.rollouts)

    def ready(self) -> bool:
        return len(self) >= self.rollout_steps_per_update

    def take(self) -> PolicyBatch:
        if not self.ready():
            raise RuntimeError("take() before ready()")
        rollouts, self.rollouts = self.rollouts, []
        return self._batch(rollouts)

    def _stored(self) -> dict[str, list[Rollout]]:
        return {"rollouts": self.rollouts}

    def _restore(self, stored: dict[str, list[Rollout]]) -> None:
        self.rollouts = list(stored.get("rollouts", []))


class GroupMemory(_PolicyMemory):
    """GRPO: whole episodes, grouped by start; ``take()`` returns exactly ``group_size`` of them."""

    def __init__(self, *, group_size: int = 4, **kw: Any) -> None:
        super().__init__(**kw)
        if group_size < 2:
            raise ValueError("grpo_group_size must be at least 2")
        self.group_size = int(group_size)
        self.buckets: OrderedDict[Any, list[Rollout]] = OrderedDict()

    def __len__(self) -> int:
        return sum(len(r) for b in self.buckets.values() for r in b)

    def _add(self, segment: Segment) -> int:
        segments = self._episode(segment)
        if segments is None:
            return 0
        rollout = self._build(segments)
        if rollout is None:
            return 0
        self.buckets.setdefault(rollout.start_key, []).append(rollout)
        while len(self.buckets) > self.max_pending:  # starts that never fill a group (e.g. after drops)
            self.buckets.popitem(last=False)
            self.counters["dropped_partial_groups"] = self.counters.get("dropped_partial_groups", 0) + 1
        return len(rollout)

    def _drop_stale(self) -> None:
        super()._drop_stale()
        for key in list(self.buckets):
            keep = self._fresh(self.buckets[key])
            if keep:
                self.buckets[key] = keep
            else:
                del self.buckets[key]

    def _full_key(self) -> Any:
        for key, rollouts in self.buckets.items():
            if len(rollouts) >= self.group_size:
                return key
        return _NONE

    def ready(self) -> bool:
        return self._full_key() is not _NONE

    def take(self) -> PolicyBatch:
        key = self._full_key()
        if key is _NONE:
            raise RuntimeError("take() before ready()")
        bucket = self.buckets[key]
        group, rest = bucket[: self.group_size], bucket[self.group_size:]
        if rest:
            self.buckets[key] = rest
        else:
            del self.buckets[key]
        return self._batch(group)

    def _stored(self) -> dict[str, list[Rollout]]:
        return {"episodes": [r for b in self.buckets.values() for r in b]}

    def _restore(self, stored: dict[str, list[Rollout]]) -> None:
        self.buckets = OrderedDict()
        for r in stored.get("episodes", []):
            self.buckets.setdefault(r.start_key, []).append(r)


_NONE = object()


class PairMemory(_PolicyMemory):
    """DPO: preference pairs ``[chosen, rejected]`` per ``data_mode`` (guide: ``dpo_data_mode``).

    online: complete episodes enter a FIFO of ``pair_buffer_max``; a pair is the highest- and the
    lowest-scoring episode (sum of shaped rewards), both removed; no pair while they coincide.
    With ``within_start`` (default) both come from one start (equal ``start_key``: one worker's
    ``worker.rollouts_per_start`` episodes from one reset seed; episodes without a start id share
    the key None), the oldest start that has two different scores first: a harder start or track
    must not decide which episode is "preferred".
    offline: the pairs of ``offline_pairs`` in file order, cycling. both: an offline pair when
    the buffer holds fewer than two episodes or the pair-update count is odd, else online.
    """

    def __init__(self, *, data_mode: str = "online", pair_buffer_max: int = 64,
                 offline_pairs: Callable[[float], list[tuple[Rollout, Rollout]]] | None = None,
                 within_start: bool = True, **kw: Any) -> None:
        super().__init__(**kw)
        self.within_start = bool(within_start)
        if data_mode not in ("online", "offline", "both"):
            raise ValueError(f"dpo_data_mode must be online, offline or both, got {data_mode!r}")
        if data_mode != "online" and offline_pairs is None:
            raise ValueError(f"dpo_data_mode {data_mode} needs offline pairs")
        self.data_mode = data_mode
        self.buffer: deque[Rollout] = deque(maxlen=int(pair_buffer_max))
        self._offline_loader = offline_pairs
        self._offline: list[tuple[Rollout, Rollout]] | None = None
        self.offline_index = 0

    def __len__(self) -> int:
        return sum(len(r) for r in self.buffer)

    @property
    def offline(self) -> list[tuple[Rollout, Rollout]]:
        if self._offline is None:
            self._offline = self._offline_loader(self.gamma) if self._offline_loader is not None else []
        return self._offline

    def _add(self, segment: Segment) -> int:
        if self.data_mode == "offline":
            return 0  # online rollouts are not used: count the frames only
        segments = self._episode(segment)
        if segments is None:
            return 0
        rollout = self._build(segments)
        if rollout is None:
            return 0
        if len(self.buffer) == self.buffer.maxlen:
            self.counters["fifo_evicted"] = self.counters.get("fifo_evicted", 0) + 1
        self.buffer.append(rollout)
        return len(rollout)

    def _drop_stale(self) -> None:
        super()._drop_stale()
        keep = self._fresh(list(self.buffer))
        self.buffer.clear()
        self.buffer.extend(keep)

    def _online_pair(self) -> tuple[int, int] | None:
        if len(self.buffer) < 2:
            return None
        groups: dict[Any, list[int]] = {}
        for i, r in enumerate(self.buffer):
            groups.setdefault(r.start_key if self.within_start else None, []).append(i)
        for members in groups.values():  # in order of each start's oldest episode
            if len(members) < 2:
                continue
            scores = [self.buffer[i].score for i in members]
            best, worst = int(np.argmax(scores)), int(np.argmin(scores))
            if scores[best] != scores[worst]:
                return members[best], members[worst]
        return None

    def _use_offline(self) -> bool:
        if self.data_mode == "offline":
            return True
        if self.data_mode == "online":
            return False
        return len(self.buffer) < 2 or self.takes % 2 == 1

    def ready(self) -> bool:
        if self._use_offline():
            return bool(self.offline)
        return self._online_pair() is not None

    def take(self) -> PolicyBatch:
        if self._use_offline():
            if not self.offline:
                raise RuntimeError("take() before ready()")
            chosen, rejected = self.offline[self.offline_index % len(self.offline)]
            self.offline_index += 1
            return self._batch([chosen, rejected])
        pair = self._online_pair()
        if pair is None:
            raise RuntimeError("take() before ready()")
        best, worst = pair
        chosen, rejected = self.buffer[best], self.buffer[worst]
        for i in sorted(pair, reverse=True):
            del self.buffer[i]
        return self._batch([chosen, rejected])

    def _stored(self) -> dict[str, list[Rollout]]:
        return {"buffer": list(self.buffer)}

    def _restore(self, stored: dict[str, list[Rollout]]) -> None:
        self.buffer.clear()
        self.buffer.extend(stored.get("buffer", []))

    def save(self, directory: Path, chunks: ChunkStore | None = None) -> None:
        super().save(directory, chunks)
        (directory / "offline_index.json").write_text(json.dumps({"offline_index": self.offline_index}))

    def load(self, directory: Path, chunks: ChunkStore | None = None) -> None:
        super().load(directory, chunks)
        path = directory / "offline_index.json"
        if path.exists():
            self.offline_index = int(json.loads(path.read_text()).get("offline_index", 0))
