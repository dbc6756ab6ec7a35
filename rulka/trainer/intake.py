"""The trainer's intake: a received segment is decoded, checked against its sender, deduped by
(worker, seq), journaled (a segment is acknowledged only once it is in the write-ahead journal),
recorded in the accepted log, and stored in the memory, or deferred while the rate limiter is
behind (journaled and acknowledged at once, inserted when the limiter admits it, the oldest dropped
and counted above ``max_deferred_segments``). Finished episodes feed the episode statistics and the
map cycle's best policy."""

from __future__ import annotations

import logging
import time
from collections import deque
from pathlib import Path
from typing import Any

from rulka.compress import SegmentDecoder
from rulka.errors import BadInput
from rulka.interfaces import Memory
from rulka.memory.rebuild_check import first_difference
from rulka.net.messages import eval_policy_version
from rulka.segment import Segment
from rulka.telemetry.metrics import EpisodeStats
from rulka.trainer.best import BestPolicy
from rulka.trainer.credit import WorkerBook
from rulka.trainer.journal import JournalWriter, StoreGuard, journal_path
from rulka.trainer.ratelimit import SampleToInsertRatio
from rulka.trainer.state import RunState, Window

log = logging.getLogger(__name__)

ACCEPTED_LOG = "accepted.log"


class Intake:
    """Segments in, transitions into the memory. ``ingest_segment`` takes one payload;
    ``decode_all`` decodes a batch on ``ingest_threads`` threads; ``drain_deferred`` inserts what the
    limiter now admits; ``open_files`` / ``flush`` / ``close`` handle the journal and accepted log."""

    def __init__(self, state: RunState, window: Window, workers: WorkerBook, memory: Memory,
                 limiter: SampleToInsertRatio | None, decoder: SegmentDecoder, *, verify: bool, rate_mode: str,
                 max_deferred: int, ingest_threads: int, best_policy: BestPolicy | None,
                 store_guard: StoreGuard | None = None) -> None:
        self.state = state
        self.window = window
        self.workers = workers
        self.memory = memory
        self.limiter = limiter
        self.decoder = decoder
        self.verify = verify
        self.rate_mode = rate_mode
        self.max_deferred = max_deferred
        self.ingest_threads = ingest_threads
        self.best_policy = best_policy
        # a memory that cannot store stops the trainer (rulka.trainer.journal.StoreGuard)
        self.store_guard = store_guard if store_guard is not None else StoreGuard(None)
        self.deferred: deque[Segment] = deque()  # held back while the learner is behind
        self.journal: JournalWriter | None = None
        self.accepted_log: Any = None
        self.verify_failures: list[str] = []
        self.returns: list[float] = []  # recent episode returns (progress line)
        self.last_race_time_ms: float | None = None  # latest finished race (progress line)
        # returns, race times and finish rates per map since the last metrics record
        self.episode_stats = EpisodeStats()
        self.eval_stats = EpisodeStats(namespace="eval")  # greedy test episodes, apart
        self._pool: Any = None

    # -- files ------------------------------------------------------------------------------------
    def open_files(self, run_dir: Path) -> None:
        self.journal = JournalWriter(journal_path(run_dir / "journal", self.state.journal_number))
        self.accepted_log = open(run_dir / ACCEPTED_LOG, "ab")  # noqa: SIM115 - lives with the trainer

    def flush(self) -> None:
        if self.journal is not None:
            self.journal.flush()
        if self.accepted_log is not None and not self.accepted_log.closed:
            self.accepted_log.flush()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.journal is not None:
            self.journal.close()
            self.journal = None
        if self.accepted_log is not None and not self.accepted_log.closed:
            self.accepted_log.close()

    # -- segments ---------------------------------------------------------------------------------
    def decode(self, payload: bytes) -> Segment | BadInput:
        try:
            return self.decoder.decompress(payload)
        except BadInput as exc:
            return exc

    def decode_all(self, payloads: list[bytes]) -> list[Segment | BadInput | None]:
        """Decoded segments on ``ingest_threads`` threads (zstd releases the GIL); None each (decode
        when ingested) with one thread or one payload."""
        if self.ingest_threads > 1 and len(payloads) > 1:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.ingest_threads, thread_name_prefix="rulka-decode")
            return list(self._pool.map(self.decode, payloads))
        return [None] * len(payloads)

    def ingest_segment(self, sender: str, payload: bytes, *, journal: bool,
                       acks: dict[str, list[int]] | None, defer: bool = True,
                       decoded: Segment | BadInput | None = None) -> None:
        state = self.state
        seg = decoded if decoded is not None else self.decode(payload)
        if isinstance(seg, BadInput):
            state.bad("segment", str(seg))
            return
        if acks is not None:
            self.workers.last_heard[sender] = time.monotonic()
        if seg.worker_id != sender:
            state.bad("sender_mismatch", f"segment says worker {seg.worker_id!r}, sent by {sender!r}")
            return
        self.workers.segment_received(sender, seg.seq, seg.num_transitions)
        if not state.dedupe.accept(sender, seg.seq):
            state.counters["duplicates"] += 1
            if acks is not None:
                acks[sender].append(seg.seq)
            return
        if seg.episode_id > state.last_episode.get(sender, -1):
            state.last_episode[sender] = seg.episode_id
        if journal and self.journal is not None:
            self.journal.append(sender, seg.seq, payload)
        if self.accepted_log is not None:
            line = f"{sender} {seg.seq}\n".encode()
            self.accepted_log.write(line)  # flushed with the journal, before the acks
            state.accepted_log_bytes += len(line)
        if seg.run_id not in ("", state.run_id):
            state.counters["other_run"] += 1
        if seg.evaluation:
            state.counters["eval_segments"] += 1
        state.segments += 1
        self.window.bytes += len(payload)
        if defer and (self.deferred or not self.may_insert()):
            self.deferred.append(seg)
            state.counters["limiter_deferred"] += 1
            if len(self.deferred) > self.max_deferred:
                dropped = self.deferred.popleft()
                state.counters["limiter_dropped"] += 1
                state.counters["limiter_dropped_transitions"] += dropped.num_transitions
        else:
            self.store(seg)
        if state.version:
            self.window.lags.append(state.version - seg.policy_version)
        if seg.episode_done and seg.evaluation:
            # a greedy test episode (the trainer's request, a map-cycle evaluation entry, a test
            # worker): logged under eval/..., apart from the exploring episodes' charts/...
            if self.eval_stats.add_segment(seg):
                state.counters["eval_episodes"] += 1
            self._best_policy_result(seg)
        elif seg.episode_done:
            state.episodes += 1
            ret = seg.info.get("episode_return")
            if isinstance(ret, (int, float)):
                self.returns = (self.returns + [float(ret)])[-100:]
            self.episode_stats.add_segment(seg)
            race_time = seg.info.get("race_time_ms")
            if seg.info.get("finished") is True and isinstance(race_time, (int, float)):
                self.last_race_time_ms = float(race_time)
        if acks is not None:
            acks[sender].append(seg.seq)

    def _best_policy_result(self, seg: Segment) -> None:
        """A greedy episode of an evaluation version: one map's result for the best policy."""
        version = eval_policy_version(seg.info)
        if self.best_policy is None or version is None:
            return
        info = seg.info
        race_time = info.get("race_time_ms")
        finished = info.get("finished") is True and isinstance(race_time, (int, float))
        if self.best_policy.add_result(version, seg.map_name, finished, race_time if finished else None,
                                       info.get("progress_m"), info.get("reference_time_ms"),
                                       info.get("episode_return")):
            self.state.counters["best_policy_improved"] += 1

    # -- the memory -------------------------------------------------------------------------------
    def may_insert(self) -> bool:
        return (self.limiter is None or self.rate_mode == "throughput"
                or self.limiter.can_insert(len(self.memory)))

    def store(self, seg: Segment) -> None:
        """Verify (``trainer.verify``) and append ``seg`` to the memory; count what it added."""
        state = self.state
        if self.verify:
            self._verify(seg)
        held_out = self.memory.held_out_transitions
        try:
            # map_cycle entries with fill_buffer: false are for metrics only
            added = 0 if seg.info.get("fill_buffer") is False else int(self.memory.append(seg))
        except BadInput as exc:
            state.bad("memory", f"{seg.worker_id}/{seg.seq}: {exc}")
            added = 0
        except Exception as exc:  # noqa: BLE001 - one odd segment must not stop a run; counted, logged
            if self.store_guard.refused(seg.worker_id, seg.seq, exc) is not None:
                raise self.store_guard.failed from None  # no ack, no checkpoint: the journal keeps it
            if state.counters["bad_memory"] < 3:
                log.exception("memory refused segment %s/%d", seg.worker_id, seg.seq)
            state.bad("memory", f"{seg.worker_id}/{seg.seq}: {type(exc).__name__}: {exc}")
            added = 0
        else:
            self.store_guard.stored()
        state.samples += added
        self.window.samples += added
        # transitions the memory holds out (its test store) are not trainable: the ratio of
        # samples per insert is over the trainable ones
        trainable = max(0, added - (self.memory.held_out_transitions - held_out))
        self.window.inserts += trainable
        if self.limiter is not None:
            self.limiter.record_insert(trainable)

    def drain_deferred(self) -> int:
        """Insert deferred segments while the limiter admits them; returns how many."""
        n = 0
        while self.deferred and self.may_insert():
            self.store(self.deferred.popleft())
            n += 1
        return n

    def store_all_deferred(self) -> None:
        """Everything accepted goes into the memory, admitted or not (before a checkpoint)."""
        while self.deferred:
            self.store(self.deferred.popleft())

    def _verify(self, seg: Segment) -> None:
        diff = first_difference(seg, self.memory)
        if diff is None:
            self.state.counters["verified"] += 1
            return
        self.state.counters["verify_failures"] += 1
        msg = f"verify: worker {seg.worker_id} seq {seg.seq}: {diff}"
        if len(self.verify_failures) < 100:
            self.verify_failures.append(msg)
        log.error(msg)
