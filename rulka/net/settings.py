"""Network settings (the ``network:`` block of a run config) as the transport reads them.

``NetworkSettings.from_config(cfg)`` accepts the typed config section
(``rulka.config.sections.NetworkConfig``), a plain dict of its keys, or None (all defaults).
Every default is the config model's; the keys, under the transport's names:

- ``host`` (``network.server_host``): the server address clients connect to (a name or IP in the
  certificate).
- ``port``: the server's TCP port (the one to forward on the router; 0 = any free port, for tests).
- ``chunk_bytes``: large messages are cut into chunks of this size.
- ``max_message_bytes``: a larger message is refused.
- ``max_partial_messages``: messages being reassembled at once per receiver.
- ``partial_timeout_s``: a partly received message idle this long is dropped.
- ``allow_plain_tcp`` (``network.tls: false``): plain TCP instead of TLS (LAN debugging only).
- ``reconnect_backoff_s`` / ``reconnect_backoff_max_s`` (``network.reconnect_backoff_s: [min,
  max]``, default ``[0.5, 10]``): the first delay before reconnecting; it doubles up to the
  second, the cap, and each delay gets a 10 % jitter (normal, sigma 10 %): retries level off at
  about one every 10 s (mostly 9 to 11 s) and never grow beyond that.
- ``outbox_messages``: messages a link queues before ``send`` raises ``OutboxFull``.
- ``server_queue_bytes``: bytes the server queues for the trainer while it is away; beyond that
  new chunks are dropped and counted (workers resend unacknowledged segments).
- ``heartbeat_s``: how often links check that the server answers; ``connected()`` turns False
  after three missed beats.
- ``weights_streams``: workers the relay sends a weights version to at once (0 = all at once);
  the others wait their turn and then get the newest version.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from rulka.config.sections import NetworkConfig
from rulka.errors import ConfigError

# every default is the run config's (rulka.config.sections.NetworkConfig), under this module's names
_DEFAULTS = NetworkConfig().transport_settings()


@dataclasses.dataclass
class NetworkSettings:
    host: str = _DEFAULTS["host"]
    port: int = _DEFAULTS["port"]
    chunk_bytes: int = _DEFAULTS["chunk_bytes"]
    max_message_bytes: int = _DEFAULTS["max_message_bytes"]
    max_partial_messages: int = _DEFAULTS["max_partial_messages"]
    partial_timeout_s: float = _DEFAULTS["partial_timeout_s"]
    allow_plain_tcp: bool = _DEFAULTS["allow_plain_tcp"]
    reconnect_backoff_s: float = _DEFAULTS["reconnect_backoff_s"]
    reconnect_backoff_max_s: float = _DEFAULTS["reconnect_backoff_max_s"]
    outbox_messages: int = _DEFAULTS["outbox_messages"]
    server_queue_bytes: int = _DEFAULTS["server_queue_bytes"]
    heartbeat_s: float = _DEFAULTS["heartbeat_s"]
    weights_streams: int = _DEFAULTS["weights_streams"]

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
        if self.weights_streams < 0:
            raise ConfigError(f"network.weights_streams must be 0 or more, got {self.weights_streams!r}")
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
