"""In-process links for the one-process debug mode and for unit tests.

``LocalHub`` plays the server: workers and the trainer of one process exchange ``Message``s
through it with the same semantics as the TLS links of ``rulka.net.tls``:

- ``worker_link(id).send(kind, payload)`` reaches the trainer with ``Message.sender == id``
  (the id given is the authenticated identity here; there is nothing to forge in one process);
- ``trainer_link().broadcast("weights", blob)`` reaches every worker and is retained: a worker
  link created later receives the latest weights at once;
- ``trainer_link().send_to(id, kind, payload)`` reaches one worker if its link is open now;
  otherwise it is dropped and counted (``no_route``), as the relay does (the worker resends
  what was not acknowledged);
- ``stats`` from any role are kept per sender for ``hub.status()`` (same schema as
  ``rulka.net.status.query_status``); worker stats also reach the trainer;
- a full queue raises ``OutboxFull`` from ``send`` so the caller applies its block/drop policy.

``hub.set_online(False)`` simulates a server outage for tests of resend logic: links report
``connected() == False`` and anything sent meanwhile is lost (the retained weights survive,
as they would with a trainer that republishes on reconnect).
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from rulka.net.link import TRAINER_ONLY_KINDS, LinkClosed, Message, OutboxFull, TrainerLink, WorkerLink
from rulka.net.messages import Stats
from rulka.net.stats import build_status, check_kind


class _Inbox:
    """A bounded FIFO of messages with a blocking ``get_all``."""

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self._items: collections.deque[Message] = collections.deque()
        self._cond = threading.Condition()
        self.dropped = 0

    def put(self, msg: Message, *, drop_oldest: bool) -> bool:
        with self._cond:
            if len(self._items) >= self.maxlen:
                if not drop_oldest:
                    return False
                self._items.popleft()
                self.dropped += 1
            self._items.append(msg)
            self._cond.notify_all()
            return True

    def get_all(self, timeout: float) -> list[Message]:
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            while not self._items:
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self._cond.wait(left)
            out = list(self._items)
            self._items.clear()
            return out

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


class LocalHub:
    """An in-process server. Thread-safe; create links with ``worker_link`` / ``trainer_link``.

    ``queue_size`` bounds each inbox (messages). The trainer inbox refuses when full (the worker's
    ``send`` raises ``OutboxFull``); a worker inbox drops its oldest message when full (counted in
    ``status()["server"]["dropped"]``), because a slow worker must never stall the trainer.
    """

    def __init__(self, queue_size: int = 1024) -> None:
        self._lock = threading.RLock()
        self._queue_size = queue_size
        self._trainer_inbox = _Inbox(queue_size)
        self._worker_inboxes: dict[str, _Inbox] = {}
        self._workers: dict[str, LocalWorkerLink] = {}
        self._trainer: LocalTrainerLink | None = None
        self._retained_weights: bytes | None = None
        self._stats: dict[str, tuple[float, dict[str, Any]]] = {}
        self._online = True
        self.counters: dict[str, int] = collections.defaultdict(int)

    # -- links ---------------------------------------------------------------------------------
    def worker_link(self, worker_id: str) -> LocalWorkerLink:
        """A new link for ``worker_id``; it receives the retained weights at once."""
        if not isinstance(worker_id, str) or not worker_id or worker_id == "trainer":
            raise ValueError(f"bad worker id {worker_id!r}")
        with self._lock:
            old = self._workers.get(worker_id)
            if old is not None and not old._closed:
                raise ValueError(f"worker {worker_id!r} already has an open link")
            inbox = self._worker_inboxes.setdefault(worker_id, _Inbox(self._queue_size))
            link = LocalWorkerLink(self, worker_id, inbox)
            self._workers[worker_id] = link
            if self._retained_weights is not None and self._online:
                inbox.put(Message("weights", "trainer", self._retained_weights), drop_oldest=True)
            return link

    def trainer_link(self) -> LocalTrainerLink:
        """The trainer's link (one open at a time)."""
        with self._lock:
            if self._trainer is not None and not self._trainer._closed:
                raise ValueError("a trainer link is already open")
            self._trainer = LocalTrainerLink(self, self._trainer_inbox)
            return self._trainer

    # -- test hooks ----------------------------------------------------------------------------
    def set_online(self, online: bool) -> None:
        """Simulate a server outage (False) and its return (True)."""
        with self._lock:
            self._online = online
            if online and self._retained_weights is not None:
                for wid, link in self._workers.items():
                    if not link._closed:
                        self._worker_inboxes[wid].put(
                            Message("weights", "trainer", self._retained_weights), drop_oldest=True)

    def online(self) -> bool:
        return self._online

    # -- status --------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Same schema as ``rulka.net.status.query_status``."""
        with self._lock:
            server = dict(self.counters)
            server["connected_workers"] = sum(1 for w in self._workers.values() if not w._closed)
            server["dropped"] = sum(i.dropped for i in self._worker_inboxes.values())
            addresses = {wid: "local" for wid in self._workers}
            return build_status(server, self._stats, addresses, now=time.time())

    # -- routing (called by links) -------------------------------------------------------------
    def _from_worker(self, worker_id: str, kind: str, payload: bytes) -> None:
        with self._lock:
            if not self._online:
                self.counters["lost_offline"] += 1
                return
            self.counters["messages_in"] += 1
            self.counters["bytes_in"] += len(payload)
            if kind == "stats":
                self._keep_stats(worker_id, payload)
        if not self._trainer_inbox.put(Message(kind, worker_id, payload), drop_oldest=False):
            with self._lock:
                self.counters["refused_full"] += 1
            raise OutboxFull(f"trainer queue is full ({self._queue_size} messages)")

    def _from_trainer(self, target: str | None, kind: str, payload: bytes) -> None:
        with self._lock:
            if kind == "stats":
                self._keep_stats("trainer", payload)
                return
            if not self._online:
                if kind == "weights" and target is None:
                    self._retained_weights = payload
                self.counters["lost_offline"] += 1
                return
            if target is None:
                if kind == "weights":
                    self._retained_weights = payload
                targets = [w for w, link in self._workers.items() if not link._closed]
            else:
                link = self._workers.get(target)
                if link is None or link._closed:
                    self.counters["no_route"] += 1
                    return
                targets = [target]
            msg = Message(kind, "trainer", payload)
            for wid in targets:
                inbox = self._worker_inboxes.setdefault(wid, _Inbox(self._queue_size))
                inbox.put(msg, drop_oldest=True)
                self.counters["messages_out"] += 1
                self.counters["bytes_out"] += len(payload)

    def _keep_stats(self, sender: str, payload: bytes) -> None:
        try:
            stats = Stats.decode(payload).values
        except Exception:  # bad stats never break the hub; count them
            self.counters["bad_stats"] += 1
            return
        self._stats[sender] = (time.time(), stats)

    def _closed_link(self) -> None:
        self._trainer_inbox.wake()


class LocalWorkerLink(WorkerLink):
    """A worker's side of a ``LocalHub``."""

    def __init__(self, hub: LocalHub, worker_id: str, inbox: _Inbox) -> None:
        self.worker_id = worker_id
        self._hub = hub
        self._inbox = inbox
        self._closed = False

    def send(self, kind: str, payload: bytes) -> None:
        """Queue ``payload`` for the trainer. Raises ``OutboxFull`` when the trainer queue is full."""
        if self._closed:
            raise LinkClosed(f"worker link {self.worker_id!r} is closed")
        check_kind(kind)
        if kind in TRAINER_ONLY_KINDS:
            raise ValueError(f"a worker cannot send {kind!r} messages")
        self._hub._from_worker(self.worker_id, kind, bytes(payload))

    def receive(self, timeout: float = 0.0) -> list[Message]:
        if self._closed:
            raise LinkClosed(f"worker link {self.worker_id!r} is closed")
        return self._inbox.get_all(timeout)

    def connected(self) -> bool:
        return not self._closed and self._hub.online()

    def close(self) -> None:
        self._closed = True
        self._inbox.wake()


class LocalTrainerLink(TrainerLink):
    """The trainer's side of a ``LocalHub``."""

    def __init__(self, hub: LocalHub, inbox: _Inbox) -> None:
        self._hub = hub
        self._inbox = inbox
        self._closed = False

    def broadcast(self, kind: str, payload: bytes) -> None:
        if self._closed:
            raise LinkClosed("trainer link is closed")
        check_kind(kind)
        self._hub._from_trainer(None, kind, bytes(payload))

    def send_to(self, worker_id: str, kind: str, payload: bytes) -> None:
        if self._closed:
            raise LinkClosed("trainer link is closed")
        check_kind(kind)
        self._hub._from_trainer(worker_id, kind, bytes(payload))

    def receive(self, timeout: float = 0.0) -> list[Message]:
        if self._closed:
            raise LinkClosed("trainer link is closed")
        return self._inbox.get_all(timeout)

    def connected(self) -> bool:
        return not self._closed and self._hub.online()

    def close(self) -> None:
        self._closed = True
        self._hub._closed_link()
