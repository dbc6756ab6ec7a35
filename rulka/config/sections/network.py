"""``network`` (rulka's own): addresses, TLS, keys, timeouts of the three roles."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)

from rulka.config.sections.common import Section


class NetworkConfig(Section):
    """Where the relay is and how roles talk to it."""

    server_host: str = "127.0.0.1"
    """Relay address workers and the trainer connect to."""
    port: Annotated[int, Field(ge=0, le=65535)] = 55555
    """Relay port (0 = pick a free port, tests only)."""
    tls: bool = True
    """Encrypt and authenticate with TLS."""
    allow_plain_tcp: bool = False
    """Must be true to run with tls: false (trusted LAN only; logged as a warning)."""
    credentials_dir: Path = Path("~/.rulka/keys")
    """Folder with certificates and keys (`~` is expanded when used)."""
    chunk_bytes: PositiveInt = 262_144
    """Largest piece a message is split into on the wire."""
    max_message_bytes: PositiveInt = 64 * 1024 * 1024
    """Larger messages are refused and counted."""
    reconnect_backoff_s: tuple[PositiveFloat, PositiveFloat] = (0.5, 10.0)
    """[min, max] delay between reconnection attempts, seconds."""
    local_com_port_base: Annotated[int, Field(ge=1, le=65535)] | None = None
    """First local port for per-process relay links (null = pick automatically)."""
    max_partial_messages: PositiveInt = 16
    """Messages being reassembled at once per receiver."""
    partial_timeout_s: PositiveFloat = 60.0
    """A partly received message idle this long is dropped, seconds."""
    outbox_messages: PositiveInt = 256
    """Messages a link queues before sending blocks the caller."""
    server_queue_bytes: PositiveInt = 1 << 30
    """Bytes the relay queues for an absent trainer; beyond that chunks are dropped and counted."""
    heartbeat_s: PositiveFloat = 1.0
    """How often links check that the relay answers, seconds."""
    weights_streams: NonNegativeInt = 4
    """Workers the relay sends a weights version to at once (0 = all at once); the others wait their turn for the newest.
    On a slow uplink each version then arrives fresh instead of every worker getting the same one
    late (docs/operations.md, sizing)."""

    @property
    def credentials_path(self) -> Path:
        """credentials_dir with ``~`` expanded."""
        return self.credentials_dir.expanduser()

    def transport_settings(self) -> dict[str, Any]:
        """This section under the names ``rulka.net.settings.NetworkSettings`` takes
        (``host``, a scalar ``reconnect_backoff_s`` plus ``reconnect_backoff_max_s``, ...)."""
        return {
            "host": self.server_host,
            "port": self.port,
            "chunk_bytes": self.chunk_bytes,
            "max_message_bytes": self.max_message_bytes,
            "max_partial_messages": self.max_partial_messages,
            "partial_timeout_s": self.partial_timeout_s,
            "allow_plain_tcp": not self.tls,
            "reconnect_backoff_s": self.reconnect_backoff_s[0],
            "reconnect_backoff_max_s": self.reconnect_backoff_s[1],
            "outbox_messages": self.outbox_messages,
            "server_queue_bytes": self.server_queue_bytes,
            "heartbeat_s": self.heartbeat_s,
            "weights_streams": self.weights_streams,
        }
