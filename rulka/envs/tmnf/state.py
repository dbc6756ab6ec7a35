"""TMNF simulation-state blobs (``C_GET_SIMULATION_STATE`` / ``C_REWIND_TO_STATE``) <-> ``CarState``.

Layout: fact sheet A.10 (TMInterface's ``SimStateData`` as Linesight parses it), little-endian,
absolute byte offsets. Only the fields the observation pipeline and the rollout logic need are
read; ``encode_state`` writes the same fields into an otherwise zero blob of the right length (the
fake game's save states), and ``prevent_finish`` applies Linesight's trick of setting the last
checkpoint time to -1 so that rewinding to the blob stops the game from ending the race.

Units: positions in game units, which TMNF maps 1:1 to metres (a block is 32 x 8 x 32); speeds in
units/s. The rotation matrix is stored row-major and already has ``CarState``'s convention
(columns = the car's lateral, up and forward axes in the world). Wheels are stored FL, FR, RR, RL
(inferred from TMInterface 2's accessors, not checked in game) and reordered to FL, FR, RL, RR.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from rulka.envs.car_state import TMI_WHEEL_INDEX, CarState

# ---- offsets (fact sheet A.10) ------------------------------------------------------------
OFF_VERSION = 0
OFF_CONTEXT_MODE = 4
OFF_FLAGS = 8
FLAG_PLAYER_INFO = 0x80
OFF_ROTATION = 688  # 9 x f32, row-major
OFF_POSITION = 724  # 3 x f32
OFF_LINEAR_SPEED = 736  # 3 x f32
OFF_ANGULAR_SPEED = 760  # 3 x f32
OFF_GEARBOX_STATE = 2388  # i32
OFF_RPM = 3112  # f32
OFF_GEAR = 3128  # i32
OFF_FREEWHEELING = 3196  # bool32
OFF_WHEELS = 3816
WHEEL_STRIDE = 764
WHEEL_DAMPER = 180  # f32
WHEEL_CONTACT = 292  # bool32
WHEEL_MATERIAL = 296  # i32, masked with 0xFFFF
WHEEL_SLIDING = 300  # bool32
OFF_RACE_TIME = 7892  # i32
OFF_CUR_CP_COUNT = 8024  # u32
OFF_CUR_LAP = 8028  # u32
OFF_RACE_FINISHED = 8032  # bool32
OFF_CP_STATES_LEN = 8348  # i32 n, then n x bool32, then i32 m, then m x (i32 time, i32 stunts)
BASE_LENGTH = 8356
MAX_CHECKPOINTS = 10_000  # a blob claiming more is corrupt


class BadStateBlob(ValueError):
    """The blob is too short, or its checkpoint arrays do not fit its length."""


def blob_length(n_cp_states: int, n_cp_times: int) -> int:
    """Length of a blob with ``n`` checkpoint states and ``m`` checkpoint times: 8356 + 4n + 8m."""
    return BASE_LENGTH + 4 * n_cp_states + 8 * n_cp_times


@dataclass
class GameState:
    """What one blob says: the car (as the pipeline wants it) plus the race bookkeeping."""

    car: CarState
    race_time_ms: int
    """Race time; ``None``-like 0 when the blob has no player info (flags bit 0x80)."""
    has_player_info: bool
    checkpoint_count: int
    lap: int
    race_finished: bool
    cp_states: list[bool] = field(default_factory=list)
    cp_times: list[tuple[int, int]] = field(default_factory=list)
    """(time ms, stunts score) per checkpoint passed slot; time -1 = not reached."""


def _cp_arrays(blob: bytes) -> tuple[int, int, int]:
    """(n, m, offset of cp_times) after checking they fit the blob."""
    if len(blob) < BASE_LENGTH:
        raise BadStateBlob(f"state blob of {len(blob)} bytes, at least {BASE_LENGTH} expected")
    (n,) = struct.unpack_from("<i", blob, OFF_CP_STATES_LEN)
    if not 0 <= n <= MAX_CHECKPOINTS or len(blob) < BASE_LENGTH + 4 * n:
        raise BadStateBlob(f"state blob: checkpoint state count {n} does not fit {len(blob)} bytes")
    (m,) = struct.unpack_from("<i", blob, OFF_CP_STATES_LEN + 4 + 4 * n)
    # At least, not exactly: bytes after the checkpoint arrays are kept and ignored, as Linesight
    # reads the blob (a newer TMInterface may append fields); prevent_finish passes them through.
    if not 0 <= m <= MAX_CHECKPOINTS or len(blob) < blob_length(n, m):
        raise BadStateBlob(
            f"state blob of {len(blob)} bytes; with {n} checkpoint states and {m} times it should be "
            f"at least {blob_length(n, m) if 0 <= m <= MAX_CHECKPOINTS else 'impossible'}"
        )
    return n, m, OFF_CP_STATES_LEN + 8 + 4 * n


def decode_state(blob: bytes) -> GameState:
    """Parse a blob; ``BadStateBlob`` when it is too short for its checkpoint arrays."""
    blob = bytes(blob)
    n, m, off_times = _cp_arrays(blob)
    f = struct.unpack_from
    rotation = np.array(f("<9f", blob, OFF_ROTATION), dtype=np.float64).reshape(3, 3)
    idx = list(TMI_WHEEL_INDEX)
    wheels = [OFF_WHEELS + WHEEL_STRIDE * i for i in range(4)]
    damper = np.array([f("<f", blob, w + WHEEL_DAMPER)[0] for w in wheels])[idx]
    contact = np.array([f("<i", blob, w + WHEEL_CONTACT)[0] != 0 for w in wheels])[idx]
    material = np.array([f("<i", blob, w + WHEEL_MATERIAL)[0] & 0xFFFF for w in wheels])[idx]
    sliding = np.array([f("<i", blob, w + WHEEL_SLIDING)[0] != 0 for w in wheels])[idx]
    (flags,) = f("<I", blob, OFF_FLAGS)
    has_player = bool(flags & FLAG_PLAYER_INFO)
    race_time = f("<i", blob, OFF_RACE_TIME)[0] if has_player else 0
    finished = bool(f("<i", blob, OFF_RACE_FINISHED)[0]) if has_player else False
    car = CarState(
        position=np.array(f("<3f", blob, OFF_POSITION), dtype=np.float64),
        orientation=rotation,
        velocity=np.array(f("<3f", blob, OFF_LINEAR_SPEED), dtype=np.float64),
        angular_velocity=np.array(f("<3f", blob, OFF_ANGULAR_SPEED), dtype=np.float64),
        wheel_material=material,
        wheel_contact=contact,
        wheel_sliding=sliding,
        wheel_damper_absorb=damper,
        gear=f("<i", blob, OFF_GEAR)[0],
        rpm=f("<f", blob, OFF_RPM)[0],
        gearbox_state=f("<i", blob, OFF_GEARBOX_STATE)[0],
        race_time_ms=race_time,
        finished=finished,
        is_freewheeling=bool(f("<i", blob, OFF_FREEWHEELING)[0]),
    )
    cp_states = [bool(v) for v in f(f"<{n}i", blob, OFF_CP_STATES_LEN + 4)] if n else []
    flat = f(f"<{2 * m}i", blob, off_times) if m else ()
    cp_times = [(int(flat[2 * i]), int(flat[2 * i + 1])) for i in range(m)]
    return GameState(
        car=car,
        race_time_ms=int(race_time),
        has_player_info=has_player,
        checkpoint_count=int(f("<I", blob, OFF_CUR_CP_COUNT)[0]),
        lap=int(f("<I", blob, OFF_CUR_LAP)[0]),
        race_finished=finished,
        cp_states=cp_states,
        cp_times=cp_times,
    )


def encode_state(state: GameState, version: int = 1) -> bytes:
    """A blob with ``state``'s fields at their offsets and zeros elsewhere (flags 0xFF)."""
    n, m = len(state.cp_states), len(state.cp_times)
    buf = bytearray(blob_length(n, m))
    p = struct.pack_into
    car = state.car
    p("<III", buf, OFF_VERSION, version, 1, 0xFF)
    p("<9f", buf, OFF_ROTATION, *np.asarray(car.orientation, dtype=np.float64).reshape(9))
    p("<3f", buf, OFF_POSITION, *car.position)
    p("<3f", buf, OFF_LINEAR_SPEED, *car.velocity)
    p("<3f", buf, OFF_ANGULAR_SPEED, *car.angular_velocity)
    p("<i", buf, OFF_GEARBOX_STATE, car.gearbox_state)
    p("<f", buf, OFF_RPM, car.rpm)
    p("<i", buf, OFF_GEAR, car.gear)
    p("<i", buf, OFF_FREEWHEELING, int(car.is_freewheeling))
    for car_i, tmi_i in enumerate(TMI_WHEEL_INDEX):
        w = OFF_WHEELS + WHEEL_STRIDE * tmi_i
        p("<f", buf, w + WHEEL_DAMPER, float(car.wheel_damper_absorb[car_i]))
        p("<i", buf, w + WHEEL_CONTACT, int(car.wheel_contact[car_i]))
        p("<i", buf, w + WHEEL_MATERIAL, int(car.wheel_material[car_i]))
        p("<i", buf, w + WHEEL_SLIDING, int(car.wheel_sliding[car_i]))
    p("<i", buf, OFF_RACE_TIME, state.race_time_ms)
    p("<IIi", buf, OFF_CUR_CP_COUNT, state.checkpoint_count, state.lap, int(state.race_finished))
    p("<i", buf, OFF_CP_STATES_LEN, n)
    for i, s in enumerate(state.cp_states):
        p("<i", buf, OFF_CP_STATES_LEN + 4 + 4 * i, int(s))
    off = OFF_CP_STATES_LEN + 4 + 4 * n
    p("<i", buf, off, m)
    for i, (t, stunts) in enumerate(state.cp_times):
        p("<ii", buf, off + 4 + 8 * i, t, stunts)
    return bytes(buf)


def prevent_finish(blob: bytes) -> bytes | None:
    """``blob`` with its last checkpoint time set to -1 (rewinding to it keeps the race going),
    or None when it has no checkpoint times (then send ``C_PREVENT_SIMULATION_FINISH``)."""
    n, m, off_times = _cp_arrays(blob)
    if m == 0:
        return None
    out = bytearray(blob)
    struct.pack_into("<i", out, off_times + 8 * (m - 1), -1)
    return bytes(out)
