"""A throttling TCP proxy: the relay's upload through a link of a set rate (loopback only).

Every connection to ``listen_port`` is forwarded to ``target_port`` on 127.0.0.1. Bytes from the
target to the clients (the relay's upload: weights, acks) share one token bucket of ``mbit``
Mbit/s, as the uplink of a home connection shares its rate among the workers behind it; bytes
from the clients to the target are not limited (a relay's download is rarely the limit). The
proxy reads at most ``CHUNK`` bytes per connection per turn and keeps its receive buffers small,
so bytes wait on the relay's side of the link (as they would behind a slow uplink) instead of
in the proxy. TLS passes through untouched: the proxy sees only ciphertext.

``Throttle(...).start()`` runs it in a thread of the calling process (tests); ``python -m
bench.throttle --listen-port P --target-port T --mbit R`` runs it as a process (bench/fleet.py),
printing ``{"port": P}`` once listening and a JSON line of totals when it stops (SIGTERM or
stdin closed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import sys
import threading
import time
from typing import Any

CHUNK = 16 * 1024
RCVBUF = 64 * 1024


class Throttle:
    def __init__(self, target_port: int, mbit: float, *, listen_port: int = 0, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.rate = mbit * 1e6 / 8 if mbit > 0 else 0.0  # bytes/s; 0: unlimited
        self.listen_port = listen_port
        self.port = 0
        self.bytes_down = 0  # target -> clients
        self.bytes_up = 0
        self.connections = 0
        self._tokens = 0.0
        self._stamp = time.monotonic()
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    async def _take(self, n: int) -> None:
        """Wait until ``n`` bytes may go down the shared link (FIFO among connections)."""
        if not self.rate:
            return
        assert self._lock is not None
        async with self._lock:
            now = time.monotonic()
            self._tokens = min(self.rate * 0.05, self._tokens + (now - self._stamp) * self.rate)  # 50 ms burst
            self._stamp = now
            self._tokens -= n
            if self._tokens < 0:
                await asyncio.sleep(-self._tokens / self.rate)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, down: bool) -> None:
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                if down:
                    await self._take(len(data))
                    self.bytes_down += len(data)
                else:
                    self.bytes_up += len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - already closed
                pass

    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            t_reader, t_writer = await asyncio.open_connection(*self.target, limit=CHUNK)
        except OSError:
            c_writer.close()
            return
        for w in (t_writer, c_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        self.connections += 1
        await asyncio.gather(self._pipe(c_reader, t_writer, False), self._pipe(t_reader, c_writer, True))

    async def serve(self) -> None:
        self._lock = asyncio.Lock()
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.listen_port, limit=CHUNK,
                                                  backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        async with self._server:
            await self._server.serve_forever()

    def start(self) -> Throttle:
        """Run in a daemon thread; returns once listening (``self.port``)."""
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run_quietly()), daemon=True,
                                        name="throttle")
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("throttling proxy did not start")
        return self

    async def _run_quietly(self) -> None:
        try:
            await self.serve()
        except asyncio.CancelledError:
            pass

    def stop(self) -> None:
        if self._loop is not None and self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
            for task in asyncio.all_tasks(self._loop) if self._loop.is_running() else ():
                self._loop.call_soon_threadsafe(task.cancel)
        if self._thread is not None:
            self._thread.join(5)

    def totals(self) -> dict[str, Any]:
        return {"bytes_down": self.bytes_down, "bytes_up": self.bytes_up, "connections": self.connections}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen-port", type=int, default=0)
    parser.add_argument("--target-port", type=int, required=True)
    parser.add_argument("--mbit", type=float, default=0.0, help="rate target -> clients (0: unlimited)")
    args = parser.parse_args(argv)
    proxy = Throttle(args.target_port, args.mbit, listen_port=args.listen_port)

    async def run() -> None:
        task = asyncio.create_task(proxy.serve())
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        while not proxy._ready.is_set():
            await asyncio.sleep(0.01)
        print(json.dumps({"port": proxy.port}), flush=True)
        await stop.wait()
        task.cancel()

    asyncio.run(run())
    print(json.dumps(proxy.totals()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
