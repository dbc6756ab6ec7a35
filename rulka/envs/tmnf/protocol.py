"""The TMInterface 2 socket protocol rulka's plugin speaks (fact sheet A.4/A.5), both directions.

One TCP stream, no framing: every message is a little-endian int32 id followed by the fields of
that id. The game plugin is the TCP server (127.0.0.1, one port per game instance); the Python
client connects. Messages the game sends (``SC_*``) block the game inside a callback until the
client echoes the same id; client commands (``C_*``) sent while the game is blocked are executed in
order, and the four queries among them (``C_GET_SIMULATION_STATE``, ``C_RACE_FINISHED``,
``C_IS_IN_MENUS``, ``C_GET_INPUTS``) are answered at once.

This module only encodes and decodes bytes; ``rulka.envs.tmnf.client`` owns the socket, and the
fake game (``rulka.envs.tmnf.fake``) uses the same functions from the other side. Strings are sent
as an int32 *byte* length and the UTF-8 bytes (Linesight sends the character count, which breaks
non-ASCII map paths).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "MessageType", "GameMessage", "RunStep", "CheckpointCountChanged", "LapCountChanged",
    "RequestedFrame", "OnConnect", "ProtocolError", "MAX_BLOB_BYTES", "MAX_FRAME_SIDE",
    "MAX_TEXT_BYTES", "encode_command", "encode_echo", "encode_string",
]


class MessageType(IntEnum):
    """Message ids, 1-based in the plugin's enum order (fact sheet A.5)."""

    SC_RUN_STEP_SYNC = 1
    SC_CHECKPOINT_COUNT_CHANGED_SYNC = 2
    SC_LAP_COUNT_CHANGED_SYNC = 3
    SC_REQUESTED_FRAME_SYNC = 4
    SC_ON_CONNECT_SYNC = 5
    C_SET_SPEED = 6
    C_REWIND_TO_STATE = 7
    C_REWIND_TO_CURRENT_STATE = 8
    C_GET_SIMULATION_STATE = 9
    C_SET_INPUT_STATE = 10
    C_GIVE_UP = 11
    C_PREVENT_SIMULATION_FINISH = 12
    C_SHUTDOWN = 13
    C_EXECUTE_COMMAND = 14
    C_SET_TIMEOUT = 15
    C_RACE_FINISHED = 16
    C_REQUEST_FRAME = 17
    C_RESET_CAMERA = 18
    C_SET_ON_STEP_PERIOD = 19
    C_UNREQUEST_FRAME = 20
    C_TOGGLE_INTERFACE = 21
    C_IS_IN_MENUS = 22
    C_GET_INPUTS = 23
    C_GET_API_STATE = 24  # rulka's own (the doctor's); Linesight's protocol ends at 23


M = MessageType

# Bounds on anything whose size comes from the peer: a corrupt stream must not make us allocate
# gigabytes. A TMNF state blob is ~8.4 kB plus 4 bytes per checkpoint state and 8 per time.
MAX_BLOB_BYTES = 1 << 20
MAX_TEXT_BYTES = 1 << 20
MAX_FRAME_SIDE = 4096

_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_F32 = struct.Struct("<f")
_II = struct.Struct("<ii")
_INPUT = struct.Struct("<iBBBB")

# Bytes after the id of each game message with a fixed size (frames depend on the request).
SC_FIXED_SIZE: dict[MessageType, int] = {
    M.SC_RUN_STEP_SYNC: 4,
    M.SC_CHECKPOINT_COUNT_CHANGED_SYNC: 8,
    M.SC_LAP_COUNT_CHANGED_SYNC: 8,
    M.SC_ON_CONNECT_SYNC: 0,
}


class ProtocolError(Exception):
    """The byte stream does not follow the protocol (unknown id, impossible length)."""


# ---------------------------------------------------------------------------- game -> client
@dataclass(frozen=True)
class RunStep:
    """``SC_RUN_STEP_SYNC``: a physics step at ``race_time_ms`` (negative during the countdown)."""

    race_time_ms: int
    id = M.SC_RUN_STEP_SYNC


@dataclass(frozen=True)
class CheckpointCountChanged:
    """``SC_CHECKPOINT_COUNT_CHANGED_SYNC``: ``current`` of ``target`` checkpoints (the finish counts)."""

    current: int
    target: int
    id = M.SC_CHECKPOINT_COUNT_CHANGED_SYNC


@dataclass(frozen=True)
class LapCountChanged:
    """``SC_LAP_COUNT_CHANGED_SYNC``: ``current`` of ``target`` laps."""

    current: int
    target: int
    id = M.SC_LAP_COUNT_CHANGED_SYNC


@dataclass(frozen=True)
class RequestedFrame:
    """``SC_REQUESTED_FRAME_SYNC``: int32 width, int32 height (the size the game actually
    captured: ``Graphics::CaptureScreenshot`` takes it ``inout``), then ``height x width x 4`` BGRA
    bytes, rows top first."""

    data: bytes
    width: int
    height: int
    id = M.SC_REQUESTED_FRAME_SYNC


@dataclass(frozen=True)
class OnConnect:
    """``SC_ON_CONNECT_SYNC``: a client was accepted; the game waits for the handshake."""

    id = M.SC_ON_CONNECT_SYNC


GameMessage = RunStep | CheckpointCountChanged | LapCountChanged | RequestedFrame | OnConnect


def frame_size_message(captured: tuple[int, int], requested: tuple[int, int]) -> str:
    """The error when the game captured another size than was requested."""
    return (f"the game captured a {captured[0]}x{captured[1]} frame where {requested[0]}x{requested[1]} was "
            f"requested: is the game window smaller than the frame (minimised, or resized)? Make the window "
            f"at least that large or lower the frame size")


def decode_game_message(msg_id: int, payload: bytes, frame_size: tuple[int, int] | None) -> GameMessage:
    """The typed message for ``msg_id`` and its ``payload`` (the bytes after the id)."""
    if msg_id == M.SC_RUN_STEP_SYNC:
        return RunStep(_I32.unpack(payload)[0])
    if msg_id == M.SC_CHECKPOINT_COUNT_CHANGED_SYNC:
        return CheckpointCountChanged(*_II.unpack(payload))
    if msg_id == M.SC_LAP_COUNT_CHANGED_SYNC:
        return LapCountChanged(*_II.unpack(payload))
    if msg_id == M.SC_ON_CONNECT_SYNC:
        return OnConnect()
    if msg_id == M.SC_REQUESTED_FRAME_SYNC:
        if frame_size is None:
            raise ProtocolError("the game sent a frame that was never requested")
        w, h = frame_size
        if len(payload) < 8:
            raise ProtocolError(f"frame message of {len(payload)} bytes has no size")
        got = _II.unpack_from(payload)
        if got != (w, h):
            raise ProtocolError(frame_size_message(got, (w, h)))
        if len(payload) != 8 + w * h * 4:
            raise ProtocolError(f"frame of {len(payload) - 8} bytes, expected {w}x{h}x4")
        return RequestedFrame(payload[8:], w, h)
    raise ProtocolError(f"unknown message id {msg_id} from the game")


def encode_game_message(msg: GameMessage) -> bytes:
    """The bytes the game plugin sends for ``msg`` (used by the fake game and by tests)."""
    if isinstance(msg, RunStep):
        return _II.pack(M.SC_RUN_STEP_SYNC, msg.race_time_ms)
    if isinstance(msg, (CheckpointCountChanged, LapCountChanged)):
        return struct.pack("<iii", msg.id, msg.current, msg.target)
    if isinstance(msg, RequestedFrame):
        return struct.pack("<iii", M.SC_REQUESTED_FRAME_SYNC, msg.width, msg.height) + msg.data
    if isinstance(msg, OnConnect):
        return _I32.pack(M.SC_ON_CONNECT_SYNC)
    raise TypeError(f"not a game message: {msg!r}")


# ---------------------------------------------------------------------------- client -> game
def encode_string(text: str) -> bytes:
    """int32 byte length + UTF-8 bytes."""
    raw = text.encode("utf-8")
    if len(raw) > MAX_TEXT_BYTES:
        raise ValueError(f"string of {len(raw)} bytes is longer than {MAX_TEXT_BYTES}")
    return _I32.pack(len(raw)) + raw


def encode_echo(msg_id: int) -> bytes:
    """The reply that releases the game from the callback that sent ``msg_id``."""
    return _I32.pack(int(msg_id))


def encode_command(kind: MessageType, *args: object) -> bytes:
    """One client command with its fields (fact sheet A.5 byte layouts).

    ``C_SET_SPEED speed`` (float32), ``C_REWIND_TO_STATE blob`` (int32 length + bytes),
    ``C_SET_INPUT_STATE left right accelerate brake`` (4 x uint8), ``C_EXECUTE_COMMAND text``
    (int32 byte length + UTF-8), ``C_SET_TIMEOUT ms`` (uint32), ``C_REQUEST_FRAME width height``
    (2 x int32), ``C_SET_ON_STEP_PERIOD ms`` (int32), ``C_TOGGLE_INTERFACE on`` (int32 0/1); the
    other commands have no fields.
    """
    head = _I32.pack(int(kind))
    if kind == M.C_SET_SPEED:
        (speed,) = args
        return head + _F32.pack(float(speed))  # type: ignore[arg-type]
    if kind == M.C_REWIND_TO_STATE:
        (blob,) = args
        data = bytes(blob)  # type: ignore[call-overload]
        if len(data) > MAX_BLOB_BYTES:
            raise ValueError(f"state blob of {len(data)} bytes is larger than {MAX_BLOB_BYTES}")
        return head + _I32.pack(len(data)) + data
    if kind == M.C_SET_INPUT_STATE:
        left, right, accelerate, brake = (1 if a else 0 for a in args)
        return _INPUT.pack(int(kind), left, right, accelerate, brake)
    if kind == M.C_EXECUTE_COMMAND:
        (text,) = args
        return head + encode_string(str(text))
    if kind == M.C_SET_TIMEOUT:
        (ms,) = args
        return head + _U32.pack(min(max(int(ms), 0), 0xFFFFFFFF))  # type: ignore[call-overload]
    if kind == M.C_REQUEST_FRAME:
        w, h = (int(a) for a in args)  # type: ignore[call-overload]
        if not (0 < w <= MAX_FRAME_SIDE and 0 < h <= MAX_FRAME_SIDE):
            raise ValueError(f"frame size {w}x{h} out of range 1..{MAX_FRAME_SIDE}")
        return head + _II.pack(w, h)
    if kind in (M.C_SET_ON_STEP_PERIOD, M.C_TOGGLE_INTERFACE):
        (value,) = args
        return head + _I32.pack(int(value))  # type: ignore[call-overload]
    if kind in (M.C_REWIND_TO_CURRENT_STATE, M.C_GET_SIMULATION_STATE, M.C_GIVE_UP,
                M.C_PREVENT_SIMULATION_FINISH, M.C_SHUTDOWN, M.C_RACE_FINISHED, M.C_RESET_CAMERA,
                M.C_UNREQUEST_FRAME, M.C_IS_IN_MENUS, M.C_GET_INPUTS, M.C_GET_API_STATE):
        if args:
            raise ValueError(f"{kind.name} takes no fields")
        return head
    raise ValueError(f"{kind!r} is not a client command")


# Fields after the id of each client command with a fixed size (read by the fake game).
C_FIXED_SIZE: dict[MessageType, int] = {
    M.C_SET_SPEED: 4, M.C_REWIND_TO_CURRENT_STATE: 0, M.C_GET_SIMULATION_STATE: 0,
    M.C_SET_INPUT_STATE: 4, M.C_GIVE_UP: 0, M.C_PREVENT_SIMULATION_FINISH: 0, M.C_SHUTDOWN: 0,
    M.C_SET_TIMEOUT: 4, M.C_RACE_FINISHED: 0, M.C_REQUEST_FRAME: 8, M.C_RESET_CAMERA: 0,
    M.C_SET_ON_STEP_PERIOD: 4, M.C_UNREQUEST_FRAME: 0, M.C_TOGGLE_INTERFACE: 4, M.C_IS_IN_MENUS: 0,
    M.C_GET_INPUTS: 0, M.C_GET_API_STATE: 0,
}
# Commands followed by an int32 length and that many bytes.
C_LENGTH_PREFIXED: dict[MessageType, int] = {M.C_REWIND_TO_STATE: MAX_BLOB_BYTES, M.C_EXECUTE_COMMAND: MAX_TEXT_BYTES}


def decode_command_fields(kind: MessageType, fields: bytes) -> tuple[object, ...]:
    """The fields of a fixed-size command, as ``encode_command`` took them."""
    if kind == M.C_SET_SPEED:
        return (_F32.unpack(fields)[0],)
    if kind == M.C_SET_INPUT_STATE:
        return tuple(bool(b) for b in fields)
    if kind == M.C_SET_TIMEOUT:
        return (_U32.unpack(fields)[0],)
    if kind == M.C_REQUEST_FRAME:
        return _II.unpack(fields)
    if kind in (M.C_SET_ON_STEP_PERIOD, M.C_TOGGLE_INTERFACE):
        return (_I32.unpack(fields)[0],)
    return ()


# Reply of C_GET_API_STATE: int32 SimulationManager.RaceTime; Dyna.CurrentState's
# Location.Position, LinearSpeed and AngularSpeed (3 x f32 each); then for each wheel in the
# API's accessor order FrontLeft, FrontRight, BackRight, BackLeft: RTState.HasGroundContact
# (int32 0/1), DamperAbsorbVal (f32), ContactMaterialId (int32).
_API_STATE = struct.Struct("<i9f" + "ifi" * 4)
API_STATE_SIZE = _API_STATE.size


@dataclass
class ApiState:
    """What TMInterface's API reports for one run step (the doctor compares it with the blob)."""

    race_time_ms: int
    position: tuple[float, float, float]
    velocity: tuple[float, float, float]
    angular_velocity: tuple[float, float, float]
    wheel_contact: tuple[bool, bool, bool, bool]  # FL, FR, BR, BL (the API's accessors)
    wheel_damper: tuple[float, float, float, float]
    wheel_material: tuple[int, int, int, int]


def encode_api_state(s: ApiState) -> bytes:
    wheels = [v for i in range(4) for v in (int(s.wheel_contact[i]), s.wheel_damper[i], s.wheel_material[i])]
    return _API_STATE.pack(int(s.race_time_ms), *s.position, *s.velocity, *s.angular_velocity, *wheels)


def decode_api_state(data: bytes) -> ApiState:
    v = _API_STATE.unpack(data)
    w = v[10:]
    return ApiState(int(v[0]), tuple(v[1:4]), tuple(v[4:7]), tuple(v[7:10]),  # type: ignore[arg-type]
                    tuple(bool(w[3 * i]) for i in range(4)), tuple(w[3 * i + 1] for i in range(4)),  # type: ignore[arg-type]
                    tuple(int(w[3 * i + 2]) for i in range(4)))  # type: ignore[arg-type]


def encode_int_reply(value: int) -> bytes:
    """Reply of ``C_RACE_FINISHED`` / ``C_IS_IN_MENUS``: one int32."""
    return _I32.pack(int(value))


def encode_bytes_reply(data: bytes) -> bytes:
    """Reply of ``C_GET_SIMULATION_STATE`` / ``C_GET_INPUTS``: int32 length + bytes."""
    return _I32.pack(len(data)) + bytes(data)


def unpack_i32(data: bytes) -> int:
    return _I32.unpack(data)[0]
