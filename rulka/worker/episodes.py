"""The worker's env thread: run episodes, cut them into segments, queue those in the outbox.

``EpisodeRunner`` never touches the link. What it learns from the network comes through the two
objects it is given (``rulka.worker.network``): the ``WeightsInbox`` (verified weights, loaded
between env steps; evaluation versions between episodes only) and the ``CreditGate`` (it pauses
between segments while the trainer's credit is used up, and before numbering anything while it
waits for the welcome). What it produces goes to the ``Outbox`` through the ``SegmentPacker``
(``rulka.worker.packer``), which compresses each segment on a thread of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rulka.compress import codec_name
from rulka.config import RulkaConfig, as_config
from rulka.envs.map_cycle import MapCycle
from rulka.errors import BadInput, UserError
from rulka.plugins import build_plugin, make_env, obs_to_arrays
from rulka.segment import Segment
from rulka.worker.buffer import EpisodeBuffer
from rulka.worker.network import CreditGate, InboxReader
from rulka.worker.outbox import Outbox, WorkerCounters
from rulka.worker.packer import SegmentPacker
from rulka.worker.policy import EpisodePlan, Policies

log = logging.getLogger(__name__)

CREDIT_TIMEOUT_S = 60.0  # no credit message for this long: the trainer is gone, stop waiting for it
# what a finished episode's last step reports that its last segment carries (plain values only)
_EPISODE_INFO = ("race_time_ms", "finished", "map_name", "track", "progress_m", "reference_time_ms")


class EpisodeRunner:
    """The env half of a worker: ``cfg`` None until the first weights carry one (the built-in
    defaults until then); ``env`` and ``compressor`` built from it when not given.

    A worker driving several game instances (``rulka-worker --instances N``) has one runner per
    instance, each on its own thread with its own env, policies, stats and inbox reader; they share
    the counters, gate, packer and outbox. ``instance`` (0..N-1, None for a single-instance worker)
    goes into every segment's info; ``produce_lock`` (shared) keeps sequence numbers reaching the
    packer in order."""

    def __init__(self, name: str, cfg: RulkaConfig | None, env: Any, compressor: Any, policies: Policies, *,
                 inbox: InboxReader, gate: CreditGate, outbox: Outbox, counters: WorkerCounters,
                 stats: Any, test: bool, act_before_weights: str, max_steps_per_s: float | None,
                 wait_for_welcome: bool, packer: SegmentPacker, instance: int | None = None, instances: int = 1,
                 produce_lock: threading.Lock | None = None) -> None:
        self.name = name
        self.instance, self.instances = instance, int(instances)
        self.produce_lock = produce_lock if produce_lock is not None else threading.Lock()
        self.packer = packer
        self.cfg = cfg
        self._defaults = cfg if cfg is not None else as_config(None)
        self.env = env
        self.compressor = compressor
        self.codec = codec_name(compressor) if compressor is not None else ""  # what segment headers say
        self.policies = policies
        self.inbox, self.gate, self.outbox, self.counters, self.stats = inbox, gate, outbox, counters, stats
        self.test = test
        self.act_before_weights = act_before_weights
        self.wait_for_welcome = wait_for_welcome
        self.run_id = ""
        self.segment_max_steps = self.settings().worker.segment_max_steps
        self.map_cycle: MapCycle | bool | None = None  # built from the config; False: none configured
        self.frames_played = 0  # the trainer's frame count, from the latest weights
        self._max_steps_per_s = max_steps_per_s
        self.min_step_s = 0.0
        self._next_step_t = 0.0
        self._apply_step_cap()
        self._start_rng = np.random.default_rng()
        self._start_seed = 0
        self._start_left = 0

    def settings(self) -> RulkaConfig:
        """The run config, or the built-in defaults until one arrives with the weights."""
        return self.cfg if self.cfg is not None else self._defaults

    def _apply_step_cap(self) -> None:
        # the command line wins over worker.max_steps_per_s (which may arrive with the weights)
        cap = self._max_steps_per_s or self.settings().worker.max_steps_per_s
        self.min_step_s = 1.0 / float(cap) if cap else 0.0

    # -- weights ----------------------------------------------------------------------------------
    def swap_weights(self) -> bool:
        """Load pending weights (between env steps). True if something was loaded."""
        item = self.inbox.take()
        if item is None:
            return False
        blob, header = item
        if self.cfg is None and header.run_config is not None:
            try:
                self.cfg = header.run_config.build()
            except (BadInput, UserError) as exc:  # bad JSON, or a config that does not validate
                log.warning("weights v%d carry an unreadable run config: %s", blob.version, exc)
                self.stats.weights_rejected += 1
                return False
            self._apply_step_cap()
        if self.policies.actor is None and header.actor is None:
            log.warning("weights v%d name no actor; cannot build one", blob.version)
            self.stats.weights_rejected += 1
            return False
        self.policies.load(blob.tensors, header, self.cfg)
        if header.frames_played is not None:
            self.frames_played = header.frames_played
            self._tell_env_frames_played()
        self.stats.weights_version = int(blob.version)
        self.stats.weights_loaded += 1
        self.inbox.loaded(self.stats.weights_version)
        self.run_id = str(blob.run_id)
        log.debug("loaded weights v%d", blob.version)
        return True

    def take_eval_version(self) -> None:
        """Load the newest evaluation version (between episodes only: one greedy race is one version)."""
        item = self.inbox.take_eval()
        if item is not None:
            self.policies.load_eval(item[0].version, item[0].tensors, item[1], self.cfg)

    def _tell_env_frames_played(self) -> None:
        # an env with frame-driven schedules (the TrackMania pipeline's engineered rewards) follows
        # the trainer's frame count, which comes with the weights
        if self.env is None:
            return
        set_frames = getattr(getattr(self.env, "unwrapped", self.env), "set_frames_played", None)
        if callable(set_frames):
            set_frames(self.frames_played)

    def ready(self, stop_event: threading.Event) -> bool:
        """Have an env and a policy (or random acting); wait for weights when needed."""
        while not stop_event.is_set():
            self.swap_weights()
            if self.env is None and self.cfg is not None:
                self.env = make_env(instance_config(self.cfg, self.instances))
            if self.compressor is None and (self.cfg is not None or self.policies.actor is not None):
                cfg = self.settings()
                name = cfg.worker.compressor
                self.compressor = build_plugin("compressor", name, cfg.worker.compressor_kwargs, cfg)
                self.codec = codec_name(self.compressor, name)
                if self.cfg is not None:  # else the constructor's value stays
                    self.segment_max_steps = self.cfg.worker.segment_max_steps
            if self.env is not None and self.compressor is not None and (
                    self.policies.actor is not None or self.act_before_weights == "random"):
                return True
            if self.inbox.arrived.wait(0.2):
                self.inbox.arrived.clear()
        return False

    # -- pauses -----------------------------------------------------------------------------------
    def _wait_for_credit(self, stop_event: threading.Event) -> None:
        """Between segments: wait while the trainer's credit is used up (``worker.pause_for_credit``;
        a real-time game sets it false and keeps acting). Weights keep loading while waiting; no
        credit message for ``CREDIT_TIMEOUT_S`` (trainer gone) ends the wait, counted."""
        if not self.settings().worker.pause_for_credit:
            return

        def blocked() -> bool:
            over, silent_s = self.gate.over_limit(self.counters.next_seq)
            if not over:
                return False
            if silent_s > CREDIT_TIMEOUT_S:
                self.stats.credit_timeouts += 1
                self.gate.give_up()
                log.warning("no credit from the trainer for %.0f s: acting without it", CREDIT_TIMEOUT_S)
                return False
            return True

        self._pause_while(blocked, stop_event)

    def _wait_for_welcome(self, stop_event: threading.Event) -> None:
        """Before numbering anything when the numbers are not known to be fresh
        (``wait_for_welcome``): wait for the trainer's welcome. No time limit: numbering without
        it could make the trainer drop new segments as duplicates."""
        if not self.wait_for_welcome or self.gate.welcomed.is_set():
            return
        t0 = time.monotonic()
        next_log = t0 + 5.0

        def blocked() -> bool:
            nonlocal next_log
            if self.gate.welcomed.is_set():
                return False
            if time.monotonic() >= next_log:
                next_log = time.monotonic() + 60.0
                log.warning("%s waits for the trainer's welcome (%.0f s so far): its sequence numbers do not come "
                            "from an intact state file, and numbering without the trainer's highest accepted "
                            "number could lose segments", self.name, time.monotonic() - t0)
            return True

        self._pause_while(blocked, stop_event)

    def _pause_while(self, blocked: Callable[[], bool], stop_event: threading.Event) -> None:
        """Wait (loading weights) while ``blocked()`` is true and ``stop_event`` is not set."""
        if not blocked():
            return
        t0 = time.monotonic()
        # a lock-step game (TMNF) waits inside a callback whose timeout is short during a race:
        # an env that has hold()/release() is told that a pause of unknown length begins and ends
        hold, release = getattr(self.env, "hold", None), getattr(self.env, "release", None)
        if callable(hold):
            hold()
        try:
            while not stop_event.is_set() and blocked():
                self.gate.wake.wait(0.05)
                self.gate.wake.clear()
                self.swap_weights()
        finally:
            if callable(release):
                release()
        self.stats.paused_s += time.monotonic() - t0
        self._next_step_t = time.monotonic()  # the step cap does not make up for the pause

    # -- episodes ---------------------------------------------------------------------------------
    def _next_start(self) -> int | None:
        """The reset seed of the next episode when ``worker.rollouts_per_start`` > 1: the same
        seed for that many episodes in a row (the same start state), then a fresh one."""
        per_start = self.settings().worker.rollouts_per_start
        if per_start <= 1:
            return None
        if self._start_left <= 0:
            self._start_seed = int(self._start_rng.integers(2**31 - 1))
            self._start_left = per_start
        self._start_left -= 1
        return self._start_seed

    def run_episode(self, stop_event: threading.Event, step_budget: int | None) -> int:
        """One episode; returns its steps, or -1 if ``stop_event`` or ``step_budget`` cut it
        short. A greedy test episode the trainer asked for is run first (the best policy's
        candidate before the trainer's test episodes)."""
        if not self.test:
            self.take_eval_version()
        requested, candidate = self.policies.wants_requested(self.test)
        self._wait_for_welcome(stop_event)
        self._wait_for_credit(stop_event)
        if stop_event.is_set():
            return -1
        episode_id = self.counters.take_episode()
        start_id = None if requested else self._next_start()
        if self.map_cycle is None and self.cfg is not None:
            self.map_cycle = MapCycle.from_config(self.cfg) or False
        entry = self.map_cycle.next() if self.map_cycle else None
        if candidate or (entry is not None and not entry.is_exploration and not requested):
            self.take_eval_version()  # a map-cycle greedy entry drives with the newest evaluation version
        plan = self.policies.plan(self.test, requested, candidate, entry)
        steps = self._drive(plan, episode_id, start_id, stop_event, step_budget)
        if steps >= 0 and requested:
            self.policies.finished(plan)
            self.stats.eval_episodes += 1
        return steps

    def _drive(self, plan: EpisodePlan, episode_id: int, start_id: int | None, stop_event: threading.Event,
               step_budget: int | None) -> int:
        self._tell_env_frames_played()
        if plan.options:
            obs, reset_info = self.env.reset(seed=start_id, options=plan.options)
        else:
            obs, reset_info = self.env.reset(seed=start_id)
        self.policies.reset(plan)
        buf = EpisodeBuffer()
        buf.start(obs_to_arrays(obs, reset_info), 0)
        index, ret, step = 0, 0.0, 0
        while True:
            if stop_event.is_set() or (step_budget is not None and step >= step_budget):
                return -1
            self.swap_weights()
            self._pace()
            action, extras = self.policies.act(self.env, obs, plan)
            obs, reward, terminated, truncated, info = self.env.step(action)
            ret += float(reward)
            step += 1
            self.stats.steps += 1
            done = bool(terminated or truncated)
            buf.add(action, extras, float(reward), bool(terminated), bool(truncated), obs_to_arrays(obs, info))
            if done or len(buf) >= self.segment_max_steps:
                seg_info: dict[str, Any] = dict(plan.info)
                if done:
                    seg_info.update(episode_return=ret, episode_length=step)
                    if start_id is not None:  # episodes of one start: GRPO groups them
                        seg_info["start_id"] = start_id
                    for key in _EPISODE_INFO:
                        value = info.get(key) if isinstance(info, dict) else None
                        if isinstance(value, (bool, int, float, str, np.generic)):
                            seg_info[key] = value.item() if isinstance(value, np.generic) else value
                if not self._produce(buf, episode_id, index, done, seg_info, stop_event, plan):
                    return -1
                index += 1
                if done:
                    break
                self._wait_for_credit(stop_event)
                last, buf = buf.obs[-1], EpisodeBuffer()  # the finished one now belongs to the packer
                buf.start(last, step)
        self.stats.episodes += 1
        self.stats.last_returns = (self.stats.last_returns + [ret])[-100:]
        return step

    def _pace(self) -> None:
        """Hold to ``worker.max_steps_per_s``."""
        if self.min_step_s:
            now = time.monotonic()
            if now < self._next_step_t:
                time.sleep(self._next_step_t - now)
            self._next_step_t = max(now, self._next_step_t) + self.min_step_s

    def _produce(self, buf: EpisodeBuffer, episode_id: int, index: int, done: bool, info: dict[str, Any],
                 stop_event: threading.Event, plan: EpisodePlan) -> bool:
        """Number the finished segment ``buf`` and hand it to the packer (stacked, compressed and
        kept in the outbox on its thread; ``rulka.worker.packer``); False when a stop came first."""
        version = plan.version  # the version that chose the actions: the evaluation version on its entries
        policy_version = self.stats.weights_version if version is None else version
        map_name = str(info.get("map_name") or info.get("track") or "")

        def segment() -> Segment:
            return Segment(
                run_id=self.run_id, worker_id=self.name, episode_id=episode_id, seq=seq, index_in_episode=index,
                first_step=buf.first_step, policy_version=policy_version, arrays=buf.arrays(), episode_done=done,
                map_name=map_name, evaluation=plan.greedy, info=info)

        if self.instance is not None:
            info["instance"] = self.instance
        with self.produce_lock:  # several instances: numbers reach the packer (and the outbox) in order
            seq = self.counters.take_seq()
            kept = self.packer.submit(seq, segment, self.compressor, self.codec, stop_event)
        self.stats.pack_waits, self.stats.pack_wait_s = self.packer.waits, self.packer.wait_s
        return kept


def instance_config(cfg: RulkaConfig, instances: int) -> RulkaConfig:
    """The config one of ``instances`` game instances of one worker builds its env from: one
    PC drives one TM2020 window and gamepad, so the tm2020 backend takes one instance only
    (UserError); a TMNF game claims a free instance slot (``rulka.envs.tmnf.game.InstanceSlot``)
    among at least ``instances`` (``worker.num_envs`` raised to it when lower)."""
    if instances <= 1:
        return cfg
    check_instances(cfg, instances)
    if cfg.worker.num_envs >= instances:
        return cfg
    return cfg.model_copy(update={"worker": cfg.worker.model_copy(update={"num_envs": instances})})


def check_instances(cfg: RulkaConfig, instances: int) -> None:
    """UserError (one line) when the run's env cannot run ``instances`` games in one worker."""
    if instances > 1 and cfg.environment.backend == "tm2020":
        raise UserError(f"--instances {instances}: environment.backend tm2020 drives one game window and one "
                        "gamepad per PC; run one TM2020 worker per PC (--instances 1)")
