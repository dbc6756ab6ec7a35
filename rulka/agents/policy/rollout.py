"""The rollout builder shared by PPO, GRPO and DPO: segments of one episode -> a ``Rollout``.

Per-step rewards are the pipeline's reward (dense progress + engineered terms, as the env
computed it) plus potential-based shaping folded with the on-policy discount:
``r_t = reward_t + gamma * Phi(s_{t+1}) * (1 - terminated_t) - Phi(s_t)`` when the segment
carries ``obs/potential`` (the same shaping IQN's replay adds), where ``gamma`` is
``training.policy_rollout_gamma_schedule``, else legacy ``ppo.ppo_gamma_schedule``, else
``training.policy_rollout_gamma``, else ``ppo.gamma`` (guide: ``training.policy_rollout_gamma*``).
A rollout shorter than ``min_steps`` transitions is refused (``None``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from rulka.errors import BadInput
from rulka.segment import Segment

MIN_ROLLOUT_STEPS = 2  # a trajectory needs at least this many transitions to be trained on


@dataclasses.dataclass
class Rollout:
    """One stretch of one episode, ready for a policy learner (numpy arrays)."""

    img: np.ndarray | None  # (T + 1, H, W) uint8, or None without images
    flt: np.ndarray  # (T + 1, F) float32
    action: np.ndarray  # (T,) int64, or (T, N) with N actions per block (multi-action)
    reward: np.ndarray  # (T,) float32, shaped with ``gamma``
    terminated: np.ndarray  # (T,) bool
    truncated: np.ndarray  # (T,) bool
    logprob: np.ndarray | None  # (T,) behaviour log pi(a|s) recorded by the actor
    value: np.ndarray | None  # (T,) V(s) recorded by the actor
    gamma: float  # the discount the rewards were shaped with (PPO's GAE uses it too)
    policy_version: int  # oldest weights version that acted in it
    worker_id: str = ""
    episode_id: int = 0
    start_key: Any = None  # episodes with equal keys started from the same state (GRPO groups)
    episode_done: bool = False

    def __len__(self) -> int:
        return int(len(self.action))

    @property
    def score(self) -> float:
        """Sum of the shaped per-step rewards (GRPO's R_i, DPO's pair ranking)."""
        return float(np.sum(self.reward, dtype=np.float64))

    # plain-data form for memory files (never pickled)
    def to_arrays(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta = {"gamma": self.gamma, "policy_version": self.policy_version, "worker_id": self.worker_id,
                "episode_id": self.episode_id, "episode_done": self.episode_done,
                "start_key": None if self.start_key is None else list(self.start_key)}
        arrays = {"flt": self.flt, "action": self.action, "reward": self.reward,
                  "terminated": self.terminated, "truncated": self.truncated}
        for name in ("img", "logprob", "value"):
            if getattr(self, name) is not None:
                arrays[name] = getattr(self, name)
        return meta, arrays

    @classmethod
    def from_arrays(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Rollout:
        try:
            key = meta["start_key"]
            return cls(img=arrays.get("img"), flt=arrays["flt"], action=arrays["action"],
                       reward=arrays["reward"], terminated=arrays["terminated"], truncated=arrays["truncated"],
                       logprob=arrays.get("logprob"), value=arrays.get("value"), gamma=float(meta["gamma"]),
                       policy_version=int(meta["policy_version"]), worker_id=str(meta["worker_id"]),
                       episode_id=int(meta["episode_id"]), episode_done=bool(meta["episode_done"]),
                       start_key=None if key is None else tuple(key))
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput("rollout", f"malformed stored rollout: {exc}") from None


def _float_obs(arrays: dict[str, np.ndarray]) -> np.ndarray:
    key = "obs/float" if "obs/float" in arrays else "obs/x" if "obs/x" in arrays else ""
    if not key:
        raise BadInput("segment", "policy learners need 'obs/float' or 'obs/x'")
    flt = np.asarray(arrays[key], dtype=np.float32)
    if flt.ndim == 1:
        flt = flt[:, None]
    if flt.ndim != 2:
        raise BadInput("segment", f"'{key}' must be (T+1, F)")
    return flt


def build_rollout(segments: Sequence[Segment], gamma: float, *, min_steps: int = MIN_ROLLOUT_STEPS,
                  n_actions: int | None = None, start_key: Any = None,
                  n_action_branches: int = 1) -> Rollout | None:
    """Join consecutive segments of one episode (in order) into a ``Rollout`` with shaped rewards.

    Returns None when the result has fewer than ``min_steps`` transitions; raises ``BadInput`` on
    arrays a policy learner cannot use (missing observations, non-integer or out-of-range
    actions, actions not shaped ``(T,)`` or, with ``n_action_branches`` N > 1, ``(T, N)``,
    non-finite numbers).
    """
    if not segments:
        return None
    flts, imgs, pots, parts = [], [], [], {k: [] for k in ("action", "reward", "terminated", "truncated",
                                                          "extra/logprob", "extra/value")}
    for i, seg in enumerate(segments):
        a = seg.arrays
        skip = 0 if i == 0 else 1  # a segment's first observation is the previous one's last
        flts.append(_float_obs(a)[skip:])
        img = a.get("obs/img")
        if img is not None:
            img = np.asarray(img)
            if img.dtype != np.uint8 or img.ndim != 3:
                raise BadInput("segment", "'obs/img' must be uint8 (T+1, H, W)")
            imgs.append(img[skip:])
        pot = a.get("obs/potential")
        pots.append(np.zeros(len(a["reward"]) + 1, np.float64)[skip:] if pot is None
                    else np.asarray(pot, np.float64).reshape(-1)[skip:])
        for k in parts:
            if k in a:
                parts[k].append(np.asarray(a[k]))
    if imgs and len(imgs) != len(segments):
        raise BadInput("segment", "'obs/img' present in only some segments of an episode")
    action = np.concatenate(parts["action"])
    if not np.issubdtype(action.dtype, np.integer):
        raise BadInput("segment", "policy learners need discrete integer actions")
    want = (n_action_branches,) if n_action_branches > 1 else ()
    if action.shape[1:] != want:
        raise BadInput("segment", f"policy learners with {n_action_branches} action(s) per decision "
                                  f"(environment.rl_action_offsets_ms) need 'action' of shape "
                                  f"{f'(T, {n_action_branches})' if want else '(T,)'}; got {action.shape}")
    if len(action) and (action.min() < 0 or (n_actions is not None and action.max() >= n_actions)):
        raise BadInput("segment", f"action out of range 0..{n_actions}")
    reward_raw = np.concatenate(parts["reward"]).astype(np.float64)
    flt = np.concatenate(flts)
    if not np.all(np.isfinite(flt)) or not np.all(np.isfinite(reward_raw)):
        raise BadInput("segment", "non-finite observations or rewards")
    t = len(action)
    if t < min_steps:
        return None
    terminated = np.concatenate(parts["terminated"]).astype(bool)
    truncated = np.concatenate(parts["truncated"]).astype(bool)
    pot = np.concatenate(pots)
    reward = reward_raw + gamma * np.where(terminated, 0.0, pot[1:]) - pot[:-1]
    extras = {}
    for name in ("logprob", "value"):
        chunks = parts[f"extra/{name}"]
        extras[name] = np.concatenate(chunks).astype(np.float32).reshape(-1) if len(chunks) == len(segments) else None
        if extras[name] is not None and (len(extras[name]) != t or not np.all(np.isfinite(extras[name]))):
            raise BadInput("segment", f"'extra/{name}' is malformed")
    last = segments[-1]
    return Rollout(img=np.concatenate(imgs) if imgs else None, flt=flt, action=action.astype(np.int64),
                   reward=reward.astype(np.float32), terminated=terminated, truncated=truncated,
                   logprob=extras["logprob"], value=extras["value"], gamma=float(gamma),
                   policy_version=min(s.policy_version for s in segments), worker_id=last.worker_id,
                   episode_id=last.episode_id, start_key=start_key, episode_done=bool(last.episode_done))
