"""Telemetry from rulka's Openplanet plugin: the wire format and a reconnecting client.

The plugin (``rulka/envs/tm2020/plugin``) is a TCP server on ``127.0.0.1:<port>`` (9010 by
default, so it never collides with TMRL's plugin on 9000). While the player's car is in a race it
writes one *record* per rendered frame; in menus and loading screens it writes nothing.

Record layout (little-endian, ``RECORD_SIZE`` = 12 + 4 * ``N_FIELDS`` bytes):

=========  ========  ==========================================================
offset     type      content
=========  ========  ==========================================================
0          4 bytes   magic ``b"RLK2"``
4          uint16    format version (``VERSION``)
6          uint16    number of float fields that follow (``N_FIELDS``)
8          uint32    frame counter (wraps at 2**32)
12         float32   ``FIELDS[0]``, ``FIELDS[1]``, ... in that order
=========  ========  ==========================================================

Unlike TMRL's bare 11-float stream, every record starts with a magic and a size, so a client that
joins mid-record, or reads a stream split or merged at any byte, finds the next record instead of
silently decoding shifted floats. ``RecordDecoder`` does that and counts what it skipped.
"""

from __future__ import annotations

import logging
import math
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rulka.envs.car_state import CarState

log = logging.getLogger(__name__)

MAGIC = b"RLK2"
VERSION = 1
DEFAULT_PORT = 9010

FIELDS: tuple[str, ...] = (
    "race_time_ms",  # CSmScriptPlayer.CurrentRaceTime (negative during the countdown)
    "speed",  # vis.FrontSpeed, m/s
    "x", "y", "z",  # vis.Position
    "vx", "vy", "vz",  # vis.WorldVel
    "dir_x", "dir_y", "dir_z",  # vis.Dir (forward)
    "up_x", "up_y", "up_z",  # vis.Up
    "left_x", "left_y", "left_z",  # vis.Left (checked, not used: the lateral axis is Up x Dir)
    "input_steer", "input_gas", "input_brake",
    "finished",  # 1 while the UI shows the finish sequence
    "gear", "rpm",
    "mat_fl", "mat_fr", "mat_rl", "mat_rr",  # ground contact material id per wheel (80: none)
    "slip_fl", "slip_fr", "slip_rl", "slip_rr",  # slip coefficient per wheel (0..1)
    "damper_fl", "damper_fr", "damper_rl", "damper_rr",  # vis.*DamperLen: a length (m), not TMNF's absorption
    "paused",  # 1 while the in-game menu is open (the race clock stops)
    "distance",  # CSmScriptPlayer.Distance, metres driven
)
N_FIELDS = len(FIELDS)
INDEX = {name: i for i, name in enumerate(FIELDS)}
_HEADER = struct.Struct("<4sHHI")
_BODY = struct.Struct("<" + "f" * N_FIELDS)
RECORD_SIZE = _HEADER.size + _BODY.size
NO_CONTACT_MATERIAL = 80  # EPlugSurfaceMaterialId value the game reports for a wheel in the air
BASIS_TOLERANCE = 0.05
"""How far Left, Up, Dir may be from an orthonormal basis (float32, game rounding)."""


class TelemetryError(Exception):
    """The telemetry stream is unusable (wrong version, plugin not listening, silent)."""


@dataclass(frozen=True)
class Telemetry:
    """One record: ``frame`` (plugin counter), ``values`` (``N_FIELDS`` floats, ``FIELDS`` order)
    and ``received`` (``time.monotonic()`` on arrival)."""

    frame: int
    values: np.ndarray
    received: float = 0.0

    def __getitem__(self, name: str) -> float:
        return float(self.values[INDEX[name]])

    @property
    def position(self) -> np.ndarray:
        return self.values[2:5].astype(np.float64)

    @property
    def finished(self) -> bool:
        return self["finished"] > 0.5

    @property
    def paused(self) -> bool:
        return self["paused"] > 0.5

    @property
    def race_time_ms(self) -> int:
        return int(round(self["race_time_ms"]))

    def is_finite(self) -> bool:
        return bool(np.isfinite(self.values).all())

    def handedness(self) -> int:
        """+1 when the game's Left is Up x Dir, -1 when it is -(Up x Dir) (what a left-handed
        world gives), 0 when Left, Up, Dir are not an orthonormal basis (a malformed record).

        The sign of det([Left, Up, Dir]) must not change within a stream: a record whose sign
        differs from the stream's is mirrored (the interface ends the episode and counts it)."""
        v = self.values.astype(np.float64)
        m = np.column_stack([v[14:17], v[11:14], v[8:11]])
        if not np.isfinite(m).all() or not np.allclose(m.T @ m, np.eye(3), atol=BASIS_TOLERANCE):
            return 0
        return 1 if np.linalg.det(m) > 0 else -1

    def car_state(self, slip_threshold: float = 0.5) -> CarState:
        """The ``CarState`` the observation pipeline reads.

        Orientation columns are lateral, up, forward, with lateral derived as Up x Dir: the
        ``CarState`` definition, whatever the handedness of the game's world (the game's own
        ``Left`` would mirror the lateral axis if it is left-handed; ``handedness`` checks it).
        TM2020 exposes no angular velocity through this path: it is 0.

        Per-game meanings the pipeline sees: ``wheel_damper_absorb`` holds TM2020's
        ``*DamperLen`` (a suspension length) where TMNF reports absorption; turbo is not a
        surface material in TM2020 (it is ``vis.IsTurbo``, not sent), docs/tm2020.md.
        Wheel material ids are TM2020's ``EPlugSurfaceMaterialId`` values, passed through as they
        are; a wheel is in contact unless it reports ``NO_CONTACT_MATERIAL``.
        """
        v = self.values.astype(np.float64)
        mats = v[23:27].round().astype(np.int64)
        return CarState(
            position=v[2:5],
            orientation=np.column_stack([np.cross(v[11:14], v[8:11]), v[11:14], v[8:11]]),
            velocity=v[5:8],
            wheel_material=mats,
            wheel_contact=mats != NO_CONTACT_MATERIAL,
            wheel_sliding=v[27:31] > slip_threshold,
            wheel_damper_absorb=v[31:35],
            gear=int(round(v[21])),
            rpm=float(v[22]),
            race_time_ms=int(round(v[0])),
            finished=bool(v[20] > 0.5),
        )


def encode_record(frame: int, values: np.ndarray | list[float]) -> bytes:
    """One record (what the plugin writes); ``values`` has ``N_FIELDS`` floats."""
    vals = [float(x) for x in values]
    if len(vals) != N_FIELDS:
        raise ValueError(f"a telemetry record has {N_FIELDS} fields, got {len(vals)}")
    return _HEADER.pack(MAGIC, VERSION, N_FIELDS, frame & 0xFFFFFFFF) + _BODY.pack(*vals)


class RecordDecoder:
    """Cuts a byte stream into records; keeps only whole, well-formed ones.

    ``feed(data)`` returns the records completed by ``data`` (oldest first). Bytes that do not
    start a record (a client that joined mid-record, a corrupted stream) are skipped up to the
    next magic and counted in ``skipped_bytes``; a record with another version or field count
    raises ``TelemetryError`` (the plugin and this client disagree: reinstall the plugin).
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self.skipped_bytes = 0
        self.records = 0

    def feed(self, data: bytes) -> list[Telemetry]:
        self._buf += data
        out: list[Telemetry] = []
        now = time.monotonic()
        buf = self._buf
        while True:
            start = buf.find(MAGIC)
            if start < 0:
                # keep a tail that may be the beginning of a magic
                keep = len(MAGIC) - 1
                if len(buf) > keep:
                    self.skipped_bytes += len(buf) - keep
                    del buf[: len(buf) - keep]
                break
            if start:
                self.skipped_bytes += start
                del buf[:start]
            if len(buf) < _HEADER.size:
                break
            _, version, n, frame = _HEADER.unpack_from(buf)
            if version != VERSION or n != N_FIELDS:
                raise TelemetryError(
                    f"telemetry record has version {version} with {n} fields; this rulka reads version "
                    f"{VERSION} with {N_FIELDS}: reinstall the plugin (rulka tm install-plugin --game tm2020)"
                )
            if len(buf) < RECORD_SIZE:
                break
            values = np.array(_BODY.unpack_from(buf, _HEADER.size), dtype=np.float32)
            del buf[:RECORD_SIZE]
            self.records += 1
            out.append(Telemetry(frame, values, now))
        return out


class TelemetryClient:
    """Connects to the plugin and keeps the newest record, in a background thread.

    It reconnects by itself (every ``retry_s``) when the plugin is not listening yet, closes the
    socket (a plugin reload, a game restart) or sends garbage; ``latest()`` never blocks on the
    network. Counters: ``connects``, ``disconnects``, ``records``, ``skipped_bytes``, ``bad``.

    Args:
        host, port: where the plugin listens.
        retry_s: pause between connection attempts.
        read_timeout_s: a connected socket silent this long is closed and reopened (the plugin
            may have died without closing it). Silence shorter than that is normal in menus.
        connect: socket factory (tests); ``socket.create_connection`` by default.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        retry_s: float = 0.5,
        read_timeout_s: float = 30.0,
        connect: Callable[[tuple[str, int], float], socket.socket] | None = None,
    ) -> None:
        self.address = (host, int(port))
        self.retry_s = float(retry_s)
        self.read_timeout_s = float(read_timeout_s)
        self._connect = connect or (lambda addr, timeout: socket.create_connection(addr, timeout=timeout))
        self._latest: Telemetry | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self.connected = False
        self.connects = 0
        self.disconnects = 0
        self.records = 0
        self.skipped_bytes = 0
        self.bad = 0
        self.last_error = ""
        self._last_refused_log = -math.inf

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> TelemetryClient:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="tm2020-telemetry", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        sock = self._sock
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def __enter__(self) -> TelemetryClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def latest(self) -> Telemetry | None:
        """The newest record received (None before the first)."""
        return self._latest

    def wait_newer(self, than_frame: int | None, timeout_s: float) -> Telemetry | None:
        """Block until a record with another frame counter than ``than_frame`` arrives (or any
        record when None); None on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                rec = self._latest
                if rec is not None and (than_frame is None or rec.frame != than_frame):
                    return rec
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def silent_for(self) -> float:
        """Seconds since the last record (inf before the first)."""
        rec = self._latest
        return math.inf if rec is None else time.monotonic() - rec.received

    # ------------------------------------------------------------------ thread
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sock = self._connect(self.address, max(self.retry_s, 0.1))
            except OSError as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                now = time.monotonic()
                if now - self._last_refused_log > 30.0:
                    self._last_refused_log = now
                    log.warning(
                        "Openplanet telemetry plugin not listening on %s:%d (%s). Load a map in "
                        "Trackmania; in Openplanet (F3) -> Developer, (re)load the rulka plugin",
                        *self.address, self.last_error,
                    )
                self._stop.wait(self.retry_s)
                continue
            self._serve(sock)

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(0.2)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        self._sock = sock
        self.connected = True
        self.connects += 1
        if self.connects > 1:
            log.info("telemetry plugin reconnected (%s:%d), connection %d", *self.address, self.connects)
        decoder = RecordDecoder()
        last_data = time.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    if time.monotonic() - last_data > self.read_timeout_s:
                        log.warning("telemetry silent for %.0f s on an open connection: reconnecting",
                                    self.read_timeout_s)
                        return
                    continue
                except OSError as exc:
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    return
                if not data:
                    self.last_error = "plugin closed the connection"
                    return
                last_data = time.monotonic()
                try:
                    recs = decoder.feed(data)
                except TelemetryError as exc:
                    self.bad += 1
                    self.last_error = str(exc)
                    log.error("%s", exc)
                    self._stop.wait(self.retry_s)
                    return
                finally:
                    self.skipped_bytes += decoder.skipped_bytes
                    decoder.skipped_bytes = 0
                good = [r for r in recs if r.is_finite()]
                self.bad += len(recs) - len(good)
                if good:
                    self.records += len(good)
                    with self._cond:
                        self._latest = good[-1]  # only the newest matters to a real-time loop
                        self._cond.notify_all()
        finally:
            self.connected = False
            self._sock = None
            try:
                sock.close()
            except OSError:
                pass
            if not self._stop.is_set():
                self.disconnects += 1
                log.warning("telemetry connection to %s:%d lost (%s); reconnecting", *self.address,
                            self.last_error or "closed")
