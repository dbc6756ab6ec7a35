"""Plugin lookup: a plugin is named in YAML by a registry name or by ``module:Class``.

Each plugin kind (``env``, ``memory``, ``agent``, ``actor``, ``compressor``) has its own table.
Built-in plugins register themselves lazily as ``"name": "module:attr"`` strings, so looking one
up imports only what is needed.
"""

from __future__ import annotations

import importlib
from typing import Any

from rulka.errors import UserError

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


def registered(kind: str) -> list[str]:
    """Names registered for ``kind``, sorted."""
    return sorted(_BUILTIN.get(kind, {}))


def is_registered(kind: str, name: str) -> bool:
    """Whether ``name`` is a registered name of ``kind`` (not a ``module:Class`` path)."""
    return name in _BUILTIN.get(kind, {})


def is_known(kind: str, name: str) -> bool:
    """Whether ``name`` is registered for ``kind`` or has the ``module:Class`` form (nothing is imported)."""
    return name in _BUILTIN.get(kind, {}) or (":" in name and all(name.partition(":")[::2]))


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
    """Return the class or factory for plugin ``name`` of ``kind``.

    ``name`` is either a registered name or ``"package.module:Class"``.
    """
    table = _BUILTIN.get(kind, {})
    if name in table:
        target = table[name]
        return _import_target(target) if isinstance(target, str) else target
    if ":" in name:
        return _import_target(name)
    known = ", ".join(registered(kind)) or "none"
    raise UserError(f"unknown {kind} plugin '{name}' (registered: {known}; or give 'module:Class')")
