"""The wire format: plain msgpack frames, signed envelopes, chunking and bounded reassembly.

Two layers cross the network:

1. tlspyo frames. tlspyo calls a serializer/deserializer pair on its own control tuples
   (``(stamp, cmd, dest, obj)``) and on every object sent. ``serialize`` / ``deserialize`` here
   are that pair: msgpack with raw bytes, no extension types, bounded sizes. ``deserialize``
   never raises: on garbage it returns a ``BadFrame`` (so a hostile peer cannot kill tlspyo's
   receiver thread, and nothing is ever unpickled).

2. Envelopes: the object each endpoint sends is a msgpack map carrying one chunk of one message::

     {"v": 1, "k": kind, "s": sender, "n": counter, "to": target, "c": chunk_count,
      "L": payload_len, "h": sha256(payload), "sig": Ed25519 signature, "i": chunk_index,
      "d": chunk bytes}

   ``sig`` signs ``[v, k, s, n, to, c, L, h]`` with the sender's key, so the first chunk already
   proves who sent the message (before any buffering), and the hash ties every chunk to it.

   A sender with several messages queued signs them together (``make_batch_envelopes``): each
   of their envelopes also carries ``"B"``, the list of the batch's header digests
   (``sha256`` of each message's signed fields), and ``sig`` signs ``["rulka-batch/1", B]``
   instead. A receiver checks that its envelope's own header digest is in ``B`` and verifies the
   signature once per batch (``Reassembler`` keeps a bounded cache of verified batches), so one
   Ed25519 signature and one verification cover up to ``MAX_BATCH`` messages; each envelope
   still proves its sender alone, whichever of the batch's messages are lost on the way.
   ``n`` is the sender's message counter: strictly increasing per (sender, kind) for the
   lifetime of the keys (``MessageCounter`` derives it from the clock, so it keeps increasing
   across restarts). ``Reassembler`` rejects a message whose ``n`` is not above the last one
   accepted from that (sender, kind): a replayed message is dropped and counted. B2's
   worker/trainer logic needs nothing more for replay protection; its (worker, seq) dedupe
   covers resends, which are new messages with new counters.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from rulka.errors import BadInput
from rulka.net.link import Message

WIRE_VERSION = 1
DEFAULT_CHUNK_BYTES = 256 * 1024
MAX_FRAME_BYTES = 64 * 1024 * 1024  # a single tlspyo frame; chunks keep real frames far below
_SIGNED_FIELDS = ("v", "k", "s", "n", "to", "c", "L", "h")
MAX_BATCH = 32  # messages one signature may cover
_BATCH_DOMAIN = "rulka-batch/1"
VERIFIED_BATCHES = 64  # batch signatures a Reassembler remembers as verified
# The largest sequence number, episode id or credit limit that crosses the wire. msgpack itself
# carries integers from -2**63 to 2**64 - 1; the signed 64-bit maximum leaves headroom for what
# a receiver adds to a number it was sent (the trainer's credit on top of a worker's next
# sequence number) and fits any reader's int64. Numbers from a file or a peer beyond it are bad
# input, never a reason to count past it.
MAX_WIRE_INT = 2**63 - 1


# -- layer 1: the tlspyo serializer pair ---------------------------------------------------------
@dataclass(frozen=True)
class BadFrame:
    """What ``deserialize`` returns for bytes it cannot read (instead of raising)."""

    reason: str


def _reject_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"extension type {code} not allowed")


def serialize(obj: Any) -> bytes:
    """tlspyo serializer: plain data (None, bool, int, float, str, bytes, list/tuple, dict) only."""
    return msgpack.packb(obj, use_bin_type=True, datetime=False)


def deserialize(data: bytes) -> Any:
    """tlspyo deserializer: msgpack -> plain data, or a ``BadFrame`` (never raises)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        return BadFrame("not bytes")
    if len(data) > MAX_FRAME_BYTES:
        return BadFrame("frame too large")
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, ext_hook=_reject_ext,
                               use_list=True, timestamp=0)
    except Exception as exc:  # msgpack raises several types on garbage; all mean "bad frame"
        return BadFrame(f"msgpack: {type(exc).__name__}")


# -- layer 2: envelopes ---------------------------------------------------------------------------
class MessageCounter:
    """Per-sender message counter: strictly increasing, and above any value used by an earlier
    run of the same sender (it starts from the clock in nanoseconds)."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, time.time_ns())
            return self._last


def _signed_bytes(header: dict[str, Any]) -> bytes:
    return serialize([header[k] for k in _SIGNED_FIELDS])


def header_digest(header: dict[str, Any]) -> bytes:
    """sha256 of an envelope's signed fields: what a batch signature lists for its message."""
    return hashlib.sha256(_signed_bytes(header)).digest()


def _batch_signed_bytes(digests: Sequence[bytes]) -> bytes:
    return serialize([_BATCH_DOMAIN, list(digests)])


def make_envelopes(kind: str, sender: str, counter: int, payload: bytes, *,
                   signing_key: Ed25519PrivateKey, target: str = "",
                   chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[dict[str, Any]]:
    """Cut ``payload`` into envelopes signed by ``signing_key``, at most ``chunk_bytes`` data each."""
    [envelopes] = make_batch_envelopes([(kind, counter, payload, target)], sender, signing_key=signing_key,
                                       chunk_bytes=chunk_bytes)
    return envelopes


def make_batch_envelopes(messages: Sequence[tuple[str, int, bytes, str]], sender: str, *,
                         signing_key: Ed25519PrivateKey,
                         chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> list[Iterator[dict[str, Any]]]:
    """Envelopes of several messages ``(kind, counter, payload, target)`` under one signature.

    Returns one iterator of envelopes per message, in order (chunks are cut as they are read).
    One message gets the single-message form (no ``"B"``); 2 to ``MAX_BATCH`` share one batch
    signature (see the module docstring)."""
    if chunk_bytes <= 0:
        raise ValueError("chunk_bytes must be positive")
    if not 1 <= len(messages) <= MAX_BATCH:
        raise ValueError(f"a batch holds 1 to {MAX_BATCH} messages, not {len(messages)}")
    headers: list[dict[str, Any]] = []
    for kind, counter, payload, target in messages:
        headers.append({"v": WIRE_VERSION, "k": kind, "s": sender, "n": counter, "to": target,
                        "c": max(1, -(-len(payload) // chunk_bytes)), "L": len(payload),
                        "h": hashlib.sha256(payload).digest()})
    if len(headers) == 1:
        headers[0]["sig"] = signing_key.sign(_signed_bytes(headers[0]))
    else:
        digests = [header_digest(h) for h in headers]
        sig = signing_key.sign(_batch_signed_bytes(digests))
        for h in headers:
            h["sig"], h["B"] = sig, digests
    return [_chunks(h, payload, chunk_bytes) for h, (_, _, payload, _) in zip(headers, messages, strict=True)]


def _chunks(header: dict[str, Any], payload: bytes, chunk_bytes: int) -> Iterator[dict[str, Any]]:
    view = memoryview(payload)
    for i in range(header["c"]):
        env = dict(header)
        env["i"] = i
        env["d"] = bytes(view[i * chunk_bytes:(i + 1) * chunk_bytes])
        yield env


_ENV_TYPES: dict[str, type | tuple[type, ...]] = {
    "v": int, "k": str, "s": str, "n": int, "to": str, "c": int, "L": int, "h": bytes,
    "sig": bytes, "i": int, "d": bytes,
}
_ENV_KEYS = frozenset(_ENV_TYPES)
_ENV_KEYS_BATCH = _ENV_KEYS | {"B"}  # "B": a batch signature's digest list (optional)


def check_envelope(env: Any, *, max_message_bytes: int) -> dict[str, Any]:
    """Check an envelope's shape and bounds (not its signature); raise BadInput."""
    if isinstance(env, BadFrame):
        raise BadInput("malformed", env.reason)
    if not isinstance(env, dict) or not _ENV_KEYS <= env.keys() <= _ENV_KEYS_BATCH:
        raise BadInput("malformed", "not an envelope")
    for key, typ in _ENV_TYPES.items():
        value = env[key]
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise BadInput("malformed", f"field {key!r} has type {type(value).__name__}")
    batch = env.get("B")
    if batch is not None and not (isinstance(batch, list) and 2 <= len(batch) <= MAX_BATCH
                                  and all(isinstance(d, bytes) and len(d) == 32 for d in batch)):
        raise BadInput("malformed", "bad batch digest list")
    if env["v"] != WIRE_VERSION:
        raise BadInput("version", f"wire version {env['v']} (this build speaks {WIRE_VERSION})")
    if not 0 <= env["L"] <= max_message_bytes:
        raise BadInput("oversized", f"message of {env['L']} bytes (limit {max_message_bytes})")
    if not 1 <= env["c"] <= max(1, env["L"]) or not 0 <= env["i"] < env["c"]:
        raise BadInput("malformed", "bad chunk index/count")
    if len(env["d"]) > env["L"] or len(env["h"]) != 32 or len(env["s"]) > 64 or len(env["k"]) > 32:
        raise BadInput("malformed", "field out of bounds")
    return env


def verify_header(env: dict[str, Any], key: Ed25519PublicKey) -> bool:
    """True if ``env``'s signature verifies against ``key`` (either form, no cache)."""
    batch = env.get("B")
    try:
        if batch is None:
            key.verify(env["sig"], _signed_bytes(env))
        elif header_digest(env) not in batch:
            return False
        else:
            key.verify(env["sig"], _batch_signed_bytes(batch))
        return True
    except InvalidSignature:
        return False


@dataclass
class _Partial:
    started: float
    count: int
    length: int
    digest: bytes
    kind: str
    target: str
    chunks: dict[int, bytes] = field(default_factory=dict)
    size: int = 0


class Reassembler:
    """Turns envelopes back into ``Message``s with bounded memory.

    - ``sender_key(name)`` returns the public key a sender must verify against, or None for an
      unknown / revoked sender (rejected: reason ``unknown_sender``).
    - A message over ``max_message_bytes`` is refused from its first chunk (``oversized``).
    - At most ``max_partials`` messages are being assembled at once; a new one beyond that evicts
      the oldest (``evicted``). Partials idle over ``partial_timeout_s`` are dropped (``timeout``).
    - A chunk seen twice is ignored (``duplicate_chunk``); chunks may arrive in any order.
    - A completed message whose bytes do not hash to the signed digest is dropped (``tampered``).
    - A message whose counter is below the last accepted one of that (sender, kind) is dropped
      (``replayed``); the last accepted one seen again (the relay re-sends the retained weights
      after a reconnect) is dropped as ``duplicate``, which is benign.

    ``feed`` returns a complete ``Message``, or None while one is incomplete; it raises BadInput
    with one of the reasons above. ``counters`` counts every reason.
    """

    def __init__(self, sender_key: Callable[[str], Ed25519PublicKey | None], *,
                 max_message_bytes: int = 256 * 1024 * 1024, max_partials: int = 16,
                 partial_timeout_s: float = 60.0) -> None:
        self._sender_key = sender_key
        self.max_message_bytes = max_message_bytes
        self.max_partials = max_partials
        self.partial_timeout_s = partial_timeout_s
        self._partials: dict[tuple[str, str, int], _Partial] = {}
        self._last_counter: dict[tuple[str, str], int] = {}
        # (sender, sha256 of a batch's signed bytes) -> the key it verified against
        self._verified: OrderedDict[tuple[str, bytes], Ed25519PublicKey] = OrderedDict()
        self.counters: dict[str, int] = {}

    def _bad(self, reason: str, detail: str = "") -> BadInput:
        self.counters[reason] = self.counters.get(reason, 0) + 1
        return BadInput(reason, detail)

    def expire(self, now: float | None = None) -> int:
        """Drop partials idle for longer than the timeout; return how many."""
        now = time.monotonic() if now is None else now
        stale = [k for k, p in self._partials.items() if now - p.started > self.partial_timeout_s]
        for k in stale:
            del self._partials[k]
        if stale:
            self.counters["timeout"] = self.counters.get("timeout", 0) + len(stale)
        return len(stale)

    def _verify(self, env: dict[str, Any], pub: Ed25519PublicKey) -> bool:
        """``verify_header``, with one Ed25519 verification per batch signature (cached)."""
        batch = env.get("B")
        if batch is None:
            return verify_header(env, pub)
        if header_digest(env) not in batch:
            return False
        signed = _batch_signed_bytes(batch)
        key = (env["s"], hashlib.sha256(signed).digest())
        if self._verified.get(key) is pub:  # the same key (a reloaded or revoked one is not)
            self._verified.move_to_end(key)
            return True
        try:
            pub.verify(env["sig"], signed)
        except InvalidSignature:
            return False
        self._verified[key] = pub
        while len(self._verified) > VERIFIED_BATCHES:
            self._verified.popitem(last=False)
        return True

    def pending_bytes(self) -> int:
        return sum(p.size for p in self._partials.values())

    def feed(self, env: Any, now: float | None = None) -> Message | None:
        now = time.monotonic() if now is None else now
        try:
            env = check_envelope(env, max_message_bytes=self.max_message_bytes)
        except BadInput as exc:
            raise self._bad(exc.reason, str(exc)) from None
        sender, kind, n = env["s"], env["k"], env["n"]
        key = (sender, kind, n)
        part = self._partials.get(key)
        if part is None:
            last = self._last_counter.get((sender, kind), -1)
            if n == last:  # the message just accepted, again: a relay re-delivering what it retains
                raise self._bad("duplicate", f"{kind} #{n} from {sender!r} again")
            if n < last:
                raise self._bad("replayed", f"{kind} #{n} from {sender!r}")
            pub = self._sender_key(sender)
            if pub is None:
                raise self._bad("unknown_sender", f"{sender!r} is not enrolled (or revoked)")
            if not self._verify(env, pub):
                raise self._bad("bad_signature", f"{kind} from {sender!r}")
            self.expire(now)
            while len(self._partials) >= self.max_partials:
                oldest = min(self._partials, key=lambda k: self._partials[k].started)
                del self._partials[oldest]
                self.counters["evicted"] = self.counters.get("evicted", 0) + 1
            self._last_counter[(sender, kind)] = n
            part = _Partial(now, env["c"], env["L"], env["h"], kind, env["to"])
            self._partials[key] = part
        elif (env["c"], env["L"], env["h"], env["to"]) != (part.count, part.length, part.digest, part.target):
            raise self._bad("malformed", "chunk header differs from its message")
        i = env["i"]
        if i in part.chunks:
            raise self._bad("duplicate_chunk", f"chunk {i} of {kind} #{n}")
        if part.size + len(env["d"]) > part.length:
            del self._partials[key]
            raise self._bad("malformed", "chunks longer than the announced length")
        part.chunks[i] = env["d"]
        part.size += len(env["d"])
        part.started = now
        if len(part.chunks) < part.count:
            return None
        del self._partials[key]
        payload = b"".join(part.chunks[j] for j in range(part.count))
        if len(payload) != part.length or hashlib.sha256(payload).digest() != part.digest:
            raise self._bad("tampered", f"{kind} #{n} from {sender!r} does not match its signed digest")
        return Message(kind, sender, payload)


# -- joining the relay ---------------------------------------------------------------------------
# tlspyo sends a client's group list in its HELLO; rulka adds one identity token so the relay
# knows who is connecting (the password alone is shared by everyone) and can allow each identity
# only its own channels. Version 2 (``auth2:<name>:<signature>``) signs a nonce the relay sent
# in its own HELLO (``{"v": 2, "nonce": bytes}``), so a token captured from one connection
# proves nothing on another. Version 1 (``auth:``) signed the name alone: a captured token could
# be replayed, and a relay of this version refuses it (``outdated_client``).
JOIN_PREFIX = "auth:"
_JOIN_DOMAIN = b"rulka-relay-join\0"
CHALLENGE_PREFIX = "auth2:"
_CHALLENGE_DOMAIN = b"rulka-relay-join/2\0"
JOIN_VERSION = 2
NONCE_BYTES = 16


def relay_hello(nonce: bytes) -> dict[str, Any]:
    """What the relay sends in its HELLO frame: the protocol version and this connection's nonce."""
    return {"v": JOIN_VERSION, "nonce": nonce}


def hello_nonce(obj: Any) -> bytes | None:
    """The nonce of a relay's HELLO object (None: a relay that sends none, version 1)."""
    if isinstance(obj, dict) and obj.get("v") == JOIN_VERSION and isinstance(obj.get("nonce"), bytes):
        nonce = obj["nonce"]
        return nonce if len(nonce) == NONCE_BYTES else None
    return None


def _challenge_bytes(identity: str, nonce: bytes) -> bytes:
    return _CHALLENGE_DOMAIN + nonce + identity.encode()


def challenge_token(identity: str, signing_key: Ed25519PrivateKey, nonce: bytes) -> str:
    """The HELLO entry proving ``identity`` on the connection whose relay sent ``nonce``."""
    return f"{CHALLENGE_PREFIX}{identity}:{signing_key.sign(_challenge_bytes(identity, nonce)).hex()}"


def parse_challenge_token(entry: str) -> tuple[str, bytes] | None:
    """``(identity, signature)`` from a version-2 HELLO entry, or None if it is not one."""
    return _parse_token(entry, CHALLENGE_PREFIX)


def verify_challenge_token(identity: str, signature: bytes, key: Ed25519PublicKey, nonce: bytes) -> bool:
    try:
        key.verify(signature, _challenge_bytes(identity, nonce))
        return True
    except InvalidSignature:
        return False


def join_token(identity: str, signing_key: Ed25519PrivateKey) -> str:
    """The version-1 HELLO entry (a relay that sends no nonce: an older ``rulka-server``)."""
    return f"{JOIN_PREFIX}{identity}:{signing_key.sign(_JOIN_DOMAIN + identity.encode()).hex()}"


def parse_join_token(entry: str) -> tuple[str, bytes] | None:
    """``(identity, signature)`` from a version-1 HELLO entry, or None if it is not a token."""
    return _parse_token(entry, JOIN_PREFIX)


def _parse_token(entry: str, prefix: str) -> tuple[str, bytes] | None:
    if not entry.startswith(prefix):
        return None
    identity, _, sig_hex = entry[len(prefix):].rpartition(":")
    try:
        sig = bytes.fromhex(sig_hex)
    except ValueError:
        return None
    return (identity, sig) if identity and len(sig) == 64 else None


def verify_join_token(identity: str, signature: bytes, key: Ed25519PublicKey) -> bool:
    try:
        key.verify(signature, _JOIN_DOMAIN + identity.encode())
        return True
    except InvalidSignature:
        return False
