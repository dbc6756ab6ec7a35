"""Spilled segments that can never be delivered (issue 10): undecodable or larger than
network.max_message_bytes. They are moved aside and counted; the rest are sent as usual."""

from __future__ import annotations

import time

import numpy as np

from rulka.compress import ZstdCompressor, frame_segment
from rulka.segment import Segment
from rulka.worker.outbox import Outbox, WorkerCounters
from rulka.worker.worker import _SpillCheck


def segment_bytes(seq: int) -> bytes:
    seg = Segment(run_id="", worker_id="w", episode_id=0, seq=seq, index_in_episode=0, first_step=0,
                  policy_version=0, arrays={"obs/x": np.zeros((3, 2), np.float32), "action": np.zeros(2, np.int64),
                                            "reward": np.ones(2, np.float32), "terminated": np.zeros(2, bool)})
    return frame_segment("zstd", ZstdCompressor().compress(seg))


def test_undecodable_and_oversized_spill_files_are_quarantined_and_counted(tmp_path):
    counters = WorkerCounters(tmp_path)
    box = Outbox(directory=tmp_path / "unacked", counters=counters)
    good = segment_bytes(0)
    assert [counters.take_seq() for _ in range(4)] == [0, 1, 2, 3]
    box.add(0, good)
    box.add(1, good[: len(good) // 2])  # cut short by a crash or a bad disk
    box.add(2, b"\x00" * 64)  # garbage
    box.add(3, good + b"x" * 5000)  # decodable header but larger than the link allows
    box.close()

    counters2 = WorkerCounters(tmp_path)
    box2 = Outbox(directory=tmp_path / "unacked", counters=counters2, max_payload_bytes=len(good) + 100,
                  validate=_SpillCheck())
    assert box2.seqs() == [0]
    assert box2.quarantined == 3
    assert sorted(p.name for p in (tmp_path / "quarantine").iterdir()) == [
        f"{seq:020d}.seg" for seq in (1, 2, 3)]
    assert counters2.take_seq() == 4  # a quarantined number is never reused
    due = box2.due(time.monotonic(), resend_after_s=10, max_in_flight=10, limit=10)
    assert [seq for seq, _ in due] == [0]


def test_unknown_codec_is_not_a_reason_to_quarantine(tmp_path):
    box = Outbox(directory=tmp_path / "unacked")
    box.add(5, frame_segment("mycodec", b"bytes only the trainer's plugin can read"))
    box.close()
    box2 = Outbox(directory=tmp_path / "unacked", validate=_SpillCheck())
    assert box2.seqs() == [5] and box2.quarantined == 0


def test_quarantine_takes_a_segment_out_of_sending(tmp_path):
    box = Outbox(directory=tmp_path / "unacked")
    box.add(7, b"payload")
    box.add(8, b"payload")
    box.quarantine(7, "over network.max_message_bytes")
    assert box.seqs() == [8] and box.quarantined == 1
    assert (tmp_path / "quarantine" / f"{7:020d}.seg").exists()


def test_unknown_files_in_the_spill_folder_are_quarantined_and_counted(tmp_path):
    counters = WorkerCounters(tmp_path)
    box = Outbox(directory=tmp_path / "unacked", counters=counters)
    assert counters.take_seq() == 0
    box.add(0, segment_bytes(0))
    box.close()
    unacked = tmp_path / "unacked"
    (unacked / "garbage.seg").write_bytes(b"not a segment")
    (unacked / "notes.txt").write_text("left by someone")
    (unacked / "12.seg").write_bytes(segment_bytes(12))  # a number, but not a name the worker writes
    (unacked / "copy").mkdir()
    (tmp_path / "quarantine").mkdir()
    (tmp_path / "quarantine" / "garbage.seg").write_bytes(b"an earlier one")  # never overwritten

    counters2 = WorkerCounters(tmp_path)
    box2 = Outbox(directory=unacked, counters=counters2, validate=_SpillCheck())
    assert box2.seqs() == [0] and box2.quarantined == 4
    assert sorted(p.name for p in unacked.iterdir()) == [f"{0:020d}.seg"]
    assert sorted(p.name for p in (tmp_path / "quarantine").iterdir()) == [
        "12.seg", "copy", "garbage.seg", "garbage.seg.1", "notes.txt"]
    assert (tmp_path / "quarantine" / "garbage.seg").read_bytes() == b"an earlier one"
    assert counters2.take_seq() == 13  # the stray number is never reused either
