"""ReferenceLine: zone centres, extrapolation, local projection, files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rulka.envs.reference_line import ReferenceLine, load_points, resample_polyline
from rulka.errors import UserError


def straight(length: float = 100.0) -> np.ndarray:
    # Start at the origin, drive along +z; uneven raw sampling like a replay.
    z = np.array([0.0, 3.0, 3.0, 10.0, 55.5, length])
    return np.stack([np.zeros_like(z), np.zeros_like(z), z], axis=1)


def circle(radius: float, n: int = 2000, turns: float = 0.5) -> np.ndarray:
    t = np.linspace(0.0, 2 * math.pi * turns, n)
    return np.stack([radius * (1 - np.cos(t)), np.zeros_like(t), radius * np.sin(t)], axis=1)


def test_straight_zone_centres_at_equal_spacing_with_extrapolation() -> None:
    rl = ReferenceLine(
        straight(), distance_between_checkpoints=0.5, n_extrapolate_before=20, n_extrapolate_after=30
    )
    assert rl.spacing == pytest.approx(0.5)
    assert len(rl.track_points) == 201  # 0, 0.5, ..., 100
    assert rl.n_zones == 20 + 201 + 30
    assert rl.start_zone == 20 and rl.finish_zone == 220
    # Centre k sits at z = 0.5 * (k - 20), extrapolated ones included.
    expected_z = 0.5 * (np.arange(rl.n_zones) - 20)
    np.testing.assert_allclose(rl.zone_centers[:, 2], expected_z, atol=1e-9)
    np.testing.assert_allclose(rl.zone_centers[:, :2], 0.0, atol=1e-12)
    assert rl.length == pytest.approx(100.0)
    np.testing.assert_allclose(rl.zone_progress, expected_z, atol=1e-9)


def test_spacing_rounds_to_fit_track_length() -> None:
    # 10.2 m at a 1 m target: 10 steps of 1.02 m, the last centre on the finish.
    pts = resample_polyline(np.array([[0, 0, 0], [0, 0, 10.2]]), 1.0)
    assert len(pts) == 11
    np.testing.assert_allclose(pts[-1], [0, 0, 10.2])
    np.testing.assert_allclose(np.diff(pts[:, 2]), 1.02)


def test_straight_projection_progress_per_metre() -> None:
    rl = ReferenceLine(straight(), 0.5, 20, 30)
    zone, meters = rl.project(np.array([1.5, 0.0, 37.3]), hint_zone=rl.start_zone)
    # Nearest centre to z=37.3 is z=37.5 -> index 20 + 75; progress is the z coordinate
    # (a lateral offset does not count).
    assert zone == 95
    assert meters == pytest.approx(37.3)
    zone2, meters2 = rl.project(np.array([0.0, 0.0, 38.3]), hint_zone=zone)
    assert meters2 - meters == pytest.approx(1.0)
    assert zone2 == 20 + 77  # 38.5 is nearest
    # Backwards works too.
    zone3, meters3 = rl.project(np.array([0.0, 0.0, 36.0]), hint_zone=zone2)
    assert (zone3, meters3) == (92, pytest.approx(36.0))


def test_projection_behind_start_and_past_finish() -> None:
    rl = ReferenceLine(straight(), 0.5, 20, 30)
    zone, meters = rl.project(np.array([0.0, 0.0, -3.0]), hint_zone=rl.start_zone)
    assert zone == 14 and meters == pytest.approx(-3.0)
    zone, meters = rl.project(np.array([0.0, 0.0, 104.0]), hint_zone=rl.finish_zone)
    assert zone == rl.finish_zone + 8 and meters == pytest.approx(104.0)
    # Far past the extrapolated zones: stuck at the last enterable zone, never the final one.
    zone, _ = rl.project(np.array([0.0, 0.0, 130.0]), hint_zone=rl.finish_zone + 20)
    assert zone == rl.max_zone == rl.n_zones - 2


def test_projection_is_local_a_far_position_does_not_jump() -> None:
    rl = ReferenceLine(straight(), 0.5, 20, 30, road_width=10.0)
    # 30 m lateral offset: no centre is within reach (hypot(0.25, 5)); the zone stays.
    zone, _ = rl.project(np.array([30.0, 0.0, 20.0]), hint_zone=25)
    assert zone == 25


def test_hairpin_does_not_skip_to_the_return_leg() -> None:
    # Out 50 m along +z, a tight 180 degree turn (radius 4 m), back along -z at x = 8.
    out = np.stack([np.zeros(51), np.zeros(51), np.linspace(0, 50, 51)], axis=1)
    t = np.linspace(0, math.pi, 60)
    turn = np.stack([4 - 4 * np.cos(t), np.zeros_like(t), 50 + 4 * np.sin(t)], axis=1)
    back = np.stack([np.full(51, 8.0), np.zeros(51), np.linspace(50, 0, 51)], axis=1)
    rl = ReferenceLine(np.vstack([out, turn[1:], back[1:]]), 0.5, 5, 5, road_width=90.0)
    zone, meters = rl.project(np.array([0.0, 0.0, 10.0]), hint_zone=rl.start_zone)
    assert meters == pytest.approx(10.0, abs=1e-6)
    # A car at x=3 on the outbound leg is 5 m from the return leg; it must stay outbound.
    zone, meters = rl.project(np.array([3.0, 0.0, 12.0]), hint_zone=zone)
    assert meters == pytest.approx(12.0, abs=1e-6)


def test_circle_progress_is_arc_length() -> None:
    radius = 50.0
    rl = ReferenceLine(circle(radius), 0.5, 20, 30)
    assert rl.length == pytest.approx(math.pi * radius, rel=1e-4)
    zone = rl.start_zone
    for angle in np.linspace(0.05, 3.0, 40):  # drive along the arc, on the line
        p = np.array([radius * (1 - math.cos(angle)), 0.0, radius * math.sin(angle)])
        zone, meters = rl.project(p, hint_zone=zone)
        assert meters == pytest.approx(radius * angle, abs=0.01)


def test_point_and_tangent_at_progress() -> None:
    rl = ReferenceLine(straight(), 0.5, 20, 30)
    np.testing.assert_allclose(rl.point_at(12.25), [0, 0, 12.25], atol=1e-9)
    np.testing.assert_allclose(rl.point_at(-2.0), [0, 0, -2.0], atol=1e-9)
    np.testing.assert_allclose(rl.tangent_at(50.0), [0, 0, 1], atol=1e-9)


@pytest.mark.parametrize("suffix", [".json", ".npy"])
def test_save_load_round_trip(tmp_path, suffix: str) -> None:
    rl = ReferenceLine(circle(30.0, 500), 0.5, 20, 30)
    path = tmp_path / f"line{suffix}"
    rl.save(path)
    again = ReferenceLine.load(path, 0.5, 20, 30)
    np.testing.assert_allclose(again.zone_centers, rl.zone_centers, atol=1e-4)
    assert again.length == pytest.approx(rl.length, abs=1e-4)


def test_bad_files_raise_user_errors(tmp_path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_points(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="unreadable"):
        load_points(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something", "points": [[0, 0, 0]]}))
    with pytest.raises(UserError, match="not a rulka.reference_line"):
        load_points(other)
    obj = tmp_path / "obj.npy"
    np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(UserError):  # object arrays are refused, never unpickled
        load_points(obj)
    flat = tmp_path / "flat.npy"
    np.save(flat, np.zeros((5, 2)))
    with pytest.raises(UserError, match=r"\(N, 3\)"):
        load_points(flat)
    nan = tmp_path / "nan.npy"
    np.save(nan, np.array([[0, 0, 0], [0, 0, np.nan]]))
    with pytest.raises(UserError, match="NaN"):
        load_points(nan)


def test_real_checkpoints_gate_zone_tracking() -> None:
    # A U-shaped track: out along +z to 50, across to x = 20, back along -z. A real checkpoint
    # sits at the corner (0, 0, 50).
    out = np.stack([np.zeros(51), np.zeros(51), np.linspace(0, 50, 51)], axis=1)
    across = np.stack([np.linspace(0, 20, 21), np.zeros(21), np.full(21, 50.0)], axis=1)
    back = np.stack([np.full(51, 20.0), np.zeros(51), np.linspace(50, 0, 51)], axis=1)
    pts = np.vstack([out, across[1:], back[1:]])
    gated = ReferenceLine(pts, 0.5, 5, 5, road_width=90.0, checkpoint_positions=np.array([[0.0, 0.0, 50.0]]))
    free = ReferenceLine(pts, 0.5, 5, 5, road_width=90.0)
    assert gated.checkpoint_zones.tolist() == [5 + 100]  # the centre at z = 50 on the outbound leg
    zone_g = zone_f = gated.start_zone
    for z in np.arange(1.0, 41.0, 1.0):
        zone_g, _ = gated.project(np.array([0.0, 0.0, z]), zone_g)
        zone_f, _ = free.project(np.array([0.0, 0.0, z]), zone_f)
    # The car flies over the corner and lands 12 m outside it, 23 m from the checkpoint: the
    # centres keep getting closer all the way to (20, 50), 70 m along the line.
    landing = np.array([20.0, 0.0, 62.0])
    _, m_f = free.project(landing, zone_f)
    zone_g, m_g = gated.project(landing, zone_g)
    # (progress runs along the midpoints of the centres, which round each corner by ~0.2 m)
    assert m_f == pytest.approx(70.0, abs=0.5)  # ungated: credited with the corner it skipped
    assert zone_g == gated.checkpoint_zones[0] and m_g == pytest.approx(50.0, abs=0.5)
    # Passing within 12 m of the checkpoint opens the gate.
    zone_g, m_g = gated.project(np.array([8.0, 0.0, 52.0]), zone_g)
    assert m_g == pytest.approx(58.0, abs=0.5)
    with pytest.raises(ValueError, match="more than 12 m"):
        ReferenceLine(pts, 0.5, 5, 5, checkpoint_positions=np.array([[100.0, 0.0, 0.0]]))


def test_checkpoints_round_trip_through_json(tmp_path) -> None:
    pts = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 100.0]])
    line = ReferenceLine(pts, 0.5, 5, 5, checkpoint_positions=np.array([[1.0, 0.0, 40.0], [0.0, 2.0, 80.0]]))
    assert line.checkpoint_zones.tolist() == [5 + 80, 5 + 160]
    path = tmp_path / "line.json"
    line.save(path)
    again = ReferenceLine.load(path, 0.5, 5, 5)
    assert again.checkpoint_zones.tolist() == [85, 165]
    assert ReferenceLine.load(path, 0.5, 5, 5, use_checkpoints=False).checkpoint_zones.tolist() == []
    doc = json.loads(path.read_text())
    doc["checkpoints"] = [[50.0, 0.0, 40.0]]
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="more than 12 m"):
        ReferenceLine.load(path, 0.5, 5, 5)
