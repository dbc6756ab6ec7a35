"""bench/feed.py's parts that need no relay: a recorded set read back from journal files, whole
episodes kept, a recorded segment renumbered as a feeder's own (only its ids change), and
bench/trainer_loop.py's feed rate. The feed itself runs in ``python -m bench.trainer_loop --feed``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bench.feed import copy_journal, encode_as, recorded, recorded_payloads, whole_episodes
from bench.trainer_loop import feed_rate
from rulka.compress import SegmentDecoder, ZstdCompressor, codec_name, frame_segment
from rulka.trainer.journal import JournalWriter, journal_path
from tests.test_batch_device import segments


def _journal(run_dir, segs):
    comp = ZstdCompressor()
    writer = JournalWriter(journal_path(run_dir / "journal", 1))
    for seg in segs:
        writer.append(seg.worker_id, seg.seq, frame_segment(codec_name(comp), comp.compress(seg)))
    writer.flush()
    writer.close()


def test_a_recorded_set_is_the_journal_read_back_and_a_feeder_changes_only_the_ids(tmp_path):
    segs = [dataclasses.replace(s, seq=i) for i, s in enumerate(segments(3, t=12))]
    _journal(tmp_path / "run", segs)
    copy_journal(tmp_path / "run", tmp_path / "rec")
    assert [(w, q) for w, q, _ in recorded_payloads(tmp_path / "rec")] == [("w", 0), ("w", 1), ("w", 2)]
    back = recorded(tmp_path / "rec")
    payload = encode_as(back[1], "feeder3", 77, 5, ZstdCompressor(), codec_name(ZstdCompressor()))
    seg = SegmentDecoder(ZstdCompressor()).decompress(payload)
    assert (seg.worker_id, seg.seq, seg.episode_id, seg.run_id) == ("feeder3", 77, 5, "")
    assert (seg.index_in_episode, seg.episode_done, seg.num_transitions) == (0, True, 12)
    for k, v in segs[1].arrays.items():
        np.testing.assert_array_equal(seg.arrays[k], v, err_msg=k)


def test_only_episodes_recorded_from_their_start_are_fed():
    a0, b1, a1, c0, c1 = (dataclasses.replace(segments(1)[0], worker_id=w, episode_id=e, index_in_episode=i)
                          for w, e, i in (("a", 0, 0), ("b", 0, 1), ("a", 0, 1), ("c", 0, 0), ("c", 0, 2)))
    assert whole_episodes([a0, b1, a1, c0, c1]) == [a0, a1]  # b starts mid-episode, c misses a segment
    assert whole_episodes([b1]) == [b1]  # nothing whole: everything


def test_feed_rate_is_absolute_or_a_multiple_of_what_the_bare_learner_consumes():
    assert feed_rate("2500", 10.0, 512, 16.0) == 2500.0
    assert feed_rate("1.5x", 10.0, 512, 16.0) == pytest.approx(1.5 * 10 * 512 / 16)


@pytest.mark.extended
def test_feeders_deliver_recorded_segments_through_the_relay_into_a_real_trainer(tmp_path):
    """A recorded CartPole set, then a run with no worker fed by two feeders (own credentials,
    real relay and TLS): the trainer accepts and acknowledges their segments. About 2 minutes."""
    import time
    from pathlib import Path

    from bench.feed import REPO_ROOT, FeederProcesses, enroll, record
    from bench.trainer_loop import COMMON
    from rulka.cli.run import launch

    rec = record("configs/cartpole_iqn.yaml", [], tmp_path / "rec", segments=12)
    assert len(recorded_payloads(rec)) >= 12
    run_dir = tmp_path / "run"
    with open(tmp_path / "trainer.log", "w") as log:
        run = launch(REPO_ROOT / "configs/cartpole_iqn.yaml", workers=0, run_dir=run_dir, overrides=COMMON,
                     trainer_output=log)
        feed = None
        try:
            feed = FeederProcesses(run.keys, enroll(run.keys, 2), "127.0.0.1", run.port, rec, rate=200.0)
            feed.start(time.time() + 60)
            accepted = Path(run_dir) / "accepted.log"
            deadline = time.monotonic() + 60
            senders: set[str] = set()
            while time.monotonic() < deadline and len(senders) < 2:
                time.sleep(1.0)
                if accepted.exists():
                    senders = {line.split()[0] for line in accepted.read_text().splitlines() if line.strip()}
            got = feed.results()
        finally:
            if feed is not None:
                feed.close()
            run.stop()
    assert senders == {"feeder0", "feeder1"}
    assert len(got) == 2 and all(f["acked"] > 0 and f["segments_queued"] >= f["acked"] for f in got)
