"""Verify mode: does the Memory rebuild exactly the transitions the worker saw?

For each segment, the transitions a worker lived through are read straight off the segment
(observation i, action i, reward i, observation i+1, terminated i) and compared, transition by
transition, with ``Memory.rebuild_transitions(segment)``. The first difference is reported with
its key, transition index and both values (``first_difference``; the trainer does it for every
segment with ``trainer.verify: true``). ``verify_pipeline`` (``rulka verify``) runs the whole
worker -> compressor -> memory path in one process and compares against the segments before
compression, so a lossy compressor is caught too. A memory that stacks frame history may return
observations with one extra leading (history) axis: then the newest frame is compared.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from rulka.interfaces import Memory, SampleCompressor
from rulka.segment import Segment
from rulka.worker.build import arrays_to_obs


def expected_transitions(segment: Segment) -> list[dict[str, Any]]:
    """The transitions as the worker saw them."""
    a = segment.arrays
    done = a.get("terminated", np.zeros(segment.num_transitions, bool))
    return [{"obs": arrays_to_obs(a, i), "action": a["action"][i], "reward": a["reward"][i],
             "next_obs": arrays_to_obs(a, i + 1), "done": done[i]} for i in range(segment.num_transitions)]


def _short(value: Any) -> str:
    text = np.array2string(np.asarray(value), threshold=8, edgeitems=2, precision=4)
    return " ".join(text.split())[:120]


def _compare(key: str, want: Any, got: Any) -> str | None:
    if isinstance(want, Mapping):
        if not isinstance(got, Mapping):
            return f"{key}: expected a dict of {sorted(want)}, got {type(got).__name__}"
        for sub in want:
            if sub not in got:
                continue  # the memory need not keep every observation part
            problem = _compare(f"{key}/{sub}", want[sub], got[sub])
            if problem:
                return problem
        return None
    w, g = np.asarray(want), np.asarray(got)
    if g.shape != w.shape and g.ndim == w.ndim + 1 and g.shape[1:] == w.shape:
        g = g[-1]  # stacked history: the newest frame is the one this transition observed
    if g.shape != w.shape:
        if g.size == w.size:
            g = g.reshape(w.shape)
        else:
            return f"{key}: shape {g.shape} != expected {w.shape}"
    if w.dtype.kind == "f" or g.dtype.kind == "f":
        same = np.allclose(w.astype(np.float64), g.astype(np.float64), rtol=1e-6, atol=1e-6)
    else:
        same = np.array_equal(w, g)
    if not same:
        return f"{key}: expected {_short(w)}, got {_short(g)}"
    return None


def compare_transitions(expected: list[dict[str, Any]], rebuilt: list[dict[str, Any]]) -> str | None:
    """None when they agree, else ``"transition <i>: <key>: expected ..., got ..."``."""
    if len(rebuilt) != len(expected):
        return f"the memory rebuilt {len(rebuilt)} transitions, the worker saw {len(expected)}"
    for i, (want, got) in enumerate(zip(expected, rebuilt)):
        for key in want:
            if key not in got:
                return f"transition {i}: key {key!r} missing from the rebuilt transition"
            problem = _compare(key, want[key], got[key])
            if problem:
                return f"transition {i}: {problem}"
    return None


def first_difference(segment: Segment, memory: Memory, reference: Segment | None = None) -> str | None:
    """Compare ``memory.rebuild_transitions(segment)`` with what the worker saw (``reference``,
    the uncompressed segment, defaulting to ``segment`` itself). None when they agree."""
    try:
        rebuilt = memory.rebuild_transitions(segment)
    except NotImplementedError:
        return f"{type(memory).__name__} does not implement rebuild_transitions"
    return compare_transitions(expected_transitions(reference or segment), rebuilt)


class _Capturing(SampleCompressor):
    """Passes segments through ``inner`` and keeps each original (what the worker saw)."""

    def __init__(self, inner: SampleCompressor) -> None:
        self.inner = inner
        self.originals: list[tuple[Segment, bytes]] = []

    def compress(self, segment: Segment) -> bytes:
        data = self.inner.compress(segment)
        self.originals.append((copy.deepcopy(segment), data))
        return data

    def decompress(self, data: bytes) -> Segment:
        return self.inner.decompress(data)


def verify_pipeline(cfg: Any, segments: int = 20, max_steps: int = 100_000) -> dict[str, Any]:
    """Run the configured env, actor, compressor and memory in this process for ``segments``
    segments; compare, segment by segment, what the memory rebuilds from the *decompressed*
    bytes with the worker's *original* segment. Returns ``{"segments": n, "transitions": n,
    "first_difference": str | None}``."""
    from rulka.compress import SegmentDecoder, codec_name, frame_segment, make_compressor
    from rulka.net.local import LocalHub
    from rulka.worker.build import build_plugin, make_env, opt
    from rulka.worker.worker import Worker

    algo = str(opt(cfg, "trainer.agent") or opt(cfg, "training.algorithm", "iqn"))
    agent = build_plugin("agent", algo, opt(cfg, "trainer.agent_kwargs"), cfg)
    memory = build_plugin("memory", str(opt(cfg, "trainer.memory") or algo), opt(cfg, "trainer.memory_kwargs"), cfg)
    codec = str(opt(cfg, "worker.compressor", "zstd"))
    kwargs = dict(opt(cfg, "worker.compressor_kwargs", {}) or {})
    compressor = _Capturing(make_compressor(codec, **kwargs))
    # the trainer's side: a compressor of its own, found by the name in each segment's header
    decoder = SegmentDecoder(make_compressor(codec, **kwargs), codec)
    worker = Worker(cfg, LocalHub().worker_link("verify"), env=make_env(cfg), actor=agent.get_actor(),
                    compressor=compressor)
    checked = transitions = 0
    problem = None
    stop = threading.Event()
    steps = 0
    try:
        worker._ensure_ready(stop)
        while checked < segments and problem is None and steps < max_steps:
            n = worker._run_episode(stop, segments * worker.segment_max_steps)
            steps += max(n, 0)
            for original, data in compressor.originals:
                received = decoder.decompress(frame_segment(codec_name(compressor.inner, codec), data))
                problem = first_difference(received, memory, reference=original)
                memory.append(received)
                checked += 1
                transitions += original.num_transitions
                if problem is not None:
                    problem = (f"worker {original.worker_id} episode {original.episode_id} segment "
                               f"{original.index_in_episode} (seq {original.seq}): {problem}")
                    break
                if checked >= segments:
                    break
            compressor.originals.clear()
            if n < 0:
                break
    finally:
        worker.close()
    return {"segments": checked, "transitions": transitions, "first_difference": problem}
