"""Segment packing off the env thread: stack a finished segment's steps, compress and frame it,
and keep it in the outbox, on a thread of its own.

Compression was the largest share of a worker's own cost per action (zstd on 160x120 frames:
docs/performance.md), and it ran on the thread that steps the game. The env thread now hands
each finished segment (its sequence number already taken, so numbering and credit stay on the
env thread) to ``SegmentPacker.submit`` and goes on playing; one packing thread works through
them in the order they were submitted, so the outbox receives them in sequence order, as before.
python-zstandard and numpy's copies release the GIL, so the two threads overlap.

Bounds: at most ``max_pending`` segments wait (plus the one being packed). When that many wait,
``submit`` blocks the env thread until one is done (backpressure, counted in ``waits`` and
``wait_s``); the outbox's own bound (``worker.on_full``) blocks the packing thread, so it reaches
the env thread the same way. A packing error is raised again on the env thread at its next
``submit`` or ``flush``: a worker that cannot pack stops as it did when it packed inline.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rulka.compress import frame_segment
from rulka.segment import Segment
from rulka.worker.outbox import Outbox

log = logging.getLogger(__name__)

MAX_PENDING = 2  # segments waiting to be packed; 200 steps of 160x120 frames are about 4 MB each


class SegmentPacker:
    """One thread that packs submitted segments in order and adds them to ``outbox``; on each
    kept segment ``stats.segments`` counts it and ``produced_log`` (when given) gets its number."""

    def __init__(self, outbox: Outbox, stats: Any, produced_log: Path | None = None,
                 max_pending: int = MAX_PENDING) -> None:
        self.outbox, self.stats, self.produced_log = outbox, stats, produced_log
        self.max_pending = max(1, int(max_pending))
        self._items: collections.deque[tuple[int, Callable[[], Segment], Any, str, threading.Event]] = \
            collections.deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.waits = 0  # submits that found max_pending segments waiting and blocked
        self.wait_s = 0.0  # the env thread's time blocked in those
        self.not_kept = 0  # segments the outbox refused because a stop came while it was full
        self.pack_s = 0.0  # time spent packing (stack, compress, frame), on the packing thread

    def _raise_error(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"packing a segment failed: {self.error}") from self.error

    def submit(self, seq: int, segment: Callable[[], Segment], compressor: Any, codec: str,
               stop_event: threading.Event) -> bool:
        """Queue segment ``seq`` (``segment()`` builds it, on the packing thread) to be compressed
        with ``compressor`` and kept under ``codec``. Blocks while ``max_pending`` wait; False
        (not queued) when ``stop_event`` is set or the packer closed meanwhile."""
        with self._cond:
            self._raise_error()
            if len(self._items) >= self.max_pending:
                self.waits += 1
                t0 = time.monotonic()
                while len(self._items) >= self.max_pending:
                    if stop_event.is_set() or self._closed:
                        self.wait_s += time.monotonic() - t0
                        return False
                    self._cond.wait(0.05)
                    self._raise_error()
                self.wait_s += time.monotonic() - t0
            if self._closed:
                return False
            self._items.append((seq, segment, compressor, codec, stop_event))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="segment-packer", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return True

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    self._cond.wait()
                if not self._items:
                    return
                seq, segment, compressor, codec, stop_event = self._items.popleft()
                self._busy = True
                self._cond.notify_all()  # a blocked submit may queue now
            try:
                if self.error is None:
                    self._pack(seq, segment, compressor, codec, stop_event)
            except Exception as exc:  # noqa: BLE001 - raised again on the env thread
                log.error("packing segment %d failed: %s", seq, str(exc)[:200])
                self.error = exc
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _pack(self, seq: int, segment: Callable[[], Segment], compressor: Any, codec: str,
              stop_event: threading.Event) -> None:
        t0 = time.perf_counter()
        payload = frame_segment(codec, compressor.compress(segment()))
        self.pack_s += time.perf_counter() - t0
        if not self.outbox.add(seq, payload, stop_event):
            self.not_kept += 1
            log.warning("segment %d not kept: the worker stopped while its unacknowledged segments were at "
                        "their bound", seq)
            return
        self.stats.segments += 1
        if self.produced_log is not None:
            with open(self.produced_log, "a") as f:
                f.write(f"{seq}\n")

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted segment is packed and kept (or refused); True if within
        ``timeout``. Raises a packing error here, on the caller's thread."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._items or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.05 if left is None else min(left, 0.05))
            self._raise_error()
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Pack what was submitted (up to ``timeout``), then stop the thread."""
        try:
            self.flush(timeout)
        except RuntimeError as exc:
            log.warning("%s", exc)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
