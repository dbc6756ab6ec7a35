"""rulka.net: the transport between the three roles.

- ``link``: the ``WorkerLink`` / ``TrainerLink`` contract (``Message``, ``OutboxFull``, ``LinkClosed``);
- ``tls``: those links over TLS through ``rulka-server`` (``connect_worker``, ``connect_trainer``);
- ``local``: the same links in one process (``LocalHub``), for the one-process mode and tests;
- ``messages``: every message between the roles as a typed record with its encode and decode
  (hello, welcome, ack, credit, stats, the weights' header with the run config and evaluation requests);
- ``wire``: the no-pickle wire format (msgpack frames, signed chunked envelopes, reassembly);
- ``weights``: signed safetensors weights blobs (``encode_weights`` / ``decode_weights``);
- ``keys``: certificates, password and signing keys (``rulka keys``);
- ``stats`` / ``status``: the status report and ``query_status`` for ``rulka status``;
- ``settings``: the ``network:`` config as the transport reads it.

Names below are imported on first use, so ``import rulka.net`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "connect_worker": "rulka.net.tls", "connect_trainer": "rulka.net.tls",
    "LocalHub": "rulka.net.local", "WeightsBlob": "rulka.net.weights",
    "encode_weights": "rulka.net.weights", "decode_weights": "rulka.net.weights",
    "query_status": "rulka.net.status", "NetworkSettings": "rulka.net.settings",
    "Message": "rulka.net.link", "OutboxFull": "rulka.net.link", "LinkClosed": "rulka.net.link",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rulka.net' has no attribute {name!r}")
