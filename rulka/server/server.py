"""``Server``: the relay as an importable object.

    server = Server(cfg.network, "keys/")       # keys folder from `rulka keys generate`
    server.start()                              # relay in a child process; server.port is bound
    ...
    server.stop()

or ``Server(...).serve_forever()`` to run the relay in this process until SIGINT/SIGTERM (what
``rulka-server`` does). TLS unless ``network.allow_plain_tcp`` is true (then a warning is logged).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from rulka.errors import UserError
from rulka.net.keys import load_credentials
from rulka.net.settings import NetworkSettings

log = logging.getLogger("rulka.server")

START_TIMEOUT_S = 60.0


class Server:
    """The rulka relay. ``bind_host`` is the interface to listen on (all by default);
    ``cfg_network.port`` the port (0 picks a free one; read ``server.port`` after ``start``)."""

    def __init__(self, cfg_network: Any, credentials_dir: str | os.PathLike[str], *,
                 bind_host: str = "0.0.0.0", port: int | None = None) -> None:
        self.settings = NetworkSettings.from_config(cfg_network, port=port)
        self.credentials_dir = Path(credentials_dir)
        load_credentials(self.credentials_dir, "server")  # fail now, with a clear message
        self.bind_host = bind_host
        self.port: int | None = None
        self._process: subprocess.Popen[str] | None = None

    # -- in this process -----------------------------------------------------------------------
    def serve_forever(self) -> None:
        """Run the relay here until SIGINT/SIGTERM; prints ``listening on HOST:PORT`` once bound.

        Call it from the main thread (Twisted's reactor installs the signal handlers and runs
        once per process); from a script that does other things, use ``start()``/``stop()``."""
        from twisted.internet import reactor, ssl, task

        from rulka.server.relay import KEY_CHECK_S, RelayCore, RelayFactory

        creds = load_credentials(self.credentials_dir, "server")
        core = RelayCore(self.settings, creds)
        factory = RelayFactory(core)
        if self.settings.allow_plain_tcp:
            log.warning("network.allow_plain_tcp is true: traffic is NOT encrypted and the password "
                        "travels in clear. Use this on a trusted LAN only.")
            listener = reactor.listenTCP(self.settings.port, factory, interface=self.bind_host)
        else:
            pem = (creds.server_tls_dir / "key.pem").read_bytes() + (creds.server_tls_dir / "certificate.pem").read_bytes()  # type: ignore[operator]
            try:
                options = ssl.PrivateCertificate.loadPEM(pem).options()
            except Exception as exc:  # noqa: BLE001 - OpenSSL's errors: checked above, one line if not
                raise UserError(f"cannot use the relay's TLS files in {creds.server_tls_dir}: {exc}") from None
            listener = reactor.listenSSL(self.settings.port, factory, options, interface=self.bind_host)
        self.port = listener.getHost().port
        log.info("rulka-server listening on %s:%d (%s)", self.bind_host, self.port,
                 "plain TCP" if self.settings.allow_plain_tcp else "TLS")
        print(f"listening on {self.bind_host}:{self.port}", flush=True)
        # revocations, removed and replaced keys take effect without a restart
        task.LoopingCall(core.worker_keys).start(KEY_CHECK_S, now=False)
        reactor.run()
        log.info("rulka-server stopped")

    # -- in a child process ------------------------------------------------------------------------
    def start(self) -> Server:
        """Start ``rulka-server`` as a child process and wait until it listens; sets ``self.port``.

        The child logs to this process's stderr."""
        if self._process is not None:
            raise RuntimeError("server already started")
        cmd = [sys.executable, "-m", "rulka.server.cli", "--keys", str(self.credentials_dir),
               "--host", self.bind_host]
        cmd += ["--settings-json", json.dumps(dataclasses.asdict(self.settings))]
        self._process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        ready: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_read_port_line, args=(self._process, ready), daemon=True).start()
        try:
            line = ready.get(timeout=START_TIMEOUT_S)
            self.port = int(line.rsplit(":", 1)[1])
        except (queue.Empty, ValueError, IndexError):
            self.stop()
            raise UserError("rulka-server did not start (see its log above)") from None
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the child started by ``start`` (SIGTERM, then SIGKILL after ``timeout``)."""
        p, self._process = self._process, None
        if p is None:
            return
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout)
        if p.stdout is not None:
            p.stdout.close()

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read_port_line(proc: subprocess.Popen[str], ready: queue.Queue[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("listening on "):
            ready.put(line.strip())
    # keep reading so the child never blocks on a full pipe; the loop ends when it exits
