"""Sequence numbers that survive restarts, and the bounded unacknowledged-segment store."""

from __future__ import annotations

import threading
import time

import pytest

from rulka.worker.outbox import Outbox, WorkerCounters


def test_seq_and_episode_numbers_persist_across_restarts(tmp_path):
    c = WorkerCounters(tmp_path)
    assert [c.take_seq() for _ in range(3)] == [0, 1, 2]
    assert c.take_episode() == 0
    c2 = WorkerCounters(tmp_path)  # a restarted worker
    assert c2.take_seq() == 3
    assert c2.take_episode() == 1


def test_in_memory_counters_start_at_zero():
    c = WorkerCounters(None)
    assert (c.take_seq(), c.take_seq(), c.take_episode()) == (0, 1, 0)


def test_unacked_segments_survive_a_restart_and_seq_never_repeats(tmp_path):
    counters = WorkerCounters(tmp_path)
    box = Outbox(directory=tmp_path / "unacked", counters=counters)
    for _ in range(4):
        seq = counters.take_seq()
        box.add(seq, b"payload-%d" % seq)
    box.ack([0, 2])
    # simulate a crash that also lost the state file: numbers must still move past the spill
    (tmp_path / "worker_state.json").unlink()
    counters2 = WorkerCounters(tmp_path)
    box2 = Outbox(directory=tmp_path / "unacked", counters=counters2)
    assert box2.seqs() == [1, 3]
    assert counters2.take_seq() == 4
    due = box2.due(time.monotonic(), resend_after_s=10, max_in_flight=10, limit=10)
    assert due == [(1, b"payload-1"), (3, b"payload-3")]


def test_interrupted_spill_write_is_not_a_segment(tmp_path):
    d = tmp_path / "unacked"
    d.mkdir()
    (d / "00000000000000000007.seg.tmp").write_bytes(b"half")
    box = Outbox(directory=d)
    assert len(box) == 0
    assert not list(d.iterdir())


def test_drop_oldest_policy_counts_drops():
    box = Outbox(limit_segments=3, on_full="drop_oldest")
    for seq in range(5):
        assert box.add(seq, b"x")
    assert box.seqs() == [2, 3, 4]
    assert box.dropped == 2


def test_drop_oldest_by_disk_budget(tmp_path):
    box = Outbox(directory=tmp_path, disk_limit_bytes=250, on_full="drop_oldest")
    for seq in range(4):
        box.add(seq, b"y" * 100)
    assert box.seqs() == [2, 3]
    assert box.disk_bytes == 200
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{2:020d}.seg", f"{3:020d}.seg"]


def test_block_policy_waits_for_an_ack():
    box = Outbox(limit_segments=2, on_full="block")
    box.add(0, b"a")
    box.add(1, b"b")
    done = threading.Event()

    def producer():
        box.add(2, b"c")
        done.set()

    t = threading.Thread(target=producer)
    t.start()
    assert not done.wait(0.3)  # collection is blocked while the store is full
    box.ack([0])
    assert done.wait(2.0)
    t.join()
    assert box.seqs() == [1, 2]
    assert box.dropped == 0
    assert box.blocked_s >= 0.25


def test_block_policy_gives_up_when_stopped():
    box = Outbox(limit_segments=1, on_full="block")
    box.add(0, b"a")
    stop = threading.Event()
    stop.set()
    assert box.add(1, b"b", stop_event=stop) is False
    assert box.seqs() == [0]


def test_memory_limit_spills_payloads_to_disk_and_reads_them_back(tmp_path):
    box = Outbox(directory=tmp_path, memory_limit_bytes=250)
    for seq in range(4):
        box.add(seq, bytes([seq]) * 100)
    assert box.memory_bytes <= 250  # the oldest payloads now live on disk only
    due = box.due(time.monotonic(), resend_after_s=10, max_in_flight=10, limit=10)
    assert [(s, p) for s, p in due] == [(s, bytes([s]) * 100) for s in range(4)]


def test_due_respects_resend_timeout_and_in_flight_window():
    box = Outbox()
    for seq in range(5):
        box.add(seq, b"p")
    now = 100.0
    first = box.due(now, resend_after_s=5, max_in_flight=3, limit=10)
    assert [s for s, _ in first] == [0, 1, 2]
    for s, _ in first:
        box.mark_sent(s, now)
    assert box.due(now + 1, resend_after_s=5, max_in_flight=3, limit=10) == []  # window full
    box.ack([0])
    assert [s for s, _ in box.due(now + 1, resend_after_s=5, max_in_flight=3, limit=10)] == [3]
    # after the timeout the unacknowledged ones are due again, oldest first
    assert [s for s, _ in box.due(now + 6, resend_after_s=5, max_in_flight=3, limit=10)] == [1, 2, 3]
    box.resend_all()
    assert [s for s, _ in box.due(now + 1, resend_after_s=5, max_in_flight=10, limit=10)] == [1, 2, 3, 4]


def test_bad_policy_name_is_refused():
    with pytest.raises(ValueError):
        Outbox(on_full="explode")
