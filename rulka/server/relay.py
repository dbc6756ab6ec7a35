"""The relay: tlspyo's server side, rewritten for rulka's needs (Twisted, in the server process).

Clients are tlspyo ``Endpoint``s (rulka's ``GuardedEndpoint``, whose network process reads
frames faster and does not acknowledge the ``OBJ`` frames it receives: this relay keeps nothing
for resending, so it never needed those acks); this module speaks their frame protocol
(``<10-byte length><password><msgpack (stamp, cmd, dest, obj)>``, answered with
``<10-byte length><msgpack (stamp, cmd, obj)>``) but replaces tlspyo's ``Relay`` because that
one cannot be made safe or fast enough from outside: it buffers any length a header announces,
grows buffers by concatenation (quadratic), keeps an unbounded queue per group and a copy of
every frame until it is acknowledged (a leak when a client drops), lets any client join any
group, and retains only the last object of a broadcast (one chunk of a chunked message).

Here:
- frames over ``max_frame_bytes`` or with a bad header, password or body close the connection
  and are counted by reason; nothing is ever unpickled (msgpack only);
- each client proves its identity in its HELLO, signed over a nonce the relay sent on that
  connection (``rulka.net.wire.challenge_token``: a captured HELLO cannot be replayed; a
  version-1 client, whose token is static, is refused as ``outdated_client``), and may join only
  its own channels: the trainer ``trainer`` (segments, pulled with credit), a worker ``workers``
  (broadcasts) and ``w:<name>`` (messages to it); a client can only send as itself, a worker
  only to the trainer, and only the trainer to workers;
- the trainer queue is bounded in bytes and shared fairly: each sender may hold at most an equal
  share of it (the bound over the workers connected or queued), and the trainer is served one
  whole message per sender in turn, so a flooding worker cannot crowd out an honest one;
- the latest complete ``weights`` message (all its chunks) is retained for workers that join;
  each worker's connection sends the newest weights only, one chunk whenever its write buffer
  has drained: a version superseded before that worker started on it is skipped (counted,
  ``weights_superseded``), never queued behind the newer one, so a worker on a slow link is not
  cut off for a backlog of weights and gets the newest version next; a few workers at a time
  (``network.weights_streams``; ``rulka.server.turns``), so each version lands fresh;
- every client has counters (messages/bytes in/out, bad inputs by reason), and the latest
  ``stats`` per sender are kept for ``rulka status``;
- a client that does not read is not read from either: when Twisted's write buffer for it is
  full, the relay stops reading its socket until the buffer drains, and everything written to
  it (forwarded messages and the relay's own replies) counts toward its backlog, beyond which it
  is disconnected (``slow_client``); ``ping`` and ``status`` are rate-limited per connection;
- a frame whose header arrived must complete within ``STALL_TIMEOUT_S`` (``stalled_frame``);
- ``status`` answers the trainer's identity and operators' (``rulka keys add-operator``) only:
  it lists every address;
- the enrolled keys are compared with the key files' contents every ``KEY_CHECK_S`` (a hash of
  ``workers/``, ``revoked/`` and ``operators/``, so a key overwritten or emptied in place counts):
  a key revoked, removed or replaced closes every connection made with it, observers included;
- a refused client gets one ``{"refused": reason}`` message before the connection closes, so it
  can say why (``wrong_password``, ``unknown_identity``, ``unauthenticated``, ...); the close
  starts at once (TLS close alert, then TCP) and is forced after ``REFUSE_GRACE_S``.

Channels (tlspyo groups): ``trainer``, ``workers``, ``w:<name>``, and three the relay answers
itself: ``ping`` (replies ``{"pong": conn_id}``), ``status`` (replies ``{"status": report}``) and
``stats`` (the trainer's stats; stored, not forwarded).
"""

from __future__ import annotations

import collections
import hmac
import logging
import secrets
import time
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from twisted.internet import protocol

from rulka.errors import BadInput, UserError
from rulka.net.keys import OPERATOR_PREFIX, Credentials, check_worker_name, raw_key
from rulka.net.messages import Stats
from rulka.net.settings import NetworkSettings
from rulka.net.stats import build_status
from rulka.net.wire import (
    NONCE_BYTES,
    BadFrame,
    check_envelope,
    deserialize,
    parse_challenge_token,
    parse_join_token,
    relay_hello,
    serialize,
    verify_challenge_token,
)
from rulka.server.connection import UNSENT_BYTES, ClientCounters, limit_unsent_bytes  # noqa: F401
from rulka.server.turns import WeightsTurns

log = logging.getLogger("rulka.server")

HEADER = 10  # tlspyo's length header: ASCII digits padded with spaces
HELLO_TIMEOUT_S = 15.0
STALL_TIMEOUT_S = 30.0  # a frame whose header arrived must be complete within this
# token buckets per connection: (refill per second, burst); links ping every heartbeat_s (and
# ten times a second for their first seconds), `rulka status` asks once a second
RATE_LIMITS = {"ping": (20.0, 40.0), "status": (1.0, 5.0)}
READ_PAUSE_BYTES = 256 * 1024  # backlog beyond which the relay stops reading from a client
LOG_EVERY_S = 5.0  # one log line per (reason, client) this often; the counters count every one
FRAME_OVERHEAD = 4096  # envelope fields + tlspyo tuple around one chunk
KEY_CHECK_S = 0.5  # how often the server compares the enrolled keys with the key files
REFUSE_GRACE_S = 1.0  # a refused client that does not answer the TLS close is cut after this


class RelayCore(WeightsTurns):
    """Relay state shared by all connections (lives in the reactor thread only)."""

    def __init__(self, settings: NetworkSettings, creds: Credentials, clock: Any = None) -> None:
        if clock is None:
            from twisted.internet import reactor as clock
        self.clock = clock  # IReactorTime; tests pass twisted.internet.task.Clock()
        self.settings = settings
        self.creds = creds
        self.password = creds.password.encode()
        self.max_frame_bytes = settings.chunk_bytes + FRAME_OVERHEAD
        # what may pile up for a client that does not read: two whole messages; beyond that the
        # client is disconnected (it reconnects and gets the retained weights afresh)
        self.max_backlog_bytes = 2 * settings.max_message_bytes + 16 * self.max_frame_bytes
        self.started = time.time()
        # connection ids differ across relay restarts too: a link that sees a new id in its
        # heartbeat reply knows it has a new connection (and, for the trainer, must grant credit)
        self.conn_serial = secrets.randbelow(1 << 48)
        self.trainer: RelayProtocol | None = None
        self.workers: dict[str, RelayProtocol] = {}
        # per sender: (chunk, last chunk of its message?), oldest first
        self.trainer_queues: dict[str, collections.deque[tuple[bytes, bool]]] = {}
        self.queued_bytes: dict[str, int] = collections.defaultdict(int)
        self._turn: collections.deque[str] = collections.deque()  # senders waiting, in serving order
        self._serving: str | None = None  # the sender whose message is being dispatched
        self.trainer_queue_bytes = 0
        self.trainer_credit = 0
        self.retained: list[bytes] = []  # chunks of the latest complete weights message
        self.retained_n = -1
        self.incoming: list[bytes] = []  # chunks of the weights message being received
        self.incoming_n = -1
        # weights messages are numbered as they start arriving (serials), so a worker's connection
        # knows how many versions it skipped; each connection sends the newest one (pump_weights)
        self.weights_serial = 0
        self.incoming_serial = 0
        self.incoming_count = 0
        self.retained_serial = 0
        self.weights_superseded = 0  # versions not sent to some worker because a newer one came first
        self.weights_completed_at: dict[int, float] = {}  # serial -> when it was complete here (the latest 256)
        self.init_turns()
        self.clients: dict[str, ClientCounters] = {}  # identity -> counters (kept after disconnect)
        self.bad: dict[str, int] = collections.defaultdict(int)
        self.stats: dict[str, tuple[float, dict[str, Any]]] = {}
        self._worker_keys: dict[str, Ed25519PublicKey] = {}
        self._keys_fingerprint = b""
        self.observers: set[RelayProtocol] = set()
        self._last_log: dict[tuple[str, str | None], float] = {}

    # -- identities --------------------------------------------------------------------------------
    def worker_keys(self) -> dict[str, Ed25519PublicKey]:
        """The enrolled workers' keys, re-read when the key files' contents changed (the server
        calls this every ``KEY_CHECK_S``); closes the connections whose key is gone or changed."""
        fingerprint = self.creds.keys_fingerprint()
        if fingerprint != self._keys_fingerprint:
            self._worker_keys = self.creds.worker_keys()
            self._keys_fingerprint = fingerprint
            # every open connection whose key is gone (revoked worker, deleted operator) or was
            # replaced (enrolled again with --force) is closed: it authenticated with that key
            for conn in [*self.workers.values(), *self.observers]:
                if conn.identity is None or conn.identity == "trainer" or conn.closing:
                    continue
                key = (self.creds.operator_key(conn.identity) if conn.identity.startswith(OPERATOR_PREFIX)
                       else self._worker_keys.get(conn.identity))
                if key is None or raw_key(key) != conn.identity_key:
                    log.warning("%s was revoked; closing its connection", conn.identity)
                    conn._refuse("revoked")
        return self._worker_keys

    def is_revoked(self, identity: str) -> bool:
        """Whether ``rulka keys revoke-worker`` moved this identity's key aside."""
        try:
            return (self.creds.root / "revoked" / f"{check_worker_name(identity)}.pub").exists()
        except UserError:
            return False

    def key_for(self, identity: str) -> Ed25519PublicKey | None:
        if identity == "trainer":
            return self.creds.trainer_public
        if identity.startswith(OPERATOR_PREFIX):
            return self.creds.operator_key(identity)
        return self.worker_keys().get(identity)

    def count_bad(self, reason: str, who: str | None, detail: str = "") -> None:
        self.bad[reason] += 1
        if who is not None and who in self.clients and self.clients[who].connected:
            c = self.clients[who]
            c.bad[reason] = c.bad.get(reason, 0) + 1
        # at most one line per reason and client every few seconds; the counters count them all
        now = time.monotonic()
        if now - self._last_log.get((reason, who), -LOG_EVERY_S) >= LOG_EVERY_S:
            self._last_log[(reason, who)] = now
            log.warning("bad input (%s) from %s%s [total %d]", reason, who or "unauthenticated client",
                        f": {detail}" if detail else "", self.bad[reason])

    # -- routing -------------------------------------------------------------------------------
    @property
    def trainer_queue(self) -> list[bytes]:
        """Every chunk waiting for the trainer (all senders)."""
        return [obj for q in self.trainer_queues.values() for obj, _ in q]

    def fair_share(self) -> int:
        """Bytes one sender may hold in the trainer queue: an equal share among the workers
        connected or with chunks queued."""
        active = set(self.workers) | {s for s, q in self.trainer_queues.items() if q}
        return self.settings.server_queue_bytes // max(1, len(active))

    def enqueue_for_trainer(self, obj: bytes, sender: str, last: bool = True) -> None:
        if self.trainer_queue_bytes + len(obj) > self.settings.server_queue_bytes:
            self.count_bad("queue_full", sender, "trainer queue is full; chunk dropped")
            return
        if self.queued_bytes[sender] + len(obj) > self.fair_share():
            self.count_bad("queue_full", sender, "this sender's share of the trainer queue is full; chunk dropped")
            return
        q = self.trainer_queues.setdefault(sender, collections.deque())
        if not q and sender != self._serving:
            self._turn.append(sender)
        q.append((obj, last))
        self.queued_bytes[sender] += len(obj)
        self.trainer_queue_bytes += len(obj)
        self.dispatch_trainer()

    def dispatch_trainer(self) -> None:
        t = self.trainer
        while t is not None and self.trainer_credit > 0:
            if self._serving is None or not self.trainer_queues.get(self._serving):
                # the current sender has nothing queued (or its message is done): next in turn
                self._serving = self._turn.popleft() if self._turn else None
                if self._serving is None:
                    return
            sender = self._serving
            q = self.trainer_queues[sender]
            obj, last = q.popleft()
            self.queued_bytes[sender] -= len(obj)
            self.trainer_queue_bytes -= len(obj)
            self.trainer_credit -= 1
            t.send_obj(obj)
            if last:  # a whole message went out: the next sender's turn
                self._serving = None
                if q:
                    self._turn.append(sender)

    def broadcast_weights_chunk(self, obj: bytes, env: dict[str, Any]) -> None:
        """Keep one chunk of a weights message and let every worker's connection take what it can:
        a connection sends the newest version only (``RelayProtocol.pump_weights``)."""
        n = env["n"]
        if n != self.incoming_n:
            if n <= self.retained_n:
                return  # an older message than the one retained: drop it
            self.weights_serial += 1
            self.incoming, self.incoming_n = [], n
            self.incoming_serial, self.incoming_count = self.weights_serial, env["c"]
        self.incoming.append(obj)
        if len(self.incoming) >= self.incoming_count:
            self.retained, self.retained_n, self.retained_serial = self.incoming, n, self.incoming_serial
            self.weights_completed_at[self.incoming_serial] = time.time()
            if len(self.weights_completed_at) > 256:
                del self.weights_completed_at[min(self.weights_completed_at)]
            self.incoming, self.incoming_n = [], -1
        self.pump_all_weights()

    def abandon_incoming_weights(self) -> None:
        """The trainer left in the middle of a weights message: it will never complete."""
        if self.incoming:
            self.incoming, self.incoming_n = [], -1
            self.pump_all_weights()

    def newest_weights(self) -> tuple[list[bytes], int, int] | None:
        """(chunks, chunk count, serial) of the newest weights message: the one arriving, else
        the retained one; None before the first."""
        if self.incoming:
            return self.incoming, self.incoming_count, self.incoming_serial
        if self.retained:
            return self.retained, len(self.retained), self.retained_serial
        return None

    def status(self) -> dict[str, Any]:
        server = {
            "uptime_s": round(time.time() - self.started, 1),
            "trainer_connected": self.trainer is not None,
            "workers_connected": sorted(self.workers),
            "trainer_queue_chunks": len(self.trainer_queue),
            "trainer_queue_bytes": self.trainer_queue_bytes,
            "retained_weights_bytes": sum(len(c) for c in self.retained),
            "weights_versions": self.weights_serial,
            "weights_superseded": self.weights_superseded,
            "weights_waiting": len(self.weights_waiting),
            "bad_inputs": dict(self.bad),
            "clients": {who: c.as_dict() for who, c in self.clients.items()},
        }
        now = time.time()
        for name, conn in self.workers.items():
            # versions complete here and not yet all written to this worker: what its link is behind
            newer = [t for serial, t in self.weights_completed_at.items() if serial > conn.weights_done_serial]
            server["clients"][name]["weights_behind"] = len(newer)
            server["clients"][name]["weights_behind_s"] = round(now - min(newer), 1) if newer else 0.0
        addresses = {who: c.address for who, c in self.clients.items()}
        report = build_status(server, self.stats, addresses, now=time.time())
        reported = {row["name"] for row in report["workers"]}
        for name in sorted(self.workers):
            if name not in reported:  # connected but has not sent stats yet
                report["workers"].append({"name": name, "address": addresses.get(name, ""), "episodes": None,
                                          "samples_per_s": None, "weights_version": None,
                                          "last_seen_s": round(time.time() - self.clients[name].last_seen, 3)})
        return report


class RelayProtocol(protocol.Protocol):
    """One client connection."""

    def __init__(self, core: RelayCore, address: str) -> None:
        self.core = core
        self.address = address
        self.identity: str | None = None
        self.alive = False
        self.closing = False
        self._buf = bytearray()
        self._need: int | None = None  # length of the frame being received, once its header is read
        self._stamp = 0
        self._pw_len = len(core.password)
        self.conn_id = 0
        self._nonce = b""  # set when the connection is made
        self._hello_timer: Any = None
        self._paused = False
        self._backlog = 0
        self.observer = False  # authenticated, joined no channel: may only ping and ask for status
        self.identity_key = b""  # the raw public key this connection authenticated with
        self.counters = ClientCounters(address)
        self._stall_timer: Any = None
        self._reading_paused = False
        # the weights message being sent to this worker: its chunks, count, serial, chunks sent
        self._w_chunks: list[bytes] | None = None
        self._w_count = 0
        self._w_serial = 0
        self._w_sent = 0
        self.weights_done_serial = 0  # the newest weights message whose last chunk was written to it
        self._buckets = {name: [burst, 0.0] for name, (_, burst) in RATE_LIMITS.items()}

    # -- Twisted callbacks ---------------------------------------------------------------------
    def connectionMade(self) -> None:
        self.core.conn_serial += 1
        self.conn_id = self.core.conn_serial
        self.transport.registerProducer(self, True)  # Twisted says when its write buffer is full
        limit_unsent_bytes(self.transport)
        self._nonce = secrets.token_bytes(NONCE_BYTES)  # the client signs it: its HELLO is good here only
        self._write([self._next_stamp(), "HELLO", relay_hello(self._nonce)])
        self._hello_timer = self.core.clock.callLater(HELLO_TIMEOUT_S, self._hello_timeout)

    # IPushProducer: between pause and resume, count what is written and cut a client that lags;
    # past READ_PAUSE_BYTES of backlog read nothing from it (its requests would only add to what
    # it does not read). Not at the first pause: TLS pauses producers during its handshake,
    # which needs reading to finish.
    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused, self._backlog = False, 0
        if self._reading_paused and not self.closing:
            self._reading_paused = False
            self.transport.resumeProducing()
        if self.alive and not self.observer and self.identity != "trainer":
            self.pump_weights()

    def stopProducing(self) -> None:
        self._paused = False

    def connectionLost(self, reason: Any = None) -> None:
        self.transport.unregisterProducer()
        for timer in (self._hello_timer, self._stall_timer):
            if timer is not None and timer.active():
                timer.cancel()
        self.core.observers.discard(self)
        who = self.identity
        if who is None or self.observer:
            return
        self.counters.connected = False
        if who == "trainer" and self.core.trainer is self:
            self.core.trainer = None
            self.core.trainer_credit = 0
            self.core.abandon_incoming_weights()
        elif self.core.workers.get(who) is self:
            del self.core.workers[who]
        if who != "trainer":
            self.core.end_weights_turn(self)
        log.info("%s disconnected (%s)", who, self.address)

    def dataReceived(self, data: bytes) -> None:
        if self.closing:
            return
        try:
            self._buf += data
            self._drain()
        except Exception as exc:  # a bug must cost one connection, never the relay
            self.core.count_bad("internal_error", self.identity, f"{type(exc).__name__}: {exc}")
            self._abort()

    # -- framing -------------------------------------------------------------------------------
    def _drain(self) -> None:
        head = HEADER + self._pw_len
        while not self.closing:
            if self._need is None:  # header and password are checked once per frame
                if len(self._buf) < head:
                    return None
                try:
                    length = int(bytes(self._buf[:HEADER]))
                except ValueError:
                    return self._reject("malformed_header", "length header is not a number")
                if length < 0 or length > self.core.max_frame_bytes:
                    return self._reject("oversized", f"frame of {length} bytes announced "
                                                     f"(limit {self.core.max_frame_bytes})")
                if not hmac.compare_digest(bytes(self._buf[HEADER:head]), self.core.password):
                    return self._refuse("wrong_password")
                self._need = head + length
            if len(self._buf) < self._need:
                if self._stall_timer is None:
                    self._stall_timer = self.core.clock.callLater(STALL_TIMEOUT_S, self._stalled)
                return None
            if self._stall_timer is not None:
                if self._stall_timer.active():
                    self._stall_timer.cancel()
                self._stall_timer = None
            with memoryview(self._buf) as view:
                body = bytes(view[head:self._need])
            del self._buf[:self._need]
            self._need = None
            self._frame(body)
        return None

    def _frame(self, body: bytes) -> None:
        frame = deserialize(body)
        if isinstance(frame, BadFrame) or not isinstance(frame, list) or len(frame) != 4:
            return self._reject("malformed", frame.reason if isinstance(frame, BadFrame) else "not a tlspyo frame")
        stamp, cmd, dest, obj = frame
        if not isinstance(stamp, int) or not isinstance(cmd, str):
            return self._reject("malformed", "bad stamp or command")
        if cmd == "ACK":
            return None  # nothing is kept for resending, so acks need no bookkeeping
        self._write([stamp, "ACK", None])
        if cmd == "HELLO":
            return self._hello(obj)
        if not self.alive:
            return self._reject("unauthenticated", f"{cmd} before a valid HELLO")
        counters = self.counters
        counters.messages_in += 1
        counters.bytes_in += len(body)
        counters.last_seen = time.time()
        if cmd == "OBJ":
            return self._obj(dest, obj)
        if cmd == "NTF":
            return self._notify(dest)
        return self._reject("malformed", f"unknown command {cmd[:20]!r}")

    def _hello(self, groups: Any) -> None:
        if self.alive:
            return self._reject("malformed", "second HELLO")
        if not isinstance(groups, list) or not 1 <= len(groups) <= 8 or not all(isinstance(g, str) for g in groups):
            return self._reject("malformed", "HELLO without a list of channels")
        tokens = [t for t in (parse_challenge_token(g) for g in groups) if t is not None]
        if len(tokens) != 1:
            if any(parse_join_token(g) is not None for g in groups):
                return self._refuse("outdated_client", "a version-1 identity token (no challenge): upgrade rulka")
            return self._reject("unauthenticated", "HELLO without exactly one identity token")
        identity, sig = tokens[0]
        key = self.core.key_for(identity)
        if key is None:
            if self.core.is_revoked(identity):
                return self._refuse("revoked", f"{identity[:64]!r} was revoked")
            return self._refuse("unknown_identity", f"{identity[:64]!r} is not enrolled")
        if not verify_challenge_token(identity, sig, key, self._nonce):
            return self._refuse("unauthenticated", f"bad identity token for {identity[:64]!r}")
        channels = {g for g in groups if parse_challenge_token(g) is None}
        if identity == "trainer":
            allowed = {"trainer"}
        elif identity.startswith(OPERATOR_PREFIX):
            allowed = set()  # an operator only observes: status and ping
        else:
            allowed = {"workers", f"w:{identity}"}
        if not channels <= allowed:
            return self._reject("forbidden_channel", f"{identity} asked for {sorted(channels - allowed)}")
        if self._hello_timer is not None and self._hello_timer.active():
            self._hello_timer.cancel()
        self.identity, self.alive = identity, True
        self.identity_key = raw_key(key)
        if not channels:  # `rulka status` and other observers
            self.observer = True
            self.core.observers.add(self)
            return None
        core = self.core
        old = core.trainer if identity == "trainer" else core.workers.get(identity)
        if old is not None and old is not self:
            log.info("%s connected again; closing its previous connection", identity)
            old._abort()
        core.clients[identity] = self.counters
        if identity == "trainer":
            core.trainer, core.trainer_credit = self, 0
        else:
            core.workers[identity] = self
            self.pump_weights()  # late joiner: the newest weights at once
        log.info("%s connected from %s", identity, self.address)
        return None

    def _obj(self, dest: Any, obj: Any) -> None:
        if (not isinstance(dest, dict) or len(dest) != 1 or not isinstance(obj, bytes)):
            return self.core.count_bad("malformed", self.identity, "OBJ without one channel and bytes")
        ((channel, count),) = dest.items()
        if not isinstance(channel, str) or not isinstance(count, int):
            return self.core.count_bad("malformed", self.identity, "bad channel")
        if channel in RATE_LIMITS and not self._take_token(channel):
            return self.core.count_bad("rate_limited", self.identity, f"too many {channel} requests")
        if channel == "ping":
            return self._write([self._next_stamp(), "OBJ", serialize({"pong": self.conn_id})])
        if channel == "status":
            # the report lists every address: for the trainer's key or an operator's, not a worker's
            if self.identity != "trainer" and not (self.identity or "").startswith(OPERATOR_PREFIX):
                return self._write([self._next_stamp(), "OBJ", serialize({"refused": "status_forbidden"})])
            return self._write([self._next_stamp(), "OBJ", serialize({"status": self.core.status()})])
        try:
            env = check_envelope(deserialize(obj), max_message_bytes=self.core.settings.max_message_bytes)
        except BadInput as exc:
            return self.core.count_bad(exc.reason, self.identity, str(exc))
        if self.observer:
            return self.core.count_bad("forbidden_route", self.identity, "an observer cannot send messages")
        if env["s"] != self.identity:
            return self.core.count_bad("spoofed_sender", self.identity, f"envelope claims {env['s'][:64]!r}")
        if env["k"] == "stats" and env["c"] == 1:
            try:
                self.core.stats[self.identity] = (time.time(), Stats.decode(env["d"]).values)  # type: ignore[index]
            except BadInput as exc:
                self.core.count_bad("bad_stats", self.identity, str(exc))
        if self.identity == "trainer":
            return self._route_from_trainer(channel, count, obj, env)
        if channel != "trainer" or count != 1:
            return self.core.count_bad("forbidden_route", self.identity, f"worker sent to {channel[:64]!r}")
        return self.core.enqueue_for_trainer(obj, self.identity, env["i"] == env["c"] - 1)  # type: ignore[arg-type]

    def _route_from_trainer(self, channel: str, count: int, obj: bytes, env: dict[str, Any]) -> None:
        core = self.core
        if channel == "stats":
            return None  # stored above; not forwarded
        if channel == "workers":
            if env["k"] == "weights":
                core.broadcast_weights_chunk(obj, env)  # each worker's connection sends it when it can
                return None
            for conn in list(core.workers.values()):
                conn.send_obj(obj)
            return None
        if channel.startswith("w:"):
            conn = core.workers.get(channel[2:])
            if conn is None:
                core.bad["no_route"] += 1  # the worker is away; it resends what was not acked
                return None
            conn.send_obj(obj)
            return None
        return core.count_bad("forbidden_route", "trainer", f"trainer sent to {channel[:64]!r}")

    def _notify(self, dest: Any) -> None:
        if self.identity != "trainer" or not isinstance(dest, dict) or set(dest) != {"trainer"}:
            return self.core.count_bad("forbidden_route", self.identity, "only the trainer pulls")
        n = dest["trainer"]
        if not isinstance(n, int):
            return self.core.count_bad("malformed", self.identity, "bad credit")
        self.core.trainer_credit = (1 << 30) if n < 0 else min(self.core.trainer_credit + n, 1 << 30)
        self.core.dispatch_trainer()
        return None

    # -- output --------------------------------------------------------------------------------
    def _next_stamp(self) -> int:
        self._stamp += 1
        return self._stamp

    def _take_token(self, name: str) -> bool:
        rate, burst = RATE_LIMITS[name]
        bucket = self._buckets[name]
        now = time.monotonic()
        bucket[0] = min(burst, bucket[0] + (now - bucket[1]) * rate) if bucket[1] else bucket[0]
        bucket[1] = now
        if bucket[0] < 1.0:
            return False
        bucket[0] -= 1.0
        return True

    def _write(self, frame: list[Any]) -> None:
        if self.closing:
            return
        body = serialize(frame)
        paused = self._paused
        self.transport.write(f"{len(body):<{HEADER}}".encode() + body)
        self._count_backlog(len(body) + HEADER, paused)

    def _count_backlog(self, n: int, paused: bool) -> None:
        """``paused``: whether Twisted's buffer was full before these ``n`` bytes were written (the
        write that fills it is not backlog: else a worker sent a weights chunk whenever its buffer
        drains would never be read from, and its segments would wait behind the weights)."""
        if paused:
            self._backlog += n
            if self._backlog > self.core.max_backlog_bytes:
                self._reject("slow_client", f"{self._backlog} bytes waiting to be read")
            elif self._backlog > READ_PAUSE_BYTES and not self._reading_paused and not self.closing:
                self._reading_paused = True
                self.transport.pauseProducing()

    def pump_weights(self) -> None:
        """Send this worker the newest weights, one chunk at a time while Twisted's write buffer
        for it has room (the chunks wait in the relay, shared by every worker, not in a buffer of
        this connection). A version that is complete before this worker started on it is skipped
        when a newer one exists, so a worker behind a slow link gets the newest version next
        instead of a queue of old ones, and its backlog never grows with the versions published.
        A version it started is finished first (on a link slower than the publishing rate,
        dropping it would mean never finishing one)."""
        core = self.core
        while not self._paused and not self.closing:
            chunks = self._w_chunks
            if chunks is not None and self._w_sent < self._w_count:
                if self._w_sent < len(chunks):
                    self._w_sent += 1
                    self.send_obj(chunks[self._w_sent - 1])
                    if self._w_sent == self._w_count:
                        self.weights_done_serial = self._w_serial
                        core.end_weights_turn(self, finished=True)
                    continue
                if chunks is core.incoming:
                    return  # the rest of this message has not arrived from the trainer yet
                # abandoned by the trainer (it left mid-message): the worker drops the partial one
            newest = core.newest_weights()
            if newest is None or newest[2] <= self._w_serial:
                self._w_chunks = None
                core.end_weights_turn(self)
                return
            if not core.take_weights_turn(self):
                return  # its turn comes (pump_waiting)
            skipped = newest[2] - self._w_serial - 1 if self._w_serial else 0
            if skipped > 0:
                self.counters.weights_superseded += skipped
                core.weights_superseded += skipped
            self._w_chunks, self._w_count, self._w_serial = newest
            self._w_sent = 0

    def send_obj(self, obj: bytes) -> None:
        """Forward one envelope (already serialized by its sender) to this client."""
        if self.closing:
            return
        # msgpack of [stamp, "OBJ", obj] written around ``obj`` without copying it
        prefix = b"\x93" + serialize(self._next_stamp()) + b"\xa3OBJ" + b"\xc6" + len(obj).to_bytes(4, "big")
        paused = self._paused
        self.transport.writeSequence([f"{len(prefix) + len(obj):<{HEADER}}".encode() + prefix, obj])
        self.counters.messages_out += 1
        self.counters.bytes_out += len(obj)
        self._count_backlog(len(obj) + len(prefix) + HEADER, paused)

    # -- closing -------------------------------------------------------------------------------
    def _reject(self, reason: str, detail: str = "") -> None:
        self.core.count_bad(reason, self.identity, f"{detail} [{self.address}]" if detail else f"[{self.address}]")
        self._abort()

    def _refuse(self, reason: str, detail: str = "") -> None:
        """Tell the client why (one message it can log), count it, and close the connection."""
        if not self.closing:
            self._write([self._next_stamp(), "OBJ", serialize({"refused": reason})])
            self.core.count_bad(reason, self.identity, f"{detail} [{self.address}]" if detail else f"[{self.address}]")
            self.closing = True
            self._buf.clear()
            # TLS holds its close alert while a producer is registered (this protocol, until
            # connectionLost): unregister first, or every refused connection waits for the
            # forced close below
            self.transport.unregisterProducer()
            self.transport.loseConnection()  # sends what was written, then closes
            # a client that never reads must not hold the connection open
            self.core.clock.callLater(REFUSE_GRACE_S, self._force_close)

    def _force_close(self) -> None:
        try:
            self.transport.abortConnection()
        except Exception as exc:  # noqa: BLE001 - already closed
            log.debug("abort after refusal: %s", exc)

    def _abort(self) -> None:
        self.closing = True
        self._buf.clear()
        self.transport.abortConnection()

    def _stalled(self) -> None:
        self._stall_timer = None
        if not self.closing and self._need is not None:
            self._reject("stalled_frame", f"{len(self._buf)} of {self._need} bytes of a frame after "
                                          f"{STALL_TIMEOUT_S:g} s")

    def _hello_timeout(self) -> None:
        if not self.alive and not self.closing:
            self._reject("no_hello", "no valid HELLO in time")


class RelayFactory(protocol.Factory):
    def __init__(self, core: RelayCore) -> None:
        self.core = core

    def buildProtocol(self, addr: Any) -> RelayProtocol:
        host = getattr(addr, "host", "?")
        port = getattr(addr, "port", "?")
        return RelayProtocol(self.core, f"{host}:{port}")
