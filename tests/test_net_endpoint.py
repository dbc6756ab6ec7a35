"""The tlspyo endpoint's receive path: frames read whole, in any split, without re-parsing objects."""

from __future__ import annotations

import queue
import socket
import threading

import pytest

from rulka.net.endpoint import GuardedEndpoint, _LocalProtocol, _Protocol, frame_prefix
from rulka.net.wire import deserialize, serialize

HEAD = 10


def framed(body: bytes) -> bytes:
    return f"{len(body):<{HEAD}}".encode() + body


def relay_obj_frame(stamp: int, obj: bytes) -> bytes:
    """The body rulka-server's ``send_obj`` writes around a forwarded envelope."""
    return b"\x93" + serialize(stamp) + b"\xa3OBJ" + b"\xc6" + len(obj).to_bytes(4, "big") + obj


@pytest.mark.parametrize("stamp", [0, 5, 127, 128, 70_000, 2**40])
@pytest.mark.parametrize("size", [0, 10, 300, 70_000])
def test_frame_prefix_locates_the_object_without_copying(stamp, size):
    obj = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    for body in (serialize([stamp, "OBJ", obj]), relay_obj_frame(stamp, obj)):
        got_stamp, cmd, offset, length = frame_prefix(memoryview(body))
        assert (got_stamp, cmd, body[offset:offset + length]) == (stamp, "OBJ", obj)
    assert frame_prefix(memoryview(serialize([stamp, "ACK", None])))[1:] == ("ACK", len(serialize([stamp, "ACK", None])), -1)


@pytest.mark.parametrize("body", [
    serialize([1, "OBJ", {"not": "bytes"}]), serialize([1, "OBJ", b"x", "extra"]), serialize([-1, "OBJ", b"x"]),
    serialize([1, "OBJ", b"x"]) + b"trailing", serialize([1, "OBJ", b"xyz"])[:-1], serialize([1, 2, b"x"]),
    b"\x93\x01\xa3\xff\xfe\xfd\xc4\x00", b"", b"\x93",
])
def test_frame_prefix_refuses_every_other_shape(body):
    assert frame_prefix(memoryview(body)) is None


def bare_endpoint(conn: socket.socket, max_buf_len: int) -> GuardedEndpoint:
    """A GuardedEndpoint with only what its receive loop uses (no child process)."""
    ep = object.__new__(GuardedEndpoint)
    ep._local_com_conn = conn
    ep._header_size = HEAD
    ep._max_buf_len = max_buf_len
    ep._closed_lock = threading.Lock()
    ep._closed = False
    ep.received = queue.Queue()
    ep._deserialize_locally = False
    ep._client = type("C", (), {"deserializer": staticmethod(deserialize)})()
    ep._stop_lock, ep._stopped = threading.Lock(), True  # nothing to stop at garbage collection
    return ep


def test_parent_reads_frames_split_anyhow_and_larger_than_its_buffer():
    ours, child = socket.socketpair()
    ep = bare_endpoint(ours, max_buf_len=1 << 16)
    objects = [{"n": i, "d": bytes([i % 256]) * size} for i, size in
               enumerate([0, 5, 65_000, 70_000, 3_000_000, 200, 1 << 16])]
    stream = b"".join(framed(relay_obj_frame(i + 1, serialize(o))) for i, o in enumerate(objects))
    stream += framed(serialize([9, "ACK", None]))  # not an object: skipped
    stream += framed(serialize([0, "OBJ", serialize({"pong": 3})]))  # the child's own reports
    reader = threading.Thread(target=ep._manage_received_objects)
    reader.start()
    cuts = [1, 9, 10, 11, 65_536, 65_600, 200_000, 3_300_000, len(stream)]
    pos = 0
    for cut in cuts:  # pieces cut inside headers, objects and across frames
        child.sendall(stream[pos:cut])
        pos = cut
    child.close()
    reader.join(10)
    assert not reader.is_alive()  # EOF ends the loop
    got = [ep.received.get_nowait() for _ in range(ep.received.qsize())]
    assert got == [*objects, {"pong": 3}]
    ours.close()


def test_parent_stops_on_a_garbled_length():
    ours, child = socket.socketpair()
    ep = bare_endpoint(ours, max_buf_len=1 << 16)
    child.sendall(framed(relay_obj_frame(1, serialize({"a": 1}))) + b"notanumber" + b"x" * 20)
    reader = threading.Thread(target=ep._manage_received_objects)
    reader.start()
    reader.join(10)
    assert not reader.is_alive() and ep.received.get_nowait() == {"a": 1}
    child.close()
    ours.close()


class Sink:
    def __init__(self):
        self.data: list[bytes] = []
        self.aborted = False

    def write(self, data):
        self.data.append(bytes(data))

    def abortConnection(self):
        self.aborted = True


class FakeClient:
    def __init__(self):
        self.endpoint = type("E", (), {"transport": Sink()})()
        self.serializer, self.deserializer = serialize, deserialize
        self.header_size = HEAD
        self.ack_stamp, self.pending_acks, self.store = 0, {}, [("OBJ", {"trainer": 1}, b"stored")]

    def identity_token(self):
        return "auth2:me:00"


def test_child_forwards_obj_frames_whole_and_answers_hello_in_any_split():
    client = FakeClient()
    proto = _Protocol(client=client, password="pw", groups=("trainer", "auth2:x"), header_size=HEAD)
    proto.transport = Sink()
    big = serialize({"d": b"z" * 300_000})
    frames = [framed(serialize([1, "HELLO", {"v": 2}])), framed(relay_obj_frame(2, serialize({"a": 1}))),
              framed(serialize([3, "ACK", None])), framed(relay_obj_frame(4, big))]
    client.pending_acks[3] = (0.0, b"")
    stream = b"".join(frames)
    for i in range(0, len(stream), 16_384):  # TLS-record-sized pieces
        proto.dataReceived(stream[i:i + 16_384])
    assert client.endpoint.transport.data == [frames[1], frames[3]]  # OBJ frames, byte for byte
    sent = [deserialize(chunk[HEAD + 2:]) for chunk in proto.transport.data]  # header + password
    assert [f[1] for f in sent] == ["ACK", "HELLO", "OBJ"]  # acked the hello, joined, flushed the store
    assert sent[1][3] == ["trainer", "auth2:x", "auth2:me:00"] and sent[2][3] == b"stored"
    assert 3 not in client.pending_acks  # the relay's ACK cleared it
    assert proto._state == "ALIVE" and not proto._rbuf


def test_child_closes_on_a_garbled_length():
    client = FakeClient()
    proto = _Protocol(client=client, password="pw", groups=("trainer",), header_size=HEAD)
    proto.transport = Sink()
    proto.dataReceived(b"garbage!!!" + b"x" * 40)
    assert proto.transport.aborted and client.endpoint.transport.data == []


class FakeServerSide:
    """What the child's local protocol hands frames to: the relay connection."""

    def __init__(self, alive=True):
        self.frames: list[bytes] = []
        self.alive = alive

    def get_state(self):
        return "ALIVE" if self.alive else "HANDSHAKE"


def test_child_passes_parent_frames_on_stamped_and_stores_them_while_the_relay_is_away():
    client = FakeClient()
    client.store = []
    client.closed = []
    client.close = client.closed.append
    relay_side = _Protocol(client=client, password="pw", groups=("workers",), header_size=HEAD)
    relay_side.transport = Sink()
    relay_side.transport.writeSequence = lambda seq: relay_side.transport.data.append(b"".join(seq))
    relay_side.get_state = lambda: state["relay"]
    state = {"relay": "HANDSHAKE"}
    client.to_server = relay_side
    local = _LocalProtocol(client)
    local.transport = Sink()
    local.transport.loseConnection = lambda: None
    local.connectionMade()

    def parent_frame(cmd, dest, obj):  # what tlspyo's Endpoint._send_local writes
        return framed(serialize((cmd, dest, serialize(obj))))

    env = {"d": b"p" * 200_000}
    local.dataReceived(parent_frame("OBJ", {"trainer": 1}, env))  # the relay is not connected yet
    assert client.store == [("OBJ", {"trainer": 1}, serialize(env))] and relay_side.transport.data == []
    state["relay"] = "ALIVE"
    stream = parent_frame("TEST", None, None) + parent_frame("OBJ", {"trainer": 1}, env) + parent_frame(
        "NTF", {"trainer": 5}, None)
    for i in range(0, len(stream), 65_536):  # the local socket's read size
        local.dataReceived(stream[i:i + 65_536])
    sent = [deserialize(f[HEAD + 2:]) for f in relay_side.transport.data]
    assert [f[:3] for f in sent] == [[1, "OBJ", {"trainer": 1}], [2, "NTF", {"trainer": 5}]]
    assert deserialize(sent[0][3]) == env and set(client.pending_acks) == {1, 2}
    assert all(f[HEAD:HEAD + 2] == b"pw" for f in relay_side.transport.data)
    local.dataReceived(parent_frame("STOP", None, None))
    assert client.closed == [1] and not local._rbuf
