"""State blobs (fact sheet A.10): each field read from a hand-made blob at the sheet's offsets."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rulka.envs.tmnf.state import BadStateBlob, decode_state, encode_state, prevent_finish

N_STATES, N_TIMES = 3, 3
LENGTH = 8356 + 4 * N_STATES + 8 * N_TIMES  # the sheet's total length formula


def hand_made_blob(flags: int = 0xFF) -> bytearray:
    b = bytearray(LENGTH)
    struct.pack_into("<III", b, 0, 7, 1, flags)
    struct.pack_into("<9f", b, 688, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, -1.0, 0.0, 0.0)  # yaw 90 deg, row-major
    struct.pack_into("<3f", b, 724, 100.5, 9.25, -32.0)
    struct.pack_into("<3f", b, 736, 30.0, -1.5, 2.0)
    struct.pack_into("<3f", b, 760, 0.25, 0.5, -0.75)
    struct.pack_into("<i", b, 2388, 2)  # gearbox_state
    struct.pack_into("<f", b, 3112, 6543.5)  # rpm
    struct.pack_into("<i", b, 3128, 3)  # gear
    struct.pack_into("<i", b, 3196, 1)  # freewheeling
    # wheels in the game's order FL, FR, RR, RL: distinct values per wheel
    for i, (damper, contact, material, sliding) in enumerate(
            [(0.01, 1, 16, 0), (0.02, 1, 2, 1), (0.03, 0, 6 | 0x30000, 0), (0.04, 1, 7, 1)]):
        w = 3816 + 764 * i
        struct.pack_into("<f", b, w + 180, damper)
        struct.pack_into("<i", b, w + 292, contact)
        struct.pack_into("<i", b, w + 296, material)
        struct.pack_into("<i", b, w + 300, sliding)
    struct.pack_into("<i", b, 7892, 12340)  # race time
    struct.pack_into("<IIi", b, 8024, 2, 1, 0)  # cp count, lap, finished
    struct.pack_into("<i", b, 8348, N_STATES)
    struct.pack_into(f"<{N_STATES}i", b, 8352, 1, 1, 0)
    struct.pack_into("<i", b, 8352 + 4 * N_STATES, N_TIMES)
    struct.pack_into("<6i", b, 8356 + 4 * N_STATES, 4000, 0, 9000, 5, -1, 0)
    return b


@pytest.fixture
def state():
    return decode_state(bytes(hand_made_blob()))


def test_position(state):
    assert state.car.position.tolist() == [100.5, 9.25, -32.0]


def test_rotation_row_major_keeps_columns_as_car_axes(state):
    # row-major [[0,0,1],[0,1,0],[-1,0,0]]: forward (column 2) = world +x
    assert state.car.orientation.tolist() == [[0, 0, 1], [0, 1, 0], [-1, 0, 0]]
    assert state.car.forward.tolist() == [1, 0, 0]


def test_velocity_and_angular_velocity(state):
    assert state.car.velocity.tolist() == [30.0, -1.5, 2.0]
    assert state.car.angular_velocity.tolist() == [0.25, 0.5, -0.75]


def test_engine(state):
    assert (state.car.gear, state.car.rpm, state.car.gearbox_state) == (3, 6543.5, 2)
    assert state.car.is_freewheeling is True


def test_wheels_reordered_to_fl_fr_rl_rr(state):
    # the game stores FL, FR, RR, RL; CarState wants FL, FR, RL, RR
    assert np.allclose(state.car.wheel_damper_absorb, [0.01, 0.02, 0.04, 0.03])
    assert state.car.wheel_contact.tolist() == [True, True, True, False]
    assert state.car.wheel_material.tolist() == [16, 2, 7, 6]  # high bits masked off (& 0xFFFF)
    assert state.car.wheel_sliding.tolist() == [False, True, True, False]


def test_race_bookkeeping(state):
    assert state.race_time_ms == state.car.race_time_ms == 12340
    assert (state.checkpoint_count, state.lap, state.race_finished) == (2, 1, False)
    assert state.cp_states == [True, True, False]
    assert state.cp_times == [(4000, 0), (9000, 5), (-1, 0)]


def test_race_time_needs_the_player_info_flag():
    st = decode_state(bytes(hand_made_blob(flags=0x7F)))
    assert not st.has_player_info and st.race_time_ms == 0


def test_encode_round_trips_and_prevent_finish_sets_the_last_time():
    blob = bytes(hand_made_blob())
    again = decode_state(encode_state(decode_state(blob)))
    assert again.car.position.tolist() == [100.5, 9.25, -32.0] and again.cp_times == [(4000, 0), (9000, 5), (-1, 0)]
    done = bytearray(blob)
    struct.pack_into("<i", done, 8356 + 4 * N_STATES + 16, 15000)
    stopped = prevent_finish(bytes(done))
    assert decode_state(stopped).cp_times[-1] == (-1, 0)
    assert len(stopped) == LENGTH


def test_bad_blobs_are_refused_with_the_reason():
    blob = hand_made_blob()
    with pytest.raises(BadStateBlob, match="at least 8356"):
        decode_state(bytes(blob[:100]))
    with pytest.raises(BadStateBlob, match="should be at least"):
        decode_state(bytes(blob[:-4]))  # truncated: the cp arrays no longer fit
    struct.pack_into("<i", blob, 8348, 10**6)
    with pytest.raises(BadStateBlob, match="does not fit"):
        decode_state(bytes(blob))


def test_trailing_bytes_after_the_checkpoint_arrays_are_accepted_and_kept():
    # TMInterface's blob is at least 8356 + 4n + 8m bytes; Linesight ignores what follows.
    blob = bytes(hand_made_blob())
    longer = blob + b"\x01\x02\x03\x04\x05"
    state = decode_state(longer)
    assert state.cp_times == decode_state(blob).cp_times
    assert state.car.position.tolist() == decode_state(blob).car.position.tolist()
    stopped = prevent_finish(longer)
    assert stopped[-5:] == b"\x01\x02\x03\x04\x05" and len(stopped) == len(longer)
    assert decode_state(stopped).cp_times[-1] == (-1, 0)
