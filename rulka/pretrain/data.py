"""Recorded episodes for pretraining, in rulka's inert episode format (``*.rulka-episode``,
``rulka.agents.policy.episodes``): from the simulator's scripted driver (``record_scripted``),
from the optimal-race solver's action tapes (``record_tapes``, ``rulka sim optimal``), from a
saved policy (``rulka dpo record``) or from any other source that writes that format.

``load_steps`` turns episode files into arrays of (observation, action) pairs: every observation
that an action was taken from (the last frame of an episode has none)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rulka.agents.policy.episodes import EPISODE_SUFFIX, read_episode, record_episode, write_episode
from rulka.errors import UserError


class ScriptedSimActor:
    """The simulator's scripted driver as an actor (``act(obs, test)``): it reads the car from the
    env it drives, not the observation, so it records what an expert does from each state."""

    def __init__(self, env: Any) -> None:
        from rulka.envs.sim.driver import ScriptedDriver

        self.env = env.unwrapped if hasattr(env, "unwrapped") else env
        if not hasattr(self.env, "car") or not hasattr(self.env, "track"):
            raise UserError("the scripted driver drives the built-in simulator only (environment.backend: sim)")
        self._driver_cls = ScriptedDriver
        self._driver = None
        self._track = None

    def act(self, obs: Any, test: bool = False) -> int:
        if self._driver is None or self._track is not self.env.track or self.env.car.race_time_ms == 0:
            self._track = self.env.track
            self._driver = self._driver_cls(self._track)
        return int(self._driver.action(self.env.car))


def record_scripted(cfg: Any, out_dir: str | Path, episodes: int, seed: int = 0,
                    start_noise: float = 1.0) -> list[Path]:
    """Drive ``episodes`` races with the scripted driver in the configured simulator and write one
    episode file each into ``out_dir``; returns the paths. ``start_noise`` (metres sideways and
    degrees of heading, drawn per reset seed) varies the starts, so the recordings also show how
    the driver recovers from off-line positions."""
    from rulka.plugins import make_env

    env = make_env(cfg)
    out = Path(out_dir)
    paths = []
    try:
        actor = ScriptedSimActor(env)
        actor.env.start_noise = float(start_noise)
        for i in range(episodes):
            seg, _ = record_episode(env, actor, seed=seed + i, greedy=True, worker_id="scripted", episode_id=i)
            paths.append(write_episode(out / f"scripted-{seed + i}{EPISODE_SUFFIX}", [seg]))
    finally:
        env.close()
    return paths


class TapeActor:
    """An action tape (``rulka.envs.sim.optimal.Tape``) as an actor: its actions in order."""

    def __init__(self, actions: list[int]) -> None:
        self.actions = list(actions)
        self.t = 0

    def act(self, obs: Any, test: bool = False) -> int:
        if self.t >= len(self.actions):
            raise UserError(f"the tape ended after {len(self.actions)} actions and the race had not")
        self.t += 1
        return int(self.actions[self.t - 1])


def record_tapes(cfg: Any, tapes: Iterable[str | Path], out_dir: str | Path) -> list[Path]:
    """Replay each solver tape (``rulka sim optimal``'s JSON) in the configured simulator on the
    tape's track and write it as an episode file in ``out_dir`` (the observations, rewards and
    actions the learner would have seen driving that race); returns the paths.

    The config must be the simulator with discrete actions and the tape's decision period, and the
    replayed race must finish in the tape's time: anything else is a one-line UserError."""
    from rulka.config import config_from_dict
    from rulka.envs.sim.optimal import Tape
    from rulka.plugins import make_env

    env_cfg = cfg.environment
    if env_cfg.backend != "sim" or env_cfg.continuous_actions:
        raise UserError("solver tapes replay in the built-in simulator with discrete actions "
                        "(environment.backend: sim, continuous_actions: false)")
    out = Path(out_dir)
    paths = []
    for i, path in enumerate(tapes):
        tape = Tape.read(path)
        if tape.ms_per_action != env_cfg.ms_per_action:
            raise UserError(f"tape '{path}' decides every {tape.ms_per_action} ms; the config every "
                            f"{env_cfg.ms_per_action} ms (environment.tm_engine_step_per_action)")
        data = cfg.to_dict()
        data["environment"]["track"] = tape.track
        env = make_env(config_from_dict(data))
        try:
            env.unwrapped.start_noise = 0.0  # the tape was driven from the start line
            seg, _ = record_episode(env, TapeActor(tape.actions), seed=0, greedy=True, worker_id="tape",
                                    episode_id=i)
            car = env.unwrapped.car
            got = car.finish_time_ms if car.finished else None
        finally:
            env.close()
        if got != tape.race_time_ms or len(seg.arrays["action"]) != len(tape.actions):
            raise UserError(f"tape '{path}' does not replay in this env: it raced "
                            f"{got if got is not None else 'no finish'} in {len(seg.arrays['action'])} actions, "
                            f"the tape says {tape.race_time_ms} ms in {len(tape.actions)}")
        stem = Path(path).stem
        paths.append(write_episode(out / f"tape-{i}-{stem}{EPISODE_SUFFIX}", [seg]))
    return paths


def episode_files(sources: Iterable[str | Path]) -> list[Path]:
    """Episode files named directly or found (sorted) in the folders given."""
    files: list[Path] = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            files.extend(sorted(p.glob(f"*{EPISODE_SUFFIX}")))
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(f"no episode file or folder at {p}")
    if not files:
        raise UserError("no *.rulka-episode file in " + ", ".join(str(s) for s in sources))
    return files


@dataclass
class Steps:
    """Observations and the actions taken from them, stacked over all episodes."""

    floats: np.ndarray  # (N, F) float32
    actions: np.ndarray  # (N,) int64
    images: np.ndarray | None  # (N, H, W) uint8 or None
    episodes: int
    returns: np.ndarray | None = None  # (N,) float32: see ``step_returns``
    returns_to_go: np.ndarray | None = None  # (N, horizon) float32: see ``returns_to_go``; None without a horizon

    def __len__(self) -> int:
        return len(self.actions)


def step_returns(rewards: np.ndarray, potentials: np.ndarray | None, horizon: int | None, gamma: float) -> np.ndarray:
    """The return IQN's targets estimate from each step of one episode: the rewards of the next
    ``horizon`` steps (None: to the episode's end), discounted by ``gamma``, minus the shaping
    potential of the step's observation (the replay adds ``gamma^n phi(s') - phi(s)`` to n-step
    rewards, and a mini-race's end is terminal, so ``phi(s')`` never enters a whole-horizon sum)."""
    t = len(rewards)
    h = t if horizon is None else int(horizon)
    disc = gamma ** np.arange(h, dtype=np.float64)
    out = np.empty(t, np.float64)
    for i in range(t):
        r = rewards[i:i + h].astype(np.float64)
        out[i] = float(r @ disc[: len(r)])
    if potentials is not None:
        out -= potentials[:t]
    return out.astype(np.float32)


def returns_to_go(rewards: np.ndarray, potentials: np.ndarray | None, horizon: int, gamma: float) -> np.ndarray:
    """``(T, horizon)``: column ``j`` is ``step_returns`` with a horizon of ``j + 1`` steps, the value
    IQN's targets estimate for a step taken at mini-race time ``t = horizon - j - 1`` (the rest of
    the mini-race); the last column is ``step_returns(..., horizon, gamma)``."""
    t, h = len(rewards), int(horizon)
    padded = np.zeros(t + h, np.float64)
    padded[:t] = rewards
    disc = gamma ** np.arange(h, dtype=np.float64)
    windows = np.lib.stride_tricks.sliding_window_view(padded, h)[:t]  # (T, h): rewards i .. i+h-1
    out = np.cumsum(windows * disc, axis=1)
    if potentials is not None:
        out -= np.asarray(potentials[:t], np.float64)[:, None]
    return out.astype(np.float32)


def load_steps(files: Iterable[Path], *, with_images: bool, horizon: int | None = None,
               gamma: float = 1.0) -> Steps:
    """The (observation, action) pairs of the episode files (see the module docstring), with
    each step's return (``step_returns``) and, with a ``horizon``, its returns at every mini-race
    time (``returns_to_go``)."""
    floats, actions, images, returns, to_go = [], [], [], [], []
    n = 0
    for path in files:
        for seg in read_episode(path):
            a = np.asarray(seg.arrays["action"], np.int64)
            flt_key = "obs/float" if "obs/float" in seg.arrays else "obs/x"
            floats.append(np.asarray(seg.arrays[flt_key], np.float32)[: len(a)])
            actions.append(a)
            pot = seg.arrays.get("obs/potential")
            rew, pot = np.asarray(seg.arrays["reward"], np.float32), None if pot is None else np.asarray(pot, np.float64)
            returns.append(step_returns(rew, pot, horizon, gamma))
            if horizon is not None:
                to_go.append(returns_to_go(rew, pot, horizon, gamma))
            if with_images:
                if "obs/img" not in seg.arrays:
                    raise UserError(f"{path}: the episodes carry no image (record with nn.vis.no_image: false)")
                images.append(np.asarray(seg.arrays["obs/img"], np.uint8)[: len(a)])
        n += 1
    if not actions:
        raise UserError("the episode files hold no step")
    return Steps(np.concatenate(floats), np.concatenate(actions), np.concatenate(images) if with_images else None, n,
                 np.concatenate(returns), np.concatenate(to_go) if to_go else None)
