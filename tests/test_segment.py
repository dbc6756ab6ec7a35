"""The Segment wire unit: plain-data encoding, strict decoding, no pickle."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rulka.errors import BadInput
from rulka.segment import Segment, pack, segment_from_plain, segment_to_plain, unpack


def make_segment(t: int = 5) -> Segment:
    rng = np.random.default_rng(0)
    return Segment(
        run_id="run", worker_id="w1", episode_id=3, seq=7, index_in_episode=1, first_step=200,
        policy_version=4,
        arrays={
            "obs/img": rng.integers(0, 255, size=(t + 1, 8, 8), dtype=np.uint8),
            "obs/float": rng.standard_normal((t + 1, 5)).astype(np.float32),
            "action": rng.integers(0, 12, size=t).astype(np.int64),
            "reward": rng.standard_normal(t).astype(np.float32),
            "terminated": np.zeros(t, dtype=bool),
            "truncated": np.zeros(t, dtype=bool),
            "extra/q_values": rng.standard_normal((t, 12)).astype(np.float32),
        },
        episode_done=True, map_name="default", info={"episode_return": 1.5, "finished": True},
    )


def test_round_trip_preserves_every_field_and_array() -> None:
    seg = make_segment()
    back = segment_from_plain(unpack(pack(segment_to_plain(seg))))
    assert back.header() == seg.header()
    assert set(back.arrays) == set(seg.arrays)
    for name, arr in seg.arrays.items():
        assert back.arrays[name].dtype == arr.dtype
        np.testing.assert_array_equal(back.arrays[name], arr)


def test_wrong_lengths_are_rejected() -> None:
    seg = make_segment()
    seg.arrays["obs/float"] = seg.arrays["obs/float"][:-1]  # obs must have T+1 rows
    with pytest.raises(BadInput, match="obs/float"):
        seg.validate()


def test_object_dtype_cannot_be_encoded() -> None:
    seg = make_segment()
    seg.arrays["extra/bad"] = np.array([object()] * 5)
    with pytest.raises(ValueError, match="dtype"):
        segment_to_plain(seg)


def test_pickle_bytes_are_rejected_without_executing() -> None:
    class Boom:
        def __reduce__(self):  # pragma: no cover - would run only if unpickled
            return (pytest.fail, ("unpickled!",))

    with pytest.raises(BadInput):
        segment_from_plain(unpack(pickle.dumps(Boom())))


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda p: p["a"]["reward"].__setitem__(0, "object"), "dtype"),
        (lambda p: p["a"]["reward"].__setitem__(1, [10**12]), "shape"),
        (lambda p: p["a"]["reward"].__setitem__(2, b"\x00" * 3), "bytes"),
        (lambda p: p["h"].__setitem__("seq", "7"), "seq"),
        (lambda p: p["h"].__setitem__("evil", 1), "header"),
        (lambda p: p["h"]["info"].__setitem__("x", {"a": {"b": {"c": {"d": {"e": 1}}}}}), "nested"),
    ],
)
def test_malformed_plain_segments_raise_bad_input(mutate, match) -> None:
    plain = unpack(pack(segment_to_plain(make_segment())))
    mutate(plain)
    with pytest.raises(BadInput, match=match):
        segment_from_plain(plain)


def test_decoded_size_limit() -> None:
    plain = unpack(pack(segment_to_plain(make_segment())))
    with pytest.raises(BadInput, match="limit"):
        segment_from_plain(plain, max_bytes=100)


def test_unpack_refuses_garbage_and_ext_types() -> None:
    import msgpack

    with pytest.raises(BadInput):
        unpack(b"\xc1\xff\x00garbage")
    with pytest.raises(BadInput, match="extension"):
        unpack(msgpack.packb(msgpack.ExtType(5, b"xx")))
