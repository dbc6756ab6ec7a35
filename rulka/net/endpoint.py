"""A tlspyo ``Endpoint`` whose Twisted child process cannot outlive its parent or hang it.

tlspyo runs each endpoint's network side in a child process that talks to the parent over a
local TCP link. Stock tlspyo has three failure modes that real runs hit:

- the child outlives a parent killed with ``kill -9`` and keeps reconnecting with the parent's
  identity, fighting the restarted role for its channels;
- a child that dies while starting (a garbage certificate, say) leaves the parent blocked for
  ever in ``accept()``;
- the child is not a daemon, so ``multiprocessing`` joins it at interpreter exit: any error after
  the link started turned into a process that never exits.

``GuardedEndpoint`` fixes all three: the child stops its reactor as soon as the local link to the
parent drops or the parent PID changes (a watchdog that works on Windows too, since the OS closes
the parent's sockets when it dies), and on Linux it also asks for ``SIGKILL`` on the parent's
death (``PR_SET_PDEATHSIG``, only when the main thread starts it: the signal fires when the
*thread* that forked exits). The parent waits for the child's link at most ``START_TIMEOUT_S``
and gives up at once when the child exits; the child is a daemon process.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import sys
import threading
import time
from multiprocessing import Process
from pathlib import Path
from typing import Any

from tlspyo import Endpoint
from tlspyo.client import Client, ClientProtocol, TLSClientFactory
from tlspyo.local_protocol_for_client import LocalProtocolForClientFactory
from twisted.internet.protocol import ReconnectingClientFactory

from rulka.errors import UserError

log = logging.getLogger("rulka.net")

START_TIMEOUT_S = 30.0  # the child connects its local link within a second when healthy
WATCHDOG_S = 0.25
HEALTHY_S = 10.0  # a server connection that lived this long resets the reconnect backoff
_PR_SET_PDEATHSIG = 1


class EndpointStartError(UserError):
    """The tlspyo child process exited or never connected while the endpoint started."""


def _set_parent_death_signal() -> None:
    """Linux only: SIGKILL this process when the thread that forked it exits."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError) as exc:  # no prctl: the watchdog still covers it
        log.debug("prctl(PR_SET_PDEATHSIG) unavailable: %s", exc)


class _Protocol(ClientProtocol):
    """Keeps the TLS layer's reason for a lost connection (the factory sees a less precise one),
    and answers the relay's HELLO with the identity token for this connection's nonce."""

    def connectionLost(self, reason: Any) -> None:
        self._client.lost_reason = (reason.getErrorMessage(), self._state)
        super().connectionLost(reason)

    def send_obj(self, cmd: str = "OBJ", dest: Any = None, obj: Any = None) -> None:
        if cmd == "HELLO" and isinstance(obj, (list, tuple)):
            token = self._client.identity_token()
            obj = [*obj, token] if token else list(obj)
        super().send_obj(cmd=cmd, dest=dest, obj=obj)


class _Factory(TLSClientFactory):
    """tlspyo's reconnecting factory, except that the backoff is reset only by a connection that
    lived ``HEALTHY_S`` (a relay that accepts and closes at once must not get a fixed 0.5 s
    retry), and every failure's reason goes to the parent as ``{"link_error": text}``."""

    def buildProtocol(self, addr: Any) -> Any:
        from twisted.internet import reactor

        proto = _Protocol(client=self._client, password=self.password, groups=self._groups,
                               header_size=self._header_size)
        self._healthy = reactor.callLater(HEALTHY_S, self.resetDelay)
        return proto

    def _lost(self, connector: Any, reason: Any, failed: bool) -> None:
        timer = getattr(self, "_healthy", None)
        if timer is not None and timer.active():
            timer.cancel()
        text = reason.getErrorMessage()
        inner, state = getattr(self._client, "lost_reason", ("", ""))
        self._client.lost_reason = ("", "")
        if inner and inner != text:
            text = f"{text} ({inner})"
        if not failed and state == "HANDSHAKE":
            text = f"closed before the server's hello (TLS handshake or protocol): {text}"
        self._client.tell_parent({"link_error": text, "failed": failed, "retry_in_s": round(float(self.delay), 2)})

    def clientConnectionLost(self, connector: Any, reason: Any) -> None:
        ReconnectingClientFactory.clientConnectionLost(self, connector, reason)
        self._lost(connector, reason, False)

    def clientConnectionFailed(self, connector: Any, reason: Any) -> None:
        ReconnectingClientFactory.clientConnectionFailed(self, connector, reason)
        self._lost(connector, reason, True)


class GuardedClient(Client):
    """tlspyo's child-side client plus a watchdog on the parent (runs in the child process)."""

    parent_pid: int = 0
    parent_death_signal: bool = False
    auth_identity: str = ""  # who this client proves to be in its HELLO (rulka.net.wire)
    auth_key: bytes = b""  # that identity's raw Ed25519 private key
    server_hello: Any = None  # the object of the relay's latest HELLO frame (its nonce)

    def identity_token(self) -> str:
        """The HELLO entry for the current connection: signed over the relay's nonce, or the
        version-1 token for a relay that sent none."""
        if not self.auth_identity:
            return ""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        from rulka.net.wire import challenge_token, hello_nonce, join_token

        key = Ed25519PrivateKey.from_private_bytes(self.auth_key)
        nonce = hello_nonce(self.server_hello)
        return join_token(self.auth_identity, key) if nonce is None else challenge_token(self.auth_identity, key, nonce)

    def _note_hello(self, data: bytes) -> Any:
        frame = self._deserialize_frame(data)
        if isinstance(frame, (list, tuple)) and len(frame) == 3 and frame[1] == "HELLO":
            self.server_hello = frame[2]
        return frame

    def tell_parent(self, obj: Any) -> None:
        """Hand ``obj`` to the parent's receive queue as if the relay had sent it."""
        if self.endpoint is None:
            return
        body = self.serializer([0, "OBJ", self.serializer(obj)])
        self.endpoint.transport.write(f"{len(body):<{self.header_size}}".encode() + body)

    def run(self) -> None:
        from twisted.internet import reactor, ssl, task

        if self.parent_death_signal:
            _set_parent_death_signal()
        # tlspyo's protocol deserializes each frame from the relay just before it answers a HELLO:
        # note the HELLO's nonce on the way
        self._deserialize_frame, self.deserializer = self.deserializer, self._note_hello
        if os.name == "posix" and os.getppid() != self.parent_pid:
            os._exit(0)  # the parent died before the signal was armed
        started = time.monotonic()
        seen_link = [False]

        def watch() -> None:
            if self.endpoint is not None:
                seen_link[0] = True
            orphaned = os.name == "posix" and os.getppid() != self.parent_pid
            link_lost = seen_link[0] and self.endpoint is None
            never_linked = not seen_link[0] and time.monotonic() - started > START_TIMEOUT_S
            if orphaned or link_lost or never_linked:
                # the parent is gone: nothing may be sent in its name any more
                if self.to_server is not None:
                    self.to_server.transport.abortConnection()
                reactor.stop()

        task.LoopingCall(watch).start(WATCHDOG_S, now=False)
        reactor.connectTCP("127.0.0.1", self._local_com_port, LocalProtocolForClientFactory(self))
        factory = _Factory(client=self)
        if self._security == "TCP":
            reactor.connectTCP(self._ip_server, self._port_server, factory)
        else:
            keys_dir = Path(self._keys_dir or ".")
            authority = ssl.Certificate.loadPEM((keys_dir / "certificate.pem").read_bytes())
            reactor.connectSSL(self._ip_server, self._port_server, factory,
                               ssl.optionsForClientTLS(hostname=self._hostname, trustRoot=authority))
        self._reactor = reactor
        reactor.run()
        os._exit(0)  # skip interpreter teardown: the parent owns every resource that matters


class GuardedEndpoint(Endpoint):
    """``tlspyo.Endpoint`` with the guarded child, a bounded start and a receiver that stops at
    the end of the local stream. Same arguments as ``tlspyo.Endpoint``, plus ``auth_identity``
    and ``auth_key`` (raw Ed25519 private key): the child adds the identity token to its HELLO,
    signed over the nonce the relay sent on that connection (``rulka.net.wire``)."""

    def __init__(self, ip_server: str, port: int, password: str, groups: Any = None, local_com_port: int = 2097,
                 header_size: int = 10, max_buf_len: int = 4096, security: str | None = "TLS",
                 keys_dir: str | None = None, hostname: str = "default", serializer: Any = None,
                 deserializer: Any = None, recon_max_delay: float = 60.0, recon_initial_delay: float = 10.0,
                 recon_factor: float = 1.5, recon_jitter: float = 0.1,
                 deserializer_mode: str = "asynchronous", auth_identity: str = "", auth_key: bytes = b"") -> None:
        # the attributes tlspyo.Endpoint's methods use (its private names are mangled)
        self._Endpoint__obj_buffer: queue.Queue[Any] = queue.Queue()
        self._Endpoint__socket_closed_lock = threading.Lock()
        self._Endpoint__socket_closed_flag = False
        self._stop_lock = threading.Lock()
        self._stopped = False
        if isinstance(groups, str):
            groups = (groups,)
        self._header_size = header_size
        self._max_buf_len = max_buf_len
        self._local_com_port = local_com_port
        self._deserialize_locally = deserializer_mode in ("synchronous", "sync")
        client = GuardedClient(
            ip_server=ip_server, port_server=port, password=password, serializer=serializer,
            deserializer=deserializer, groups=groups, local_com_port=local_com_port, header_size=header_size,
            security="TCP" if security is None else "TLS", keys_dir=os.path.abspath(keys_dir) if keys_dir else None,
            hostname=hostname, recon_max_delay=recon_max_delay, recon_initial_delay=recon_initial_delay,
            recon_factor=recon_factor, recon_jitter=recon_jitter)
        client.parent_pid = os.getpid()
        client.auth_identity, client.auth_key = auth_identity, auth_key
        client.parent_death_signal = threading.current_thread() is threading.main_thread()
        self._client = client
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", local_com_port))
        srv.listen()
        self._local_com_srv = srv
        self._p = Process(target=client.run, args=(), daemon=True)
        self._p.start()
        try:
            self._local_com_conn, self._local_com_addr = self._accept_child(srv)
            self._send_local(cmd="TEST")
        except BaseException:
            self._kill_child()
            srv.close()
            raise
        self._t_manage_received_objects = threading.Thread(target=self._manage_received_objects, daemon=True)
        self._t_manage_received_objects.start()

    def _accept_child(self, srv: socket.socket) -> tuple[socket.socket, Any]:
        srv.settimeout(0.2)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                conn, addr = srv.accept()
            except TimeoutError:
                if not self._p.is_alive():
                    raise EndpointStartError(
                        f"the network process exited while starting (exit code {self._p.exitcode}); "
                        "see its error above") from None
                if time.monotonic() > deadline:
                    raise EndpointStartError(f"the network process did not start within {START_TIMEOUT_S:.0f} s") from None
                continue
            conn.settimeout(None)
            return conn, addr

    def _kill_child(self) -> None:
        if self._p.is_alive():
            self._p.kill()
        self._p.join(5.0)

    def _manage_received_objects(self) -> None:
        """Read frames from the child until it closes the link (tlspyo's loop spins on EOF)."""
        buf = bytearray()
        conn = self._local_com_conn
        head = self._header_size
        while True:
            with self._Endpoint__socket_closed_lock:
                if self._Endpoint__socket_closed_flag:
                    return
            try:
                data = conn.recv(self._max_buf_len)
            except OSError:
                return
            if not data:
                return  # the child exited
            buf += data
            while len(buf) >= head:
                end = head + int(bytes(buf[:head]))
                if len(buf) < end:
                    break
                _stamp, cmd, obj = self._deserialize(bytes(buf[head:end]))
                del buf[:end]
                if cmd == "OBJ":
                    self._Endpoint__obj_buffer.put(obj if self._deserialize_locally else self._deserialize(obj))

    def child_alive(self) -> bool:
        """Whether the network process still runs."""
        return self._p.is_alive()
