"""Sequence numbers after a damaged or lost ``worker_state.json`` (issue 10): the trainer's welcome
tells a worker the highest number it accepted, the worker continues above it, so no new segment
is dropped as a duplicate and none is accepted twice; credit starts from there too."""

from __future__ import annotations

import shutil
import threading
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import ConstActor, CountingAgent, CountingEnv, ListMemory

from rulka.errors import BadInput
from rulka.net.link import Message
from rulka.net.local import LocalHub
from rulka.net.messages import Credit, Hello, Welcome
from rulka.segment import pack
from rulka.trainer.trainer import Trainer
from rulka.worker.worker import Worker

KEY = Ed25519PrivateKey.generate()


def run_worker(hub, state_dir, episodes=2):
    worker = Worker({"worker": {"segment_max_steps": 3}}, hub.worker_link("pc1"), env=CountingEnv(7),
                    actor=ConstActor(), state_dir=state_dir, resend_after_s=0.5)
    stats = worker.run(max_episodes=episodes, stop_event=threading.Event(), drain_timeout_s=10)
    assert len(worker.outbox) == 0  # everything acknowledged: the outbox on disk is empty
    worker.close()
    return worker, stats


def test_damaged_or_deleted_state_file_loses_and_duplicates_nothing(tmp_path):
    hub = LocalHub()
    trainer = Trainer(None, hub.trainer_link(), agent=CountingAgent(), memory=ListMemory(), signing_key=KEY,
                      train_slice_s=0.005)
    stop = threading.Event()
    loop = threading.Thread(target=lambda: trainer.run(stop_event=stop), daemon=True)
    loop.start()
    state = tmp_path / "pc1"
    try:
        run_worker(hub, state)  # 2 episodes of 7 steps in segments of 3: seqs 0..5
        (state / "worker_state.json").write_text('{"next_seq": 6, "next_ep')  # torn write
        w2, _ = run_worker(hub, state)
        assert w2.wait_for_welcome  # it numbered nothing before the trainer's welcome
        shutil.rmtree(state)  # the whole state folder is gone
        w3, _ = run_worker(hub, state)
    finally:
        stop.set()
        loop.join(10)
    segs = trainer.memory.segments
    assert sorted(s.seq for s in segs) == list(range(18))
    assert trainer.state.counters["duplicates"] == 0
    assert sorted({s.episode_id for s in segs}) == list(range(6))  # episode ids never repeat either
    assert w3.counters.next_seq == 18 and w3.counters.next_episode == 6
    assert trainer.state.counters["hellos"] >= 3


def test_worker_without_intact_numbers_waits_for_the_welcome(tmp_path):
    hub = LocalHub()
    tlink = hub.trainer_link()
    env = CountingEnv(4)
    worker = Worker({"worker": {"segment_max_steps": 10}}, hub.worker_link("pc1"), env=env, actor=ConstActor(),
                    state_dir=tmp_path / "fresh")
    done = threading.Event()
    th = threading.Thread(target=lambda: (worker.run(max_episodes=1, stop_event=threading.Event(),
                                                     drain_timeout_s=0), done.set()), daemon=True)
    th.start()
    time.sleep(0.6)
    assert env.step_calls == 0 and worker.counters.next_seq == 0  # nothing numbered yet
    hellos = [m for m in tlink.receive(0.2) if m.kind == "hello"]
    assert hellos and Hello.decode(hellos[0].payload) == Hello(next_seq=0, next_episode=0, unacked=0)
    tlink.send_to("pc1", "welcome", Welcome(highest_seq=41, highest_episode=9).encode())
    assert done.wait(10)
    seqs = [m for m in tlink.receive(0.5) if m.kind == "segment"]
    assert len(seqs) == 1 and worker.counters.next_seq == 43 and worker.counters.next_episode == 11
    worker.close()

    # an intact state file: the worker starts at once, without a trainer
    env2 = CountingEnv(4)
    intact = Worker({"worker": {"segment_max_steps": 10}}, LocalHub().worker_link("pc1"), env=env2,
                    actor=ConstActor(), state_dir=tmp_path / "fresh")
    assert not intact.wait_for_welcome and intact.counters.next_seq == 43
    intact.run(max_episodes=1, stop_event=threading.Event(), drain_timeout_s=0)
    assert env2.step_calls == 4
    intact.close()


def test_resumed_trainer_welcomes_and_grants_credit_above_what_it_accepted():
    hub = LocalHub()
    wlink = hub.worker_link("pc1")
    cfg = {"trainer": {"max_updates_per_env_step": 0.25, "rate_limit": {"credit_segments": 3}}}
    trainer = Trainer(cfg, hub.trainer_link(), agent=CountingAgent(), memory=ListMemory(), signing_key=KEY)
    for seq in range(100):  # what a resumed trainer knows from its checkpoint and journal
        trainer.state.dedupe.accept("pc1", seq)
    trainer.state.last_episode["pc1"] = 30
    # the worker lost its numbers: it would start at 0, and its old credit is gone
    trainer.ingest([Message("hello", "pc1", Hello(next_seq=0, next_episode=0, unacked=0).encode())])
    msgs = wlink.receive(0.2)
    assert [m.kind for m in msgs] == ["welcome", "credit"]
    assert Welcome.decode(msgs[0].payload) == Welcome(highest_seq=99, highest_episode=30)
    assert Credit.decode(msgs[1].payload).limit == 100 + 3  # from where the worker continues, not from 0
    # a hello from a worker ahead of the trainer (nothing unacknowledged): credit from its number
    trainer.ingest([Message("hello", "pc1", Hello(next_seq=500, next_episode=40, unacked=0).encode())])
    msgs = wlink.receive(0.2)
    assert Credit.decode(msgs[-1].payload).limit == 500 + 3


def test_malformed_hello_and_welcome_are_refused_and_counted():
    for bad in (b"\xc1", pack([1]), pack({"v": 2, "next_seq": 0, "next_episode": 0, "unacked": 0}),
                pack({"v": 1, "next_seq": -1, "next_episode": 0, "unacked": 0}),
                pack({"v": 1, "next_seq": True, "next_episode": 0, "unacked": 0})):
        with pytest.raises(BadInput):
            Hello.decode(bad)
    with pytest.raises(BadInput):
        Welcome.decode(pack({"v": 1, "highest_seq": -2, "highest_episode": 0}))
    hub = LocalHub()
    wlink = hub.worker_link("pc1")
    trainer = Trainer(None, hub.trainer_link(), agent=CountingAgent(), memory=ListMemory(), signing_key=KEY)
    trainer.ingest([Message("hello", "pc1", b"garbage")])
    assert trainer.state.counters["bad_hello"] == 1 and wlink.receive(0.2) == []
    worker = Worker(None, wlink, actor=ConstActor())
    trainer.link.send_to("pc1", "welcome", pack({"v": 1}))
    worker.pump()
    assert worker.stats.bad_messages == 1 and worker.counters.next_seq == 0
    worker.close()
