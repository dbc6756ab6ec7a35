"""The trainer's write-ahead journal of accepted segments.

A segment is acknowledged to its worker only after it is appended here, so nothing a worker
stopped keeping can be lost by a trainer crash: on restart the trainer loads its latest
checkpoint and replays the journal files written since. Each record is
``[4-byte little-endian length][msgpack {"w": worker, "s": seq, "b": compressed segment}]``; a
record cut short by a crash is ignored and the file is truncated to its last whole record.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from rulka.errors import BadInput
from rulka.segment import pack, unpack

log = logging.getLogger(__name__)

_LEN = struct.Struct("<I")
MAX_RECORD_BYTES = 1 << 30


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
        log.warning("journal %s: ignoring %d bytes of an incomplete record at the end", path, size - good_end)
        if repair:
            with open(path, "r+b") as f:
                f.truncate(good_end)
