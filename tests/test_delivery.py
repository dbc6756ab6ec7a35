"""Delivery through the in-process hub: exactly once after dedupe, resend after an outage,
authenticated sender, acks."""

from __future__ import annotations

import threading
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import ConstActor, CountingAgent, CountingEnv, ListMemory

from rulka.compress import SegmentDecoder, ZstdCompressor
from rulka.net.link import Message
from rulka.net.local import LocalHub
from rulka.net.messages import Ack
from rulka.net.weights import decode_weights
from rulka.segment import Segment, pack
from rulka.trainer.trainer import Trainer
from rulka.worker.worker import Worker


@pytest.fixture
def keys():
    key = Ed25519PrivateKey.generate()
    return key, key.public_key()


def make_pair(hub, keys, tmp_path, name="w0", **worker_kw):
    # these tests run episodes before the trainer reads anything: no welcome to wait for
    # (test_worker_welcome.py covers it)
    worker_kw.setdefault("wait_for_welcome", False)
    key, public = keys
    trainer = Trainer(None, hub.trainer_link(), agent=CountingAgent(), memory=ListMemory(), signing_key=key,
                      train_slice_s=0.005)
    worker = Worker({"worker": {"segment_max_steps": 3}}, hub.worker_link(name), env=CountingEnv(7),
                    actor=ConstActor(), weights_decoder=lambda d: decode_weights(d, public),
                    state_dir=tmp_path / name, resend_after_s=0.5, **worker_kw)
    return trainer, worker


def test_segments_layout_and_episode_info(keys, tmp_path):
    hub = LocalHub()
    trainer, worker = make_pair(hub, keys, tmp_path)
    worker.start_io()
    # 2 episodes of 7 steps in segments of at most 3: 3 + 3 + 1 per episode
    for _ in range(2):
        worker.run_episode()
    assert worker.outbox.wait_empty(0.01) is False  # nothing acknowledged yet
    deadline = time.monotonic() + 5
    while trainer.state.segments < 6 and time.monotonic() < deadline:
        trainer.ingest(trainer.link.receive(timeout=0.05))
    assert worker.outbox.wait_empty(5)
    worker.close()
    segs = trainer.memory.segments
    assert [s.seq for s in segs] == list(range(6))
    assert [s.num_transitions for s in segs] == [3, 3, 1, 3, 3, 1]
    assert [(s.episode_id, s.index_in_episode, s.first_step) for s in segs[:3]] == [(0, 0, 0), (0, 1, 3), (0, 2, 6)]
    assert [s.episode_done for s in segs] == [False, False, True] * 2
    # the last observation of a segment is the first of the next one
    assert segs[0].arrays["obs/x"][-1].tolist() == segs[1].arrays["obs/x"][0].tolist() == [0.0, 3.0]
    assert segs[2].info == {"episode_return": 28.0, "episode_length": 7, "race_time_ms": 350}
    assert segs[0].arrays["extra/w"].dtype.name == "float32"
    assert trainer.state.episodes == 2 and trainer.state.samples == 14


def test_exactly_once_through_an_outage(keys, tmp_path):
    hub = LocalHub()
    trainer, worker = make_pair(hub, keys, tmp_path)
    stop = threading.Event()
    t = threading.Thread(target=lambda: trainer.run(stop_event=stop))
    t.start()
    worker.start_io()
    for _ in range(3):
        worker.run_episode()
    hub.set_online(False)  # the server goes away: what is sent now is lost
    for _ in range(3):
        worker.run_episode()
    time.sleep(0.2)
    assert len(worker.outbox) > 0
    hub.set_online(True)
    assert worker.outbox.wait_empty(10)
    stop.set()
    t.join(10)
    worker.close()
    seqs = [s.seq for s in trainer.memory.segments]
    assert sorted(seqs) == list(range(18)) and len(seqs) == len(set(seqs))


def test_reconnect_resends_what_was_lost_in_flight(keys, tmp_path):
    hub = LocalHub()
    trainer, worker = make_pair(hub, keys, tmp_path)
    worker.resend_after_s = 3600  # only the reconnect can trigger the resend
    worker.run_episode()
    worker.pump()
    assert len([m for m in trainer.link.receive(timeout=1) if m.kind == "segment"]) == 3  # then lost
    hub.set_online(False)
    worker.pump()
    worker.pump()
    assert worker.outbox.seqs() == [0, 1, 2]
    hub.set_online(True)
    worker.pump()
    trainer.ingest(trainer.link.receive(timeout=1))
    worker.pump()
    assert len(worker.outbox) == 0
    assert [s.seq for s in trainer.memory.segments] == [0, 1, 2]
    assert worker.outbox.resends == 0 and worker.outbox.sends == 6  # sent twice, as new each time
    worker.close()


def test_resend_after_timeout_is_deduplicated(keys, tmp_path):
    hub = LocalHub()
    trainer, worker = make_pair(hub, keys, tmp_path)
    worker.run_episode()  # 3 segments queued
    worker.pump()
    msgs = trainer.link.receive(timeout=1)
    assert [m.kind for m in msgs].count("segment") == 3
    # the trainer takes them but its acks never arrive: the worker resends after the timeout
    trainer.ingest(msgs)
    worker.link.receive(timeout=0.5)  # the acks are lost
    time.sleep(0.6)
    worker.pump()
    resent = [m for m in trainer.link.receive(timeout=1) if m.kind == "segment"]
    assert len(resent) == 3
    trainer.ingest(resent)
    assert trainer.state.counters["duplicates"] == 3
    assert len(trainer.memory.segments) == 3
    worker.pump()  # the acks for the duplicates release them
    assert len(worker.outbox) == 0
    worker.close()


def test_segment_claiming_another_worker_is_refused(keys):
    hub = LocalHub()
    key, _ = keys
    trainer = Trainer(None, hub.trainer_link(), agent=CountingAgent(), memory=ListMemory(), signing_key=key)
    seg = Segment(run_id="", worker_id="alice", episode_id=0, seq=0, index_in_episode=0, first_step=0,
                  policy_version=0, arrays={"obs/x": __import__("numpy").zeros((2, 1), "float32"),
                                            "action": __import__("numpy").zeros(1, "int64"),
                                            "reward": __import__("numpy").zeros(1, "float32")})
    payload = ZstdCompressor().compress(seg)
    trainer.ingest([Message("segment", "mallory", payload), Message("segment", "alice", b"garbage"),
                    Message("weights", "alice", b"x")])
    assert trainer.state.segments == 0
    assert trainer.state.counters["bad_sender_mismatch"] == 1
    assert trainer.state.counters["bad_segment"] == 1
    assert trainer.state.counters["bad_kind"] == 1
    trainer.ingest([Message("segment", "alice", payload)])
    assert trainer.state.segments == 1


def test_ack_payload_is_validated():
    assert Ack.decode(pack([1, 2, 3])).seqs == [1, 2, 3]
    from rulka.errors import BadInput

    for bad in (pack({"a": 1}), pack([1, "2"]), pack([True]), b"\xc1"):
        with pytest.raises(BadInput):
            Ack.decode(bad)


def test_non_numeric_extras_are_left_out_and_a_failing_memory_is_counted(keys, tmp_path):
    import numpy as np

    class ChattyActor(ConstActor):
        def act_with_info(self, obs, test=False):
            return 0, {"note": "hello", "ok": np.float64(1.5)}

    class BrokenMemory(ListMemory):
        def append(self, segment):
            raise ValueError("cannot handle this layout")

    hub = LocalHub()
    key, public = keys
    trainer = Trainer(None, hub.trainer_link(), agent=CountingAgent(), memory=BrokenMemory(), signing_key=key)
    worker = Worker({"worker": {"segment_max_steps": 10}}, hub.worker_link("w"), env=CountingEnv(3),
                    actor=ChattyActor(), weights_decoder=lambda d: decode_weights(d, public))
    worker.run_episode()
    worker.pump()
    msgs = [m for m in trainer.link.receive(timeout=1) if m.kind == "segment"]
    seg = SegmentDecoder(ZstdCompressor()).decompress(msgs[0].payload)
    assert "extra/note" not in seg.arrays and seg.arrays["extra/ok"].dtype.name == "float32"
    trainer.ingest(msgs)
    assert trainer.state.counters["bad_memory"] == 1 and trainer.state.samples == 0
    worker.pump()
    assert len(worker.outbox) == 0  # acknowledged all the same: resending would not help
    worker.close()


class _Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        import os

        return (os.mkdir, (self.path,))


def test_pickle_payloads_are_refused_and_never_executed(keys, tmp_path):
    import pickle

    import zstandard

    marker = tmp_path / "pickle-was-executed"
    key, _ = keys
    trainer = Trainer(None, LocalHub().trainer_link(), agent=CountingAgent(), memory=ListMemory(), signing_key=key)
    raw = pickle.dumps(_Evil(str(marker)))
    trainer.ingest([Message("segment", "w", raw), Message("segment", "w", zstandard.ZstdCompressor().compress(raw)),
                    Message("stats", "w", raw)])
    assert trainer.state.counters["bad_segment"] == 2 and trainer.state.counters["bad_stats"] == 1
    assert not marker.exists()
    assert trainer.state.segments == 0


def test_role_packages_export_lazily():
    import rulka.trainer
    import rulka.worker

    assert rulka.worker.Worker is Worker and rulka.trainer.Trainer is Trainer
    import rulka
    from rulka.local import run_local

    assert rulka.run_local is run_local
