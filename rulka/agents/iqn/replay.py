"""``MiniRaceReplayMemory``: the trainer-side replay memory of the IQN agent.

Every frame a worker sends is stored once, in a ``rulka.memory.FrameStore`` (a ring of frames
addressed by a global serial number); a transition is a few integers (state frame, n-step next
frame, action, n) plus its cumulative n-step rewards. Episodes may arrive as several segments,
interleaved with other workers' segments: ``rulka.memory.EpisodeStitcher`` holds the last
``n_steps`` steps of an unfinished episode until the next segment of that episode brings the
frames they need.

Training flow (what a trainer does)::

    memory.append(segment)                       # for each received segment
    while updates < memory.trainable_updates(frames_played):
        metrics = agent.train(memory.sample(batch_size)); updates += 1

``trainable_updates`` returns 0 until the memory holds ``start_learning_size`` transitions (from
``memory_size_schedule``) and then the total number of batches the replay ratio allows:
``(train_transitions_added - start_learning_size) * number_times_single_memory_is_used_before_discard
/ batch_size``. As in Linesight, the transitions needed to start learning are offset, so training
starts at the pace of new data instead of with a burst of ``start_learning_size x ratio / batch``
updates, and a larger start size later in the schedule pauses training until data catch up; the
held-out test transitions do not count.
About 5% of transitions go to a held-out test store; every ``test_every`` calls ``sample`` attaches
a ``test_batch`` on which the agent reports ``losses/test_loss``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rulka.agents.iqn.minirace import collate, draw_mini_race_times
from rulka.config.schedules import linear_schedule
from rulka.config.schedules import staircase_schedule as step_schedule
from rulka.config.sections import EnvironmentConfig, MemoryConfig, TrainingConfig
from rulka.errors import BadInput
from rulka.interfaces import Memory
from rulka.memory.batch_device import DeviceBatcher, resolve_batch_device, ring_bytes
from rulka.memory.deferred import DeferredValues, PendingReports
from rulka.memory.episodes import EpisodeStitcher, Stretch
from rulka.memory.files import ChunkStore, read_replay, write_replay
from rulka.memory.frames import FrameStore
from rulka.memory.nstep import build_n_step
from rulka.memory.sumtree import SumTree
from rulka.segment import Segment

Schedule = Sequence[Sequence[Any]]


@dataclasses.dataclass
class ReplayBatch:
    """A sampled batch: numpy arrays, or with ``memory.batch_device`` pinned/device the arrays the
    learner reads (images, floats, action, reward, gamma, weights) as tensors on its device.
    ``state_img``/``next_img`` are None without images."""

    state_img: np.ndarray | None
    state_float: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_img: np.ndarray | None
    next_float: np.ndarray
    gamma: np.ndarray  # discount in front of the bootstrap (0 when terminal)
    weights: np.ndarray  # importance-sampling weights (ones without PER)
    slots: np.ndarray
    time: np.ndarray | None = None  # mini-race time of each item (None without mini-races)
    frames_played: int = 0  # the memory's frame count when sampled (drives the agent's schedules)
    test_batch: ReplayBatch | None = None
    # PER: the agent reports each item's TD error; with ``defers_td_errors`` it may pass a
    # rulka.memory.deferred.DeferredValues (read back when the replay next needs it)
    report_td_errors: Callable[[Any], None] | None = None
    defers_td_errors: bool = False

    def __len__(self) -> int:
        return int(len(self.action))


class _TransitionRing:
    """Fixed-capacity FIFO of transitions (structure of arrays), growable."""

    FIELDS = ("state", "next_state", "action", "n_steps", "gamma", "terminal_actions", "rewards")

    def __init__(self, capacity: int, n_max: int, action_width: int = 1) -> None:
        self.n_max = n_max
        self.action_width = action_width  # N actions per transition with multi-action blocks
        self.capacity = 0
        self.count = 0  # transitions ever written
        self.size = 0  # valid transitions: logical indices count - size .. count - 1
        self.arrays: dict[str, np.ndarray] = {}
        self._alloc(max(1, capacity))

    def _alloc(self, capacity: int) -> None:
        old, old_cap = self.arrays, self.capacity
        self.arrays = {
            "state": np.zeros(capacity, np.int64), "next_state": np.zeros(capacity, np.int64),
            "action": np.zeros((capacity, self.action_width) if self.action_width > 1 else capacity, np.int64),
            "n_steps": np.zeros(capacity, np.int16),
            "gamma": np.zeros(capacity, np.float32), "terminal_actions": np.zeros(capacity, np.int64),
            "rewards": np.zeros((capacity, self.n_max), np.float32),
        }
        if old:
            self.size = min(self.size, capacity)
            logical = np.arange(self.count - self.size, self.count)
            for k in self.FIELDS:
                self.arrays[k][logical % capacity] = old[k][logical % old_cap]
        self.capacity = capacity

    def __len__(self) -> int:
        return self.size

    def slots_back(self, k: np.ndarray) -> np.ndarray:
        """Slots of the k-th newest transitions (k = 0 is the newest)."""
        return (self.count - 1 - np.asarray(k, dtype=np.int64)) % self.capacity

    def valid_slots(self) -> np.ndarray:
        return self.slots_back(np.arange(self.size))

    def logical_of(self, slots: np.ndarray) -> np.ndarray:
        """The logical index (write number) of the transition now in each slot."""
        newest = self.count - 1
        return newest - (newest - np.asarray(slots, dtype=np.int64)) % self.capacity

    def slots_still_holding(self, logical: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mask, slots) for transitions known by logical index: which are still stored (not
        overwritten since) and where they are now (the ring may have grown and re-laid them)."""
        logical = np.asarray(logical, dtype=np.int64)
        mask = logical >= self.count - self.size
        return mask, logical % self.capacity

    def grow(self, capacity: int) -> bool:
        if capacity <= self.capacity:
            return False
        self._alloc(capacity)
        return True

    def add(self, fields: dict[str, np.ndarray]) -> np.ndarray:
        m = len(fields["state"])
        slots = (self.count + np.arange(m)) % self.capacity
        for k in self.FIELDS:
            self.arrays[k][slots] = fields[k]
        self.count += m
        self.size = min(self.size + m, self.capacity)
        return slots


# the defaults of the guide's keys are the run config's (rulka.config.sections): one home for each
_TRAINING, _MEMORY, _ENV = TrainingConfig(), MemoryConfig(), EnvironmentConfig()


class MiniRaceReplayMemory(Memory):
    """Replay memory with n-step transitions, mini-race collate and optional PER. Arguments are
    the guide's keys (``settings.memory_kwargs_from_config`` fills them from a run config), with
    the config model's defaults.

    Segment arrays used: ``obs/float`` (or ``obs/x``), optional ``obs/img`` (uint8, H x W),
    ``action`` ((T,), or (T, N) with N actions per block: ``n_action_branches``), ``reward``,
    ``terminated``, optional ``extra/greedy`` (all greedy if absent) and
    optional ``obs/potential`` (T + 1,) for potential-based shaping. A segment whose
    ``info["fill_buffer"]`` is False is counted and not stored.
    """

    def __init__(self, *, batch_size: int = _TRAINING.batch_size, n_steps: int = _TRAINING.n_steps,
                 memory_size_schedule: Schedule = tuple(_MEMORY.memory_size_schedule),
                 gamma_schedule: Schedule = tuple(_TRAINING.gamma_schedule),
                 discard_non_greedy_actions_in_nsteps: bool = _TRAINING.discard_non_greedy_actions_in_nsteps,
                 mini_race_duration_actions: int | None = _ENV.temporal_mini_race_duration_actions,
                 oversample_long_term_steps: int = _TRAINING.oversample_long_term_steps,
                 oversample_maximum_term_steps: int = _TRAINING.oversample_maximum_term_steps,
                 number_times_single_memory_is_used_before_discard: float = (
                     _MEMORY.number_times_single_memory_is_used_before_discard),
                 prio_alpha: float = _MEMORY.prio_alpha, prio_epsilon: float = _MEMORY.prio_epsilon,
                 prio_beta: float = _MEMORY.prio_beta,
                 min_horizon_to_update_priority_actions: int | None = None,
                 buffer_test_ratio: float = _MEMORY.buffer_test_ratio, test_every: int = 20,
                 n_actions: int | None = None, n_action_branches: int = 1, max_pending_episodes: int = 256,
                 finish_reward_per_action_left: float = 0.0, batch_device: str = _MEMORY.batch_device,
                 device: str = "cpu", device_frames_max_gb: float = _MEMORY.device_frames_max_gb,
                 seed: int | None = None) -> None:
        if n_steps < 1:
            raise ValueError("n_steps must be >= 1")
        self.batch_size = int(batch_size)
        self.n_max = int(n_steps)
        self.memory_size_schedule = [(int(f), (int(v[0]), int(v[1]))) for f, v in memory_size_schedule]
        self.gamma_schedule = [tuple(p) for p in gamma_schedule]
        self.discard_non_greedy = bool(discard_non_greedy_actions_in_nsteps)
        self.mini_race = int(mini_race_duration_actions) if mini_race_duration_actions else None
        self.finish_reward_per_action_left = float(finish_reward_per_action_left)
        self.oversample_long = int(oversample_long_term_steps)
        self.oversample_max_term = int(oversample_maximum_term_steps)
        self.replay_ratio = float(number_times_single_memory_is_used_before_discard)
        self.prio_alpha = float(prio_alpha)
        self.prio_epsilon = float(prio_epsilon)
        self.prio_beta = float(prio_beta)
        if min_horizon_to_update_priority_actions is None and self.mini_race and self.mini_race > 40:
            min_horizon_to_update_priority_actions = self.mini_race - 40  # else every item (short races)
        self.min_horizon_prio = min_horizon_to_update_priority_actions
        self.test_ratio = float(buffer_test_ratio)
        self.test_every = int(test_every)
        self.n_actions = n_actions
        self.n_action_branches = int(n_action_branches)
        self.max_pending = int(max_pending_episodes)
        self.rng = np.random.default_rng(seed)
        # memory.batch_device: where batches are assembled (rulka.memory.batch_device); resolved at the
        # first sample, when the frame layout is known
        self.batch_device, self.device = batch_device, str(device)
        self.device_frames_max_bytes = int(device_frames_max_gb * 2**30)
        resolve_batch_device(batch_device, self.device, 0, 0)  # a bad name fails here, not at the first sample
        self.batcher: DeviceBatcher | None = None
        self._batch_mode: str | None = None
        # sample() may run on the trainer's prefetch thread while the agent trains; the PER
        # priority callback the agent calls then (update_priorities) takes the same lock
        self._sample_lock = threading.Lock()
        # TD errors reported as DeferredValues (a CUDA learner's, not yet on the host): applied in
        # order before the priorities are next read or changed, so the result is that of an
        # immediate report (rulka.memory.deferred)
        self._pending = PendingReports(self._apply_logical)

        size, _ = self._size_now(0)
        self.train = _TransitionRing(size, self.n_max, self.n_action_branches)
        self.test = _TransitionRing(max(1, int(size * self.test_ratio) + 1), self.n_max, self.n_action_branches)
        self.tree: SumTree | None = SumTree(self.train.capacity) if self.prio_alpha > 0 else None
        self._prio_updated = False
        self.max_priority = 1.0  # largest PER priority given so far: new transitions enter at it
        # frames ("float", "potential", optional "img"), laid out by the first segment
        self.frames = FrameStore(self._frames_needed())
        self.obs_key = ""
        self.episodes = EpisodeStitcher(self.n_max, self.max_pending)
        # counters
        self.frames_played = 0
        self.transitions_added = 0  # train + test
        self.train_transitions_added = 0  # what the replay ratio counts
        self.batches_sampled = 0
        self._counters: dict[str, int] = {"segments": 0, "skipped_no_fill": 0, "rejected": 0}

    @property
    def counters(self) -> dict[str, int]:
        """Segments stored, skipped, rejected; episode gaps and dropped tails."""
        return {**self._counters, **self.episodes.counters}

    # views of the frame store (read-only use: tests, verify mode, benchmarks)
    @property
    def frame_capacity(self) -> int:
        return self.frames.capacity

    @property
    def frames_written(self) -> int:
        return self.frames.written

    @property
    def flt(self) -> np.ndarray | None:
        return self.frames["float"] if "float" in self.frames else None

    @property
    def img(self) -> np.ndarray | None:
        return self.frames["img"] if "img" in self.frames else None

    @property
    def potential(self) -> np.ndarray | None:
        return self.frames["potential"] if "potential" in self.frames else None

    # ------------------------------------------------------------------ schedules
    def _size_now(self, frames: int) -> tuple[int, int]:
        size, start = step_schedule(self.memory_size_schedule, frames)
        return int(size), int(start)

    def _schedule_frames(self) -> int:
        return self.frames_played

    @property
    def samples_per_insert(self) -> float:
        """Mean times a transition is sampled (the trainer's rate limiter holds it):
        ``number_times_single_memory_is_used_before_discard``."""
        return self.replay_ratio

    @property
    def held_out_transitions(self) -> int:
        """Transitions routed to the held-out test store so far (not trainable samples)."""
        return self.transitions_added - self.train_transitions_added

    @property
    def start_learning_size(self) -> int:
        return self._size_now(self._schedule_frames())[1]

    def flush_priorities(self) -> int:
        """Apply the TD errors reported but not applied yet (deferred ones); returns how many batches."""
        if not len(self._pending):
            return 0
        with self._sample_lock:
            return self._pending.drain()

    def set_frames_played(self, frames_played: int) -> None:
        """Tell the memory the run's frame count (drives the size and gamma schedules)."""
        self.flush_priorities()  # the ring may grow and re-lay the priorities
        self.frames_played = max(self.frames_played, int(frames_played))
        size, _ = self._size_now(self.frames_played)
        if self.train.grow(size):
            self.test.grow(max(1, int(size * self.test_ratio) + 1))
            if self.tree is not None:
                old = self.tree
                self.tree = SumTree(self.train.capacity)
                n = len(self.train)
                logical = np.arange(self.train.count - n, self.train.count)
                # priorities move with their transitions (the ring re-laid them by logical index)
                self.tree.set(logical % self.train.capacity, old.get(logical % old.capacity))
            self.frames.grow(self._frames_needed())

    def trainable_updates(self, frames_played: int | None = None) -> int:
        """Total number of updates (batches) the replay ratio allows so far: ``(training
        transitions added - start_learning_size) x number_times_single_memory_is_used_before_discard
        / batch_size`` (Linesight's offset), or 0 while fewer than ``start_learning_size``
        transitions are stored. A trainer trains while its update count is below this;
        ``remaining_updates()`` is the difference with the batches sampled here."""
        if frames_played is not None:
            self.set_frames_played(frames_played)
        start = self.start_learning_size
        if len(self.train) < max(1, start):
            return 0
        return max(0, int((self.train_transitions_added - start) * self.replay_ratio / self.batch_size))

    def remaining_updates(self) -> int:
        """Updates allowed now minus batches already sampled from this memory."""
        return max(0, self.trainable_updates() - self.batches_sampled)

    # ------------------------------------------------------------------ frames
    def _frames_needed(self, train_capacity: int | None = None) -> int:
        # one frame per transition plus one final frame per episode: keep a 25% margin
        train = self.train.capacity if train_capacity is None else train_capacity
        test = self.test.capacity if train_capacity is None else max(1, int(train * self.test_ratio) + 1)
        return int(1.25 * (train + test)) + self.max_pending * (self.n_max + 2) + 64

    @property
    def batch_mode(self) -> str:
        """Where batches are assembled: host, pinned or device (``memory.batch_device`` resolved
        against the learner's device and the image ring the size schedule can reach)."""
        if self._batch_mode is None:
            largest = max(size for _, (size, _) in self.memory_size_schedule)
            layout = {k: v for k, v in self.frames.layout().items() if k == "img"}
            self._batch_mode = resolve_batch_device(self.batch_device, self.device,
                                                    ring_bytes(layout, self._frames_needed(largest)),
                                                    self.device_frames_max_bytes)
            if self._batch_mode != "host":
                self.batcher = DeviceBatcher(self._batch_mode, self.device)
        return self._batch_mode

    # ------------------------------------------------------------------ append
    def _valid(self, serials: np.ndarray) -> np.ndarray:
        return self.frames.valid(serials)

    def _check(self, segment: Segment) -> tuple[dict[str, np.ndarray], np.ndarray]:
        a = segment.arrays
        key = "obs/float" if "obs/float" in a else "obs/x" if "obs/x" in a else ""
        if not key:
            raise BadInput("segment", "IQN memory needs 'obs/float' or 'obs/x'")
        flt = np.asarray(a[key], dtype=np.float32)
        if flt.ndim == 1:
            flt = flt[:, None]
        if flt.ndim != 2:
            raise BadInput("segment", f"'{key}' must be (T+1, F)")
        img = a.get("obs/img")
        if img is not None:
            img = np.asarray(img)
            if img.dtype != np.uint8 or img.ndim != 3:
                raise BadInput("segment", "'obs/img' must be uint8 (T+1, H, W)")
        if not np.all(np.isfinite(flt)) or not np.all(np.isfinite(a["reward"])):
            raise BadInput("segment", "non-finite observations or rewards")
        action = np.asarray(a["action"])
        if not np.issubdtype(action.dtype, np.integer):
            raise BadInput("segment", "IQN memory needs discrete integer actions")
        nb = self.n_action_branches
        if nb > 1 and (action.ndim != 2 or action.shape[1] != nb):
            raise BadInput("segment", f"IQN memory with {nb} actions per block (environment.rl_action_offsets_ms) "
                                      f"needs 'action' of shape (T, {nb}); got {action.shape}")
        if nb == 1 and action.ndim != 1:
            raise BadInput("segment", f"IQN memory with one action per decision needs 'action' of shape (T,); "
                                      f"got {action.shape} (a multi-action segment: check environment.rl_action_offsets_ms)")
        if len(action) and (action.min() < 0 or (self.n_actions is not None and action.max() >= self.n_actions)):
            raise BadInput("segment", "action index out of range")
        t = len(action)
        if len(flt) != t + 1 or (img is not None and len(img) != t + 1):
            raise BadInput("segment", "observations must hold one more step than actions")
        pot = np.asarray(a.get("obs/potential", np.zeros(t + 1)), np.float32).reshape(-1)
        if len(pot) != t + 1:
            pot = np.zeros(t + 1, np.float32)
        frames = {"float": flt, "potential": pot}
        if img is not None:
            frames["img"] = img
        try:
            self.frames.check(frames)
        except BadInput:
            raise BadInput("segment", "observation shapes differ from the stored ones") from None
        if not self.obs_key:
            self.obs_key = key
        return frames, action

    def append(self, segment: Segment) -> int:
        """Store one segment; return the number of transitions added (train + test)."""
        self.flush_priorities()  # new transitions enter at the largest priority, updates included
        try:
            frames, action = self._check(segment)
        except BadInput:
            self._counters["rejected"] += 1
            raise
        self._counters["segments"] += 1
        t = segment.num_transitions
        self.frames_played += t
        self.set_frames_played(self.frames_played)
        key = (segment.run_id, segment.worker_id, int(segment.episode_id))
        if segment.info.get("fill_buffer", True) is False:
            self._counters["skipped_no_fill"] += 1
            self.episodes.drop(key)
            return 0
        a = segment.arrays
        reward = np.asarray(a["reward"], np.float64)
        greedy = np.asarray(a.get("extra/greedy", np.ones(t, bool)), bool).reshape(-1)[:t]
        finished = bool(segment.episode_done and t > 0 and bool(np.asarray(a["terminated"])[-1]))
        stretches = self.episodes.join(
            key, segment.index_in_episode, segment.episode_done, finished,
            lambda first: self.frames.store({k: v[first:] for k, v in frames.items()}),
            {"action": action, "reward": reward, "greedy": greedy})
        return sum(self._emit(st) for st in stretches)

    def _emit(self, stretch: Stretch) -> int:
        count, frames, acts = stretch.ready, stretch.frames, stretch.steps["action"]
        if count <= 0:
            return 0
        gamma = linear_schedule(self.gamma_schedule, self.frames_played)
        built = build_n_step(stretch.steps["reward"], stretch.steps["greedy"], n_max=self.n_max, gamma=gamma,
                             discard_non_greedy=self.discard_non_greedy, count=count, finished=stretch.finished)
        fields = {
            "state": frames[built.state], "next_state": frames[built.next_state],
            "action": acts[:count].astype(np.int64), "n_steps": built.n_steps.astype(np.int16),
            "gamma": np.full(count, gamma, np.float32), "terminal_actions": built.terminal_actions,
            "rewards": built.rewards,
        }
        is_test = self.rng.random(count) < self.test_ratio
        default_priority = self._default_priority()
        for ring, mask in ((self.train, ~is_test), (self.test, is_test)):
            if not mask.any():
                continue
            slots = ring.add({k: v[mask] for k, v in fields.items()})
            if ring is self.train and self.tree is not None:
                self.tree.set(slots, default_priority)
        self.transitions_added += count
        self.train_transitions_added += int((~is_test).sum())
        return count

    def _default_priority(self) -> float:
        # Schaul et al.: a new transition has no TD error yet; it enters at the largest priority
        # given so far, so it is sampled soon
        return self.max_priority

    def __len__(self) -> int:
        return len(self.train)

    # ------------------------------------------------------------------ sampling
    def _pick(self, ring: _TransitionRing, batch_size: int, prioritized: bool) -> tuple[np.ndarray, np.ndarray]:
        n = len(ring)
        if n == 0:
            raise ValueError("cannot sample from an empty memory")
        if prioritized and self.tree is not None and self.tree.total > 0:
            total = self.tree.total
            slots = self.tree.find(self.rng.uniform(0.0, total, size=batch_size))
            p = self.tree.get(slots) / total
            weights = np.power(n * np.maximum(p, 1e-12), -self.prio_beta)
            weights = weights / weights.max()  # Schaul et al.: weights only scale updates down
        else:
            slots = ring.slots_back(self.rng.integers(0, n, size=batch_size))
            weights = np.ones(batch_size)
        # a transition whose frames were overwritten (very old tail) is replaced by a fresh draw
        for _ in range(8):
            bad = ~(self._valid(ring.arrays["state"][slots]) & self._valid(ring.arrays["next_state"][slots]))
            if not bad.any():
                break
            slots[bad] = ring.slots_back(self.rng.integers(0, max(1, n // 2), size=int(bad.sum())))
        return slots, weights.astype(np.float32)

    def _make_batch(self, ring: _TransitionRing, slots: np.ndarray, weights: np.ndarray) -> ReplayBatch:
        ar = ring.arrays
        s = ar["state"][slots] % self.frame_capacity
        ns = ar["next_state"][slots] % self.frame_capacity
        state_float = self.flt[s].copy()
        next_float = self.flt[ns].copy()
        time = None
        if self.mini_race:
            time = draw_mini_race_times(self.rng, len(slots), self.mini_race, self.oversample_long,
                                        self.oversample_max_term)
        c = collate(ar["n_steps"][slots], ar["rewards"][slots], ar["gamma"][slots],
                    ar["terminal_actions"][slots], self.potential[s], self.potential[ns], time, self.mini_race,
                    self.finish_reward_per_action_left)
        if time is not None:
            state_float[:, 0] = c.time
            next_float[:, 0] = c.next_time
        action = ar["action"][slots].copy()
        if self.batch_mode != "host":  # the same rows, as tensors on the learner's device
            dev = self.batcher
            assert dev is not None
            return ReplayBatch(
                state_img=None if self.img is None else dev.gather(self.frames, "img", s),
                state_float=dev.tensor(state_float), action=dev.tensor(action), reward=dev.tensor(c.reward),
                next_img=None if self.img is None else dev.gather(self.frames, "img", ns),
                next_float=dev.tensor(next_float), gamma=dev.tensor(c.gamma), weights=dev.tensor(weights),
                slots=slots, time=time, frames_played=self.frames_played)
        return ReplayBatch(
            state_img=None if self.img is None else self.img[s],
            state_float=state_float, action=action, reward=c.reward,
            next_img=None if self.img is None else self.img[ns], next_float=next_float,
            gamma=c.gamma, weights=weights, slots=slots, time=time, frames_played=self.frames_played)

    sample_while_training = True  # sample() and update_priorities() hold one lock

    def sample(self, batch_size: int | None = None) -> ReplayBatch:
        """A training batch (counts toward the replay ratio)."""
        with self._sample_lock:
            return self._sample(batch_size)

    def _sample(self, batch_size: int | None) -> ReplayBatch:
        bs = int(batch_size or self.batch_size)
        self._pending.drain()
        slots, weights = self._pick(self.train, bs, prioritized=True)
        batch = self._make_batch(self.train, slots, weights)
        self.batches_sampled += 1
        if self.tree is not None:
            # by logical index: a batch sampled ahead (trainer.prefetch_batches) is trained on after
            # the next intake, which may have overwritten or (growing the ring) moved its slots
            logical = self.train.logical_of(slots)
            batch.report_td_errors = lambda td, b=batch, lg=logical: self._report(lg, td, b.time)
            batch.defers_td_errors = True
        if self.test_every > 0 and self.batches_sampled % self.test_every == 0 and len(self.test) > 0:
            batch.test_batch = self.sample_test(bs)
        return batch

    def sample_test(self, batch_size: int | None = None) -> ReplayBatch:
        """A batch from the held-out test store (not counted, never trained on)."""
        bs = int(batch_size or self.batch_size)
        slots, weights = self._pick(self.test, bs, prioritized=False)
        return self._make_batch(self.test, slots, weights)

    def update_priorities(self, slots: np.ndarray, td_errors: np.ndarray, time: np.ndarray | None) -> None:
        """PER: priority = (|td| + prio_epsilon) ** prio_alpha, only for items whose mini-race
        time is below ``min_horizon_to_update_priority_actions`` (every item when it is None: no
        mini-race, or one of 40 actions or fewer)."""
        if self.tree is None:
            return
        with self._sample_lock:
            self._pending.drain()
            self._update_priorities(slots, td_errors, time)

    def _report(self, logical: np.ndarray, td_errors: Any, time: np.ndarray | None) -> None:
        if isinstance(td_errors, DeferredValues):
            self._pending.add(logical, td_errors, time)  # no lock: a prefetch may be sampling
        else:
            self._update_priorities_logical(logical, td_errors, time)

    def _update_priorities_logical(self, logical: np.ndarray, td_errors: np.ndarray,
                                   time: np.ndarray | None) -> None:
        """``update_priorities`` for a batch's transitions known by logical index: those overwritten
        since the batch was sampled keep the priority they entered with."""
        if self.tree is None:
            return
        with self._sample_lock:
            self._pending.drain()
            self._apply_logical(logical, td_errors, time)

    def _apply_logical(self, logical: np.ndarray, td_errors: np.ndarray, time: np.ndarray | None) -> None:
        kept, slots = self.train.slots_still_holding(logical)
        if kept.all():
            self._update_priorities(slots, td_errors, time)
        elif kept.any():
            self._update_priorities(slots[kept], np.asarray(td_errors)[kept],
                                    None if time is None else np.asarray(time)[kept])

    def _update_priorities(self, slots: np.ndarray, td_errors: np.ndarray, time: np.ndarray | None) -> None:
        if self.tree is None:
            return
        td = np.abs(np.asarray(td_errors, np.float64))
        mask = np.isfinite(td)
        if time is not None and self.min_horizon_prio is not None:
            mask &= np.asarray(time) < self.min_horizon_prio
        if mask.any():
            priorities = np.power(td[mask] + self.prio_epsilon, self.prio_alpha)
            self.tree.set(np.asarray(slots)[mask], priorities)
            self.max_priority = max(self.max_priority, float(priorities.max()))
            self._prio_updated = True

    # ------------------------------------------------------------------ verify mode
    def rebuild_transitions(self, segment: Segment) -> list[dict[str, np.ndarray]]:
        """Verify mode: the one-step transitions of ``segment`` read back from this memory's
        storage (frame ring, episode joining, reward sums with n = 1, finish detection) in a
        scratch memory with the same observation layout; nothing is added to this memory."""
        scratch = MiniRaceReplayMemory(batch_size=1, n_steps=1, memory_size_schedule=[[0, (max(1, segment.num_transitions), 1)]],
                                       gamma_schedule=[[0, 1.0]], discard_non_greedy_actions_in_nsteps=False,
                                       mini_race_duration_actions=None, buffer_test_ratio=0.0, max_pending_episodes=1,
                                       n_action_branches=self.n_action_branches)
        t = segment.num_transitions
        ends_race = bool(t > 0 and bool(np.asarray(segment.arrays["terminated"])[-1]))
        whole = dataclasses.replace(segment, episode_done=True, index_in_episode=0, info={})
        scratch.append(whole)
        ring = scratch.train
        slots = ring.slots_back(np.arange(len(ring))[::-1])  # oldest first = step order
        s = ring.arrays["state"][slots] % scratch.frame_capacity
        ns = ring.arrays["next_state"][slots] % scratch.frame_capacity
        name = scratch.obs_key.split("/", 1)[1]

        def obs(i: int) -> Any:
            if name == "x":
                return scratch.flt[i] if segment.arrays["obs/x"].ndim > 1 else scratch.flt[i, 0]
            out = {name: scratch.flt[i]}
            if scratch.img is not None:
                out["img"] = scratch.img[i]
            return out

        done = ring.arrays["terminal_actions"][slots] <= 1
        if not ends_race:
            done[:] = False
        return [{"obs": obs(int(s[k])), "action": ring.arrays["action"][slots[k]],
                 "reward": ring.arrays["rewards"][slots[k], 0], "next_obs": obs(int(ns[k])), "done": bool(done[k])}
                for k in range(len(slots))]

    # ------------------------------------------------------------------ persistence
    def save(self, directory: Path, chunks: ChunkStore | None = None) -> None:
        """Write frames, transitions and counters to ``directory`` (json + arrays, no pickle):
        the arrays as chunks in ``chunks`` when given (frames not stored since the previous
        save there are not rewritten), else in one npz. Tails of unfinished episodes (at most
        ``n_steps`` steps each) are not saved."""
        self.flush_priorities()
        stored = self.frames.put_chunks(chunks, "frames_") if chunks is not None else {}
        arrays: dict[str, np.ndarray] = {} if chunks is not None else self.frames.arrays("frames_")
        for name, ring in (("train", self.train), ("test", self.test)):
            for k, v in ring.arrays.items():
                arrays[f"{name}_{k}"] = v
        if self.tree is not None:
            arrays["priorities"] = self.tree.values()
        meta = {"version": 1, "frame_capacity": self.frame_capacity, "frames_written": self.frames_written,
                "obs_key": self.obs_key, "train_count": self.train.count, "train_capacity": self.train.capacity,
                "train_size": self.train.size, "test_size": self.test.size,
                "test_count": self.test.count, "test_capacity": self.test.capacity,
                "frames_played": self.frames_played, "transitions_added": self.transitions_added,
                "batches_sampled": self.batches_sampled, "prio_updated": self._prio_updated,
                "max_priority": self.max_priority, "train_transitions_added": self.train_transitions_added,
                "counters": self.counters}
        write_replay(directory, arrays, meta, chunks, stored)

    def load(self, directory: Path, chunks: ChunkStore | None = None) -> None:
        """Read back what ``save`` wrote, in either layout (nothing is unpickled)."""
        meta, data = read_replay(directory, chunks)
        self.frames.restore(meta, data, "frames_")
        self.obs_key = str(meta["obs_key"])
        for name, ring in (("train", self.train), ("test", self.test)):
            ring.capacity = int(meta[f"{name}_capacity"])
            ring.count = int(meta[f"{name}_count"])
            ring.size = int(meta[f"{name}_size"])
            ring.arrays = {k: data[f"{name}_{k}"].copy() for k in _TransitionRing.FIELDS}
        if self.prio_alpha > 0:
            self.tree = SumTree(self.train.capacity)
            if "priorities" in data:
                pr = data["priorities"]
                self.tree.set(np.arange(len(pr)), pr)
            else:
                self.tree.set(self.train.valid_slots(), 1.0)
        self.frames_played = int(meta["frames_played"])
        self.transitions_added = int(meta["transitions_added"])
        self.batches_sampled = int(meta["batches_sampled"])
        self._prio_updated = bool(meta["prio_updated"])
        self.max_priority = float(meta.get("max_priority", 1.0))
        self.train_transitions_added = int(meta.get("train_transitions_added", self.train.count))
        self._counters.update({k: int(v) for k, v in meta["counters"].items() if k in self._counters})
        self.episodes.restart(meta["counters"])

    def stats(self) -> dict[str, float]:
        """Counters for logging (``memory/...``)."""
        out = {f"memory/{k}": float(v) for k, v in self.counters.items()}
        out.update({"memory/size": float(len(self.train)), "memory/test_size": float(len(self.test)),
                    "memory/transitions_added": float(self.transitions_added),
                    "memory/batches_sampled": float(self.batches_sampled)})
        return out
