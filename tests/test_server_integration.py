"""Real rulka-server processes, real TLS on loopback, real tlspyo endpoints."""

from __future__ import annotations

import os
import pickle
import re
import socket
import ssl
import subprocess
import sys
import time

import pytest

from rulka.errors import UserError
from rulka.net.keys import add_worker, generate_keys, revoke_worker
from rulka.net.link import Message
from rulka.net.status import query_status
from rulka.net.tls import connect_trainer, connect_worker, free_local_port
from rulka.net.wire import make_envelopes
from rulka.server.server import Server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("integ") / "keys"
    generate_keys(root, ["localhost"])
    for name in ("w1", "w2", "late", "doomed"):
        add_worker(root, name)
    return root


@pytest.fixture(scope="module")
def server(keys):
    srv = Server({"chunk_bytes": 64 * 1024}, keys, bind_host="127.0.0.1", port=0).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def cfg(server):
    return {"host": "localhost", "port": server.port, "chunk_bytes": 64 * 1024, "heartbeat_s": 0.5}


@pytest.fixture(scope="module")
def trainer(cfg, keys):
    link = connect_trainer(cfg, keys)
    assert link.wait_connected(30)
    yield link
    link.close()


@pytest.fixture(scope="module")
def workers(cfg, keys):
    links = [connect_worker(cfg, keys / "bundles" / name, name) for name in ("w1", "w2")]
    assert all(w.wait_connected(30) for w in links)
    yield links
    for w in links:
        w.close()


def receive_until(link, pred, timeout=15.0) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not pred(got):
        got += link.receive(timeout=0.2)
    return got


def test_segments_acks_and_weights_through_the_server(trainer, workers, cfg, keys):
    w1, w2 = workers
    w1.send("segment", b"from w1")
    w2.send("segment", b"x" * 300_000)  # several chunks
    got = receive_until(trainer, lambda g: len(g) >= 2)
    assert sorted((m.kind, m.sender, len(m.payload)) for m in got) == [
        ("segment", "w1", 7), ("segment", "w2", 300_000)]
    trainer.send_to("w2", "ack", b"[7]")
    acks = receive_until(w2, lambda g: any(m.kind == "ack" for m in g))
    assert [(m.kind, m.sender, m.payload) for m in acks if m.kind == "ack"] == [("ack", "trainer", b"[7]")]
    assert not [m for m in w1.receive(0.3) if m.kind == "ack"]

    blob = bytes(range(256)) * 4000  # 1 MB, 16 chunks
    trainer.broadcast("weights", blob)
    for w in workers:
        got = receive_until(w, lambda g: any(m.kind == "weights" for m in g))
        assert [m.payload for m in got if m.kind == "weights"] == [blob]

    late = connect_worker(cfg, keys / "bundles" / "late")
    try:
        got = receive_until(late, lambda g: any(m.kind == "weights" for m in g))
        assert [(m.sender, m.payload) for m in got if m.kind == "weights"] == [("trainer", blob)]
    finally:
        late.close()


def test_a_burst_of_segments_arrives_whole_and_in_order(trainer, workers):
    """Messages queued together go out under one batch signature; each still arrives verified."""
    w1 = workers[0]
    payloads = [bytes([i]) * (1000 + 50_000 * (i % 3)) for i in range(40)]
    for p in payloads:
        w1.send("segment", p)
    got = receive_until(trainer, lambda g: len(g) >= len(payloads))
    assert [m.payload for m in got] == payloads and {m.sender for m in got} == {"w1"}
    assert trainer._reassembler._verified, "no batch signature was used for a burst of 40 messages"
    assert not trainer.bad_inputs


def test_worker_link_ignores_weights_not_signed_by_trainer(workers, keys):
    from rulka.net.keys import load_credentials

    w1 = workers[0]
    evil = load_credentials(keys / "bundles" / "w2", "worker")
    for env in make_envelopes("weights", "trainer", time.time_ns(), b"evil", signing_key=evil.signing_key):
        w1._handle(env)  # as if the relay had delivered it
    for env in make_envelopes("weights", "w2", time.time_ns(), b"evil", signing_key=evil.signing_key):
        w1._handle(env)
    assert w1.bad_inputs.get("bad_signature") == 1 and w1.bad_inputs.get("unknown_sender") == 1
    assert not [m for m in w1.receive(0.1) if m.payload == b"evil"]


def test_replayed_segment_is_dropped_by_the_trainer(trainer, keys):
    from rulka.net.keys import load_credentials

    w1 = load_credentials(keys / "bundles" / "w1", "worker")
    [env] = make_envelopes("segment", "w1", time.time_ns(), b"once", signing_key=w1.signing_key)
    [old] = make_envelopes("segment", "w1", time.time_ns() - 10**9, b"older", signing_key=w1.signing_key)
    before = trainer.bad_inputs.get("replayed", 0), trainer.bad_inputs.get("duplicate", 0)
    trainer._handle(dict(env))
    trainer._handle(dict(env))  # the same signed bytes again
    trainer._handle(dict(old))  # a message captured earlier, replayed after a newer one
    got = [m for m in trainer.receive(0.5) if m.payload in (b"once", b"older")]
    assert [m.payload for m in got] == [b"once"]
    assert (trainer.bad_inputs.get("replayed", 0), trainer.bad_inputs.get("duplicate", 0)) == (
        before[0] + 1, before[1] + 1)


def tls_socket(port, keys):
    ctx = ssl.create_default_context(cafile=str(keys / "ca.pem"))
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    s = ctx.wrap_socket(raw, server_hostname="localhost")
    s.recv(4096)  # the relay's HELLO
    return s


def closed_by_server(s) -> bool:
    try:
        s.settimeout(5)
        while s.recv(4096):
            pass
        return True
    except (ConnectionError, ssl.SSLError, OSError):
        return True
    except TimeoutError:
        return False


def test_hostile_inputs_leave_the_server_serving(server, trainer, workers, keys, cfg):
    password = (keys / "password").read_bytes()
    before = query_status(cfg, keys)["server"]["bad_inputs"]

    class Boom:
        def __reduce__(self):
            return (exec, ("import os; os._exit(3)",))

    attacks = {
        "malformed_header": b"GARBAGE!!!" + b"\x00\xff" * 50,
        "oversized": b"2147483648" + password + b"x" * 1000,
        "wrong_password": b"10        " + b"y" * len(password) + b"0123456789",
    }
    body = pickle.dumps((1, "HELLO", None, Boom()))
    attacks["malformed"] = f"{len(body):<10}".encode() + password + body
    for data in attacks.values():
        s = tls_socket(server.port, keys)
        s.sendall(data)
        assert closed_by_server(s)
        s.close()
    # not even TLS: plain bytes on the TLS port
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    raw.sendall(b"\x00" * 64 + pickle.dumps(Boom()))
    raw.close()

    after = query_status(cfg, keys)
    for reason in attacks:
        assert after["server"]["bad_inputs"].get(reason, 0) == before.get(reason, 0) + 1, reason
    assert server.alive()
    workers[0].send("segment", b"still works")
    got = receive_until(trainer, lambda g: any(m.payload == b"still works" for m in g))
    assert any(m.sender == "w1" for m in got)


@pytest.mark.slow  # several seconds of waiting for (re)connections
def test_revoked_worker_is_shut_out(trainer, cfg, keys):
    doomed = connect_worker(cfg, keys / "bundles" / "doomed")
    try:
        assert doomed.wait_connected(30)
        doomed.send("segment", b"before")
        assert any(m.sender == "doomed" for m in receive_until(trainer, lambda g: bool(g)))
        bundle_creds = doomed.creds
        revoke_worker(keys, "doomed")
        # the trainer refuses its messages even if the relay still forwarded them
        trainer._keys_checked = 0.0  # skip the link's 2 s wait before it re-reads enrolled keys
        for env in make_envelopes("segment", "doomed", time.time_ns(), b"after", signing_key=bundle_creds.signing_key):
            trainer._handle(env)
        assert trainer.bad_inputs.get("unknown_sender", 0) >= 1
        # and the relay drops its connection within its 2 s reload and refuses it from then on
        deadline = time.monotonic() + 15
        while doomed.connected() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not doomed.connected()
    finally:
        doomed.close()


def test_status_lists_workers_and_counters(workers, cfg, keys):
    from rulka.net.messages import Stats

    workers[1].send("stats", Stats({"episodes": 3, "samples_per_s": 41.5, "weights_version": 2}).encode())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        st = query_status(cfg, keys)
        rows = {r["name"]: r for r in st["workers"]}
        if rows.get("w2", {}).get("episodes") == 3:
            break
    assert rows["w2"]["samples_per_s"] == 41.5 and rows["w2"]["address"].startswith("127.0.0.1:")
    assert st["server"]["clients"]["w2"]["messages_in"] > 0
    # the report lists every address: a worker's credential may not read it
    with pytest.raises(UserError, match="status_forbidden"):
        query_status(cfg, keys / "bundles" / "w1")
    # an operator's bundle may, without the trainer's keys (the relay reads keys/operators/)
    from rulka.net.keys import add_operator

    bundle = add_operator(keys, "ops")
    assert not (bundle / "trainer.key").exists()
    assert "w2" in {r["name"] for r in query_status(cfg, bundle)["workers"]}
    (keys / "operators" / "ops.pub").unlink()  # shut out
    with pytest.raises(UserError, match="unknown_identity"):
        query_status(cfg, bundle)


@pytest.mark.slow  # several seconds of waiting for (re)connections
def test_server_restart_clients_reconnect(keys, tmp_path):
    port = free_local_port()
    cmd = [sys.executable, "-m", "rulka.server.cli", "--keys", str(keys), "--host", "127.0.0.1",
           "--port", str(port), "--set", "network.chunk_bytes=65536"]
    cfg = {"host": "localhost", "port": port, "heartbeat_s": 0.3, "reconnect_backoff_s": 0.2,
           "reconnect_backoff_max_s": 1.0}
    home = tmp_path / "home"  # a relay started by hand keeps its log in ~/.rulka/server/
    env = {**os.environ, "HOME": str(home), "USERPROFILE": str(home)}

    def start():
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        assert p.stdout.readline().startswith("listening on")
        return p

    proc = start()
    trainer = connect_trainer(cfg, keys)
    worker = connect_worker(cfg, keys / "bundles" / "w1")
    try:
        assert trainer.wait_connected(30) and worker.wait_connected(30)
        proc.terminate()
        assert proc.wait(10) == 0  # clean shutdown on SIGTERM
        deadline = time.monotonic() + 10  # each link notices on its own missed heartbeats
        while (worker.connected() or trainer.connected()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not worker.connected() and not trainer.connected()
        proc = start()
        assert trainer.wait_connected(30) and worker.wait_connected(30)
        worker.send("segment", b"after restart")
        got = receive_until(trainer, lambda g: any(m.payload == b"after restart" for m in g))
        assert [m.sender for m in got if m.payload == b"after restart"] == ["w1"]
        # both lives of the relay in one dated file: who connected, and the clean stop between
        log = (home / ".rulka" / "server" / "server.log").read_text(encoding="utf-8")
        assert log.count("rulka-server listening on 127.0.0.1:") == 2, log
        assert log.count("rulka-server stopped") == 1, log
        assert log.count("w1 connected from") == 2 and log.count("trainer connected from") == 2, log
        assert re.match(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} I ", log), log
    finally:
        worker.close()
        trainer.close()
        proc.terminate()
        proc.wait(10)


def test_unreachable_server_fills_the_outbox_without_blocking(keys):
    from rulka.net.link import OutboxFull

    port = free_local_port()  # nothing listens there
    w = connect_worker({"host": "localhost", "port": port, "outbox_messages": 3}, keys / "bundles" / "w1")
    try:
        t0 = time.monotonic()
        queued = 0
        with pytest.raises(OutboxFull):
            for _ in range(10):
                w.send("segment", b"x")
                queued += 1
        assert queued in (3, 4)  # three in the outbox, perhaps one held by the sender thread
        assert time.monotonic() - t0 < 1.0 and not w.connected()
    finally:
        w.close()


@pytest.mark.slow  # several seconds of waiting for (re)connections
def test_plain_tcp_only_when_asked_and_with_a_warning(keys, caplog):
    srv = Server({"allow_plain_tcp": True}, keys, bind_host="127.0.0.1", port=0).start()
    cfg = {"host": "localhost", "port": srv.port, "allow_plain_tcp": True, "heartbeat_s": 0.3}
    try:
        with caplog.at_level("WARNING", logger="rulka.net"):
            trainer = connect_trainer(cfg, keys)
        worker = connect_worker(cfg, keys / "bundles" / "w2")
        try:
            assert any("NOT encrypted" in r.getMessage() for r in caplog.records)
            assert trainer.wait_connected(30) and worker.wait_connected(30)
            worker.send("segment", b"plain")
            assert [m.payload for m in receive_until(trainer, lambda g: bool(g))] == [b"plain"]
        finally:
            worker.close()
            trainer.close()
        # a TLS client cannot talk to a plain server: it never connects
        tls_worker = connect_worker({"host": "localhost", "port": srv.port}, keys / "bundles" / "w1")
        try:
            assert not tls_worker.wait_connected(2)
        finally:
            tls_worker.close()
    finally:
        srv.stop()


def test_a_captured_hello_replayed_on_another_connection_is_refused(server, trainer, workers, keys):
    """Issue 10: the identity token used to be static, so a captured HELLO replayed by a stranger
    kicked the real worker off and received its messages. Now each connection signs its own nonce."""
    from test_server_relay import relay_objects

    from rulka.net.keys import load_credentials
    from rulka.net.wire import challenge_token, deserialize, hello_nonce, serialize

    creds = load_credentials(keys / "bundles" / "w1", "worker")
    password = (keys / "password").read_bytes()

    def connect_raw():
        ctx = ssl.create_default_context(cafile=str(keys / "ca.pem"))
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=5),
                            server_hostname="localhost")
        data = s.recv(4096)
        _, cmd, obj = deserialize(data[10:10 + int(data[:10])])
        assert cmd == "HELLO"
        return s, hello_nonce(obj)

    first, nonce = connect_raw()
    captured = challenge_token("w1", creds.signing_key, nonce)  # what a sniffer saw on that connection
    first.close()
    thief, other = connect_raw()
    assert other != nonce
    body = serialize([1, "HELLO", None, ["workers", "w:w1", captured]])
    thief.sendall(f"{len(body):<10}".encode() + password + body)
    replies = b""
    thief.settimeout(5)
    try:
        while chunk := thief.recv(4096):
            replies += chunk
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    assert relay_objects(replies) == [{"refused": "unauthenticated"}]
    # the real worker kept its connection and still gets what the trainer sends it
    trainer.send_to("w1", "ack", b"\x91\x07")
    assert [m.payload for m in receive_until(workers[0], lambda g: g) if m.kind == "ack"] == [b"\x91\x07"]
    assert workers[0].connected() and workers[0].refused is None
