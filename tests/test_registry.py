"""Plugins are named by registry name or module:Class."""

from __future__ import annotations

import collections

import pytest

from rulka import registry
from rulka.errors import UserError


def test_module_colon_class_resolves() -> None:
    assert registry.resolve("memory", "collections:OrderedDict") is collections.OrderedDict


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
    with pytest.raises(UserError, match=match):
        registry.resolve("memory", name)
