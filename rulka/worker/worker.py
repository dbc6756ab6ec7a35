"""The worker role: run episodes with the current policy, send them as segments, load new weights.

A worker is three components with one job each, joined by the objects they are handed:

- ``rulka.worker.network.Network`` (the I/O thread, or the caller's ``pump()``): weights, credit,
  welcome, acknowledgements, hello, sending segments, ``stats``;
- ``rulka.worker.episodes.EpisodeRunner`` (the env thread): episodes cut into segments, with the
  policies of ``rulka.worker.policy``; it never waits on the network;
- ``rulka.worker.packer.SegmentPacker`` (a thread of its own): each finished segment stacked,
  compressed and added to the outbox, in order, with a bounded queue (the env thread waits,
  counted, when it is full);
- ``rulka.worker.outbox.Outbox``: finished segments until the trainer acknowledges them
  (bounded, durable when a state folder is given), resent after a reconnect or a timeout.

Between the threads pass only the outbox, the packer and ``WorkerCounters`` (thread-safe), a
``WeightsInbox`` (verified weights, swapped in between two env steps when newer than the loaded
version; the evaluation slot between episodes), a ``CreditGate`` (credit and welcome) and the
``WorkerStats`` they count in.

One worker process may drive several game instances (``instances``, ``rulka-worker --instances
N``; ``rulka.worker.instances``): one network side, inbox, outbox, packer and numbering, and an
``EpisodeRunner`` with its own env and policies per instance, each on a thread of its own; a
version then crosses the relay's uplink once per PC, not once per instance.

A worker needs nothing but a link: when no env or actor is given, it builds them from the run
config and the actor that the first weights' header names (so a gaming PC needs only the server
address and its credentials).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rulka.compress import SegmentDecoder, ZstdCompressor
from rulka.config import ConfigLike, RulkaConfig, as_config
from rulka.errors import BadInput
from rulka.interfaces import ActorModule, SampleCompressor
from rulka.net.link import WorkerLink
from rulka.worker.episodes import EpisodeRunner, check_instances
from rulka.worker.instances import CombinedStats, run_instances
from rulka.worker.network import CreditGate, Network, WeightsInbox
from rulka.worker.outbox import Outbox, WorkerCounters
from rulka.worker.packer import SegmentPacker
from rulka.worker.policy import Policies


@dataclass
class WorkerStats:
    """What a worker has done so far (also sent as ``stats`` messages). The network side writes
    ``bad_messages`` and ``weights_stale``, the env thread the rest; both count refused weights
    in ``weights_rejected`` (unverifiable ones there, ones that cannot be loaded here)."""

    episodes: int = 0
    steps: int = 0
    segments: int = 0
    weights_version: int = 0
    weights_received: int = 0  # verified weights messages (one decode each, however many instances load them)
    weights_loaded: int = 0
    weights_rejected: int = 0
    weights_stale: int = 0
    bad_messages: int = 0
    paused_s: float = 0.0  # time spent waiting for the trainer's credit
    credit_timeouts: int = 0  # waits given up because no credit message came for CREDIT_TIMEOUT_S
    eval_episodes: int = 0  # greedy test episodes run at the trainer's request
    pack_waits: int = 0  # finished segments that waited for the packer's bounded queue (rulka.worker.packer)
    pack_wait_s: float = 0.0  # the env thread's time in those waits
    last_returns: list[float] = field(default_factory=list)


class _SpillCheck:
    """Decodes a spilled segment left by an earlier run (raises BadInput when it cannot be). A
    codec this process does not know is not a reason to give the segment up: the trainer may."""

    def __init__(self) -> None:
        self._decoder = SegmentDecoder(ZstdCompressor())

    def __call__(self, data: bytes) -> None:
        try:
            self._decoder.decompress(data)
        except BadInput as exc:
            if "unknown codec" not in str(exc):
                raise


class Worker:
    """Runs episodes and delivers them through ``link``.

    Args:
        cfg: the run config (a ``RulkaConfig``, or a mapping of sections / a YAML path, validated
            here by ``rulka.config.as_config``), or None to take it from the first weights (until
            then the worker's own knobs are the built-in defaults).
        link: a connected ``WorkerLink`` (``rulka.net.connect_worker`` or ``LocalHub.worker_link``).
        env: a Gymnasium-API env; None builds it from the config.
        actor: an ``ActorModule``; None builds it from the header of the first weights
            (``rulka.worker.policy.build_actor``).
            A given actor is used at once (version 0) until newer weights arrive.
        compressor: a ``SampleCompressor``; None builds ``worker.compressor`` ("zstd").
        weights_decoder: bytes -> verified weights blob (``run_id``, ``version``, ``tensors``,
            ``header``); raise to reject. Default: ``rulka.net.weights.decode_weights`` with
            ``verify_key``.
        state_dir: where sequence numbers and unacknowledged segments persist
            (``worker.spill_dir``); None keeps them in memory only.
        test: greedy actions only (evaluation episodes, ``Segment.evaluation``). Without it, the
            worker still runs greedy test episodes when weights ask for them (the header's
            ``EvalRequest``: ``trainer.eval_every_versions``).
        act_before_weights: ``"wait"`` for the first weights (default) or ``"random"``
            (``env.action_space.sample()``) when no actor is available yet.
        produced_log: optional text file; one ``seq`` line per produced segment (audits, tests).
        max_steps_per_s: cap on env steps per second (a fast gym env would otherwise flood a
            small trainer; real-time envs pace themselves).
        instances: game instances this process drives (``rulka-worker --instances``), each on a
            thread of its own with its own env and actor, sharing the link, the weights (received
            and verified once per version), the outbox and the numbers (``rulka.worker.instances``);
            ``env`` and ``actor`` are then None or lists of that many. ``run`` drives them;
            ``runner``/``policies``/``env``/``actor`` are the first instance's.
        wait_for_welcome: number no segment before the trainer's ``welcome`` (its highest
            accepted sequence number, ``rulka.net.messages``). None (default): wait when the numbers
            do not come from an intact ``worker_state.json`` in ``state_dir`` (first start, damaged
            or deleted state), so a lost state file never makes the trainer drop new segments as
            duplicates. A worker without ``state_dir`` does not wait (tests, in-process runs)
            but still continues above the welcome when it comes.
    """

    def __init__(
        self,
        cfg: ConfigLike = None,
        link: WorkerLink | None = None,
        env: Any = None,
        actor: ActorModule | None = None,
        compressor: SampleCompressor | None = None,
        *,
        weights_decoder: Callable[[bytes], Any] | None = None,
        verify_key: Any = None,
        state_dir: str | Path | None = None,
        test: bool = False,
        act_before_weights: str = "wait",
        produced_log: str | Path | None = None,
        stats_every_s: float = 5.0,
        resend_after_s: float = 15.0,
        max_in_flight: int = 64,
        max_steps_per_s: float | None = None,
        wait_for_welcome: bool | None = None,
        instances: int = 1,
    ) -> None:
        if link is None:
            raise ValueError("Worker needs a link")
        if instances < 1:
            raise ValueError("instances must be at least 1")
        if act_before_weights not in ("wait", "random"):
            raise ValueError("act_before_weights must be 'wait' or 'random'")
        config: RulkaConfig | None = as_config(cfg) if cfg is not None else None
        wc = (config if config is not None else as_config(None)).worker
        self.link = link
        self.name = link.worker_id
        self.test = test
        state_dir = state_dir if state_dir is not None else wc.spill_dir
        self.state_dir = Path(state_dir).expanduser() if state_dir is not None else None
        self.stats = WorkerStats()
        self.counters = WorkerCounters(self.state_dir)
        self.outbox = Outbox(
            directory=self.state_dir / "unacked" if self.state_dir is not None else None,
            limit_segments=wc.unacked_limit_segments,
            memory_limit_bytes=wc.unacked_memory_limit_mb * (1 << 20),
            disk_limit_bytes=wc.spill_limit_mb * (1 << 20),
            on_full=wc.on_full,
            counters=self.counters,
            max_payload_bytes=getattr(getattr(link, "settings", None), "max_message_bytes", None),
            validate=_SpillCheck(),
        )
        # sequence numbers: the trainer's welcome says what it has accepted (see rulka.net.messages)
        self.wait_for_welcome = (self.state_dir is not None and not self.counters.intact
                                 if wait_for_welcome is None else bool(wait_for_welcome))
        inbox, gate = WeightsInbox(instances), CreditGate()
        envs, actors = _per_instance(env, instances, "env"), _per_instance(actor, instances, "actor")
        if config is not None:
            check_instances(config, instances)
        # several instances: each counts in its own WorkerStats, read as one through CombinedStats
        parts = [self.stats] if instances == 1 else [WorkerStats() for _ in range(instances)]
        if instances > 1:
            self.stats = CombinedStats(self.stats, parts)  # type: ignore[assignment]
        self.instances = instances
        # compresses finished segments into the outbox on a thread of its own, in order (rulka.worker.packer)
        self.packer = SegmentPacker(self.outbox, self.stats, Path(produced_log) if produced_log is not None else None)
        produce_lock = threading.Lock()
        self.runners = [EpisodeRunner(
            self.name, config, envs[i], compressor,  # compressors run on the one packing thread
            Policies(self.name, actors[i], takes_requests=i == 0), inbox=inbox.reader(i), gate=gate,
            outbox=self.outbox, counters=self.counters, stats=parts[i], test=test,
            act_before_weights=act_before_weights, max_steps_per_s=max_steps_per_s,
            wait_for_welcome=self.wait_for_welcome, packer=self.packer,
            instance=None if instances == 1 else i, instances=instances, produce_lock=produce_lock)
            for i in range(instances)]
        self.runner, self.policies = self.runners[0], self.runners[0].policies
        self.network = Network(
            link, self.outbox, self.counters, self.stats, inbox, gate,
            weights_decoder or _verifying_decoder(verify_key), test=test, resend_after_s=resend_after_s,
            max_in_flight=max_in_flight, stats_every_s=stats_every_s, env_stats=self._env_stats)

    # -- what the components hold, read (and for tests, set) through the role ----------------------
    @property
    def cfg(self) -> RulkaConfig | None:
        return self.runner.cfg

    @property
    def env(self) -> Any:
        return self.runner.env

    @env.setter
    def env(self, env: Any) -> None:
        self.runner.env = env

    @property
    def actor(self) -> Any:
        return self.policies.actor

    @property
    def compressor(self) -> Any:
        return self.runner.compressor

    @property
    def run_id(self) -> str:
        return self.runner.run_id

    @property
    def segment_max_steps(self) -> int:
        return self.runner.segment_max_steps

    @property
    def min_step_s(self) -> float:
        return self.runner.min_step_s

    @property
    def eval_version(self) -> int | None:
        return self.policies.eval_version

    @property
    def eval_pending(self) -> int:
        return self.policies.eval_pending

    @property
    def eval_policy_pending(self) -> int:
        return self.policies.eval_policy_pending

    def _env_stats(self) -> dict[str, float]:
        perf = getattr(self.runner.env, "perf_stats", None)  # real-time envs report their loop timing
        return perf() if callable(perf) else {}

    # -- the I/O side ------------------------------------------------------------------------------
    def pump(self) -> None:
        """One round of the worker's I/O (``Network.pump``): handle what arrived, say hello after a
        (re)connect, send due segments. The thread of ``start_io`` calls it in a loop; a caller that
        drives the worker from its own loop, without that thread, calls it instead."""
        self.network.pump()

    def send_stats(self) -> None:
        """Send a ``stats`` message now (the I/O thread sends one every ``stats_every_s``)."""
        self.network.send_stats()

    def start_io(self) -> None:
        """Start the background sender/receiver (``run`` does it)."""
        self.network.start()

    def stop_io(self) -> None:
        self.network.stop()

    # -- the env side ------------------------------------------------------------------------------
    def run(self, max_episodes: int | None = None, max_steps: int | None = None,
            stop_event: threading.Event | None = None, drain_timeout_s: float = 10.0) -> WorkerStats:
        """Run episodes until ``max_episodes``/``max_steps`` or ``stop_event``; then wait up to
        ``drain_timeout_s`` for the trainer to acknowledge what was produced (what is left stays
        in the state folder and is resent by the next run). Returns the counters."""
        stop_event = stop_event or threading.Event()
        self.start_io()
        try:
            if self.instances > 1:
                run_instances(self.runners, stop_event, max_episodes, max_steps)
                self._drain(drain_timeout_s)
                return self.stats
            if not self.runner.ready(stop_event):
                return self.stats
            episodes = steps = 0
            while not stop_event.is_set():
                if max_episodes is not None and episodes >= max_episodes:
                    break
                if max_steps is not None and steps >= max_steps:
                    break
                n = self.runner.run_episode(stop_event, None if max_steps is None else max_steps - steps)
                if n < 0:
                    break
                steps += n
                episodes += 1
            self._drain(drain_timeout_s)
            return self.stats
        finally:
            self.stop_io()

    def _drain(self, timeout_s: float) -> None:
        """Pack what was produced, then wait up to ``timeout_s`` for the trainer's last
        acknowledgements, unless the link can no longer bring any."""
        self.packer.flush(timeout_s)  # what was produced, in the outbox before the drain
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not getattr(self.link, "dead", ""):
            if self.outbox.wait_empty(min(0.5, max(0.0, deadline - time.monotonic()))):
                break

    def run_episode(self, stop_event: threading.Event | None = None, max_steps: int | None = None) -> int:
        """Run one episode on the calling thread and queue its segments in the outbox; returns
        its steps, or -1 when ``stop_event`` or ``max_steps`` cut it short (or stopped the wait
        for an env and a policy: the first weights, unless ``act_before_weights="random"``).

        Weights that arrived are loaded between steps; a greedy test episode the trainer asked
        for is run first. Nothing is sent from here: the I/O thread (``start_io``, which ``run``
        starts) or the caller's own ``pump()`` sends the segments."""
        if self.instances > 1:
            raise RuntimeError("run_episode drives one instance; a worker with several runs them with run()")
        stop_event = stop_event or threading.Event()
        if not self.runner.ready(stop_event):
            return -1
        steps = self.runner.run_episode(stop_event, max_steps)
        self.packer.flush()  # its segments are in the outbox when this returns
        return steps

    def close(self) -> None:
        """Pack what was produced, stop background I/O, close the outbox, the link and the env."""
        self.packer.close()
        self.stop_io()
        self.outbox.close()
        self.link.close()
        for runner in self.runners:
            if runner.env is not None and hasattr(runner.env, "close"):
                runner.env.close()


def _per_instance(given: Any, instances: int, what: str) -> list[Any]:
    """One ``env`` or ``actor`` per instance: None builds each from the config / the weights; a
    worker with several instances takes a sequence of as many, never one object shared by threads."""
    if instances == 1:
        return [given]
    if given is None:
        return [None] * instances
    if not isinstance(given, (list, tuple)) or len(given) != instances:
        raise ValueError(f"a worker with {instances} instances takes None or a list of {instances} {what}s")
    return list(given)


def _verifying_decoder(verify_key: Any) -> Callable[[bytes], Any]:
    """``rulka.net.weights.decode_weights`` with the trainer's public key."""
    def decode(data: bytes) -> Any:
        from rulka.net.weights import decode_weights

        return decode_weights(data, verify_key)

    return decode
