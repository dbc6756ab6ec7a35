"""Turns for sending weights: at most ``network.weights_streams`` workers are sent a weights
version at once (``rulka.server.relay.RelayCore`` mixes this in). The others wait their turn, oldest
first, and then get the newest version: on a slow uplink a version is fresh when it lands, instead
of every worker sharing the uplink and getting the same version a whole round late. A turn held
far longer than recent ones (a worker on a slow link of its own) stops counting after
``overdue_s()``, and a small version gets more turns at once (``TURN_BYTES``)."""

from __future__ import annotations

import time
from typing import Any

TURN_OVERDUE_MIN_S = 30.0  # a weights turn stops counting toward weights_streams after this (or
TURN_OVERDUE_X = 4.0  # this many times the recent turns' length, if longer), checked every
TURN_CHECK_S = 1.0  # this while workers wait
# a small version needs more turns at once to keep the uplink busy (each turn costs round trips):
# at least this many bytes of the newest version are sent at once (several hundred 300 KB turns)
TURN_BYTES = 16 * 1024 * 1024


class WeightsTurns:
    """The turn bookkeeping; the relay core provides ``settings``, ``clock``, ``incoming``,
    ``incoming_count``, ``retained`` and ``workers``, connections with ``pump_weights()``."""

    settings: Any
    clock: Any
    incoming: list[bytes]
    incoming_count: int
    retained: list[bytes]
    workers: dict[str, Any]

    def init_turns(self) -> None:
        # workers being sent a weights message (-> when their turn started; at most
        # settings.weights_streams count) and those waiting for a turn, oldest first
        self.weights_sending: dict[Any, float] = {}
        self.weights_waiting: dict[Any, None] = {}
        self.turn_s = 0.0  # moving average of how long one worker's turn took
        self._turn_timer: Any = None
        self._pumping = False
        self._repump = False

    def pump_all_weights(self) -> None:
        """Every worker's connection takes what it can of the newest weights: those waiting for a
        turn first, in their order."""
        self.pump_waiting()
        for conn in list(self.workers.values()):
            if conn not in self.weights_waiting:
                conn.pump_weights()

    def overdue_s(self) -> float:
        return max(TURN_OVERDUE_MIN_S, TURN_OVERDUE_X * self.turn_s)

    def turns(self) -> int:
        """How many workers may be sent weights at once: ``weights_streams`` (0: all), more for a
        small version (``TURN_BYTES``)."""
        limit = self.settings.weights_streams
        chunks = self.incoming_count if self.incoming else len(self.retained)
        if not limit or not chunks:
            return limit
        return max(limit, -(-TURN_BYTES // (chunks * self.settings.chunk_bytes)))

    def _turn_free(self) -> bool:
        limit = self.turns()
        if not limit:
            return True
        now, overdue = time.monotonic(), self.overdue_s()
        return sum(1 for t in self.weights_sending.values() if now - t < overdue) < limit

    def take_weights_turn(self, conn: Any) -> bool:
        """Whether ``conn`` may start sending a weights message now; if not, it waits in line
        (``pump_waiting`` calls it again when a turn is free)."""
        if conn in self.weights_sending:
            return True
        if self._turn_free() and (not self.weights_waiting or self._pumping or next(iter(self.weights_waiting)) is conn):
            self.weights_waiting.pop(conn, None)
            self.weights_sending[conn] = time.monotonic()
            return True
        self.weights_waiting.setdefault(conn, None)
        if self._turn_timer is None or not self._turn_timer.active():
            self._turn_timer = self.clock.callLater(TURN_CHECK_S, self._check_turns)
        return False

    def end_weights_turn(self, conn: Any, finished: bool = False) -> None:
        """``conn`` finished its message (``finished``), dropped it or left: the next in line goes."""
        self.weights_waiting.pop(conn, None)
        started = self.weights_sending.pop(conn, None)
        if started is None:
            return
        if finished:
            took = time.monotonic() - started
            self.turn_s = took if not self.turn_s else 0.8 * self.turn_s + 0.2 * took
        self.pump_waiting()

    def _check_turns(self) -> None:
        self._turn_timer = None
        self.pump_waiting()  # a turn may have become overdue

    def pump_waiting(self) -> None:
        """Let the workers waiting for a turn take the free ones, oldest first (not re-entered:
        a worker that finishes inside this loop only asks it to run again)."""
        if self._pumping:
            self._repump = True
            return
        self._pumping = True
        try:
            self._repump = True
            while self._repump:
                self._repump = False
                for conn in list(self.weights_waiting):
                    if not self._turn_free():
                        break
                    conn.pump_weights()
        finally:
            self._pumping = False
