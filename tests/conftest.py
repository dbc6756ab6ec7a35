"""Shared pytest setup.

Learning runs too long for CI carry ``@pytest.mark.extended``. They are skipped unless asked
for: ``python -m pytest --run-extended -m extended`` runs them (and only them). Each records
its outcome (pass/fail, minutes, date) in BENCHMARKS.md.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-extended", action="store_true", default=False,
                     help="also run the long learning runs marked 'extended'")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-extended"):
        return
    skip = pytest.mark.skip(reason="extended learning run: use --run-extended -m extended")
    for item in items:
        if "extended" in item.keywords:
            item.add_marker(skip)


# the tests' own plugins (tests/roles_helpers.py and a few test modules name actors, memories and
# compressors as 'module:Class'): allowed in the test process as a user allows theirs with
# --allow-plugin; every test starts from exactly these allowances (rulka.trust is per process)
TEST_PLUGIN_MODULES = ("roles_helpers", "test_eval", "test_render_sim")


@pytest.fixture(autouse=True)
def _test_plugin_allowances():
    from rulka import trust

    trust.reset()
    trust.allow_plugin_modules(TEST_PLUGIN_MODULES)
    yield
    trust.reset()
