"""A fake TrackMania 2020 for tests and CI: rulka's simulator behind a faithful fake of the
Openplanet plugin, a fake window and a fake gamepad.

``FakeTM2020`` runs the built-in simulator's car in real time (10 ms physics ticks paced by the
wall clock, optionally ``time_scale`` times faster) and, like rulka's plugin (sources: section
keys of /work/shared/game-interfaces.md; "OP" = Openplanet 1.29.5's dumps vendored in
tests/angelscript/vendor/):

- listens on 127.0.0.1 (port 0 picks a free one: ``port`` tells which) for one client and writes
  one telemetry record per "rendered frame" at ``fps``, each in a single send; a failed send
  drops the client and it listens again; a client that hung up is dropped at once, in menus too
  (F.2, D.1; OP ``Net::Socket::IsHungUp``);
- reports the car's Dir / Up / Left with Left = Up x Dir (the simulator's world is right-handed;
  the game's sign is checked per stream by the interface), and turbo pads as asphalt (OP
  ``EPlugSurfaceMaterialId``: 7 and 26 are ``Turbo_Deprecated``);
- gives up on the reset button (keyboard Delete in the game, what every rulka controller sends):
  the race restarts at zero, countdown of ``countdown_s`` (records flow with a negative race
  time, the car is held), then go;
- respawns on ``respawn()`` (gamepad B / keyboard Backspace in the game): back to the last
  checkpoint passed with the race clock running, or a restart at zero before the first one
  (/work/shared/game-interfaces.md, "Corrections": TM2020 reset; TMRL's B only restarts because
  its track has no checkpoint);
- sets the finished flag from the finish-line crossing until the next reset, and shows the
  end-of-race pop-up until the pad's A or a click on it closes it (TMRL's two ways);
- loses a keyboard give up while its window does not have the keyboard focus (``steal_focus``,
  ``focus_refused``); ``FakeWindow.focus()`` gives it the focus.

``FakeGamepad`` (a ``Controller``) sets the fake car's inputs; ``FakeWindow`` (a
``FrameSource``) renders the simulator's camera at the window size as BGRA.

Failure modes, each switched on and off by a test (or by ``faults`` in the config):
``silence(seconds)`` (plugin alive but writes nothing), ``drop_client()`` (a plugin reload closes
the socket), ``lose_window(seconds)`` (window closed or minimised), ``pause(seconds)`` (the in-game
menu: the race clock and the car stop, records carry ``paused = 1``; ``toggle_menu()`` is Escape).
``Faults`` break, each, one assumption ``rulka tm doctor`` checks (mirrored world, km/h, a respawn
for the give up, no pause flag).
"""

from __future__ import annotations

import logging
import math
import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from rulka.envs.sim.camera import Camera
from rulka.envs.sim.physics import MATERIAL_ID, CarPhysics, Controls
from rulka.envs.sim.tracks import Track, get_track
from rulka.envs.tm2020 import telemetry as T
from rulka.envs.tm2020.capture import WindowLost
from rulka.envs.tm2020.control import Controller

log = logging.getLogger(__name__)

TICK_S = 0.01


@dataclass
class Faults:
    """A game that breaks one of the assumptions ``rulka tm doctor`` checks (each off by default)."""

    mirrored_world: bool = False
    """Every x component negated (position, velocity, Dir, Left): a left-handed world, so the
    lateral axis rulka derives (Up x Dir) points to the car's right."""
    speed_kmh: bool = False
    """The speed field in km/h instead of m/s."""
    respawn_on_give_up: bool = False
    """Give up (Delete) puts the car back on the start line with the race clock running on, no
    countdown: a respawn, what a Delete bound to another action would give."""
    no_pause_flag: bool = False
    """Records never carry the paused flag, also while the in-game menu stops the race."""


class FakeTM2020:
    """The fake game. ``start()`` opens the port and starts the clock; ``close()`` stops both.

    Args:
        track: a simulator track name (or ``Track``).
        port: TCP port (0: any free port).
        fps: telemetry records per second of wall time.
        time_scale: game seconds per wall-clock second (1 = real time, like the game).
        countdown_s: game seconds between a reset and the start signal.
        window_size: (width, height) of the fake window in pixels.
        checkpoint_fractions: checkpoints along the race line (fractions of its length), each
            passed when the car's nearest race-line sample reaches it.
    """

    def __init__(
        self,
        track: str | Track = "default",
        port: int = 0,
        fps: float = 60.0,
        time_scale: float = 1.0,
        countdown_s: float = 1.5,
        window_size: tuple[int, int] = (256, 128),
        checkpoint_fractions: tuple[float, ...] = (),
        faults: Faults | None = None,
    ) -> None:
        self.faults = faults or Faults()
        self.track = get_track(track) if isinstance(track, str) else track
        self.fps = float(fps)
        self.time_scale = float(time_scale)
        self.countdown_ms = int(round(countdown_s * 1000))
        self.window_size = (int(window_size[0]), int(window_size[1]))
        self.car = CarPhysics(self.track)
        tr = self.track
        self._line = tr.centerline[tr.start_index : tr.finish_index + 1, [0, 2]]
        self.checkpoints = [int(round(f * (len(self._line) - 1))) for f in checkpoint_fractions]
        self.checkpoints_passed = 0
        self.respawns = 0
        self._clock_offset_ms = 0
        self._controls = Controls()
        self._lock = threading.RLock()
        self._race_ms = -self.countdown_ms  # game ms since the start signal
        self._finished = False
        self._frame = 0
        self._silent_until = 0.0
        self._window_lost_until = 0.0
        self._paused_until = 0.0
        self._mirrored_until = 0.0
        self._drop = False
        self.focused = True  # the game window has the keyboard focus
        self.focus_refused = False  # focus() fails (another window holds the foreground)
        self.end_screen = False  # the end-of-race pop-up is shown
        self.end_screen_closed_by = ""
        self._stop = threading.Event()
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", int(port)))
        self.port = self._server.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self.events: list[tuple[float, str]] = []  # (time, what): resets, finishes, faults, clients
        self.clients = 0
        self.resets = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeTM2020:
        self._server.listen(1)
        self._server.settimeout(0.1)
        for target, name in ((self._physics_loop, "fake-tm2020-physics"), (self._serve_loop, "fake-tm2020-plugin")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2.0)
        self._server.close()

    def __enter__(self) -> FakeTM2020:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _event(self, what: str) -> None:
        self.events.append((time.monotonic(), what))

    # ------------------------------------------------------------------ inputs (the pad)
    def set_inputs(self, gas: float, brake: float, steer: float) -> None:
        """Trigger and stick values, like a pad (steer -1 left .. +1 right)."""
        with self._lock:
            # the simulator's steer is positive to the left
            self._controls = Controls(gas=gas, brake=brake, steer=-steer)

    @property
    def inputs(self) -> tuple[float, float, float]:
        c = self._controls
        return (c.gas, c.brake, -c.steer)

    def give_up(self) -> None:
        """Give up (keyboard Delete): car back on the start line, race time back to the
        countdown, checkpoints and the finished flag cleared."""
        with self._lock:
            if self.faults.respawn_on_give_up:
                self.car.reset()  # the clock runs on
                self.respawns += 1
                self._event("respawn (fault: respawn_on_give_up)")
                return
            self.car.reset()
            self._race_ms = -self.countdown_ms
            self._finished = False
            self.checkpoints_passed = 0
            self._clock_offset_ms = 0
            self.resets += 1
            self._event("reset")

    press_reset = give_up

    # ------------------------------------------------------------------ keyboard focus, end screen
    def keyboard_give_up(self) -> None:
        """Keyboard Delete: a give up when the game window has the keyboard focus, lost
        otherwise (the key goes to the focused window; TMRL's get_started.md)."""
        if not self.focused:
            self._event("give_up_lost (window not focused)")
            return
        self.give_up()

    def steal_focus(self) -> None:
        """Another window takes the keyboard focus."""
        self.focused = False
        self._event("focus_lost")

    def take_focus(self) -> bool:
        """What the window's focus() does: the game gets the focus unless ``focus_refused``."""
        if not self.focus_refused:
            if not self.focused:
                self._event("focused")
            self.focused = True
        return self.focused

    def confirm(self) -> None:
        """Pad A: closes the end-of-race pop-up (TMRL's control_gamepad.py)."""
        if self.end_screen:
            self.end_screen = False
            self.end_screen_closed_by = "A"
            self._event("end_screen_closed A")

    def click(self, x: int, y: int) -> None:
        """A left click at client pixel (x, y): closes the pop-up when it lands within 12 px of
        the point TMRL clicks for this window size."""
        from rulka.envs.tm2020.capture import end_screen_click_point

        bx, by = end_screen_click_point(*self.window_size)
        self._event(f"click {x},{y}")
        if self.end_screen and abs(x - bx) <= 12 and abs(y - by) <= 12:
            self.end_screen = False
            self.end_screen_closed_by = "click"
            self._event("end_screen_closed click")

    def respawn(self) -> None:
        """Respawn (gamepad B / keyboard Backspace): at the last checkpoint passed, standing,
        with the race clock running on; before the first checkpoint it is a give up."""
        with self._lock:
            if not self.checkpoints_passed:
                self.give_up()
                return
            idx = self.track.start_index + self.checkpoints[self.checkpoints_passed - 1]
            x, _, z = self.track.centerline[idx]
            self.car.reset(float(x), float(z), self.track.heading_at(idx))
            self._clock_offset_ms = self._race_ms  # the car's own clock restarts; the race's does not
            self.respawns += 1
            self._event("respawn")

    def _pass_checkpoints(self) -> None:
        if self.checkpoints_passed >= len(self.checkpoints):
            return
        nearest = int(np.argmin((self._line[:, 0] - self.car.x) ** 2 + (self._line[:, 1] - self.car.z) ** 2))
        while self.checkpoints_passed < len(self.checkpoints) and nearest >= self.checkpoints[self.checkpoints_passed]:
            self.checkpoints_passed += 1
            self._event(f"checkpoint {self.checkpoints_passed}")

    def start_autopilot(self) -> None:
        """Drive like a person would: the simulator's scripted driver holds the pad (for
        ``record-line`` demos and tests) until ``stop_autopilot``."""
        from rulka.envs.sim.driver import ScriptedDriver

        driver = ScriptedDriver(self.track)
        self._autopilot = threading.Event()

        def run() -> None:
            while not self._autopilot.is_set() and not self._stop.is_set():
                with self._lock:
                    c = driver.controls(self.car)
                self.set_inputs(c.gas, c.brake, -c.steer)
                self._autopilot.wait(TICK_S / max(self.time_scale, 1.0))

        t = threading.Thread(target=run, name="fake-tm2020-autopilot", daemon=True)
        t.start()
        self._threads.append(t)

    def stop_autopilot(self) -> None:
        if getattr(self, "_autopilot", None) is not None:
            self._autopilot.set()
        self.set_inputs(0.0, 0.0, 0.0)

    # ------------------------------------------------------------------ faults
    def silence(self, seconds: float) -> None:
        """The plugin stays connected but writes nothing (a script error, a loading screen)."""
        self._silent_until = time.monotonic() + seconds
        self._event(f"silence {seconds}")

    def drop_client(self) -> None:
        """Close the client's socket (a plugin reload); the plugin listens again."""
        self._drop = True
        self._event("drop_client")

    def lose_window(self, seconds: float) -> None:
        """The window is gone (closed or minimised) for ``seconds``."""
        self._window_lost_until = time.monotonic() + seconds
        self._event(f"lose_window {seconds}")

    def pause(self, seconds: float) -> None:
        """Open the in-game menu for ``seconds``: clock and car stop, records say paused."""
        self._paused_until = time.monotonic() + seconds
        self._event(f"pause {seconds}")

    def toggle_menu(self) -> None:
        """Escape: open the in-game menu (the race clock and the car stop) or close it."""
        self._paused_until = 0.0 if self.paused else math.inf
        self._event("menu " + ("open" if self.paused else "closed"))

    def mirror(self, seconds: float) -> None:
        """Send records whose Left is flipped for ``seconds`` (a mirrored basis: what a plugin
        reading another vector, or a game that changed handedness, would send)."""
        self._mirrored_until = time.monotonic() + seconds
        self._event(f"mirror {seconds}")

    @property
    def paused(self) -> bool:
        return time.monotonic() < self._paused_until

    @property
    def window_lost(self) -> bool:
        return time.monotonic() < self._window_lost_until

    # ------------------------------------------------------------------ physics
    def _physics_loop(self) -> None:
        t0 = time.monotonic()
        game_ticks = 0
        carry = 0.0
        last = t0
        while not self._stop.is_set():
            now = time.monotonic()
            dt = now - last
            last = now
            if not self.paused:
                carry += dt * self.time_scale / TICK_S
            n = int(carry)
            if n > 0:
                carry -= n
                n = min(n, 50)  # a stalled thread does not teleport the car
                with self._lock:
                    self._advance(n)
                game_ticks += n
            self._stop.wait(TICK_S / max(self.time_scale, 1.0))

    def _advance(self, n: int) -> None:
        for _ in range(n):
            if self._finished:
                self._race_ms += 10  # the clock runs on behind the finish screen
                continue
            if self._race_ms < 0:
                self._race_ms += 10
                continue
            self.car.step(self._controls, 1)
            self._race_ms += 10
            self._pass_checkpoints()
            if self.car.finished:
                self._finished = True
                self.end_screen = True
                self._race_ms = self._clock_offset_ms + int(self.car.finish_time_ms or self._race_ms)
                self._event("finish")

    def record_values(self) -> np.ndarray:
        """The telemetry fields of the car now (what the plugin would write)."""
        with self._lock:
            car = self.car
            h = car.heading
            s, c = math.sin(h), math.cos(h)
            v = np.zeros(T.N_FIELDS, dtype=np.float32)
            v[0] = self._race_ms
            v[1] = car.forward_speed
            v[2:5] = (car.x, 0.0, car.z)
            v[5:8] = (car.vx, 0.0, car.vz)
            v[8:11] = (s, 0.0, c)  # forward
            v[11:14] = (0.0, 1.0, 0.0)  # up
            # vis.Left; the simulator's world is right-handed, so Left = Up x Dir here. The real
            # game's sign is logged by the interface at the first record (docs/tm2020.md).
            v[14:17] = (c, 0.0, -s)
            if time.monotonic() < self._mirrored_until:
                v[14:17] = (-c, 0.0, s)
            gas, brake, steer = self.inputs
            v[17:20] = (steer, gas, 1.0 if brake > 0 else 0.0)
            v[20] = 1.0 if self._finished else 0.0
            v[21] = car.gear
            v[22] = car.rpm
            v[23:27] = [_material(code) for code in car.wheel_codes]
            v[27:31] = 1.0 if car.sliding else 0.0
            v[31:35] = 0.1
            v[35] = 1.0 if self.paused and not self.faults.no_pause_flag else 0.0
            if self.faults.speed_kmh:
                v[1] *= 3.6
            if self.faults.mirrored_world:
                v[[2, 5, 8, 14]] *= -1.0
            return v

    # ------------------------------------------------------------------ plugin
    def _serve_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.clients += 1
            self._drop = False
            self._event("client")
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                self._stream(client)
            finally:
                client.close()

    def _stream(self, client: socket.socket) -> None:
        period = 1.0 / self.fps
        next_t = time.monotonic()
        while not self._stop.is_set():
            if self._drop:
                self._drop = False
                return
            now = time.monotonic()
            if now < next_t:
                time.sleep(next_t - now)
            next_t = max(next_t + period, time.monotonic() - period)
            if _hung_up(client):
                # rulka's plugin asks Net::Socket::IsHungUp() every frame, in menus too (a write
                # only fails in a race): OpenplanetCore.json 1.29.5 lists it
                self._event("client_hung_up")
                return
            if time.monotonic() < self._silent_until:
                continue
            rec = T.encode_record(self._frame, self.record_values())
            self._frame += 1
            try:
                client.sendall(rec)
            except OSError:
                return


def _hung_up(client: socket.socket) -> bool:
    """True when the peer closed the connection (what Openplanet's ``IsHungUp()`` reports)."""
    readable, _, _ = select.select([client], [], [], 0)
    if not readable:
        return False
    try:
        return client.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _material(code: int) -> float:
    """The TM2020 material id under a wheel on a simulator cell. TM2020 turbo pads are no
    surface material (EPlugSurfaceMaterialId 7 and 26 are Turbo_Deprecated in OpenplanetNext.json
    1.29.5; the boost is vis.IsTurbo): a turbo cell reads as the Asphalt (16) it is laid on."""
    mid = MATERIAL_ID.get(code, 16)
    return 16.0 if mid in (7, 26) else float(mid)


class FakeGamepad(Controller):
    """The fake game's pad: sets its inputs, presses its reset button."""

    name = "fake"

    def __init__(self, game: FakeTM2020) -> None:
        self.game = game
        super().__init__()

    def _send(self, gas: float, brake: float, steer: float) -> None:
        self.game.set_inputs(gas, brake, steer)

    def _reset_button(self, down: bool) -> None:
        if down:  # every rulka controller's reset is the game's give up: keyboard Delete
            self.game.keyboard_give_up()

    def _confirm_button(self, down: bool) -> None:
        if down:
            self.game.confirm()

    def _menu_button(self, down: bool) -> None:
        if down:
            self.game.toggle_menu()


class FakeWindow:
    """The fake game window: the simulator's camera at the window size, as BGRA."""

    def __init__(self, game: FakeTM2020) -> None:
        self.game = game
        w, h = game.window_size
        self.camera = Camera(game.track, w, h)
        self._bgra = np.full((h, w, 4), 255, dtype=np.uint8)
        self.grabs = 0

    def grab(self) -> np.ndarray:
        if self.game.window_lost:
            raise WindowLost("Trackmania window not found (fake: window lost)")
        car = self.game.car
        with self.game._lock:
            x, z, heading = car.x, car.z, car.heading
        gray = self.camera.render(x, z, heading)
        out = self._bgra.copy()
        out[:, :, 0] = gray
        out[:, :, 1] = gray
        out[:, :, 2] = gray
        self.grabs += 1
        return out

    def focus(self) -> bool:
        return self.game.take_focus()

    def click(self, x: int, y: int) -> None:
        self.game.click(x, y)

    def close(self) -> None:
        pass


def build_fake(cfg: Any, track: str, window_size: tuple[int, int]) -> FakeTM2020:
    """The fake game a ``environment.tm2020`` section describes (``fake_*`` keys)."""
    return FakeTM2020(
        track=track,
        port=int(cfg.plugin_port) if cfg.fake_fixed_port else 0,
        # fake_fps is the game's frame rate (per game second): a game rendering 60 frames per
        # second, run time_scale times faster, sends time_scale x 60 records per wall second, so
        # each record stays ~17 ms of game time apart (at 4x and 60 records per wall second a
        # 50 ms step saw a record 0-67 ms old, and one step in four saw none new)
        fps=float(cfg.fake_fps) * float(cfg.fake_time_scale),
        time_scale=float(cfg.fake_time_scale),
        countdown_s=float(cfg.fake_countdown_s),
        window_size=window_size,
    ).start()
