"""The map cycle (``map_cycle.entries``) as the worker runs it, on the simulator's bundled tracks."""

from __future__ import annotations

import threading
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import ConstActor, CountingAgent, ListMemory

from rulka.config import config_from_dict
from rulka.envs.map_cycle import MapCycle
from rulka.envs.sim.env import SimTrackEnv
from rulka.net.local import LocalHub
from rulka.trainer.trainer import Trainer
from rulka.worker.worker import Worker

KEY = Ed25519PrivateKey.generate()
ENTRIES = [
    {"short_name": "hp", "map_path": "hairpins", "repeat": 2},
    {"short_name": "sl_eval", "map_path": "slalom", "is_exploration": False},
    {"short_name": "def_metrics", "map_path": "default", "fill_buffer": False},
]


def test_cycle_order_repeats_and_wraps():
    cycle = MapCycle.from_config(config_from_dict({"map_cycle": {"entries": ENTRIES}}))
    assert [cycle.next().short_name for _ in range(6)] == ["hp", "hp", "sl_eval", "def_metrics", "hp", "hp"]
    assert MapCycle.from_config(config_from_dict({})) is None


@pytest.mark.slow
def test_worker_plays_the_cycle_and_the_trainer_keeps_what_fills_the_buffer():
    cfg = config_from_dict({
        "map_cycle": {"entries": ENTRIES},
        "environment": {"cutoff_rollout_if_no_vcp_passed_within_duration_ms": 300},
        "nn": {"vis": {"no_image": True}}, "worker": {"segment_max_steps": 50},
    })
    hub = LocalHub()
    trainer = Trainer({"worker": {"segment_max_steps": 50}}, hub.trainer_link(), agent=CountingAgent(),
                      memory=ListMemory(), signing_key=KEY)
    worker = Worker(cfg, hub.worker_link("pc1"), env=SimTrackEnv(config=cfg), actor=ConstActor())
    th = threading.Thread(target=lambda: worker.run(max_episodes=4, drain_timeout_s=20), daemon=True)
    th.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (th.is_alive() or worker.outbox):
        trainer.ingest(trainer.link.receive(timeout=0.05))
    worker.close()
    stored = trainer.memory.segments
    assert trainer.state.segments == worker.stats.segments  # every segment reached the trainer
    ends = [s for s in stored if s.episode_done]
    # the default-track entry (fill_buffer false) reached the trainer but not its memory
    assert [s.map_name for s in ends] == ["hp", "hp", "sl_eval"]
    assert all(s.info.get("fill_buffer") is None for s in stored)
    # exploring episodes are counted under charts/, the greedy evaluation entry under eval/
    assert trainer.state.episodes == 3 and trainer.state.counters["eval_episodes"] == 1
    # the evaluation entry was played greedily and is marked so
    assert [s.evaluation for s in ends] == [False, False, True]
    assert sum(s.num_transitions for s in stored) < worker.stats.steps
