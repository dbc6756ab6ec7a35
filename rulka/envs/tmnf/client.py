"""``TMIClient``: the Python end of rulka's TMInterface plugin socket (one game instance).

Reads are exact and bounded (every length that comes from the game is checked against
``protocol.MAX_*`` before anything is allocated) and every read and write has a timeout
(``environment.tmi_protection_timeout_s``), so a frozen or crashed game surfaces as a
``GameTimeout`` / ``GameClosed`` instead of a hang. Commands are buffered and sent in one write
with the next echo or query, as Linesight does: the plugin only reads them inside a callback.

Only portable socket calls are used (``settimeout``, ``TCP_NODELAY``): the worker runs on Windows.
"""

from __future__ import annotations

import socket
import struct
import time

from rulka.envs.tmnf import protocol as P
from rulka.envs.tmnf.protocol import MessageType as M


class GameConnectionError(RuntimeError):
    """The game instance cannot be reached or stopped answering; the instance manager restarts it."""


class GameNotListening(GameConnectionError):
    """Nothing accepts connections on the plugin's port."""


class GameTimeout(GameConnectionError):
    """No bytes from the game within the protection timeout."""


class GameClosed(GameConnectionError):
    """The game closed the connection (plugin timeout, crash, reload)."""


def not_listening_message(port: int, waited_s: float, profile: str = "default") -> str:
    return (
        f"No TMInterface plugin listening on 127.0.0.1:{port} after {waited_s:.0f}s. Check that the "
        f"TMLoader profile '{profile}' loads TMInterface 2.1.x, that rulka's plugin is in "
        "~/Documents/TMInterface/Plugins and enabled (`rulka tm install-plugin`, then `rulka tm check`), "
        f"and that the game was started with /configstring=\"set custom_port {port}\"."
    )


def timeout_message(seconds: float) -> str:
    return (
        f"No message from the game for {seconds:.0f}s (environment.tmi_protection_timeout_s). Is the window "
        "minimised (TMNF pauses), stuck at login, or crashed? Restarting the game (reconnecting when rulka "
        "did not launch it)."
    )


def closed_message(waiting_for: str, plugin_timeout_ms: int) -> str:
    return (
        f"Game dropped the connection while rulka was {waiting_for}: no reply within the plugin's "
        f"{plugin_timeout_ms} ms (environment.timeout_during_run_ms), or the game closed. Raise the run "
        "timeout or speed up the step; reconnecting."
    )


class TMIClient:
    """One connection to the plugin of one game instance on 127.0.0.1:``port``.

    Args:
        port: the instance's plugin port (``user.base_tmi_port + instance``).
        protection_timeout_s: timeout of every socket read and write
            (``environment.tmi_protection_timeout_s``).
    """

    def __init__(self, port: int, protection_timeout_s: float = 500.0, host: str = "127.0.0.1") -> None:
        self.port = int(port)
        self.host = host
        self.protection_timeout_s = float(protection_timeout_s)
        self.sock: socket.socket | None = None
        self.frame_size: tuple[int, int] | None = None
        self.plugin_timeout_ms = 2000
        self._out = bytearray()
        self.bytes_in = 0
        self.messages_in = 0
        self.frame_size_mismatches = 0
        """Frames the game captured at another size than requested (each raised ProtocolError)."""

    # -------------------------------------------------------------------- connection
    def connect(self, wait_s: float, profile: str = "default", alive: object = None) -> None:
        """Connect, retrying refused connections for up to ``wait_s`` seconds (the game may still
        be starting); ``GameNotListening`` after that. ``alive`` (a callable) stops the wait early
        when it returns False (the launched game died)."""
        deadline = time.monotonic() + wait_s
        t0 = time.monotonic()
        while True:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(min(2.0, max(wait_s, 0.1)))
            try:
                s.connect((self.host, self.port))
            except OSError:
                s.close()
                if time.monotonic() >= deadline or (callable(alive) and not alive()):
                    raise GameNotListening(not_listening_message(self.port, time.monotonic() - t0, profile)) from None
                time.sleep(0.05)
                continue
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(self.protection_timeout_s)
            self.sock = s
            self.frame_size = None
            self.plugin_timeout_ms = 2000
            self._out.clear()
            return

    def close(self, polite: bool = True) -> None:
        """Send ``C_SHUTDOWN`` (the plugin drops us and keeps listening) and close the socket."""
        s, self.sock = self.sock, None
        if s is None:
            return
        try:
            if polite:
                s.settimeout(0.5)
                s.sendall(bytes(self._out) + P.encode_command(M.C_SHUTDOWN))
        except OSError:
            pass
        finally:
            self._out.clear()
            s.close()

    @property
    def connected(self) -> bool:
        return self.sock is not None

    # -------------------------------------------------------------------- raw I/O
    def _sock(self) -> socket.socket:
        if self.sock is None:
            raise GameClosed("not connected to the game")
        return self.sock

    def flush(self) -> None:
        """Send the buffered commands."""
        if not self._out:
            return
        data, self._out = bytes(self._out), bytearray()
        try:
            self._sock().sendall(data)
        except TimeoutError:
            self._drop()
            raise GameTimeout(timeout_message(self.protection_timeout_s)) from None
        except OSError as exc:
            self._drop()
            raise GameClosed(closed_message("sending commands", self.plugin_timeout_ms) + f" ({exc})") from None

    def _drop(self) -> None:
        s, self.sock = self.sock, None
        if s is not None:
            s.close()

    def read_exact(self, n: int, waiting_for: str = "waiting for the game") -> bytes:
        """Exactly ``n`` bytes; ``GameTimeout`` / ``GameClosed`` otherwise (and the socket is dropped)."""
        sock = self._sock()
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            try:
                k = sock.recv_into(view[got:], n - got)
            except TimeoutError:
                self._drop()
                raise GameTimeout(timeout_message(self.protection_timeout_s)) from None
            except OSError as exc:
                self._drop()
                raise GameClosed(closed_message(waiting_for, self.plugin_timeout_ms) + f" ({exc})") from None
            if k == 0:
                self._drop()
                raise GameClosed(closed_message(waiting_for, self.plugin_timeout_ms))
            got += k
        self.bytes_in += n
        return bytes(buf)

    def _read_i32(self, waiting_for: str) -> int:
        return P.unpack_i32(self.read_exact(4, waiting_for))

    def _read_sized(self, limit: int, what: str) -> bytes:
        n = self._read_i32(what)
        if not 0 <= n <= limit:
            self._drop()
            raise P.ProtocolError(f"the game announced {n} bytes of {what} (limit {limit})")
        return self.read_exact(n, what)

    # -------------------------------------------------------------------- game messages
    def receive(self) -> P.GameMessage:
        """The next message from the game (blocks up to the protection timeout); the buffered
        commands are sent first."""
        self.flush()
        msg_id = self._read_i32("waiting for the next game message")
        size = P.SC_FIXED_SIZE.get(msg_id)  # type: ignore[call-overload]
        if size is not None:
            payload = self.read_exact(size, "reading a game message") if size else b""
        elif msg_id == M.SC_REQUESTED_FRAME_SYNC:
            if self.frame_size is None:
                self._drop()
                raise P.ProtocolError("the game sent a frame that was never requested")
            w, h = self.frame_size
            header = self.read_exact(8, "reading a frame's size")
            gw, gh = struct.unpack("<ii", header)
            if not (0 < gw <= P.MAX_FRAME_SIDE and 0 < gh <= P.MAX_FRAME_SIDE):
                self._drop()
                raise P.ProtocolError(f"the game sent a frame of size {gw}x{gh} (out of range)")
            # read what was captured (the stream stays in step), then check it is what we asked
            payload = header + self.read_exact(gw * gh * 4, "reading a frame")
            self.frame_size = None
            if (gw, gh) != (w, h):
                self.frame_size_mismatches += 1
        else:
            self._drop()
            raise P.ProtocolError(f"unknown message id {msg_id} from the game (stale plugin? `rulka tm install-plugin`)")
        self.messages_in += 1
        return P.decode_game_message(msg_id, payload, (w, h) if msg_id == M.SC_REQUESTED_FRAME_SYNC else None)

    def respond(self, msg_id: int) -> None:
        """Echo ``msg_id``: the game leaves the callback that sent it (sent with the buffer)."""
        self._out += P.encode_echo(msg_id)
        self.flush()

    # -------------------------------------------------------------------- commands (buffered)
    def _cmd(self, kind: M, *args: object) -> None:
        self._out += P.encode_command(kind, *args)

    def set_speed(self, speed: float) -> None:
        self._cmd(M.C_SET_SPEED, speed)

    def rewind_to_state(self, blob: bytes) -> None:
        self._cmd(M.C_REWIND_TO_STATE, blob)

    def rewind_to_current_state(self) -> None:
        self._cmd(M.C_REWIND_TO_CURRENT_STATE)

    def set_input_state(self, left: bool, right: bool, accelerate: bool, brake: bool) -> None:
        self._cmd(M.C_SET_INPUT_STATE, left, right, accelerate, brake)

    def give_up(self) -> None:
        self._cmd(M.C_GIVE_UP)

    def prevent_simulation_finish(self) -> None:
        self._cmd(M.C_PREVENT_SIMULATION_FINISH)

    def execute_command(self, text: str) -> None:
        self._cmd(M.C_EXECUTE_COMMAND, text)

    def set_timeout(self, ms: int) -> None:
        self._cmd(M.C_SET_TIMEOUT, ms)
        self.plugin_timeout_ms = int(ms)

    def request_frame(self, width: int, height: int) -> None:
        self._cmd(M.C_REQUEST_FRAME, width, height)
        self.frame_size = (int(width), int(height))

    def unrequest_frame(self) -> None:
        self._cmd(M.C_UNREQUEST_FRAME)
        self.frame_size = None

    def reset_camera(self) -> None:
        self._cmd(M.C_RESET_CAMERA)

    def set_on_step_period(self, ms: int) -> None:
        self._cmd(M.C_SET_ON_STEP_PERIOD, ms)

    def toggle_interface(self, visible: bool) -> None:
        self._cmd(M.C_TOGGLE_INTERFACE, 1 if visible else 0)

    # -------------------------------------------------------------------- queries (flush + reply)
    def get_simulation_state(self) -> bytes:
        self._cmd(M.C_GET_SIMULATION_STATE)
        self.flush()
        return self._read_sized(P.MAX_BLOB_BYTES, "the simulation state")

    def race_finished(self) -> bool:
        self._cmd(M.C_RACE_FINISHED)
        self.flush()
        return self._read_i32("the race-finished reply") == 1

    def is_in_menus(self) -> bool:
        self._cmd(M.C_IS_IN_MENUS)
        self.flush()
        return self._read_i32("the in-menus reply") == 1

    def get_api_state(self) -> P.ApiState:
        """What TMInterface's API reports for the step the game is parked in (the doctor's)."""
        self._cmd(M.C_GET_API_STATE)
        self.flush()
        return P.decode_api_state(self.read_exact(P.API_STATE_SIZE, "the API state"))

    def get_inputs(self) -> str:
        self._cmd(M.C_GET_INPUTS)
        self.flush()
        return self._read_sized(P.MAX_TEXT_BYTES, "the input script").decode("utf-8", "replace")
