"""What the relay keeps per client connection: its counters, and the cap on bytes its socket may
hold unsent (``rulka.server.relay`` uses both)."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import Any

# bytes a worker's socket may hold not yet sent (Linux, macOS: TCP_NOTSENT_LOWAT); the kernel's
# send buffer grows to several MB on its own, which would hold a dozen old weights chunks that
# the relay can no longer skip; bytes in flight are not limited by it (nor the link's rate)
UNSENT_BYTES = 128 * 1024


@dataclass
class ClientCounters:
    address: str
    connected_at: float = field(default_factory=time.time)
    messages_in: int = 0
    bytes_in: int = 0
    messages_out: int = 0
    bytes_out: int = 0
    bad: dict[str, int] = field(default_factory=dict)
    connected: bool = True
    last_seen: float = field(default_factory=time.time)
    weights_superseded: int = 0  # weights versions never sent to it because a newer one came first

    def as_dict(self) -> dict[str, Any]:
        return {"address": self.address, "connected": self.connected, "messages_in": self.messages_in,
                "bytes_in": self.bytes_in, "messages_out": self.messages_out, "bytes_out": self.bytes_out,
                "bad": dict(self.bad), "weights_superseded": self.weights_superseded, "last_seen_s": round(time.time() - self.last_seen, 3)}


def limit_unsent_bytes(transport: Any, limit: int = UNSENT_BYTES) -> bool:
    """Keep at most ``limit`` unsent bytes in the socket under ``transport`` (TLS or TCP), so
    what waits for a slow client waits in the relay, where a newer weights version can replace
    it. False where the OS has no TCP_NOTSENT_LOWAT (Windows): the kernel buffer then holds what
    it holds."""
    opt = getattr(socket, "TCP_NOTSENT_LOWAT", None)
    sock = None
    for _ in range(3):  # TLSMemoryBIOProtocol -> tcp.Server, which has the socket
        sock = getattr(transport, "socket", None)
        if isinstance(sock, socket.socket) or transport is None:
            break
        transport = getattr(transport, "transport", None)
    if opt is None or not isinstance(sock, socket.socket):
        return False
    try:
        sock.setsockopt(socket.IPPROTO_TCP, opt, limit)
    except OSError:
        return False
    return True
