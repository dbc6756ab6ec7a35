"""The worker role: run episodes with the current policy, send them as segments, load new weights.

The env loop never waits on the network: finished segments go to the ``Outbox`` (bounded,
durable when a state folder is given) and a background thread sends them, handles
acknowledgements, resends after a reconnect or a timeout, decodes and verifies weights, and
reports ``stats``. Verified weights are swapped in between two env steps, and only when their
version is newer than the one loaded.

A worker needs nothing but a link: when no env or actor is given, it builds them from the run
config and the ``actor_spec`` that come with the first weights (so a gaming PC needs only the
server address and its credentials).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rulka.agents.acting import build_actor
from rulka.compress import SegmentDecoder, ZstdCompressor, codec_name, frame_segment
from rulka.config import ConfigLike, RulkaConfig, as_config
from rulka.envs.map_cycle import MapCycle
from rulka.errors import BadInput, UserError
from rulka.interfaces import ActorModule, SampleCompressor
from rulka.net.hello import Hello, decode_welcome, encode_hello
from rulka.net.link import LinkClosed, Message, OutboxFull, WorkerLink
from rulka.plugins import build_plugin, make_env, obs_to_arrays
from rulka.segment import ALLOWED_DTYPES, Segment, pack, unpack
from rulka.worker.outbox import Outbox, WorkerCounters

log = logging.getLogger(__name__)

# sections of the run config a worker needs; the trainer sends them with the weights


@dataclass
class WorkerStats:
    """What a worker has done so far (also sent as ``stats`` messages)."""

    episodes: int = 0
    steps: int = 0
    segments: int = 0
    weights_version: int = 0
    weights_loaded: int = 0
    weights_rejected: int = 0
    weights_stale: int = 0
    bad_messages: int = 0
    paused_s: float = 0.0  # time spent waiting for the trainer's credit
    credit_timeouts: int = 0  # waits given up because no credit message came for CREDIT_TIMEOUT_S
    eval_episodes: int = 0  # greedy test episodes run at the trainer's request
    last_returns: list[float] = field(default_factory=list)


CREDIT_TIMEOUT_S = 60.0  # no credit message for this long: the trainer is gone, stop waiting for it
HELLO_RESEND_S = 2.0  # a hello without a welcome is sent again this often (the trainer may be away)
# the best policy's candidate races from moved starts (trainer.best_policy_start_noise): the k-th on
# a map from the simulator's start seed CANDIDATE_START_SEED + k, apart from the seeds 1..K
# bench/learning.py's perturbed races use, so the bench judges a best policy on starts it was not
# picked on; a start noise over MAX_START_NOISE metres (degrees) is refused as corrupt
CANDIDATE_START_SEED = 1000
MAX_START_NOISE = 10.0


def decode_credit(payload: bytes) -> int:
    """A ``credit`` payload (msgpack ``{"limit": n}``) -> n; BadInput if malformed."""
    try:
        data = unpack(payload)
    except Exception as exc:  # noqa: BLE001 - anything a peer sends
        raise BadInput(f"credit is not msgpack: {exc}") from exc
    limit = data.get("limit") if isinstance(data, dict) else None
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise BadInput("credit must be a map with a non-negative integer 'limit'")
    return limit


def decode_ack(payload: bytes) -> list[int]:
    """An ``ack`` payload (msgpack list of sequence numbers) -> list; BadInput if malformed."""
    obj = unpack(payload, max_bytes=16 << 20)
    if not isinstance(obj, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in obj):
        raise BadInput("ack", "not a list of ints")
    return obj


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


class EpisodeBuffer:
    """Collects one segment's worth of steps; the last observation carries over to the next."""

    def __init__(self) -> None:
        self.obs: list[dict[str, np.ndarray]] = []
        self.actions: list[Any] = []
        self.rewards: list[float] = []
        self.terminated: list[bool] = []
        self.truncated: list[bool] = []
        self.extras: dict[str, list[Any]] = {}
        self.first_step = 0

    def start(self, obs_arrays: dict[str, np.ndarray], first_step: int) -> None:
        self.__init__()
        self.obs.append(obs_arrays)
        self.first_step = first_step

    def add(self, action: Any, extras: dict[str, Any], reward: float, terminated: bool, truncated: bool,
            next_obs: dict[str, np.ndarray]) -> None:
        self.actions.append(action)
        self.rewards.append(reward)
        self.terminated.append(terminated)
        self.truncated.append(truncated)
        for k, v in extras.items():
            self.extras.setdefault(k, []).append(v)
        self.obs.append(next_obs)

    def __len__(self) -> int:
        return len(self.actions)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {k: np.stack([o[k] for o in self.obs]) for k in self.obs[0]}
        first = np.asarray(self.actions[0])
        if np.issubdtype(first.dtype, np.integer):  # one discrete action, or a block of them (T, N)
            out["action"] = np.asarray(self.actions, np.int64)
        else:
            out["action"] = np.asarray(self.actions, np.float32)
        out["reward"] = np.asarray(self.rewards, np.float32)
        out["terminated"] = np.asarray(self.terminated, bool)
        out["truncated"] = np.asarray(self.truncated, bool)
        for k, vals in self.extras.items():
            if len(vals) != len(self.actions):  # an extra missing at some step is not recorded
                continue
            try:
                arr = np.asarray(vals)
            except ValueError:  # ragged: not an array
                continue
            if arr.dtype == np.float64:
                arr = arr.astype(np.float32)
            if arr.dtype.name in ALLOWED_DTYPES:  # strings and objects never cross the wire
                out[f"extra/{k}"] = arr
        return out


class Worker:
    """Runs episodes and delivers them through ``link``.

    Args:
        cfg: the run config (a ``RulkaConfig``, or a mapping of sections / a YAML path, validated
            here by ``rulka.config.as_config``), or None to take it from the first weights (until
            then the worker's own knobs are the built-in defaults).
        link: a connected ``WorkerLink`` (``rulka.net.connect_worker`` or ``LocalHub.worker_link``).
        env: a Gymnasium-API env; None builds it from the config.
        actor: an ``ActorModule``; None builds it from the ``actor_spec`` of the first weights.
            A given actor is used at once (version 0) until newer weights arrive.
        compressor: a ``SampleCompressor``; None builds ``worker.compressor`` ("zstd").
        weights_decoder: bytes -> verified weights blob (``run_id``, ``version``, ``tensors``,
            ``actor_spec``); raise to reject. Default: ``rulka.net.weights.decode_weights`` with
            ``verify_key``.
        state_dir: where sequence numbers and unacknowledged segments persist
            (``worker.spill_dir``); None keeps them in memory only.
        test: greedy actions only (evaluation episodes, ``Segment.evaluation``). Without it, the
            worker still runs greedy test episodes when weights ask for them (``eval_episodes``
            and ``eval_worker`` in the actor spec: ``trainer.eval_every_versions``).
        act_before_weights: ``"wait"`` for the first weights (default) or ``"random"``
            (``env.action_space.sample()``) when no actor is available yet.
        produced_log: optional text file; one ``seq`` line per produced segment (audits, tests).
        max_steps_per_s: cap on env steps per second (a fast gym env would otherwise flood a
            small trainer; real-time envs pace themselves).
        wait_for_welcome: number no segment before the trainer's ``welcome`` (its highest
            accepted sequence number, ``rulka.net.hello``). None (default): wait when the numbers
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
    ) -> None:
        if link is None:
            raise ValueError("Worker needs a link")
        if act_before_weights not in ("wait", "random"):
            raise ValueError("act_before_weights must be 'wait' or 'random'")
        self.cfg: RulkaConfig | None = as_config(cfg) if cfg is not None else None
        self._defaults = self.cfg if self.cfg is not None else as_config(None)
        self.link = link
        self.name = link.worker_id
        self.env = env
        self.actor = actor
        self.compressor = compressor
        self._frames_played = 0  # the trainer's frame count, from the latest weights
        # the codec name each segment's header carries (a given compressor names itself)
        self._codec = codec_name(compressor) if compressor is not None else ""
        self.test = test
        self.act_before_weights = act_before_weights
        self.stats_every_s = stats_every_s
        self.resend_after_s = resend_after_s
        self.max_in_flight = max_in_flight
        self._max_steps_per_s = max_steps_per_s
        self.min_step_s = 0.0
        self._apply_step_cap()
        self._next_step_t = 0.0
        self.run_id = ""
        self.stats = WorkerStats()
        self._decoder = weights_decoder or self._default_decoder(verify_key)
        wc = self._settings().worker
        state_dir = state_dir if state_dir is not None else wc.spill_dir
        self.state_dir = Path(state_dir).expanduser() if state_dir is not None else None
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
        self.segment_max_steps = wc.segment_max_steps
        # sequence numbers: the trainer's welcome says what it has accepted (see rulka.net.hello)
        self.wait_for_welcome = (self.state_dir is not None and not self.counters.intact
                                 if wait_for_welcome is None else bool(wait_for_welcome))
        self._welcomed = threading.Event()
        self._hello_t = -1e9
        self._produced_log = Path(produced_log) if produced_log is not None else None
        self._map_cycle: MapCycle | bool | None = None  # built from the config; False: none configured
        self._pending: Any = None  # newest verified weights blob not loaded yet
        # the trainer's evaluation version (weights with eval_policy, rulka.trainer.best): the
        # map cycle's greedy entries drive with it, swapped only between episodes
        self._eval_blob: Any = None  # newest evaluation version not loaded into eval_actor yet
        self.eval_actor: Any = None
        self.eval_version: int | None = None
        self.eval_pending = 0  # greedy test episodes the trainer asked for, not run yet
        self.eval_policy_pending = 0  # greedy episodes of the evaluation version asked for (best policy)
        self.eval_start_noise = 0.0  # the simulator's start moved this far for those episodes (metres, degrees)
        self._eval_starts: dict[str, int] = {}  # per map: the evaluation version's moved starts driven so far
        self._pending_lock = threading.Lock()
        self._weights_event = threading.Event()
        self._stop = threading.Event()
        self._io_thread: threading.Thread | None = None
        self._was_connected = False
        self._rate_t0 = time.monotonic()
        self._rate_steps = 0
        self._samples_per_s = 0.0
        self._start_rng = np.random.default_rng()
        self._start_seed = 0
        self._start_left = 0
        # flow control: the trainer's credit (next seq this worker may not reach), None = none yet
        self._credit_limit: int | None = None
        self._credit_t = 0.0
        self._credit_event = threading.Event()

    # -- weights --------------------------------------------------------------------------------
    @staticmethod
    def _default_decoder(verify_key: Any) -> Callable[[bytes], Any]:
        def decode(data: bytes) -> Any:
            from rulka.net.weights import decode_weights

            return decode_weights(data, verify_key)

        return decode

    def _on_weights(self, payload: bytes) -> None:
        try:
            blob = self._decoder(payload)
        except Exception as exc:  # noqa: BLE001 - unverifiable weights are refused, never loaded
            self.stats.weights_rejected += 1
            log.warning("refused weights: %s", str(exc)[:200])
            return
        with self._pending_lock:
            newest = max(self.stats.weights_version, self._pending.version if self._pending is not None else 0)
            if blob.version <= newest:
                self.stats.weights_stale += 1
                return
            self._pending = blob
            if (blob.actor_spec or {}).get("eval_policy") is True:
                self._eval_blob = blob  # kept apart: a newer blob may replace it in _pending
        self._weights_event.set()

    def _swap_weights(self) -> bool:
        """Load pending weights (between env steps). True if something was loaded."""
        with self._pending_lock:
            blob, self._pending = self._pending, None
        if blob is None:
            return False
        spec = dict(blob.actor_spec or {})
        if self.cfg is None and isinstance(spec.get("run_config_json"), str):
            try:
                self.cfg = self._config_from_dict(json.loads(spec["run_config_json"]))
            except (ValueError, UserError) as exc:  # bad JSON, or a config that does not validate
                log.warning("weights v%d carry an unreadable run config: %s", blob.version, exc)
                self.stats.weights_rejected += 1
                return False
            self._apply_step_cap()
        elif self.cfg is None and isinstance(spec.get("run_config"), dict):
            try:
                self.cfg = self._config_from_dict(spec["run_config"])
            except UserError as exc:
                log.warning("weights v%d carry an invalid run config: %s", blob.version, exc)
                self.stats.weights_rejected += 1
                return False
            self._apply_step_cap()
        if self.actor is None:
            if "actor" not in spec:
                log.warning("weights v%d carry no actor_spec; cannot build an actor", blob.version)
                self.stats.weights_rejected += 1
                return False
            self.actor = build_actor(spec["actor"], spec.get("kwargs"), self.cfg)
        self.actor.load_weights(blob.tensors)
        frames = spec.get("frames_played")
        if isinstance(frames, int) and not isinstance(frames, bool) and frames >= 0:
            self._frames_played = frames
            self._tell_env_frames_played()
        self._take_eval_request(spec)
        self.stats.weights_version = int(blob.version)
        self.stats.weights_loaded += 1
        self.run_id = str(blob.run_id)
        log.debug("loaded weights v%d", blob.version)
        return True

    def _take_eval_request(self, spec: dict[str, Any]) -> None:
        """Weights may ask for greedy test episodes: ``eval_episodes`` N, from ``eval_worker``
        (this worker's name, or empty for any worker)."""
        n = spec.get("eval_episodes")
        target = spec.get("eval_worker", "")
        if isinstance(n, int) and not isinstance(n, bool) and n > 0 and target in ("", self.name):
            self.eval_pending = max(self.eval_pending, min(n, 100))

    def _apply_step_cap(self) -> None:
        # the command line wins over worker.max_steps_per_s (which may arrive with the weights)
        cap = self._max_steps_per_s or self._settings().worker.max_steps_per_s
        self.min_step_s = 1.0 / float(cap) if cap else 0.0

    @staticmethod
    def _config_from_dict(d: dict[str, Any]) -> RulkaConfig:
        return as_config(d)

    def _settings(self) -> RulkaConfig:
        """The run config, or the built-in defaults until one arrives with the weights."""
        return self.cfg if self.cfg is not None else self._defaults

    # -- background I/O ---------------------------------------------------------------------------
    def _handle(self, msg: Message) -> None:
        if msg.kind == "weights":
            self._on_weights(msg.payload)
        elif msg.kind == "credit":
            try:
                self._credit_limit = decode_credit(msg.payload)
                self._credit_t = time.monotonic()
                self._credit_event.set()
            except BadInput as exc:
                self.stats.bad_messages += 1
                log.warning("bad credit: %s", exc)
        elif msg.kind == "welcome":
            self._on_welcome(msg.payload)
        elif msg.kind == "ack":
            try:
                self.outbox.ack(decode_ack(msg.payload))
            except BadInput as exc:
                self.stats.bad_messages += 1
                log.warning("bad ack: %s", exc)
        else:
            self.stats.bad_messages += 1

    def _on_welcome(self, payload: bytes) -> None:
        try:
            welcome = decode_welcome(payload)
        except BadInput as exc:
            self.stats.bad_messages += 1
            log.warning("bad welcome: %s", exc)
            return
        before = self.counters.next_seq
        self.counters.bump_past(welcome.highest_seq)
        self.counters.bump_episode_past(welcome.highest_episode)
        if self.counters.next_seq != before:
            log.warning("the trainer has accepted segments up to %d from %s: numbering continues at %d, not %d",
                        welcome.highest_seq, self.name, self.counters.next_seq, before)
        if not self._welcomed.is_set():
            self._welcomed.set()
            self._credit_event.set()  # wakes an env loop waiting for the welcome

    def _send_hello(self, now: float) -> None:
        hello = Hello(self.counters.next_seq, self.counters.next_episode, len(self.outbox))
        try:
            self.link.send("hello", encode_hello(hello))
        except OutboxFull:
            return  # sent again within HELLO_RESEND_S
        self._hello_t = now

    def pump(self) -> None:
        """One round of the worker's I/O: handle what arrived (weights, acks, credit, welcome;
        waits up to 20 ms for it), say hello after a (re)connect, and send due segments from the
        outbox (new ones, and resends after a reconnect or ``resend_after_s``). The background
        thread of ``start_io`` calls it in a loop; a caller that drives the worker from its own
        loop, without that thread, calls it instead."""
        try:
            for msg in self.link.receive(timeout=0.02):
                self._handle(msg)
        except LinkClosed:
            self._stop.set()
            return
        connected = self.link.connected()
        now = time.monotonic()
        if connected and not self._was_connected:
            # anything in flight when the connection dropped may be lost: send it again; say
            # hello first (the trainer answers with what it accepted and grants credit at once)
            self.outbox.resend_all()
            self._send_hello(now)
        elif connected and not self._welcomed.is_set() and now - self._hello_t > HELLO_RESEND_S:
            self._send_hello(now)
        self._was_connected = connected
        if not connected:
            return
        for seq, payload in self.outbox.due(now, self.resend_after_s, self.max_in_flight, limit=32):
            try:
                self.link.send("segment", payload)
            except OutboxFull:
                break  # the link is saturated; try again on the next round
            except ValueError as exc:  # over network.max_message_bytes: it can never be sent
                self.outbox.quarantine(seq, str(exc))
                continue
            except LinkClosed:
                self._stop.set()
                return
            self.outbox.mark_sent(seq, now)

    def send_stats(self) -> None:
        """Send a ``stats`` message now (episodes, samples per second, weights version,
        unacknowledged segments...: what the server's status table and the trainer's per-worker
        metrics show). The I/O thread sends one every ``stats_every_s``."""
        from rulka.net.stats import encode_stats

        now = time.monotonic()
        dt = now - self._rate_t0
        if dt > 0:
            self._samples_per_s = self._rate_steps / dt
        self._rate_t0, self._rate_steps = now, 0
        stats = {
            "episodes": self.stats.episodes, "samples_per_s": round(self._samples_per_s, 2),
            "weights_version": self.stats.weights_version, "segments_sent": self.outbox.sends,
            "unacked": len(self.outbox), "dropped": self.outbox.dropped, "resent": self.outbox.resends,
            "quarantined": self.outbox.quarantined, "steps": self.stats.steps, "test": self.test, "next_seq": self.counters.next_seq,
            "paused_s": round(self.stats.paused_s, 1), "welcomed": self._welcomed.is_set(),
        }
        perf = getattr(self.env, "perf_stats", None)  # real-time envs report their loop timing
        if callable(perf):
            try:
                stats.update({f"env/{k}": float(v) for k, v in perf().items()})
            except Exception as exc:  # noqa: BLE001 - stats are best effort
                log.debug("env perf stats unavailable: %s", exc)
        try:
            self.link.send("stats", encode_stats(stats))
        except (OutboxFull, LinkClosed):
            pass

    def _io_loop(self) -> None:
        next_stats = time.monotonic() + min(1.0, self.stats_every_s)
        while not self._stop.is_set():
            try:
                self.pump()
                if time.monotonic() >= next_stats:
                    self.send_stats()
                    next_stats = time.monotonic() + self.stats_every_s
            except Exception:  # noqa: BLE001 - the I/O thread must survive anything a peer sends
                log.exception("worker I/O error")
                time.sleep(0.1)
            if not self.link.connected():
                time.sleep(0.05)

    def start_io(self) -> None:
        """Start the background sender/receiver (``run`` does it)."""
        if self._io_thread is None or not self._io_thread.is_alive():
            self._stop.clear()
            self._io_thread = threading.Thread(target=self._io_loop, name=f"worker-io-{self.name}", daemon=True)
            self._io_thread.start()

    def stop_io(self) -> None:
        self._stop.set()
        if self._io_thread is not None:
            self._io_thread.join(timeout=5.0)

    # -- env loop -------------------------------------------------------------------------------
    def _ensure_ready(self, stop_event: threading.Event) -> bool:
        """Have an env and a policy (or random acting); wait for weights when needed."""
        while not stop_event.is_set():
            self._swap_weights()
            if self.env is None and self.cfg is not None:
                self.env = make_env(self.cfg)
            if self.compressor is None and (self.cfg is not None or self.actor is not None):
                cfg = self._settings()
                name = cfg.worker.compressor
                self.compressor = build_plugin("compressor", name, cfg.worker.compressor_kwargs, cfg)
                self._codec = codec_name(self.compressor, name)
                if self.cfg is not None:  # else the constructor's value stays
                    self.segment_max_steps = self.cfg.worker.segment_max_steps
            if self.env is not None and self.compressor is not None and (
                    self.actor is not None or self.act_before_weights == "random"):
                return True
            if self._weights_event.wait(0.2):
                self._weights_event.clear()
        return False

    def _wait_for_credit(self, stop_event: threading.Event) -> None:
        """Between segments: wait while the trainer's credit is used up (``worker.pause_for_credit``;
        a real-time game sets it false and keeps acting). Weights keep loading while waiting; no
        credit message for ``CREDIT_TIMEOUT_S`` (trainer gone) ends the wait, counted."""
        if not self._settings().worker.pause_for_credit:
            return

        def blocked() -> bool:
            if self._credit_limit is None or self.counters.next_seq < self._credit_limit:
                return False
            if time.monotonic() - self._credit_t > CREDIT_TIMEOUT_S:
                self.stats.credit_timeouts += 1
                self._credit_limit = None
                log.warning("no credit from the trainer for %.0f s: acting without it", CREDIT_TIMEOUT_S)
                return False
            return True

        self._pause_while(blocked, stop_event)

    def _wait_for_welcome(self, stop_event: threading.Event) -> None:
        """Before numbering anything when the numbers are not known to be fresh
        (``wait_for_welcome``): wait for the trainer's welcome. No time limit: numbering without
        it could make the trainer drop new segments as duplicates."""
        if not self.wait_for_welcome or self._welcomed.is_set():
            return
        t0 = time.monotonic()
        next_log = t0 + 5.0

        def blocked() -> bool:
            nonlocal next_log
            if self._welcomed.is_set():
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
                self._credit_event.wait(0.05)
                self._credit_event.clear()
                self._swap_weights()
        finally:
            if callable(release):
                release()
        self.stats.paused_s += time.monotonic() - t0
        self._next_step_t = time.monotonic()  # the step cap does not make up for the pause

    def _tell_env_frames_played(self) -> None:
        # an env with frame-driven schedules (the TrackMania pipeline's engineered rewards) follows
        # the trainer's frame count, which comes with the weights
        if self.env is None:
            return
        set_frames = getattr(getattr(self.env, "unwrapped", self.env), "set_frames_played", None)
        if callable(set_frames):
            set_frames(self._frames_played)

    def _act(self, obs: Any, test: bool, actor: Any = None) -> tuple[Any, dict[str, Any]]:
        actor = actor if actor is not None else self.actor
        if actor is None:
            return self.env.action_space.sample(), {}
        return actor.act_with_info(obs, test=test)

    def _take_eval_version(self) -> None:
        """Load the newest evaluation version into ``eval_actor`` (between episodes only, so one
        greedy race is one version)."""
        with self._pending_lock:
            blob, self._eval_blob = self._eval_blob, None
        if blob is None or self.actor is None:
            return
        spec = dict(blob.actor_spec or {})
        try:
            if self.eval_actor is None:
                self.eval_actor = build_actor(spec["actor"], spec.get("kwargs"), self.cfg)
            self.eval_actor.load_weights(blob.tensors)
        except Exception as exc:  # noqa: BLE001 - the same weights loaded into self.actor; never fatal
            log.warning("evaluation version v%d not loaded: %s", blob.version, str(exc)[:200])
            self.eval_actor, self.eval_version = None, None
            return
        self.eval_version = int(blob.version)
        # a run without greedy map-cycle entries asks one worker for the candidate's greedy episodes
        n, target = spec.get("eval_policy_episodes"), spec.get("eval_policy_worker", "")
        self.eval_policy_pending = (min(n, 100) if isinstance(n, int) and not isinstance(n, bool) and n > 0
                                    and target in ("", self.name) else 0)
        noise = spec.get("eval_policy_start_noise")
        self.eval_start_noise = (float(noise) if isinstance(noise, (int, float)) and not isinstance(noise, bool)
                                 and 0.0 < noise <= MAX_START_NOISE else 0.0)
        self._eval_starts = {}

    def _produce(self, buf: EpisodeBuffer, episode_id: int, index: int, done: bool,
                 info: dict[str, Any], stop_event: threading.Event, test: bool = False,
                 policy_version: int | None = None) -> bool:
        seq = self.counters.take_seq()
        seg = Segment(
            run_id=self.run_id, worker_id=self.name, episode_id=episode_id, seq=seq, index_in_episode=index,
            first_step=buf.first_step,
            policy_version=self.stats.weights_version if policy_version is None else policy_version,
            arrays=buf.arrays(), episode_done=done, map_name=str(info.get("map_name") or info.get("track") or ""),
            evaluation=test, info=info,
        )
        payload = frame_segment(self._codec, self.compressor.compress(seg))
        if not self.outbox.add(seq, payload, stop_event):
            return False
        self.stats.segments += 1
        if self._produced_log is not None:
            with open(self._produced_log, "a") as f:
                f.write(f"{seq}\n")
        return True

    def run(self, max_episodes: int | None = None, max_steps: int | None = None,
            stop_event: threading.Event | None = None, drain_timeout_s: float = 10.0) -> WorkerStats:
        """Run episodes until ``max_episodes``/``max_steps`` or ``stop_event``; then wait up to
        ``drain_timeout_s`` for the trainer to acknowledge what was produced (what is left stays
        in the state folder and is resent by the next run). Returns the counters."""
        stop_event = stop_event or threading.Event()
        self.start_io()
        try:
            if not self._ensure_ready(stop_event):
                return self.stats
            episodes = steps = 0
            while not stop_event.is_set():
                if max_episodes is not None and episodes >= max_episodes:
                    break
                if max_steps is not None and steps >= max_steps:
                    break
                n = self.run_episode(stop_event, None if max_steps is None else max_steps - steps)
                if n < 0:
                    break
                steps += n
                episodes += 1
            # wait for the last acknowledgements, unless the link can no longer bring any
            deadline = time.monotonic() + drain_timeout_s
            while time.monotonic() < deadline and not getattr(self.link, "dead", ""):
                if self.outbox.wait_empty(min(0.5, max(0.0, deadline - time.monotonic()))):
                    break
            return self.stats
        finally:
            self.stop_io()

    def run_episode(self, stop_event: threading.Event | None = None, max_steps: int | None = None) -> int:
        """Run one episode on the calling thread and queue its segments in the outbox; returns
        its steps, or -1 when ``stop_event`` or ``max_steps`` cut it short (or stopped the wait
        for an env and a policy: the first weights, unless ``act_before_weights="random"``).

        Weights that arrived are loaded between steps; a greedy test episode the trainer asked
        for (``eval_pending``) is run first. Nothing is sent from here: the I/O thread
        (``start_io``, which ``run`` starts) or the caller's own ``pump()`` sends the segments."""
        stop_event = stop_event or threading.Event()
        if not self._ensure_ready(stop_event):
            return -1
        if not self.test:
            self._take_eval_version()
        # the best policy's candidate first (rulka.trainer.best), then the trainer's test episodes
        candidate = not self.test and self.eval_policy_pending > 0 and self.eval_actor is not None
        requested = candidate or (not self.test and self.eval_pending > 0 and self.actor is not None)
        n = self._run_episode(stop_event, max_steps, requested, candidate)
        if n >= 0 and requested:
            if candidate:
                self.eval_policy_pending -= 1
            else:
                self.eval_pending -= 1
            self.stats.eval_episodes += 1
        return n

    def _next_start(self) -> int | None:
        """The reset seed of the next episode when ``worker.rollouts_per_start`` > 1: the same
        seed for that many episodes in a row (the same start state), then a fresh one."""
        per_start = self._settings().worker.rollouts_per_start
        if per_start <= 1:
            return None
        if self._start_left <= 0:
            self._start_seed = int(self._start_rng.integers(2**31 - 1))
            self._start_left = per_start
        self._start_left -= 1
        return self._start_seed

    def _run_episode(self, stop_event: threading.Event, step_budget: int | None, requested_test: bool = False,
                     candidate: bool = False) -> int:
        """One episode; returns its steps, or -1 if it was cut short by ``stop_event``.

        Greedy (an evaluation episode) for a test worker, for a map-cycle entry with
        ``is_exploration: false``, and for a test episode the trainer asked for
        (``requested_test``: never stored for training, and it uses up no GRPO start;
        ``candidate``: driven by the evaluation version, for the trainer's best policy)."""
        self._wait_for_welcome(stop_event)
        self._wait_for_credit(stop_event)
        if stop_event.is_set():
            return -1
        episode_id = self.counters.take_episode()
        start_id = None if requested_test else self._next_start()
        if self._map_cycle is None and self.cfg is not None:
            self._map_cycle = MapCycle.from_config(self.cfg) or False
        entry = self._map_cycle.next() if self._map_cycle else None
        # a map-cycle entry with is_exploration false is an evaluation episode (greedy); one with
        # fill_buffer false reaches the trainer for its metrics but not its memory
        test = self.test or requested_test or (entry is not None and not entry.is_exploration)
        keep: dict[str, Any] = {} if (entry is None or entry.fill_buffer) and not requested_test else {"fill_buffer": False}
        # a map-cycle greedy entry drives with the trainer's evaluation version when there is one
        actor = None
        if candidate or (entry is not None and not entry.is_exploration and not requested_test):
            self._take_eval_version()
            if self.eval_actor is not None and self.eval_version is not None:
                actor = self.eval_actor
                keep["eval_policy_version"] = self.eval_version
        self._tell_env_frames_played()
        options: dict[str, Any] = MapCycle.reset_options(entry) if entry is not None else {}
        if candidate and self.eval_start_noise > 0.0:
            # the k-th race on a map from the k-th moved start: the same starts for every candidate
            on_map = str(options.get("short_name", ""))
            k = self._eval_starts.get(on_map, 0)
            self._eval_starts[on_map] = k + 1
            options.update(start_noise=self.eval_start_noise, start_seed=CANDIDATE_START_SEED + k)
        if options:
            obs, reset_info = self.env.reset(seed=start_id, options=options)
        else:
            obs, reset_info = self.env.reset(seed=start_id)
        for a in {id(x): x for x in (self.actor, actor) if x is not None}.values():
            a.reset()
        buf = EpisodeBuffer()
        buf.start(obs_to_arrays(obs, reset_info), 0)
        index = 0
        ret = 0.0
        step = 0
        info: dict[str, Any] = {}
        while True:
            if stop_event.is_set() or (step_budget is not None and step >= step_budget):
                return -1
            self._swap_weights()
            if self.min_step_s:
                now = time.monotonic()
                if now < self._next_step_t:
                    time.sleep(self._next_step_t - now)
                self._next_step_t = max(now, self._next_step_t) + self.min_step_s
            action, extras = self._act(obs, test, actor)
            obs, reward, terminated, truncated, info = self.env.step(action)
            ret += float(reward)
            step += 1
            self.stats.steps += 1
            self._rate_steps += 1
            done = bool(terminated or truncated)
            buf.add(action, extras, float(reward), bool(terminated), bool(truncated), obs_to_arrays(obs, info))
            if done or len(buf) >= self.segment_max_steps:
                seg_info: dict[str, Any] = dict(keep)
                if done:
                    seg_info.update(episode_return=ret, episode_length=step)
                    if start_id is not None:  # episodes of one start: GRPO groups them
                        seg_info["start_id"] = start_id
                    for key in ("race_time_ms", "finished", "map_name", "track", "progress_m", "reference_time_ms"):
                        value = info.get(key) if isinstance(info, dict) else None
                        if isinstance(value, (bool, int, float, str, np.generic)):
                            seg_info[key] = value.item() if isinstance(value, np.generic) else value
                # the version that chose the actions: the evaluation version on its greedy entries
                if not self._produce(buf, episode_id, index, done, seg_info, stop_event, test,
                                     keep.get("eval_policy_version")):
                    return -1
                index += 1
                if done:
                    break
                self._wait_for_credit(stop_event)
                buf.start(buf.obs[-1], step)
        self.stats.episodes += 1
        self.stats.last_returns = (self.stats.last_returns + [ret])[-100:]
        return step

    def close(self) -> None:
        """Stop background I/O, close the outbox, the link and the env."""
        self.stop_io()
        self.outbox.close()
        self.link.close()
        if self.env is not None and hasattr(self.env, "close"):
            self.env.close()


def encode_ack(seqs: list[int]) -> bytes:
    """The ``ack`` payload for ``seqs``."""
    return pack(list(seqs))
