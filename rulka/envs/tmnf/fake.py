"""A fake TMNF + TMInterface game: rulka's simulator behind the plugin's socket and message set.

``FakeGame`` listens on 127.0.0.1 like rulka's plugin does inside the game (fact sheet F.1) and
behaves as the real plugin does where our client can tell. Each modelled behaviour names its
source (section keys of /work/shared/game-interfaces.md; "TMI-API" = TMInterface 2's
declarations vendored in tests/angelscript/vendor/tminterface2.as.predefined; "LS" = Linesight):

- one client at a time; a new connection replaces the old one; ``SC_ON_CONNECT_SYNC`` right after
  accept, or when the game leaves ``StartUp`` (A.3, A.6; LS Python_Link.as ``Render`` /
  ``OnGameStateChanged``);
- every game message blocks the game inside a callback that executes the client's commands in
  order until the client echoes the same id; commands sent outside a callback wait in the socket;
  the plugin's timeout is the *total* time of one wait (then the client is dropped, the timeout
  goes back to 2000 ms and the frame request is cleared) (A.7, A.12);
- 10 ms ticks of the simulator's car physics, a countdown with negative race times, run steps when
  ``race_time % period == 0`` (and every tick after the finish), checkpoint events at gates along
  the track and at the finish (``current == target``), the finish ending the race unless the
  client prevented it inside that callback (``C_PREVENT_SIMULATION_FINISH`` or a rewind to a blob
  whose last checkpoint time is -1) (A.8, A.9; LS ``OnRunStep``, ``OnCheckpointCountChanged``);
- state blobs in the A.10 layout (at least 8356 + 4n + 8m bytes: corrections); frames rendered by
  the simulator's camera at the requested size as BGRA, with the race time written into the alpha
  bytes of the first 4 pixels (tests check that frame and state agree), captured at most at the
  window's size and sent with the size captured (TMI-API ``CaptureScreenshot(vec2&inout)``);
- console commands ``map <sim track>``, ``set``, ``cam``, ``toggle_console`` (logged in ``log``;
  A.6, A.9); the console is open from launch until ``toggle_console`` and the PB ghost shows while
  the map's autosave exists, both drawn into the frames (corrections: Linesight's hygiene;
  LS ``game_instance_manager.py``, ``map_loader.py``);
- a minimised window pauses the game until ``restore_window`` (A.2; LS docs first_training.rst,
  ``ensure_not_minimized``).

Game speed scales ticks per wall-clock second (speed 1 = 100 ticks/s; 0 pauses physics while
frames still render). Failure modes are injected through ``FakeFaults`` (each fires once per
``FakeFaults`` object, so a game restarted with the same object comes back healthy).

Run one as a process (what the Linux launch-script path starts in tests):
``python -m rulka.envs.tmnf.fake --port 8478``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rulka.envs.sim.camera import Camera
from rulka.envs.sim.env import physics_car_state
from rulka.envs.sim.physics import CarPhysics, Controls
from rulka.envs.sim.tracks import Track, get_track
from rulka.envs.tmnf import protocol as P
from rulka.envs.tmnf import state as S
from rulka.envs.tmnf.protocol import MessageType as M

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 2000


@dataclass
class FakeFaults:
    """Failure modes to inject; a race time of None disables a fault. Each fires once."""

    refuse_for_s: float = 0.0
    """Do not listen for this long after start (game still launching)."""
    startup_for_s: float = 0.0
    """Stay in ``StartUp`` this long: the connect message is deferred until ``Menus``."""
    minimise_at_ms: int | None = None
    """Minimise the window once the race time reaches this: the game pauses (no ticks, no
    callbacks, no accepts) until ``restore_window`` (Linesight's docs, first_training.rst)."""
    hang_at_ms: int | None = None
    """Freeze (no ticks, no reads, no writes) once the race time reaches this."""
    close_at_ms: int | None = None
    """Close the client's socket once the race time reaches this (game keeps running)."""
    menus_at_ms: int | None = None
    """Drop back to the menus once the race time reaches this (no more run steps)."""
    slow_frame_at_ms: int | None = None
    """Delay the first frame at or after this race time by ``slow_frame_s`` (a slow render)."""
    slow_frame_s: float = 0.0
    split_writes: bool = False
    """Send every message in two writes split at a random byte."""
    mirrored_lateral: bool = False
    """State blobs carry the car's lateral axis negated (a game whose left is our right)."""
    speed_kmh: bool = False
    """State blobs carry the velocity in km/h instead of m/s."""
    respawn_on_give_up: bool = False
    """Give up puts the car back on the start line with the race clock running (a respawn)."""
    plugin_before_1_1: bool = False
    """An installed plugin older than 1.1.0: ``C_GET_API_STATE`` is an unknown id, never answered."""
    blob_offset_error: str | None = None
    """A field the state blob carries at a wrong offset (the blob layout differs from the fact
    sheet's): ``"angular_speed"`` writes it 12 bytes early, where the blob's reader finds zeros;
    ``"wheel_order"`` stores the two rear wheels the other way round. The game's own values (what
    its API reports) are unchanged."""
    empty_cp_times_reads: int = 0
    """At a finish, the first N state reads carry no checkpoint times (the case Linesight's
    game_instance_manager.py guards with ``cp_times_bug_handling_attempts``)."""
    fired: list[str] = field(default_factory=list)
    """Faults that have fired, in order."""

    def fire(self, name: str) -> bool:
        if name in self.fired:
            return False
        self.fired.append(name)
        return True


def _gates(track: Track, fractions: tuple[float, ...]) -> list[tuple[float, float, float, float, float]]:
    """Checkpoint gates (x, z, tx, tz, half width) at fractions of the race line, wall to wall."""
    out = []
    for f in fractions:
        idx = track.start_index + int(round(f * (track.finish_index - track.start_index)))
        x, _, z = track.centerline[idx]
        h = track.heading_at(idx)
        # the gate spans the verges like the simulator's finish line (a car on the grass passes it)
        out.append((float(x), float(z), math.sin(h), math.cos(h), track.gate_half_width(idx) + 1.0))
    return out


class FakeGame:
    """The fake game; ``start()`` runs it in a daemon thread, ``stop()`` ends it.

    Args:
        port: listening port on 127.0.0.1 (0 picks a free one; read ``port`` after ``start``).
        countdown_ms: race time at the start of a race (negative).
        load_s: time to load a map (``Menus`` -> ``InRace``).
        checkpoint_fractions: checkpoint gates along the race line (the finish is added).
        faults: failure modes to inject.
        trackmania_base_path, username: where the personal-best autosaves live
            (``Tracks/Replays/Autosaves/<user>_<map>.Replay.gbx``): a map loaded while its
            autosave exists shows the PB ghost in every frame.
        window_size: the game window's client size; a frame request larger than it is captured
            at the window's size (TMInterface's ``Graphics::CaptureScreenshot(vec2&inout size)``
            returns the size it captured, angel-lsp's as.predefined; the plugin reports it).
    """

    def __init__(self, port: int = 0, countdown_ms: int = -1500, load_s: float = 0.02,
                 checkpoint_fractions: tuple[float, ...] = (1 / 3, 2 / 3), faults: FakeFaults | None = None,
                 window_size: tuple[int, int] | None = None, trackmania_base_path: str | None = None,
                 username: str = "Player") -> None:
        self.requested_port = int(port)
        self.port = int(port)
        self.countdown_ms = int(countdown_ms)
        self.load_s = float(load_s)
        self.checkpoint_fractions = tuple(checkpoint_fractions)
        self.faults = faults or FakeFaults()
        self.window_size = window_size
        self.trackmania_base_path = trackmania_base_path
        self.username = username
        # TMInterface shows its console when the game starts, over every frame, until
        # toggle_console (Linesight's game_instance_manager.py toggles it after each launch)
        self.console_open = True
        # the personal-best autosave of the loaded map is replayed as a ghost car (Linesight's
        # map_loader.py hide_personal_record_replay renames it away before loading)
        self.ghost_visible = False
        self.log: list[str] = []
        self.counters: dict[str, int] = {"run_steps": 0, "frames": 0, "timeouts": 0, "connects": 0, "races": 0}
        self.state = "startup"
        self._listener: socket.socket | None = None
        self._client: socket.socket | None = None
        self._inbuf = bytearray()
        self._connect_pending = False
        self._timeout_ms = DEFAULT_TIMEOUT_MS
        self._period_ms = 10
        self._speed = 1.0
        self._frame_request: tuple[int, int] | None = None
        self._controls = Controls()
        self._inputs = (False, False, False, False)
        self._track: Track | None = None
        self._car: CarPhysics | None = None
        self._cameras: dict[tuple[int, int], Camera] = {}
        self._gates: list[tuple[float, float, float, float, float]] = []
        self.race_time_ms = 0
        self._cp_count = 0
        self._cp_times: list[int] = []
        self._finished = False
        self._finish_prevented = False
        self._load_done = 0.0
        self._frozen = False
        self.minimised = False
        self.focus_calls = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self.thread_cpu_s = 0.0  # CPU seconds of the game's thread, as of its last message sent
        self._rng = np.random.default_rng(0)
        self.map_name: str | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeGame:
        self._t0 = time.monotonic()
        if self.faults.refuse_for_s <= 0:
            self._listen()
        elif self.requested_port == 0:  # refusing for a while: still say now which port it will be
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.bind(("127.0.0.1", 0))
            self.requested_port = self.port = probe.getsockname()[1]
            probe.close()
        self._thread = threading.Thread(target=self.run, name=f"fake-tmnf-{self.port}", daemon=True)
        self._thread.start()
        return self

    def _listen(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if sys.platform != "win32":  # a restarted fake rebinds its port at once (TIME_WAIT)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.requested_port))
        s.listen(4)
        s.setblocking(False)
        self._listener = s
        self.port = s.getsockname()[1]

    def stop(self) -> None:
        """Stop the game loop and close every socket (like killing the game)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        for s in (self._client, self._listener):
            if s is not None:
                s.close()
        self._client = self._listener = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self) -> None:
        """The game loop (called by ``start``'s thread, or directly in a process)."""
        try:
            while not self._stop.is_set():
                self._frame()
        except Exception:  # noqa: BLE001 - a crashed fake is a crashed game: log it and stop
            log.exception("fake game crashed")
        finally:
            for s in (self._client, self._listener):
                if s is not None:
                    s.close()

    def restore_window(self) -> None:
        """Un-minimise (ShowWindow SW_SHOWNORMAL / xdotool windowmap in the real game)."""
        self.minimised = False
        self.log.append("window:restored")

    def focus_window(self) -> None:
        self.focus_calls += 1
        self.log.append("window:focused")

    # ------------------------------------------------------------------ one loop iteration
    def _frame(self) -> None:
        now = time.monotonic() - self._t0
        if self._frozen or self.minimised:
            self._stop.wait(0.01)
            return
        if self._listener is None:
            if now >= self.faults.refuse_for_s:
                self._listen()
            else:
                self._stop.wait(0.01)
                return
        if self.state == "startup" and now >= self.faults.startup_for_s:
            self.state = "menus"
        self._accept()
        if self._client is not None and self._connect_pending and self.state != "startup":
            self._connect_pending = False
            self.counters["connects"] += 1
            self._callback(P.encode_game_message(P.OnConnect()), M.SC_ON_CONNECT_SYNC)
        if self.state == "loading" and time.monotonic() >= self._load_done:
            self._begin_race()
        ticked = False
        if self.state in ("race", "finished") and self._speed > 0:
            self._tick()
            ticked = True
        if self._frame_request is not None and self._client is not None and self.state in ("race", "finished"):
            self._send_frame()
        if not ticked:
            self._stop.wait(0.002)
        elif 0 < self._speed < 100:
            time.sleep(0.01 / self._speed)

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            conn, _ = self._listener.accept()
        except (BlockingIOError, OSError):
            return
        if self._client is not None:
            self._client.close()
        conn.setblocking(True)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._client = conn
        self._inbuf.clear()
        self._connect_pending = True
        self.log.append("accept")

    def _drop_client(self, why: str) -> None:
        if self._client is not None:
            self._client.close()
        self._client = None
        self._inbuf.clear()
        self._timeout_ms = DEFAULT_TIMEOUT_MS
        self._frame_request = None
        self.log.append(f"drop:{why}")

    # ------------------------------------------------------------------ race
    def _load_map(self, name: str) -> bool:
        try:
            track = get_track(name)
        except Exception as exc:  # noqa: BLE001 - an unknown map leaves the game where it is
            self.log.append(f"map_not_found:{name}")
            log.warning("fake game: cannot load map %r: %s", name, exc)
            return False
        self._track = track
        self._car = CarPhysics(track)
        self._gates = _gates(track, self.checkpoint_fractions)
        self.map_name = name
        if self.trackmania_base_path:
            autosave = (Path(self.trackmania_base_path) / "Tracks" / "Replays" / "Autosaves"
                        / f"{self.username}_{name}.Replay.gbx")
            self.ghost_visible = autosave.exists()
        self.state = "loading"
        self._load_done = time.monotonic() + self.load_s
        return True

    def _begin_race(self) -> None:
        assert self._car is not None
        self.state = "race"
        self._car.reset()
        self.race_time_ms = self.countdown_ms
        self._cp_count = 0
        self._cp_times = [-1] * self.target
        self._finished = False
        self._controls = Controls()
        self._inputs = (False, False, False, False)
        self.counters["races"] += 1

    @property
    def target(self) -> int:
        return len(self._gates) + 1

    def _tick(self) -> None:
        car = self._car
        assert car is not None
        f = self.faults
        if self.state == "finished":  # post-finish ticks: TickTime > RaceTime, a run step each tick
            self._emit_run_step(self.race_time_ms)
            return
        self.race_time_ms += 10
        t = self.race_time_ms
        if f.minimise_at_ms is not None and t >= f.minimise_at_ms and f.fire("minimise"):
            self.minimised = True
            self.log.append("fault:minimise")
            return
        if f.hang_at_ms is not None and t >= f.hang_at_ms and f.fire("hang"):
            self._frozen = True
            self.log.append("fault:hang")
            return
        if f.menus_at_ms is not None and t >= f.menus_at_ms and f.fire("menus"):
            self.state = "menus"
            self.log.append("fault:menus")
            return
        if f.close_at_ms is not None and t >= f.close_at_ms and self._client is not None and f.fire("close"):
            self._drop_client("fault_close")
        crossed = False
        if t > 0:
            ox, oz = car.x, car.z
            car.step(self._controls, 1)
            if self._cp_count < len(self._gates):
                gx, gz, tx, tz, half = self._gates[self._cp_count]
                before = (ox - gx) * tx + (oz - gz) * tz
                after = (car.x - gx) * tx + (car.z - gz) * tz
                side = abs(-(car.x - gx) * tz + (car.z - gz) * tx)
                if before < 0 <= after and side <= half:
                    crossed = True
            elif car.finished:
                crossed = True
        if t % self._period_ms == 0:
            self._emit_run_step(t)
        if crossed and self.state == "race":
            self._cp_count += 1
            self._cp_times[self._cp_count - 1] = t
            self._finish_prevented = False
            self._callback(struct.pack("<iii", M.SC_CHECKPOINT_COUNT_CHANGED_SYNC, self._cp_count, self.target),
                           M.SC_CHECKPOINT_COUNT_CHANGED_SYNC)
            if self._cp_count == self.target and not self._finish_prevented:
                self._finished = True
                self.state = "finished"

    def _emit_run_step(self, t: int) -> None:
        self.counters["run_steps"] += 1
        if self._client is not None:
            self._callback(P.encode_game_message(P.RunStep(t)), M.SC_RUN_STEP_SYNC)

    def _send_frame(self) -> None:
        assert self._frame_request is not None and self._car is not None and self._track is not None
        w, h = self._frame_request
        if self.window_size is not None:  # CaptureScreenshot's inout size: what was captured
            w, h = min(w, self.window_size[0]), min(h, self.window_size[1])
        f = self.faults
        if f.slow_frame_at_ms is not None and self.race_time_ms >= f.slow_frame_at_ms and f.fire("slow_frame"):
            self.log.append("fault:slow_frame")
            time.sleep(f.slow_frame_s)
        cam = self._cameras.get((w, h))
        if cam is None or cam.track is not self._track:
            cam = self._cameras[(w, h)] = Camera(self._track, w, h)
        gray = cam.render(self._car.x, self._car.z, self._car.heading)
        bgra = np.empty((h, w, 4), dtype=np.uint8)
        bgra[..., :3] = gray[..., None]
        bgra[..., 3] = 255
        draw_overlays(bgra, console=self.console_open, ghost=self.ghost_visible)
        bgra.reshape(-1)[3:16:4] = np.frombuffer(struct.pack("<i", self.race_time_ms), dtype=np.uint8)[:4]
        self._frame_request = None
        self.counters["frames"] += 1
        self._callback(struct.pack("<iii", M.SC_REQUESTED_FRAME_SYNC, w, h) + bgra.tobytes(), M.SC_REQUESTED_FRAME_SYNC)

    # ------------------------------------------------------------------ state blobs
    def game_state(self) -> S.GameState:
        assert self._car is not None
        car = physics_car_state(self._car)
        car.race_time_ms = self.race_time_ms
        car.finished = self._finished
        if self.faults.mirrored_lateral:
            car.orientation = car.orientation.copy()
            car.orientation[:, 0] *= -1.0
        if self.faults.speed_kmh:
            car.velocity = car.velocity * 3.6
        n = self.target
        return S.GameState(
            car=car, race_time_ms=self.race_time_ms, has_player_info=True, checkpoint_count=self._cp_count,
            lap=0, race_finished=self._finished, cp_states=[i < self._cp_count for i in range(n)],
            cp_times=[(t, 0) for t in self._cp_times],
        )

    def api_state(self) -> P.ApiState:
        """What the game's API reports now (``C_GET_API_STATE``): the same car as the blob's,
        read from the game rather than from the blob's offsets; wheels in the API's accessor
        order FL, FR, BR, BL."""
        car = self.game_state().car
        api = [0, 1, 3, 2]  # CarState's FL, FR, RL, RR -> FrontLeft, FrontRight, BackRight, BackLeft
        return P.ApiState(
            race_time_ms=self.race_time_ms, position=tuple(car.position), velocity=tuple(car.velocity),
            angular_velocity=tuple(car.angular_velocity),
            wheel_contact=tuple(bool(car.wheel_contact[i]) for i in api),
            wheel_damper=tuple(float(car.wheel_damper_absorb[i]) for i in api),
            wheel_material=tuple(int(car.wheel_material[i]) for i in api),
        )  # type: ignore[arg-type]

    def _blob(self, state: S.GameState) -> bytes:
        blob = S.encode_state(state)
        if self.faults.blob_offset_error == "angular_speed":
            buf = bytearray(blob)
            buf[S.OFF_ANGULAR_SPEED - 12:S.OFF_ANGULAR_SPEED] = buf[S.OFF_ANGULAR_SPEED:S.OFF_ANGULAR_SPEED + 12]
            buf[S.OFF_ANGULAR_SPEED:S.OFF_ANGULAR_SPEED + 12] = bytes(12)
            blob = bytes(buf)
        elif self.faults.blob_offset_error == "wheel_order":
            buf = bytearray(blob)
            rr, rl = (S.OFF_WHEELS + S.WHEEL_STRIDE * i for i in (2, 3))
            buf[rr:rr + S.WHEEL_STRIDE], buf[rl:rl + S.WHEEL_STRIDE] = blob[rl:rl + S.WHEEL_STRIDE], blob[rr:rr + S.WHEEL_STRIDE]
            blob = bytes(buf)
        return blob

    def _rewind(self, blob: bytes) -> None:
        try:
            st = S.decode_state(blob)
        except S.BadStateBlob as exc:
            self.log.append("bad_rewind")
            log.warning("fake game: refused rewind: %s", exc)
            return
        car = self._car
        assert car is not None
        fwd = st.car.orientation[:, 2]
        car.reset(float(st.car.position[0]), float(st.car.position[2]), math.atan2(float(fwd[0]), float(fwd[2])))
        car.vx, car.vz = float(st.car.velocity[0]), float(st.car.velocity[2])
        car.gear, car.rpm = st.car.gear, st.car.rpm
        car.race_time_ms = max(st.race_time_ms, 0)
        self.race_time_ms = st.race_time_ms
        self._cp_count = min(st.checkpoint_count, self.target)
        times = [t for t, _ in st.cp_times][: self.target]
        self._cp_times = times + [-1] * (self.target - len(times))
        if st.cp_times and st.cp_times[-1][0] == -1 and self._cp_count == self.target:
            self._finish_prevented = True
        self._finished = False
        self.state = "race"

    # ------------------------------------------------------------------ the blocking callback
    def _send(self, data: bytes) -> bool:
        self.thread_cpu_s = time.thread_time()  # the game thread's CPU so far (benchmarks subtract it)
        if self._client is None:
            return False
        try:
            if self.faults.split_writes and len(data) > 1:
                cut = int(self._rng.integers(1, len(data)))
                self._client.sendall(data[:cut])
                time.sleep(0.001)
                self._client.sendall(data[cut:])
            else:
                self._client.sendall(data)
        except OSError:
            self._drop_client("send_failed")
            return False
        return True

    def _callback(self, message: bytes, msg_id: int) -> None:
        """Send ``message`` and execute client commands until the client echoes ``msg_id``."""
        if not self._send(message):
            return
        t0 = time.monotonic()
        while not self._stop.is_set() and self._client is not None:
            cmd = self._next_command()
            if cmd is None:
                if (time.monotonic() - t0) * 1000 > self._timeout_ms:
                    self.counters["timeouts"] += 1
                    log.info("fake game: Client disconnected due to timeout (%d ms)", self._timeout_ms)
                    self._drop_client("timeout")
                    return
                if not self._pump(0.02):
                    return
                continue
            kind, fields = cmd
            if kind == msg_id:
                return
            if kind == M.C_SHUTDOWN:
                self._drop_client("shutdown")
                return
            self._execute(kind, fields)

    def _pump(self, timeout: float) -> bool:
        """Read what the client sent within ``timeout``; False when the client is gone."""
        assert self._client is not None
        self._client.settimeout(timeout)
        try:
            data = self._client.recv(65536)
        except (TimeoutError, BlockingIOError):
            return True
        except OSError:
            self._drop_client("recv_failed")
            return False
        if not data:
            self._drop_client("eof")
            return False
        self._inbuf += data
        return True

    def _next_command(self) -> tuple[int, Any] | None:
        buf = self._inbuf
        if len(buf) < 4:
            return None
        kind = struct.unpack_from("<i", buf, 0)[0]
        if kind in (M.SC_RUN_STEP_SYNC, M.SC_CHECKPOINT_COUNT_CHANGED_SYNC, M.SC_LAP_COUNT_CHANGED_SYNC,
                    M.SC_REQUESTED_FRAME_SYNC, M.SC_ON_CONNECT_SYNC):
            del buf[:4]
            return kind, ()
        try:
            mtype = M(kind)
        except ValueError:
            del buf[:4]
            self.log.append(f"unknown:{kind}")
            return kind, ()
        if mtype in P.C_LENGTH_PREFIXED:
            if len(buf) < 8:
                return None
            n = struct.unpack_from("<i", buf, 4)[0]
            if not 0 <= n <= P.C_LENGTH_PREFIXED[mtype]:
                self._drop_client("bad_length")
                return None
            if len(buf) < 8 + n:
                return None
            payload = bytes(buf[8:8 + n])
            del buf[:8 + n]
            return kind, payload
        size = P.C_FIXED_SIZE[mtype]
        if len(buf) < 4 + size:
            return None
        fields = P.decode_command_fields(mtype, bytes(buf[4:4 + size]))
        del buf[:4 + size]
        return kind, fields

    def _execute(self, kind: int, fields: Any) -> None:
        in_race = self.state in ("race", "finished")
        if kind == M.C_SET_SPEED:
            self._speed = max(float(fields[0]), 0.0)
        elif kind == M.C_SET_INPUT_STATE:
            if in_race:
                left, right, accel, brake = fields
                self._inputs = (left, right, accel, brake)
                self._controls = Controls.from_flags(accel, brake, left, right)
        elif kind == M.C_GET_SIMULATION_STATE:
            state = self.game_state() if self._car is not None else None
            if (state is not None and self.target and self._cp_count == self.target
                    and self.faults.empty_cp_times_reads > 0):
                self.faults.empty_cp_times_reads -= 1
                self.log.append("fault:empty_cp_times")
                state.cp_times = []
            blob = self._blob(state) if state is not None else b""
            self._send(P.encode_bytes_reply(blob))
        elif kind == M.C_REWIND_TO_STATE:
            if in_race:
                self._rewind(fields)
        elif kind == M.C_REWIND_TO_CURRENT_STATE:
            pass  # restores the state unchanged
        elif kind == M.C_GIVE_UP:
            if in_race and self.faults.respawn_on_give_up and self._car is not None:
                self._car.reset()  # back on the line, the clock running on
                self.log.append("fault:respawn_on_give_up")
            elif in_race:
                self._begin_race()
        elif kind == M.C_PREVENT_SIMULATION_FINISH:
            if in_race:
                self._finish_prevented = True
                self.log.append("prevent_finish")
        elif kind == M.C_EXECUTE_COMMAND:
            self._console(fields.decode("utf-8", "replace"))
        elif kind == M.C_SET_TIMEOUT:
            self._timeout_ms = int(fields[0])
        elif kind == M.C_RACE_FINISHED:
            self._send(P.encode_int_reply(1 if self._finished else 0))
        elif kind == M.C_REQUEST_FRAME:
            self._frame_request = (int(fields[0]), int(fields[1]))
        elif kind == M.C_UNREQUEST_FRAME:
            self._frame_request = None
        elif kind == M.C_RESET_CAMERA:
            self.log.append("reset_camera")
        elif kind == M.C_SET_ON_STEP_PERIOD:
            self._period_ms = max(int(fields[0]), 10)
        elif kind == M.C_TOGGLE_INTERFACE:
            self.log.append(f"interface:{int(fields[0])}")
        elif kind == M.C_IS_IN_MENUS:
            self._send(P.encode_int_reply(1 if self.state == "menus" else 0))
        elif kind == M.C_GET_INPUTS:
            self._send(P.encode_bytes_reply(b""))
        elif kind == M.C_GET_API_STATE:
            if self.faults.plugin_before_1_1:
                self.log.append("fault:unknown_message")  # what the plugin logs; it writes nothing
            else:
                self._send(P.encode_api_state(self.api_state()))

    def _console(self, text: str) -> None:
        self.log.append(f"cmd:{text}")
        words = text.strip().split(None, 1)
        if not words:
            return
        if words[0] == "toggle_console":
            self.console_open = not self.console_open
        if words[0] == "map" and len(words) == 2:
            self._load_map(words[1].strip().strip('"').strip("'"))


def draw_overlays(bgra: np.ndarray, console: bool, ghost: bool) -> None:
    """What a real frame would carry besides the track: TMInterface's console (a dark panel over
    the top third) and the PB ghost (a bright car-sized block ahead of the camera)."""
    h, w = bgra.shape[:2]
    if console:
        bgra[: max(h // 3, 1), :, :3] = 24
    if ghost:
        bgra[h // 2 - max(h // 10, 1): h // 2, w // 2 - max(w // 12, 1): w // 2 + max(w // 12, 1), :3] = 250


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rulka.envs.tmnf.fake",
                                     description="a fake TMNF game with rulka's plugin protocol, for tests")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--faults", default="{}", help="FakeFaults fields as JSON")
    parser.add_argument("--countdown-ms", type=int, default=-1500)
    args = parser.parse_args(argv)
    game = FakeGame(args.port, countdown_ms=args.countdown_ms, faults=FakeFaults(**json.loads(args.faults)))
    game.start()
    try:
        while game.alive:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    game.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
