"""The averaged policy: an exponential moving average of the published actor weights.

A greedy policy's race time moves by seconds between neighbouring weights versions (the README's
repeated runs, BENCHMARKS.md), so the weights at whatever moment a run stops are a draw. Averaging
the weights over the last stretch of a run (Polyak averaging; "stochastic weight averaging" when
snapshots are averaged) gives a policy that sits between those swings. With
``trainer.average_policy_frames: F`` the trainer keeps, beside the weights it publishes, their
moving average with a horizon of ``F`` frames: at each published version,

    average <- average + w * (weights - average),   w = min(1, frames since the last version / F)

over the floating-point tensors (others, such as the exploration rates, are the latest). It is
not published (the workers keep driving the learner's weights) but as a best-policy candidate inside
the cooldown of a run that ends on it (``rulka.trainer.best``). Each checkpoint writes it to
``<run>/average/policy.safetensors`` (a policy file like ``weights/``, for ``rulka eval``,
``rulka sim render --policy``, ``nn.init_from_pretrained``); a resumed run goes on from that file.

With ``trainer.average_policy_kind: mean`` every version counts the same: the ``n``-th version since
the average (re)started gets ``w = max(1/n, min(1, frames since the last version / F))``, the plain
mean of the versions until the moving average's share is the larger (about ``F`` frames of
versions); with ``F`` at least the cooldown's length, the plain mean of the cooldown's versions.

When the learner's weights are replaced rather than trained on (``training.lr_cooldown_from_best``
puts the best policy back at the start of the cooldown), the average starts again from the put-back
weights (``restart``; counter ``average_restarted``): the weights before and after the jump can be
hundreds of thousands of frames of training apart, and a mean of two unrelated networks is no policy
between them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("rulka.trainer")

AVERAGE_DIR = "average"
TRAINED_DIR = "trained"  # training.lr_cooldown_end_on_average: the weights trained last, when the run ends on the average


class PolicyAverage:
    """``update(weights, samples)`` at each published version; the checkpointer saves ``weights``
    with ``spec(actor_spec)`` to ``<run>/average/``; ``load(run_dir)`` at a resume. ``frames`` is
    the horizon (> 0)."""

    def __init__(self, frames: int, kind: str = "moving") -> None:
        if frames <= 0:
            raise ValueError(f"average_policy_frames must be positive, not {frames}")
        if kind not in ("moving", "mean"):
            raise ValueError(f"average_policy_kind must be moving or mean, not {kind!r}")
        self.frames = int(frames)
        self.kind = kind
        self.weights: dict[str, Any] | None = None
        self.samples: int | None = None  # frames played at the last update
        self.versions = 0  # versions in the average since it (re)started

    def weight(self, samples: int) -> float:
        """The share of the newest weights: the frames played since the last update over the horizon
        (all of it for the first weights, or when the horizon has passed); with kind ``mean`` at
        least ``1/n`` for the ``n``-th version since the average started."""
        if self.weights is None or self.samples is None:
            return 1.0
        moving = min(1.0, max(0, samples - self.samples) / self.frames)
        return max(moving, 1.0 / (self.versions + 1)) if self.kind == "mean" else moving

    def update(self, weights: Mapping[str, Any], samples: int) -> None:
        import torch

        w = self.weight(samples)
        if self.weights is None or set(self.weights) != set(weights):
            w = 1.0  # first weights, or the actor changed its tensors: start again from these
            self.versions = 0
        out: dict[str, Any] = {}
        for name, value in weights.items():
            old = None if self.weights is None else self.weights.get(name)
            if w >= 1.0 or old is None or not torch.is_floating_point(value) or old.shape != value.shape:
                out[name] = value.detach().clone()
            else:
                out[name] = old.lerp_(value.detach().to(old.dtype), w)
        self.weights = out
        self.samples = int(samples)
        self.versions += 1

    def restart(self, weights: Mapping[str, Any], samples: int) -> None:
        """Forget the average and start it again from ``weights`` (at ``samples`` frames played)."""
        self.weights = None
        self.samples = None
        self.update(weights, samples)

    def spec(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The actor spec to save the average with: ``spec`` plus its horizon and the frames it
        reaches (``frames_averaged_to``, where a resumed run goes on from)."""
        return {**spec, "average_policy_frames": self.frames, "average_policy_kind": self.kind,
                "frames_averaged_to": int(self.samples or 0), "versions_averaged": self.versions}

    def load(self, run_dir: Path) -> bool:
        """Go on from ``<run>/average/policy.safetensors`` when there is one (a resumed run); a
        damaged file is logged and the average starts again from the next weights."""
        from rulka.envs.sim.policy import POLICY_FILE, read_policy_file
        from rulka.errors import UserError

        file = Path(run_dir) / AVERAGE_DIR / POLICY_FILE
        if not file.is_file():
            return False
        try:
            _, tensors, spec = read_policy_file(file)
        except UserError as exc:
            log.warning("averaged policy not resumed (%s); it starts again from the next weights", exc)
            return False
        self.weights = dict(tensors)
        self.samples = int(spec.get("frames_averaged_to", 0))
        versions = spec.get("versions_averaged")
        # a file from before versions were counted: count it as a long average (the moving share decides)
        self.versions = int(versions) if isinstance(versions, int) and versions > 0 else 1_000_000
        return True
