"""The trainer's write-ahead journal of accepted segments.

A segment is acknowledged to its worker only after it is appended here, so nothing a worker
stopped keeping can be lost by a trainer crash: on restart the trainer loads its latest
checkpoint and replays the journal files written since. Each record is
``[4-byte little-endian length][msgpack {"w": worker, "s": seq, "b": compressed segment}]``; a
record cut short by a crash is ignored and the file is truncated to its last whole record.

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
from collections.abc import Iterator
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
        what = "cannot allocate" if isinstance(exc, MemoryError) else f"refused {self.in_row} segments in a row"
        where = (f"kept in the journal of {self.run_dir}: fix the config, then resume with --resume {self.run_dir}"
                 if self.run_dir is not None else "not kept (no run folder)")
        self.failed = MemoryStoreFailed(
            f"the replay memory {what} (segment {worker}/{seq}: {type(exc).__name__}: {one_line(exc, 160)}); "
            f"the trainer stops without acknowledging it; the segment is {where}. Lower the memory's size "
            "(trainer.memory_kwargs, memory.memory_size_schedule, sac.buffer_size)")
        return self.failed


def journal_path(directory: Path, number: int) -> Path:
    return directory / f"journal-{number:06d}.bin"


class JournalWriter:
    """Appends records to one journal file. The trainer calls ``flush`` once per batch of
    received messages, before it acknowledges any of them: a killed process keeps every record
    a worker has let go of, at one write per batch instead of one per segment."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._f: BinaryIO = open(path, "ab")  # noqa: SIM115 - kept open for the writer's lifetime

    def append(self, worker: str, seq: int, payload: bytes) -> None:
        record = pack({"w": worker, "s": seq, "b": payload})
        self._f.write(_LEN.pack(len(record)) + record)

    def flush(self) -> None:
        """Hand what was appended to the operating system (before acknowledging it)."""
        self._f.flush()

    def close(self) -> None:
        self._f.close()


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
