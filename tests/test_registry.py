"""Plugins are named by registry name, installed entry point, or module:Class from a module the
command line allowed (--allow-plugin)."""

from __future__ import annotations

import collections

import pytest

from rulka import registry, trust
from rulka.errors import UserError


def test_module_colon_class_resolves_only_from_an_allowed_module() -> None:
    with pytest.raises(UserError, match="--allow-plugin collections"):
        registry.resolve("memory", "collections:OrderedDict")
    assert not registry.is_known("memory", "collections:OrderedDict")
    trust.allow_plugin_modules(["collections"])
    assert registry.resolve("memory", "collections:OrderedDict") is collections.OrderedDict
    assert registry.is_known("memory", "collections:OrderedDict")


def test_registered_string_target_is_imported_lazily() -> None:
    registry.register("memory", "_test_deque", "collections:deque")
    try:
        assert registry.resolve("memory", "_test_deque") is collections.deque
    finally:
        registry._BUILTIN["memory"].pop("_test_deque")


@pytest.mark.parametrize(
    "name, match",
    [("nope", "unknown memory plugin 'nope'"), ("no_such_module_xyz:Thing", "cannot import"),
     ("collections:NoSuchThing", "no attribute")],
)
def test_unknown_plugins_give_a_clear_error(name: str, match: str) -> None:
    trust.allow_plugin_modules(["no_such_module_xyz", "collections"])
    with pytest.raises(UserError, match=match):
        registry.resolve("memory", name)
