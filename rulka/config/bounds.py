"""Bounds on what a config may hold, checked before anything is expanded, printed or saved (a recipe
is a file a stranger may hand you: ARCHITECTURE.md lesson 14). ``rulka.config.loader`` applies them
to every YAML text and every config mapping it validates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from rulka.errors import ConfigError

MAX_CONFIG_FILE_BYTES = 1 << 20
"""A config file over 1 MiB is refused unread."""
MAX_SCALAR_CHARS = 1 << 16
"""A string value (or key) over 64 KiB is refused, naming where it is."""
MAX_CONFIG_NODES = 100_000
"""Values in a config after YAML aliases are expanded (a 1 KB alias bomb expands to billions)."""


def check_yaml_events(text: str, source: str, loader: Any = yaml.SafeLoader) -> None:
    """Walk the YAML's events (no objects are built) and refuse a scalar over ``MAX_SCALAR_CHARS``
    or a document that would expand, aliases included, to over ``MAX_CONFIG_NODES`` values. Each
    anchored node's expanded size is counted once, so the walk is linear in the text."""
    sizes: dict[str, int] = {}
    stack: list[list[Any]] = [[None, 0]]  # [anchor, expanded size] of each open collection
    total = 0  # values in the whole document once expanded
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.ScalarEvent):
                if len(event.value) > MAX_SCALAR_CHARS:
                    line = event.start_mark.line + 1 if event.start_mark else "?"
                    raise ConfigError(f"{source}: line {line}: a value of {len(event.value):,} characters "
                                      f"(at most {MAX_SCALAR_CHARS:,})")
                size = 1
                if event.anchor:
                    sizes[event.anchor] = 1
            elif isinstance(event, yaml.AliasEvent):
                size = sizes.get(event.anchor, 1)
            elif isinstance(event, yaml.CollectionStartEvent):
                stack.append([event.anchor, 1])
                total += 1
                continue
            elif isinstance(event, yaml.CollectionEndEvent):
                anchor, size = stack.pop()
                if anchor:
                    sizes[anchor] = size
                stack[-1][1] += size
                continue
            else:
                continue
            stack[-1][1] += size
            total += size
            if total > MAX_CONFIG_NODES:
                raise ConfigError(f"{source}: the config expands to over {MAX_CONFIG_NODES:,} values "
                                  "(YAML aliases included); refused before expanding it")
    except yaml.YAMLError:
        return  # a syntax error: yaml.load below reports it with its position


def check_config_data(data: Any, source: str = "config") -> None:
    """Refuse config data (from YAML, JSON in a policy file or the trainer's weights, ``--set``)
    with over ``MAX_CONFIG_NODES`` values (shared sub-objects counted each time they appear, as
    they would print) or a string over ``MAX_SCALAR_CHARS``; the error names the key. Stops
    counting at the bound, so it is cheap whatever the data."""
    count = 0
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, value = stack.pop()
        count += 1
        if count > MAX_CONFIG_NODES:
            raise ConfigError(f"{source}: the config holds over {MAX_CONFIG_NODES:,} values; refused")
        if isinstance(value, str | bytes):
            if len(value) > MAX_SCALAR_CHARS:
                where = f"config key `{path}`" if path else source
                raise ConfigError(f"{where}: a value of {len(value):,} characters (at most {MAX_SCALAR_CHARS:,})")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                name = str(key)
                if len(name) > MAX_SCALAR_CHARS:
                    raise ConfigError(f"{source}: a key of {len(name):,} characters (at most {MAX_SCALAR_CHARS:,})")
                stack.append((f"{path}.{name}" if path else name, item))
        elif isinstance(value, list | tuple):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
