"""The link between a role and the server: the one seam between the roles' logic and transport.

``rulka.net`` implements it over TLS (tlspyo); an in-process implementation serves the
one-process debug mode and unit tests. Payloads are bytes; authentication of who sent what is
the link's job (``Message.sender`` is an authenticated identity, never a claim from the payload).

Message kinds (their payloads: ``rulka.net.messages``):
- ``segment``: worker -> trainer, a compressed Segment.
- ``ack``: trainer -> one worker, the sequence numbers received (msgpack list of ints).
- ``weights``: trainer -> every worker, a signed WeightsBlob; the server retains the latest
  and gives it to a worker as soon as it connects.
- ``stats``: any role -> server, a msgpack map of counters (for ``rulka status``).
- ``credit``: trainer -> one worker, the next sequence number it may not reach yet.
- ``hello``: worker -> trainer on each (re)connection, and ``welcome``: trainer -> that worker,
  the highest sequence number and episode id accepted from it.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod

# kinds only the trainer may send (a worker's link refuses to send them)
TRAINER_ONLY_KINDS = frozenset({"weights", "ack", "credit", "welcome"})


@dataclasses.dataclass(frozen=True)
class Message:
    kind: str
    sender: str  # authenticated identity: "trainer" or the worker's enrolled name
    payload: bytes


class LinkClosed(Exception):
    """The link was closed by ``close()``; no further sends are possible."""


class OutboxFull(Exception):
    """``send`` could not queue the message: the bounded outbox is full. Nothing was queued;
    the caller applies its policy (retry later, block collection, or drop and count)."""


class WorkerLink(ABC):
    """A worker's side. ``send`` never blocks the env loop for long; it queues."""

    worker_id: str

    @abstractmethod
    def send(self, kind: str, payload: bytes) -> None: ...

    @abstractmethod
    def receive(self, timeout: float = 0.0) -> list[Message]:
        """Messages for this worker (weights, acks), waiting at most ``timeout`` seconds."""

    @abstractmethod
    def connected(self) -> bool: ...

    @abstractmethod
    def close(self) -> None: ...


class TrainerLink(ABC):
    @abstractmethod
    def broadcast(self, kind: str, payload: bytes) -> None:
        """To every worker, now and (for ``weights``) to those that connect later."""

    @abstractmethod
    def send_to(self, worker_id: str, kind: str, payload: bytes) -> None: ...

    @abstractmethod
    def receive(self, timeout: float = 0.0) -> list[Message]:
        """Messages from workers (segments, stats), waiting at most ``timeout`` seconds."""

    @abstractmethod
    def connected(self) -> bool: ...

    def server_session(self) -> int:
        """A number that changes each time the link reaches a (new) server connection. A server
        that restarts quickly may never look disconnected, yet it has lost the weights it retained
        for late joiners: the trainer sends them again when this number changes."""
        return 0

    @abstractmethod
    def close(self) -> None: ...
