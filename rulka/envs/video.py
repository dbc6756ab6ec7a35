"""Recording an episode: frames of any env that renders ``rgb_array`` as a GIF or MP4, and for
the simulator also the picture of the driven line coloured by speed. Used by ``rulka sim render``
and ``rulka eval --video`` (pass ``start``/``step`` as the hooks of
``rulka.evaluation.run_episode``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rulka.errors import UserError


def _sim_of(env: Any) -> Any:
    """The SimTrackEnv under ``env`` (gym wrappers included), or None."""
    from rulka.envs.sim.env import SimTrackEnv

    inner = getattr(env, "unwrapped", env)
    return inner if isinstance(inner, SimTrackEnv) else None


def file_stem(name: str) -> str:
    """``name`` as a safe file name part (``gen:3`` -> ``gen_3``, ``ALE/Pong-v5`` -> ``ALE_Pong-v5``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "env"


class EpisodeRecorder:
    """Collects one frame every ``every`` steps (all of them with ``every=1``) and, on the
    simulator, the driven line. ``animate=False`` keeps only the line (no frames rendered)."""

    def __init__(self, every: int = 1, animate: bool = True) -> None:
        if every < 1:
            raise UserError("keep one frame in N: N must be >= 1")
        self.every = every
        self.animate = animate
        self.frames: list[np.ndarray] = []
        self.trace: list[tuple[float, float, float]] = []
        self.sim: Any = None
        self.result: Any = None  # the EpisodeResult, set by rulka.evaluation.evaluate
        self.last_info: Mapping[str, Any] = {}
        self.env_fps: float | None = None

    def _frame(self, env: Any) -> None:
        frame = env.render()
        if frame is None or not isinstance(frame, np.ndarray) or frame.ndim != 3:
            raise UserError("this env renders no rgb_array frames (it needs render_mode='rgb_array')")
        self.frames.append(np.ascontiguousarray(frame))

    def start(self, env: Any) -> None:
        """After ``env.reset``: the first frame and the start of the line."""
        self.frames, self.trace, self.last_info = [], [], {}
        self.sim = _sim_of(env)
        fps = (getattr(env, "metadata", None) or {}).get("render_fps")
        self.env_fps = float(fps) if isinstance(fps, int | float) and fps > 0 else None
        if self.sim is not None:
            car = self.sim.car
            self.trace.append((car.x, car.z, 0.0))
        if self.animate:
            self._frame(env)

    def step(self, env: Any, step: int, info: Mapping[str, Any]) -> None:
        """After each ``env.step``."""
        self.last_info = info
        if self.sim is not None:
            car = self.sim.car
            self.trace.append((car.x, car.z, car.speed))
        if self.animate and step % self.every == 0:
            self._frame(env)

    def outcome(self) -> str:
        """``finished in 23.10 s`` or ``stopped at 3.00 s (<why>)`` on the simulator; the return otherwise."""
        info = self.last_info
        if self.sim is not None:
            if info.get("finished"):
                return f"finished in {info['race_time_ms'] / 1000:.2f} s"
            return f"stopped at {self.sim.car.race_time_ms / 1000:.2f} s ({info.get('cutoff') or 'time limit'})"
        if self.result is not None:
            return f"return {self.result.episode_return:.1f} in {self.result.length} steps"
        return ""

    def write(self, out_dir: str | Path, stem: str, fmt: str = "gif", fps: int | None = None,
              title: str | None = None, reference: np.ndarray | None = None,
              checkpoints: np.ndarray | None = None) -> list[Path]:
        """Write ``STEM.gif``/``STEM.mp4`` (when frames were kept) and, on the simulator,
        ``STEM.png`` (the track with the driven line coloured by speed, and the ``reference``
        line and ``checkpoints`` when given). Returns the paths."""
        from rulka.envs.sim.render import track_picture, write_animation, write_png

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        if self.sim is not None:
            png = out / f"{stem}.png"
            write_png(png, track_picture(self.sim.track, np.asarray(self.trace), title=title,
                                         reference=reference, checkpoints=checkpoints))
            paths.append(png)
        if self.animate and self.frames:
            anim = out / f"{stem}.{fmt}"
            if fps is None:
                fps = max(1, round(self._env_fps() / self.every))
            try:
                write_animation(anim, self.frames, fps=fps)
            except (ValueError, RuntimeError, OSError) as exc:
                raise UserError(f"cannot write {anim}: {exc} (try gif)") from exc
            paths.append(anim)
        return paths

    def _env_fps(self) -> float:
        if self.sim is not None:  # one frame per action: 20 per second at 50 ms per action
            return 1000.0 / (10 * self.sim.steps_per_action)
        return self.env_fps or 30.0
