"""Dedupe by (worker, seq): duplicates, out-of-order arrival, gaps, restart."""

from __future__ import annotations

import json

import pytest

from rulka.errors import BadInput
from rulka.trainer.dedupe import Dedupe


def test_duplicates_are_refused_per_worker():
    d = Dedupe()
    assert d.accept("a", 0) and d.accept("a", 1)
    assert not d.accept("a", 1)
    assert d.accept("b", 1)  # same seq, other worker
    assert d.floor("a") == 1


def test_out_of_order_arrival():
    d = Dedupe()
    for seq in (2, 0, 3):
        assert d.accept("w", seq)
    assert d.floor("w") == 0  # 1 still missing
    assert not d.accept("w", 2)
    assert d.accept("w", 1)
    assert d.floor("w") == 3
    assert not d.accept("w", 0)


def test_gap_is_abandoned_when_the_set_overflows():
    d = Dedupe(max_above=3)
    d.accept("w", 0)
    for seq in (2, 3, 4, 5):  # 1 was dropped by the worker and never comes
        d.accept("w", seq)
    assert d.floor("w") == 5
    assert d.skipped_gaps == 1
    assert not d.accept("w", 1)  # too late: counted as seen


def test_state_round_trip_through_json():
    d = Dedupe()
    for seq in (0, 1, 5, 7):
        d.accept("w", seq)
    d2 = Dedupe()
    d2.load_state_dict(json.loads(json.dumps(d.state_dict())))
    assert [d2.accept("w", s) for s in (1, 5, 6, 7, 2)] == [False, False, True, False, True]


def test_malformed_state_raises_badinput():
    with pytest.raises(BadInput):
        Dedupe().load_state_dict({"workers": {"w": "oops"}})
