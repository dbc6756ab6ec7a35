"""The trainer's rate limiter (Reverb's SampleToInsertRatio) against hand-computed values, the
trainer's deferral of segments while its learner is behind, and credit-based flow control to
workers through a link."""

from __future__ import annotations

import math
import threading
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import ConstActor, CountingAgent, CountingEnv, ListMemory
from test_trainer_checkpoint import seg_msg

from rulka.compress import SegmentDecoder, ZstdCompressor
from rulka.errors import BadInput
from rulka.net.local import LocalHub
from rulka.net.messages import Credit
from rulka.segment import pack
from rulka.trainer.ratelimit import SampleToInsertRatio
from rulka.trainer.trainer import Trainer
from rulka.worker.worker import Worker

KEY = Ed25519PrivateKey.generate()


def test_window_and_cursor_iqn_defaults():
    # spi 8 (cartpole_iqn.yaml), start size 1000, batch 64: error buffer 0.1 x 8 x 1000 = 800,
    # window 8000 +- 800
    lim = SampleToInsertRatio(8, 1000, batch_size=64)
    assert (lim.min_diff, lim.max_diff) == (7200, 8800)
    lim.record_insert(999)
    assert not lim.can_sample(64, 999)  # below the start size
    assert lim.can_insert(999)
    lim.record_insert(1)
    assert lim.cursor == 8000
    assert lim.updates_ahead_allowed(1000) == 12  # (8000 - 7200) // 64
    for _ in range(12):
        assert lim.can_sample(64, 1000)
        lim.record_sample(64)
    assert lim.cursor == 7232 and not lim.can_sample(64, 1000)  # 7232 - 64 < 7200: learner waits
    assert lim.can_insert(1000)
    lim.record_insert(200)  # one segment: 7232 + 1600 = 8832 > 8800
    assert lim.cursor == 8832 and not lim.can_insert(1200)  # learner behind: inserts wait
    assert lim.can_sample(64, 1200)
    lim.record_sample(64)
    assert lim.cursor == 8768 and lim.can_insert(1200)
    assert lim.achieved() == pytest.approx(13 * 64 / 1200)


def test_acme_dqn_window_and_bad_windows():
    lim = SampleToInsertRatio(0.5, 1000, error_buffer=50, batch_size=64)  # Acme DQN: 500 +- 50
    assert (lim.min_diff, lim.max_diff) == (450, 550)
    with pytest.raises(ValueError, match="window"):
        SampleToInsertRatio(8, 1000, error_buffer=20, batch_size=64)  # 40 < one batch of 64
    with pytest.raises(ValueError):
        SampleToInsertRatio(0, 10)
    # default buffer raised to half a batch: 0.1 x 1 x 10 = 1 -> 2
    assert SampleToInsertRatio(1, 10, batch_size=4).error_buffer == 2
    assert math.isnan(SampleToInsertRatio(1, 10).achieved())


def _trainer(cfg_rate: dict, memory=None, link=None, segment_max_steps: int = 4) -> Trainer:
    # seg_msg's segments are 4 steps: full segments unless segment_max_steps says otherwise
    cfg = {"trainer": {"max_updates_per_env_step": 0.25, "rate_limit": cfg_rate},
           "worker": {"segment_max_steps": segment_max_steps}}
    return Trainer(cfg, link or LocalHub().trainer_link(), agent=CountingAgent(), memory=memory or ListMemory(),
                   signing_key=KEY)


def test_learner_behind_defers_then_drops_counted_and_catches_up():
    # spi 1 (0.25 x batch 4), start size 4 (one batch), window 4 +- 2 = [2, 6]
    t = _trainer({"max_deferred_segments": 2})
    t.ingest([seg_msg("w", 0)])  # below the start size: free; cursor 4
    t.ingest([seg_msg("w", 1)])  # cursor 4 <= 6: admitted; cursor 8
    assert t.state.samples == 8
    t.ingest([seg_msg("w", i) for i in (2, 3, 4)])  # 8 > 6: deferred, the oldest dropped past 2
    assert t.state.samples == 8 and len(t.intake.deferred) == 2 and t.state.segments == 5
    assert t.state.counters["limiter_dropped"] == 1 and t.state.counters["limiter_dropped_transitions"] == 4
    assert t.learner.train_slice() == 1  # cursor 8 - 4 = 4; 4 - 4 < 2: waits
    assert t.intake.drain_deferred() == 1  # 4 <= 6: one admitted -> 8
    assert t.state.samples == 12 and len(t.intake.deferred) == 1
    assert t.reporter.ratio_text() == "0.33/1"


class HoldOutMemory(ListMemory):
    """Holds out the last transition of every segment (as the IQN memory routes some to its
    test store): ``append`` reports all of them, ``len`` and ``held_out_transitions`` tell apart."""

    def __init__(self) -> None:
        super().__init__()
        self.held = 0

    def append(self, segment):
        self.held += 1
        return super().append(segment)

    def __len__(self):
        return super().__len__() - self.held

    @property
    def held_out_transitions(self) -> int:
        return self.held

    def save(self, directory) -> None:
        super().save(directory)
        (directory / "held.txt").write_text(str(self.held))

    def load(self, directory) -> None:
        super().load(directory)
        self.held = int((directory / "held.txt").read_text())


def test_held_out_transitions_are_not_inserts_of_the_ratio(tmp_path):
    # spi 2, batch 4, start size 4: window 2 x 4 +- max(0.1 x 2 x 4, 4 / 2) = [6, 10].
    # Segments of 4 transitions, 1 held out: 3 trainable inserts each.
    run_dir = tmp_path / "run"
    t = Trainer({"trainer": {"rate_limit": {"samples_per_insert": 2}}}, LocalHub().trainer_link(),
                agent=CountingAgent(), memory=HoldOutMemory(), signing_key=KEY, run_dir=run_dir)
    assert (t.limiter.min_diff, t.limiter.max_diff) == (6, 10)
    t.ingest([seg_msg("w", 0)])  # 3 stored < 4: free; cursor 3 x 2 = 6
    t.ingest([seg_msg("w", 1)])  # still below the start size: cursor 12
    assert t.state.samples == 8 and t.limiter.inserts == 6 and t.limiter.cursor == 12
    t.ingest([seg_msg("w", 2)])  # 6 stored, cursor 12 > 10: deferred
    assert t.state.segments == 3 and t.state.samples == 8
    # 12 - 4 = 8 >= 6: one batch; 8 - 4 < 6: waits (counting the held-out 8 inserts would allow 2)
    assert t.learner.train_slice() == 1 and t.limiter.cursor == 8
    assert t.limiter.achieved() == pytest.approx(4 / 6)
    assert t.intake.drain_deferred() == 1 and t.limiter.inserts == 9
    t.checkpoint()
    t.close()
    resumed = Trainer({"trainer": {"rate_limit": {"samples_per_insert": 2}}}, LocalHub().trainer_link(),
                      agent=CountingAgent(), memory=HoldOutMemory(), signing_key=KEY, run_dir=run_dir, resume=True)
    # 12 transitions stored, 3 of them held out: 9 trainable inserts, 1 batch of 4 samples
    assert resumed.state.samples == 12 and resumed.limiter.inserts == 9 and resumed.limiter.samples == 4
    resumed.close()


def test_throughput_mode_inserts_everything_and_sends_no_credit():
    hub = LocalHub()
    wlink = hub.worker_link("w")
    t = _trainer({"mode": "throughput"}, link=hub.trainer_link())
    t.ingest([seg_msg("w", i) for i in range(5)])
    assert t.state.samples == 20 and len(t.intake.deferred) == 0
    assert t.learner.train_slice() == 4  # cursor 20 - 16 = 4 >= 2; the next batch would leave 0
    assert [m.kind for m in wlink.receive(0.2)] == ["ack"]


def test_credit_follows_the_limiter():
    hub = LocalHub()
    wlink = hub.worker_link("w")
    t = _trainer({"credit_segments": 3}, link=hub.trainer_link())
    t.ingest([seg_msg("w", 0)])
    credits = [Credit.decode(m.payload).limit for m in wlink.receive(0.2) if m.kind == "credit"]
    assert credits == [1 + 3]  # next seq 1 plus three segments
    # window [2, 6]: seg 1 admitted at cursor 4 -> 8, seg 2 deferred; closed, no new credit
    t.ingest([seg_msg("w", 1), seg_msg("w", 2)])
    assert [m for m in wlink.receive(0.2) if m.kind == "credit"] == []
    assert t.learner.train_slice() == 1 and t.intake.drain_deferred() == 1  # 8 -> 4, seg 2 in: 8 > 6
    t.credit.grant()
    assert [m for m in wlink.receive(0.2) if m.kind == "credit"] == []  # still behind
    assert t.learner.train_slice() == 1  # 4 <= 6: open again
    t.credit.grant()
    credits = [Credit.decode(m.payload).limit for m in wlink.receive(0.2) if m.kind == "credit"]
    assert credits == [3 + 3]


def test_credit_counts_steps_so_short_segments_get_more_of_them():
    # credit 3 segments of 16 steps = 48 steps; the worker's segments are 4 steps (episodes that
    # end early): 12 segments of credit, not 3 (else it pauses every 12 steps)
    hub = LocalHub()
    wlink = hub.worker_link("w")
    t = _trainer({"credit_segments": 3, "mode": "ratio"}, link=hub.trainer_link(), segment_max_steps=16)
    t.ingest([seg_msg("w", 0)])
    assert t.credit.credit_for("w") == 12
    assert [Credit.decode(m.payload).limit for m in wlink.receive(0.2) if m.kind == "credit"] == [1 + 12]
    # full-length segments bring it back to credit_segments (running mean of the lengths)
    for seq in range(1, 40):
        t.intake.ingest_segment("w", seg_msg("w", seq, t=16).payload, journal=False, acks=None, defer=False)
    assert t.credit.credit_for("w") == 3
    # one-step segments: capped at 16 x credit_segments; a worker never heard from: credit_segments
    for seq in range(40, 80):
        t.intake.ingest_segment("w", seg_msg("w", seq, t=1).payload, journal=False, acks=None, defer=False)
    assert t.credit.credit_for("w") == 48
    assert t.credit.credit_for("other") == 3


def test_bad_credit_payloads_are_refused():
    assert Credit.decode(pack({"limit": 7})).limit == 7
    for bad in (b"\xc1", pack([1]), pack({"limit": -1}), pack({"limit": True}), pack({"x": 1})):
        with pytest.raises(BadInput):
            Credit.decode(bad)


def test_worker_pauses_at_the_credit_limit_and_resumes_with_more():
    hub = LocalHub()
    tlink = hub.trainer_link()
    worker = Worker({"worker": {"segment_max_steps": 2}}, hub.worker_link("w"), env=CountingEnv(length=7),
                    actor=ConstActor(), compressor=ZstdCompressor())
    tlink.send_to("w", "credit", pack({"limit": 3}))
    stop = threading.Event()
    th = threading.Thread(target=worker.run, kwargs={"stop_event": stop, "drain_timeout_s": 0}, daemon=True)
    th.start()

    def produced(n: int, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while worker.counters.next_seq < n and time.monotonic() < deadline:
            time.sleep(0.02)
        return worker.counters.next_seq >= n

    try:
        assert produced(3)
        time.sleep(0.5)
        assert worker.counters.next_seq == 3  # held at the limit, between segments
        tlink.send_to("w", "credit", pack({"limit": 6}))
        assert produced(6)
        time.sleep(0.3)
        assert worker.counters.next_seq == 6
        assert worker.stats.paused_s > 0.4
        seqs = sorted(SegmentDecoder(ZstdCompressor()).decompress(m.payload).seq for m in tlink.receive(1.0)
                      if m.kind == "segment")
        assert seqs == list(range(6))
    finally:
        stop.set()
        th.join(5)
        worker.close()


class SlowAgent(CountingAgent):
    def train(self, batch):
        time.sleep(0.005)
        return super().train(batch)


def test_learner_starved_is_the_share_of_time_waiting_with_nothing_to_train(tmp_path):
    from rulka.telemetry import MetricsLogger
    from rulka.telemetry.logger import read_metrics

    def window(agent, segments, folder):
        logger = MetricsLogger(folder, run_name="t", tensorboard=False)
        t = Trainer({"trainer": {"rate_limit": {"samples_per_insert": 64}}}, LocalHub().trainer_link(),
                    agent=agent, memory=ListMemory(), signing_key=KEY, metrics=logger)
        t.ingest([seg_msg("w", i) for i in range(segments)])
        t.run(max_seconds=0.5)
        t.close()
        logger.close()
        return list(read_metrics(folder))[-1]["metrics"]

    # no data: the loop only waits for segments
    idle = window(SlowAgent(), 0, tmp_path / "idle")
    assert idle["perf/learner_starved"] > 0.8 and idle["perf/learner_busy"] == 0
    # enough data for ~300 updates of 5 ms: the learner trains the whole window
    fed = window(SlowAgent(), 5, tmp_path / "fed")
    assert fed["perf/learner_starved"] < 0.2 and fed["perf/learner_busy"] > 0.6
