"""Checkpoint and resume: a checkpoint stores everything accepted (deferred segments too), starts a
new journal, writes the agent, the memory and the run's counters atomically, keeps the journals a
fallback to the previous checkpoint needs, and saves the current policy to ``<run>/weights/``
(with the network's Hugging Face parts, if any, in both: the guide's ``hf_transformer_vis/`` and
``hf_transformer_fusion/``).
``restore`` loads the latest intact checkpoint, cuts the accepted log back to it, replays the
journal written since, and never reuses a weights version published before a crash."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rulka.errors import UserError
from rulka.interfaces import Memory, TrainingAgent
from rulka.nn.hf import save_hf_parts_from_weights
from rulka.trainer import checkpoint_store as ckpt
from rulka.trainer.average import AVERAGE_DIR, PolicyAverage
from rulka.trainer.intake import ACCEPTED_LOG, Intake
from rulka.trainer.journal import (
    JournalWriter,
    accepted_since,
    journal_path,
    missing_from_journal,
    read_journal,
)
from rulka.trainer.ratelimit import SampleToInsertRatio
from rulka.trainer.state import RunState

log = logging.getLogger(__name__)


class Checkpointer:
    """``checkpoint()`` now, ``due()`` when ``checkpoint_every_s`` has passed, ``restore()`` at a
    resume, ``write_run_file()`` when the run starts. Only with a run folder."""

    def __init__(self, run_dir: Path, state: RunState, agent: TrainingAgent, memory: Memory, intake: Intake,
                 limiter: SampleToInsertRatio | None, batch_size: int, actor_spec: Callable[[], dict[str, Any]],
                 *, every_s: float, average: PolicyAverage | None = None) -> None:
        self.run_dir = run_dir
        self.average = average  # trainer.average_policy_frames: written beside weights/ at each checkpoint
        self.state = state
        self.agent = agent
        self.memory = memory
        self.intake = intake
        self.limiter = limiter
        self.batch_size = batch_size
        self.actor_spec = actor_spec
        self.every_s = every_s
        self.last = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self.last >= self.every_s

    def checkpoint(self) -> Path:
        """Write a checkpoint now (agent, memory, counters, dedupe, RNG); start a new journal."""
        state, intake = self.state, self.intake
        assert intake.journal is not None
        # everything accepted so far goes into the memory (deferred segments too): the next
        # journal starts empty
        intake.store_all_deferred()
        intake.journal.close()
        intake.accepted_log.flush()
        state.journal_number += 1
        state.checkpoint_number += 1
        intake.journal = JournalWriter(journal_path(self.run_dir / "journal", state.journal_number))
        weights, spec = self.agent.actor_weights(), self.actor_spec()
        folder = ckpt.write_checkpoint(self.run_dir / "checkpoints", state.checkpoint_number,
                                       self.agent.state_dict(), state.to_dict(), self.memory,
                                       extra=lambda d: save_hf_parts_from_weights(weights, spec, d))
        # journals since the previous checkpoint stay: a resume falls back to it if this one is damaged
        keep_from = ckpt.oldest_journal_needed(self.run_dir / "checkpoints", state.journal_number)
        for old in (self.run_dir / "journal").glob("journal-*.bin"):
            if int(old.stem.split("-")[1]) < keep_from:
                old.unlink(missing_ok=True)
        self.save_policy(weights, spec)
        if self.average is not None and self.average.weights is not None:
            self.save_policy(self.average.weights, self.average.spec(spec), folder=AVERAGE_DIR)
        self.last = time.monotonic()
        log.info("checkpoint %s (v%d, %d updates, %d samples)", folder.name, state.version, state.updates,
                 state.samples)
        return folder

    def save_policy(self, weights: dict[str, Any] | None = None, spec: dict[str, Any] | None = None,
                    folder: str = "weights") -> None:
        """The current actor (or ``weights`` with ``spec``) as ``<run>/weights/policy.safetensors``
        (or ``<run>/<folder>/``: the averaged policy goes to ``average/``)
        (for ``rulka sim render --policy RUN_DIR``, sharing a driver, ``nn.init_from_pretrained``),
        with the network's Hugging Face parts beside it (``hf_transformer_vis/``,
        ``hf_transformer_fusion/``, none without such parts); each written atomically."""
        from rulka.envs.sim.policy import POLICY_FILE, save_policy

        if weights is None or spec is None:
            weights, spec = self.agent.actor_weights(), self.actor_spec()
        out = self.run_dir / folder
        out.mkdir(parents=True, exist_ok=True)
        save_hf_parts_from_weights(weights, spec, out)
        tmp = out / f".{POLICY_FILE}.tmp"
        save_policy(tmp, weights, spec)
        os.replace(tmp, out / POLICY_FILE)

    def restore(self) -> None:
        state = self.state
        found = ckpt.load_latest(self.run_dir / "checkpoints", self.memory)
        if self.average is not None:
            self.average.load(self.run_dir)
        journal_from = 0
        if found is not None:
            folder, agent_state, saved = found
            try:
                self.agent.load_state_dict(agent_state)
            except (KeyError, ValueError, RuntimeError, TypeError) as exc:
                raise UserError(f"cannot resume from {folder}: the agent state does not load "
                                f"({type(exc).__name__}: {str(exc)[:200]})") from exc
            state.run_id = saved["run_id"]
            # versions published after this checkpoint carried other weights: never reuse them
            state.version = max(int(saved["version"]), ckpt.highest_published(self.run_dir, state.run_id))
            state.updates = int(saved["updates"])
            state.samples = int(saved["samples"])
            state.segments = int(saved["segments"])
            state.episodes = int(saved["episodes"])
            state.counters.update({k: int(v) for k, v in saved["counters"].items()})
            state.dedupe.load_state_dict(saved["dedupe"])
            state.last_episode = {str(k): int(v) for k, v in (saved.get("last_episode") or {}).items()}
            ckpt.set_rng_state(saved["rng"])
            state.checkpoint_number = int(saved["checkpoint_number"])
            state.journal_number = journal_from = int(saved["journal_number"])
            state.accepted_log_bytes = int(saved["accepted_log_bytes"])
            if self.limiter is not None:
                # the memory was loaded with this checkpoint: its held-out count matches the samples
                self.limiter.inserts = state.samples - self.memory.held_out_transitions
                self.limiter.samples = state.updates * self.batch_size
            log.info("resumed from %s: v%d, %d updates, %d samples", folder.name, state.version, state.updates,
                     state.samples)
        else:
            # no checkpoint yet: a run killed early still has its journal
            state_file = self.run_dir / "run.json"
            if state_file.exists():
                state.run_id = json.loads(state_file.read_text())["run_id"]
                state.version = ckpt.highest_published(self.run_dir, state.run_id)
        # the accepted log records what the memory holds: cut it back to the checkpoint, then the
        # journal replay appends what came after
        accepted = self.run_dir / ACCEPTED_LOG
        before = accepted_since(accepted, state.accepted_log_bytes)  # what the journal must give back
        if accepted.exists():
            with open(accepted, "r+b") as f:
                f.truncate(state.accepted_log_bytes)
        self.intake.accepted_log = open(accepted, "ab")  # noqa: SIM115
        replayed = 0
        replayed_keys: set[tuple[str, int]] = set()
        journal_dir = self.run_dir / "journal"
        journals = sorted(journal_dir.glob("journal-*.bin")) if journal_dir.is_dir() else []
        for path in journals:
            number = int(path.stem.split("-")[1])
            if number < journal_from:
                continue
            for worker, seq, payload in read_journal(path):
                self.intake.ingest_segment(worker, payload, journal=False, acks=None, defer=False)
                replayed_keys.add((worker, seq))
                replayed += 1
            state.journal_number = max(state.journal_number, number)
        self.intake.accepted_log.close()
        state.counters["journal_missing_segments"] += len(missing_from_journal(before, replayed_keys))
        if replayed:
            log.info("replayed %d journaled segments", replayed)

    def write_run_file(self) -> None:
        ckpt.atomic_write_text(self.run_dir / "run.json", json.dumps({"run_id": self.state.run_id}))
