"""Network settings (the ``network:`` block of a run config) as the transport reads them.

``NetworkSettings.from_config(cfg)`` accepts the typed config section (any object with these
attributes), a plain dict, or None (all defaults), so the transport does not depend on how the
config module models it. Keys (defaults in brackets):

- ``host`` ["127.0.0.1"]: the server address clients connect to (a name or IP in the certificate).
- ``port`` [55555]: the server's TCP port (the one to forward on the router; 0 = any free port,
  for tests).
- ``chunk_bytes`` [262144]: large messages are cut into chunks of this size.
- ``max_message_bytes`` [268435456]: a larger message is refused (256 MB).
- ``max_partial_messages`` [16]: messages being reassembled at once per receiver.
- ``partial_timeout_s`` [60]: a partly received message idle this long is dropped.
- ``allow_plain_tcp`` [false]: use plain TCP instead of TLS (logged warning; LAN debugging only).
- ``reconnect_backoff_s`` [0.5]: first delay before reconnecting; doubles up to
  ``reconnect_backoff_max_s`` [30].
- ``outbox_messages`` [256]: messages a link queues before ``send`` raises ``OutboxFull``.
- ``server_queue_bytes`` [1073741824]: bytes the server queues for the trainer while it is away
  (1 GB); beyond that new chunks are dropped and counted (workers resend unacknowledged segments).
- ``heartbeat_s`` [1.0]: how often links check that the server answers; ``connected()`` turns
  False after three missed beats.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from rulka.errors import ConfigError


@dataclasses.dataclass
class NetworkSettings:
    host: str = "127.0.0.1"
    port: int = 55555
    chunk_bytes: int = 256 * 1024
    max_message_bytes: int = 256 * 1024 * 1024
    max_partial_messages: int = 16
    partial_timeout_s: float = 60.0
    allow_plain_tcp: bool = False
    reconnect_backoff_s: float = 0.5
    reconnect_backoff_max_s: float = 30.0
    outbox_messages: int = 256
    server_queue_bytes: int = 1 << 30
    heartbeat_s: float = 1.0

    @classmethod
    def from_config(cls, cfg: Any = None, **overrides: Any) -> NetworkSettings:
        """Read the known keys from ``cfg``, then apply ``overrides``.

        ``cfg``: None, a mapping of these keys, a ``NetworkSettings``, or the run config's
        ``network`` section (anything with ``transport_settings()``, which maps its YAML names
        such as ``server_host`` and ``tls`` onto these), or that section dumped to a dict."""
        if hasattr(cfg, "transport_settings"):
            cfg = cfg.transport_settings()
        elif isinstance(cfg, Mapping):
            cfg = _from_config_names(cfg)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if isinstance(cfg, Mapping):
                if f.name in cfg:
                    values[f.name] = cfg[f.name]
            elif cfg is not None and hasattr(cfg, f.name):
                values[f.name] = getattr(cfg, f.name)
        values.update({k: v for k, v in overrides.items() if v is not None})
        for f in dataclasses.fields(cls):
            if f.name in values:
                values[f.name] = _coerce(f.name, values[f.name], type(f.default))
        out = cls(**values)
        out.validate()
        return out

    def validate(self) -> None:
        """Raise ConfigError naming the first bad value."""
        positive = ("chunk_bytes", "max_message_bytes", "max_partial_messages", "partial_timeout_s",
                    "reconnect_backoff_s", "reconnect_backoff_max_s", "outbox_messages",
                    "server_queue_bytes", "heartbeat_s")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ConfigError(f"network.{name} must be positive, got {getattr(self, name)!r}")
        if not 0 <= self.port < 65536:
            raise ConfigError(f"network.port must be 0..65535, got {self.port}")
        if self.chunk_bytes > 16 * 1024 * 1024:
            raise ConfigError("network.chunk_bytes above 16 MB brings back tlspyo's slow large frames")


def _coerce(name: str, value: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"network.{name} must be true or false, got {value!r}")
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is str and isinstance(value, str):
        return value
    raise ConfigError(f"network.{name} must be a {kind.__name__}, got {value!r}")


def _from_config_names(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Accept the run config's YAML names in a plain mapping (``server_host``, ``tls``, a
    ``[min, max]`` ``reconnect_backoff_s``) next to this module's own."""
    out = dict(cfg)
    if "host" not in out and "server_host" in out:
        out["host"] = out["server_host"]
    if out.get("tls") is False:
        out["allow_plain_tcp"] = True
    backoff = out.get("reconnect_backoff_s")
    if isinstance(backoff, (list, tuple)) and len(backoff) == 2:
        out["reconnect_backoff_s"] = backoff[0]
        out.setdefault("reconnect_backoff_max_s", backoff[1])
    return out
