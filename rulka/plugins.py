"""Building plugins and envs from a run config, and the observation layout of segments; shared by
the worker, the trainer and ``rulka verify`` (no role imports another: they all import this).

The config is injected by one name per kind of thing:

- an actor, compressor, memory or agent plugin named in the config (registry name or
  ``module:Class``) is called with its ``*_kwargs`` from the config, plus ``cfg=<the run
  config>`` (a ``RulkaConfig``) when its signature takes ``cfg`` (``build_plugin``);
- an env plugin (``environment.backend``) is called with ``config=<the run config>`` when its
  signature takes ``config`` (``make_env``). Envs keep Gymnasium's keyword because users build
  them without rulka's roles too: ``gymnasium.make("rulka/SimTrack-v0", config=...)``, as rtgym's
  ``gymnasium.make("real-time-gym-v1", config=...)``; the env validates it with ``as_config``.

Renaming either would break plugins and scripts that exist; a new plugin follows its kind.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from rulka.config import ConfigLike, RulkaConfig, as_config
from rulka.errors import UserError
from rulka.registry import resolve

# the config sections a worker needs; the trainer sends them with the weights
WORKER_CONFIG_SECTIONS = ("environment", "rewards", "map_cycle", "exploration", "nn", "worker")


def build_plugin(kind: str, name: str, kwargs: Mapping[str, Any] | None = None, cfg: RulkaConfig | None = None
                 ) -> Any:
    """Instantiate plugin ``name`` of ``kind`` with ``kwargs`` (+ ``cfg``, the typed run config,
    if its signature takes one)."""
    factory = resolve(kind, name)
    kw = dict(kwargs or {})
    check_plain_kwargs(kind, name, kw)
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if params and not takes_any:
        named = {n for n, p in params.items()
                 if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
        unknown = sorted(set(kw) - named)
        if unknown:  # refused before anything is constructed
            raise UserError(f"{kind} plugin '{name}' takes no argument {', '.join(repr(u[:60]) for u in unknown[:5])} "
                            f"(it takes {', '.join(sorted(named)) or 'none'})")
    if "cfg" in params and "cfg" not in kw:
        kw["cfg"] = cfg
    try:
        return factory(**kw)
    except TypeError as exc:
        raise UserError(f"{kind} plugin '{name}' cannot be built with {sorted(kw)}: {exc}") from exc


_PLAIN_SCALARS = (str, int, float, bool, type(None))


def check_plain_kwargs(kind: str, name: str, kwargs: Mapping[str, Any], limit: int = 100_000) -> None:
    """A plugin's arguments from a file are plain data (strings, numbers, booleans, null, lists and
    string-keyed mappings of them; at most ``limit`` values in all), or a one-line UserError."""
    count = 0
    stack: list[Any] = [kwargs]
    while stack:
        value = stack.pop()
        count += 1
        if count > limit:
            raise UserError(f"{kind} plugin '{name}': its arguments hold over {limit:,} values")
        if isinstance(value, Mapping):
            if not all(isinstance(k, str) for k in value):
                raise UserError(f"{kind} plugin '{name}': its arguments have a key that is not a string")
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif not isinstance(value, _PLAIN_SCALARS):
            raise UserError(f"{kind} plugin '{name}': argument of type {type(value).__name__} is not plain data")


def check_gym_id(gym_id: str, key: str = "environment.gym_id") -> None:
    """A gym id ``module:EnvId`` makes gymnasium import ``module``: only rulka's own or one the command
    line allowed (``--allow-plugin``)."""
    from rulka import trust

    module, sep, _ = gym_id.partition(":")
    if sep and module and not trust.module_allowed(module):
        raise UserError(f"config key `{key}`: {gym_id[:120]!r} names a module to import, and a file cannot choose "
                        f"code to run: add '{trust.ALLOW_PLUGIN_FLAG} {module[:80]}' to the command line if you trust it")


def make_env(cfg: ConfigLike, render_mode: str | None = None) -> Any:
    """The env the config describes: ``environment.backend == "gym"`` makes
    ``gymnasium.make(environment.gym_id, **environment.gym_kwargs)``; any other backend is an
    ``env`` plugin (``"sim"`` by default) called with ``config=cfg``. ``render_mode`` (e.g.
    ``"rgb_array"`` for videos) is passed on; an env plugin that takes none cannot render.
    With ``environment.rl_action_offsets_ms`` holding N > 1 offsets the env comes wrapped in
    ``rulka.envs.multi_action.ActionBlockEnv``: one step takes a block of N actions."""
    from rulka.envs.multi_action import wrap_for_blocks

    cfg = as_config(cfg)
    return wrap_for_blocks(_make_env(cfg, render_mode), cfg.environment.n_actions_per_block)


def _make_env(cfg: RulkaConfig, render_mode: str | None) -> Any:
    env_cfg = cfg.environment
    extra = {} if render_mode is None else {"render_mode": render_mode}
    if env_cfg.backend == "gym":
        import gymnasium

        if not env_cfg.gym_id:
            raise UserError("environment.backend is 'gym' but environment.gym_id is not set")
        check_gym_id(env_cfg.gym_id)
        try:
            return gymnasium.make(env_cfg.gym_id, **env_cfg.gym_kwargs, **extra)
        except gymnasium.error.Error as exc:
            raise UserError(f"cannot make gym env '{env_cfg.gym_id}': {exc}") from exc
    factory = resolve("env", env_cfg.backend)
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    if extra and "render_mode" not in params:
        raise UserError(f"env plugin '{env_cfg.backend}' takes no render_mode: it cannot render frames")
    kwargs = {"config": cfg} if "config" in params else {}
    return factory(**kwargs, **extra)


POTENTIAL_KEY = "obs/potential"


def obs_to_arrays(obs: Any, info: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
    """One observation -> ``{"obs/<name>": array}``: a dict observation gives one array per key,
    anything else ``obs/x``. float64 is narrowed to float32 (what networks use). When the env's
    ``info`` carries a numeric ``potential`` (the TrackMania pipeline's shaping potential of this
    observation), it is kept as ``obs/potential`` so the memory can add the shaping terms."""
    items = obs.items() if isinstance(obs, Mapping) else [("x", obs)]
    out = {}
    for key, value in items:
        arr = np.asarray(value)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        out[f"obs/{key}"] = arr
    potential = info.get("potential") if isinstance(info, Mapping) else None
    if isinstance(potential, (int, float, np.number)) and not isinstance(potential, bool):
        out[POTENTIAL_KEY] = np.float32(potential)
    return out


def arrays_to_obs(arrays: Mapping[str, np.ndarray], index: int) -> Any:
    """Inverse of ``obs_to_arrays`` for step ``index`` of a segment (``obs/potential``, the
    shaping potential recorded beside each observation, is not part of the observation)."""
    names = [k for k in arrays if k.startswith("obs/") and k != POTENTIAL_KEY]
    if names == ["obs/x"]:
        return arrays["obs/x"][index]
    return {k[4:]: arrays[k][index] for k in names}


def network_settings(cfg: ConfigLike, *, host: str | None = None, port: int | None = None) -> Any:
    """The transport's settings (``rulka.net.settings.NetworkSettings``) from the config's
    ``network`` section (every key: TLS, chunking, backoff, outbox, heartbeat), with ``host`` and
    ``port`` from the command line winning."""
    from rulka.net.settings import NetworkSettings

    return NetworkSettings.from_config(as_config(cfg).network, host=host, port=port)


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); UserError on anything else."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--server {text!r}: expected HOST:PORT, e.g. 203.0.113.7:55555")
    return host.strip("[]"), int(port)
