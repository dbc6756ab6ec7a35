"""The worker's delivery guarantees: sequence numbers that survive restarts (``WorkerCounters``,
rulka.worker.counters) and a bounded store of segments the trainer has not acknowledged yet.

Every segment a worker produces gets the next sequence number of that worker and is kept until
the trainer acknowledges it; the sender resends what is not acknowledged after a reconnect or a
timeout, and the trainer drops what it has already seen, so delivery is exactly-once after
dedupe. With a ``directory`` the store is durable: each segment is written to a plain file
(its compressed bytes, never pickled) before it counts as produced, so a worker killed with
``kill -9`` resends everything unacknowledged when it starts again, with fresh sequence numbers
that never repeat an old one.

Bounds: ``limit_segments`` and ``disk_limit_bytes`` cap what is kept; ``memory_limit_bytes`` caps
how much of it stays in RAM (the rest is read back from disk when sent). When a cap is reached,
``on_full`` decides: ``"block"`` makes ``add`` wait for acknowledgements (collection pauses),
``"drop_oldest"`` discards the oldest unacknowledged segment and counts it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rulka.net.wire import MAX_WIRE_INT
from rulka.worker.counters import WorkerCounters, atomic_write, in_wire_range, move_aside

log = logging.getLogger(__name__)

_SEGMENT_SUFFIX = ".seg"


@dataclass
class _Entry:
    seq: int
    size: int
    payload: bytes | None  # None when only on disk
    on_disk: bool
    sent_at: float | None = None  # monotonic time of the last send; None = not sent yet


class Outbox:
    """Unacknowledged segments, oldest first. Thread-safe: the env loop adds, the sender thread
    takes what is due and marks acknowledgements.

    ``directory`` (optional): where segments are written (durable mode); segments found there
    at start are loaded as unacknowledged, and ``counters.bump_past`` is called for each. A file
    larger than ``max_payload_bytes`` or that ``validate`` (payload -> None, raises on bad bytes)
    rejects is moved to ``<directory>/../quarantine/`` and counted in ``quarantined``: it could
    never be delivered, and resending it would block or loop for ever.
    """

    def __init__(
        self,
        *,
        directory: Path | None = None,
        limit_segments: int = 10000,
        memory_limit_bytes: int = 256 << 20,
        disk_limit_bytes: int = 4096 << 20,
        on_full: str = "block",
        counters: WorkerCounters | None = None,
        max_payload_bytes: int | None = None,
        validate: Callable[[bytes], Any] | None = None,
    ) -> None:
        if on_full not in ("block", "drop_oldest"):
            raise ValueError(f"on_full must be 'block' or 'drop_oldest', not {on_full!r}")
        self.directory = Path(directory) if directory is not None else None
        self.limit_segments = int(limit_segments)
        self.memory_limit_bytes = int(memory_limit_bytes)
        self.disk_limit_bytes = int(disk_limit_bytes)
        self.on_full = on_full
        self.max_payload_bytes = max_payload_bytes
        self._validate = validate
        self.quarantined = 0
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._cond = threading.Condition()
        self.memory_bytes = 0
        self.disk_bytes = 0
        self.closed = False
        # counters (read by stats and tests)
        self.added = 0
        self.acked = 0
        self.dropped = 0
        self.blocked_s = 0.0
        self.sends = 0
        self.resends = 0
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._load_existing(counters)

    # -- disk -----------------------------------------------------------------------------------
    def _path(self, seq: int) -> Path:
        assert self.directory is not None
        return self.directory / f"{seq:020d}{_SEGMENT_SUFFIX}"

    def _load_existing(self, counters: WorkerCounters | None) -> None:
        assert self.directory is not None
        found = []
        for path in sorted(self.directory.iterdir()):
            if path.suffix == ".tmp" and path.is_file():
                path.unlink(missing_ok=True)  # an interrupted write: never counted as produced
            elif not path.is_file() or not (path.stem.isascii() and path.stem.isdigit()):
                # not a file this worker writes (a stray copy, a renamed or foreign file): out of
                # the way, counted
                self._move_to_quarantine(path, "is not a segment file this worker writes")
            elif not in_wire_range(int(path.stem)):  # a name is at most 255 characters: int() is cheap
                # a number no segment can carry: out of the way, and next_seq stays where it is
                self._move_to_quarantine(path, f"names a sequence number outside the wire's range (0 to "
                                               f"{MAX_WIRE_INT - 1})")
            elif path != self._path(int(path.stem)):
                # a number written another way (a stray copy, a renamed file): out of the way,
                # counted, its number never reused
                if counters is not None:
                    counters.bump_past(int(path.stem))
                self._move_to_quarantine(path, "is not a segment file this worker writes")
            else:
                found.append((int(path.stem), path.stat().st_size))
        for seq, size in sorted(found):
            if counters is not None:
                counters.bump_past(seq)  # even a quarantined number is never reused
            problem = self._check_file(seq, size)
            if problem:
                self._quarantine_file(seq, problem)
                continue
            self._entries[seq] = _Entry(seq, size, None, True)
            self.disk_bytes += size
        if found:
            log.info("resuming with %d unacknowledged segments from %s", len(found), self.directory)

    def _check_file(self, seq: int, size: int) -> str:
        """Why the spilled segment ``seq`` can never be delivered ("" if it can)."""
        if self.max_payload_bytes is not None and size > self.max_payload_bytes:
            return f"{size} bytes, over network.max_message_bytes ({self.max_payload_bytes})"
        if self._validate is not None:
            try:
                self._validate(self._path(seq).read_bytes())
            except Exception as exc:  # noqa: BLE001 - any failure to decode means undeliverable
                return f"cannot be decoded ({type(exc).__name__}: {str(exc)[:120]})"
        return ""

    def _quarantine_file(self, seq: int, problem: str) -> None:
        self._move_to_quarantine(self._path(seq), problem, f"spilled segment {seq}")

    def _move_to_quarantine(self, path: Path, problem: str, what: str = "") -> None:
        """Move ``path`` to ``<directory>/../quarantine/`` (never over an earlier one), count it."""
        assert self.directory is not None
        folder = self.directory.parent / "quarantine"
        try:
            move_aside(path, folder)
        except OSError:
            if path.is_file():
                path.unlink(missing_ok=True)
        self.quarantined += 1
        log.warning("%s %s: moved to %s (%d quarantined)", what or f"{path.name} in {self.directory}", problem, folder,
                    self.quarantined)

    def quarantine(self, seq: int, problem: str) -> None:
        """Give up on segment ``seq`` (it can never be delivered): out of the outbox, its file
        moved aside for inspection, counted in ``quarantined``."""
        with self._cond:
            entry = self._entries.pop(seq, None)
            if entry is None:
                return
            if entry.payload is not None:
                self.memory_bytes -= entry.size
            if entry.on_disk:
                self.disk_bytes -= entry.size
                self._quarantine_file(seq, problem)
            else:
                self.quarantined += 1
                log.warning("segment %d %s: dropped (%d quarantined)", seq, problem, self.quarantined)
            self._cond.notify_all()

    def _read(self, entry: _Entry) -> bytes | None:
        try:
            return self._path(entry.seq).read_bytes()
        except OSError as exc:
            log.warning("spilled segment %d unreadable (%s); dropping it", entry.seq, exc)
            return None

    # -- producer side --------------------------------------------------------------------------
    def _full(self, size: int) -> bool:
        if len(self._entries) >= self.limit_segments:
            return True
        if self.directory is None:
            return self.memory_bytes + size > self.memory_limit_bytes
        return self.disk_bytes + size > self.disk_limit_bytes

    def add(self, seq: int, payload: bytes, stop_event: threading.Event | None = None) -> bool:
        """Keep ``payload`` until ``ack(seq)``. Applies ``on_full`` when a bound is reached.

        Returns False only when ``stop_event`` is set (or the outbox closed) while blocked; the
        segment is then not kept.
        """
        size = len(payload)
        with self._cond:
            if self._full(size):
                if self.on_full == "drop_oldest":
                    while self._entries and self._full(size):
                        self._drop_oldest_locked()
                else:
                    t0 = time.monotonic()
                    logged = False
                    while self._full(size) and self._entries:
                        if self.closed or (stop_event is not None and stop_event.is_set()):
                            self.blocked_s += time.monotonic() - t0
                            return False
                        if not logged:
                            log.warning("unacknowledged segments at their bound (%d kept); collection "
                                        "waits for the trainer (worker.on_full=block)", len(self._entries))
                            logged = True
                        self._cond.wait(0.2)
                    self.blocked_s += time.monotonic() - t0
            on_disk = False
            if self.directory is not None:
                atomic_write(self._path(seq), payload)
                self.disk_bytes += size
                on_disk = True
            entry = _Entry(seq, size, payload, on_disk)
            self._entries[seq] = entry
            self.memory_bytes += size
            self.added += 1
            self._evict_memory_locked()
            self._cond.notify_all()
            return True

    def _evict_memory_locked(self) -> None:
        # keep the newest in RAM; older payloads are read back from disk when (re)sent
        if self.memory_bytes <= self.memory_limit_bytes or self.directory is None:
            return
        for entry in self._entries.values():
            if self.memory_bytes <= self.memory_limit_bytes:
                break
            if entry.payload is not None and entry.on_disk:
                entry.payload = None
                self.memory_bytes -= entry.size

    def _drop_oldest_locked(self) -> None:
        seq, entry = self._entries.popitem(last=False)
        self._forget(entry)
        self.dropped += 1
        if self.dropped == 1 or self.dropped % 100 == 0:
            log.warning("dropped unacknowledged segment %d (worker.on_full=drop_oldest; %d dropped so far)",
                        seq, self.dropped)

    def _forget(self, entry: _Entry) -> None:
        if entry.payload is not None:
            self.memory_bytes -= entry.size
        if entry.on_disk:
            self.disk_bytes -= entry.size
            self._path(entry.seq).unlink(missing_ok=True)

    # -- sender side ----------------------------------------------------------------------------
    def ack(self, seqs: list[int]) -> int:
        """Forget the acknowledged segments; return how many were still kept."""
        n = 0
        with self._cond:
            for seq in seqs:
                entry = self._entries.pop(seq, None)
                if entry is not None:
                    self._forget(entry)
                    n += 1
            self.acked += n
            if n:
                self._cond.notify_all()
        return n

    def due(self, now: float, resend_after_s: float, max_in_flight: int, limit: int) -> list[tuple[int, bytes]]:
        """Segments to send now, oldest first: never sent, or sent more than ``resend_after_s``
        ago; at most ``limit`` and never more than ``max_in_flight`` awaiting an ack."""
        out: list[tuple[int, bytes]] = []
        with self._cond:
            in_flight = sum(1 for e in self._entries.values()
                            if e.sent_at is not None and now - e.sent_at < resend_after_s)
            budget = min(limit, max_in_flight - in_flight)
            for entry in list(self._entries.values()):
                if budget <= 0:
                    break
                if entry.sent_at is not None and now - entry.sent_at < resend_after_s:
                    continue
                payload = entry.payload if entry.payload is not None else self._read(entry)
                if payload is None:
                    self._entries.pop(entry.seq, None)
                    self._forget(entry)
                    self.dropped += 1
                    continue
                out.append((entry.seq, payload))
                budget -= 1
        return out

    def mark_sent(self, seq: int, now: float) -> None:
        with self._cond:
            entry = self._entries.get(seq)
            if entry is not None:
                if entry.sent_at is None:
                    self.sends += 1
                else:
                    self.resends += 1
                entry.sent_at = now

    def resend_all(self) -> None:
        """Treat every kept segment as unsent (after a reconnect: what was in flight may be lost)."""
        with self._cond:
            for entry in self._entries.values():
                entry.sent_at = None

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._entries)

    def seqs(self) -> list[int]:
        with self._cond:
            return list(self._entries)

    def wait_empty(self, timeout: float) -> bool:
        """Wait until every segment is acknowledged; True if it happened within ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._entries:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
            return True
