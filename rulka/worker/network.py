"""The worker's network side: one I/O thread (or the caller's own ``pump()`` loop) receives
weights, credit, welcome and acknowledgements, says hello, sends due segments from the outbox and
reports ``stats``.

It shares nothing with the env thread but what it is given: the ``Outbox`` and ``WorkerCounters``
(thread-safe, ``rulka.worker.outbox``), the ``WeightsInbox`` (verified weights and the evaluation
slot) and the ``CreditGate`` (the trainer's credit and welcome) below, and the ``WorkerStats`` it
counts bad messages and refused weights in and reads for its reports.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from rulka.errors import BadInput
from rulka.net.link import LinkClosed, Message, OutboxFull, WorkerLink
from rulka.net.messages import Ack, Credit, Hello, Stats, WeightsHeader, Welcome
from rulka.worker.outbox import Outbox, WorkerCounters

log = logging.getLogger(__name__)

HELLO_RESEND_S = 2.0  # a hello without a welcome is sent again this often (the trainer may be away)


class WeightsInbox:
    """Verified weights from the I/O thread to the env thread(s): for each reader (one per game
    instance, ``rulka-worker --instances``), the newest version it has not loaded yet, and apart
    from it the newest evaluation version (a newer plain version may replace it in the first slot;
    the env thread loads it between episodes only). Items are ``(blob, header)``; every reader
    holds the same decoded blob, so a version is received and verified once and loaded N times.

    The methods without a reader (``take``, ``take_eval``, ``loaded``, ``arrived``) are reader 0's,
    the only one of a single-instance worker."""

    def __init__(self, readers: int = 1) -> None:
        if readers < 1:
            raise ValueError("a WeightsInbox needs at least one reader")
        self._lock = threading.Lock()
        self.readers = [InboxReader(self._lock) for _ in range(readers)]

    def offer(self, blob: Any, header: WeightsHeader) -> bool:
        """Keep ``blob`` for every reader that has loaded nothing as new and holds nothing as new;
        False if it is new to none of them (stale)."""
        kept = False
        with self._lock:
            for reader in self.readers:
                kept = reader._offer(blob, header) or kept
        if kept:
            for reader in self.readers:
                reader.arrived.set()
        return kept

    def reader(self, index: int) -> InboxReader:
        return self.readers[index]

    def take(self) -> tuple[Any, WeightsHeader] | None:
        return self.readers[0].take()

    def take_eval(self) -> tuple[Any, WeightsHeader] | None:
        return self.readers[0].take_eval()

    def loaded(self, version: int) -> None:
        self.readers[0].loaded(version)

    @property
    def arrived(self) -> threading.Event:
        return self.readers[0].arrived


class InboxReader:
    """One env thread's slots in a ``WeightsInbox`` (``take``, ``take_eval``, ``loaded``, and
    ``arrived``, set when something new is kept for it)."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._pending: tuple[Any, WeightsHeader] | None = None
        self._eval: tuple[Any, WeightsHeader] | None = None
        self._loaded = 0  # the version this reader's env thread runs
        self.arrived = threading.Event()

    def _offer(self, blob: Any, header: WeightsHeader) -> bool:  # under the inbox's lock
        newest = max(self._loaded, self._pending[0].version if self._pending is not None else 0)
        if blob.version <= newest:
            return False
        self._pending = (blob, header)
        if header.candidate:
            self._eval = (blob, header)
        return True

    def take(self) -> tuple[Any, WeightsHeader] | None:
        """The newest version not loaded yet; from here on a copy of it (a re-send after a
        reconnect) is stale, even before its load ends (an actor's first load takes a while)."""
        with self._lock:
            item, self._pending = self._pending, None
            if item is not None:
                self._loaded = max(self._loaded, int(item[0].version))
        return item

    def take_eval(self) -> tuple[Any, WeightsHeader] | None:
        with self._lock:
            item, self._eval = self._eval, None
        return item

    def loaded(self, version: int) -> None:
        """The env thread runs ``version`` now (older ones are stale from here on)."""
        with self._lock:
            self._loaded = version


class CreditGate:
    """The trainer's credit (the next sequence number this worker may not reach; None: no credit
    yet, or given up) and its welcome, from the I/O thread to the env thread. ``wake`` is set on
    each (it also ends a wait for weights)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._limit: int | None = None
        self._granted_t = 0.0
        self.welcomed = threading.Event()
        self.wake = threading.Event()

    def grant(self, limit: int) -> None:
        with self._lock:
            self._limit, self._granted_t = limit, time.monotonic()
        self.wake.set()

    def welcome(self) -> None:
        if not self.welcomed.is_set():
            self.welcomed.set()
            self.wake.set()

    def over_limit(self, next_seq: int) -> tuple[bool, float]:
        """(whether ``next_seq`` has reached the credit, seconds since the last credit)."""
        with self._lock:
            return (self._limit is not None and next_seq >= self._limit), time.monotonic() - self._granted_t

    def give_up(self) -> None:
        """Act without credit until the trainer sends some again."""
        with self._lock:
            self._limit = None


class Network:
    """The I/O half of a worker. ``pump()`` is one round; ``start()`` runs it on a thread with
    a ``stats`` report every ``stats_every_s``. ``decoder``: bytes -> verified blob (``run_id``,
    ``version``, ``tensors``, ``header``), raising to refuse it. ``env_stats``: extra entries for
    the report (an env's loop timing), read on this thread."""

    def __init__(self, link: WorkerLink, outbox: Outbox, counters: WorkerCounters, stats: Any,
                 inbox: WeightsInbox, gate: CreditGate, decoder: Callable[[bytes], Any], *, test: bool,
                 resend_after_s: float, max_in_flight: int, stats_every_s: float,
                 env_stats: Callable[[], dict[str, float]]) -> None:
        self.link = link
        self.name = link.worker_id
        self.outbox = outbox
        self.counters = counters
        self.stats = stats
        self.inbox = inbox
        self.gate = gate
        self.decoder = decoder
        self.test = test
        self.resend_after_s = resend_after_s
        self.max_in_flight = max_in_flight
        self.stats_every_s = stats_every_s
        self.env_stats = env_stats
        self.stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._was_connected = False
        self._hello_t = -1e9
        self._rate = (time.monotonic(), 0)  # (when, steps then): samples per second since the last report

    # -- what arrives -----------------------------------------------------------------------------
    def _handle(self, msg: Message) -> None:
        if msg.kind == "weights":
            self._on_weights(msg.payload)
            return
        try:
            if msg.kind == Credit.KIND:
                self.gate.grant(Credit.decode(msg.payload).limit)
            elif msg.kind == Welcome.KIND:
                self._on_welcome(Welcome.decode(msg.payload))
            elif msg.kind == Ack.KIND:
                self.outbox.ack(Ack.decode(msg.payload).seqs)
            else:
                raise BadInput("kind", f"unexpected message kind {msg.kind!r}")
        except BadInput as exc:
            self.stats.bad_messages += 1
            log.warning("bad %s: %s", msg.kind, exc)

    def _on_weights(self, payload: bytes) -> None:
        try:
            blob = self.decoder(payload)
            header = WeightsHeader.from_wire(blob.header or {})
        except Exception as exc:  # noqa: BLE001 - unverifiable weights are refused, never loaded
            self.stats.weights_rejected += 1
            log.warning("refused weights: %s", str(exc)[:200])
            return
        self.stats.weights_received += 1  # one decode per version, whatever the instances
        if not self.inbox.offer(blob, header):
            self.stats.weights_stale += 1

    def _on_welcome(self, welcome: Welcome) -> None:
        before = self.counters.next_seq
        self.counters.bump_past(welcome.highest_seq)
        self.counters.bump_episode_past(welcome.highest_episode)
        if self.counters.next_seq != before:
            log.warning("the trainer has accepted segments up to %d from %s: numbering continues at %d, not %d",
                        welcome.highest_seq, self.name, self.counters.next_seq, before)
        self.gate.welcome()

    # -- what leaves ------------------------------------------------------------------------------
    def _send_hello(self, now: float) -> None:
        hello = Hello(self.counters.next_seq, self.counters.next_episode, len(self.outbox))
        try:
            self.link.send(Hello.KIND, hello.encode())
        except OutboxFull:
            return  # sent again within HELLO_RESEND_S
        self._hello_t = now

    def pump(self) -> None:
        """Handle what arrived (waits up to 20 ms for it), say hello after a (re)connect, and send
        due segments (new ones, and resends after a reconnect or ``resend_after_s``)."""
        try:
            for msg in self.link.receive(timeout=0.02):
                self._handle(msg)
        except LinkClosed:
            self.stop_event.set()
            return
        connected = self.link.connected()
        now = time.monotonic()
        if connected and not self._was_connected:
            # anything in flight when the connection dropped may be lost: send it again; say
            # hello first (the trainer answers with what it accepted and grants credit at once)
            self.outbox.resend_all()
            self._send_hello(now)
        elif connected and not self.gate.welcomed.is_set() and now - self._hello_t > HELLO_RESEND_S:
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
                self.stop_event.set()
                return
            self.outbox.mark_sent(seq, now)

    def report(self) -> dict[str, Any]:
        """The ``stats`` report: episodes, samples per second since the last one, weights
        version, unacknowledged segments..."""
        now, steps = time.monotonic(), self.stats.steps
        t0, steps0 = self._rate
        self._rate = (now, steps)
        s = self.stats
        out: dict[str, Any] = {
            "episodes": s.episodes, "samples_per_s": round((steps - steps0) / (now - t0), 2) if now > t0 else 0.0,
            "weights_version": s.weights_version, "weights_received": s.weights_received,
            "instances": getattr(s, "instances", 1), "segments_sent": self.outbox.sends,
            "unacked": len(self.outbox), "dropped": self.outbox.dropped, "resent": self.outbox.resends,
            "quarantined": self.outbox.quarantined, "steps": steps, "test": self.test,
            "next_seq": self.counters.next_seq, "paused_s": round(s.paused_s, 1),
            "pack_waits": s.pack_waits, "pack_wait_s": round(s.pack_wait_s, 2),
            "welcomed": self.gate.welcomed.is_set(),
        }
        try:
            out.update({f"env/{k}": float(v) for k, v in self.env_stats().items()})
        except Exception as exc:  # noqa: BLE001 - stats are best effort
            log.debug("env perf stats unavailable: %s", exc)
        return out

    def send_stats(self) -> None:
        try:
            self.link.send(Stats.KIND, Stats(self.report()).encode())
        except (OutboxFull, LinkClosed):
            pass

    # -- the thread -------------------------------------------------------------------------------
    def _loop(self) -> None:
        next_stats = time.monotonic() + min(1.0, self.stats_every_s)
        while not self.stop_event.is_set():
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

    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self.stop_event.clear()
            self._thread = threading.Thread(target=self._loop, name=f"worker-io-{self.name}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
