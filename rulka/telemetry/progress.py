"""Progress: one live status line on a terminal, a plain log line every so often otherwise."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

PROGRESS_MODES = ("auto", "always", "never", "lines")


def format_value(value: Any) -> str:
    """Compact human form: ``12345 -> "12,345"``, ``0.123456 -> "0.123"``, ``1234.5 -> "1,234"``."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.1f}"
        return f"{value:.3g}"
    return "-" if value is None else str(value)


def _format_elapsed(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


class Progress:
    """A status display for a long-running command (trainer, worker, server).

    ``update(**fields)`` merges fields (e.g. ``samples_in=1200, version=3``) and redraws at most
    every ``interval_s`` seconds. Modes: ``"auto"`` (a live carriage-return line when the stream
    is a terminal, else a plain timestamped line every ``log_interval_s``), ``"always"`` (live
    line even when not a terminal), ``"lines"`` (always plain lines), ``"never"`` (silent).
    Thread-safe. ``close()`` prints the final state and ends the line.
    """

    def __init__(self, name: str, *, mode: str = "auto", interval_s: float = 1.0, log_interval_s: float = 30.0,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if mode not in PROGRESS_MODES:
            raise ValueError(f"progress mode must be one of {', '.join(PROGRESS_MODES)}, not {mode!r}")
        self.name = name
        self.stream = stream if stream is not None else sys.stderr
        if mode == "auto":
            isatty = getattr(self.stream, "isatty", None)
            mode = "always" if callable(isatty) and isatty() else "lines"
        self.mode = mode
        self.interval_s = interval_s if mode == "always" else log_interval_s
        self._clock = clock
        self._start = clock()
        self._last_draw: float | None = None
        self._fields: dict[str, Any] = {}
        self._drawn_width = 0
        self._lock = threading.Lock()
        self._closed = False

    @property
    def fields(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._fields)

    def render(self) -> str:
        """The status text (without timestamps or carriage returns)."""
        with self._lock:
            fields = dict(self._fields)
        parts = [f"{self.name} {_format_elapsed(self._clock() - self._start)}"]
        parts += [f"{key}={format_value(value)}" for key, value in fields.items()]
        return " | ".join(parts)

    def update(self, **fields: Any) -> None:
        """Merge ``fields`` into the status and redraw if the interval has passed."""
        if self._closed:
            return
        with self._lock:
            self._fields.update(fields)
            now = self._clock()
            # the first update draws at once so a user sees the command is alive
            due = self._last_draw is None or now - self._last_draw >= self.interval_s
            if due:
                self._last_draw = now
        if due:
            self._draw()

    def _draw(self, final: bool = False) -> None:
        if self.mode == "never":
            return
        text = self.render()
        try:
            if self.mode == "always":
                width = max(shutil.get_terminal_size((120, 20)).columns - 1, 20)
                text = text[:width]
                # pad over the previous, possibly longer, line instead of relying on ANSI codes
                pad = max(self._drawn_width - len(text), 0)
                self.stream.write("\r" + text + " " * pad + ("\n" if final else ""))
                self._drawn_width = len(text)
            else:
                self.stream.write(time.strftime("%H:%M:%S ") + text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            self.mode = "never"  # the terminal went away (closed pipe): stay quiet, keep running

    def close(self) -> None:
        """Draw the final state once and end the live line."""
        if self._closed:
            return
        self._closed = True
        if self._fields or self.mode == "always":
            self._draw(final=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
