"""Reporting: the progress line after every slice, and every ``log_every_s`` the metrics of the
window since the last record (``charts/*``, ``perf/*``, ``eval/*``, the agent's losses) to the
metrics logger, with a ``stats`` broadcast to the workers."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from rulka.interfaces import Memory
from rulka.trainer.best import BestPolicy
from rulka.trainer.cooldown import LrCooldown
from rulka.trainer.credit import WorkerBook
from rulka.trainer.intake import Intake
from rulka.trainer.learner_step import LearnerStep
from rulka.trainer.ratelimit import SampleToInsertRatio, window_rate
from rulka.trainer.state import RunState, Window

log = logging.getLogger(__name__)


class Reporter:
    """``report(force)``, ``ratio_text()``, ``connected_workers()``. ``link``, ``metrics`` and
    ``progress`` are set by the trainer (``metrics`` may come once the run folder is known)."""

    def __init__(self, state: RunState, window: Window, workers: WorkerBook, intake: Intake, learner: LearnerStep,
                 memory: Memory, limiter: SampleToInsertRatio | None, best_policy: BestPolicy | None, *,
                 batch_size: int, log_every_s: float, metrics: Any, progress: Any) -> None:
        self.state = state
        self.window = window
        self.workers = workers
        self.intake = intake
        self.learner = learner
        self.memory = memory
        self.limiter = limiter
        self.best_policy = best_policy
        self.batch_size = batch_size
        self.log_every_s = log_every_s
        self.metrics = metrics
        self.progress = progress
        self.link: Any = None
        # the run's budget (progress and time left), set by ``Trainer.run``
        self.budget: LrCooldown | None = None
        self.last_log = time.monotonic()

    def connected_workers(self) -> int:
        # workers heard from (segments or stats) in the last 30 s
        return len(self.workers.recent(time.monotonic()))

    def ratio_text(self) -> str | None:
        """Achieved samples per insert over the target, e.g. ``7.9/8`` (progress line)."""
        if self.limiter is None:
            return None
        achieved = self.limiter.achieved()
        return f"{'-' if math.isnan(achieved) else f'{achieved:.2g}'}/{self.limiter.samples_per_insert:g}"

    def report(self, force: bool = False) -> None:
        """Update the progress line and, every ``log_every_s`` (or now with ``force``), log the
        metrics of the window since the last log and broadcast a ``stats`` message to the workers."""
        state, window, intake = self.state, self.window, self.intake
        now = time.monotonic()
        if self.progress is not None:
            try:
                returns = intake.returns
                fields: dict[str, Any] = dict(
                    samples=state.samples, updates=state.updates, version=state.version,
                    workers=self.connected_workers(), episodes=state.episodes,
                    ret=round(float(np.mean(returns[-20:])), 1) if returns else None,
                    race_s=None if intake.last_race_time_ms is None else round(intake.last_race_time_ms / 1000, 2),
                    spi=self.ratio_text(),
                    best=self.best_policy.describe() or None if self.best_policy is not None else None)
                budget = None if self.budget is None else self.budget.budget_text(state.samples)
                if budget is not None:  # a run with no --minutes / --frames shows no budget field
                    fields["budget"] = budget
                self.progress.update(**fields)
            except Exception:  # noqa: BLE001 - a display problem never stops training
                self.progress = None
        if not force and now - self.last_log < self.log_every_s:
            return
        dt = max(1e-9, now - window.t)
        metrics: dict[str, float] = {
            "charts/samples_received": state.samples, "charts/batches_trained": state.updates,
            "charts/weights_version": state.version, "charts/episodes": state.episodes,
            "perf/workers_connected": self.connected_workers(),
            "perf/ingest_mb_per_s": window.bytes / dt / 1e6,
            "perf/batches_per_s": window.updates / dt,
            "perf/samples_per_s": window.samples / dt,
            "perf/segments_duplicate": state.counters["duplicates"],
            "perf/segments_dropped": sum(v for k, v in state.counters.items() if k.startswith("bad_")),
        }
        if window.lags:
            metrics.update({"perf/policy_lag_min": min(window.lags), "perf/policy_lag_max": max(window.lags),
                            "perf/policy_lag_avg": float(np.mean(window.lags))})
        metrics.update(intake.episode_stats.pop_metrics())
        metrics.update(intake.eval_stats.pop_metrics())
        if self.best_policy is not None:
            metrics.update(self.best_policy.metrics())
        metrics["charts/episodes"] = state.episodes  # the run's total (restored on resume)
        for worker, stats in self.workers.stats.items():
            if now - stats["_t"] < 30 and isinstance(stats.get("samples_per_s"), (int, float)):
                metrics[f"perf/{worker}/samples_per_s"] = float(stats["samples_per_s"])
                if isinstance(stats.get("unacked"), int):
                    metrics[f"perf/{worker}/unsent_segments"] = stats["unacked"]
                for key, value in stats.items():  # the env's own timing (tm2020: step jitter, overruns)
                    if key.startswith("env/") and isinstance(value, (int, float)) and not isinstance(value, bool):
                        metrics[f"perf/{worker}/{key[4:]}"] = float(value)
        metrics.update({k: float(v) for k, v in self.learner.last_metrics.items()})  # the one host sync
        if self.limiter is not None:
            lim = self.limiter
            metrics.update({
                "perf/samples_per_insert": window_rate(window.updates * self.batch_size, window.inserts),
                "perf/samples_per_insert_total": lim.achieved(),
                "perf/samples_per_insert_target": lim.samples_per_insert,
                "perf/limiter_cursor": lim.cursor,
                "perf/deferred_segments": len(intake.deferred),
                "perf/limiter_dropped": state.counters["limiter_dropped"],
            })
        metrics["perf/learner_busy"] = window.train_s / dt
        # the learner had nothing to train (no data, or ahead of the ratio): the workers are the
        # bottleneck then, not the trainer
        metrics["perf/learner_starved"] = window.starved_s / dt
        window.reset(now)
        self.last_log = now
        if self.metrics is not None:
            try:
                self.metrics.log(metrics, step=state.samples)
            except Exception as exc:  # noqa: BLE001
                log.warning("metrics logging failed: %s", exc)
        try:
            from rulka.net.messages import Stats

            self.link.broadcast("stats", Stats({
                "weights_version": state.version, "updates": state.updates, "samples": state.samples,
                "memory_size": len(self.memory), "updates_per_s": round(metrics["perf/batches_per_s"], 2),
                "episodes": state.episodes, "duplicates": state.counters["duplicates"]}).encode())
        except Exception as exc:  # noqa: BLE001 - stats are best effort
            log.debug("stats not sent: %s", exc)
