"""Transport benchmark: payload MB/s through rulka-server over real TLS on loopback.

Prints one JSON object:
- ``relay_mb_s``: worker link -> rulka-server -> trainer link, for 64 KB, 1 MB and 26 MB messages
  (each side's tlspyo endpoint and the server are separate processes; signing, chunking,
  verification and reassembly included);
- ``weights_26mb_to_4_workers_s``: one 26 MB ``weights`` broadcast until all 4 worker links have
  the whole message;
- ``raw_tls_mb_s``: the ceiling, one CPython TLS stream on loopback, measured in the same run;
- ``tlspyo_pickle_mb_s``: the same sizes through plain tlspyo (its Relay, default pickle
  serializer, no chunking): TMRL's path. Only this benchmark uses pickle, on data it made itself;
- ``relay_vs_tlspyo_pickle``: rulka's relay over that baseline per size (target >= 1): the
  median over rounds of the two measured back to back (both paths stay up for the whole run and
  take turns going first), so that the load of a shared machine, which swings MB/s by 2-4x
  within a minute, weighs on both alike; ``relay_vs_tlspyo_pickle_rounds`` lists every round.
  MB/s figures are medians over the rounds (tlspyo's 26 MB figure is one message in round one:
  it takes tens of seconds);
- ``cpu_s_per_100mb``: CPU seconds per 100 MB of payload in each process of the relay path
  (server, the two tlspyo endpoint children, this process's link threads): a figure that other
  load on a shared machine distorts much less than MB/s.

Usage: python -m bench.transport [--quick]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SIZES = {"64KB": 64 * 1024, "1MB": 1024 * 1024, "26MB": 26 * 1024 * 1024}
MB = 1e6
TARGET_MB_S = 80.0
TARGET_FANOUT_S = 1.5


def relay_throughput(trainer: Any, worker: Any, size: int, total_bytes: int) -> float:
    """MB/s of payload from ``worker`` to ``trainer`` for ``total_bytes`` in messages of ``size``."""
    from rulka.net.link import OutboxFull

    count = max(2, total_bytes // size)
    payload = os.urandom(size)
    got = 0
    done = threading.Event()

    def consume() -> None:
        nonlocal got
        while got < count:
            got += len(trainer.receive(timeout=0.5))
        done.set()

    t = threading.Thread(target=consume, daemon=True)
    t0 = time.perf_counter()
    t.start()
    sent = 0
    while sent < count:
        try:
            worker.send("segment", payload)
            sent += 1
        except OutboxFull:
            time.sleep(0.001)
    if not done.wait(300):
        raise RuntimeError(f"only {got}/{count} messages of {size} bytes arrived")
    return count * size / MB / (time.perf_counter() - t0)


def cpu_seconds(pid: int | None) -> float:
    """User+system CPU seconds of a process so far (Linux /proc; 0.0 elsewhere)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def weights_fanout(trainer: Any, workers: list[Any], size: int) -> float:
    """Seconds from ``broadcast`` of a ``size``-byte weights message until every worker has it."""
    blob = os.urandom(size)
    arrived: list[float] = []
    lock = threading.Lock()

    def wait(w: Any) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(m.kind == "weights" and len(m.payload) == size for m in w.receive(timeout=0.5)):
                with lock:
                    arrived.append(time.perf_counter())
                return

    threads = [threading.Thread(target=wait, args=(w,), daemon=True) for w in workers]
    for th in threads:
        th.start()
    t0 = time.perf_counter()
    trainer.broadcast("weights", blob)
    for th in threads:
        th.join()
    if len(arrived) != len(workers):
        raise RuntimeError("not every worker received the weights")
    return max(arrived) - t0


def raw_tls_ceiling(keys: Path, size: int, count: int) -> float:
    """MB/s of one CPython TLS stream on loopback (sender and receiver threads)."""
    sctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    sctx.load_cert_chain(str(keys / "server" / "certificate.pem"), str(keys / "server" / "key.pem"))
    cctx = ssl.create_default_context(cafile=str(keys / "ca.pem"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    want = size * count

    def serve() -> None:
        conn, _ = listener.accept()
        with sctx.wrap_socket(conn, server_side=True) as s:
            buf, total = bytearray(1 << 20), 0
            while total < want:
                total += s.recv_into(buf)
            s.sendall(b"k")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    payload = os.urandom(size)
    with cctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost") as c:
        t0 = time.perf_counter()
        for _ in range(count):
            c.sendall(payload)
        c.recv(1)
        elapsed = time.perf_counter() - t0
    t.join()
    listener.close()
    return want / MB / elapsed


def tlspyo_throughput(producer: Any, consumer: Any, group: str, size: int, count: int,
                      timeout_s: float = 300.0) -> tuple[int, float]:
    """``count`` messages of ``size`` random bytes from one tlspyo Endpoint to ``group`` through a
    tlspyo Relay, fetched as TMRL's trainer does (``notify`` -1: what the relay holds now, then
    ``receive_all``, again until all arrived or ``timeout_s``): (messages received, seconds).
    ``TlspyoPickle`` here and TMRL's own ``Server`` in ``bench/peer_tmrl.py`` are timed with it."""
    payload = os.urandom(size)
    consumer.notify({group: -1})
    t0 = time.perf_counter()
    for _ in range(count):
        producer.produce(payload, group)
    received, deadline = 0, time.monotonic() + timeout_s
    while received < count and time.monotonic() < deadline:
        items = consumer.receive_all(blocking=False)
        received += len(items)
        if not items:
            time.sleep(0.002)
        consumer.notify({group: -1})  # a consumer keeps asking
    return received, time.perf_counter() - t0


class TlspyoPickle:
    """The TMRL path: tlspyo Relay + Endpoints with the default (pickle) serializer."""

    def __init__(self, keys: Path) -> None:
        from tlspyo import Endpoint, Relay

        from rulka.net.tls import free_local_port

        password = (keys / "password").read_text()
        port = free_local_port()
        self.relay = Relay(port=port, password=password, local_com_port=free_local_port(),
                           keys_dir=str(keys / "server"))
        common = {"ip_server": "127.0.0.1", "port": port, "password": password,
                  "keys_dir": str(keys / "client"), "hostname": "localhost", "recon_initial_delay": 0.2}
        self.producer = Endpoint(groups="producers", local_com_port=free_local_port(), **common)
        self.consumer = Endpoint(groups="consumers", local_com_port=free_local_port(), **common)
        # make sure both are connected: a round of small messages first
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.producer.produce(b"warm", "consumers")
            self.consumer.notify({"consumers": -1})
            if self.consumer.receive_all(blocking=False):
                break
            time.sleep(0.2)
        time.sleep(0.3)
        self.consumer.receive_all(blocking=False)

    def throughput(self, size: int, count: int) -> float:
        """MB/s of ``count`` messages of ``size`` bytes, producer to consumer."""
        got, seconds = tlspyo_throughput(self.producer, self.consumer, "consumers", size, count)
        if got < count:
            raise RuntimeError(f"only {got}/{count} messages of {size} bytes arrived through plain tlspyo")
        return count * size / MB / seconds

    def close(self) -> None:
        for ep in (self.producer, self.consumer):
            ep.stop()
        self.relay.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="less data per size (noisier)")
    parser.add_argument("--skip-baseline", action="store_true", help="do not measure the tlspyo-pickle path")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    # bytes per measurement; the bench must not trip the relay's own limits
    total = (8 if args.quick else 26) * 1024 * 1024
    rounds = 1 if args.quick else 3

    from rulka.net.keys import add_worker, generate_keys
    from rulka.net.tls import connect_trainer, connect_worker
    from rulka.server.server import Server

    result: dict[str, Any] = {"machine_cores": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="rulka-bench-") as tmp:
        keys = Path(tmp) / "keys"
        generate_keys(keys, ["localhost"])
        names = [f"w{i}" for i in range(4)]
        for n in names:
            add_worker(keys, n)
        result["raw_tls_mb_s"] = round(raw_tls_ceiling(keys, 26 * 1024 * 1024, 4), 1)
        server = Server({}, keys, bind_host="127.0.0.1", port=0).start()
        cfg = {"host": "localhost", "port": server.port, "outbox_messages": 512}
        result["chunk_bytes"] = 256 * 1024
        result["rounds"] = rounds
        links: list[Any] = []
        baseline: TlspyoPickle | None = None
        try:
            trainer = connect_trainer(cfg, keys)
            workers = [connect_worker(cfg, keys / "bundles" / n) for n in names]
            links = [trainer, *workers]
            if not all(link.wait_connected(60) for link in links):
                raise RuntimeError("links did not connect")
            relay_throughput(trainer, workers[0], 64 * 1024, 4 * 1024 * 1024)  # warm up
            if not args.skip_baseline:
                baseline = TlspyoPickle(keys)
                baseline.throughput(64 * 1024, 16)
            pids = {"server": server.pid, "worker_endpoint": workers[0]._endpoint._p.pid,
                    "trainer_endpoint": trainer._endpoint._p.pid, "link_threads": None}
            result["relay_mb_s"], result["tlspyo_pickle_mb_s"] = {}, {}
            result["relay_vs_tlspyo_pickle_rounds"] = {}
            result["cpu_s_per_100mb"] = {}
            for name, size in SIZES.items():
                ours: list[float] = []
                theirs: list[float] = []
                ratios: list[float] = []
                cpu = dict.fromkeys(pids, 0.0)
                for r in range(rounds):
                    mine = theirs_now = None
                    for turn in ((0, 1) if r % 2 == 0 else (1, 0)):  # take turns going first
                        if turn == 0:
                            before = {k: cpu_seconds(p) for k, p in pids.items()}
                            mine = relay_throughput(trainer, workers[0], size, total)
                            for k, p in pids.items():
                                cpu[k] += cpu_seconds(p) - before[k]
                            ours.append(mine)
                        elif baseline is not None and (size < 20 * 1024 * 1024 or r == 0):
                            theirs_now = baseline.throughput(size, max(1, total // size)
                                                             if size < 20 * 1024 * 1024 else 1)
                            theirs.append(theirs_now)
                    if mine is not None and theirs_now:
                        ratios.append(mine / theirs_now)
                result["relay_mb_s"][name] = round(statistics.median(ours), 1)
                if theirs:
                    result["tlspyo_pickle_mb_s"][name] = round(statistics.median(theirs), 1)
                    result["relay_vs_tlspyo_pickle_rounds"][name] = [round(x, 3) for x in ratios]
                # CPU per byte is far less sensitive to other load on the machine than MB/s
                scale = 100 * 1024 * 1024 / (rounds * max(2, total // size) * size)
                result["cpu_s_per_100mb"][name] = {k: round(v * scale, 2) for k, v in cpu.items()}
            weights_fanout(trainer, workers, 1024 * 1024)  # warm up
            runs = [weights_fanout(trainer, workers, SIZES["26MB"]) for _ in range(1 if args.quick else 3)]
            result["weights_26mb_to_4_workers_s"] = round(min(runs), 3)
            result["weights_26mb_to_4_workers_s_all"] = [round(r, 3) for r in runs]
        finally:
            for link in links:
                link.close()
            server.stop()
            if baseline is not None:
                baseline.close()
    result["relay_vs_raw_tls"] = {k: round(v / result["raw_tls_mb_s"], 3) for k, v in result["relay_mb_s"].items()}
    result["relay_vs_tlspyo_pickle"] = {k: round(statistics.median(v), 3)
                                        for k, v in result.get("relay_vs_tlspyo_pickle_rounds", {}).items() if v}
    result["targets"] = {"relay_mb_s_min": TARGET_MB_S, "weights_26mb_to_4_workers_s_max": TARGET_FANOUT_S}
    result["meets_targets"] = (min(result["relay_mb_s"].values()) >= TARGET_MB_S
                               and result["weights_26mb_to_4_workers_s"] <= TARGET_FANOUT_S)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
