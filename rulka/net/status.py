"""``query_status``: ask a running ``rulka-server`` what it sees (for ``rulka status``)."""

from __future__ import annotations

import os
import queue
import time
from pathlib import Path
from typing import Any

from rulka.errors import UserError
from rulka.net.keys import load_credentials
from rulka.net.settings import NetworkSettings

REFUSAL_HINTS = {
    "status_forbidden": "status needs the trainer's keys folder or an operator bundle "
                        "(`rulka keys add-operator NAME`), not a worker bundle",
    "wrong_password": "the password in the keys differs from the server's",
    "unknown_identity": "this identity is not enrolled, or was revoked",
    "revoked": "this identity was revoked",
    "unauthenticated": "the identity token does not match the enrolled key",
}


def _load_any_credentials(path: str | os.PathLike[str]) -> Any:
    root = Path(path)
    if (root / "operator.key").exists():
        return load_credentials(root, "operator")
    return load_credentials(root, "worker" if (root / "worker.key").exists() else "trainer")


def query_status(cfg_network: Any, credentials_dir: str | os.PathLike[str], timeout: float = 5.0) -> dict[str, Any]:
    """The server's report: ``{"server": {...}, "trainer": {...} | None, "workers": [...]}``.

    ``server`` holds uptime, queue sizes, ``bad_inputs`` (reason -> count) and ``clients``
    (identity -> address, connected, messages/bytes in/out, bad inputs by reason); ``trainer`` the
    trainer's latest stats; each ``workers`` row has ``name``, ``address``, ``episodes``,
    ``samples_per_s``, ``weights_version``, ``last_seen_s`` (see ``rulka.net.stats``).
    ``credentials_dir``: the trainer's keys folder or an operator bundle (the relay refuses a
    worker bundle: the report lists every address). Raises UserError if the
    server does not answer within ``timeout`` seconds.
    """
    from rulka.net.tls import _make_endpoint, _stop_endpoint

    settings = NetworkSettings.from_config(cfg_network)
    creds = _load_any_credentials(credentials_dir)
    # no channel: the relay treats this connection as an observer, not as a second trainer/worker
    endpoint = _make_endpoint(settings, creds, [])
    inbox: queue.Queue[Any] = endpoint.received
    try:
        deadline = time.monotonic() + timeout
        next_ask = 0.0
        while time.monotonic() < deadline:
            if time.monotonic() >= next_ask:
                endpoint.send_object(None, {"status": -1})
                next_ask = time.monotonic() + 1.0
            try:
                obj = inbox.get(timeout=0.1)
            except queue.Empty:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("status"), dict):
                return obj["status"]
            if isinstance(obj, dict) and "refused" in obj:
                raise UserError(f"rulka-server refused the status request ({obj['refused']}): "
                                + REFUSAL_HINTS.get(str(obj["refused"]), "check the keys"))
    finally:
        _stop_endpoint(endpoint)
    raise UserError(f"no answer from rulka-server at {settings.host}:{settings.port} within {timeout:g} s "
                    "(is it running, and are the host, port and keys right?)")
