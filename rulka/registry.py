"""Plugin lookup: a plugin is named in YAML, in a policy file or in the trainer's network
description by a registry name, or by ``module:Class`` where the user's command line allows it.

Each plugin kind (``env``, ``memory``, ``agent``, ``actor``, ``compressor``) has its own table:

- rulka's built-ins, registered lazily as ``"name": "module:attr"`` strings (looking one up
  imports only what is needed);
- the plugins a user installed as Python entry points in the group ``rulka.plugins``, named
  ``KIND.NAME`` (``memory.my_store = my_pkg.store:Store`` in the package's metadata), used as
  ``NAME``;
- ``module:Class`` from a module this process's command line allowed (``--allow-plugin MODULE``,
  :mod:`rulka.trust`). A file never makes rulka import a module on its own.
"""

from __future__ import annotations

import functools
import importlib
from importlib import metadata
from typing import Any

from rulka import trust
from rulka.errors import UserError

ENTRY_POINT_GROUP = "rulka.plugins"

_BUILTIN: dict[str, dict[str, str]] = {
    "env": {"sim": "rulka.envs.sim.env:SimTrackEnv", "tmnf": "rulka.envs.tmnf.env:TmnfEnv",
            "tm2020": "rulka.envs.tm2020.env:TM2020Env"},
    "memory": {"simple": "rulka.agents.simple:SimpleReplayMemory",
               "iqn": "rulka.agents.iqn.settings:make_memory",
               "ppo": "rulka.agents.policy.settings:make_memory",
               "grpo": "rulka.agents.policy.settings:make_memory",
               "dpo": "rulka.agents.policy.settings:make_memory",
               "sac": "rulka.agents.sac.settings:make_memory"},
    "agent": {"simple_dqn": "rulka.agents.simple:SimpleDQNAgent",
              "iqn": "rulka.agents.iqn.settings:make_agent",
              "ppo": "rulka.agents.policy.settings:make_agent",
              "grpo": "rulka.agents.policy.settings:make_agent",
              "dpo": "rulka.agents.policy.settings:make_agent",
              "sac": "rulka.agents.sac.settings:make_agent"},
    "actor": {"simple_dqn": "rulka.agents.simple:SimpleDQNActor",
              "iqn": "rulka.agents.iqn.actor:IQNActor",
              "ppo": "rulka.agents.policy.actor:PolicyActor",
              "grpo": "rulka.agents.policy.actor:PolicyActor",
              "dpo": "rulka.agents.policy.actor:PolicyActor",
              "sac": "rulka.agents.sac.actor:SACActor"},
    "compressor": {"zstd": "rulka.compress:ZstdCompressor", "none": "rulka.compress:PlainCompressor"},
}


def register(kind: str, name: str, target: str | Any) -> None:
    """Register ``target`` (an object or a ``"module:attr"`` string) under ``kind``/``name``."""
    _BUILTIN.setdefault(kind, {})[name] = target


@functools.lru_cache(maxsize=1)
def _entry_points() -> dict[str, dict[str, metadata.EntryPoint]]:
    """Installed ``rulka.plugins`` entry points: kind -> name -> entry point (read once)."""
    out: dict[str, dict[str, metadata.EntryPoint]] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        kind, dot, name = ep.name.partition(".")
        if dot and kind and name:
            out.setdefault(kind, {})[name] = ep
    return out


def registered(kind: str) -> list[str]:
    """Names registered for ``kind`` (built-ins and installed entry points), sorted."""
    return sorted(set(_BUILTIN.get(kind, {})) | set(_entry_points().get(kind, {})))


def is_registered(kind: str, name: str) -> bool:
    """Whether ``name`` is a registered name of ``kind`` (not a ``module:Class`` path)."""
    return name in _BUILTIN.get(kind, {}) or name in _entry_points().get(kind, {})


def is_module_path(name: str) -> bool:
    """Whether ``name`` has the ``module:Class`` form."""
    module, sep, attr = name.partition(":")
    return bool(sep and module and attr)


def module_path_allowed(name: str) -> bool:
    """Whether the module of a ``module:Class`` name may be imported (the command line allowed it)."""
    return is_module_path(name) and trust.module_allowed(name.partition(":")[0])


def is_known(kind: str, name: str) -> bool:
    """Whether ``name`` is registered for ``kind`` or is a ``module:Class`` from an allowed module
    (nothing is imported)."""
    return is_registered(kind, name) or module_path_allowed(name)


def refusal(kind: str, name: str) -> str:
    """Why ``name`` is not a ``kind`` plugin here, and how to allow it (one line)."""
    if is_module_path(name):
        module = name.partition(":")[0]
        return (f"{kind} plugin {name[:120]!r} names a module to import, and a file cannot choose code to run: "
                f"add '{trust.ALLOW_PLUGIN_FLAG} {module[:80]}' to the command line if you trust it, or install "
                f"it as a '{ENTRY_POINT_GROUP}' entry point named '{kind}.NAME'")
    known = ", ".join(registered(kind)) or "none"
    return (f"unknown {kind} plugin {name[:120]!r} (registered: {known}; installed '{ENTRY_POINT_GROUP}' entry "
            f"points, or 'module:Class' with {trust.ALLOW_PLUGIN_FLAG} MODULE)")


def _import_target(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UserError(f"plugin '{spec}' must be a registered name or 'module:Class'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"plugin '{spec}': cannot import module '{module_name}' ({exc})") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise UserError(f"plugin '{spec}': module '{module_name}' has no attribute '{attr}'") from exc
    return obj


def resolve(kind: str, name: str) -> Any:
    """Return the class or factory for plugin ``name`` of ``kind``: a built-in, an installed entry
    point, or ``"package.module:Class"`` from a module the command line allowed. Anything else is a
    one-line UserError saying how to allow it; nothing is imported for a refused name."""
    table = _BUILTIN.get(kind, {})
    if name in table:
        target = table[name]
        return _import_target(target) if isinstance(target, str) else target
    ep = _entry_points().get(kind, {}).get(name)
    if ep is not None:
        try:
            return ep.load()
        except Exception as exc:  # noqa: BLE001 - an installed plugin that fails to import: one line
            raise UserError(f"{kind} plugin '{name}' (entry point {ep.value}) cannot be loaded: "
                            f"{' '.join(str(exc).split())[:200]}") from exc
    if module_path_allowed(name):
        return _import_target(name)
    raise UserError(refusal(kind, name))
