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

The class below is that loop; each errand is a component of its own, with the run's shared
counters in ``RunState`` and the metrics window in ``Window`` (``rulka.trainer.state``):
``Intake`` (decode, dedupe, journal, store or defer; ``rulka.trainer.intake``), ``Credit`` and
``WorkerBook`` (credit, welcome, who was heard from; ``rulka.trainer.credit``), ``LearnerStep``
(``rulka.trainer.learner_step``), ``Publisher`` (``rulka.trainer.publishing``), ``Checkpointer``
(checkpoint and resume; ``rulka.trainer.checkpointer``) and ``Reporter`` (progress line,
metrics, stats; ``rulka.trainer.reporting``).
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
from rulka.errors import BadInput, ConfigError, UserError
from rulka.interfaces import Memory, SampleCompressor, TrainingAgent
from rulka.memory.augment import RandomCrop
from rulka.net.link import LinkClosed, Message, TrainerLink
from rulka.plugins import WORKER_CONFIG_SECTIONS, build_plugin
from rulka.segment import Segment, pack
from rulka.trainer.average import TRAINED_DIR, PolicyAverage
from rulka.trainer.best import BEST_DIR, BestPolicy
from rulka.trainer.checkpointer import Checkpointer
from rulka.trainer.cooldown import LrCooldown
from rulka.trainer.credit import CREDIT_RESEND_S, Credit, WorkerBook
from rulka.trainer.intake import ACCEPTED_LOG, Intake
from rulka.trainer.journal import AckGate, StoreGuard
from rulka.trainer.learner_step import LearnerStep
from rulka.trainer.publishing import Publisher, signed_encoder
from rulka.trainer.ratelimit import SampleToInsertRatio, limiter_for
from rulka.trainer.reporting import Reporter
from rulka.trainer.state import RunState, Window

__all__ = ["ACCEPTED_LOG", "CREDIT_RESEND_S", "Trainer"]

log = logging.getLogger(__name__)


def _forward(component: str, name: str, doc: str = "") -> Any:
    """A trainer attribute that is a component's (read and written there)."""
    return property(lambda self: getattr(getattr(self, component), name),
                    lambda self, value: setattr(getattr(self, component), name, value), doc=doc)


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

    # the run's counters (checkpointed) and what the components hold, under their former names
    run_id = _forward("state", "run_id")
    version = _forward("state", "version")
    updates = _forward("state", "updates")
    samples = _forward("state", "samples", "transitions stored")
    segments = _forward("state", "segments")
    episodes = _forward("state", "episodes")
    dedupe = _forward("state", "dedupe")
    last_episode = _forward("state", "last_episode", "worker -> highest episode id accepted (for welcome)")
    counters = _forward("state", "counters")
    checkpoint_number = _forward("state", "checkpoint_number")
    journal_number = _forward("state", "journal_number")
    accepted_log_bytes = _forward("state", "accepted_log_bytes")
    verify_failures = _forward("intake", "verify_failures")
    episode_stats = _forward("intake", "episode_stats")
    eval_stats = _forward("intake", "eval_stats")
    last_race_time_ms = _forward("intake", "last_race_time_ms", "latest finished race (progress line)")
    worker_stats = _forward("workers", "stats")
    train_slice_s = _forward("learner", "slice_s")
    log_every_s = _forward("reporter", "log_every_s")
    metrics = _forward("reporter", "metrics")
    progress = _forward("reporter", "progress")

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
        # the moving average of the published weights, saved to <run>/average/ (0 = none kept)
        self.average = (PolicyAverage(tc.average_policy_frames, tc.average_policy_kind)
                        if tc.average_policy_frames else None)
        # greedy test episodes: every N versions one worker (in turn) is asked for some
        self.eval_every_versions = tc.eval_every_versions
        self.eval_episodes = tc.eval_episodes
        self.max_updates_per_env_step = tc.max_updates_per_env_step
        # the learning rate cooled over the end of the run's budget (rulka.trainer.cooldown; run() knows the budget)
        cooldown = cfg.training.lr_cooldown_fraction
        if cooldown > 0 and not hasattr(self.agent, "lr_factor"):
            raise ConfigError(
                f"config key `training.lr_cooldown_fraction` ({cooldown}): the "
                f"{type(self.agent).__name__} learner has no training.lr_schedule to cool (built for iqn, ppo, "
                "grpo, dpo): remove it")
        self.lr_cooldown: LrCooldown | None = None
        self.batch_size = int(self.agent.batch_size or cfg.training.batch_size)
        self.ingest_threads = tc.ingest_threads
        self.rate_mode = tc.rate_limit.mode
        self.credit_segments = tc.rate_limit.credit_segments
        # credit is counted in full segments' worth of steps: a worker whose segments are short
        # (episodes that end early) gets more of them, else it pauses every few dozen steps
        self.credit_steps = self.credit_segments * int(cfg.worker.segment_max_steps)
        self.max_deferred = tc.rate_limit.max_deferred_segments
        self.limiter = self._make_limiter()
        if weights_encoder is None:
            if signing_key is None:
                raise ValueError("Trainer needs signing_key (the trainer's Ed25519 key) or weights_encoder")
            weights_encoder = signed_encoder(signing_key)
        # the run's best policy (rulka.trainer.best): evaluation versions and their greedy episodes
        self.best_policy: BestPolicy | None = None
        if self.config_given:
            self.best_policy = BestPolicy.for_config(cfg, self.run_dir / BEST_DIR if self.run_dir is not None else None)
        # training.lr_cooldown_from_best: the cooldown starts from the best policy's weights
        self.cool_from_best = bool(cfg.training.lr_cooldown_from_best)
        self._cooled_from_best = False  # done in this invocation (a resumed run cools again over what is left)
        if self.cool_from_best:
            why = ""
            if cooldown <= 0:
                why = "training.lr_cooldown_fraction is 0"
            elif not hasattr(self.agent, "load_actor_weights"):
                why = f"the {type(self.agent).__name__} learner cannot load published weights (built for iqn)"
            elif self.config_given and self.best_policy is None:
                why = "the run keeps no best policy (map_cycle.keep_best_policy, trainer.best_policy_every_frames)"
            if why:
                raise ConfigError(f"config key `training.lr_cooldown_from_best`: {why}: set it to false")
        # training.lr_cooldown_reset_optimizer: the optimizer starts afresh on the best policy's weights
        self.cool_reset_optimizer = bool(cfg.training.lr_cooldown_reset_optimizer)
        if self.cool_reset_optimizer and not self.cool_from_best:
            raise ConfigError("config key `training.lr_cooldown_reset_optimizer` acts when the cooldown puts the best "
                              "policy back: set training.lr_cooldown_from_best too, or set it to false")
        # training.lr_cooldown_end_on_average: a run stopped inside its cooldown ends on the averaged weights
        self.end_on_average = bool(cfg.training.lr_cooldown_end_on_average)
        if self.end_on_average:
            why = ""
            if cooldown <= 0:
                why = "training.lr_cooldown_fraction is 0"
            elif self.average is None:
                why = "the run keeps no average (trainer.average_policy_frames is 0)"
            elif not hasattr(self.agent, "load_actor_weights"):
                why = f"the {type(self.agent).__name__} learner cannot load published weights (built for iqn)"
            if why:
                raise ConfigError(f"config key `training.lr_cooldown_end_on_average`: {why}: set it to false")
        # the components, over the state they share
        self.state = RunState()
        self.store_guard = StoreGuard(self.run_dir)  # a memory that cannot store stops the trainer
        self.acks = AckGate()  # acknowledgements wait for the journal's sync
        self.window = Window()
        self.workers = WorkerBook()
        self.intake = Intake(self.state, self.window, self.workers, self.memory, self.limiter, self.segment_decoder,
                             verify=self.verify, rate_mode=self.rate_mode, max_deferred=self.max_deferred,
                             ingest_threads=self.ingest_threads, best_policy=self.best_policy,
                             store_guard=self.store_guard)
        self.credit = Credit(self.state, self.workers, self.limiter, self.memory, self.intake.deferred,
                             rate_mode=self.rate_mode, credit_segments=self.credit_segments,
                             credit_steps=self.credit_steps)
        self.publisher = Publisher(self.state, self.agent, self.memory, self.workers, weights_encoder,
                                   self.worker_config, run_dir=self.run_dir,
                                   eval_every_versions=self.eval_every_versions, eval_episodes=self.eval_episodes,
                                   best_policy=self.best_policy, average=self.average,
                                   average_candidates=self._average_candidates)
        self.learner = LearnerStep(self.state, self.window, self.agent, self.memory, self.limiter, self.publish,
                                   batch_size=self.batch_size, publish_every=self.publish_every,
                                   slice_s=train_slice_s, augment=RandomCrop.for_config(cfg),
                                   prefetch=self._prefetch_batches(tc.prefetch_batches))
        self.reporter = Reporter(self.state, self.window, self.workers, self.intake, self.learner, self.memory,
                                 self.limiter, self.best_policy, batch_size=self.batch_size,
                                 log_every_s=float(log_every_s if log_every_s is not None else cfg.logging.log_every_s),
                                 metrics=metrics, progress=progress)
        self.checkpointer: Checkpointer | None = None
        self.link = link  # type: ignore[assignment]  # checked by run()
        if self.run_dir is not None:
            self.checkpointer = Checkpointer(self.run_dir, self.state, self.agent, self.memory, self.intake,
                                             self.limiter, self.batch_size, self.publisher.actor_spec,
                                             every_s=self.checkpoint_every_s, average=self.average)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if resume:
                self.checkpointer.restore()
            elif (self.run_dir / "checkpoints" / "latest.json").exists() or any(
                    (self.run_dir / "journal").glob("journal-*.bin")):
                raise UserError(f"{self.run_dir} already holds a run; pass --resume to continue it "
                                "or choose another --run-dir")
            self._save_config()
            self.intake.open_files(self.run_dir)
            if self.metrics is None and self.config_given:
                try:
                    from rulka.telemetry import from_config

                    self.metrics = from_config(cfg, self.run_dir, resume=resume)
                except ImportError:
                    self.metrics = None
        elif resume:
            raise UserError("--resume needs a run folder")

    @property
    def link(self) -> TrainerLink:
        return self._link

    @link.setter
    def link(self, link: TrainerLink) -> None:
        self._link = link
        self.credit.link = self.publisher.link = self.reporter.link = link

    def _make_limiter(self) -> SampleToInsertRatio | None:
        """The rate limiter from ``trainer.rate_limit`` and the memory (None: no ratio to hold).
        samples per insert: ``rate_limit.samples_per_insert``, else the memory's own
        (``samples_per_insert``), else ``max_updates_per_env_step × batch_size``."""
        return limiter_for(self.cfg.trainer.rate_limit, self.memory, self.batch_size, self.max_updates_per_env_step)

    def attach(self, link: TrainerLink) -> None:
        """Give a trainer built with ``link=None`` its link (before ``run``)."""
        self.link = link

    def worker_config(self) -> dict[str, Any] | None:
        """The config sections a worker needs (sent with the weights), as plain data."""
        if not self.config_given:
            return None
        full = self.cfg.to_dict()
        return {k: full[k] for k in WORKER_CONFIG_SECTIONS}

    def _save_config(self) -> None:
        assert self.run_dir is not None
        if not self.config_given:
            return
        from rulka.config import save_resolved

        save_resolved(self.cfg, self.run_dir)

    # -- the components' entry points, as the trainer's own API -------------------------------------
    def publish(self) -> int:
        """Sign and broadcast the agent's current actor weights as the next version."""
        return self.publisher.publish()

    def checkpoint(self) -> Path | None:
        """Write a checkpoint now (agent, memory, counters, dedupe, RNG); start a new journal."""
        return self.checkpointer.checkpoint() if self.checkpointer is not None else None

    def _ingest_segment(self, sender: str, payload: bytes, *, journal: bool,
                        acks: dict[str, list[int]] | None, defer: bool = True,
                        decoded: Segment | BadInput | None = None) -> None:
        self.intake.ingest_segment(sender, payload, journal=journal, acks=acks, defer=defer, decoded=decoded)

    @property
    def deferred_segments(self) -> int:
        """Segments received and acknowledged but waiting for the limiter to admit them
        (``perf/deferred_segments``; at most ``max_deferred_segments``, a checkpoint stores them)."""
        return len(self.intake.deferred)

    def drain_deferred(self) -> int:
        """Insert deferred segments while the limiter admits them; returns how many."""
        return self.intake.drain_deferred()

    def grant_credit(self, force: bool = False, only: str | None = None) -> None:
        """Grant each worker heard from lately its credit (``Credit.grant``)."""
        self.credit.grant(force=force, only=only)

    def credit_for(self, worker: str) -> int:
        """Segments ``worker`` may produce beyond the last one received (``Credit.credit_for``)."""
        return self.credit.credit_for(worker)

    def allowed_updates(self) -> int | float:
        """How many updates in total the data stored so far allows now (``math.inf``: no cap)."""
        return self.learner.allowed_updates()

    def can_train(self) -> bool:
        """Whether ``train_once`` would train now (a trajectory batch, or room under the ratio)."""
        return self.learner.can_train()

    def train_once(self) -> bool:
        """One update if ``can_train`` (``LearnerStep.train_once``); returns whether it trained."""
        return self.learner.train_once()

    def train_slice(self, max_updates: int | None = None) -> int:
        """Train for up to ``train_slice_s`` seconds; returns updates done."""
        return self.learner.train_slice(max_updates)

    def ratio_text(self) -> str | None:
        """Achieved samples per insert over the target, e.g. ``7.9/8`` (progress line)."""
        return self.reporter.ratio_text()

    def report(self, force: bool = False) -> None:
        """Update the progress line and, every ``log_every_s`` (or now with ``force``), log the
        metrics of the window since the last log and broadcast a ``stats`` message to the workers.
        ``run`` calls it after each slice."""
        self.reporter.report(force)

    def summary(self) -> dict[str, Any]:
        """Counters as plain data."""
        return {"run_id": self.run_id, "version": self.version, "updates": self.updates, "samples": self.samples,
                "segments": self.segments, "episodes": self.episodes, "memory_size": len(self.memory),
                "counters": dict(self.counters), "verify_failures": list(self.verify_failures)}

    # -- the loop ---------------------------------------------------------------------------------
    def ingest(self, messages: list[Message]) -> int:
        """Process received messages; acknowledge segments. Returns segments accepted."""
        before = self.segments
        acks: dict[str, list[int]] = defaultdict(list)
        decoded = iter(self.intake.decode_all([m.payload for m in messages if m.kind == "segment"]))
        for msg in messages:
            if msg.kind == "segment":
                self.intake.ingest_segment(msg.sender, msg.payload, journal=True, acks=acks, decoded=next(decoded))
            elif msg.kind == "hello":
                self.credit.on_hello(msg.sender, msg.payload)
            elif msg.kind == "stats":
                try:
                    from rulka.net.stats import decode_stats_payload

                    self.workers.stats[msg.sender] = {**decode_stats_payload(msg.payload), "_t": time.monotonic()}
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
        self.grant_credit()
        return self.segments - before

    def send_acks(self, acks: dict[str, list[int]]) -> None:
        for worker, seqs in acks.items():
            try:
                self.link.send_to(worker, "ack", pack(seqs))
            except Exception as exc:  # noqa: BLE001 - an unsent ack only means a resend later
                self.counters["ack_failures"] += 1
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
            raise ValueError("Trainer needs a link: pass it or call attach(link) before run()")
        stop_event = stop_event or threading.Event()
        t0 = time.monotonic()
        training = self.cfg.training
        self.lr_cooldown = LrCooldown(training.lr_cooldown_fraction, training.lr_cooldown_final_ratio,
                                      start_ratio=training.lr_cooldown_start_ratio,
                                      budget_seconds=budget_seconds if budget_seconds is not None else max_seconds,
                                      budget_samples=budget_samples if budget_samples is not None else max_samples)
        self.lr_cooldown.start(self.samples)
        self.reporter.budget = self.lr_cooldown  # the progress line's budget=... field
        if self.lr_cooldown.fraction > 0:
            log.info("trainer: %s", self.lr_cooldown.describe())
        if self.checkpointer is not None:
            self.checkpointer.write_run_file()
        self.publish()  # workers start acting with the current policy at once
        self.publisher.start_session()
        completed = False  # the loop ended (budget, stop event, link closed), not an exception
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
                if getattr(self.link, "dead", ""):  # its network process is gone: no data can come
                    raise UserError(f"trainer stopped: {self.link.dead}; start it again with --resume")
                if not fed:
                    self.window.starved_s += time.perf_counter() - t_wait
                self.ingest(messages)
                self.drain_deferred()
                self.grant_credit()
                self.publisher.republish_after_reconnect()
                if self.lr_cooldown.active:
                    factor = self.lr_cooldown.factor(self.samples)
                    self.agent.lr_factor = factor  # type: ignore[attr-defined]
                    if factor < 1.0 and self.cool_from_best and not self._cooled_from_best:
                        self.cool_from_best_policy()
                self.train_slice(max_updates)
                self.acks.release(self.send_acks)  # batches the journal has synced meanwhile
                self.report()
                if self.checkpointer is not None and self.checkpointer.due():
                    self.checkpoint()
            completed = True
        finally:
            self.report(force=True)
            if self.run_dir is not None and self.store_guard.failed is None:
                if completed and self.end_on_average:
                    self.end_on_averaged_weights()
                self.checkpoint()
        return self.summary()

    def _average_candidates(self, samples: int) -> bool:
        """Whether best-policy candidates alternate with the average now: the run ends on it
        (``training.lr_cooldown_end_on_average``) and its cooldown has begun (``rulka.trainer.best``)."""
        return self.end_on_average and self.lr_cooldown is not None and self.lr_cooldown.cooling(samples)

    def end_on_averaged_weights(self) -> bool:
        """``training.lr_cooldown_end_on_average``: the run stopped inside its cooldown; put the moving
        average of its weights (``average/``) into the learner's networks, so that the last checkpoint's
        weights are the average; the weights it trained last go to ``<run>/trained/``. False (logged, counted) when the run stopped before its cooldown or
        has no average yet: it ends on the weights it trained."""
        avg = self.average
        why = ""
        if avg is None or avg.weights is None:
            why = "no averaged weights yet"
        elif self.lr_cooldown is None or not self.lr_cooldown.cooling(self.samples):
            why = "the run stopped before its learning-rate cooldown"
        else:
            # copies: the actor's tensors may be the network's own, which the average overwrites
            trained = {k: v.detach().clone() for k, v in self.agent.actor_weights().items()}  # type: ignore[attr-defined]
            try:
                self.agent.load_actor_weights(avg.weights)  # type: ignore[attr-defined]
            except ValueError as exc:  # an average/ file of another network (a resumed run whose config changed)
                why = f"the average's {exc}"
        if why:
            self.counters["end_on_average_skipped"] += 1
            log.warning("trainer: the run ends on the weights it trained, not their average: %s", why)
            return False
        self.counters["ended_on_average"] += 1
        if self.checkpointer is not None:  # nothing is lost: the weights it trained last, beside the average
            self.checkpointer.save_policy(trained, self.checkpointer.actor_spec(), folder=TRAINED_DIR)
        assert avg is not None
        log.info("trainer: the run ends on the average of its weights (%s, horizon %s frames, %s versions up to %s "
                 "frames)", avg.kind, f"{avg.frames:,}", avg.versions, f"{avg.samples or 0:,}")
        return True

    def cool_from_best_policy(self) -> bool:
        """The cooldown has started (``training.lr_cooldown_from_best``): put the best policy's
        weights into the learner's networks, once per invocation. False (logged, counted) when the
        run has no best policy yet: the cooldown then settles the current weights."""
        self._cooled_from_best = True
        best = self.best_policy
        weights = best.best_weights() if best is not None else None
        why = "no best policy yet"
        if best is not None and weights is not None:
            try:
                self.agent.load_actor_weights(weights)  # type: ignore[attr-defined]
                why = ""
            except ValueError as exc:  # a best/ file of another network (a resumed run whose config changed)
                why = f"the best policy's {exc}"
        if best is None or why:
            self.counters["cooldown_without_best"] += 1
            log.warning("trainer: the cooldown starts from the current weights: %s", why)
            return False
        self.counters["cooldown_from_best"] += 1
        if self.cool_reset_optimizer:
            self.agent.reset_optimizer()  # type: ignore[attr-defined]
            self.counters["cooldown_optimizer_reset"] += 1
        if self.average is not None:  # the average of the replaced weights is no average of these
            self.average.restart(weights, self.samples)
            self.counters["average_restarted"] += 1
        log.info("trainer: the cooldown starts from the best policy (%s at %s frames)", best.describe(),
                 (best.best or {}).get("frames"))
        return True

    def _prefetch_batches(self, setting: str) -> bool:
        """``trainer.prefetch_batches``: on, off, or auto (on where the agent trains on CUDA)."""
        if setting == "auto":
            return str(getattr(self.agent, "device", "cpu")).startswith("cuda")
        return setting == "on"

    def close(self) -> None:
        """Close files, metrics, the prefetch and decode threads and the link."""
        self.learner.close()
        journal_open = self.intake.journal is not None
        self.intake.close()
        if journal_open and self.link is not None:
            self.acks.release(self.send_acks)  # closing synced the journal
        for obj in (self.metrics, self.progress):
            if obj is not None:
                try:
                    obj.close()
                except Exception:  # noqa: BLE001
                    pass
        if self.link is not None:
            self.link.close()
