"""A worker's sequence numbers and episode ids, persisted in ``worker_state.json`` so that they
survive restarts and never repeat (``rulka.worker.outbox`` keeps the segments they number).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

from rulka.net.wire import MAX_WIRE_INT

# the delivery guarantees (these numbers and the outbox's store) log under one name
log = logging.getLogger("rulka.worker.outbox")

_STATE_FILE = "worker_state.json"


def in_wire_range(number: int) -> bool:
    """Whether ``number`` may be a sequence number or episode id: one above it must still cross
    the wire (``rulka.net.wire.MAX_WIRE_INT``)."""
    return 0 <= number < MAX_WIRE_INT


def move_aside(path: Path, folder: Path) -> Path:
    """Move ``path`` into ``folder`` (made if needed), never over an earlier file of that name;
    returns where it went."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / path.name
    n = 1
    while target.exists():
        target = folder / f"{path.name}.{n}"
        n += 1
    os.replace(path, target)
    return target


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class WorkerCounters:
    """Next sequence number and next episode id of one worker, persisted in ``directory``.

    Without a directory the numbers live in memory only (tests, throwaway workers).
    ``intact`` is True when the numbers come from a readable state file; a missing or damaged
    file (a first start, a deleted or corrupted state folder) leaves it False, and the worker then
    asks the trainer for the highest number it accepted before it numbers anything
    (``Worker``'s hello/welcome exchange).

    Neither number ever passes ``MAX_WIRE_INT`` (every one of them must cross the wire): a state
    file holding a number beyond it is repaired (moved to ``<directory>/quarantine/``, one
    warning line, the numbers then treated as lost), and a number from a spilled file's name or
    the trainer's welcome beyond it is ignored.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.next_seq = 0
        self.next_episode = 0
        self.intact = False
        self._lock = threading.Lock()
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / _STATE_FILE
            if path.exists():
                try:
                    state = json.loads(path.read_text())
                    self.next_seq = int(state["next_seq"])
                    self.next_episode = int(state["next_episode"])
                    self.intact = True
                except (ValueError, KeyError, TypeError, OverflowError) as exc:
                    # a damaged state file must not make us reuse numbers: start above any
                    # segment still on disk (see bump_past) and above what the trainer accepted
                    log.warning("worker state %s unreadable (%s); continuing above the spilled segments "
                                "and the trainer's highest accepted number", path, exc)
                if self.intact and not (0 <= self.next_seq <= MAX_WIRE_INT and 0 <= self.next_episode <= MAX_WIRE_INT):
                    self.intact = False
                    self._repair(path)
                if not self.intact:
                    self.next_seq = self.next_episode = 0

    def _repair(self, path: Path) -> None:
        """Move a state file whose numbers are outside the wire's range aside (one line): the
        worker then numbers nothing until the trainer's welcome, as after a lost state file, and
        a restart before its next save finds no file rather than the same numbers."""
        assert self.directory is not None
        target = move_aside(path, self.directory / "quarantine")
        log.warning("worker state %s repaired: next_seq %s / next_episode %s is outside the wire's range "
                    "(0 to %d); the file was moved to %s and numbering continues above the spilled segments "
                    "and the trainer's highest accepted number", path, _short(self.next_seq),
                    _short(self.next_episode), MAX_WIRE_INT, target)

    def bump_past(self, seq: int) -> bool:
        """Make sure the next sequence number is above ``seq`` (a segment found on disk, the
        trainer's highest accepted one). False, and nothing changes, for a number outside the
        wire's range (``in_wire_range``)."""
        if seq >= 0 and not in_wire_range(seq):
            return False
        with self._lock:
            if seq >= self.next_seq:
                self.next_seq = seq + 1
                self._save()
        return True

    def bump_episode_past(self, episode: int) -> bool:
        """Make sure the next episode id is above ``episode`` (one the trainer has seen); False
        for a number outside the wire's range, as ``bump_past``."""
        if episode >= 0 and not in_wire_range(episode):
            return False
        with self._lock:
            if episode >= self.next_episode:
                self.next_episode = episode + 1
                self._save()
        return True

    def take_seq(self) -> int:
        """The next sequence number; persisted before it is returned."""
        with self._lock:
            seq = self.next_seq
            _check_left(seq, "sequence numbers")
            self.next_seq += 1
            self._save()
            return seq

    def take_episode(self) -> int:
        """The next episode id; persisted before it is returned."""
        with self._lock:
            ep = self.next_episode
            _check_left(ep, "episode ids")
            self.next_episode += 1
            self._save()
            return ep

    def _save(self) -> None:
        if self.directory is not None:
            data = json.dumps({"next_seq": self.next_seq, "next_episode": self.next_episode})
            atomic_write(self.directory / _STATE_FILE, data.encode())


def _check_left(number: int, what: str) -> None:
    # unreachable by counting (2**63 segments); only a number from outside could get here, and
    # every way in is checked, so this is the last guard, not a path
    if not in_wire_range(number):
        raise RuntimeError(f"this worker's {what} are used up ({number} is the wire's maximum); "
                           "delete worker_state.json in its state folder to renumber from the trainer's welcome")


def _short(value: int) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:20]}... ({len(text)} digits)"
