"""Greedy evaluation of a saved policy: ``rulka eval`` and the library calls behind it.

A policy is a ``policy.safetensors`` file (actor tensors plus the ``actor_spec`` a worker uses to
build the actor; rulka-trainer writes ``<run>/weights/policy.safetensors``). The env is the one the
run trained on: the run folder's ``config.resolved.yaml`` when there is one, else the config the
policy file carries, else the one ``env`` names. Every env goes through the worker's env path
(``environment.backend``: the simulator, any Gymnasium id, the game backends as env plugins), and
every actor through its ``ActorModule.act(obs, test=True)``, so any learner's policy evaluates the
same way.

>>> from rulka.evaluation import load_for_eval, evaluate
>>> policy = load_for_eval("runs/my_run")
>>> report = evaluate(policy, episodes=10, seed=0)
>>> report.summary()["overall"]["return_mean"]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rulka.errors import UserError, one_line

if TYPE_CHECKING:
    from rulka.config import RulkaConfig

DEFAULT_MAX_STEPS = 100_000  # an episode the env never ends is cut here (counted as cut)


@dataclass
class LoadedPolicy:
    """A policy ready to act: the actor, its spec, the run config and where they came from."""

    actor: Any
    spec: dict[str, Any]
    cfg: Any
    file: Path
    config_source: str  # "config.resolved.yaml in <dir>", "the policy file", or "defaults"

    @property
    def actor_name(self) -> str:
        return str(self.spec.get("actor", "?"))


@dataclass
class EpisodeResult:
    """One greedy episode."""

    episode_return: float
    length: int
    map_name: str = ""
    finished: bool | None = None  # None: the env reports no finish line
    race_time_ms: float | None = None  # finished episodes only
    reference_time_ms: float | None = None
    cut: bool = False  # stopped at max_steps, not by the env


@dataclass
class EvalReport:
    """The episodes of one policy on one env, with how they were run."""

    policy: str
    actor: str
    env: str
    seed: int
    episodes: list[EpisodeResult] = field(default_factory=list)
    start_noise: float = 0.0  # the simulator's start moved up to this many metres and degrees
    # the simulator's decision period (ms): the maps' solver times (``rulka sim optimal``) are
    # looked up for it; None for any other env
    solver_ms_per_action: int | None = None

    def summary(self) -> dict[str, Any]:
        """Plain data: overall and per-map mean/std of return, finish rate, race times; on the
        simulator each map's solver time and the race times as ratios to it (``with_solver_time``)."""
        maps: dict[str, list[EpisodeResult]] = {}
        for ep in self.episodes:
            maps.setdefault(ep.map_name, []).append(ep)
        per_map = {name or "-": summarise(eps) for name, eps in maps.items()}
        if self.solver_ms_per_action is not None:
            for name, row in per_map.items():
                with_solver_time(row, name, self.solver_ms_per_action)
        return {
            "policy": self.policy, "actor": self.actor, "env": self.env, "seed": self.seed,
            **({"start_noise": self.start_noise} if self.start_noise else {}),
            **({"solver_ms_per_action": self.solver_ms_per_action} if self.solver_ms_per_action else {}),
            "episodes": len(self.episodes),
            "overall": summarise(self.episodes),
            "maps": per_map,
            "episode_results": [asdict(ep) for ep in self.episodes],
        }


def with_solver_time(row: dict[str, Any], map_name: str, ms_per_action: int) -> dict[str, Any]:
    """Add to a map's summary the solver's time (``optimal_time_ms``: the fastest race
    ``rulka sim optimal`` found with these decisions, None when none is on record) and the mean and
    best race times and the scripted driver's time as ratios to it."""
    from rulka.envs.sim.optimal import solver_time_ms

    opt = solver_time_ms(map_name, ms_per_action)
    row["optimal_time_ms"] = opt
    if opt:
        for key, out in (("race_time_ms_mean", "race_time_mean_over_optimal"),
                         ("race_time_ms_best", "race_time_best_over_optimal"),
                         ("reference_time_ms", "reference_over_optimal")):
            if row.get(key):
                row[out] = round(float(row[key]) / opt, 4)
    return row


def _mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def summarise(episodes: Sequence[EpisodeResult]) -> dict[str, Any]:
    """Mean and (population) std of return and length; finish rate and race time mean/std/best
    over finished episodes when the env reports a finish; the reference time when it has one."""
    ret_mean, ret_std = _mean_std([e.episode_return for e in episodes])
    len_mean, _ = _mean_std([float(e.length) for e in episodes])
    out: dict[str, Any] = {"episodes": len(episodes), "return_mean": ret_mean, "return_std": ret_std,
                           "length_mean": len_mean, "cut": sum(e.cut for e in episodes)}
    with_finish = [e for e in episodes if e.finished is not None]
    if with_finish:
        times = [float(e.race_time_ms) for e in with_finish if e.finished and e.race_time_ms is not None]
        out["finished"] = sum(1 for e in with_finish if e.finished)
        out["finish_rate"] = out["finished"] / len(with_finish)
        out["race_time_ms_mean"], out["race_time_ms_std"] = _mean_std(times)
        out["race_time_ms_best"] = min(times) if times else None
    refs = {e.reference_time_ms for e in episodes if e.reference_time_ms}
    if len(refs) == 1:
        out["reference_time_ms"] = refs.pop()
    return out


# -- loading ---------------------------------------------------------------------------------------
def _run_folder_of(file: Path) -> Path:
    """The run folder a policy file belongs to: ``<run>/weights/policy.safetensors`` (the latest
    weights) or ``<run>/best/policy.safetensors`` (the run's best policy) -> ``<run>``."""
    return file.parent.parent if file.parent.name in ("weights", "best", "average", "trained") else file.parent


def env_overrides(env: str | None) -> list[str]:
    """``--env`` as config overrides. ``NAME`` or ``NAME:ARG`` where NAME is a registered env
    plugin (``sim``, ``sim:hairpins``: the simulator on that track; a game backend once built)
    selects that backend; anything else is a Gymnasium id (gymnasium's ``module:EnvId`` form
    included), run through ``environment.backend: gym``."""
    if not env:
        return []
    from rulka.registry import registered

    name, sep, arg = env.partition(":")
    if name in registered("env"):
        out = [f"environment.backend={name}"]
        if sep:
            if not arg:
                raise UserError(f"--env {env}: nothing after ':' (e.g. --env {name}:default)")
            out.append(f"environment.track={arg}")
        return out
    return ["environment.backend=gym", f"environment.gym_id={env}"]


BEST, FINAL, AVERAGE = "best", "final", "average"


def policy_file_of(path: str | Path, which: str = BEST) -> Path:
    """The policy file ``path`` names. A file is itself; a run folder gives its best policy
    (``<run>/best/policy.safetensors``, ``rulka.trainer.best``) with ``which="best"`` when the run
    kept one, else (and with ``which="final"``) the weights at the end of the run
    (``<run>/weights/policy.safetensors``); ``which="average"`` the moving average of its weights
    (``<run>/average/policy.safetensors``, ``trainer.average_policy_frames``), an error when the run
    kept none."""
    from rulka.envs.sim.policy import POLICY_FILE, find_policy_file

    if which not in (BEST, FINAL, AVERAGE):
        raise ValueError(f"which: {BEST!r}, {FINAL!r} or {AVERAGE!r}, not {which!r}")
    p = Path(path)
    if p.is_dir() and which == AVERAGE:
        if (p / "average" / POLICY_FILE).is_file():
            return p / "average" / POLICY_FILE
        raise UserError(f"{p} kept no averaged policy (average/{POLICY_FILE}): it ran with "
                        "trainer.average_policy_frames: 0")
    if p.is_dir():
        if which == BEST and (p / "best" / POLICY_FILE).is_file():
            return p / "best" / POLICY_FILE
        if which == FINAL and (p / "weights" / POLICY_FILE).is_file():
            return p / "weights" / POLICY_FILE
    return find_policy_file(p)


def load_for_eval(path: str | Path, env: str | None = None, overrides: Sequence[str] = (),
                  which: str = BEST) -> LoadedPolicy:
    """Load the policy at ``path`` (a policy file, or a run folder: its best policy, or with
    ``which="final"`` its last weights; see :func:`policy_file_of`) with the config it ran under.

    The config is the run folder's ``config.resolved.yaml`` when there is one, else the config
    the policy file carries, else the defaults; ``env`` (see :func:`env_overrides`) and
    ``overrides`` (``key.path=value``) are applied on top. Every problem with the file is a
    one-line UserError.
    """
    from rulka.config import RESOLVED_NAME, apply_overrides, config_from_dict
    from rulka.config.loader import read_yaml_file
    from rulka.envs.sim.policy import load_policy, read_policy_file, spec_config

    file = policy_file_of(path, which)
    run_dir = _run_folder_of(file)
    resolved = run_dir / RESOLVED_NAME
    _, _, spec = read_policy_file(file)  # fails early, before any config work, on a damaged file
    data: dict[str, Any]
    if resolved.is_file():
        data = read_yaml_file(resolved)
        source = f"{RESOLVED_NAME} in {run_dir}"
    else:
        carried = spec_config(spec)
        data = carried.to_dict() if carried is not None else {}
        source = "the policy file" if carried is not None else "defaults"
    apply_overrides(data, [*env_overrides(env), *overrides])
    cfg = config_from_dict(data)
    actor, spec = load_policy(file, cfg)
    return LoadedPolicy(actor=actor, spec=spec, cfg=cfg, file=file, config_source=source)


def describe_env(cfg: RulkaConfig) -> str:
    """A short name for the env a config describes: ``sim (default)``, ``gym CartPole-v1``."""
    env = cfg.environment
    if env.backend == "gym":
        return f"gym {env.gym_id}"
    return f"{env.backend} ({env.track})"


# -- running ---------------------------------------------------------------------------------------
StepHook = Callable[[Any, int, Mapping[str, Any]], None]  # (env, step, info) after each step


def run_episode(env: Any, actor: Any, *, seed: int | None = None, options: Mapping[str, Any] | None = None,
                max_steps: int = DEFAULT_MAX_STEPS, on_reset: Callable[[Any], None] | None = None,
                on_step: StepHook | None = None) -> EpisodeResult:
    """One episode with ``actor.act(obs, test=True)``; ``env.reset(seed=seed, options=options)``.

    ``on_reset(env)`` runs after the reset, ``on_step(env, step, info)`` after each step (frames,
    traces). An actor that cannot act on this env's observations (or returns actions the env
    refuses) is a one-line UserError.
    """
    obs, info = env.reset(seed=seed, options=dict(options) if options is not None else None)
    if hasattr(actor, "reset"):
        actor.reset()
    if on_reset is not None:
        on_reset(env)
    total = 0.0
    steps = 0
    terminated = truncated = False
    while steps < max_steps:
        try:
            action = actor.act(obs, test=True)
        except Exception as exc:  # noqa: BLE001 - a policy built for another env
            raise UserError(f"the policy cannot act on this env's observations: {one_line(exc)}") from exc
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except (ValueError, TypeError, AssertionError, IndexError) as exc:
            raise UserError(f"the env refused the policy's action {action!r}: {one_line(exc)}") from exc
        total += float(reward)
        steps += 1
        if on_step is not None:
            on_step(env, steps, info)
        if terminated or truncated:
            break
    finished = info.get("finished") if isinstance(info, Mapping) else None
    race_time = info.get("race_time_ms") if isinstance(info, Mapping) else None
    reference = info.get("reference_time_ms") if isinstance(info, Mapping) else None
    map_name = ""
    if isinstance(info, Mapping):
        map_name = str(info.get("map_name") or info.get("track") or "")
    return EpisodeResult(
        episode_return=total, length=steps, map_name=map_name,
        finished=bool(finished) if isinstance(finished, bool | int) else None,
        race_time_ms=float(race_time) if finished and isinstance(race_time, int | float) else None,
        reference_time_ms=float(reference) if isinstance(reference, int | float) and reference else None,
        cut=not (terminated or truncated),
    )


def make_eval_env(cfg: Any, render: bool = False) -> Any:
    """The run's env through the worker's env path, rendering ``rgb_array`` frames when asked."""
    from rulka.plugins import make_env

    return make_env(cfg, render_mode="rgb_array" if render else None)


def evaluate(policy: LoadedPolicy, episodes: int = 10, seed: int = 0, max_steps: int = DEFAULT_MAX_STEPS,
             env: Any = None, recorder: Any = None, start_noise: float = 0.0) -> EvalReport:
    """``episodes`` greedy episodes of ``policy``; episode ``i`` resets with ``seed + i``.

    ``recorder`` (see :class:`rulka.envs.video.EpisodeRecorder`) records the first episode;
    its env must then render ``rgb_array`` (``make_eval_env(cfg, render=True)``).
    ``start_noise`` (the simulator only): each episode starts up to that many metres sideways and
    degrees of heading off the start line, drawn from its reset seed. The simulator repeats a greedy
    race exactly, and a greedy policy's race time can move by seconds between weights a few updates
    apart, so a race from the line is one draw; races from moved starts show the policy's spread.
    """
    if episodes < 1:
        raise UserError("--episodes must be at least 1")
    if start_noise < 0:
        raise UserError("--start-noise must be at least 0")
    _seed_everything(seed)
    own_env = env is None
    if own_env:
        env = make_eval_env(policy.cfg, render=recorder is not None)
    if start_noise > 0:
        base = getattr(env, "unwrapped", env)
        if not hasattr(base, "start_noise"):
            if own_env and hasattr(env, "close"):
                env.close()
            raise UserError(f"--start-noise moves the simulator's start (environment.backend sim); "
                            f"this policy's env is {describe_env(policy.cfg)}")
        base.start_noise = float(start_noise)
    env_cfg = policy.cfg.environment
    sim_discrete = env_cfg.backend == "sim" and not env_cfg.continuous_actions
    report = EvalReport(policy=str(policy.file), actor=policy.actor_name, env=describe_env(policy.cfg), seed=seed,
                        start_noise=float(start_noise),
                        solver_ms_per_action=int(env_cfg.ms_per_action) if sim_discrete else None)
    try:
        for i in range(episodes):
            rec = recorder if i == 0 else None
            result = run_episode(env, policy.actor, seed=seed + i, max_steps=max_steps,
                                 on_reset=rec.start if rec is not None else None,
                                 on_step=rec.step if rec is not None else None)
            if rec is not None:
                rec.result = result
            report.episodes.append(result)
    finally:
        if own_env and hasattr(env, "close"):
            env.close()
    return report


def _seed_everything(seed: int) -> None:
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % (2**32))
    try:
        import torch
    except ImportError:
        return
    torch.manual_seed(seed)


# -- text ------------------------------------------------------------------------------------------
def _pm(mean: float | None, std: float | None, scale: float = 1.0, digits: int = 1, unit: str = "") -> str:
    if mean is None:
        return "-"
    return f"{mean / scale:.{digits}f} ± {(std or 0.0) / scale:.{digits}f}{unit}"


def format_table(summaries: Sequence[Mapping[str, Any]]) -> str:
    """A text table, one row per (map, policy): episodes, return, finish rate, race time."""
    lines = []
    for i, s in enumerate(summaries):
        tag = f"[{chr(ord('A') + i)}] " if len(summaries) > 1 else ""
        n = s["episodes"]
        seeds = f"seed {s['seed']}" if n == 1 else f"seeds {s['seed']}..{s['seed'] + n - 1}"
        moved = (f", starts moved up to {s['start_noise']:g} m and {s['start_noise']:g} degrees"
                 if s.get("start_noise") else "")
        lines.append(f"{tag}{s['policy']} (actor {s['actor']}) on {s['env']}: {n} greedy "
                     f"episode{'s' if n != 1 else ''}, {seeds}{moved}")
    solver = any("optimal_time_ms" in row for s in summaries for row in s["maps"].values())
    header = f"{'map':<18}{'':4}{'episodes':>8}  {'return':>18}  {'finish':>7}  {'race time':>16}  {'best':>8}  {'ref':>8}"
    if solver:  # the simulator: the solver's time, and the mean race time and the driver's as ratios to it
        header += f"  {'solver':>8}  {'x solver':>8}  {'ref x':>6}"
    lines += ["", header]
    missing: list[str] = []
    names: list[str] = []
    for s in summaries:
        names += [n for n in s["maps"] if n not in names]
    if len(names) > 1:
        names.append("(all)")
    for name in names:
        for i, s in enumerate(summaries):
            row = s["overall"] if name == "(all)" else s["maps"].get(name)
            if row is None:
                continue
            tag = chr(ord("A") + i) if len(summaries) > 1 else ""
            finish = f"{row['finish_rate']:.0%}" if "finish_rate" in row else "-"
            race = _pm(row.get("race_time_ms_mean"), row.get("race_time_ms_std"), 1000.0, 2, " s")
            best = f"{row['race_time_ms_best'] / 1000:.2f} s" if row.get("race_time_ms_best") else "-"
            ref = f"{row['reference_time_ms'] / 1000:.2f} s" if row.get("reference_time_ms") else "-"
            line = (f"{name[:18]:<18}{tag:>3} {row['episodes']:>8}  {_pm(row['return_mean'], row['return_std']):>18}"
                    f"  {finish:>7}  {race:>16}  {best:>8}  {ref:>8}")
            if solver and name != "(all)":
                opt = row.get("optimal_time_ms")
                ratio = row.get("race_time_mean_over_optimal")
                ref_ratio = row.get("reference_over_optimal")
                line += (f"  {f'{opt / 1000:.2f} s' if opt else 'none':>8}  {f'{ratio:.3f}' if ratio else '-':>8}"
                         f"  {f'{ref_ratio:.3f}' if ref_ratio else '-':>6}")
                if not opt:
                    missing.append(name)
            lines.append(line)
    if missing:
        period = next((s.get("solver_ms_per_action") for s in summaries if s.get("solver_ms_per_action")), "?")
        lines.append(f"(no solver time on record for {', '.join(sorted(set(missing)))} at {period} ms decisions: "
                     "`rulka sim optimal TRACK` searches one)")
    if solver:
        lines.append("(solver: the fastest race `rulka sim optimal` found with the same actions and decision period; "
                     "x solver: mean race time / solver time; ref x: the scripted driver's time / solver time)")
    cut = sum(s["overall"]["cut"] for s in summaries)
    if cut:
        lines.append(f"({cut} episode(s) stopped at --max-steps, not by the env)")
    return "\n".join(lines)
