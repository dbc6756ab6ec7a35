"""A tlspyo ``Endpoint`` whose Twisted child process cannot outlive its parent or hang it.

tlspyo runs each endpoint's network side in a child process that talks to the parent over a
local TCP link. Stock tlspyo has three failure modes that real runs hit:

- the child outlives a parent killed with ``kill -9`` and keeps reconnecting with the parent's
  identity, fighting the restarted role for its channels;
- a child that dies while starting (a garbage certificate, say) leaves the parent blocked for
  ever in ``accept()``;
- the child is not a daemon, so ``multiprocessing`` joins it at interpreter exit: any error after
  the link started turned into a process that never exits;
- every heartbeat the parent sends while the relay does not answer piles up (in a connection
  that went silent, or in the store kept for the next connection) and reaches the relay at once
  when the path is back: after a 50 s outage, more pings than the relay's rate limit allows,
  counted there as bad input from an honest client.

``GuardedEndpoint`` fixes all four: the child stops its reactor as soon as the local link to the
parent drops or the parent PID changes (a watchdog that works on Windows too, since the OS closes
the parent's sockets when it dies), and on Linux it also asks for ``SIGKILL`` on the parent's
death (``PR_SET_PDEATHSIG``, only when the main thread starts it: the signal fires when the
*thread* that forked exits). The parent waits for the child's link at most ``START_TIMEOUT_S``
and gives up at once when the child exits; the child is a daemon process. The child keeps one
heartbeat (``ping``) in flight per connection: it forwards the parent's next ping only once the
relay answered (``pong``) or after ``PING_RETRY_S``, and keeps one for the next connection.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing import Process
from pathlib import Path
from typing import Any

import msgpack
from tlspyo import Endpoint
from tlspyo.client import Client, ClientProtocol, TLSClientFactory
from tlspyo.local_protocol_for_client import LocalProtocolForClient, LocalProtocolForClientFactory
from twisted.internet.protocol import ReconnectingClientFactory

from rulka.errors import UserError

log = logging.getLogger("rulka.net")

START_TIMEOUT_S = 30.0  # the child connects its local link within a second when healthy
WATCHDOG_S = 0.25
HEALTHY_S = 10.0  # a server connection that lived this long resets the reconnect backoff
MAX_LOCAL_FRAME_BYTES = 1 << 30  # a frame from the child beyond this means a garbled stream
_PR_SET_PDEATHSIG = 1
# a ping as the parent writes it (msgpack ``["OBJ", {"ping": -1}, ...]``), and the object of the
# relay's answer (msgpack ``{"pong": conn_id}``)
PING_FRAME = b"\x93\xa3OBJ\x81\xa4ping"
PONG_OBJ = b"\x81\xa4pong"
PING_RETRY_S = 30.0  # a ping unanswered this long (a relay that lost it) is followed by another

# What this module takes from tlspyo beyond its documented API: the attributes and methods of
# tlspyo's classes that the subclasses below read, set or call, for the tlspyo release they were
# written against. tests/test_tlspyo_pin.py checks each against the installed tlspyo and names
# the one that moved, so a tlspyo upgrade fails there, with its name, instead of in a live link.
TLSPYO_TESTED = "0.3.0"
TLSPYO_INTERNALS: dict[str, tuple[str, ...]] = {
    "tlspyo.Endpoint": ("send_object", "notify", "_send_local", "_deserialize"),
    "tlspyo.client.Client": ("endpoint", "to_server", "store", "pending_acks", "ack_stamp", "serializer",
                             "deserializer", "header_size", "close", "_local_com_port", "_security",
                             "_ip_server", "_port_server", "_keys_dir", "_hostname", "_reactor"),
    "tlspyo.client.ClientProtocol": ("_client", "_header_size", "_password", "_groups", "_state", "send_ack",
                                     "send_obj", "get_state", "connectionLost"),
    "tlspyo.client.TLSClientFactory": ("_client", "password", "_groups", "_header_size", "delay", "resetDelay"),
    "tlspyo.local_protocol_for_client.LocalProtocolForClient": ("_client", "_header_size", "_state"),
    "tlspyo.local_protocol_for_client.LocalProtocolForClientFactory": ("client",),
}
# Endpoint's methods above, called on a GuardedEndpoint (which does not run Endpoint.__init__),
# read these attributes of it; GuardedEndpoint sets them itself
TLSPYO_ENDPOINT_READS = ("_client", "_header_size", "_local_com_conn")


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


_UINT_SIZES = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
_BIN_SIZES = {0xC4: 1, 0xC5: 2, 0xC6: 4}


def frame_prefix(frame: memoryview) -> tuple[int, str, int, int] | None:
    """Read a tlspyo frame ``[stamp, cmd, obj]`` (msgpack) without copying its object.

    Returns ``(stamp, cmd, offset, length)``: ``obj`` is bytes at ``frame[offset:offset+length]``,
    or nil when ``length`` is -1. None for any other shape (the caller deserializes the frame
    the slow way, or drops it): an unsigned stamp, a str command of up to 31 bytes, and a bin
    or nil object ending exactly at the end of the frame."""
    n = len(frame)
    if n < 4 or frame[0] != 0x93:
        return None
    tag, pos = frame[1], 2
    if tag <= 0x7F:
        stamp = tag
    elif tag in _UINT_SIZES:
        pos += _UINT_SIZES[tag]
        stamp = int.from_bytes(frame[2:pos], "big")
    else:
        return None
    if pos >= n or not 0xA0 <= frame[pos] <= 0xBF:
        return None
    end = pos + 1 + (frame[pos] & 0x1F)
    try:
        cmd = str(frame[pos + 1:end], "utf-8")
    except UnicodeDecodeError:
        return None
    if end >= n:
        return None
    tag = frame[end]
    if tag == 0xC0:
        return (stamp, cmd, end + 1, -1) if end + 1 == n else None
    size = _BIN_SIZES.get(tag)
    if size is None:
        return None
    offset = end + 1 + size
    length = int.from_bytes(frame[end + 1:offset], "big")
    return (stamp, cmd, offset, length) if offset + length == n else None


def split_frames(buf: bytearray, head: int, handle: Callable[[memoryview, int, int], None],
                 go: Callable[[], bool] = lambda: True) -> None:
    """Hand each whole ``<length header><body>`` frame at the front of ``buf`` to
    ``handle(view, start, end)`` (the body is ``view[start:end]``, valid during the call only)
    while ``go()``, then drop those frames from ``buf``. A length header that is not a number, or
    a ValueError from ``handle``, clears ``buf`` and raises ValueError."""
    pos = 0
    try:
        with memoryview(buf) as view:
            while len(buf) - pos >= head and go():
                end = pos + head + int(bytes(view[pos:pos + head]))
                if len(buf) < end:
                    break
                handle(view, pos + head, end)
                pos = end
    except ValueError:
        buf.clear()
        raise
    del buf[:pos]


class _Protocol(ClientProtocol):
    """Keeps the TLS layer's reason for a lost connection (the factory sees a less precise one),
    and answers the relay's HELLO with the identity token for this connection's nonce.

    Frames from the relay are read into one growing buffer (tlspyo concatenates ``bytes``: a
    256 KB chunk arriving in 16 KB TLS records was copied over and over) and an ``OBJ`` frame is
    handed to the parent as it came, from its msgpack prefix alone (tlspyo deserialized each one
    to read its command; the parent checks everything anyway). rulka's relay keeps nothing for
    resending, so ``OBJ`` frames are not acknowledged; every other frame still is."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rbuf = bytearray()

    def dataReceived(self, data: bytes) -> None:
        self._rbuf += data
        try:
            split_frames(self._rbuf, self._header_size, self._frame)
        except ValueError as exc:  # a length header that is not a number: the stream is lost
            log.warning("bad frame from the relay (%s); closing the connection", exc)
            self.transport.abortConnection()

    def _frame(self, view: memoryview, start: int, end: int) -> None:
        with view[start:end] as frame:
            prefix = frame_prefix(frame)
            if prefix is not None and prefix[1] == "OBJ" and prefix[3] >= 0:
                if bytes(frame[prefix[2]:prefix[2] + len(PONG_OBJ)]) == PONG_OBJ:
                    self._client.ping_sent_at = None  # answered: the next ping may go
                if self._client.endpoint is not None:
                    self._client.endpoint.transport.write(bytes(view[start - self._header_size:end]))
            else:
                self._other_frame(bytes(frame), bytes(view[start - self._header_size:end]))

    def _other_frame(self, body: bytes, raw: bytes) -> None:
        """tlspyo's handling of a frame that is not a plain ``OBJ`` (HELLO, ACK, replies)."""
        frame = self._client.deserializer(body)
        if not isinstance(frame, (list, tuple)) or len(frame) != 3:
            log.warning("malformed frame from the relay dropped")
            return
        stamp, cmd, obj = frame
        if cmd == "ACK":
            self._client.pending_acks.pop(stamp, None)
            return
        self.send_ack(stamp)
        if cmd == "HELLO":
            self.send_obj(cmd="HELLO", obj=self._groups)
            self._state = "ALIVE"
            store, self._client.store = self._client.store, []
            # a new connection: nothing of it is in flight but the ping kept in the store
            self._client.ping_sent_at = time.monotonic() if any(_is_ping(d) for _, d, _ in store) else None
            for cmd_, dest, obj_ in store:  # what the parent sent while the relay was away
                self.send_obj(cmd=cmd_, dest=dest, obj=obj_)
        elif cmd == "OBJ" and self._client.endpoint is not None:
            self._client.endpoint.transport.write(raw)

    def send_tail(self, tail: bytes) -> None:
        """Send ``[stamp, cmd, dest, obj]`` to the relay, where ``tail`` is the msgpack of
        ``cmd, dest, obj`` exactly as the parent wrote them (nothing decoded or re-encoded)."""
        client = self._client
        client.ack_stamp += 1
        head = b"\x94" + msgpack.packb(client.ack_stamp)
        self.transport.writeSequence([f"{len(head) + len(tail):<{self._header_size}}{self._password}".encode() + head,
                                      tail])
        client.pending_acks[client.ack_stamp] = (time.monotonic(), b"")  # tlspyo never resends

    def connectionLost(self, reason: Any) -> None:
        self._client.lost_reason = (reason.getErrorMessage(), self._state)
        super().connectionLost(reason)

    def send_obj(self, cmd: str = "OBJ", dest: Any = None, obj: Any = None) -> None:
        if cmd == "HELLO" and isinstance(obj, (list, tuple)):
            token = self._client.identity_token()
            obj = [*obj, token] if token else list(obj)
        super().send_obj(cmd=cmd, dest=dest, obj=obj)


class _LocalProtocol(LocalProtocolForClient):
    """The child's side of the local link to the parent: frames ``[cmd, dest, obj]`` read into one
    growing buffer (tlspyo concatenates ``bytes``), and an ``OBJ``/``NTF`` frame passed on to the
    relay as ``[stamp, cmd, dest, obj]`` by prefixing its bytes with the stamp: tlspyo decoded
    and re-encoded each one. Anything else, or a relay not connected, goes tlspyo's way."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self._rbuf = bytearray()

    def dataReceived(self, data: bytes) -> None:
        self._rbuf += data
        try:
            split_frames(self._rbuf, self._header_size, self._frame, lambda: self._state == "ALIVE")
        except ValueError as exc:  # a bad length header or command: the parent is broken
            log.warning("local link: bad frame (%s); closing", exc)
            self._state = "KILLED"
            self.transport.abortConnection()

    def _frame(self, view: memoryview, start: int, end: int) -> None:
        server = self._client.to_server
        alive = server is not None and server.get_state() == "ALIVE"
        if alive and bytes(view[start:start + len(PING_FRAME)]) == PING_FRAME:
            # one heartbeat in flight: while the relay is silent the next would only pile up
            sent_at = self._client.ping_sent_at
            now = time.monotonic()
            if sent_at is not None and now - sent_at < PING_RETRY_S:
                return
            self._client.ping_sent_at = now
        if alive and end - start > 5 and bytes(view[start:start + 5]) in (b"\x93\xa3OBJ", b"\x93\xa3NTF"):
            server.send_tail(bytes(view[start + 1:end]))  # type: ignore[union-attr]
        else:
            self._slow(bytes(view[start:end]))

    def _slow(self, body: bytes) -> None:
        frame = self._client.deserializer(body)
        if not isinstance(frame, (list, tuple)) or len(frame) != 3:
            raise ValueError("not a [cmd, dest, obj] frame")
        cmd, dest, obj = frame
        if cmd == "STOP":
            self.transport.loseConnection()
            self._client.close(1)
        elif cmd in ("OBJ", "NTF"):  # the relay is away: tlspyo stores it and sends it on HELLO
            if _is_ping(dest) and any(_is_ping(d) for _, d, _ in self._client.store):
                return  # one heartbeat is enough for the next connection
            self._client.store.append((cmd, dest, obj))
        elif cmd != "TEST":
            raise ValueError(f"unknown command {str(cmd)[:20]!r}")


class _LocalFactory(LocalProtocolForClientFactory):
    def buildProtocol(self, addr: Any) -> _LocalProtocol:
        return _LocalProtocol(self.client)


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


def _is_ping(dest: Any) -> bool:
    return isinstance(dest, dict) and "ping" in dest


class GuardedClient(Client):
    """tlspyo's child-side client plus a watchdog on the parent (runs in the child process)."""

    parent_pid: int = 0
    parent_death_signal: bool = False
    auth_identity: str = ""  # who this client proves to be in its HELLO (rulka.net.wire)
    auth_key: bytes = b""  # that identity's raw Ed25519 private key
    server_hello: Any = None  # the object of the relay's latest HELLO frame (its nonce)
    ping_sent_at: float | None = None  # when the ping in flight on this connection went out

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
        reactor.connectTCP("127.0.0.1", self._local_com_port, _LocalFactory(self))
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
    signed over the nonce the relay sent on that connection (``rulka.net.wire``).

    What arrives is read from ``received`` (a ``queue.Queue``), not with tlspyo's
    ``receive_all``/``pop``/``get_last`` (they read tlspyo's private buffer, which this class
    does not fill). Sending uses tlspyo's ``send_object`` and ``notify``."""

    def __init__(self, ip_server: str, port: int, password: str, groups: Any = None, local_com_port: int = 2097,
                 header_size: int = 10, max_buf_len: int = 4096, security: str | None = "TLS",
                 keys_dir: str | None = None, hostname: str = "default", serializer: Any = None,
                 deserializer: Any = None, recon_max_delay: float = 60.0, recon_initial_delay: float = 10.0,
                 recon_factor: float = 1.5, recon_jitter: float = 0.1,
                 deserializer_mode: str = "asynchronous", auth_identity: str = "", auth_key: bytes = b"") -> None:
        self.received: queue.Queue[Any] = queue.Queue()  # objects from the relay, in order
        self._closed_lock = threading.Lock()
        self._closed = False  # stop() was called: the receiver ends
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
        """Read frames from the child until it closes the link (tlspyo's loop spins on EOF).

        Whole frames are read into one preallocated buffer (grown only for a frame larger than
        it) and each object is deserialized straight from it: tlspyo concatenated ``bytes``
        (quadratic in the frame size) and copied every frame twice before deserializing it."""
        conn = self._local_com_conn
        head = self._header_size
        buf = bytearray(max(self._max_buf_len, 1 << 16))
        view = memoryview(buf)
        start = end = 0
        while True:
            with self._closed_lock:
                if self._closed:
                    return
            if end == len(buf):  # full: move the partial frame to the front
                tail = bytes(view[start:end])
                buf[:len(tail)] = tail
                start, end = 0, len(tail)
            try:
                got = conn.recv_into(view[end:])
            except OSError:
                return
            if not got:
                return  # the child exited
            end += got
            while end - start >= head:
                try:
                    length = int(bytes(view[start:start + head]))
                except ValueError:
                    log.error("garbled frame from the network process; the link stops receiving")
                    return
                if length < 0 or length > MAX_LOCAL_FRAME_BYTES:
                    log.error("frame of %d bytes from the network process; the link stops receiving", length)
                    return
                stop = start + head + length
                if stop > end:
                    if head + length > len(buf):  # a frame larger than the buffer: grow it
                        view.release()
                        bigger = bytearray(head + length)
                        bigger[:end - start] = buf[start:end]
                        buf, view = bigger, memoryview(bigger)
                        start, end = 0, end - start
                    break
                with view[start + head:stop] as frame:
                    self._deliver(frame)
                start = stop
            if start == end:
                start = end = 0

    def _deliver(self, frame: memoryview) -> None:
        prefix = frame_prefix(frame)
        if prefix is None:  # not the usual [stamp, "OBJ", bytes]: the slow way
            whole = self._deserialize(bytes(frame))
            if not isinstance(whole, (list, tuple)) or len(whole) != 3 or not isinstance(whole[2], bytes):
                return
            cmd, obj = whole[1], memoryview(whole[2])
        else:
            _stamp, cmd, offset, length = prefix
            if length < 0:
                return
            obj = frame[offset:offset + length]
        if cmd == "OBJ":
            self.received.put(bytes(obj) if self._deserialize_locally else self._deserialize(obj))

    def stop(self) -> None:
        """Stop the network process and close the local link; safe when the process is already
        gone (tlspyo's ``stop`` writes to it and raises ``BrokenPipeError``, also from ``__del__``)."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
            proc = getattr(self, "_p", None)
            conn = getattr(self, "_local_com_conn", None)
            if proc is not None and proc.is_alive() and conn is not None:
                try:
                    self._send_local(cmd="STOP", dest=None, obj=None)
                except OSError:
                    pass
            with self._closed_lock:
                self._closed = True
            if proc is not None:
                proc.join(5.0)
                if proc.is_alive():
                    proc.kill()
                    proc.join(2.0)
            for sock in (conn, getattr(self, "_local_com_srv", None)):
                if sock is not None:
                    try:
                        sock.close()
                    except OSError:
                        pass
            thread = getattr(self, "_t_manage_received_objects", None)
            if thread is not None and thread is not threading.current_thread():
                thread.join(2.0)

    def __del__(self) -> None:
        try:
            self.stop()
        except Exception:  # noqa: BLE001, S110 - nothing to report at interpreter teardown
            pass

    def child_alive(self) -> bool:
        """Whether the network process still runs."""
        return self._p.is_alive()
