"""Every message between the roles, one typed record each, with its encode and decode beside it.

Kinds (``Message.kind``) and their payloads (msgpack unless said otherwise):

- ``hello`` (worker -> trainer, on each (re)connection): ``Hello``.
- ``welcome`` (trainer -> that worker): ``Welcome``, the highest sequence number and episode id
  accepted from it.
- ``ack`` (trainer -> one worker): ``Ack``, the sequence numbers in the write-ahead journal.
- ``credit`` (trainer -> one worker): ``Credit``, the next sequence number it may not reach yet.
- ``stats`` (any role -> server and trainer): ``Stats``, a flat map of plain scalars.
- ``weights`` (trainer -> every worker): a signed blob (``rulka.net.weights``) whose header map
  is a ``WeightsHeader``: the actor to build, the trainer's frame count, the ``RunConfig`` a
  worker needs, and the evaluation requests (``EvalRequest``, ``CandidateRequest``).
- ``segment`` (worker -> trainer): a compressed ``Segment`` (``rulka.segment``, ``rulka.compress``).

Why a worker continues above the welcome: it numbers its segments itself and the trainer drops a
(worker, seq) pair it has seen before, so a worker that lost its numbers (``worker_state.json``
damaged, gone, or kept in memory only) would start again at 0 and lose its new segments as
duplicates. A worker whose numbers do not come from an intact state file numbers nothing until
the welcome has come.

Every number in hello and welcome is at most ``rulka.net.wire.MAX_WIRE_INT`` (a highest accepted
number below it); anything beyond is bad input. Every ``decode`` raises ``BadInput`` whose ``reason`` is the message kind on anything malformed;
the receiver counts it and drops the message (a worker: ``WorkerStats.bad_messages``, weights in
``weights_rejected``; the trainer: ``counters["bad_<kind>"]``). The wire forms are those of the
releases before this module, so older peers still understand each other.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, ClassVar

from rulka.errors import BadInput
from rulka.net.wire import MAX_WIRE_INT
from rulka.segment import pack, unpack

PROTOCOL_VERSION = 1  # hello and welcome carry it as "v"
MAX_STATS_BYTES = 8192
MAX_REQUESTED_EPISODES = 100  # a worker runs at most this many requested greedy episodes at once
MAX_START_NOISE = 10.0  # a candidate's start noise over this (metres, degrees) is refused as corrupt
EVAL_POLICY_VERSION = "eval_policy_version"  # segment info: the evaluation version that drove it


def _unpack(kind: str, payload: bytes, max_bytes: int) -> Any:
    try:
        return unpack(payload, max_bytes=max_bytes)
    except Exception as exc:  # noqa: BLE001 - anything a peer sends
        raise BadInput(kind, f"not msgpack: {exc}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _versioned_ints(kind: str, payload: bytes, keys: tuple[str, ...], minimum: int, maximum: int) -> dict[str, int]:
    obj = _unpack(kind, payload, 1024)
    if not isinstance(obj, dict):
        raise BadInput(kind, "not a map")
    if obj.get("v") != PROTOCOL_VERSION:
        raise BadInput(kind, f"protocol version {obj.get('v')!r}, this side speaks {PROTOCOL_VERSION}")
    for key in keys:
        if not _is_int(obj.get(key)) or not minimum <= obj[key] <= maximum:
            raise BadInput(kind, f"{key!r} must be an integer from {minimum} to {maximum}")
    return {key: obj[key] for key in keys}


@dataclasses.dataclass(frozen=True)
class Hello:
    """``{"v": 1, "next_seq": int, "next_episode": int, "unacked": int}``."""

    KIND: ClassVar[str] = "hello"
    next_seq: int  # the number the worker would give its next segment
    next_episode: int
    unacked: int  # segments it keeps that the trainer has not acknowledged

    def encode(self) -> bytes:
        return pack({"v": PROTOCOL_VERSION, "next_seq": self.next_seq, "next_episode": self.next_episode,
                     "unacked": self.unacked})

    @classmethod
    def decode(cls, payload: bytes) -> Hello:
        return cls(**_versioned_ints(cls.KIND, payload, ("next_seq", "next_episode", "unacked"), 0, MAX_WIRE_INT))


@dataclasses.dataclass(frozen=True)
class Welcome:
    """``{"v": 1, "highest_seq": int, "highest_episode": int}``; -1: nothing accepted yet."""

    KIND: ClassVar[str] = "welcome"
    highest_seq: int
    highest_episode: int

    def encode(self) -> bytes:
        return pack({"v": PROTOCOL_VERSION, "highest_seq": self.highest_seq,
                     "highest_episode": self.highest_episode})

    @classmethod
    def decode(cls, payload: bytes) -> Welcome:
        # a highest accepted number below the wire's limit, so that the worker can continue above it
        return cls(**_versioned_ints(cls.KIND, payload, ("highest_seq", "highest_episode"), -1, MAX_WIRE_INT - 1))


@dataclasses.dataclass(frozen=True)
class Ack:
    """A msgpack list of the acknowledged sequence numbers."""

    KIND: ClassVar[str] = "ack"
    seqs: list[int]

    def encode(self) -> bytes:
        return pack(list(self.seqs))

    @classmethod
    def decode(cls, payload: bytes) -> Ack:
        obj = _unpack(cls.KIND, payload, 16 << 20)
        if not isinstance(obj, list) or not all(_is_int(s) for s in obj):
            raise BadInput(cls.KIND, "not a list of ints")
        return cls(obj)


@dataclasses.dataclass(frozen=True)
class Credit:
    """``{"limit": n}``: the worker may number segments below ``n``."""

    KIND: ClassVar[str] = "credit"
    limit: int

    def encode(self) -> bytes:
        return pack({"limit": int(self.limit)})

    @classmethod
    def decode(cls, payload: bytes) -> Credit:
        obj = _unpack(cls.KIND, payload, 1024)
        limit = obj.get("limit") if isinstance(obj, dict) else None
        if not _is_int(limit) or limit < 0:
            raise BadInput(cls.KIND, "must be a map with a non-negative integer 'limit'")
        return cls(limit)


def _not_plain(values: Mapping[Any, Any]) -> list[Any]:
    """The keys that are not strings or whose entries are not plain scalars."""
    return [key for key, value in values.items()
            if not isinstance(key, str) or not isinstance(value, (str, int, float, bool, type(None)))]


@dataclasses.dataclass(frozen=True)
class Stats:
    """A flat map of plain scalars (str, int, float, bool, None), at most ``MAX_STATS_BYTES``
    packed. The keys ``rulka status`` knows are listed in ``rulka.net.stats``."""

    KIND: ClassVar[str] = "stats"
    values: Mapping[str, Any]

    def encode(self) -> bytes:
        """ValueError if an entry is not a plain scalar or the map is too large."""
        if bad := _not_plain(self.values):
            raise ValueError(f"stats entry {bad[0]!r} is not a plain scalar")
        data = pack(dict(self.values))
        if len(data) > MAX_STATS_BYTES:
            raise ValueError(f"stats payload is {len(data)} bytes, over {MAX_STATS_BYTES}")
        return data

    @classmethod
    def decode(cls, payload: bytes) -> Stats:
        if len(payload) > MAX_STATS_BYTES:
            raise BadInput(cls.KIND, "payload too large")
        obj = _unpack(cls.KIND, payload, MAX_STATS_BYTES)
        if not isinstance(obj, dict):
            raise BadInput(cls.KIND, "not a map")
        if bad := _not_plain(obj):
            raise BadInput(cls.KIND, f"entry {bad[0]!r} is not a plain scalar")
        return cls(obj)


# -- what the weights' header carries ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EvalRequest:
    """Greedy test episodes the trainer asks for (``trainer.eval_every_versions``): ``episodes``
    from ``worker`` (empty: any worker). Wire keys ``eval_episodes``, ``eval_worker``."""

    episodes: int
    worker: str = ""

    def to_wire(self) -> dict[str, Any]:
        return {"eval_episodes": self.episodes, "eval_worker": self.worker}

    @classmethod
    def from_wire(cls, header: Mapping[str, Any]) -> EvalRequest | None:
        """None when the header asks for nothing (or asks in a form this side cannot read)."""
        n, worker = header.get("eval_episodes"), header.get("eval_worker", "")
        if not _is_int(n) or n <= 0 or not isinstance(worker, str):
            return None
        return cls(n, worker)

    def episodes_for(self, name: str) -> int:
        """How many of the episodes worker ``name`` runs (0 when they are another worker's)."""
        return min(self.episodes, MAX_REQUESTED_EPISODES) if self.worker in ("", name) else 0


@dataclasses.dataclass(frozen=True)
class CandidateRequest:
    """Greedy episodes of a best-policy candidate (``rulka.trainer.best``) when no greedy map-cycle
    entry drives them: ``episodes`` from ``worker``, from starts moved by up to ``start_noise``
    metres and degrees (0: from the line). Wire keys ``eval_policy_episodes``,
    ``eval_policy_worker``, ``eval_policy_start_noise`` (only when above 0)."""

    episodes: int
    worker: str = ""
    start_noise: float = 0.0

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"eval_policy_episodes": self.episodes, "eval_policy_worker": self.worker}
        if self.start_noise > 0:
            out["eval_policy_start_noise"] = self.start_noise
        return out

    @classmethod
    def from_wire(cls, header: Mapping[str, Any]) -> CandidateRequest | None:
        """None when the header asks for nothing; a start noise out of (0, ``MAX_START_NOISE``]
        or not a number is dropped (the races start from the line)."""
        n, worker = header.get("eval_policy_episodes"), header.get("eval_policy_worker", "")
        if not _is_int(n) or n <= 0 or not isinstance(worker, str):
            return None
        noise = header.get("eval_policy_start_noise")
        ok = isinstance(noise, (int, float)) and not isinstance(noise, bool) and 0.0 < noise <= MAX_START_NOISE
        return cls(n, worker, float(noise) if ok else 0.0)

    def episodes_for(self, name: str) -> int:
        return min(self.episodes, MAX_REQUESTED_EPISODES) if self.worker in ("", name) else 0


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The config sections a worker needs, as JSON text (a config tree is deeper than the blob
    header's plain-data check allows): wire key ``run_config_json``. A plain ``run_config``
    mapping (hand-written policy files) is read too. The one place a carried config is parsed."""

    text: str

    @classmethod
    def of(cls, sections: Mapping[str, Any]) -> RunConfig:
        return cls(json.dumps(dict(sections), default=str))

    def to_wire(self) -> dict[str, Any]:
        return {"run_config_json": self.text}

    @classmethod
    def from_wire(cls, header: Mapping[str, Any]) -> RunConfig | None:
        if isinstance(header.get("run_config_json"), str):
            return cls(header["run_config_json"])
        if isinstance(header.get("run_config"), Mapping):
            return cls.of(header["run_config"])
        return None

    def sections(self) -> dict[str, Any]:
        """The parsed sections; BadInput (reason ``run_config``) when the text is not a JSON map."""
        try:
            data = json.loads(self.text)
        except ValueError as exc:
            raise BadInput("run_config", f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise BadInput("run_config", "not a mapping of sections")
        return data

    def build(self) -> Any:
        """The validated ``RulkaConfig``: BadInput when unreadable, ConfigError when invalid."""
        from rulka.config import config_from_dict

        return config_from_dict(self.sections())


_HEADER_KEYS = frozenset({"actor", "kwargs", "frames_played", "run_config_json", "run_config", "eval_policy",
                          "eval_episodes", "eval_worker", "eval_policy_episodes", "eval_policy_worker",
                          "eval_policy_start_noise"})


@dataclasses.dataclass(frozen=True)
class WeightsHeader:
    """What a weights blob says besides its tensors (formerly the "actor spec"): the actor a
    worker builds for them (``actor``: a registry name or ``module:Class``, with ``kwargs``), the
    trainer's frame count (``frames_played``: env schedules follow it), the ``run_config`` a
    worker without one takes, and the evaluation requests: ``evaluation`` (greedy test episodes),
    ``candidate`` (the version is a best-policy candidate, wire key ``eval_policy``) with
    ``candidate_request`` (who drives its greedy episodes). ``extra``: any other plain entry an
    agent's actor spec carries, kept as it is. A policy file stores the same map (without the
    requests) as its ``actor_spec``; the blob header keeps that key on the wire too."""

    WIRE_KEY: ClassVar[str] = "actor_spec"
    actor: str | None = None
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    frames_played: int | None = None
    run_config: RunConfig | None = None
    evaluation: EvalRequest | None = None
    candidate: bool = False
    candidate_request: CandidateRequest | None = None
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_actor_spec(cls, spec: Mapping[str, Any], **fields: Any) -> WeightsHeader:
        """An agent's ``actor_spec()`` (or a policy file's) plus ``fields``."""
        return dataclasses.replace(cls.from_wire(spec), **fields)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        if self.actor is not None:
            out["actor"] = self.actor
        if self.actor is not None or self.kwargs:
            out["kwargs"] = dict(self.kwargs)
        if self.frames_played is not None:
            out["frames_played"] = int(self.frames_played)
        for part in (self.run_config, self.evaluation, self.candidate_request):
            if part is not None:
                out.update(part.to_wire())
        if self.candidate:
            out["eval_policy"] = True
        return out

    def policy_spec(self) -> dict[str, Any]:
        """The map a policy file keeps: this header without its evaluation requests."""
        return dataclasses.replace(self, evaluation=None, candidate=False, candidate_request=None).to_wire()

    @classmethod
    def from_wire(cls, header: Mapping[str, Any]) -> WeightsHeader:
        """BadInput (reason ``weights``) when ``actor`` or ``kwargs`` are of the wrong type; an
        evaluation request or frame count this side cannot read is left out (the weights still load)."""
        if not isinstance(header, Mapping):
            raise BadInput("weights", "header is not a map")
        actor, kwargs = header.get("actor"), header.get("kwargs", {})
        if actor is not None and not isinstance(actor, str):
            raise BadInput("weights", "'actor' is not a name")
        if not isinstance(kwargs, Mapping):
            raise BadInput("weights", "'kwargs' is not a map")
        frames = header.get("frames_played")
        return cls(actor=actor, kwargs=dict(kwargs),
                   frames_played=frames if _is_int(frames) and frames >= 0 else None,
                   run_config=RunConfig.from_wire(header), evaluation=EvalRequest.from_wire(header),
                   candidate=header.get("eval_policy") is True,
                   candidate_request=CandidateRequest.from_wire(header),
                   extra={k: v for k, v in header.items() if k not in _HEADER_KEYS})


def eval_policy_version(info: Mapping[str, Any]) -> int | None:
    """The evaluation version a segment's episode was driven by (segment info), or None."""
    version = info.get(EVAL_POLICY_VERSION)
    return version if _is_int(version) else None
