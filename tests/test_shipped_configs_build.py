"""Every shipped config builds what its trainer builds at start-up (agent, memory, the workers'
actor), from the file alone, as `rulka run` builds them: with the file's own training.seed (null,
random, in most). `rulka config validate` checks keys, not this; a file that validates and then
stops the trainer at start-up is what this catches. The recipe that needs `rulka pretrain`'s folders
is run whole, as its docs give it, by tests/test_pretrain_recipe_run.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from rulka.config import load_config
from rulka.errors import ConfigError
from rulka.plugins import build_plugin

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
# needs folders written by `rulka pretrain` first: tests/test_pretrain_recipe_run.py runs it that way
NEEDS_FILES = {"sim_iqn_from_bc.yaml"}


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml") if p.name not in NEEDS_FILES))
def test_the_trainer_and_worker_plugins_build_from_the_file(name):
    cfg = load_config(CONFIGS / name)
    tc = cfg.trainer
    agent = build_plugin("agent", str(tc.agent), tc.agent_kwargs, cfg)
    memory = build_plugin("memory", str(tc.memory), tc.memory_kwargs, cfg)
    assert len(memory) == 0
    spec = agent.actor_spec()
    actor = build_plugin("actor", spec["actor"], spec.get("kwargs"), cfg)
    assert callable(getattr(actor, "act", None))


def test_the_recipe_that_needs_files_says_which(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # its folders are relative to where the run starts: none here
    cfg = load_config(CONFIGS / "sim_iqn_from_bc.yaml")
    with pytest.raises(ConfigError, match="nn.init_from_pretrained.*pretrained/sim_iqn_bc"):
        build_plugin("agent", str(cfg.trainer.agent), cfg.trainer.agent_kwargs, cfg)
