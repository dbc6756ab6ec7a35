"""rulka's TMNF plugin protocol: every message against the byte layouts of fact sheet A.5, and the
client's bounded, exact reads."""

from __future__ import annotations

import re
import socket
import struct
import threading
from pathlib import Path

import pytest

from rulka.envs.tmnf import protocol as P
from rulka.envs.tmnf.client import GameClosed, GameNotListening, GameTimeout, TMIClient
from rulka.envs.tmnf.protocol import MessageType as M


def test_message_ids_follow_the_plugin_enum():
    expected = ["SC_RUN_STEP_SYNC", "SC_CHECKPOINT_COUNT_CHANGED_SYNC", "SC_LAP_COUNT_CHANGED_SYNC",
                "SC_REQUESTED_FRAME_SYNC", "SC_ON_CONNECT_SYNC", "C_SET_SPEED", "C_REWIND_TO_STATE",
                "C_REWIND_TO_CURRENT_STATE", "C_GET_SIMULATION_STATE", "C_SET_INPUT_STATE", "C_GIVE_UP",
                "C_PREVENT_SIMULATION_FINISH", "C_SHUTDOWN", "C_EXECUTE_COMMAND", "C_SET_TIMEOUT",
                "C_RACE_FINISHED", "C_REQUEST_FRAME", "C_RESET_CAMERA", "C_SET_ON_STEP_PERIOD",
                "C_UNREQUEST_FRAME", "C_TOGGLE_INTERFACE", "C_IS_IN_MENUS", "C_GET_INPUTS", "C_GET_API_STATE"]
    assert [m.name for m in M] == expected
    assert [int(m) for m in M] == list(range(1, 25))
    # the plugin's enum lists the same names in the same order
    plugin = (Path(__file__).resolve().parents[1] / "rulka/envs/tmnf/plugin/RulkaLink.as").read_text(encoding="utf-8")
    body = plugin[plugin.index("enum MessageType {"):]
    assert re.findall(r"\b((?:SC|C)_[A-Z_]+)\b", body[: body.index("}")]) == expected


@pytest.mark.parametrize("kind, args, raw", [
    (M.C_SET_SPEED, (80.0,), b"\x06\0\0\0" + struct.pack("<f", 80.0)),
    (M.C_SET_SPEED, (0.0,), b"\x06\0\0\0\0\0\0\0"),
    (M.C_REWIND_TO_STATE, (b"\x01\x02\x03",), b"\x07\0\0\0\x03\0\0\0\x01\x02\x03"),
    (M.C_REWIND_TO_CURRENT_STATE, (), b"\x08\0\0\0"),
    (M.C_GET_SIMULATION_STATE, (), b"\x09\0\0\0"),
    (M.C_SET_INPUT_STATE, (True, False, True, False), b"\x0a\0\0\0\x01\x00\x01\x00"),
    (M.C_SET_INPUT_STATE, (0, 1, 0, 1), b"\x0a\0\0\0\x00\x01\x00\x01"),
    (M.C_GIVE_UP, (), b"\x0b\0\0\0"),
    (M.C_PREVENT_SIMULATION_FINISH, (), b"\x0c\0\0\0"),
    (M.C_SHUTDOWN, (), b"\x0d\0\0\0"),
    (M.C_EXECUTE_COMMAND, ("cam 2",), b"\x0e\0\0\0\x05\0\0\0cam 2"),
    # the byte length, not the character count (Linesight's bug with non-ASCII map paths)
    (M.C_EXECUTE_COMMAND, ("map é",), b"\x0e\0\0\0\x06\0\0\0map \xc3\xa9"),
    (M.C_SET_TIMEOUT, (10100,), b"\x0f\0\0\0" + struct.pack("<I", 10100)),
    (M.C_SET_TIMEOUT, (600_000_000,), b"\x0f\0\0\0" + struct.pack("<I", 600_000_000)),
    (M.C_RACE_FINISHED, (), b"\x10\0\0\0"),
    (M.C_REQUEST_FRAME, (160, 120), b"\x11\0\0\0\xa0\0\0\0\x78\0\0\0"),
    (M.C_RESET_CAMERA, (), b"\x12\0\0\0"),
    (M.C_SET_ON_STEP_PERIOD, (50,), b"\x13\0\0\0\x32\0\0\0"),
    (M.C_UNREQUEST_FRAME, (), b"\x14\0\0\0"),
    (M.C_TOGGLE_INTERFACE, (0,), b"\x15\0\0\0\0\0\0\0"),
    (M.C_IS_IN_MENUS, (), b"\x16\0\0\0"),
    (M.C_GET_INPUTS, (), b"\x17\0\0\0"),
    (M.C_GET_API_STATE, (), b"\x18\0\0\0"),
])
def test_client_commands_have_the_fact_sheet_layout(kind, args, raw):
    assert P.encode_command(kind, *args) == raw
    # and the fake game decodes what it reads back to the same fields
    fields = raw[4:]
    if kind in P.C_LENGTH_PREFIXED:
        assert struct.unpack_from("<i", fields)[0] == len(fields) - 4
    else:
        assert len(fields) == P.C_FIXED_SIZE[kind]
        decoded = P.decode_command_fields(kind, fields)
        if kind == M.C_SET_INPUT_STATE:
            assert decoded == tuple(bool(a) for a in args)
        elif args:
            assert decoded == tuple(args)


@pytest.mark.parametrize("msg, raw", [
    (P.RunStep(-1500), b"\x01\0\0\0" + struct.pack("<i", -1500)),
    (P.RunStep(50), b"\x01\0\0\0\x32\0\0\0"),
    (P.CheckpointCountChanged(2, 3), b"\x02\0\0\0\x02\0\0\0\x03\0\0\0"),
    (P.LapCountChanged(1, 3), b"\x03\0\0\0\x01\0\0\0\x03\0\0\0"),
    (P.RequestedFrame(bytes(range(8)), 2, 1), b"\x04\0\0\0\x02\0\0\0\x01\0\0\0" + bytes(range(8))),
    (P.OnConnect(), b"\x05\0\0\0"),
])
def test_game_messages_round_trip(msg, raw):
    assert P.encode_game_message(msg) == raw
    size = (msg.width, msg.height) if isinstance(msg, P.RequestedFrame) else None
    assert P.decode_game_message(struct.unpack_from("<i", raw)[0], raw[4:], size) == msg


def test_replies_and_bad_input():
    assert P.encode_int_reply(1) == b"\x01\0\0\0"
    assert P.encode_bytes_reply(b"ab") == b"\x02\0\0\0ab"
    assert P.encode_echo(4) == b"\x04\0\0\0"
    with pytest.raises(P.ProtocolError, match="unknown message id 99"):
        P.decode_game_message(99, b"", None)
    with pytest.raises(P.ProtocolError, match="never requested"):
        P.decode_game_message(4, b"", None)
    with pytest.raises(ValueError, match="out of range"):
        P.encode_command(M.C_REQUEST_FRAME, 0, 120)
    with pytest.raises(ValueError, match="not a client command"):
        P.encode_command(M.SC_RUN_STEP_SYNC)
    with pytest.raises(ValueError, match="larger than"):
        P.encode_command(M.C_REWIND_TO_STATE, bytes(P.MAX_BLOB_BYTES + 1))


class _Peer:
    """A scripted game side: accepts one client and sends ``chunks`` (with pauses)."""

    def __init__(self, chunks, close=True):
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(1)
        self.port = self.srv.getsockname()[1]
        self.received = bytearray()
        self.thread = threading.Thread(target=self._serve, args=(chunks, close), daemon=True)
        self.thread.start()

    def _serve(self, chunks, close):
        conn, _ = self.srv.accept()
        conn.settimeout(0.2)
        for c in chunks:
            if isinstance(c, float):
                threading.Event().wait(c)
            else:
                conn.sendall(c)
        try:
            while True:
                data = conn.recv(4096)
                if not data:
                    break
                self.received += data
        except OSError:
            pass
        if close:
            conn.close()
        self.srv.close()


def test_client_reads_messages_split_at_any_byte_and_buffers_commands():
    raw = P.encode_game_message(P.RunStep(150)) + P.encode_game_message(P.CheckpointCountChanged(1, 2))
    peer = _Peer([raw[:1], 0.02, raw[1:6], 0.02, raw[6:]])
    c = TMIClient(peer.port, protection_timeout_s=2)
    c.connect(wait_s=2)
    assert c.receive() == P.RunStep(150)
    c.set_speed(0.0)
    c.request_frame(4, 2)
    assert not peer.received  # buffered until the echo
    c.respond(1)
    assert c.receive() == P.CheckpointCountChanged(1, 2)
    c.close()
    peer.thread.join(2)
    assert bytes(peer.received) == (P.encode_command(M.C_SET_SPEED, 0.0) + P.encode_command(M.C_REQUEST_FRAME, 4, 2)
                                   + P.encode_echo(1) + P.encode_command(M.C_SHUTDOWN))


def test_client_times_out_and_detects_close_and_bounds_lengths():
    peer = _Peer([P.encode_game_message(P.RunStep(0))[:3], 1.5], close=True)
    c = TMIClient(peer.port, protection_timeout_s=0.3)
    c.connect(wait_s=2)
    with pytest.raises(GameTimeout, match="No message from the game"):
        c.receive()
    assert not c.connected

    peer = _Peer([b"\x01\0"], close=True)
    c = TMIClient(peer.port, protection_timeout_s=2)
    c.connect(wait_s=2)
    peer.thread.join(0)
    with pytest.raises(GameClosed, match="Game dropped the connection"):
        c.receive()

    # a state reply announcing 2 GB is refused before anything is allocated
    peer = _Peer([struct.pack("<i", 2**31 - 1)], close=True)
    c = TMIClient(peer.port, protection_timeout_s=2)
    c.connect(wait_s=2)
    with pytest.raises(P.ProtocolError, match="announced"):
        c.get_simulation_state()


def test_connect_says_what_to_check_when_nothing_listens():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(GameNotListening, match=f"No TMInterface plugin listening on 127.0.0.1:{port}.*custom_port {port}"):
        TMIClient(port).connect(wait_s=0.2)


@pytest.mark.parametrize("data, needle", [
    ({"environment": {"backend": "tmnf"}}, "config key `map_cycle.entries` is required by backend tmnf"),
    ({"environment": {"backend": "tmnf"}, "map_cycle": {"entries": [
        {"short_name": "a", "map_path": "A01.Challenge.Gbx"}, {"short_name": "b", "map_path": "B.Challenge.Gbx"}]}},
     "config keys `map_cycle.entries[0].reference_line_path`, `map_cycle.entries[1].reference_line_path` are required"),
    ({"environment": {"backend": "tmnf", "track": "hairpins"}, "map_cycle": {"entries": [
        {"short_name": "a", "map_path": "A.Challenge.Gbx", "reference_line_path": "a.npy"}]}},
     "`environment.track` are not read by backend tmnf"),
    ({"environment": {"backend": "tmnf", "game_launch": "fake", "continuous_actions": True}},
     "`environment.continuous_actions` must be false for backend tmnf"),
    ({"environment": {"backend": "gym", "gym_id": "CartPole-v1"},
      "map_cycle": {"entries": [{"short_name": "a", "map_path": "x"}]}}, "needs a TrackMania-like backend"),
])
def test_config_accepts_tmnf_only_with_the_keys_it_needs(data, needle):
    from rulka.config import config_from_dict
    from rulka.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert needle in str(info.value)


def test_config_accepts_tmnf_with_maps_and_lines_or_the_fake():
    from rulka.config import config_from_dict

    config_from_dict({"environment": {"backend": "tmnf"}, "map_cycle": {"entries": [
        {"short_name": "a", "map_path": "A01-Race.Challenge.Gbx", "reference_line_path": "maps/A01.npy"}]}})
    config_from_dict({"environment": {"backend": "tmnf", "game_launch": "fake", "track": "hairpins"}})


def test_the_frame_size_the_game_captured_is_checked_against_the_request():
    # CaptureScreenshot(vec2&inout size) may capture less than asked (a smaller window); the
    # plugin sends the size it got before the pixels
    small = P.encode_game_message(P.RequestedFrame(bytes(16 * 12 * 4), 16, 12))
    good = P.encode_game_message(P.RequestedFrame(bytes(range(32)), 4, 2))
    peer = _Peer([small, good])
    c = TMIClient(peer.port, protection_timeout_s=2)
    c.connect(wait_s=2)
    c.request_frame(32, 24)
    with pytest.raises(P.ProtocolError, match="captured a 16x12 frame where 32x24 was requested"):
        c.receive()
    assert c.frame_size_mismatches == 1
    c.request_frame(4, 2)  # the stream stayed in step: the next frame reads cleanly
    assert c.receive() == P.RequestedFrame(bytes(range(32)), 4, 2)
    c.close()
    with pytest.raises(P.ProtocolError, match="has no size"):
        P.decode_game_message(M.SC_REQUESTED_FRAME_SYNC, b"\0\0", (1, 1))


def test_api_state_reply_round_trips_in_the_plugins_write_order():
    s = P.ApiState(race_time_ms=1230, position=(1.0, 2.0, 3.0), velocity=(4.0, 5.0, 6.0),
                   angular_velocity=(0.0, 0.5, 0.0), wheel_contact=(True, True, False, True),
                   wheel_damper=(0.25, 0.5, 0.75, 1.0), wheel_material=(2, 2, 16, 6))
    raw = P.encode_api_state(s)
    # RaceTime, Position, LinearSpeed, AngularSpeed, then (contact, damper, material) per wheel
    assert len(raw) == P.API_STATE_SIZE == 4 + 9 * 4 + 4 * 12
    assert struct.unpack_from("<i3f", raw) == (1230, 1.0, 2.0, 3.0)
    assert struct.unpack_from("<ifi", raw, 40 + 2 * 12) == (0, 0.75, 16)  # BackRight
    assert P.decode_api_state(raw) == s
