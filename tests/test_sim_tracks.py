"""Tracks of the simulator: bundled files, rasterisation, generator, camera."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rulka.envs.sim.camera import SKY, Camera
from rulka.envs.sim.tracks import (
    DIRT,
    FINISH,
    GRASS,
    ROAD,
    SAMPLE_STEP,
    START,
    TURBO,
    WALL,
    build_track,
    bundled_track_names,
    dump_track_spec,
    generate_track_spec,
    get_track,
    load_track_spec,
)
from rulka.errors import UserError

BUNDLED = ["default", "dirt_mix", "hairpins", "slalom", "turbo_straight"]


def test_bundled_tracks_are_listed():
    assert bundled_track_names() == BUNDLED


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_track_is_consistent(name):
    track = get_track(name)
    x, z, _ = track.start_pose
    assert track.cell(x, z) in (ROAD, START)
    fx, fz, *_ = track.finish_line
    assert track.cell(fx, fz) == FINISH
    assert track.reference_time_ms and track.reference_time_ms > 5000
    assert 200 < track.length < 1000
    # the raster is closed: its border is wall everywhere
    m = track.materials
    assert (m[0] == WALL).all() and (m[-1] == WALL).all() and (m[:, 0] == WALL).all() and (m[:, -1] == WALL).all()


def test_straight_track_geometry_hand_computed():
    track = build_track({"name": "s", "width": 10, "runoff": 4, "pieces": [{"straight": 100}]})
    # lead-in 12 m then 100 m: the finish is 100 m ahead of the start along +z
    assert track.length == pytest.approx(100.0, abs=SAMPLE_STEP)
    sx, sz, heading = track.start_pose
    assert (sx, heading) == (0.0, 0.0)
    assert sz == pytest.approx(12.0)
    # across the road at z = 60: road within 5 m, grass to 9 m, wall beyond
    assert track.cell(0.0, 60.0) == ROAD
    assert track.cell(3.5, 60.0) == ROAD
    assert track.cell(6.5, 60.0) == GRASS and track.cell(-6.5, 60.0) == GRASS
    assert track.cell(10.0, 60.0) == WALL and track.cell(-10.0, 60.0) == WALL
    # walls close the lead-in and the run-out
    assert track.cell(0.0, -3.0) == WALL
    assert track.cell(0.0, 12 + 100 + 60 + 3) == WALL


def test_left_turn_goes_towards_plus_x():
    track = build_track({"name": "t", "pieces": [{"turn": 90, "radius": 20}]})
    end = track.centerline[track.finish_index]
    # heading 0 is +z; a 90 degree left turn of radius 20 ends 20 m along +x, 20 m further in z
    assert end[0] == pytest.approx(20.0, abs=0.6)
    assert end[2] == pytest.approx(12.0 + 20.0, abs=0.6)


def test_patches_are_rasterised():
    spec = {"name": "p", "width": 12, "pieces": [{"straight": 100}],
            "patches": [{"from": 10, "to": 20, "surface": "dirt"},
                        {"from": 30, "to": 36, "surface": "turbo"},
                        {"from": 50, "to": 60, "surface": "grass", "lateral": [1, 6]}]}
    track = build_track(spec)
    assert track.cell(0.0, 12 + 15) == DIRT
    assert track.cell(0.0, 12 + 33) == TURBO
    assert track.cell(3.0, 12 + 55) == GRASS  # left of the centre line is +x at heading 0
    assert track.cell(-3.0, 12 + 55) == ROAD


def test_bad_specs_raise_user_errors():
    with pytest.raises(UserError, match="unknown surface"):
        build_track({"name": "x", "pieces": [{"straight": 50}], "patches": [{"from": 1, "to": 5, "surface": "lava"}]})
    with pytest.raises(UserError, match="overlaps itself"):
        build_track({"name": "x", "pieces": [{"straight": 50}, {"turn": 180, "radius": 8}, {"straight": 50}]})
    with pytest.raises(UserError, match="unknown track"):
        load_track_spec("no_such_track")
    with pytest.raises(UserError, match="straight"):
        build_track({"name": "x", "pieces": [{"curve": 3}]})


def test_generator_is_deterministic_and_varied():
    a, b, c = generate_track_spec(7), generate_track_spec(7), generate_track_spec(8)
    assert a == b
    assert a != c
    assert get_track("gen:7").spec == a


def test_track_file_round_trip(tmp_path):
    spec = load_track_spec("dirt_mix")
    path = tmp_path / "mine.json"
    path.write_text(dump_track_spec(spec))
    assert json.loads(path.read_text()) == spec
    track = get_track(str(path))
    assert np.array_equal(track.materials, get_track("dirt_mix").materials)


def test_camera_image_shape_dtype_and_content():
    track = get_track("default")
    cam = Camera(track, 64, 48)
    x, z, h = track.start_pose
    img = cam.render(x, z, h)
    assert img.shape == (48, 64) and img.dtype == np.uint8
    assert (img[: cam.ground_row] == SKY).all()  # sky above the horizon
    bottom = img[-4:, 28:36]
    assert abs(float(bottom.mean()) - 105) < 25  # asphalt straight ahead
    # facing the wall behind the start, the lower image is dark
    back = cam.render(x, z - 4.0, h + np.pi)
    assert back[cam.ground_row + 1 : cam.ground_row + 6].mean() < 80
    # steering the view changes it; the same pose renders the same image
    assert not np.array_equal(cam.render(x, z, h + 0.3), img)
    assert np.array_equal(cam.render(x, z, h), img)


def test_reference_line_runs_start_to_finish():
    track = get_track("hairpins")
    line = track.reference_line()
    assert line.finish_progress == pytest.approx(track.length, rel=0.01)
    x, z, _ = track.start_pose
    zone, progress = line.project(np.array([x, 0.0, z]), line.start_zone)
    assert zone == line.start_zone and progress == pytest.approx(0.0, abs=0.5)
