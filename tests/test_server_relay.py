"""The relay's protocol logic, driven in memory (no sockets): hostile input, routing, retention."""

from __future__ import annotations

import pickle

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from rulka.net.keys import add_worker, generate_keys, load_credentials, revoke_worker
from rulka.net.messages import Stats
from rulka.net.settings import NetworkSettings
from rulka.net.stats import build_status
from rulka.net.wire import challenge_token, deserialize, hello_nonce, join_token, make_envelopes, serialize
from rulka.server import relay as relay_module
from rulka.server import turns as turns_module
from rulka.server.relay import (
    HELLO_TIMEOUT_S,
    RATE_LIMITS,
    READ_PAUSE_BYTES,
    STALL_TIMEOUT_S,
    RelayCore,
    RelayProtocol,
)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("relay") / "keys"
    generate_keys(root, ["localhost"])
    for name in ("w1", "w2", "gone"):
        add_worker(root, name)
    revoke_worker(root, "gone")
    creds = {"trainer": load_credentials(root, "trainer")}
    for name in ("w1", "w2"):
        creds[name] = load_credentials(root / "bundles" / name, "worker")
    return root, creds


@pytest.fixture
def core(keys):
    root, _ = keys
    return RelayCore(NetworkSettings(chunk_bytes=1024, server_queue_bytes=20_000),
                     load_credentials(root, "server"), clock=Clock())


def relay_objects(data: bytes) -> list:
    """The objects of the OBJ frames in ``data`` (what a relay wrote to one client), decoded."""
    out = []
    while data:
        n = int(data[:10])
        _, cmd, obj = deserialize(data[10:10 + n])
        data = data[10 + n:]
        if cmd == "OBJ":
            out.append(deserialize(obj))
    return out


class Client:
    """A fake tlspyo client talking to one RelayProtocol."""

    def __init__(self, core, password=None):
        self.core = core
        self.password = core.password if password is None else password
        self.proto = RelayProtocol(core, "10.0.0.9:1234")
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)
        self.stamp = 0
        data = self.transport.value()  # the relay's HELLO comes first, with this connection's nonce
        _, cmd, obj = deserialize(data[10:10 + int(data[:10])])
        assert cmd == "HELLO"
        self.nonce = hello_nonce(obj)

    def raw(self, data: bytes):
        self.proto.dataReceived(data)

    def send(self, cmd, dest=None, obj=None):
        self.stamp += 1
        body = serialize([self.stamp, cmd, dest, obj])
        self.raw(f"{len(body):<10}".encode() + self.password + body)

    def hello(self, creds, channels, token=None):
        token = token or challenge_token(creds.identity, creds.signing_key, self.nonce)
        self.send("HELLO", obj=[*channels, token])
        return self

    def received(self):
        """Objects the relay sent (OBJ frames only), decoded, and clear the transport."""
        data = self.transport.value()
        self.transport.clear()
        return relay_objects(data)

    @property
    def closed(self):
        return self.transport.disconnecting


def message(creds, kind, payload, n, channel, count, chunk=1024, target=""):
    return [(channel, count, serialize(e)) for e in make_envelopes(
        kind, creds.identity, n, payload, signing_key=creds.signing_key, chunk_bytes=chunk, target=target)]


def send_message(client, creds, kind, payload, n, channel, count, **kw):
    for ch, c, obj in message(creds, kind, payload, n, channel, count, **kw):
        client.send("OBJ", {ch: c}, obj)


def connect(core, creds, name):
    channels = ["trainer"] if name == "trainer" else ["workers", f"w:{name}"]
    c = Client(core).hello(creds[name], channels)
    c.received()
    return c


# -- normal operation ----------------------------------------------------------------------------
def test_segments_flow_to_trainer_with_credit(core, keys):
    _, creds = keys
    t = connect(core, creds, "trainer")
    w = connect(core, creds, "w1")
    send_message(w, creds["w1"], "segment", b"s" * 3000, 1, "trainer", 1)  # 3 chunks
    assert t.received() == []  # no credit yet: queued at the relay
    assert len(core.trainer_queue) == 3
    t.send("NTF", {"trainer": 2})
    got = t.received()
    assert [e["i"] for e in got] == [0, 1] and all(e["s"] == "w1" for e in got)
    t.send("NTF", {"trainer": 5})
    assert [e["i"] for e in t.received()] == [2]
    assert core.clients["w1"].messages_in == 3 and core.clients["trainer"].messages_out == 3


def test_late_joiner_gets_every_chunk_of_latest_weights(core, keys):
    _, creds = keys
    t = connect(core, creds, "trainer")
    w1 = connect(core, creds, "w1")
    send_message(t, creds["trainer"], "weights", b"a" * 2500, 10, "workers", -1)
    send_message(t, creds["trainer"], "weights", b"b" * 2500, 11, "workers", -1)
    assert len(w1.received()) == 6
    w2 = Client(core).hello(creds["w2"], ["workers", "w:w2"])
    got = w2.received()
    assert [(e["n"], e["i"]) for e in got] == [(11, 0), (11, 1), (11, 2)]
    assert b"".join(e["d"] for e in got) == b"b" * 2500


def test_ack_reaches_only_its_worker(core, keys):
    _, creds = keys
    t = connect(core, creds, "trainer")
    w1 = connect(core, creds, "w1")
    w2 = connect(core, creds, "w2")
    send_message(t, creds["trainer"], "ack", b"[1]", 20, "w:w2", -1, target="w2")
    assert w1.received() == [] and [e["k"] for e in w2.received()] == ["ack"]


def test_ping_and_status(core, keys):
    _, creds = keys
    w = connect(core, creds, "w1")
    w.send("OBJ", {"ping": -1}, serialize(None))
    assert w.received() == [{"pong": w.proto.conn_id}]
    send_message(w, creds["w1"], "stats", Stats({"episodes": 4, "samples_per_s": 20.0,
                                                        "weights_version": 2}).encode(), 5, "trainer", 1)
    obs = Client(core).hello(creds["trainer"], [])  # observer: no channel
    obs.received()
    obs.send("OBJ", {"status": -1}, serialize(None))
    [reply] = obs.received()
    row = next(r for r in reply["status"]["workers"] if r["name"] == "w1")
    assert (row["episodes"], row["weights_version"], row["address"]) == (4, 2, "10.0.0.9:1234")
    assert core.trainer is None  # the observer did not take the trainer's place
    # a worker's credential may not read the report (it lists every address)
    spy = Client(core).hello(creds["w2"], [])
    spy.received()
    spy.send("OBJ", {"status": -1}, serialize(None))
    assert spy.received() == [{"refused": "status_forbidden"}]
    assert "w2" not in core.workers  # the observer did not take w2's place


# -- hostile input -------------------------------------------------------------------------------
def test_garbage_bytes_close_the_connection_and_count(core):
    c = Client(core)
    c.raw(b"\x16\x03\x01 this is not a tlspyo frame at all" * 3)
    assert c.closed and core.bad["malformed_header"] == 1


def test_two_gigabyte_length_header_is_refused_before_buffering(core):
    c = Client(core)
    c.raw(b"2147483648" + core.password + b"x" * 100)
    assert c.closed and core.bad["oversized"] == 1
    assert len(c.proto._buf) == 0


def test_wrong_password(core):
    c = Client(core, password=b"x" * len(core.password))
    c.send("HELLO", obj=["workers"])
    assert c.closed and core.bad["wrong_password"] == 1
    assert c.received() == [{"refused": "wrong_password"}]  # the client can say why


def test_pickle_payload_is_never_executed(core, keys):
    class Boom:
        def __reduce__(self):
            return (exec, ("import os; os._exit(3)",))

    body = pickle.dumps((1, "HELLO", None, Boom()))
    c = Client(core)
    c.raw(f"{len(body):<10}".encode() + core.password + body)
    assert c.closed and core.bad["malformed"] == 1
    # and as the object of an authenticated client's OBJ: dropped, counted, connection kept
    _, creds = keys
    w = connect(core, creds, "w1")
    w.send("OBJ", {"trainer": 1}, pickle.dumps(Boom()))
    assert not w.closed and core.bad["malformed"] == 2 and not core.trainer_queue


def test_no_identity_unknown_identity_revoked_and_forged(core, keys):
    _, creds = keys
    c = Client(core)
    c.send("HELLO", obj=["workers"])
    assert c.closed and core.bad["unauthenticated"] == 1
    c = Client(core)
    c.send("HELLO", obj=["workers", "auth2:stranger:" + "00" * 64])
    assert c.closed and core.bad["unknown_identity"] == 1
    c = Client(core)
    c.send("HELLO", obj=["workers", "auth2:gone:" + "00" * 64])  # revoked
    assert c.closed and core.bad["revoked"] == 1 and core.bad["unknown_identity"] == 1
    assert c.received() == [{"refused": "revoked"}]  # the worker can stop instead of retrying
    c = Client(core)
    forged = challenge_token("trainer", creds["w1"].signing_key, c.nonce)  # a worker key claiming "trainer"
    c.send("HELLO", obj=["trainer", forged])
    assert c.closed and core.bad["unauthenticated"] == 2


def test_object_before_hello_and_silence(core):
    c = Client(core)
    c.send("OBJ", {"trainer": 1}, b"x")
    assert c.closed and core.bad["unauthenticated"] == 1
    quiet = Client(core)
    core.clock.advance(HELLO_TIMEOUT_S + 1)
    assert quiet.closed and core.bad["no_hello"] == 1


def test_worker_cannot_join_trainer_channel_or_another_workers(core, keys):
    _, creds = keys
    for channels in (["trainer"], ["w:w2"]):
        c = Client(core).hello(creds["w1"], channels)
        assert c.closed
    assert core.bad["forbidden_channel"] == 2


def test_worker_cannot_publish_weights_or_pose_as_another(core, keys):
    _, creds = keys
    w1 = connect(core, creds, "w1")
    w2 = connect(core, creds, "w2")
    send_message(w1, creds["w1"], "weights", b"evil", 30, "workers", -1)
    assert w2.received() == [] and core.retained == [] and core.bad["forbidden_route"] == 1
    # an envelope signed by w1 but claiming to come from w2
    env = next(make_envelopes("segment", "w2", 31, b"x", signing_key=creds["w1"].signing_key))
    w1.send("OBJ", {"trainer": 1}, serialize(env))
    assert core.bad["spoofed_sender"] == 1 and not core.trainer_queue
    assert not w1.closed  # an authenticated client's bad message costs the message only


def test_trainer_queue_is_bounded(core, keys):
    _, creds = keys
    w = connect(core, creds, "w1")
    for n in range(30):
        send_message(w, creds["w1"], "segment", b"z" * 1000, 100 + n, "trainer", 1)
    assert core.trainer_queue_bytes <= 20_000 and core.bad["queue_full"] > 0


def test_new_connection_of_same_identity_replaces_old(core, keys):
    _, creds = keys
    old = connect(core, creds, "w1")
    new = connect(core, creds, "w1")
    assert old.closed and core.workers["w1"] is new.proto


def test_internal_error_costs_only_the_connection(core, keys, monkeypatch):
    _, creds = keys
    w = connect(core, creds, "w1")
    monkeypatch.setattr(RelayProtocol, "_obj", lambda self, d, o: 1 / 0)
    w.send("OBJ", {"trainer": 1}, b"x")
    assert w.closed and core.bad["internal_error"] == 1


def test_client_that_stops_reading_is_cut_off(core, keys):
    _, creds = keys
    t = connect(core, creds, "trainer")
    w = connect(core, creds, "w1")
    w.proto.pauseProducing()  # what Twisted does when w's socket buffer is full
    core.max_backlog_bytes = 5000
    send_message(t, creds["trainer"], "ack", b"q" * 8000, 40, "w:w1", 1)
    assert w.closed and core.bad["slow_client"] == 1
    w2 = connect(core, creds, "w2")  # others are not affected
    assert not w2.closed


def test_replies_count_toward_backlog_and_a_full_client_is_not_read(core, keys):
    _, creds = keys
    obs = Client(core).hello(creds["trainer"], [])
    obs.received()
    obs.proto.pauseProducing()  # its socket buffer is full: Twisted pauses the relay's writes
    assert obs.transport.producerState == "producing"
    for _ in range(READ_PAUSE_BYTES // 100):
        obs.proto._buckets["status"][0] = 5.0  # past the rate limit: only the backlog counts here
        obs.send("OBJ", {"status": -1}, serialize(None))
        if obs.transport.producerState == "paused":
            break
    assert obs.transport.producerState == "paused"  # the relay stopped reading from it
    assert obs.proto._backlog > READ_PAUSE_BYTES
    obs.proto.resumeProducing()  # it read: reading resumes
    assert obs.transport.producerState == "producing"
    obs.proto.pauseProducing()
    core.max_backlog_bytes = 4000
    for _ in range(40):
        obs.proto._buckets["status"][0] = 5.0
        obs.send("OBJ", {"status": -1}, serialize(None))
        if obs.closed:
            break
    assert obs.closed and core.bad["slow_client"] == 1


def test_ping_and_status_are_rate_limited(core, keys):
    _, creds = keys
    obs = Client(core).hello(creds["trainer"], [])
    obs.received()
    rate, burst = RATE_LIMITS["status"]
    for _ in range(50):
        obs.send("OBJ", {"status": -1}, serialize(None))
    assert len(obs.received()) == int(burst)
    assert core.bad["rate_limited"] == 50 - int(burst) and not obs.closed
    w = connect(core, creds, "w1")
    for _ in range(200):
        w.send("OBJ", {"ping": -1}, serialize(None))
    assert len(w.received()) == int(RATE_LIMITS["ping"][1])


def test_a_stalled_frame_closes_the_connection(core, keys):
    _, creds = keys
    w = connect(core, creds, "w1")
    w.raw(f"{core.max_frame_bytes:<10}".encode() + core.password + b"x" * 100)  # announce, then stall
    core.clock.advance(STALL_TIMEOUT_S - 1)
    assert not w.closed
    core.clock.advance(2)
    assert w.closed and core.bad["stalled_frame"] == 1
    # a frame that completes in time is fine
    w2 = connect(core, creds, "w2")
    body = serialize([99, "OBJ", {"ping": -1}, serialize(None)])
    frame = f"{len(body):<10}".encode() + core.password + body
    w2.raw(frame[:20])
    core.clock.advance(STALL_TIMEOUT_S - 1)
    w2.raw(frame[20:])
    core.clock.advance(STALL_TIMEOUT_S)
    assert not w2.closed and core.bad["stalled_frame"] == 1


def test_revocation_closes_observer_connections_too(core, keys, tmp_path):
    root, creds = keys
    add_worker(root, "temp")
    temp = load_credentials(root / "bundles" / "temp", "worker")
    w = Client(core).hello(temp, ["workers", "w:temp"])
    obs = Client(core).hello(temp, [])
    assert not w.closed and not obs.closed
    revoke_worker(root, "temp")
    core.worker_keys()  # the periodic reload (every KEY_CHECK_S in the server)
    assert w.closed and obs.closed
    assert {"refused": "revoked"} in w.received() and {"refused": "revoked"} in obs.received()


def test_removing_or_replacing_an_operator_key_closes_its_connection(core, keys):
    from rulka.net.keys import add_operator

    root, creds = keys
    bundle = add_operator(root, "leaving", force=True)
    op = load_credentials(bundle, "operator")
    stays = Client(core).hello(op, [])
    w = connect(core, creds, "w1")
    core.worker_keys()
    assert not stays.closed and not w.closed  # a reload with nothing changed closes nothing
    (root / "operators" / "leaving.pub").unlink()
    core.worker_keys()
    assert stays.closed and {"refused": "revoked"} in stays.received()
    assert not w.closed and core.bad["revoked"] >= 1
    # enrolled again with a new key: the connection made with the old key is closed
    op = load_credentials(add_operator(root, "leaving", force=True), "operator")
    old_key = Client(core).hello(op, [])
    core.worker_keys()
    assert not old_key.closed
    add_operator(root, "leaving", force=True)  # at once: compared by content, not file times
    core.worker_keys()
    assert old_key.closed and not w.closed


def test_a_flooding_worker_cannot_crowd_out_an_honest_one(core, keys):
    _, creds = keys
    flood = connect(core, creds, "w1")
    honest = connect(core, creds, "w2")
    for n in range(40):  # far more than the whole queue (20 kB)
        send_message(flood, creds["w1"], "segment", b"f" * 900, 100 + n, "trainer", 1)
    assert core.bad["queue_full"] > 0 and core.queued_bytes["w1"] <= core.settings.server_queue_bytes // 2
    for n in range(5):
        send_message(honest, creds["w2"], "segment", b"h" * 900, 200 + n, "trainer", 1)
    assert core.clients["w2"].bad.get("queue_full", 0) == 0  # every honest segment was queued
    t = connect(core, creds, "trainer")
    t.send("NTF", {"trainer": 12})
    senders = [e["s"] for e in t.received()]
    assert senders == ["w1", "w2"] * 5 + ["w1", "w1"]  # one message each in turn


def test_multi_chunk_messages_are_not_interleaved(core, keys):
    _, creds = keys
    w1 = connect(core, creds, "w1")
    w2 = connect(core, creds, "w2")
    send_message(w1, creds["w1"], "segment", b"a" * 3000, 1, "trainer", 1)  # 3 chunks
    send_message(w2, creds["w2"], "segment", b"b" * 3000, 1, "trainer", 1)
    send_message(w1, creds["w1"], "segment", b"c" * 1000, 2, "trainer", 1)
    t = connect(core, creds, "trainer")
    t.send("NTF", {"trainer": -1})
    got = [(e["s"], e["n"]) for e in t.received()]
    assert got == [("w1", 1)] * 3 + [("w2", 1)] * 3 + [("w1", 2)]


def test_a_captured_hello_cannot_be_replayed_on_another_connection(core, keys):
    _, creds = keys
    real = connect(core, creds, "w1")
    captured = challenge_token("w1", creds["w1"].signing_key, real.nonce)  # what a sniffer would see
    thief = Client(core)
    assert thief.nonce != real.nonce  # every connection gets its own
    thief.hello(creds["w1"], ["workers", "w:w1"], token=captured)
    assert thief.received() == [{"refused": "unauthenticated"}] and thief.closed
    assert core.workers["w1"] is real.proto and not real.closed  # the real worker keeps its place
    # a version-1 token (the name signed alone, replayable) is refused with a reason it can show
    old = Client(core).hello(creds["w2"], ["workers", "w:w2"], token=join_token("w2", creds["w2"].signing_key))
    assert old.received() == [{"refused": "outdated_client"}] and old.closed
    assert "w2" not in core.workers


def test_operator_reads_status_and_nothing_else(core, keys):
    from rulka.net.keys import add_operator, load_credentials

    root, creds = keys
    op = load_credentials(add_operator(root, "night-shift", force=True), "operator")
    assert op.identity == "op:night-shift"
    c = Client(core).hello(op, [])
    c.received()
    c.send("OBJ", {"status": -1}, serialize(None))
    [reply] = c.received()
    assert "server" in reply["status"] and not c.closed
    send_message(c, op, "segment", b"s", 1, "trainer", 1)  # an observer cannot send
    assert core.bad["forbidden_route"] >= 1 and not core.trainer_queue
    assert Client(core).hello(op, ["workers"]).closed  # nor join a channel
    w = connect(core, creds, "w1")
    w.send("OBJ", {"status": -1}, serialize(None))
    assert w.received() == [{"refused": "status_forbidden"}]


def test_a_worker_behind_gets_only_the_newest_weights_and_is_not_cut_off(core, keys, monkeypatch):
    """Weights wait at the relay, not in a slow worker's buffer: a version superseded before the
    worker started on it is skipped (counted), the one it started is finished first, and the
    relay keeps reading the worker's segments meanwhile."""
    _, creds = keys
    monkeypatch.setattr(relay_module, "READ_PAUSE_BYTES", 500)  # below one chunk
    t = connect(core, creds, "trainer")
    slow, fast = connect(core, creds, "w1"), connect(core, creds, "w2")
    core.max_backlog_bytes = 5000  # far below one version: weights must not count toward it
    write = slow.transport.writeSequence

    def write_and_fill(data):  # every chunk fills Twisted's buffer: it pauses the relay's writes at once
        write(data)
        slow.proto.pauseProducing()

    slow.transport.writeSequence = write_and_fill
    for n, byte in ((10, b"a"), (11, b"b"), (12, b"c"), (13, b"d")):
        send_message(t, creds["trainer"], "weights", byte * 8000, n, "workers", -1)
    assert len(fast.received()) == 4 * 8  # a worker that reads gets every version
    got = slow.received()
    assert [(e["n"], e["i"]) for e in got] == [(10, 0)]  # one chunk written before the buffer filled
    assert not slow.closed and core.bad.get("slow_client", 0) == 0
    assert slow.transport.producerState == "producing"  # its own sends are still read
    send_message(slow, creds["w1"], "segment", b"s" * 100, 1, "trainer", 1)
    assert len(core.trainer_queue) == 1
    for _ in range(20):  # the worker reads: one chunk at a time, as Twisted says the buffer drained
        slow.proto.resumeProducing()
    got += slow.received()
    # version 10 (started) is finished, 11 and 12 are skipped, 13 (the newest) follows
    assert [e["n"] for e in got] == [10] * 8 + [13] * 8 and [e["i"] for e in got[8:]] == list(range(8))
    assert b"".join(e["d"] for e in got[8:]) == b"d" * 8000
    assert core.clients["w1"].weights_superseded == 2 and core.weights_superseded == 2
    assert core.clients["w2"].weights_superseded == 0
    status = core.status()
    assert status["server"]["weights_superseded"] == 2
    # w1 got 10 and 13 in full (13 is the newest): behind by nothing now, like w2
    assert status["server"]["clients"]["w1"]["weights_behind"] == 0
    assert status["server"]["clients"]["w2"]["weights_behind"] == 0
    send_message(t, creds["trainer"], "weights", b"e" * 8000, 14, "workers", -1)  # w1 gets one chunk of 14
    status = core.status()
    assert status["server"]["clients"]["w1"]["weights_behind"] == 1
    assert status["server"]["clients"]["w2"]["weights_behind"] == 0
    row = {r["name"]: r for r in build_status(status["server"], {"w1": (0.0, {"weights_version": 3})}, {},
                                              now=1.0)["workers"]}
    assert row["w1"]["weights_behind"] == 1 and row["w1"]["weights_behind_s"] >= 0


def test_weights_abandoned_by_a_leaving_trainer_do_not_stall_a_worker(core, keys):
    _, creds = keys
    t = connect(core, creds, "trainer")
    send_message(t, creds["trainer"], "weights", b"a" * 2500, 10, "workers", -1)
    part = message(creds["trainer"], "weights", b"b" * 2500, 11, "workers", -1)
    for ch, c, obj in part[:2]:  # the trainer leaves after 2 of 3 chunks
        t.send("OBJ", {ch: c}, obj)
    w = Client(core).hello(creds["w1"], ["workers", "w:w1"])
    assert [(e["n"], e["i"]) for e in w.received()] == [(11, 0), (11, 1)]
    t.proto.connectionLost()
    t2 = connect(core, creds, "trainer")
    send_message(t2, creds["trainer"], "weights", b"c" * 2500, 12, "workers", -1)
    assert [(e["n"], e["i"]) for e in w.received()] == [(12, 0), (12, 1), (12, 2)]


def _fills_on_every_write(client):
    """Each chunk written fills Twisted's buffer: the relay writes the next one after resumeProducing."""
    write = client.transport.writeSequence

    def write_and_fill(data):
        write(data)
        client.proto.pauseProducing()

    client.transport.writeSequence = write_and_fill


def _drain(client, times=20):
    for _ in range(times):
        client.proto.resumeProducing()
    return [(e["n"], e["i"]) for e in client.received()]


def test_weights_go_to_weights_streams_workers_at_a_time_and_the_next_gets_the_newest(core, keys, monkeypatch):
    """With one turn, a second worker waits while the first is sent a version, then gets the
    newest version (not the one it waited behind); the first then queues behind it."""
    _, creds = keys
    core.settings.weights_streams = 1
    monkeypatch.setattr(turns_module, "TURN_BYTES", 0)  # no extra turns for small versions
    t = connect(core, creds, "trainer")
    w1, w2 = connect(core, creds, "w1"), connect(core, creds, "w2")
    _fills_on_every_write(w1)
    _fills_on_every_write(w2)
    send_message(t, creds["trainer"], "weights", b"a" * 8000, 10, "workers", -1)
    assert [(e["n"], e["i"]) for e in w1.received()] == [(10, 0)]
    assert w2.received() == [] and core.status()["server"]["weights_waiting"] == 1
    send_message(t, creds["trainer"], "weights", b"b" * 8000, 11, "workers", -1)
    assert w2.received() == []  # still waiting: w1 finishes 10 first
    assert _drain(w1, 7) == [(10, i) for i in range(1, 8)]
    # w1's turn ended: w2 starts on 11, the newest; w1 waits behind it for 11
    assert [(e["n"], e["i"]) for e in w2.received()] == [(11, 0)]
    assert _drain(w1) == [] and core.status()["server"]["weights_waiting"] == 1
    assert _drain(w2) == [(11, i) for i in range(1, 8)]
    assert _drain(w1) == [(11, i) for i in range(8)]
    assert core.weights_sending == {} and core.weights_waiting == {}
    assert not w1.closed and not w2.closed
    # a small version gets more turns: at least TURN_BYTES of it in progress (8 chunks of 1 KB here)
    monkeypatch.setattr(turns_module, "TURN_BYTES", 20_000)
    assert core.turns() == 3
    core.settings.weights_streams = 0
    assert core.turns() == 0  # all at once


def test_a_weights_turn_passes_on_when_its_worker_leaves_or_stalls(core, keys, monkeypatch):
    _, creds = keys
    core.settings.weights_streams = 1
    monkeypatch.setattr(turns_module, "TURN_BYTES", 0)
    t = connect(core, creds, "trainer")
    w1, w2 = connect(core, creds, "w1"), connect(core, creds, "w2")
    for c in (w1, w2):
        _fills_on_every_write(c)
    send_message(t, creds["trainer"], "weights", b"a" * 8000, 10, "workers", -1)
    assert [e["n"] for e in w1.received()] == [10] and w2.received() == []
    w1.proto.connectionLost()  # mid-version: its turn goes to w2
    assert [(e["n"], e["i"]) for e in w2.received()] == [(10, 0)]
    w1 = connect(core, creds, "w1")
    _fills_on_every_write(w1)
    assert w1.received() == []  # waits for w2's turn
    # w2 stops reading: past overdue_s() its turn no longer counts and w1 is served
    core.weights_sending[w2.proto] -= core.overdue_s() + 1
    core.clock.advance(turns_module.TURN_CHECK_S)
    assert [(e["n"], e["i"]) for e in w1.received()] == [(10, 0)]
    assert _drain(w1) == [(10, i) for i in range(1, 8)]
    assert _drain(w2) == [(10, i) for i in range(1, 8)]
    assert core.weights_sending == {} and core.weights_waiting == {}
