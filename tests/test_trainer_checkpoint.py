"""Checkpoints: round trip of agent/optimizer/counters/RNG/dedupe, atomic replacement, journal
replay after a crash, version counter continuing."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import CountingAgent, ListMemory

from rulka.checkpoint_format import flatten_state, unflatten_state
from rulka.compress import ZstdCompressor
from rulka.errors import UserError
from rulka.net.link import Message
from rulka.net.local import LocalHub
from rulka.segment import Segment
from rulka.trainer import checkpoint_store as ckpt
from rulka.trainer.journal import journal_path
from rulka.trainer.trainer import ACCEPTED_LOG, Trainer

KEY = Ed25519PrivateKey.generate()


def seg_msg(worker: str, seq: int, t: int = 4) -> Message:
    seg = Segment(run_id="", worker_id=worker, episode_id=0, seq=seq, index_in_episode=seq, first_step=0,
                  policy_version=0, arrays={"obs/x": np.full((t + 1, 2), seq, np.float32),
                                            "action": np.zeros(t, np.int64), "reward": np.ones(t, np.float32),
                                            "terminated": np.zeros(t, bool)})
    return Message("segment", worker, ZstdCompressor().compress(seg))


def new_trainer(run_dir, resume=False):
    return Trainer(None, LocalHub().trainer_link(), agent=CountingAgent(), memory=ListMemory(), run_dir=run_dir,
                   signing_key=KEY, resume=resume)


def accepted_lines(run_dir):
    return (run_dir / ACCEPTED_LOG).read_text().split()


def test_flatten_state_round_trip_keeps_types():
    state = {"t": torch.arange(3.0), "n": np.arange(2, dtype=np.int16), "opt": {0: {"step": torch.tensor(2.0)}},
             "betas": (0.9, 0.99), "lst": [1, "a", None, 2.5], "__weird": 1}
    plain, tensors = flatten_state(state)
    back = unflatten_state(json.loads(json.dumps(plain)), tensors)
    assert torch.equal(back["t"], state["t"]) and back["n"].dtype == np.int16
    assert list(back["opt"]) == [0] and float(back["opt"][0]["step"]) == 2.0
    assert back["betas"] == (0.9, 0.99) and back["lst"] == [1, "a", None, 2.5] and back["__weird"] == 1


def test_rng_state_round_trip():
    saved = ckpt.rng_state()
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    ckpt.set_rng_state(json.loads(json.dumps(saved)))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == a


def test_resume_restores_everything_and_continues_versions(tmp_path):
    t1 = new_trainer(tmp_path)
    t1.publisher.publish()
    t1.ingest([seg_msg("a", 0), seg_msg("a", 1), seg_msg("b", 0)])
    for _ in range(5):
        t1.learner.train_once()
    opt_state = t1.agent.opt.state_dict()["state"][0]["exp_avg"].clone()
    v = t1.state.version
    t1.checkpoint()
    t1.close()

    t2 = new_trainer(tmp_path, resume=True)
    assert (t2.state.version, t2.state.updates, t2.state.samples, t2.state.run_id) == (v, 5, 12, t1.state.run_id)
    assert float(t2.agent.w.detach()[0]) == 5.0 and t2.agent.trained == 5
    assert torch.equal(t2.agent.opt.state_dict()["state"][0]["exp_avg"], opt_state)
    assert sorted(t2.memory.loaded_keys) == ["a 0", "a 1", "b 0"]
    assert t2.publisher.publish() == v + 1  # the version counter continues
    t2.ingest([seg_msg("a", 1), seg_msg("a", 2)])  # a resend of a stored one, and a new one
    assert t2.state.counters["duplicates"] == 1 and t2.state.segments == 4
    t2.close()


def test_crash_after_checkpoint_replays_the_journal_once(tmp_path):
    t1 = new_trainer(tmp_path)
    t1.ingest([seg_msg("a", 0)])
    t1.checkpoint()
    t1.ingest([seg_msg("a", 1), seg_msg("a", 2)])  # acknowledged (so journaled and flushed), then kill -9:
    # no final checkpoint, no close; t1 stays referenced, so nothing it still buffers reaches the disk

    t2 = new_trainer(tmp_path, resume=True)
    assert [s.seq for s in t2.memory.segments] == [1, 2]  # replayed on top of the checkpoint
    assert sorted(t2.memory.loaded_keys) == ["a 0"]
    assert t2.state.samples == 12
    assert accepted_lines(tmp_path) == ["a", "0", "a", "1", "a", "2"]  # each exactly once
    t2.ingest([seg_msg("a", 2), seg_msg("a", 3)])
    assert t2.state.counters["duplicates"] == 1
    t2.checkpoint()
    t2.close()
    t3 = new_trainer(tmp_path, resume=True)
    assert sorted(t3.memory.loaded_keys) == ["a 0", "a 1", "a 2", "a 3"] and t3.memory.segments == []
    assert accepted_lines(tmp_path) == ["a", "0", "a", "1", "a", "2", "a", "3"]
    t3.close()


def test_truncated_journal_tail_is_ignored(tmp_path):
    t1 = new_trainer(tmp_path)
    t1.ingest([seg_msg("a", 0), seg_msg("a", 1)])
    t1.close()  # closes the journal; no checkpoint
    path = journal_path(tmp_path / "journal", t1.state.journal_number)
    data = path.read_bytes()
    path.write_bytes(data[:-10])  # killed in the middle of writing the second record
    t2 = new_trainer(tmp_path, resume=True)
    assert [s.seq for s in t2.memory.segments] == [0]
    # the torn bytes are kept beside the journal, and the accepted segment it lost is named
    torn = path.with_name(path.name + ".torn").read_bytes()
    assert path.read_bytes() + torn == data[:-10] and len(torn) > 0
    assert t2.state.counters["journal_missing_segments"] == 1
    assert accepted_lines(tmp_path) == ["a", "0"]
    t2.ingest([seg_msg("a", 1)])  # the worker never got the ack: it resends, and it is new
    assert [s.seq for s in t2.memory.segments] == [0, 1]
    t2.close()


def test_failed_checkpoint_leaves_the_previous_one(tmp_path, monkeypatch):
    t1 = new_trainer(tmp_path)
    t1.ingest([seg_msg("a", 0)])
    t1.learner.train_once()
    first = t1.checkpoint()
    t1.ingest([seg_msg("a", 1)])
    t1.learner.train_once()

    def boom(directory):
        (directory / "partial").mkdir(parents=True)
        raise OSError("disk full")

    monkeypatch.setattr(t1.memory, "save", boom)
    with pytest.raises(OSError):
        t1.checkpoint()
    assert ckpt.latest_checkpoint(tmp_path / "checkpoints") == first
    t2 = new_trainer(tmp_path, resume=True)
    assert t2.state.updates == 1 and float(t2.agent.w.detach()[0]) == 1.0
    assert [s.seq for s in t2.memory.segments] == [1]  # from the journal kept for this case
    t2.close()


def test_new_run_refuses_a_used_folder_and_resume_needs_a_folder(tmp_path):
    t1 = new_trainer(tmp_path)
    t1.checkpoint()
    t1.close()
    with pytest.raises(UserError, match="--resume"):
        new_trainer(tmp_path)
    with pytest.raises(UserError):
        Trainer(None, LocalHub().trainer_link(), agent=CountingAgent(), memory=ListMemory(), signing_key=KEY,
                resume=True)


def test_checkpoint_writes_the_policy_file_that_render_loads(tmp_path):
    from rulka.envs.sim.policy import load_policy

    trainer = new_trainer(tmp_path)
    trainer.ingest([seg_msg("w1", 0)])
    trainer.checkpoint()
    policy = tmp_path / "weights" / "policy.safetensors"
    assert policy.is_file()
    assert not list((tmp_path / "weights").glob(".*.tmp"))  # written atomically
    actor, spec = load_policy(tmp_path)  # a run folder is enough
    assert spec["actor"] == trainer.agent.actor_spec()["actor"]
    expected = trainer.agent.get_actor().get_weights()
    got = actor.get_weights()
    assert set(got) == set(expected)
    for name, value in expected.items():
        assert torch.equal(torch.as_tensor(got[name]), torch.as_tensor(value))
    trainer.close()


def test_a_link_whose_network_process_died_stops_the_trainer_after_a_checkpoint(tmp_path):
    t = new_trainer(tmp_path)
    t.ingest([seg_msg("a", 0)])
    t.link.dead = "the network process exited (exit code -9): this link can no longer reach the server"
    with pytest.raises(UserError, match="network process exited.*--resume"):
        t.run(max_seconds=30)
    t.close()
    assert (tmp_path / "checkpoints" / "latest.json").exists()  # what it had is kept for --resume


def test_acknowledgements_wait_until_the_journal_is_on_the_disk(tmp_path, monkeypatch):
    import os
    import threading
    import time

    from rulka.segment import unpack

    disk = threading.Event()
    real_fsync = os.fsync
    synced_files = []

    def slow_fsync(fd):
        disk.wait(10)  # a slow disk
        synced_files.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    hub = LocalHub()
    wlink = hub.worker_link("a")
    t = Trainer(None, hub.trainer_link(), agent=CountingAgent(), memory=ListMemory(), run_dir=tmp_path,
                signing_key=KEY)
    wlink.receive(0.1)  # (anything sent at start)
    t.ingest([seg_msg("a", 0), seg_msg("a", 1)])
    t.ingest([seg_msg("a", 2)])
    time.sleep(0.2)
    t.ingest([])
    assert [m for m in wlink.receive(0.2) if m.kind == "ack"] == []  # journaled, not on the disk yet
    disk.set()
    deadline = time.monotonic() + 10
    got = []
    while len(got) < 3 and time.monotonic() < deadline:
        t.ingest([])
        got += [s for m in wlink.receive(0.05) if m.kind == "ack" for s in unpack(m.payload)]
    assert sorted(got) == [0, 1, 2] and synced_files  # one fsync may cover both batches
    t.close()


class _BrokenMemory(ListMemory):
    def __init__(self, error):
        super().__init__()
        self.error = error

    def append(self, segment):
        raise self.error


def test_a_memory_that_cannot_allocate_stops_at_once_and_one_that_fails_every_time_after_a_run(tmp_path):
    from rulka.trainer.journal import REFUSED_IN_ROW, MemoryStoreFailed, read_journal

    t = Trainer(None, LocalHub().trainer_link(), agent=CountingAgent(), memory=_BrokenMemory(MemoryError("14.6 TiB")),
                run_dir=tmp_path / "oom", signing_key=KEY)
    with pytest.raises(MemoryStoreFailed, match=r"cannot allocate \(segment a/0: MemoryError: 14.6 TiB\)"):
        t.ingest([seg_msg("a", 0)])
    t.close()
    assert [(w, s) for w, s, _ in read_journal(journal_path(tmp_path / "oom" / "journal", 0))] == [("a", 0)]

    t = Trainer(None, LocalHub().trainer_link(), agent=CountingAgent(), memory=_BrokenMemory(ValueError("a bug")),
                run_dir=tmp_path / "bug", signing_key=KEY)
    t.ingest([seg_msg("a", i) for i in range(REFUSED_IN_ROW - 1)])  # one odd segment does not stop a run
    assert t.state.counters["bad_memory"] == REFUSED_IN_ROW - 1
    with pytest.raises(MemoryStoreFailed, match=f"refused {REFUSED_IN_ROW} segments in a row"):
        t.ingest([seg_msg("a", REFUSED_IN_ROW)])
    t.close()
    assert not (tmp_path / "bug" / "checkpoints" / "latest.json").exists()
