"""The trainer's write-ahead journal of accepted segments.

A segment is acknowledged to its worker only after it is appended here and synced to the disk
(``JournalWriter``, ``AckGate``), so nothing a worker stopped keeping can be lost by a trainer
crash or a power loss: on restart the trainer loads its latest
checkpoint and replays the journal files written since. Each record is
``[4-byte little-endian length][msgpack {"w": worker, "s": seq, "b": compressed segment}]``. A
record cut short by a crash can only be one that was not acknowledged yet (its worker sends it
again): it is not replayed, the file goes on from its last whole record and the cut bytes are
kept in ``journal-N.bin.torn``; a resume names any segment of the accepted log that the journal
did not give back (``missing_from_journal``).

A record in the journal is a promise to its worker: the segment was acknowledged (or will be
resent and deduplicated) and the memory will hold it. When the memory cannot store a journaled
segment (``MemoryError``: it cannot allocate; or ``REFUSED_IN_ROW`` unexpected errors in a row:
the memory is broken, not the segments), ``StoreGuard`` stops the trainer with
``MemoryStoreFailed`` before the batch is acknowledged and without a checkpoint, so the journal
still holds the segment: fix the config and ``--resume`` replays it into the memory.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from rulka.errors import BadInput, UserError, one_line
from rulka.segment import pack, unpack

log = logging.getLogger(__name__)

_LEN = struct.Struct("<I")
MAX_RECORD_BYTES = 1 << 30


REFUSED_IN_ROW = 20  # unexpected memory errors in a row that stop the trainer


class MemoryStoreFailed(UserError):
    """The memory could not store a segment the journal holds: the trainer stops (exit code 2)."""


class StoreGuard:
    """Whether a memory's failure to store a segment stops the trainer (``failed`` once it has)."""

    def __init__(self, run_dir: Path | None) -> None:
        self.run_dir = run_dir
        self.in_row = 0
        self.failed: MemoryStoreFailed | None = None

    def stored(self) -> None:
        self.in_row = 0

    def refused(self, worker: str, seq: int, exc: BaseException) -> MemoryStoreFailed | None:
        """The error to stop with (and remember) after the memory raised ``exc`` (not BadInput)."""
        self.in_row += 1
        if not isinstance(exc, MemoryError) and self.in_row < REFUSED_IN_ROW:
            return None
        oom = isinstance(exc, MemoryError)
        what = "cannot allocate" if oom else f"refused {self.in_row} segments in a row"
        where = (f"kept in the journal of {self.run_dir}: fix the config, then resume with --resume {self.run_dir}"
                 if self.run_dir is not None else "not kept (no run folder)")
        fix = ("Lower the memory's size (trainer.memory_kwargs, memory.memory_size_schedule, sac.buffer_size)" if oom
               else "The memory plugin is broken (its first errors are logged above with their tracebacks)")
        self.failed = MemoryStoreFailed(
            f"the replay memory {what} (segment {worker}/{seq}: {type(exc).__name__}: {one_line(exc, 160)}); "
            f"the trainer stops without acknowledging it; the segment is {where}. {fix}")
        return self.failed


def journal_path(directory: Path, number: int) -> Path:
    return directory / f"journal-{number:06d}.bin"


class JournalWriter:
    """Appends records to one journal file. The trainer calls ``flush`` once per batch of
    received messages, then ``request_sync``: a thread of this writer calls ``fsync`` (one per
    batch, or one for several batches that came during the last one) and ``synced`` says how
    far the file is on the disk. The trainer acknowledges a batch only once it is synced
    (``AckGate``), so neither a killed process nor a machine that loses power can lose a record
    a worker has let go of, and the learner never waits for the disk."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._f: BinaryIO = open(path, "ab")  # noqa: SIM115 - kept open for the writer's lifetime
        self.written = 0  # bytes appended by this writer
        self.synced = 0  # of which known to be on the disk
        self.closed = False
        self._wanted = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def append(self, worker: str, seq: int, payload: bytes) -> None:
        record = pack({"w": worker, "s": seq, "b": payload})
        self._f.write(_LEN.pack(len(record)) + record)
        self.written += _LEN.size + len(record)

    def flush(self) -> int:
        """Hand what was appended to the operating system; returns the position it reached."""
        self._f.flush()
        return self.written

    def request_sync(self) -> None:
        """Have everything flushed so far written to the disk (by the sync thread)."""
        with self._cond:
            if self.closed or self._wanted >= self.written:
                return
            self._wanted = self.written
            if self._thread is None:
                self._thread = threading.Thread(target=self._sync_loop, name="rulka-journal-sync", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _sync_loop(self) -> None:
        fd = self._f.fileno()
        while True:
            with self._cond:
                while not self.closed and self._wanted <= self.synced:
                    self._cond.wait()
                if self.closed:
                    return
                target = self._wanted
            try:
                os.fsync(fd)
            except OSError as exc:  # a disk that cannot sync: the batch stays unacknowledged
                log.error("journal %s: fsync failed (%s); acknowledgements wait", self.path, exc)
                time.sleep(1.0)
                continue
            with self._cond:
                self.synced = max(self.synced, target)
                self._cond.notify_all()

    def close(self) -> None:
        """Flush, sync and close (what was appended is then on the disk)."""
        if self.closed:
            return
        with self._cond:
            self.closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        self._f.flush()
        try:
            os.fsync(self._f.fileno())
        except OSError as exc:
            log.error("journal %s: fsync failed at close (%s)", self.path, exc)
        self._f.close()
        self.synced = self.written


class AckGate:
    """Acknowledgements held until the journal records they promise are on the disk."""

    def __init__(self) -> None:
        self._held: list[tuple[JournalWriter, int, dict[str, list[int]]]] = []

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, journal: JournalWriter, position: int, acks: dict[str, list[int]]) -> None:
        if acks:
            self._held.append((journal, position, acks))
            journal.request_sync()

    def release(self, send: Callable[[dict[str, list[int]]], None]) -> None:
        """Send (with ``send``) every held batch whose records are synced (or whose journal was
        closed: closing syncs), oldest first."""
        while self._held:
            journal, position, acks = self._held[0]
            if not (journal.closed or journal.synced >= position):
                return
            self._held.pop(0)
            send(acks)


def read_journal(path: Path, *, repair: bool = True) -> Iterator[tuple[str, int, bytes]]:
    """Yield ``(worker, seq, payload)`` records; stop at a truncated or damaged tail (and cut the
    file there when ``repair``)."""
    good_end = 0
    with open(path, "rb") as f:
        while True:
            head = f.read(_LEN.size)
            if len(head) < _LEN.size:
                break
            (n,) = _LEN.unpack(head)
            if n > MAX_RECORD_BYTES:
                break
            body = f.read(n)
            if len(body) < n:
                break
            try:
                rec = unpack(body, max_bytes=MAX_RECORD_BYTES)
                worker, seq, payload = rec["w"], rec["s"], rec["b"]
                if not (isinstance(worker, str) and isinstance(seq, int) and isinstance(payload, bytes)):
                    raise BadInput("journal", "bad record types")
            except (BadInput, KeyError, TypeError):
                break
            good_end = f.tell()
            yield worker, seq, payload
        size = f.seek(0, 2)
    if good_end < size:
        log.warning("journal %s: %d bytes of an incomplete or damaged record at the end are not replayed%s", path,
                    size - good_end, f" (kept in {torn_path(path).name})" if repair else "")
        if repair:
            # kept, not deleted: the file goes on from its last whole record, the bytes stay for a look
            with open(path, "r+b") as f:
                f.seek(good_end)
                tail = f.read()
                with open(torn_path(path), "ab") as keep:
                    keep.write(tail)
                    keep.flush()
                    os.fsync(keep.fileno())
                f.truncate(good_end)


def torn_path(path: Path) -> Path:
    """Where ``read_journal`` keeps the bytes it cut from the end of journal ``path``."""
    return path.with_name(path.name + ".torn")


def accepted_since(path: Path, offset: int) -> list[tuple[str, int]]:
    """The ``worker seq`` lines of the accepted log from byte ``offset`` on (what the trainer
    accepted after its checkpoint; a damaged line is skipped)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out.append((parts[0], int(parts[1])))
    return out


def missing_from_journal(accepted: list[tuple[str, int]], replayed: set[tuple[str, int]]) -> list[tuple[str, int]]:
    """Segments the accepted log names but the journal replay did not restore, logged as an error:
    the journal lost them (a torn or damaged tail). A worker that was not acknowledged sends its
    segment again (the trainer accepts it: its dedupe came from the replay); an acknowledged one
    is gone, which the journal's sync before each acknowledgement prevents short of a damaged disk."""
    missing = [key for key in dict.fromkeys(accepted) if key not in replayed]
    if missing:
        shown = ", ".join(f"{w}/{s}" for w, s in missing[:10]) + (" ..." if len(missing) > 10 else "")
        log.error("journal: %d segment(s) accepted before the restart are not in the journal (torn or damaged): %s; "
                  "their workers send again what was not acknowledged", len(missing), shown)
    return missing
