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
``rulka.net.messages.Credit``), and pauses between segments until more comes. What
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

The class below is that loop; each errand is a component of its own, reached as the trainer's
attribute of that name, with the run's shared counters in ``state`` (``RunState``) and the metrics
window in ``Window`` (``rulka.trainer.state``):
``Intake`` (decode, dedupe, journal, store or defer; ``rulka.trainer.intake``), ``Credit`` and
``WorkerBook`` (credit, welcome, who was heard from; ``rulka.trainer.credit``), ``LearnerStep``
(``rulka.trainer.learner_step``), ``Publisher`` (``rulka.trainer.publishing``), ``Checkpointer``
(checkpoint and resume; ``rulka.trainer.checkpointer``), ``Reporter`` (progress line,
metrics, stats; ``rulka.trainer.reporting``) and ``CooldownWeights`` (the learning-rate cooldown
and the weights it swaps; ``rulka.trainer.cooldown``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rulka.compress import SegmentDecoder
from rulka.config import ConfigLike, RulkaConfig, as_config
from rulka.errors import BadInput, UserError
from rulka.interfaces import Memory, SampleCompressor, TrainingAgent
from rulka.memory.augment import RandomCrop
from rulka.net.link import LinkClosed, Message, TrainerLink
from rulka.net.messages import Ack, Stats
from rulka.plugins import WORKER_CONFIG_SECTIONS, build_plugin
from rulka.trainer.average import TRAINED_DIR, PolicyAverage
from rulka.trainer.best import BEST_DIR, BestPolicy
from rulka.trainer.checkpointer import Checkpointer
from rulka.trainer.cooldown import CooldownWeights
from rulka.trainer.credit import CREDIT_RESEND_S, Credit, WorkerBook
from rulka.trainer.intake import ACCEPTED_LOG, Intake
from rulka.trainer.journal import AckGate, StoreGuard
from rulka.trainer.learner_step import LearnerStep
from rulka.trainer.publishing import Publisher, signed_encoder
from rulka.trainer.ratelimit import limiter_for
from rulka.trainer.reporting import Reporter
from rulka.trainer.state import RunState, Window

__all__ = ["ACCEPTED_LOG", "CREDIT_RESEND_S", "Trainer"]

log = logging.getLogger(__name__)


class Trainer:
    """Ingests segments from ``link``, trains ``agent`` on ``memory`` and publishes weights.

    Args:
        cfg: the run config: a ``RulkaConfig``, or a mapping of sections / a YAML path
            (validated here, ``rulka.config.as_config``); ``trainer.*`` and ``logging.*`` are read
            here. None: the built-in defaults, and workers keep their own config (none is sent
            with the weights, saved or logged).
        link: a ``TrainerLink``; None to load the checkpoint first and set ``link`` afterwards
            (a role that cannot resume must not connect at all).
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
        # trainer.agent / trainer.memory default to training.algorithm (filled by the config model)
        self.agent = agent if agent is not None else build_plugin("agent", str(tc.agent), tc.agent_kwargs, cfg)
        self.memory = memory if memory is not None else build_plugin("memory", str(tc.memory), tc.memory_kwargs, cfg)
        codec = cfg.worker.compressor
        # each segment names its codec; the configured one decodes payloads without a header
        decoder = (SegmentDecoder(compressor, None) if compressor is not None else
                   SegmentDecoder(build_plugin("compressor", codec, cfg.worker.compressor_kwargs, cfg), codec))
        self.run_dir = Path(run_dir) if run_dir is not None else None
        # the moving average of the published weights, saved to <run>/average/ (0 = none kept)
        self.average = (PolicyAverage(tc.average_policy_frames, tc.average_policy_kind)
                        if tc.average_policy_frames else None)
        self.batch_size = int(self.agent.batch_size or cfg.training.batch_size)
        # samples per insert: rate_limit.samples_per_insert, else the memory's own, else
        # max_updates_per_env_step x batch_size (None: no ratio to hold)
        self.limiter = limiter_for(tc.rate_limit, self.memory, self.batch_size, tc.max_updates_per_env_step)
        if weights_encoder is None:
            if signing_key is None:
                raise ValueError("Trainer needs signing_key (the trainer's Ed25519 key) or weights_encoder")
            # float16 where tests/test_weights_half.py shows greedy actions do not change (iqn's argmax)
            dtype = tc.weights_dtype or ("float16" if cfg.training.algorithm == "iqn" else "float32")
            weights_encoder = signed_encoder(signing_key, dtype)
        # the run's best policy (rulka.trainer.best): evaluation versions and their greedy episodes
        self.best_policy = (BestPolicy.for_config(cfg, self.run_dir / BEST_DIR if self.run_dir is not None else None)
                            if self.config_given else None)
        # the components, over the state they share
        self.state = RunState()
        # the learning-rate cooldown and the weights it swaps (rulka.trainer.cooldown; run() knows the budget)
        self.cooldown = CooldownWeights(cfg.training, self.agent, self.state, self.best_policy, self.average)
        self.store_guard = StoreGuard(self.run_dir)  # a memory that cannot store stops the trainer
        self.acks = AckGate()  # acknowledgements wait for the journal's sync
        self.window = Window()
        self.workers = WorkerBook()
        rate = tc.rate_limit
        self.intake = Intake(self.state, self.window, self.workers, self.memory, self.limiter, decoder,
                             verify=tc.verify if verify is None else verify, rate_mode=rate.mode,
                             max_deferred=rate.max_deferred_segments, ingest_threads=tc.ingest_threads,
                             best_policy=self.best_policy, store_guard=self.store_guard)
        # credit is counted in full segments' worth of steps: a worker whose segments are short
        # (episodes that end early) gets more of them, else it pauses every few dozen steps
        self.credit = Credit(self.state, self.workers, self.limiter, self.memory, self.intake.deferred,
                             rate_mode=rate.mode, credit_segments=rate.credit_segments,
                             credit_steps=rate.credit_segments * int(cfg.worker.segment_max_steps))
        self.publisher = Publisher(self.state, self.agent, self.memory, self.workers, weights_encoder,
                                   self.worker_config, run_dir=self.run_dir,
                                   eval_every_versions=tc.eval_every_versions, eval_episodes=tc.eval_episodes,
                                   best_policy=self.best_policy, average=self.average,
                                   average_candidates=self.cooldown.average_candidates)
        # trainer.prefetch_batches: on, off, or auto (on where the agent trains on CUDA)
        prefetch = (str(self.agent.device).startswith("cuda") if tc.prefetch_batches == "auto"
                    else tc.prefetch_batches == "on")
        # filled from training.algorithm by the config model (100; 1 for on-policy learners)
        self.learner = LearnerStep(self.state, self.window, self.agent, self.memory, self.limiter,
                                   self.publisher.publish, batch_size=self.batch_size,
                                   publish_every=int(tc.publish_every_updates or 1), slice_s=train_slice_s,
                                   augment=RandomCrop.for_config(cfg), prefetch=prefetch)
        self.reporter = Reporter(self.state, self.window, self.workers, self.intake, self.learner, self.memory,
                                 self.limiter, self.best_policy, batch_size=self.batch_size,
                                 log_every_s=float(log_every_s if log_every_s is not None else cfg.logging.log_every_s),
                                 metrics=metrics, progress=progress)
        self.checkpointer: Checkpointer | None = None
        self.link = link  # type: ignore[assignment]  # checked by run()
        if self.run_dir is not None:
            self._open_run_folder(resume)
        elif resume:
            raise UserError("--resume needs a run folder")

    def _open_run_folder(self, resume: bool) -> None:
        """Restore (``resume``) or start the run in ``run_dir``: checkpointer, journal, metrics."""
        run_dir = self.run_dir
        assert run_dir is not None
        checkpointer = self.checkpointer = Checkpointer(
            run_dir, self.state, self.agent, self.memory, self.intake, self.limiter, self.batch_size,
            self.publisher.actor_spec, every_s=float(self.cfg.trainer.checkpoint_every_s), average=self.average)
        self.cooldown.keep_trained = lambda weights: checkpointer.save_policy(weights, checkpointer.actor_spec(),
                                                                              folder=TRAINED_DIR)
        run_dir.mkdir(parents=True, exist_ok=True)
        if resume:
            checkpointer.restore()
        elif (run_dir / "checkpoints" / "latest.json").exists() or any((run_dir / "journal").glob("journal-*.bin")):
            raise UserError(f"{run_dir} already holds a run; pass --resume to continue it or choose another --run-dir")
        if self.config_given:
            from rulka.config import save_resolved

            save_resolved(self.cfg, run_dir)
        self.intake.open_files(run_dir)
        if self.reporter.metrics is None and self.config_given:
            try:
                from rulka.telemetry import from_config

                self.reporter.metrics = from_config(self.cfg, run_dir, resume=resume)
            except ImportError:
                self.reporter.metrics = None

    @property
    def link(self) -> TrainerLink:
        return self._link

    @link.setter
    def link(self, link: TrainerLink) -> None:
        """A trainer built with ``link=None`` gets its link here (before ``run``)."""
        self._link = link
        self.credit.link = self.publisher.link = self.reporter.link = link

    def worker_config(self) -> dict[str, Any] | None:
        """The config sections a worker needs (sent with the weights), as plain data."""
        if not self.config_given:
            return None
        full = self.cfg.to_dict()
        return {k: full[k] for k in WORKER_CONFIG_SECTIONS}

    def checkpoint(self) -> Path | None:
        """Write a checkpoint now (agent, memory, counters, dedupe, RNG); start a new journal.
        None without a run folder."""
        return self.checkpointer.checkpoint() if self.checkpointer is not None else None

    def summary(self) -> dict[str, Any]:
        """Counters as plain data."""
        s = self.state
        return {"run_id": s.run_id, "version": s.version, "updates": s.updates, "samples": s.samples,
                "segments": s.segments, "episodes": s.episodes, "memory_size": len(self.memory),
                "counters": dict(s.counters), "verify_failures": list(self.intake.verify_failures)}

    # -- the loop ---------------------------------------------------------------------------------
    def ingest(self, messages: list[Message]) -> int:
        """Process received messages; acknowledge segments. Returns segments accepted."""
        before = self.state.segments
        acks: dict[str, list[int]] = defaultdict(list)
        decoded = iter(self.intake.decode_all([m.payload for m in messages if m.kind == "segment"]))
        for msg in messages:
            if msg.kind == "segment":
                self.intake.ingest_segment(msg.sender, msg.payload, journal=True, acks=acks, decoded=next(decoded))
            elif msg.kind == "hello":
                self.credit.on_hello(msg.sender, msg.payload)
            elif msg.kind == "stats":
                try:
                    self.workers.stats[msg.sender] = {**Stats.decode(msg.payload).values, "_t": time.monotonic()}
                except BadInput as exc:
                    self.state.bad("stats", str(exc))
            else:
                self.state.bad("kind", f"unexpected message kind {msg.kind!r} from {msg.sender!r}")
        self.intake.flush()  # what is acknowledged must be in the journal (on the disk) first
        if self.intake.journal is not None:
            self.acks.hold(self.intake.journal, self.intake.journal.written, acks)
        else:
            self.send_acks(acks)
        self.acks.release(self.send_acks)
        self.credit.grant()
        return self.state.segments - before

    def send_acks(self, acks: dict[str, list[int]]) -> None:
        for worker, seqs in acks.items():
            try:
                self.link.send_to(worker, "ack", Ack(seqs).encode())
            except Exception as exc:  # noqa: BLE001 - an unsent ack only means a resend later
                self.state.counters["ack_failures"] += 1
                log.debug("ack to %s failed: %s", worker, exc)

    def run(self, max_updates: int | None = None, max_seconds: float | None = None,
            stop_event: threading.Event | None = None, max_samples: int | None = None, *,
            budget_seconds: float | None = None, budget_samples: int | None = None) -> dict[str, Any]:
        """Ingest and train until ``max_updates``/``max_seconds``/``max_samples`` or ``stop_event``;
        writes a final checkpoint (with a run folder) and returns ``summary()``.

        ``budget_seconds`` / ``budget_samples``: how long the run was given when something else
        stops it (``rulka run --minutes`` / ``--frames``); they time the learning-rate cooldown
        (``training.lr_cooldown_fraction``) and default to ``max_seconds`` / ``max_samples``."""
        if self.link is None:
            raise ValueError("Trainer needs a link: pass it or set trainer.link before run()")
        stop_event = stop_event or threading.Event()
        t0 = time.monotonic()
        state, learner = self.state, self.learner
        # the progress line's budget=... field
        self.reporter.budget = self.cooldown.start(
            state.samples, budget_seconds=budget_seconds if budget_seconds is not None else max_seconds,
            budget_samples=budget_samples if budget_samples is not None else max_samples)
        if self.checkpointer is not None:
            self.checkpointer.write_run_file()
        self.publisher.publish()  # workers start acting with the current policy at once
        self.publisher.start_session()
        completed = False  # the loop ended (budget, stop event, link closed), not an exception
        try:
            while not stop_event.is_set():
                if max_updates is not None and state.updates >= max_updates:
                    break
                if max_seconds is not None and time.monotonic() - t0 >= max_seconds:
                    break
                if max_samples is not None and state.samples >= max_samples:
                    break
                self.intake.drain_deferred()  # what the learner has used up makes room for what is held back
                fed = learner.can_train()
                t_wait = time.perf_counter()
                try:
                    messages = self.link.receive(timeout=0.0 if fed else 0.05)
                except LinkClosed:
                    break
                if getattr(self.link, "dead", ""):  # its network process is gone: no data can come
                    raise UserError(f"trainer stopped: {self.link.dead}; start it again with --resume")
                if not fed:
                    self.window.starved_s += time.perf_counter() - t_wait
                self.ingest(messages)
                self.intake.drain_deferred()
                self.credit.grant()
                self.publisher.republish_after_reconnect()
                self.cooldown.step()
                learner.train_slice(max_updates)
                self.acks.release(self.send_acks)  # batches the journal has synced meanwhile
                self.reporter.report()
                if self.checkpointer is not None and self.checkpointer.due():
                    self.checkpoint()
            completed = True
        finally:
            self.reporter.report(force=True)
            if self.run_dir is not None and self.store_guard.failed is None:
                if completed and self.cooldown.end_on_average:
                    self.cooldown.end_on_averaged_weights()
                self.checkpoint()
        return self.summary()

    def close(self) -> None:
        """Close files, metrics, the prefetch and decode threads and the link."""
        self.learner.close()
        journal_open = self.intake.journal is not None
        self.intake.close()
        if journal_open and self.link is not None:
            self.acks.release(self.send_acks)  # closing synced the journal
        for obj in (self.reporter.metrics, self.reporter.progress):
            if obj is not None:
                try:
                    obj.close()
                except Exception:  # noqa: BLE001
                    pass
        if self.link is not None:
            self.link.close()
