from __future__ import annotations

import hashlib
import pickle

import msgpack
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rulka.errors import BadInput
from rulka.net.wire import (
    MAX_BATCH,
    BadFrame,
    MessageCounter,
    Reassembler,
    challenge_token,
    check_envelope,
    deserialize,
    hello_nonce,
    join_token,
    make_batch_envelopes,
    make_envelopes,
    parse_challenge_token,
    parse_join_token,
    relay_hello,
    serialize,
    verify_challenge_token,
    verify_join_token,
)

ALICE = Ed25519PrivateKey.generate()
MALLORY = Ed25519PrivateKey.generate()


def keys(name):
    return {"alice": ALICE.public_key()}.get(name)


def envs(payload, n=1, chunk=4, key=ALICE, sender="alice", kind="segment"):
    return list(make_envelopes(kind, sender, n, payload, signing_key=key, chunk_bytes=chunk))


# -- serializer pair ---------------------------------------------------------------------------
def test_tlspyo_frames_round_trip_as_plain_data():
    frame = (7, "OBJ", {"trainer": 1}, b"\x00\xffraw")
    assert deserialize(serialize(frame)) == [7, "OBJ", {"trainer": 1}, b"\x00\xffraw"]
    assert deserialize(serialize(None)) is None


def test_serializer_refuses_objects():
    class Thing:
        pass

    with pytest.raises(TypeError):
        serialize(Thing())


class Boom:
    def __reduce__(self):
        return (exec, ("raise SystemExit('pickle executed')",))


@pytest.mark.parametrize("data", [
    pickle.dumps(Boom()),
    b"\xc1\xc1\xc1",  # reserved msgpack byte
    msgpack.packb(msgpack.ExtType(5, b"x")),
    msgpack.packb({1: "int key"}),
    b"",
    "not bytes",
])
def test_deserializer_returns_badframe_never_raises(data):
    assert isinstance(deserialize(data), BadFrame)


def test_pickle_payload_is_not_executed():
    assert isinstance(deserialize(pickle.dumps(Boom())), BadFrame)


# -- envelopes and reassembly --------------------------------------------------------------------
def test_chunking_sizes_and_reassembly_in_order():
    payload = bytes(range(10))
    chunks = envs(payload, chunk=4)
    assert [len(e["d"]) for e in chunks] == [4, 4, 2]
    assert all(e["c"] == 3 and e["L"] == 10 and e["h"] == hashlib.sha256(payload).digest() for e in chunks)
    r = Reassembler(keys)
    assert r.feed(chunks[0]) is None and r.feed(chunks[1]) is None
    msg = r.feed(chunks[2])
    assert (msg.kind, msg.sender, msg.payload) == ("segment", "alice", payload)


def test_empty_payload_is_one_chunk():
    [env] = envs(b"")
    assert Reassembler(keys).feed(env).payload == b""


def test_out_of_order_chunks_reassemble():
    chunks = envs(b"abcdefghij", chunk=3)
    r = Reassembler(keys)
    for e in reversed(chunks[1:]):
        assert r.feed(e) is None
    assert r.feed(chunks[0]).payload == b"abcdefghij"


def test_envelopes_survive_the_wire_serializer():
    r = Reassembler(keys)
    out = [r.feed(deserialize(serialize(e))) for e in envs(b"0123456789", chunk=5)]
    assert out[-1].payload == b"0123456789"


def test_duplicate_chunk_is_rejected_and_counted():
    chunks = envs(b"abcdefgh", chunk=4)
    r = Reassembler(keys)
    r.feed(chunks[0])
    with pytest.raises(BadInput) as exc:
        r.feed(chunks[0])
    assert exc.value.reason == "duplicate_chunk" and r.counters["duplicate_chunk"] == 1
    assert r.feed(chunks[1]).payload == b"abcdefgh"


def test_truncated_message_times_out_and_frees_memory():
    chunks = envs(b"abcdefgh", chunk=4)
    r = Reassembler(keys, partial_timeout_s=10)
    r.feed(chunks[0], now=100.0)
    assert r.pending_bytes() == 4
    assert r.expire(now=111.0) == 1
    assert r.pending_bytes() == 0 and r.counters["timeout"] == 1


def test_oversized_message_refused_at_first_chunk():
    r = Reassembler(keys, max_message_bytes=8)
    with pytest.raises(BadInput) as exc:
        r.feed(envs(b"x" * 9)[0])
    assert exc.value.reason == "oversized"
    assert r.pending_bytes() == 0


def test_chunk_count_and_length_must_agree():
    e = envs(b"abcd")[0]
    e["c"] = 5  # five chunks for four bytes
    with pytest.raises(BadInput):
        check_envelope(e, max_message_bytes=100)


def test_too_many_partials_evict_the_oldest():
    r = Reassembler(keys, max_partials=2)
    for n, t in ((1, 1.0), (2, 2.0), (3, 3.0)):
        r.feed(envs(b"abcdefgh", n=n, chunk=4)[0], now=t)
    assert r.counters["evicted"] == 1
    assert r.pending_bytes() == 8


def test_tampered_chunk_is_detected_by_digest():
    chunks = envs(b"abcdefgh", chunk=4)
    chunks[1]["d"] = b"EVIL"
    r = Reassembler(keys)
    r.feed(chunks[0])
    with pytest.raises(BadInput) as exc:
        r.feed(chunks[1])
    assert exc.value.reason == "tampered"


def test_unknown_sender_and_forged_signature_are_rejected():
    r = Reassembler(keys)
    with pytest.raises(BadInput) as exc:
        r.feed(envs(b"x", sender="bob")[0])
    assert exc.value.reason == "unknown_sender"
    with pytest.raises(BadInput) as exc:
        r.feed(envs(b"x", key=MALLORY)[0])  # claims to be alice, signed by someone else
    assert exc.value.reason == "bad_signature"
    forged = envs(b"x")[0]
    forged["k"] = "weights"  # header changed after signing
    with pytest.raises(BadInput) as exc:
        r.feed(forged)
    assert exc.value.reason == "bad_signature"


def test_replayed_message_is_rejected_per_kind():
    r = Reassembler(keys)
    first = envs(b"one", n=10)[0]
    assert r.feed(first).payload == b"one"
    with pytest.raises(BadInput) as exc:
        r.feed(dict(first))
    assert exc.value.reason == "duplicate"  # e.g. retained weights sent again after a reconnect
    with pytest.raises(BadInput) as exc:
        r.feed(envs(b"older", n=9)[0])
    assert exc.value.reason == "replayed"
    # another kind has its own counter; a newer message of the same kind passes
    assert r.feed(envs(b"s", n=5, kind="stats")[0]).kind == "stats"
    assert r.feed(envs(b"two", n=11)[0]).payload == b"two"


@pytest.mark.parametrize("bad", [
    BadFrame("x"), [1, 2], {"v": 1}, "text",
])
def test_malformed_envelopes_are_counted(bad):
    r = Reassembler(keys)
    with pytest.raises(BadInput) as exc:
        r.feed(bad)
    assert exc.value.reason == "malformed" and r.counters["malformed"] == 1


def test_wrong_field_type_is_malformed():
    e = envs(b"abc")[0]
    e["n"] = True  # bool is not a counter
    with pytest.raises(BadInput):
        check_envelope(e, max_message_bytes=100)


# -- several messages under one signature -------------------------------------------------------
class CountingKey:
    """ALICE's public key, counting verifications."""

    def __init__(self):
        self.calls = 0

    def verify(self, sig, data):
        self.calls += 1
        ALICE.public_key().verify(sig, data)


def batch(payloads, first_n=1, key=ALICE, chunk=4):
    """Wire round trip of a signed batch: one list of envelopes per message."""
    streams = make_batch_envelopes([("segment", first_n + i, p, "") for i, p in enumerate(payloads)], "alice",
                                   signing_key=key, chunk_bytes=chunk)
    return [[deserialize(serialize(e)) for e in s] for s in streams]


def test_a_batch_verifies_once_and_each_message_alone():
    pub = CountingKey()
    r = Reassembler(lambda name: pub if name == "alice" else None)
    msgs = batch([b"one", b"second message", b""])
    assert all(len(e["B"]) == 3 for m in msgs for e in m)
    # the relay may drop any of them: the others still prove their sender
    out = [r.feed(e) for e in msgs[0] + msgs[2]]
    assert [m.payload for m in out if m is not None] == [b"one", b""]
    assert pub.calls == 1
    assert Reassembler(keys).feed(msgs[1][-1]) is None  # a fresh receiver verifies it without the others
    one = make_batch_envelopes([("segment", 9, b"solo", "")], "alice", signing_key=ALICE)[0]
    assert "B" not in next(one)  # a single message keeps the single-message form


def test_a_changed_header_in_a_batch_is_rejected_even_after_the_batch_verified():
    pub = CountingKey()
    r = Reassembler(lambda name: pub if name == "alice" else None)
    first, second = batch([b"abcd", b"efgh"])
    assert r.feed(first[0]).payload == b"abcd"
    forged = dict(second[0], L=3, d=b"xyz", h=hashlib.sha256(b"xyz").digest())  # same B and signature
    with pytest.raises(BadInput) as exc:
        r.feed(forged)
    assert exc.value.reason == "bad_signature"
    # a digest list rewritten to include the forged header fails the signature itself
    with pytest.raises(BadInput) as exc:
        r.feed(dict(forged, B=[first[0]["B"][0], hashlib.sha256(serialize(
            [forged[k] for k in ("v", "k", "s", "n", "to", "c", "L", "h")])).digest()]))
    assert exc.value.reason == "bad_signature"
    assert r.feed(second[0]).payload == b"efgh" and pub.calls == 2


def test_a_batch_signed_by_another_key_or_replayed_is_rejected():
    r = Reassembler(keys)
    [[evil]] = batch([b"x"], first_n=5, key=MALLORY)  # one message: the single form
    mallory_batch = batch([b"x", b"y"], first_n=5, key=MALLORY)
    for env in (evil, mallory_batch[0][0]):
        with pytest.raises(BadInput) as exc:
            r.feed(env)
        assert exc.value.reason == "bad_signature"
    good = batch([b"p", b"q"], first_n=20)
    assert r.feed(good[1][0]).payload == b"q"
    with pytest.raises(BadInput) as exc:  # the cache must not let an older counter in
        r.feed(good[0][0])
    assert exc.value.reason == "replayed"


def test_a_reloaded_sender_key_is_verified_again():
    current = {"key": CountingKey()}
    r = Reassembler(lambda name: current["key"] if name == "alice" else None)
    first, second = batch([b"a", b"b"])
    r.feed(first[0])
    current["key"] = None  # revoked between two messages of a batch
    with pytest.raises(BadInput) as exc:
        r.feed(second[0])
    assert exc.value.reason == "unknown_sender"
    current["key"] = CountingKey()  # enrolled again: a new key object, verified afresh
    r.feed(second[0])
    assert current["key"].calls == 1


@pytest.mark.parametrize("digests", [[b"x" * 32], [b"x" * 32] * (MAX_BATCH + 1), [b"x" * 32, b"short"],
                                     [b"x" * 32, "text"], b"x" * 64])
def test_malformed_batch_digest_lists_are_refused(digests):
    e = batch([b"a", b"b"])[0][0]
    e["B"] = digests
    with pytest.raises(BadInput) as exc:
        check_envelope(e, max_message_bytes=100)
    assert exc.value.reason == "malformed"
    e.pop("B")
    e["extra"] = 1
    with pytest.raises(BadInput):
        check_envelope(e, max_message_bytes=100)


def test_batch_size_is_bounded():
    for n in (0, MAX_BATCH + 1):
        with pytest.raises(ValueError):
            make_batch_envelopes([("segment", i + 1, b"x", "") for i in range(n)], "alice", signing_key=ALICE)


def test_message_counter_increases_across_instances():
    a = MessageCounter()
    x = [a.next() for _ in range(3)]
    y = MessageCounter().next()  # a restarted sender
    assert x == sorted(set(x)) and y > x[-1]


def test_challenge_token_proves_identity_on_its_connection_only():
    nonce, other = b"n" * 16, b"m" * 16
    tok = challenge_token("alice", ALICE, nonce)
    name, sig = parse_challenge_token(tok)
    assert name == "alice" and verify_challenge_token(name, sig, ALICE.public_key(), nonce)
    assert not verify_challenge_token(name, sig, ALICE.public_key(), other)  # replayed elsewhere
    assert not verify_challenge_token("trainer", sig, ALICE.public_key(), nonce)
    assert parse_challenge_token(join_token("alice", ALICE)) is None  # version 1 is another format
    assert hello_nonce(relay_hello(nonce)) == nonce
    assert hello_nonce(None) is None and hello_nonce({"v": 2, "nonce": b"short"}) is None


def test_join_token_proves_identity():
    tok = join_token("alice", ALICE)
    name, sig = parse_join_token(tok)
    assert name == "alice" and verify_join_token(name, sig, ALICE.public_key())
    assert not verify_join_token("trainer", sig, ALICE.public_key())
    assert parse_join_token("workers") is None and parse_join_token("auth:x:zz") is None
