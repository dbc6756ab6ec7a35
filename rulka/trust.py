"""What the user's own command line allows: plugin modules to import and model code to run.

A policy file, a recipe, a model folder and the trainer's network description travel between
users and machines. A name in them is data, never code (ARCHITECTURE.md, lesson 14):

- a plugin named ``module:Class`` is imported only when this process's command line allowed that
  module (``--allow-plugin MODULE``, a package allows its sub-modules); rulka's built-ins and the
  plugins a user installed as Python entry points (group ``rulka.plugins``) need no flag;
- ``trust_remote_code`` in a config runs a Hugging Face model folder's own Python files only when
  this process's command line says ``--trust-remote-code``; a warning line then names the folder.

Both are per process: ``rulka run`` hands its flags to the roles it launches, and a worker started by
hand honours only its own command line, whatever the trainer's network description says.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterable, Sequence

log = logging.getLogger(__name__)

# modules a file may name without a flag: rulka itself (e.g. gymnasium's "rulka:rulka/SimTrack-v0")
_BUILTIN_MODULES = ("rulka",)

_allowed_modules: set[str] = set()
_remote_code = False
_warned_remote: set[str] = set()

ALLOW_PLUGIN_FLAG = "--allow-plugin"
TRUST_REMOTE_CODE_FLAG = "--trust-remote-code"


def allow_plugin_modules(modules: Iterable[str]) -> None:
    """Allow ``module:Class`` plugins from these modules (and their sub-modules) in this process."""
    for name in modules:
        name = str(name).strip()
        if name:
            _allowed_modules.add(name)


def allowed_plugin_modules() -> list[str]:
    """The modules this process's command line allowed, sorted."""
    return sorted(_allowed_modules)


def module_allowed(module: str) -> bool:
    """Whether ``module`` may be imported because a file names it: rulka's own modules, or one the
    command line allowed (a package allows its sub-modules)."""
    for root in (*_BUILTIN_MODULES, *_allowed_modules):
        if module == root or module.startswith(root + "."):
            return True
    return False


def allow_remote_code(on: bool = True) -> None:
    """Let a Hugging Face model folder's own code run in this process (``--trust-remote-code``)."""
    global _remote_code
    _remote_code = bool(on)


def remote_code_allowed() -> bool:
    return _remote_code


def reset() -> None:
    """Forget every allowance (tests)."""
    global _remote_code
    _allowed_modules.clear()
    _warned_remote.clear()
    _remote_code = False


def check_remote_code(requested: bool, key: str, source: str) -> bool:
    """The ``trust_remote_code`` to pass to transformers for ``source`` (a folder or hub id) that
    config key ``key`` asks for. Asked without ``--trust-remote-code``: a ConfigError naming the
    key, the folder and the flag. Asked with it: True, and one warning line per source."""
    from rulka.errors import ConfigError

    if not requested:
        return False
    if not _remote_code:
        raise ConfigError(
            f"config key `{key}` asks to run the Python code of model {source[:200]!r}; a config file "
            f"cannot turn that on: add {TRUST_REMOTE_CODE_FLAG} to the command line if you trust that code"
        )
    if source not in _warned_remote:
        _warned_remote.add(source)
        log.warning("%s: running the Python code of model %r (config key `%s`)", TRUST_REMOTE_CODE_FLAG,
                    source[:200], key)
    return True


def add_trust_arguments(parser: argparse.ArgumentParser) -> None:
    """``--allow-plugin MODULE`` (repeatable) and ``--trust-remote-code``."""
    group = parser.add_argument_group("trust (what a file alone cannot allow)")
    group.add_argument(ALLOW_PLUGIN_FLAG, dest="allow_plugin", action="append", default=[], metavar="MODULE",
                       help="let configs and policy files name plugins as 'MODULE:Class' from this module "
                            "(and its sub-modules); repeatable. Installed 'rulka.plugins' entry points need no flag")
    group.add_argument(TRUST_REMOTE_CODE_FLAG, dest="trust_remote_code", action="store_true",
                       help="let a Hugging Face model folder named with trust_remote_code: true run its own "
                            "Python files (a warning names the folder)")


def apply_trust_arguments(args: argparse.Namespace) -> None:
    """Take the allowances of arguments added with :func:`add_trust_arguments`."""
    allow_plugin_modules(getattr(args, "allow_plugin", None) or ())
    if getattr(args, "trust_remote_code", False):
        allow_remote_code(True)


def trust_argv(args: argparse.Namespace | None = None) -> list[str]:
    """The same allowances as command-line arguments for a child role: those of ``args`` when
    given, else this process's."""
    modules: Sequence[str] = (getattr(args, "allow_plugin", None) or ()) if args is not None \
        else allowed_plugin_modules()
    remote = bool(getattr(args, "trust_remote_code", False)) if args is not None else _remote_code
    out: list[str] = []
    for module in modules:
        out += [ALLOW_PLUGIN_FLAG, module]
    if remote:
        out.append(TRUST_REMOTE_CODE_FLAG)
    return out
