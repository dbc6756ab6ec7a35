"""Episode files and DPO pair files: offline trajectories in rulka's own inert format.

An episode file (``*.rulka-episode``) is msgpack ``{"format": "rulka-episode/1", "segments":
[bytes, ...]}`` where each entry is one segment compressed exactly as workers send it (zstd over
plain msgpack with raw arrays): numbers and strings only, never unpickled. A pair file
(``dpo.dpo_offline_pairs_jsonl``) has one JSON object per line, ``{"chosen": PATH, "rejected":
PATH}``, paths relative to the pair file or absolute. ``rulka dpo record`` writes episode files
from a saved policy; ``rulka dpo pair`` appends a line (recording each side first when given a
run folder or a policy file instead of an episode file).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rulka.agents.policy.rollout import Rollout, build_rollout
from rulka.compress import ZstdCompressor
from rulka.errors import BadInput, UserError
from rulka.segment import Segment, pack, unpack

log = logging.getLogger(__name__)

EPISODE_FORMAT = "rulka-episode/1"
EPISODE_SUFFIX = ".rulka-episode"
MAX_EPISODE_FILE_BYTES = 1 << 30


def write_episode(path: str | Path, segments: Sequence[Segment]) -> Path:
    """Write the segments of one episode (in order) to ``path``."""
    codec = ZstdCompressor()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(pack({"format": EPISODE_FORMAT, "segments": [codec.compress(s) for s in segments]}))
    tmp.replace(path)
    return path


def read_episode(path: str | Path) -> list[Segment]:
    """The segments of an episode file; ``BadInput`` naming the problem if it is not one."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput("episode file", f"{path}: {exc.strerror or exc}") from None
    obj = unpack(data, max_bytes=MAX_EPISODE_FILE_BYTES)
    if not isinstance(obj, dict) or obj.get("format") != EPISODE_FORMAT or not isinstance(obj.get("segments"), list):
        raise BadInput("episode file", f"{path} is not a {EPISODE_FORMAT} file")
    codec = ZstdCompressor()
    segments = []
    for i, payload in enumerate(obj["segments"]):
        if not isinstance(payload, bytes):
            raise BadInput("episode file", f"{path}: segment {i} is not bytes")
        segments.append(codec.decompress(payload))
    if not segments:
        raise BadInput("episode file", f"{path} holds no segment")
    for a, b in zip(segments, segments[1:]):
        if b.index_in_episode != a.index_in_episode + 1 or (b.worker_id, b.episode_id) != (a.worker_id, a.episode_id):
            raise BadInput("episode file", f"{path}: segments are not consecutive parts of one episode")
    return segments


def read_pair_lines(pairs_file: str | Path) -> list[tuple[Path, Path]]:
    """(chosen, rejected) paths of a pair file; a malformed line is logged and skipped."""
    pairs_file = Path(pairs_file)
    try:
        lines = pairs_file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UserError(f"cannot read dpo.dpo_offline_pairs_jsonl '{pairs_file}': {exc.strerror or exc}") from exc
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            chosen, rejected = obj["chosen"], obj["rejected"]
            if not isinstance(chosen, str) or not isinstance(rejected, str):
                raise TypeError("paths must be strings")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s line %d skipped: not {\"chosen\": PATH, \"rejected\": PATH} (%s)", pairs_file, number, exc)
            continue
        out.append(tuple((pairs_file.parent / p) if not Path(p).is_absolute() else Path(p) for p in (chosen, rejected)))
    return out


def offline_pair_loader(pairs_file: str | Path, *, n_actions: int | None = None, n_action_branches: int = 1
                        ) -> Callable[[float], list[tuple[Rollout, Rollout]]]:
    """A loader for ``PairMemory``: called with the rollout discount, it reads every pair of
    ``pairs_file``; an unreadable episode or pair is logged, counted and skipped."""

    def load(gamma: float) -> list[tuple[Rollout, Rollout]]:
        pairs, bad = [], 0
        for chosen_path, rejected_path in read_pair_lines(pairs_file):
            try:
                chosen, rejected = (build_rollout(read_episode(path), gamma, min_steps=1, n_actions=n_actions,
                                                  n_action_branches=n_action_branches)
                                    for path in (chosen_path, rejected_path))
            except BadInput as exc:
                bad += 1
                log.warning("offline DPO pair skipped: %s", exc)
                continue
            if chosen is not None and rejected is not None:
                pairs.append((chosen, rejected))
        if bad:
            log.warning("%d offline DPO pair(s) of %s could not be read", bad, pairs_file)
        if not pairs:
            raise UserError(f"dpo.dpo_offline_pairs_jsonl '{pairs_file}' holds no readable pair")
        return pairs

    return load


def record_episode(env: Any, actor: Any, *, seed: int | None = None, greedy: bool = False,
                   worker_id: str = "recorded", episode_id: int = 0) -> tuple[Segment, float]:
    """Run one episode of ``actor`` in ``env``; return it as one segment and its return."""
    from rulka.plugins import obs_to_arrays

    obs, info = env.reset(seed=seed)
    frames = [obs_to_arrays(obs, info)]
    actions, rewards, terms, truncs = [], [], [], []
    done, total = False, 0.0
    while not done:
        action = actor.act(obs, test=greedy)
        obs, r, te, tr, info = env.step(action)
        frames.append(obs_to_arrays(obs, info))
        actions.append(action)
        rewards.append(float(r))
        terms.append(bool(te))
        truncs.append(bool(tr))
        total += float(r)
        done = bool(te or tr)
    arrays = {k: np.stack([f[k] for f in frames]) for k in frames[0] if all(k in f for f in frames)}
    arrays.update({"action": np.asarray(actions, np.int64), "reward": np.asarray(rewards, np.float32),
                   "terminated": np.asarray(terms, bool), "truncated": np.asarray(truncs, bool)})
    seg = Segment(run_id="", worker_id=worker_id, episode_id=episode_id, seq=episode_id, index_in_episode=0,
                  first_step=0, policy_version=0, arrays=arrays, episode_done=True,
                  info={"episode_return": total, "episode_length": len(actions)})
    return seg, total


def append_pair(pairs_file: str | Path, chosen: str | Path, rejected: str | Path) -> None:
    """Append ``{"chosen", "rejected"}`` to ``pairs_file`` (paths relative to it when inside its folder)."""
    pairs_file = Path(pairs_file)
    pairs_file.parent.mkdir(parents=True, exist_ok=True)

    def rel(p: str | Path) -> str:
        p = Path(p).resolve()
        try:
            return str(p.relative_to(pairs_file.parent.resolve()))
        except ValueError:
            return str(p)

    with open(pairs_file, "a", encoding="utf-8") as f:
        f.write(json.dumps({"chosen": rel(chosen), "rejected": rel(rejected)}) + "\n")
