"""The hello/welcome exchange: a worker learns which sequence numbers the trainer has accepted.

A worker numbers its segments itself and the trainer drops a (worker, seq) pair it has seen
before. A worker that lost its numbers (its ``worker_state.json`` is damaged or gone, or it
keeps them in memory only) would start again at 0 and its new segments would be dropped as
duplicates. So each time its link reaches a server, a worker sends ``hello`` (what it is about
to use) and the trainer answers ``welcome`` with the highest sequence number and episode id it
has accepted from that worker; the worker continues above both. A worker whose numbers do not
come from an intact state file numbers nothing until the welcome has come.

Both payloads are msgpack maps with a protocol version ``v`` (``HELLO_VERSION``):

- ``hello`` (worker -> trainer): ``{"v": 1, "next_seq": int, "next_episode": int, "unacked": int}``
- ``welcome`` (trainer -> that worker): ``{"v": 1, "highest_seq": int, "highest_episode": int}``,
  -1 where the trainer has accepted nothing from that worker.

Every number is at most ``rulka.net.wire.MAX_WIRE_INT`` (a highest accepted number below it, so
that the worker can continue above it); anything beyond is bad input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rulka.errors import BadInput
from rulka.net.wire import MAX_WIRE_INT
from rulka.segment import pack, unpack

HELLO_VERSION = 1
_MAX_BYTES = 1024


def _ints(payload: bytes, what: str, keys: tuple[str, ...], minimum: int, maximum: int) -> dict[str, int]:
    try:
        obj: Any = unpack(payload, max_bytes=_MAX_BYTES)
    except Exception as exc:  # noqa: BLE001 - anything a peer sends
        raise BadInput(what, f"not msgpack: {exc}") from None
    if not isinstance(obj, dict):
        raise BadInput(what, "not a map")
    if obj.get("v") != HELLO_VERSION:
        raise BadInput(what, f"protocol version {obj.get('v')!r}, this side speaks {HELLO_VERSION}")
    out = {}
    for key in keys:
        value = obj.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
            raise BadInput(what, f"{key!r} must be an integer from {minimum} to {maximum}")
        out[key] = value
    return out


@dataclass(frozen=True)
class Hello:
    next_seq: int  # the number the worker would give its next segment
    next_episode: int
    unacked: int  # segments it keeps that the trainer has not acknowledged


@dataclass(frozen=True)
class Welcome:
    highest_seq: int  # -1: nothing accepted from this worker
    highest_episode: int


def encode_hello(hello: Hello) -> bytes:
    return pack({"v": HELLO_VERSION, "next_seq": hello.next_seq, "next_episode": hello.next_episode,
                 "unacked": hello.unacked})


def decode_hello(payload: bytes) -> Hello:
    """Raise BadInput on anything but a well-formed ``hello`` of this protocol version."""
    d = _ints(payload, "hello", ("next_seq", "next_episode", "unacked"), 0, MAX_WIRE_INT)
    return Hello(d["next_seq"], d["next_episode"], d["unacked"])


def encode_welcome(welcome: Welcome) -> bytes:
    return pack({"v": HELLO_VERSION, "highest_seq": welcome.highest_seq, "highest_episode": welcome.highest_episode})


def decode_welcome(payload: bytes) -> Welcome:
    """Raise BadInput on anything but a well-formed ``welcome`` of this protocol version."""
    d = _ints(payload, "welcome", ("highest_seq", "highest_episode"), -1, MAX_WIRE_INT - 1)
    return Welcome(d["highest_seq"], d["highest_episode"])
