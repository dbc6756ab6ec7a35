"""Does a Memory rebuild exactly the transitions the worker saw?

For each segment, the transitions a worker lived through are read straight off the segment
(observation i, action i, reward i, observation i+1, terminated i) and compared, transition by
transition, with ``Memory.rebuild_transitions(segment)``. The first difference is reported with
its key, transition index and both values (``first_difference``; the trainer does it for every
segment with ``trainer.verify: true``; ``rulka verify`` (``rulka.cli.verify``) runs the whole
worker -> compressor -> memory path in one process and uses the same comparison). A memory that
stacks frame history may return observations with one extra leading (history) axis: then the
newest frame is compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rulka.interfaces import Memory
from rulka.plugins import arrays_to_obs
from rulka.segment import Segment


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
