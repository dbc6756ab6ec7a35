"""WorkerLink and TrainerLink over TLS, through ``rulka-server`` (tlspyo endpoints).

    link = connect_worker(cfg.network, "path/to/bundle")            # on a gaming PC
    link = connect_trainer(cfg.network, "keys/")                     # on the GPU box

Each link owns one tlspyo ``Endpoint`` (a Twisted child process on a free local port, which
reconnects by itself with exponential backoff from ``network.reconnect_backoff_s``, capped at its
second value: 10 s by default, with 10 % jitter) and two threads (three with the heartbeat). A
network process that dies is noticed within ``DEATH_CHECK_S`` (the receiver looks at it each time
it wakes): ``link.dead`` says why, logged once, the link no longer counts as connected (nothing
more is sent into the broken pipe, and sends that fail because of it are not logged as well), and
the roles stop instead of waiting for a connection that cannot come:

- a sender: ``send``/``broadcast``/``send_to`` only queue (bounded by ``network.outbox_messages``;
  a full outbox raises ``OutboxFull`` at once, nothing queued). The sender signs each message
  (the messages queued together under one signature, up to ``MAX_BATCH`` / ``BATCH_BYTES``),
  cuts it into chunks and hands them to tlspyo, waiting while the server is unreachable.
- a receiver: checks every chunk (shape, sender key, signature, counter, digest) and hands
  complete messages to ``receive``. Anything that fails is dropped and counted in
  ``link.bad_inputs`` (reason -> count), with one log line.

``connected()`` is True while the server answers the link's heartbeat (``network.heartbeat_s``).
A worker accepts messages only from the trainer's key (a worker's credential cannot publish
weights that workers accept); the trainer accepts messages only from enrolled, non-revoked
workers (re-read from the keys folder within seconds of ``rulka keys revoke-worker``).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections import deque
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from rulka.errors import BadInput
from rulka.net.keys import Credentials, load_credentials
from rulka.net.link import TRAINER_ONLY_KINDS, LinkClosed, Message, OutboxFull, TrainerLink, WorkerLink
from rulka.net.settings import NetworkSettings
from rulka.net.stats import check_kind
from rulka.net.wire import (
    MAX_BATCH,
    MessageCounter,
    Reassembler,
    deserialize,
    make_batch_envelopes,
    serialize,
)

log = logging.getLogger("rulka.net")

TRAINER_CREDIT = 64  # chunks the server may push to the trainer before it asks for more
BATCH_BYTES = 4 * 1024 * 1024  # queued messages signed together up to this many payload bytes
DEATH_CHECK_S = 0.2  # the receiver wakes at least this often and checks the network process
_STOP = object()


def free_local_port() -> int:
    """A TCP port free on 127.0.0.1 now (for tlspyo's parent <-> child link)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _make_endpoint(settings: NetworkSettings, creds: Credentials, groups: list[str]) -> Any:
    from rulka.net.endpoint import GuardedEndpoint

    # tlspyo logs a warning for every message queued while the server is away; rulka reports
    # the connection state itself, so keep tlspyo to errors unless rulka.net is debugging
    if not log.isEnabledFor(logging.DEBUG):
        logging.getLogger("tlspyo").setLevel(logging.ERROR)
    if settings.allow_plain_tcp:
        log.warning("network.allow_plain_tcp is true: traffic to %s:%d is NOT encrypted",
                    settings.host, settings.port)
    last_exc: Exception | None = None
    for _ in range(5):  # the free port can be taken between the probe and tlspyo's bind
        try:
            return GuardedEndpoint(
                ip_server=settings.host, port=settings.port, password=creds.password, groups=tuple(groups),
                local_com_port=free_local_port(), security=None if settings.allow_plain_tcp else "TLS",
                keys_dir=str(creds.client_tls_dir), hostname=settings.host,
                serializer=serialize, deserializer=deserialize,
                recon_initial_delay=settings.reconnect_backoff_s, recon_max_delay=settings.reconnect_backoff_max_s,
                recon_factor=2.0, recon_jitter=0.1, deserializer_mode="asynchronous",
                max_buf_len=1 << 20,  # tlspyo reads 4 KB at a time by default: slow for 256 KB chunks
                auth_identity=creds.identity, auth_key=_raw_private_key(creds.signing_key),
            )
        except OSError as exc:
            last_exc = exc
    raise OSError(f"could not start the tlspyo endpoint: {last_exc}")


def _raw_private_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())


class _TlsLink:
    """Shared machinery of both links."""

    def __init__(self, settings: NetworkSettings, creds: Credentials, groups: list[str]) -> None:
        self.settings = settings
        self.creds = creds
        self.identity = creds.identity
        self.bad_inputs: dict[str, int] = {}
        self.counters = {"messages_sent": 0, "bytes_sent": 0, "messages_received": 0, "bytes_received": 0}
        self._counter = MessageCounter()
        self._outbox: queue.Queue[Any] = queue.Queue(maxsize=settings.outbox_messages)
        self._inbox: deque[Message] = deque()
        self._inbox_cond = threading.Condition()
        self._closed = threading.Event()
        self._last_pong = 0.0
        self._conn_id = 0
        self._sessions = 0  # server connections answered so far (see server_session)
        self.problem = ""  # why the link is not connected ("" when it is, or not known yet)
        self.refused: str | None = None  # the server's last refusal reason (e.g. "revoked")
        self.dead = ""  # why the network process is gone for good ("" while it runs)
        self._reassembler = Reassembler(self._sender_key, max_message_bytes=settings.max_message_bytes,
                                        max_partials=settings.max_partial_messages,
                                        partial_timeout_s=settings.partial_timeout_s)
        assert creds.signing_key is not None
        self._endpoint = _make_endpoint(settings, creds, groups)  # the child adds the identity token
        # tlspyo writes each call to its child with an unlocked sendall: calls from two threads
        # would interleave bytes and corrupt the stream, so every call goes through this lock
        self._ep_lock = threading.Lock()
        self._obj_queue: queue.Queue[Any] = self._endpoint.received
        self._last_log: dict[str, float] = {}
        self._threads = [threading.Thread(target=self._send_loop, name=f"rulka-send-{self.identity}", daemon=True),
                         threading.Thread(target=self._recv_loop, name=f"rulka-recv-{self.identity}", daemon=True),
                         threading.Thread(target=self._beat_loop, name=f"rulka-beat-{self.identity}", daemon=True)]
        for t in self._threads:
            t.start()

    # -- hooks for the subclasses ------------------------------------------------------------------
    def _sender_key(self, sender: str) -> Ed25519PublicKey | None:
        raise NotImplementedError

    def _accept(self, msg: Message, target: str) -> bool:
        return True

    def _on_connected(self) -> None:
        """Called from the receiver thread when a (new) server connection answers."""

    def _on_delivered(self, chunks: int) -> None:
        """Called from the receiver thread after ``chunks`` envelopes were processed."""

    # -- why the link is down ----------------------------------------------------------------------
    def _on_link_report(self, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        if "refused" in obj:
            reason = str(obj["refused"])[:64]
            self._refused_at = now
            self._refused_open = True  # the refused connection's close is still to come
            self.refused = reason
            self._set_problem(REFUSALS.get(reason, f"refused by the server ({reason})"))
        elif getattr(self, "_refused_open", False) and not obj.get("failed"):
            self._refused_open = False  # the close that follows a refusal says less
        elif now - getattr(self, "_refused_at", -1e9) > 2.0:
            self._set_problem(explain_link_error(str(obj.get("link_error", ""))[:300], self.settings))

    def _check_network_process(self, wait_s: float = 0.0) -> None:
        """Notice that the network process died: nothing can be sent or received any more, so the
        role must stop instead of waiting for a connection. ``wait_s``: a send just failed on the
        local link; the process closes its sockets a moment before it can be seen to exit."""
        if self.dead or self._closed.is_set():
            return
        if wait_s > 0:
            proc = getattr(self._endpoint, "_p", None)
            if proc is not None:
                proc.join(wait_s)
        if self._endpoint.child_alive():
            return
        code = getattr(getattr(self._endpoint, "_p", None), "exitcode", None)
        self.dead = f"the network process exited (exit code {code}): this link can no longer reach the server"
        log.error("%s: %s", self.identity, self.dead)
        self.problem = self.dead  # (logged just above)

    def _set_problem(self, text: str) -> None:
        """Log why the link is down once per change (and when it is up again)."""
        if text == self.problem:
            return
        previous, self.problem = self.problem, text
        if text:
            log.warning("%s cannot connect to %s:%d: %s", self.identity, self.settings.host, self.settings.port, text)
        elif previous:
            log.info("%s connected to %s:%d", self.identity, self.settings.host, self.settings.port)

    # -- public --------------------------------------------------------------------------------
    def server_session(self) -> int:
        return self._sessions

    def connected(self) -> bool:
        return (not self._closed.is_set() and not self.dead
                and time.monotonic() - self._last_pong < 3 * self.settings.heartbeat_s)

    def wait_connected(self, timeout: float = 30.0) -> bool:
        """Block until the server answers (True) or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        while not self.connected() and time.monotonic() < deadline and not self._closed.is_set():
            time.sleep(0.02)
        return self.connected()

    def _queue(self, kind: str, payload: bytes, channel: str, count: int, target: str = "") -> None:
        if self._closed.is_set():
            raise LinkClosed(f"link of {self.identity!r} is closed")
        check_kind(kind)
        if len(payload) > self.settings.max_message_bytes:
            raise ValueError(f"{kind} message of {len(payload)} bytes is over network.max_message_bytes")
        try:
            self._outbox.put_nowait((kind, bytes(payload), channel, count, target))
        except queue.Full:
            raise OutboxFull(f"outbox of {self.identity!r} is full ({self.settings.outbox_messages} messages)") from None

    def receive(self, timeout: float = 0.0) -> list[Message]:
        if self._closed.is_set():
            raise LinkClosed(f"link of {self.identity!r} is closed")
        deadline = time.monotonic() + max(0.0, timeout)
        with self._inbox_cond:
            while not self._inbox:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed.is_set():
                    break
                self._inbox_cond.wait(left)
            out = list(self._inbox)
            self._inbox.clear()
        if out:
            self._on_drained()
        return out

    def _on_drained(self) -> None:
        """Called after ``receive`` emptied the inbox."""

    def outbox_size(self) -> int:
        return self._outbox.qsize()

    def close(self) -> None:
        """Stop the threads and the tlspyo endpoint (waits briefly for queued sends)."""
        if self._closed.is_set():
            return
        deadline = time.monotonic() + 2.0
        while not self._outbox.empty() and self.connected() and time.monotonic() < deadline:
            time.sleep(0.01)
        self._closed.set()
        try:
            self._outbox.put_nowait(_STOP)
        except queue.Full:
            pass
        with self._inbox_cond:
            self._inbox_cond.notify_all()
        for t in self._threads:
            t.join(timeout=2.0)
        _stop_endpoint(self._endpoint)

    # -- threads -------------------------------------------------------------------------------
    def _send_loop(self) -> None:
        while not self._closed.is_set():
            item = self._outbox.get()
            if item is _STOP:
                return
            # what else is queued already goes out under the same signature (rulka.net.wire)
            batch, size, stop = [item], len(item[1]), False
            while len(batch) < MAX_BATCH and size < BATCH_BYTES:
                try:
                    more = self._outbox.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stop = True
                    break
                batch.append(more)
                size += len(more[1])
            # hold the messages while the server is away: tlspyo would buffer them without bound
            while not self.connected() and not self._closed.is_set():
                time.sleep(0.05)
            if self._closed.is_set():
                return
            self._send_batch(batch)
            if stop:
                return

    def _send_batch(self, batch: list[tuple[str, bytes, str, int, str]]) -> None:
        try:
            messages = [(kind, self._counter.next(), payload, target) for kind, payload, _, _, target in batch]
            streams = make_batch_envelopes(messages, self.identity, signing_key=self.creds.signing_key,  # type: ignore[arg-type]
                                           chunk_bytes=self.settings.chunk_bytes)
        except Exception as exc:  # a bug: lose these messages, not the thread
            log.warning("%s: could not sign %d message(s): %s", self.identity, len(batch), exc)
            return
        for (kind, payload, channel, count, _), envelopes in zip(batch, streams, strict=True):
            try:
                for env in envelopes:
                    self._ep_send(env, {channel: count})
                self.counters["messages_sent"] += 1
                self.counters["bytes_sent"] += len(payload)
            except Exception as exc:  # endpoint gone (closing) or a bug: lose this message, not the thread
                if isinstance(exc, OSError):  # the local link broke: most likely the process died
                    self._check_network_process(wait_s=1.0)
                if self.dead or self._closed.is_set():
                    log.debug("%s: %s message not sent: %s", self.identity, kind, exc)  # said once, as dead
                    return
                log.warning("%s: could not send a %s message: %s", self.identity, kind, exc)

    def _ep_send(self, obj: Any, dest: dict[str, int]) -> None:
        with self._ep_lock:
            self._endpoint.send_object(obj, dest)

    def _beat_loop(self) -> None:
        # beat fast until the first answer so connected() turns True quickly; the network process
        # keeps one ping in flight (rulka.net.endpoint), so beats sent while the relay is silent
        # or away do not pile up
        started = time.monotonic()
        while not self._closed.wait(0.1 if time.monotonic() - started < 10 and not self._last_pong
                                    else self.settings.heartbeat_s):
            try:
                self._ep_send(None, {"ping": -1})
            except OSError:
                return

    def _recv_loop(self) -> None:
        last_expire = time.monotonic()
        while not self._closed.is_set():
            try:
                obj = self._obj_queue.get(timeout=DEATH_CHECK_S)
            except queue.Empty:
                obj = None
            now = time.monotonic()
            self._check_network_process()  # a cheap waitpid: within DEATH_CHECK_S of its death
            if now - last_expire > 1.0:
                self._reassembler.expire(now)
                last_expire = now
            if obj is None:
                continue
            batch = [obj]
            while True:
                try:
                    batch.append(self._obj_queue.get_nowait())
                except queue.Empty:
                    break
            chunks = 0
            ready: list[Message] = []
            for o in batch:
                try:
                    chunks += self._handle(o, ready)
                except Exception as exc:  # a bug must cost one message, never the receiver thread
                    chunks += 1
                    self._count_bad("internal_error", f"{type(exc).__name__}: {exc}")
            if ready:  # one wake-up for the whole batch
                with self._inbox_cond:
                    self._inbox.extend(ready)
                    self._inbox_cond.notify_all()
            if chunks:
                self._on_delivered(chunks)

    def _handle(self, obj: Any, ready: list[Message] | None = None) -> int:
        """Process one received object; return 1 if it was an envelope (consumed credit). A
        complete message goes to ``ready`` when given (the caller delivers it), else to the inbox."""
        if isinstance(obj, dict) and "pong" in obj and len(obj) == 1:
            new_conn = obj["pong"] != self._conn_id or not self.connected()
            self._conn_id = obj["pong"]
            self._last_pong = time.monotonic()
            if new_conn:
                self._sessions += 1
                self.refused = None
                self._set_problem("")
                self._on_connected()
            return 0
        if isinstance(obj, dict) and "status" in obj and len(obj) == 1:
            return 0
        if isinstance(obj, dict) and ("refused" in obj or "link_error" in obj):
            self._on_link_report(obj)
            return 0
        try:
            msg = self._reassembler.feed(obj)
        except BadInput as exc:
            self._count_bad(exc.reason, str(exc))
            return 1
        if msg is None:
            return 1
        target = self._reassembler_last_target(obj)
        if not self._accept(msg, target):
            return 1
        self.counters["messages_received"] += 1
        self.counters["bytes_received"] += len(msg.payload)
        if ready is not None:
            ready.append(msg)
            return 1
        with self._inbox_cond:
            self._inbox.append(msg)
            self._inbox_cond.notify_all()
        return 1

    @staticmethod
    def _reassembler_last_target(obj: Any) -> str:
        return obj.get("to", "") if isinstance(obj, dict) else ""

    def _count_bad(self, reason: str, detail: str) -> None:
        self.bad_inputs[reason] = self.bad_inputs.get(reason, 0) + 1
        if reason == "duplicate":
            log.debug("%s: %s", self.identity, detail)
            return
        now = time.monotonic()
        if now - self._last_log.get(reason, 0.0) > 5.0:  # one line per reason every few seconds
            self._last_log[reason] = now
            log.warning("%s dropped bad input (%s): %s [total %d]", self.identity, reason, detail,
                        self.bad_inputs[reason])


REFUSALS = {
    "wrong_password": "wrong password: the password file in these credentials differs from the server's",
    "unknown_identity": "this identity is not enrolled on the relay: copy `workers/<name>.pub` (or "
                        "`operators/<name>.pub`) from the trainer's keys folder to the relay's, where it is "
                        "read within seconds (`rulka keys list` shows who is enrolled); retrying",
    "revoked": "this identity was revoked (`rulka keys revoke-worker`)",
    "unauthenticated": "the identity token does not match the enrolled key (an old bundle?)",
    "forbidden_channel": "the server refused the channels this link asked for",
    "outdated_client": "this rulka is older than the server's (it does not answer the server's challenge): "
                       "upgrade rulka on this machine",
}
# refusals that no retry can fix: the role should stop instead of retrying for ever. Not
# "unknown_identity": the fix (the worker's public key copied to the relay host) is made on
# another machine and the relay reads it without a restart, so the worker retries with backoff
FATAL_REFUSALS = frozenset({"revoked", "unauthenticated", "wrong_password", "outdated_client"})


def explain_link_error(text: str, settings: NetworkSettings) -> str:
    """A user-facing reason for a tlspyo connection failure message."""
    low = text.lower()
    where = f"{settings.host}:{settings.port}"
    if "certificate verify failed" in low or "certificate_verify_failed" in low:
        return ("TLS certificate verify failed: the server's certificate is not signed by the CA in "
                "client/certificate.pem, or it does not name the host " + repr(settings.host))
    if "refused" in low:
        return f"server unreachable: connection refused at {where} (is rulka-server running on that port?)"
    if "timed out" in low or "timeout" in low:
        return f"server unreachable: connection to {where} timed out (firewall or port forwarding?)"
    if "dns" in low or "name" in low and "resol" in low or "no address" in low:
        return f"server unreachable: cannot resolve {settings.host!r}"
    if "no route" in low or "unreachable" in low:
        return f"server unreachable: no route to {where}"
    if "ssl" in low or "tls" in low or "handshake" in low:
        return f"TLS handshake with {where} failed ({text[:160]}); is it a rulka-server with TLS?"
    return f"connection to {where} lost ({text[:160]})"


def _stop_endpoint(endpoint: Any) -> None:
    """Stop a tlspyo endpoint without waiting for its 10-second ack drain when the server is gone."""
    proc = getattr(endpoint, "_p", None)
    done = threading.Event()

    def stop() -> None:
        try:
            endpoint.stop()
        except Exception as exc:  # already broken: the process is killed below anyway
            log.debug("tlspyo endpoint stop: %s", exc)
        done.set()

    threading.Thread(target=stop, daemon=True).start()
    if not done.wait(3.0) and proc is not None and proc.is_alive():
        proc.kill()
        proc.join(2.0)
        done.wait(2.0)


class TlsWorkerLink(_TlsLink, WorkerLink):
    """A worker's link (see the module docstring)."""

    def __init__(self, settings: NetworkSettings, creds: Credentials) -> None:
        self.worker_id = creds.identity
        super().__init__(settings, creds, ["workers", f"w:{creds.identity}"])

    def _sender_key(self, sender: str) -> Ed25519PublicKey | None:
        return self.creds.trainer_public if sender == "trainer" else None

    def _accept(self, msg: Message, target: str) -> bool:
        if target not in ("", self.worker_id):
            self._count_bad("misrouted", f"{msg.kind} addressed to {target!r}")
            return False
        return True

    def send(self, kind: str, payload: bytes) -> None:
        """Queue a message for the trainer; ``OutboxFull`` if the outbox is full."""
        if kind in TRAINER_ONLY_KINDS:
            raise ValueError(f"a worker cannot send {kind!r} messages")
        self._queue(kind, payload, "trainer", 1)


class TlsTrainerLink(_TlsLink, TrainerLink):
    """The trainer's link (see the module docstring)."""

    def __init__(self, settings: NetworkSettings, creds: Credentials) -> None:
        self._keys: dict[str, Ed25519PublicKey] = {}
        self._keys_fingerprint = b""
        self._keys_checked = 0.0
        self._credit_lock = threading.Lock()
        self._outstanding = 0  # credit granted to the server and not used yet
        self._owed = 0  # credit to grant once the inbox has room
        super().__init__(settings, creds, ["trainer"])

    def _sender_key(self, sender: str) -> Ed25519PublicKey | None:
        now = time.monotonic()
        if now - self._keys_checked > 2.0:
            self._keys_checked = now
            fingerprint = self.creds.keys_fingerprint()
            if fingerprint != self._keys_fingerprint:
                self._keys, self._keys_fingerprint = self.creds.worker_keys(), fingerprint
        return self._keys.get(sender)

    def broadcast(self, kind: str, payload: bytes) -> None:
        """To every worker (``weights`` is also kept by the server for workers that join later);
        ``stats`` goes to the server only."""
        self._queue(kind, payload, "stats" if kind == "stats" else "workers", -1)

    def send_to(self, worker_id: str, kind: str, payload: bytes) -> None:
        """To one worker; dropped by the server if that worker is not connected now."""
        self._queue(kind, payload, f"w:{worker_id}", -1, target=worker_id)

    # credit-based pull: the server pushes at most TRAINER_CREDIT chunks ahead of ``receive``
    def _grant(self, n: int) -> None:
        if n > 0:
            try:
                with self._ep_lock:
                    self._endpoint.notify({"trainer": n})
            except OSError:
                pass

    def _on_connected(self) -> None:
        with self._credit_lock:
            self._outstanding = TRAINER_CREDIT
            self._owed = 0
        self._grant(TRAINER_CREDIT)

    def _on_delivered(self, chunks: int) -> None:
        with self._credit_lock:
            self._outstanding = max(0, self._outstanding - chunks)
            self._owed += chunks
            room = len(self._inbox) < self.settings.outbox_messages
            grant = self._owed if room and self._outstanding < TRAINER_CREDIT // 2 else 0
            self._owed -= grant
            self._outstanding += grant
        self._grant(grant)

    def _on_drained(self) -> None:
        with self._credit_lock:
            grant = self._owed if self._outstanding < TRAINER_CREDIT // 2 else 0
            self._owed -= grant
            self._outstanding += grant
        self._grant(grant)


def connect_worker(cfg_network: Any, credentials_dir_or_bundle: str | os.PathLike[str],
                   worker_id: str | None = None) -> TlsWorkerLink:
    """A worker's link. ``credentials_dir_or_bundle``: the bundle from ``rulka keys add-worker``;
    ``worker_id`` (optional) must match the bundle's name. Returns at once; the link connects
    (and reconnects) in the background."""
    settings = NetworkSettings.from_config(cfg_network)
    creds = load_credentials(credentials_dir_or_bundle, "worker")
    if worker_id is not None and worker_id != creds.identity:
        from rulka.errors import UserError

        raise UserError(f"worker id {worker_id!r} does not match the bundle's name {creds.identity!r}")
    return TlsWorkerLink(settings, creds)


def connect_trainer(cfg_network: Any, credentials_dir: str | os.PathLike[str]) -> TlsTrainerLink:
    """The trainer's link (keys folder from ``rulka keys generate``). Returns at once."""
    return TlsTrainerLink(NetworkSettings.from_config(cfg_network), load_credentials(credentials_dir, "trainer"))


__all__ = ["TlsTrainerLink", "TlsWorkerLink", "connect_trainer", "connect_worker", "free_local_port"]
