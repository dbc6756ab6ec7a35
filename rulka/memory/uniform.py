"""``UniformReplayMemory``: uniform replay of (optionally n-step) transitions, frames stored once.

The off-policy memory of learners without mini-races (SAC, REDQ): float or integer actions,
any observation layout a worker sends (``obs/x`` for a plain gym env, ``obs/float`` and
``obs/img`` for the simulator and the TrackMania backends). Each frame is stored once in a
``FrameStore``; a transition is two frame serials, the action, the n-step discounted reward and
the discount in front of the bootstrap (``gamma ** n``, 0 when the episode terminated within
the n steps; a time-limit truncation bootstraps). When segments carry ``obs/potential`` (the
TrackMania pipeline's shaping potential), the reward includes the potential-based shaping term
``discount * phi(next) - phi(state)``, as the IQN memory's collate adds it.

Rate: ``samples_per_insert`` (``updates_per_sample * batch_size``) and ``start_learning_size``
are what the trainer's rate limiter (``rulka.trainer.ratelimit``) holds: after the warm-up,
``updates_per_sample`` updates per stored transition, as a single-process SAC makes them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from rulka.errors import BadInput
from rulka.interfaces import Memory
from rulka.memory.episodes import EpisodeStitcher, Stretch
from rulka.memory.files import ChunkStore, read_replay, write_replay
from rulka.memory.frames import FrameStore
from rulka.memory.nstep import build_n_step
from rulka.segment import Segment

POTENTIAL = "obs/potential"


@dataclasses.dataclass
class TransitionBatch:
    """A sampled batch (numpy). ``obs``/``next_obs`` map observation names (``x``, ``float``,
    ``img``) to ``(B, ...)`` arrays; ``discount`` multiplies the bootstrap value (0: terminal)."""

    obs: dict[str, np.ndarray]
    action: np.ndarray
    reward: np.ndarray
    next_obs: dict[str, np.ndarray]
    discount: np.ndarray

    def __len__(self) -> int:
        return int(len(self.action))


class UniformReplayMemory(Memory):
    """Uniform replay; see the module docstring.

    Args:
        capacity: transitions kept (oldest dropped first).
        batch_size: default batch size of ``sample``.
        n_steps: transitions look this many steps ahead (1 = plain one-step TD).
        gamma: discount of the n-step sums and of the bootstrap.
        start_learning_size: transitions stored before any update is allowed.
        updates_per_sample: updates allowed per stored transition after the warm-up.
        max_pending_episodes: unfinished episodes whose last ``n_steps`` steps are held.
    """

    def __init__(self, *, capacity: int = 1_000_000, batch_size: int = 256, n_steps: int = 1,
                 gamma: float = 0.99, start_learning_size: int = 5000, updates_per_sample: float = 1.0,
                 max_pending_episodes: int = 256, seed: int | None = None) -> None:
        if n_steps < 1:
            raise ValueError("n_steps must be >= 1")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError("gamma must be in [0, 1]")
        self.capacity = max(1, int(capacity))
        self.batch_size = int(batch_size)
        self.n_steps = int(n_steps)
        self.gamma = float(gamma)
        self.start_learning_size = int(start_learning_size)
        self.updates_per_sample = float(updates_per_sample)
        self.rng = np.random.default_rng(seed)
        self.frames = FrameStore(int(1.25 * self.capacity) + max_pending_episodes * (self.n_steps + 2) + 64)
        self.episodes = EpisodeStitcher(self.n_steps, max_pending_episodes)
        self.transitions: dict[str, np.ndarray] = {}  # allocated by the first segment (action shape)
        self.count = 0  # transitions ever written
        self.transitions_added = 0
        self.batches_sampled = 0
        self._counters = {"segments": 0, "rejected": 0, "skipped_no_fill": 0}

    # ------------------------------------------------------------------ size and rate
    def __len__(self) -> int:
        return min(self.count, self.capacity)

    @property
    def counters(self) -> dict[str, int]:
        return {**self._counters, **self.episodes.counters}

    @property
    def samples_per_insert(self) -> float:
        """Transitions drawn per transition stored (the trainer's rate limiter holds it):
        ``updates_per_sample * batch_size``."""
        return self.updates_per_sample * self.batch_size

    # ------------------------------------------------------------------ append
    def _parse(self, segment: Segment) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        a = segment.arrays
        t = segment.num_transitions
        obs = {k[4:]: np.asarray(v) for k, v in a.items() if k.startswith("obs/") and k != POTENTIAL}
        if not obs:
            raise BadInput("segment", "uniform replay needs at least one 'obs/<name>' array")
        for k, v in obs.items():
            if len(v) != t + 1:
                raise BadInput("segment", f"'obs/{k}' must hold {t + 1} observations, has {len(v)}")
            if v.dtype.kind == "f" and not np.all(np.isfinite(v)):
                raise BadInput("segment", f"non-finite values in 'obs/{k}'")
        action = np.asarray(a["action"])
        reward = np.asarray(a["reward"], np.float64).reshape(-1)
        if len(action) != t or len(reward) != t:
            raise BadInput("segment", "action and reward must hold one value per transition")
        if action.dtype.kind == "f":
            if action.ndim != 2 or not np.all(np.isfinite(action)):
                raise BadInput("segment", "continuous actions must be finite (T, A) floats")
        elif action.dtype.kind not in "iu" or action.ndim != 1:
            raise BadInput("segment", "actions must be (T,) integers or (T, A) floats")
        if not np.all(np.isfinite(reward)):
            raise BadInput("segment", "non-finite rewards")
        if self.transitions and (action.shape[1:] != self.transitions["action"].shape[1:]
                                 or action.dtype.kind != self.transitions["action"].dtype.kind):
            raise BadInput("segment", f"actions {action.dtype}{list(action.shape[1:])} differ from the stored "
                                      f"{self.transitions['action'].dtype}{list(self.transitions['action'].shape[1:])}")
        pot = np.asarray(a.get(POTENTIAL, np.zeros(t + 1)), np.float32).reshape(-1)
        if len(pot) != t + 1 or not np.all(np.isfinite(pot)):
            raise BadInput("segment", f"'{POTENTIAL}' must hold {t + 1} finite values")
        frames = {f"obs/{k}": v for k, v in obs.items()}
        frames[POTENTIAL] = pot
        self.frames.check(frames)
        return frames, action, reward

    def append(self, segment: Segment) -> int:
        """Store one segment; return the number of transitions added."""
        try:
            frames, action, reward = self._parse(segment)
        except BadInput:
            self._counters["rejected"] += 1
            raise
        self._counters["segments"] += 1
        key = (segment.run_id, segment.worker_id, int(segment.episode_id))
        if segment.info.get("fill_buffer", True) is False:
            self._counters["skipped_no_fill"] += 1
            self.episodes.drop(key)
            return 0
        t = segment.num_transitions
        terminated = np.asarray(segment.arrays.get("terminated", np.zeros(t, bool)), bool).reshape(-1)
        finished = bool(segment.episode_done and t > 0 and terminated[-1])
        if not self.transitions:
            self._allocate(action)
        stretches = self.episodes.join(
            key, segment.index_in_episode, segment.episode_done, finished,
            lambda first: self.frames.store({k: v[first:] for k, v in frames.items()}),
            {"action": action, "reward": reward})
        added = sum(self._emit(st) for st in stretches)
        self.transitions_added += added
        return added

    def _allocate(self, action: np.ndarray) -> None:
        dtype = np.float32 if action.dtype.kind == "f" else np.int64
        self.transitions = {
            "state": np.zeros(self.capacity, np.int64), "next_state": np.zeros(self.capacity, np.int64),
            "action": np.zeros((self.capacity,) + action.shape[1:], dtype),
            "reward": np.zeros(self.capacity, np.float32), "discount": np.zeros(self.capacity, np.float32),
        }

    def _emit(self, stretch: Stretch) -> int:
        m = stretch.ready
        if m <= 0:
            return 0
        built = build_n_step(stretch.steps["reward"], np.ones(len(stretch), bool), n_max=self.n_steps,
                             gamma=self.gamma, discard_non_greedy=False, count=m, finished=stretch.finished)
        terminal = built.n_steps >= built.terminal_actions
        discount = np.where(terminal, 0.0, np.power(self.gamma, built.n_steps.astype(np.float64)))
        state, next_state = stretch.frames[built.state], stretch.frames[built.next_state]
        reward = built.rewards[np.arange(m), built.n_steps - 1].astype(np.float64)
        pot = self.frames[POTENTIAL]
        reward = reward + discount * pot[self.frames.slots(next_state)] - pot[self.frames.slots(state)]
        slots = (self.count + np.arange(m)) % self.capacity
        tr = self.transitions
        tr["state"][slots], tr["next_state"][slots] = state, next_state
        tr["action"][slots] = stretch.steps["action"][:m]
        tr["reward"][slots] = reward
        tr["discount"][slots] = discount
        self.count += m
        return m

    # ------------------------------------------------------------------ sampling
    def _obs(self, serials: np.ndarray) -> dict[str, np.ndarray]:
        return {k[4:]: self.frames.get(k, serials) for k in self.frames.fields if k != POTENTIAL}

    sample_while_training = True  # nothing an agent calls during train() writes this memory

    def sample(self, batch_size: int | None = None) -> TransitionBatch:
        """A uniformly drawn batch (counts toward the update rate)."""
        n = len(self)
        if n == 0:
            raise ValueError("cannot sample from an empty memory")
        bs = int(batch_size or self.batch_size)
        tr = self.transitions
        slots = (self.count - 1 - self.rng.integers(0, n, size=bs)) % self.capacity
        # the oldest transitions may point at frames already overwritten: draw those again
        for _ in range(8):
            bad = ~(self.frames.valid(tr["state"][slots]) & self.frames.valid(tr["next_state"][slots]))
            if not bad.any():
                break
            slots[bad] = (self.count - 1 - self.rng.integers(0, max(1, n // 2), size=int(bad.sum()))) % self.capacity
        self.batches_sampled += 1
        return TransitionBatch(obs=self._obs(tr["state"][slots]), action=tr["action"][slots],
                               reward=tr["reward"][slots], next_obs=self._obs(tr["next_state"][slots]),
                               discount=tr["discount"][slots])

    # ------------------------------------------------------------------ verify mode
    def rebuild_transitions(self, segment: Segment) -> list[dict[str, np.ndarray]]:
        """Verify mode: the one-step transitions of ``segment`` as this memory stores them (in a
        scratch memory without shaping; nothing is added here)."""
        arrays = {k: v for k, v in segment.arrays.items() if k != POTENTIAL}
        scratch = UniformReplayMemory(capacity=max(1, segment.num_transitions), n_steps=1, gamma=1.0,
                                      start_learning_size=0, max_pending_episodes=1)
        scratch.append(dataclasses.replace(segment, arrays=arrays, episode_done=True, index_in_episode=0, info={}))
        n = len(scratch)
        tr = scratch.transitions
        names = [k[4:] for k in scratch.frames.fields if k != POTENTIAL]

        def obs(serial: int) -> Any:
            if names == ["x"]:
                return scratch.frames.get("obs/x", np.array([serial]))[0]
            return {k: scratch.frames.get(f"obs/{k}", np.array([serial]))[0] for k in names}

        return [{"obs": obs(int(tr["state"][i])), "action": tr["action"][i], "reward": tr["reward"][i],
                 "next_obs": obs(int(tr["next_state"][i])), "done": bool(tr["discount"][i] == 0.0)}
                for i in range(n)]

    # ------------------------------------------------------------------ persistence (no pickle)
    def save(self, directory: Path, chunks: ChunkStore | None = None) -> None:
        """Write frames, transitions and counters (json + arrays): the arrays as chunks in
        ``chunks`` when given (frames not stored since the previous save there are not
        rewritten), else in one npz. Held-back steps of unfinished episodes (at most
        ``n_steps`` each) are not saved."""
        stored = self.frames.put_chunks(chunks, "frames/") if chunks is not None else {}
        arrays = {} if chunks is not None else self.frames.arrays("frames/")
        arrays.update({f"transitions/{k}": v for k, v in self.transitions.items()})
        meta = {"version": 1, **self.frames.meta(), "count": self.count, "capacity": self.capacity,
                "transitions_added": self.transitions_added, "batches_sampled": self.batches_sampled,
                "counters": self.counters}
        write_replay(directory, arrays, meta, chunks, stored)

    def load(self, directory: Path, chunks: ChunkStore | None = None) -> None:
        """Read back what ``save`` wrote, in either layout (nothing is unpickled)."""
        directory = Path(directory)
        if not (directory / "replay.json").exists():
            return
        meta, data = read_replay(directory, chunks)
        if int(meta["capacity"]) != self.capacity:
            raise BadInput("replay", f"saved memory holds {meta['capacity']} transitions, configured {self.capacity}")
        self.frames.restore(meta, data, "frames/")
        self.transitions = {k.split("/", 1)[1]: v for k, v in data.items() if k.startswith("transitions/")}
        self.count = int(meta["count"])
        self.transitions_added = int(meta["transitions_added"])
        self.batches_sampled = int(meta["batches_sampled"])
        self._counters.update({k: int(v) for k, v in meta["counters"].items() if k in self._counters})
        self.episodes.restart(meta["counters"])

    def stats(self) -> dict[str, float]:
        """Counters for logging (``memory/...``)."""
        out = {f"memory/{k}": float(v) for k, v in self.counters.items()}
        out.update({"memory/size": float(len(self)), "memory/transitions_added": float(self.transitions_added),
                    "memory/batches_sampled": float(self.batches_sampled)})
        return out
