"""Weights through a slow link: a real rulka-server process, real TLS, a worker behind a
throttling proxy (bench/throttle.py) on loopback."""

from __future__ import annotations

import time

import pytest

from bench.throttle import Throttle
from rulka.net.keys import add_worker, generate_keys
from rulka.net.status import query_status
from rulka.net.tls import connect_trainer, connect_worker
from rulka.server.server import Server

pytestmark = pytest.mark.integration

CHUNK = 64 * 1024


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("slowlink") / "keys"
    generate_keys(root, ["localhost"])
    add_worker(root, "slow")
    return root


def test_a_worker_behind_a_slow_link_gets_the_newest_weights_and_stays_connected(keys):
    """20 versions of 300 KB (6 MB) published at once through a 4 Mbit/s link (12 s of upload):
    the worker is sent the version it started and then the newest, is never cut off for its
    backlog (the relay would cut it past 2 x 400 KB + 16 frames), and the relay counts what it
    skipped."""
    srv = Server({"chunk_bytes": CHUNK, "max_message_bytes": 400_000}, keys, bind_host="127.0.0.1", port=0).start()
    proxy = Throttle(srv.port, mbit=4.0).start()
    cfg = {"host": "localhost", "port": srv.port, "chunk_bytes": CHUNK, "heartbeat_s": 0.5,
           "max_message_bytes": 400_000}
    trainer = connect_trainer(cfg, keys)
    worker = connect_worker({**cfg, "port": proxy.port}, keys / "bundles" / "slow", "slow")
    try:
        assert trainer.wait_connected(30) and worker.wait_connected(30)
        versions = [bytes([v]) * 300_000 for v in range(20)]
        for blob in versions:
            trainer.broadcast("weights", blob)
        for i in range(5):  # while the weights go down, its segments still go up
            worker.send("segment", b"seg%d" % i)
        got: list[bytes] = []
        segments: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (not got or got[-1] != versions[-1] or len(segments) < 5):
            got += [m.payload for m in worker.receive(timeout=0.1) if m.kind == "weights"]
            segments += [m.payload for m in trainer.receive(timeout=0.1) if m.kind == "segment"]
        assert segments == [b"seg%d" % i for i in range(5)]
        assert got and got[-1] == versions[-1], "the newest version never arrived"
        assert len(got) <= 4, f"{len(got)} versions sent through the slow link, not only the newest"
        assert all(p in versions for p in got)
        report = query_status(cfg, keys)["server"]
        assert report["bad_inputs"].get("slow_client", 0) == 0
        assert report["weights_superseded"] >= 20 - len(got)
        assert report["clients"]["slow"]["connected"] and report["clients"]["slow"]["weights_superseded"] >= 16
        assert proxy.bytes_down < 3 * 300_000 * 1.2 + 2_000_000  # not the 6 MB of every version
    finally:
        worker.close()
        trainer.close()
        proxy.stop()
        srv.stop()
