"""Segments are compressed off the env thread (rulka.worker.packer): in the order they were
numbered, none lost, with a bounded queue whose waits are counted, and a packing error stops the
worker on its env thread as it did when packing ran there."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from rulka.compress import ZstdCompressor, split_segment
from rulka.config import load_config
from rulka.net.local import LocalHub
from rulka.segment import Segment
from rulka.worker.outbox import Outbox
from rulka.worker.packer import SegmentPacker
from rulka.worker.worker import Worker


class SlowCompressor:
    """Records the thread each segment is compressed on, and takes ``delay_s`` over it."""

    def __init__(self, delay_s: float = 0.0, fail_at: int | None = None) -> None:
        self.delay_s, self.fail_at = delay_s, fail_at
        self.threads: list[str] = []
        self.seqs: list[int] = []

    def compress(self, seg: Segment) -> bytes:
        if seg.seq == self.fail_at:
            raise ValueError("this compressor cannot pack that")
        self.threads.append(threading.current_thread().name)
        self.seqs.append(seg.seq)
        time.sleep(self.delay_s)
        return ZstdCompressor().compress(seg)


def _segment(seq: int) -> Segment:
    arrays = {"obs/float": np.full((3, 2), seq, np.float32), "action": np.zeros(2, np.int64),
              "reward": np.zeros(2, np.float32), "terminated": np.zeros(2, bool), "truncated": np.zeros(2, bool)}
    return Segment(run_id="r", worker_id="w", episode_id=0, seq=seq, index_in_episode=seq, first_step=2 * seq,
                   policy_version=0, arrays=arrays, episode_done=False)


def test_segments_reach_the_outbox_in_order_with_a_bounded_counted_queue() -> None:
    outbox, stats = Outbox(), SimpleNamespace(segments=0)
    packer = SegmentPacker(outbox, stats, max_pending=2)
    comp, stop = SlowCompressor(delay_s=0.02), threading.Event()
    waiting = []
    for seq in range(12):
        assert packer.submit(seq, lambda seq=seq: _segment(seq), comp, "zstd", stop)
        waiting.append(len(packer._items))
    assert max(waiting) <= 2  # never more than max_pending segments wait
    assert packer.waits > 0 and packer.wait_s > 0  # the env thread was held back, and it was counted
    assert packer.flush(30)
    assert outbox.seqs() == list(range(12)) and stats.segments == 12
    assert comp.seqs == list(range(12)) and set(comp.threads) == {"segment-packer"}
    for seq, payload in outbox.due(time.monotonic(), 60.0, 100, 100):  # what was kept is what was submitted
        codec, body = split_segment(payload)
        assert codec == "zstd" and ZstdCompressor().decompress(body).arrays["obs/float"][0, 0] == seq
    packer.close()


def test_a_packing_error_is_raised_on_the_env_thread() -> None:
    packer = SegmentPacker(Outbox(), SimpleNamespace(segments=0))
    comp, stop = SlowCompressor(fail_at=1), threading.Event()
    for seq in range(2):
        packer.submit(seq, lambda seq=seq: _segment(seq), comp, "zstd", stop)
    with pytest.raises(RuntimeError, match="cannot pack that"):
        packer.flush(30)
    with pytest.raises(RuntimeError, match="packing a segment failed"):
        packer.submit(2, lambda: _segment(2), comp, "zstd", stop)
    packer.close()


def test_a_stop_while_the_queue_is_full_returns_without_queueing() -> None:
    release = threading.Event()

    class Stuck:
        def compress(self, seg: Segment) -> bytes:
            release.wait(30)
            return b"x"

    packer, stop = SegmentPacker(Outbox(), SimpleNamespace(segments=0), max_pending=1), threading.Event()
    assert packer.submit(0, lambda: _segment(0), Stuck(), "zstd", stop)  # being packed (stuck)
    deadline = time.monotonic() + 10
    while not packer._busy and time.monotonic() < deadline:
        time.sleep(0.01)
    assert packer.submit(1, lambda: _segment(1), Stuck(), "zstd", stop)  # waits
    threading.Timer(0.2, stop.set).start()
    assert not packer.submit(2, lambda: _segment(2), Stuck(), "zstd", stop)  # full: the stop ends the wait
    release.set()
    assert packer.flush(30) and packer.outbox.seqs() == [0, 1]
    packer.close()


class Always0:
    def act_with_info(self, obs, test=False):
        return 0, {}

    def reset(self):
        pass


def test_a_worker_compresses_off_its_env_thread_and_keeps_every_segment_in_order(tmp_path) -> None:
    cfg = load_config(overrides=["worker.segment_max_steps=10"], env_file=None)
    comp = SlowCompressor(delay_s=0.005)
    log = tmp_path / "produced.txt"
    worker = Worker(cfg, LocalHub().worker_link("w"), env=gym.make("CartPole-v1"), actor=Always0(),
                    compressor=comp, produced_log=log)
    episodes = [worker.run_episode() for _ in range(3)]
    assert all(n > 0 for n in episodes)
    n_segments = sum(-(-n // 10) for n in episodes)
    # run_episode returns with its segments in the outbox, numbered in order, none lost
    assert worker.outbox.seqs() == list(range(n_segments)) == [int(s) for s in log.read_text().split()]
    assert worker.stats.segments == n_segments
    assert set(comp.threads) == {"segment-packer"}  # never the env thread (this one)
    worker.close()
