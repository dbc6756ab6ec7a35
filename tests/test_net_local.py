from __future__ import annotations

import threading
import time

import pytest

from rulka.net.link import LinkClosed, OutboxFull
from rulka.net.local import LocalHub
from rulka.net.messages import Stats


def test_worker_to_trainer_carries_authenticated_sender():
    hub = LocalHub()
    trainer = hub.trainer_link()
    w = hub.worker_link("w1")
    w.send("segment", b"abc")
    msgs = trainer.receive(timeout=1.0)
    assert [(m.kind, m.sender, m.payload) for m in msgs] == [("segment", "w1", b"abc")]


def test_weights_broadcast_reaches_all_and_late_joiner_gets_latest_only():
    hub = LocalHub()
    trainer = hub.trainer_link()
    a = hub.worker_link("a")
    trainer.broadcast("weights", b"v1")
    trainer.broadcast("weights", b"v2")
    assert [m.payload for m in a.receive(0.5)] == [b"v1", b"v2"]
    late = hub.worker_link("late")
    msgs = late.receive(0.5)
    assert [(m.kind, m.sender, m.payload) for m in msgs] == [("weights", "trainer", b"v2")]


def test_send_to_reaches_one_connected_worker_only():
    hub = LocalHub()
    trainer = hub.trainer_link()
    a = hub.worker_link("a")
    b = hub.worker_link("b")
    trainer.send_to("b", "ack", b"\x91\x01")
    trainer.send_to("c", "ack", b"lost")  # c is not connected: dropped, as by the relay
    assert a.receive(0.05) == []
    assert [m.payload for m in b.receive(0.5)] == [b"\x91\x01"]
    c = hub.worker_link("c")
    assert c.receive(0.05) == []
    assert hub.status()["server"]["no_route"] == 1


def test_worker_cannot_send_trainer_kinds():
    hub = LocalHub()
    w = hub.worker_link("w")
    with pytest.raises(ValueError):
        w.send("weights", b"evil")
    with pytest.raises(ValueError):
        w.send("Bad Kind", b"")


def test_full_trainer_queue_raises_outbox_full():
    hub = LocalHub(queue_size=2)
    hub.trainer_link()
    w = hub.worker_link("w")
    w.send("segment", b"1")
    w.send("segment", b"2")
    with pytest.raises(OutboxFull):
        w.send("segment", b"3")


def test_receive_waits_until_a_message_arrives():
    hub = LocalHub()
    trainer = hub.trainer_link()
    w = hub.worker_link("w")
    threading.Timer(0.05, lambda: w.send("segment", b"x")).start()
    t0 = time.monotonic()
    msgs = trainer.receive(timeout=2.0)
    assert [m.payload for m in msgs] == [b"x"]
    assert time.monotonic() - t0 < 1.5


def test_offline_loses_messages_and_reports_disconnected():
    hub = LocalHub()
    trainer = hub.trainer_link()
    w = hub.worker_link("w")
    trainer.broadcast("weights", b"v1")
    w.receive(0.1)
    hub.set_online(False)
    assert not w.connected() and not trainer.connected()
    w.send("segment", b"lost")
    assert trainer.receive(0.05) == []
    hub.set_online(True)
    assert w.connected()
    # the retained weights come again after an outage, as from a fresh server connection
    assert [m.payload for m in w.receive(0.5)] == [b"v1"]


def test_closed_link_refuses():
    hub = LocalHub()
    w = hub.worker_link("w")
    w.close()
    with pytest.raises(LinkClosed):
        w.send("segment", b"x")
    hub.worker_link("w")  # the id can be reused after close


def test_status_keeps_latest_stats_per_sender():
    hub = LocalHub()
    trainer = hub.trainer_link()
    w = hub.worker_link("w1")
    w.send("stats", Stats({"episodes": 1, "samples_per_s": 10.0, "weights_version": 3}).encode())
    w.send("stats", Stats({"episodes": 2, "samples_per_s": 12.5, "weights_version": 4}).encode())
    trainer.broadcast("stats", Stats({"updates": 7, "weights_version": 4}).encode())
    st = hub.status()
    assert st["trainer"]["updates"] == 7
    [row] = st["workers"]
    assert (row["name"], row["episodes"], row["samples_per_s"], row["weights_version"]) == ("w1", 2, 12.5, 4)
    assert row["last_seen_s"] >= 0
    assert st["server"]["messages_in"] == 2
