"""Every message between the roles (rulka.net.messages): each round-trips through its encode and
decode in the wire form older peers speak, and each malformed one is refused and counted by the
role that receives it."""

from __future__ import annotations

import json

import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import ConstActor, CountingAgent, ListMemory

from rulka.errors import BadInput, ConfigError
from rulka.net.link import Message
from rulka.net.local import LocalHub
from rulka.net.messages import (
    MAX_STATS_BYTES,
    Ack,
    CandidateRequest,
    Credit,
    EvalRequest,
    Hello,
    RunConfig,
    Stats,
    WeightsHeader,
    Welcome,
    eval_policy_version,
)
from rulka.net.weights import WeightsBlob, decode_weights, encode_weights
from rulka.segment import pack, unpack
from rulka.trainer.trainer import Trainer
from rulka.worker.worker import Worker

KEY = Ed25519PrivateKey.generate()

# each message, and the plain data it is on the wire (what the releases before this module sent)
MESSAGES = [
    (Hello(3, 1, 2), {"v": 1, "next_seq": 3, "next_episode": 1, "unacked": 2}),
    (Welcome(-1, -1), {"v": 1, "highest_seq": -1, "highest_episode": -1}),
    (Welcome(41, 9), {"v": 1, "highest_seq": 41, "highest_episode": 9}),
    (Ack([0, 5, 7]), [0, 5, 7]),
    (Ack([]), []),
    (Credit(12), {"limit": 12}),
    (Stats({"episodes": 4, "samples_per_s": 20.5, "map": "a", "test": False, "none": None}),
     {"episodes": 4, "samples_per_s": 20.5, "map": "a", "test": False, "none": None}),
]


@pytest.mark.parametrize(("message", "wire"), MESSAGES, ids=lambda m: type(m).__name__)
def test_each_message_round_trips_in_its_wire_form(message, wire):
    data = message.encode()
    assert unpack(data) == wire
    assert type(message).decode(data) == message
    assert type(message).decode(pack(wire)) == message


BAD = [
    (Hello, [b"\xc1", pack([1]), pack({"v": 2, "next_seq": 0, "next_episode": 0, "unacked": 0}),
             pack({"v": 1, "next_seq": -1, "next_episode": 0, "unacked": 0}),
             pack({"v": 1, "next_seq": True, "next_episode": 0, "unacked": 0}),
             pack({"v": 1, "next_seq": 0, "next_episode": 0})]),
    (Welcome, [b"", pack({"v": 1}), pack({"v": 1, "highest_seq": -2, "highest_episode": 0}),
               pack({"v": 1, "highest_seq": 1.5, "highest_episode": 0})]),
    (Ack, [b"\xc1", pack({"seqs": [1]}), pack([1, "2"]), pack([True]), pack([1.0])]),
    (Credit, [b"\xc1", pack([7]), pack({"limit": -1}), pack({"limit": True}), pack({"limit": "7"}), pack({})]),
    (Stats, [b"\xc1", pack([1]), pack({"a": [1, 2]}), pack({"a": {"b": 1}}), pack({1: 2}),
             pack({"a": "x" * (MAX_STATS_BYTES + 1)})]),
]


@pytest.mark.parametrize(("record", "payloads"), BAD, ids=lambda r: getattr(r, "__name__", ""))
def test_each_malformed_message_is_refused_with_its_kind(record, payloads):
    for payload in payloads:
        with pytest.raises(BadInput) as info:
            record.decode(payload)
        assert info.value.reason == record.KIND, payload


def test_a_stats_map_that_is_not_plain_is_refused_at_encode():
    for values in ({"a": [1]}, {"a": "x" * MAX_STATS_BYTES}):
        with pytest.raises(ValueError):
            Stats(values).encode()


def test_malformed_messages_to_a_worker_are_counted_and_change_nothing():
    """credit, welcome, ack and an unknown kind: bad_messages; weights: weights_rejected."""
    hub = LocalHub()
    trainer = hub.trainer_link()
    worker = Worker(None, hub.worker_link("pc1"), actor=ConstActor(),
                    weights_decoder=lambda d: decode_weights(d, KEY.public_key()))
    bad = [("credit", pack({"limit": -3})), ("welcome", pack({"v": 1, "highest_seq": 5})),
           ("ack", pack({"1": 2})), ("what", b"x")]
    for n, (kind, payload) in enumerate(bad, start=1):
        trainer.send_to("pc1", kind, payload)
        worker.pump()
        assert worker.stats.bad_messages == n, kind
    assert worker.counters.next_seq == 0 and not worker.network.gate.welcomed.is_set()
    assert worker.network.gate.over_limit(0)[0] is False  # no credit limit taken from garbage
    headers = ({"actor": 3}, {"kwargs": [1]})  # signed, but not a header a worker can read
    for n, header in enumerate(headers, start=1):
        trainer.broadcast("weights", encode_weights(WeightsBlob("run", n, {"w": torch.zeros(1)}, header), KEY))
        worker.pump()
        assert worker.stats.weights_rejected == n
    trainer.broadcast("weights", b"\x00not weights")
    worker.pump()
    assert worker.stats.weights_rejected == 3 and worker.network.inbox.take() is None
    worker.close()


def test_malformed_messages_to_the_trainer_are_counted_by_kind():
    hub = LocalHub()
    trainer = Trainer(None, hub.trainer_link(), agent=CountingAgent(), memory=ListMemory(), signing_key=KEY)
    trainer.ingest([Message("hello", "pc1", pack({"v": 1})), Message("stats", "pc1", pack({"a": [1]})),
                    Message("stats", "pc2", b"\xc1")])
    assert trainer.state.counters["bad_hello"] == 1 and trainer.state.counters["bad_stats"] == 2
    assert "pc1" not in trainer.workers.stats
    trainer.close()


# -- the weights' header ----------------------------------------------------------------------------
FULL = WeightsHeader(actor="simple_dqn", kwargs={"obs_dim": 4, "n_actions": 2}, frames_played=1234,
                     run_config=RunConfig.of({"environment": {"backend": "gym", "gym_id": "CartPole-v1"}}),
                     evaluation=EvalRequest(2, "pc1"), candidate=True,
                     candidate_request=CandidateRequest(3, "pc2", 0.3), extra={"note": "kept"})


def test_the_weights_header_round_trips_through_a_signed_blob_in_its_old_wire_form():
    blob = decode_weights(encode_weights(WeightsBlob("run", 1, {"w": torch.zeros(1)}, FULL.to_wire()), KEY),
                          KEY.public_key())
    assert WeightsHeader.from_wire(blob.header) == FULL
    assert blob.header == {
        "actor": "simple_dqn", "kwargs": {"obs_dim": 4, "n_actions": 2}, "frames_played": 1234,
        "run_config_json": '{"environment": {"backend": "gym", "gym_id": "CartPole-v1"}}',
        "eval_episodes": 2, "eval_worker": "pc1", "eval_policy": True, "eval_policy_episodes": 3,
        "eval_policy_worker": "pc2", "eval_policy_start_noise": 0.3, "note": "kept"}
    assert FULL.run_config.build().environment.gym_id == "CartPole-v1"
    # a policy file keeps the header without its requests
    assert WeightsHeader.from_wire(FULL.policy_spec()) == WeightsHeader(
        actor="simple_dqn", kwargs={"obs_dim": 4, "n_actions": 2}, frames_played=1234,
        run_config=FULL.run_config, extra={"note": "kept"})


def test_a_header_with_requests_this_side_cannot_read_still_loads_without_them():
    header = WeightsHeader.from_wire({"actor": "a", "frames_played": -1, "eval_episodes": "2",
                                      "eval_policy": 1, "eval_policy_episodes": 0,
                                      "eval_policy_start_noise": 0.3})
    assert header == WeightsHeader(actor="a")
    for noise in (1e9, -1.0, "0.3", True, 0):
        request = CandidateRequest.from_wire({"eval_policy_episodes": 1, "eval_policy_start_noise": noise})
        assert request == CandidateRequest(1, "", 0.0)
    assert EvalRequest(500, "").episodes_for("pc1") == 100 and EvalRequest(2, "pc2").episodes_for("pc1") == 0
    with pytest.raises(BadInput, match="weights"):
        WeightsHeader.from_wire({"actor": ["x"]})


def test_the_run_config_is_read_from_json_or_a_plain_map_and_refused_when_unreadable():
    sections = {"worker": {"segment_max_steps": 7}}
    assert RunConfig.from_wire({"run_config": sections}).build().worker.segment_max_steps == 7
    assert RunConfig.from_wire({"run_config_json": json.dumps(sections)}).sections() == sections
    assert RunConfig.from_wire({}) is None
    for text in ("{not json", "[1, 2]"):
        with pytest.raises(BadInput) as info:
            RunConfig(text).build()
        assert info.value.reason == "run_config"
    with pytest.raises(ConfigError):
        RunConfig.of({"worker": {"no_such_key": 1}}).build()


def test_the_evaluation_version_tag_of_a_segment():
    assert eval_policy_version({"eval_policy_version": 3}) == 3
    assert eval_policy_version({"eval_policy_version": True}) is None and eval_policy_version({}) is None
