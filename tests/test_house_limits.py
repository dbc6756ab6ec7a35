"""Limits the house keeps (lesson 15: a limit met once is kept by a check)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_trainer_module_is_over_400_lines():
    long = {p.name: n for p in (ROOT / "rulka" / "trainer").glob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert long == {}


def test_the_trainer_finds_no_agent_ability_by_probing():
    """The optional abilities are declared by ``TrainingAgent``; the trainer does not probe for them."""
    probes = [f"{p.name}:{i}" for p in (ROOT / "rulka" / "trainer").glob("*.py")
              for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
              if "hasattr(self.agent" in line or "getattr(self.agent" in line or "getattr(agent" in line]
    assert probes == []


def test_the_benchmark_history_stays_out_of_benchmarks_md_and_the_packages():
    """BENCHMARKS.md holds the targets and each script's latest figures; the studies' records and
    tables live in bench/history/, which neither the sdist (MANIFEST.in) nor the wheel (only
    rulka's packages) carries."""
    manifest = (ROOT / "MANIFEST.in").read_text(encoding="utf-8").splitlines()
    assert "prune bench" in manifest
    assert "include = rulka, rulka.*" in (ROOT / "setup.cfg").read_text(encoding="utf-8")
    benchmarks = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    history = (ROOT / "bench" / "history" / "README.md").read_text(encoding="utf-8")
    for section in ("## Repeated runs", "## Extended learning runs", "## Recipe studies"):
        assert section not in benchmarks and section in history
    assert not list((ROOT / "bench").glob("*.json"))  # every record is in bench/history/
