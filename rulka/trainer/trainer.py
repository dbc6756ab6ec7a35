"""The trainer role: take segments in, keep them in the Memory, train the agent, publish weights.

One loop alternates two jobs so neither starves the other: ingest everything the link has
queued (each pass is short: decompress, dedupe, journal, ack, append), then train for at most
``train_slice_s`` seconds within what the replay ratio allows. Ingestion runs at least that
often, and training never waits for more than one pass of ingestion.

Rate limit (``trainer.rate_limit``, ``rulka.trainer.ratelimit``): samples per insert is held in
a window in both directions. Ahead of it, the learner waits for data. Behind it (mode
``ratio``), the trainer stops granting credit: each worker may produce only
``credit_segments`` segments beyond the last one the trainer received (counted in steps: a
worker whose segments are short gets more of them, ``credit_for``; a ``credit`` message,
msgpack ``{"limit": next seq allowed}``), and pauses between segments until more comes. What
still arrives while the learner is behind (segments in flight, workers of a real-time game that
cannot pause: ``worker.pause_for_credit: false``) is deferred: journaled and acknowledged at once,
inserted into the memory when the limiter admits it, the oldest dropped and counted
(``limiter_dropped``) above ``max_deferred_segments``; a checkpoint inserts what is deferred.
Mode ``throughput`` sends no credit and inserts everything at once: the learner still waits when
ahead, and the achieved ratio sinks when data comes faster than it trains.

Delivery: a segment is acknowledged only after it is in the write-ahead journal, so a trainer
killed at any moment loses nothing a worker has let go of. ``--resume`` loads the latest
checkpoint, replays the journal written since, and continues the weights version counter.

Trainer-side checks: the link authenticates who sent a message (``Message.sender``); the trainer
refuses a segment whose ``worker_id`` differs from that sender, and drops (but acknowledges)
duplicates by (worker, seq).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rulka.compress import SegmentDecoder
from rulka.config import ConfigLike, RulkaConfig, as_config
from rulka.errors import BadInput, UserError
from rulka.interfaces import Memory, SampleCompressor, TrainingAgent
from rulka.net.hello import Welcome, decode_hello, encode_welcome
from rulka.net.link import LinkClosed, Message, TrainerLink
from rulka.plugins import WORKER_CONFIG_SECTIONS, build_plugin
from rulka.segment import Segment, pack
from rulka.telemetry.metrics import EpisodeStats
from rulka.trainer import checkpoint as ckpt
from rulka.trainer.best import BEST_DIR, BestPolicy
from rulka.trainer.dedupe import Dedupe
from rulka.trainer.journal import JournalWriter, journal_path, read_journal
from rulka.trainer.ratelimit import SampleToInsertRatio, limiter_for, window_rate
from rulka.trainer.verify import first_difference

log = logging.getLogger(__name__)

ACCEPTED_LOG = "accepted.log"
CREDIT_RESEND_S = 5.0  # a worker that hears no credit for 12x this resumes on its own (rulka.worker)


class Trainer:
    """Ingests segments from ``link``, trains ``agent`` on ``memory`` and publishes weights.

    Args:
        cfg: the run config: a ``RulkaConfig``, or a mapping of sections / a YAML path
            (validated here, ``rulka.config.as_config``); ``trainer.*`` and ``logging.*`` are read
            here. None: the built-in defaults, and workers keep their own config (none is sent
            with the weights, saved or logged).
        link: a ``TrainerLink``; None to load the checkpoint first and ``attach`` the link
            afterwards (a role that cannot resume must not connect at all).
        agent / memory: plugins; None builds ``trainer.agent`` / ``trainer.memory`` with their
            ``*_kwargs``.
        run_dir: the run's folder (checkpoints, journal, metrics, resolved config); None means
            no files at all (library use and unit tests: nothing survives a restart).
        signing_key: the trainer's Ed25519 private key (weights are signed); or pass
            ``weights_encoder`` (blob -> bytes) instead.
        resume: load the latest checkpoint in ``run_dir`` and replay its journal.
        verify: compare ``memory.rebuild_transitions`` with each segment (``trainer.verify``).
        metrics: a ``rulka.telemetry.MetricsLogger``-like object (``log(dict, step)``,
            ``close()``); None creates one from the config when there is a ``run_dir``.
        progress: a ``rulka.telemetry.Progress``-like object (``update(**fields)``, ``close()``).
    """

    def __init__(
        self,
        cfg: ConfigLike = None,
        link: TrainerLink | None = None,
        agent: TrainingAgent | None = None,
        memory: Memory | None = None,
        *,
        run_dir: str | Path | None = None,
        compressor: SampleCompressor | None = None,
        signing_key: Any = None,
        weights_encoder: Callable[[Any], bytes] | None = None,
        resume: bool = False,
        verify: bool | None = None,
        metrics: Any = None,
        progress: Any = None,
        train_slice_s: float = 0.05,
        log_every_s: float | None = None,
    ) -> None:
        self.config_given = cfg is not None
        self.cfg: RulkaConfig = as_config(cfg)
        cfg = self.cfg
        tc = cfg.trainer
        self.link: TrainerLink = link  # type: ignore[assignment]  # checked by run()
        # trainer.agent / trainer.memory default to training.algorithm (filled by the config model)
        self.agent = agent if agent is not None else build_plugin("agent", str(tc.agent), tc.agent_kwargs, cfg)
        self.memory = memory if memory is not None else build_plugin("memory", str(tc.memory), tc.memory_kwargs, cfg)
        configured_codec = cfg.worker.compressor
        self.compressor = compressor or build_plugin(
            "compressor", configured_codec, cfg.worker.compressor_kwargs, cfg)
        # each segment names its codec; the configured one decodes payloads without a header
        self.segment_decoder = SegmentDecoder(self.compressor, None if compressor is not None else configured_codec)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.verify = tc.verify if verify is None else verify
        # filled from training.algorithm by the config model (100; 1 for on-policy learners)
        self.publish_every = int(tc.publish_every_updates or 1)
        self.checkpoint_every_s = float(tc.checkpoint_every_s)
        # greedy test episodes: every N versions one worker (in turn) is asked for some
        self.eval_every_versions = tc.eval_every_versions
        self.eval_episodes = tc.eval_episodes
        self.max_updates_per_env_step = tc.max_updates_per_env_step
        self.batch_size = int(self.agent.batch_size or cfg.training.batch_size)
        self.ingest_threads = tc.ingest_threads
        self._pool: Any = None
        self.rate_mode = tc.rate_limit.mode
        self.credit_segments = tc.rate_limit.credit_segments
        # credit is counted in full segments' worth of steps: a worker whose segments are short
        # (episodes that end early) gets more of them, else it pauses every few dozen steps
        self.credit_steps = self.credit_segments * int(cfg.worker.segment_max_steps)
        self._segment_steps: dict[str, float] = {}  # worker -> running mean of its segments' lengths
        self.max_deferred = tc.rate_limit.max_deferred_segments
        self.limiter = self._make_limiter()
        self.train_slice_s = train_slice_s
        self.log_every_s = float(log_every_s if log_every_s is not None else cfg.logging.log_every_s)
        if weights_encoder is None:
            if signing_key is None:
                raise ValueError("Trainer needs signing_key (the trainer's Ed25519 key) or weights_encoder")
            weights_encoder = self._signed_encoder(signing_key)
        self._encode_weights = weights_encoder
        self.metrics = metrics
        self.progress = progress
        # state that checkpoints carry
        self.run_id = uuid.uuid4().hex[:12]
        self.version = 0
        self.updates = 0
        self.samples = 0  # transitions stored
        self.segments = 0
        self.episodes = 0
        self.dedupe = Dedupe()
        self.last_episode: dict[str, int] = {}  # worker -> highest episode id accepted (for welcome)
        self.counters: dict[str, int] = defaultdict(int)
        self.checkpoint_number = 0
        self.journal_number = 0
        self.accepted_log_bytes = 0
        # runtime only
        self.verify_failures: list[str] = []
        self.worker_stats: dict[str, dict[str, Any]] = {}
        self._last_heard: dict[str, float] = {}
        self._journal: JournalWriter | None = None
        self._last_weights: bytes | None = None
        self._was_connected = True  # publish() at start already reaches a connected server
        self._server_session = 0  # link.server_session() when the weights last reached the server
        self._accepted_log: Any = None
        self._last_checkpoint = time.monotonic()
        self._last_log = time.monotonic()
        self._window = {"bytes": 0, "samples": 0, "inserts": 0, "updates": 0, "t": time.monotonic()}
        self._lags: list[int] = []
        self._returns: list[float] = []  # recent episode returns (progress line)
        # returns, race times and finish rates per map since the last metrics record
        self.episode_stats = EpisodeStats()
        self.eval_stats = EpisodeStats(namespace="eval")  # greedy test episodes, apart
        self._eval_turns: dict[str, int] = {}
        # the run's best policy (rulka.trainer.best): evaluation versions and their greedy episodes
        self.best_policy: BestPolicy | None = None
        if self.config_given:
            self.best_policy = BestPolicy.for_config(cfg, self.run_dir / BEST_DIR if self.run_dir is not None else None)
        self.last_race_time_ms: float | None = None  # latest finished race (progress line)
        self._last_train_metrics: dict[str, Any] = {}
        # rate limit: segments held back while the learner is behind, credit granted per worker
        self._deferred: deque[Segment] = deque()
        self._next_seq: dict[str, int] = {}  # worker -> 1 + highest seq received
        self._credit_sent: dict[str, tuple[int, float]] = {}  # worker -> (limit, when)
        self._train_s = 0.0  # time inside agent.train since the last metrics record
        self._starved_s = 0.0  # time waiting for segments with nothing to train, since then
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if resume:
                self._restore()
            elif (self.run_dir / "checkpoints" / "latest.json").exists() or any(
                    (self.run_dir / "journal").glob("journal-*.bin")):
                raise UserError(f"{self.run_dir} already holds a run; pass --resume to continue it "
                                "or choose another --run-dir")
            self._save_config()
            self._open_journal()
            if self.metrics is None and self.config_given:
                try:
                    from rulka.telemetry import from_config

                    self.metrics = from_config(cfg, self.run_dir, resume=resume)
                except ImportError:
                    self.metrics = None
        elif resume:
            raise UserError("--resume needs a run folder")

    def _make_limiter(self) -> SampleToInsertRatio | None:
        """The rate limiter from ``trainer.rate_limit`` and the memory (None: no ratio to hold).
        samples per insert: ``rate_limit.samples_per_insert``, else the memory's own
        (``samples_per_insert``), else ``max_updates_per_env_step × batch_size``."""
        return limiter_for(self.cfg.trainer.rate_limit, self.memory, self.batch_size, self.max_updates_per_env_step)

    def _start_size(self) -> int:
        return int(self.memory.start_learning_size or 0)

    def attach(self, link: TrainerLink) -> None:
        """Give a trainer built with ``link=None`` its link (before ``run``)."""
        self.link = link

    # -- weights ----------------------------------------------------------------------------------
    @staticmethod
    def _signed_encoder(signing_key: Any) -> Callable[[Any], bytes]:
        from rulka.net.weights import encode_weights

        return lambda blob: encode_weights(blob, signing_key)

    def worker_config(self) -> dict[str, Any] | None:
        """The config sections a worker needs (sent with the weights), as plain data."""
        if not self.config_given:
            return None
        full = self.cfg.to_dict()
        return {k: full[k] for k in WORKER_CONFIG_SECTIONS}

    def _actor_spec_with_config(self) -> dict[str, Any]:
        """The agent's actor spec plus, as ``run_config_json``, the config sections a worker needs
        (a JSON string: a config tree is deeper than the blob header's plain-data check allows)."""
        spec = dict(self.agent.actor_spec())
        spec["frames_played"] = int(self.samples)  # workers' schedules (engineered rewards) follow it
        run_config = self.worker_config()
        if run_config is not None:
            spec["run_config_json"] = json.dumps(run_config, default=str)
        return spec

    def publish(self) -> int:
        """Sign and broadcast the agent's current actor weights as the next version."""
        from rulka.net.weights import WeightsBlob

        self.version += 1
        self.memory.set_policy_version(self.version)
        if self.run_dir is not None:
            ckpt.record_published(self.run_dir, self.run_id, self.version)
        spec = self._actor_spec_with_config()
        if self.eval_every_versions and self.version % self.eval_every_versions == 0:
            spec.update(self._eval_request())
        weights = self.agent.actor_weights()
        if self.best_policy is not None and self.best_policy.wants_candidate(self.samples):
            # workers drive the cycle's greedy entries (or the episodes requested) with this version
            self.best_policy.mark(self.version, weights, self._actor_spec_with_config(), self.samples, self.updates)
            spec["eval_policy"] = True
            if self.best_policy.request_episodes:
                spec.update(self.best_policy.request(self._next_eval_worker("best")))
            self.counters["eval_policy_versions"] += 1
        blob = WeightsBlob(self.run_id, self.version, weights, spec)
        self._last_weights = self._encode_weights(blob)
        self.link.broadcast("weights", self._last_weights)
        return self.version

    def _eval_request(self) -> dict[str, Any]:
        """Ask for ``eval_episodes`` greedy test episodes (they ride with the weights): from the
        workers heard from, one in turn; any worker while none is known."""
        self.counters["eval_requests"] += 1
        return {"eval_episodes": self.eval_episodes, "eval_worker": self._next_eval_worker("eval")}

    def _next_eval_worker(self, turn: str) -> str:
        """The workers heard from, one in turn (a turn of its own per kind of request: ``eval``,
        ``best``); any worker ("") while none is known."""
        known = sorted(set(self._last_heard) | set(self.worker_stats))
        n = self._eval_turns.get(turn, 0)
        self._eval_turns[turn] = n + 1
        return known[n % len(known)] if known else ""

    def _republish_after_reconnect(self) -> None:
        # a restarted server has lost the weights it retained for late joiners: send them again,
        # also when it came back within the heartbeat window (a new server session)
        connected = self.link.connected()
        session = self.link.server_session()
        reconnected = not self._was_connected or session != self._server_session
        if connected and reconnected and self._last_weights is not None:
            self.link.broadcast("weights", self._last_weights)
            self.counters["republished"] += 1
        self._was_connected = connected
        if connected:
            self._server_session = session

    # -- files ------------------------------------------------------------------------------------
    def _save_config(self) -> None:
        assert self.run_dir is not None
        if not self.config_given:
            return
        from rulka.config import save_resolved

        save_resolved(self.cfg, self.run_dir)

    def _open_journal(self) -> None:
        assert self.run_dir is not None
        self._journal = JournalWriter(journal_path(self.run_dir / "journal", self.journal_number))
        self._accepted_log = open(self.run_dir / ACCEPTED_LOG, "ab")  # noqa: SIM115 - lives with the trainer

    def _trainer_state(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "version": self.version, "updates": self.updates, "samples": self.samples,
            "segments": self.segments, "episodes": self.episodes, "counters": dict(self.counters),
            "dedupe": self.dedupe.state_dict(), "last_episode": dict(self.last_episode), "rng": ckpt.rng_state(),
            "journal_number": self.journal_number, "accepted_log_bytes": self.accepted_log_bytes,
            "checkpoint_number": self.checkpoint_number,
        }

    def checkpoint(self) -> Path | None:
        """Write a checkpoint now (agent, memory, counters, dedupe, RNG); start a new journal."""
        if self.run_dir is None:
            return None
        assert self._journal is not None
        # everything accepted so far goes into the memory (deferred segments too): the next
        # journal starts empty
        while self._deferred:
            self._store(self._deferred.popleft())
        self._journal.close()
        self._accepted_log.flush()
        self.journal_number += 1
        self.checkpoint_number += 1
        self._journal = JournalWriter(journal_path(self.run_dir / "journal", self.journal_number))
        folder = ckpt.write_checkpoint(self.run_dir / "checkpoints", self.checkpoint_number,
                                       self.agent.state_dict(), self._trainer_state(), self.memory)
        # journals since the previous checkpoint stay: a resume falls back to it if this one is damaged
        keep_from = ckpt.oldest_journal_needed(self.run_dir / "checkpoints", self.journal_number)
        for old in (self.run_dir / "journal").glob("journal-*.bin"):
            if int(old.stem.split("-")[1]) < keep_from:
                old.unlink(missing_ok=True)
        self._save_policy()
        self._last_checkpoint = time.monotonic()
        log.info("checkpoint %s (v%d, %d updates, %d samples)", folder.name, self.version, self.updates, self.samples)
        return folder

    def _save_policy(self) -> None:
        """The current actor as ``<run>/weights/policy.safetensors`` (for ``rulka sim render
        --policy RUN_DIR`` and for sharing a driver); written atomically."""
        assert self.run_dir is not None
        from rulka.envs.sim.policy import POLICY_FILE, save_policy

        spec = self._actor_spec_with_config()
        folder = self.run_dir / "weights"
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{POLICY_FILE}.tmp"
        save_policy(tmp, self.agent.actor_weights(), spec)
        os.replace(tmp, folder / POLICY_FILE)

    def _restore(self) -> None:
        assert self.run_dir is not None
        found = ckpt.load_latest(self.run_dir / "checkpoints", self.memory)
        journal_from = 0
        if found is not None:
            folder, agent_state, state = found
            try:
                self.agent.load_state_dict(agent_state)
            except (KeyError, ValueError, RuntimeError, TypeError) as exc:
                raise UserError(f"cannot resume from {folder}: the agent state does not load "
                                f"({type(exc).__name__}: {str(exc)[:200]})") from exc
            self.run_id = state["run_id"]
            # versions published after this checkpoint carried other weights: never reuse them
            self.version = max(int(state["version"]), ckpt.highest_published(self.run_dir, self.run_id))
            self.updates = int(state["updates"])
            self.samples = int(state["samples"])
            self.segments = int(state["segments"])
            self.episodes = int(state["episodes"])
            self.counters.update({k: int(v) for k, v in state["counters"].items()})
            self.dedupe.load_state_dict(state["dedupe"])
            self.last_episode = {str(k): int(v) for k, v in (state.get("last_episode") or {}).items()}
            ckpt.set_rng_state(state["rng"])
            self.checkpoint_number = int(state["checkpoint_number"])
            self.journal_number = journal_from = int(state["journal_number"])
            self.accepted_log_bytes = int(state["accepted_log_bytes"])
            if self.limiter is not None:
                # the memory was loaded with this checkpoint: its held-out count matches self.samples
                self.limiter.inserts = self.samples - self.memory.held_out_transitions
                self.limiter.samples = self.updates * self.batch_size
            log.info("resumed from %s: v%d, %d updates, %d samples", folder.name, self.version, self.updates,
                     self.samples)
        else:
            # no checkpoint yet: a run killed early still has its journal
            state_file = self.run_dir / "run.json"
            if state_file.exists():
                self.run_id = json.loads(state_file.read_text())["run_id"]
                self.version = ckpt.highest_published(self.run_dir, self.run_id)
        # the accepted log records what the memory holds: cut it back to the checkpoint, then the
        # journal replay appends what came after
        accepted = self.run_dir / ACCEPTED_LOG
        if accepted.exists():
            with open(accepted, "r+b") as f:
                f.truncate(self.accepted_log_bytes)
        self._accepted_log = open(accepted, "ab")  # noqa: SIM115
        replayed = 0
        journals = sorted((self.run_dir / "journal").glob("journal-*.bin")) if (self.run_dir / "journal").is_dir() else []
        for path in journals:
            number = int(path.stem.split("-")[1])
            if number < journal_from:
                continue
            for worker, _seq, payload in read_journal(path):
                self._ingest_segment(worker, payload, journal=False, acks=None, defer=False)
                replayed += 1
            self.journal_number = max(self.journal_number, number)
        self._accepted_log.close()
        if replayed:
            log.info("replayed %d journaled segments", replayed)

    def _write_run_file(self) -> None:
        if self.run_dir is not None:
            ckpt.atomic_write_text(self.run_dir / "run.json", json.dumps({"run_id": self.run_id}))

    # -- ingest -----------------------------------------------------------------------------------
    def _bad(self, reason: str, detail: str) -> None:
        self.counters[f"bad_{reason}"] += 1
        n = self.counters[f"bad_{reason}"]
        if n <= 5 or n % 100 == 0:
            log.warning("dropped input (%s, %d so far): %s", reason, n, detail[:200])

    def _decode(self, payload: bytes) -> Segment | BadInput:
        try:
            return self.segment_decoder.decompress(payload)
        except BadInput as exc:
            return exc

    def _ingest_segment(self, sender: str, payload: bytes, *, journal: bool,
                        acks: dict[str, list[int]] | None, defer: bool = True,
                        decoded: Segment | BadInput | None = None) -> None:
        seg = decoded if decoded is not None else self._decode(payload)
        if isinstance(seg, BadInput):
            self._bad("segment", str(seg))
            return
        if acks is not None:
            self._last_heard[sender] = time.monotonic()
        if seg.worker_id != sender:
            self._bad("sender_mismatch", f"segment says worker {seg.worker_id!r}, sent by {sender!r}")
            return
        self._next_seq[sender] = max(self._next_seq.get(sender, 0), seg.seq + 1)
        mean = self._segment_steps.get(sender)
        n = max(1, seg.num_transitions)
        self._segment_steps[sender] = float(n) if mean is None else 0.8 * mean + 0.2 * n
        if not self.dedupe.accept(sender, seg.seq):
            self.counters["duplicates"] += 1
            if acks is not None:
                acks[sender].append(seg.seq)
            return
        if seg.episode_id > self.last_episode.get(sender, -1):
            self.last_episode[sender] = seg.episode_id
        if journal and self._journal is not None:
            self._journal.append(sender, seg.seq, payload)
        if self._accepted_log is not None:
            line = f"{sender} {seg.seq}\n".encode()
            self._accepted_log.write(line)  # flushed with the journal, before the acks
            self.accepted_log_bytes += len(line)
        if seg.run_id not in ("", self.run_id):
            self.counters["other_run"] += 1
        if seg.evaluation:
            self.counters["eval_segments"] += 1
        self.segments += 1
        self._window["bytes"] += len(payload)
        if defer and (self._deferred or not self._may_insert()):
            self._deferred.append(seg)
            self.counters["limiter_deferred"] += 1
            if len(self._deferred) > self.max_deferred:
                dropped = self._deferred.popleft()
                self.counters["limiter_dropped"] += 1
                self.counters["limiter_dropped_transitions"] += dropped.num_transitions
        else:
            self._store(seg)
        if self.version:
            self._lags.append(self.version - seg.policy_version)
        if seg.episode_done and seg.evaluation:
            # a greedy test episode (the trainer's request, a map-cycle evaluation entry, a test
            # worker): logged under eval/..., apart from the exploring episodes' charts/...
            if self.eval_stats.add_segment(seg):
                self.counters["eval_episodes"] += 1
            self._best_policy_result(seg)
        elif seg.episode_done:
            self.episodes += 1
            ret = seg.info.get("episode_return")
            if isinstance(ret, (int, float)):
                self._returns = (self._returns + [float(ret)])[-100:]
            self.episode_stats.add_segment(seg)
            race_time = seg.info.get("race_time_ms")
            if seg.info.get("finished") is True and isinstance(race_time, (int, float)):
                self.last_race_time_ms = float(race_time)
        if acks is not None:
            acks[sender].append(seg.seq)

    def _best_policy_result(self, seg: Segment) -> None:
        """A greedy episode of an evaluation version: one map's result for the best policy."""
        version = seg.info.get("eval_policy_version")
        if self.best_policy is None or not isinstance(version, int) or isinstance(version, bool):
            return
        info = seg.info
        race_time = info.get("race_time_ms")
        finished = info.get("finished") is True and isinstance(race_time, (int, float))
        if self.best_policy.add_result(version, seg.map_name, finished, race_time if finished else None,
                                       info.get("progress_m"), info.get("reference_time_ms"),
                                       info.get("episode_return")):
            self.counters["best_policy_improved"] += 1

    def _flush_logs(self) -> None:
        if self._journal is not None:
            self._journal.flush()
        if self._accepted_log is not None and not self._accepted_log.closed:
            self._accepted_log.flush()

    def _may_insert(self) -> bool:
        return (self.limiter is None or self.rate_mode == "throughput"
                or self.limiter.can_insert(len(self.memory)))

    def _store(self, seg: Segment) -> None:
        """Verify (``trainer.verify``) and append ``seg`` to the memory; count what it added."""
        if self.verify:
            self._verify(seg)
        held_out = self.memory.held_out_transitions
        try:
            # map_cycle entries with fill_buffer: false are for metrics only
            added = 0 if seg.info.get("fill_buffer") is False else int(self.memory.append(seg))
        except BadInput as exc:
            self._bad("memory", f"{seg.worker_id}/{seg.seq}: {exc}")
            added = 0
        except Exception as exc:  # noqa: BLE001 - one odd segment must not stop a run; counted, logged
            if self.counters["bad_memory"] < 3:
                log.exception("memory refused segment %s/%d", seg.worker_id, seg.seq)
            self._bad("memory", f"{seg.worker_id}/{seg.seq}: {type(exc).__name__}: {exc}")
            added = 0
        self.samples += added
        self._window["samples"] += added
        # transitions the memory holds out (its test store) are not trainable: the ratio of
        # samples per insert is over the trainable ones
        trainable = max(0, added - (self.memory.held_out_transitions - held_out))
        self._window["inserts"] += trainable
        if self.limiter is not None:
            self.limiter.record_insert(trainable)

    @property
    def deferred_segments(self) -> int:
        """Segments received and acknowledged but waiting for the limiter to admit them
        (``perf/deferred_segments``; at most ``max_deferred_segments``, a checkpoint stores them)."""
        return len(self._deferred)

    def drain_deferred(self) -> int:
        """Insert deferred segments while the limiter admits them; returns how many."""
        n = 0
        while self._deferred and self._may_insert():
            self._store(self._deferred.popleft())
            n += 1
        return n

    def grant_credit(self, force: bool = False, only: str | None = None) -> None:
        """Tell each worker heard from lately the next sequence number it may not reach yet:
        ``credit_segments`` beyond the last segment received, while the limiter admits inserts
        (mode ``ratio`` only). Unchanged limits are repeated every few seconds, so a paused
        worker knows the trainer is there; ``force`` repeats them now (to worker ``only``, or
        to all)."""
        if self.limiter is None or self.rate_mode != "ratio":
            return
        now = time.monotonic()
        open_ = not self._deferred and self.limiter.can_insert(len(self.memory))
        for worker in self._recent_workers(now) if only is None else [only]:
            # a resumed trainer knows what it accepted (dedupe) before it hears from the worker
            base = max(self._next_seq.get(worker, 0), self.dedupe.highest(worker) + 1)
            stats = self.worker_stats.get(worker)
            if stats and stats.get("unacked") == 0 and isinstance(stats.get("next_seq"), int):
                base = max(base, stats["next_seq"])  # a worker that skipped numbers (restarted)
            sent, when = self._credit_sent.get(worker, (-1, 0.0))
            limit = base + self.credit_for(worker) if open_ else sent
            if limit < 0:
                continue  # never granted and closed now: the worker has not started pausing
            if limit > sent or force or now - when >= CREDIT_RESEND_S:
                try:
                    self.link.send_to(worker, "credit", pack({"limit": int(limit)}))
                    self._credit_sent[worker] = (limit, now)
                except Exception as exc:  # noqa: BLE001 - resent within CREDIT_RESEND_S
                    self.counters["credit_failures"] += 1
                    log.debug("credit to %s failed: %s", worker, exc)

    def credit_for(self, worker: str) -> int:
        """Segments ``worker`` may produce beyond the last one received: ``credit_segments``
        segments of ``segment_max_steps`` steps, counted in steps by the mean length of its recent
        segments (at most 16x ``credit_segments``; never fewer than ``credit_segments``)."""
        mean = self._segment_steps.get(worker)
        if not mean:
            return self.credit_segments
        return int(min(16 * self.credit_segments, max(self.credit_segments, round(self.credit_steps / mean))))

    def _on_hello(self, sender: str, payload: bytes) -> None:
        """A worker (re)connected: tell it the highest sequence number and episode id accepted
        from it (it continues above them), and grant its credit now, from where it stands."""
        try:
            hello = decode_hello(payload)
        except BadInput as exc:
            self._bad("hello", f"from {sender!r}: {exc}")
            return
        self._last_heard[sender] = time.monotonic()
        highest = self.dedupe.highest(sender)
        base = max(self._next_seq.get(sender, 0), highest + 1)
        if hello.unacked == 0:  # nothing of it in flight: its next number is where credit starts
            base = max(base, hello.next_seq)
        self._next_seq[sender] = base
        try:
            self.link.send_to(sender, "welcome", encode_welcome(Welcome(highest, self.last_episode.get(sender, -1))))
        except Exception as exc:  # noqa: BLE001 - the worker says hello again until welcomed
            self.counters["welcome_failures"] += 1
            log.debug("welcome to %s failed: %s", sender, exc)
        self.counters["hellos"] += 1
        self.grant_credit(force=True, only=sender)

    def _recent_workers(self, now: float) -> set[str]:
        seen = {w for w, t in self._last_heard.items() if now - t < 30}
        return seen | {w for w, s in self.worker_stats.items() if now - s["_t"] < 30}

    def _verify(self, seg: Segment) -> None:
        diff = first_difference(seg, self.memory)
        if diff is None:
            self.counters["verified"] += 1
            return
        self.counters["verify_failures"] += 1
        msg = f"verify: worker {seg.worker_id} seq {seg.seq}: {diff}"
        if len(self.verify_failures) < 100:
            self.verify_failures.append(msg)
        log.error(msg)

    def ingest(self, messages: list[Message]) -> int:
        """Process received messages; acknowledge segments. Returns segments accepted."""
        before = self.segments
        acks: dict[str, list[int]] = defaultdict(list)
        payloads = [m.payload for m in messages if m.kind == "segment"]
        if self.ingest_threads > 1 and len(payloads) > 1:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.ingest_threads, thread_name_prefix="rulka-decode")
            decoded = iter(list(self._pool.map(self._decode, payloads)))  # zstd releases the GIL
        else:
            decoded = iter([None] * len(payloads))
        for msg in messages:
            if msg.kind == "segment":
                self._ingest_segment(msg.sender, msg.payload, journal=True, acks=acks, decoded=next(decoded))
            elif msg.kind == "hello":
                self._on_hello(msg.sender, msg.payload)
            elif msg.kind == "stats":
                try:
                    from rulka.net.stats import decode_stats_payload

                    self.worker_stats[msg.sender] = {**decode_stats_payload(msg.payload), "_t": time.monotonic()}
                except BadInput as exc:
                    self._bad("stats", str(exc))
            else:
                self._bad("kind", f"unexpected message kind {msg.kind!r} from {msg.sender!r}")
        self._flush_logs()  # what is acknowledged must be in the journal first
        for worker, seqs in acks.items():
            try:
                self.link.send_to(worker, "ack", pack(seqs))
            except Exception as exc:  # noqa: BLE001 - an unsent ack only means a resend later
                self.counters["ack_failures"] += 1
                log.debug("ack to %s failed: %s", worker, exc)
        self.grant_credit()
        return self.segments - before

    # -- training ---------------------------------------------------------------------------------
    def allowed_updates(self) -> int | float:
        """How many updates in total the data stored so far allows now (``math.inf``: no cap):
        the updates made plus those the rate limiter lets the learner make before it waits."""
        if len(self.memory) < max(self._start_size(), self.batch_size):
            return 0
        if self.limiter is None:
            return math.inf
        return self.updates + self.limiter.updates_ahead_allowed(len(self.memory))

    def can_train(self) -> bool:
        """Whether ``train_once`` would train now (a trajectory batch, or room under the ratio)."""
        if self.memory.ready():
            return True
        if self.limiter is None:
            return len(self.memory) >= max(self._start_size(), self.batch_size)
        return self.limiter.can_sample(self.batch_size, len(self.memory))

    def train_once(self) -> bool:
        """One update if ``can_train``: a trajectory batch the memory has ready, or a sampled
        batch under the ratio (recorded by the limiter); publishes every ``publish_every_updates``.
        Returns whether it trained. ``train_slice`` and ``run`` call it in a loop."""
        if self.memory.ready():
            batch = self.memory.take()
        elif self.can_train():
            try:
                batch = self.memory.sample(self.batch_size)
            except NotImplementedError:
                return False
            if self.limiter is not None:
                self.limiter.record_sample(self.batch_size)
        else:
            return False
        t0 = time.perf_counter()
        self._last_train_metrics = self.agent.train(batch)
        self._train_s += time.perf_counter() - t0
        self.updates += 1
        self._window["updates"] += 1
        if self.updates % self.publish_every == 0:
            self.publish()
        return True

    def train_slice(self, max_updates: int | None = None) -> int:
        """Train for up to ``train_slice_s`` seconds; returns updates done."""
        t_end = time.monotonic() + self.train_slice_s
        n = 0
        while time.monotonic() < t_end:
            if max_updates is not None and self.updates >= max_updates:
                break
            if not self.train_once():
                break
            n += 1
        return n

    # -- reporting --------------------------------------------------------------------------------
    def _connected_workers(self) -> int:
        # workers heard from (segments or stats) in the last 30 s
        return len(self._recent_workers(time.monotonic()))

    def ratio_text(self) -> str | None:
        """Achieved samples per insert over the target, e.g. ``7.9/8`` (progress line)."""
        if self.limiter is None:
            return None
        achieved = self.limiter.achieved()
        return f"{'-' if math.isnan(achieved) else f'{achieved:.2g}'}/{self.limiter.samples_per_insert:g}"

    def report(self, force: bool = False) -> None:
        """Update the progress line and, every ``log_every_s`` (or now with ``force``), log the
        metrics of the window since the last log (``charts/*``, ``perf/*``, the agent's losses)
        and broadcast a ``stats`` message to the workers. ``run`` calls it after each slice."""
        now = time.monotonic()
        if self.progress is not None:
            try:
                self.progress.update(samples=self.samples, updates=self.updates, version=self.version,
                                     workers=self._connected_workers(), episodes=self.episodes,
                                     ret=round(float(np.mean(self._returns[-20:])), 1) if self._returns else None,
                                     race_s=None if self.last_race_time_ms is None
                                     else round(self.last_race_time_ms / 1000, 2),
                                     spi=self.ratio_text(),
                                     best=self.best_policy.describe() or None if self.best_policy is not None else None)
            except Exception:  # noqa: BLE001 - a display problem never stops training
                self.progress = None
        if not force and now - self._last_log < self.log_every_s:
            return
        dt = max(1e-9, now - self._window["t"])
        metrics: dict[str, float] = {
            "charts/samples_received": self.samples, "charts/batches_trained": self.updates,
            "charts/weights_version": self.version, "charts/episodes": self.episodes,
            "perf/workers_connected": self._connected_workers(),
            "perf/ingest_mb_per_s": self._window["bytes"] / dt / 1e6,
            "perf/batches_per_s": self._window["updates"] / dt,
            "perf/samples_per_s": self._window["samples"] / dt,
            "perf/segments_duplicate": self.counters["duplicates"],
            "perf/segments_dropped": sum(v for k, v in self.counters.items() if k.startswith("bad_")),
        }
        if self._lags:
            metrics.update({"perf/policy_lag_min": min(self._lags), "perf/policy_lag_max": max(self._lags),
                            "perf/policy_lag_avg": float(np.mean(self._lags))})
        metrics.update(self.episode_stats.pop_metrics())
        metrics.update(self.eval_stats.pop_metrics())
        if self.best_policy is not None:
            metrics.update(self.best_policy.metrics())
        metrics["charts/episodes"] = self.episodes  # the run's total (restored on resume)
        for worker, stats in self.worker_stats.items():
            if now - stats["_t"] < 30 and isinstance(stats.get("samples_per_s"), (int, float)):
                metrics[f"perf/{worker}/samples_per_s"] = float(stats["samples_per_s"])
                if isinstance(stats.get("unacked"), int):
                    metrics[f"perf/{worker}/unsent_segments"] = stats["unacked"]
                for key, value in stats.items():  # the env's own timing (tm2020: step jitter, overruns)
                    if key.startswith("env/") and isinstance(value, (int, float)) and not isinstance(value, bool):
                        metrics[f"perf/{worker}/{key[4:]}"] = float(value)
        metrics.update({k: float(v) for k, v in self._last_train_metrics.items()})  # the one host sync
        if self.limiter is not None:
            lim = self.limiter
            metrics.update({
                "perf/samples_per_insert": window_rate(self._window["updates"] * self.batch_size,
                                                       self._window["inserts"]),
                "perf/samples_per_insert_total": lim.achieved(),
                "perf/samples_per_insert_target": lim.samples_per_insert,
                "perf/limiter_cursor": lim.cursor,
                "perf/deferred_segments": self.deferred_segments,
                "perf/limiter_dropped": self.counters["limiter_dropped"],
            })
        metrics["perf/learner_busy"] = self._train_s / dt
        # the learner had nothing to train (no data, or ahead of the ratio): the workers are the
        # bottleneck then, not the trainer
        metrics["perf/learner_starved"] = self._starved_s / dt
        self._train_s = self._starved_s = 0.0
        self._window = {"bytes": 0, "samples": 0, "inserts": 0, "updates": 0, "t": now}
        self._lags = []
        self._last_log = now
        if self.metrics is not None:
            try:
                self.metrics.log(metrics, step=self.samples)
            except Exception as exc:  # noqa: BLE001
                log.warning("metrics logging failed: %s", exc)
        try:
            from rulka.net.stats import encode_stats

            self.link.broadcast("stats", encode_stats({
                "weights_version": self.version, "updates": self.updates, "samples": self.samples,
                "memory_size": len(self.memory), "updates_per_s": round(metrics["perf/batches_per_s"], 2),
                "episodes": self.episodes, "duplicates": self.counters["duplicates"]}))
        except Exception as exc:  # noqa: BLE001 - stats are best effort
            log.debug("stats not sent: %s", exc)

    def summary(self) -> dict[str, Any]:
        """Counters as plain data."""
        return {"run_id": self.run_id, "version": self.version, "updates": self.updates, "samples": self.samples,
                "segments": self.segments, "episodes": self.episodes, "memory_size": len(self.memory),
                "counters": dict(self.counters), "verify_failures": list(self.verify_failures)}

    # -- main loop --------------------------------------------------------------------------------
    def run(self, max_updates: int | None = None, max_seconds: float | None = None,
            stop_event: threading.Event | None = None, max_samples: int | None = None) -> dict[str, Any]:
        """Ingest and train until ``max_updates``/``max_seconds``/``max_samples`` or ``stop_event``;
        writes a final checkpoint (with a run folder) and returns ``summary()``."""
        if self.link is None:
            raise ValueError("Trainer needs a link: pass it or call attach(link) before run()")
        stop_event = stop_event or threading.Event()
        t0 = time.monotonic()
        self._write_run_file()
        self.publish()  # workers start acting with the current policy at once
        self._server_session = self.link.server_session()
        try:
            while not stop_event.is_set():
                if max_updates is not None and self.updates >= max_updates:
                    break
                if max_seconds is not None and time.monotonic() - t0 >= max_seconds:
                    break
                if max_samples is not None and self.samples >= max_samples:
                    break
                self.drain_deferred()  # what the learner has used up makes room for what is held back
                fed = self.can_train()
                t_wait = time.perf_counter()
                try:
                    messages = self.link.receive(timeout=0.0 if fed else 0.05)
                except LinkClosed:
                    break
                if not fed:
                    self._starved_s += time.perf_counter() - t_wait
                self.ingest(messages)
                self.drain_deferred()
                self.grant_credit()
                self._republish_after_reconnect()
                self.train_slice(max_updates)
                self.report()
                if self.run_dir is not None and time.monotonic() - self._last_checkpoint >= self.checkpoint_every_s:
                    self.checkpoint()
        finally:
            self.report(force=True)
            if self.run_dir is not None:
                self.checkpoint()
        return self.summary()

    def close(self) -> None:
        """Close files, metrics, the decode threads and the link."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self._accepted_log is not None and not self._accepted_log.closed:
            self._accepted_log.close()
        for obj in (self.metrics, self.progress):
            if obj is not None:
                try:
                    obj.close()
                except Exception:  # noqa: BLE001
                    pass
        if self.link is not None:
            self.link.close()
