"""`rulka tm doctor`: every check passes against each fake game, and a fake broken on purpose in one
way (a mirrored lateral axis, a wrong frame size, a respawn for a give up, speed in km/h) fails
exactly the check that covers it, by name."""

from __future__ import annotations

import json

import pytest

from rulka.cli.tm_doctor import doctor_tm2020, doctor_tmnf, render
from rulka.config import config_from_dict
from rulka.envs.tm2020.fake import FakeTM2020, Faults
from rulka.envs.tmnf.fake import FakeFaults
from rulka.envs.tmnf.game import FakeLauncher

pytestmark = pytest.mark.filterwarnings("ignore:Time-step timed out")

TMNF_CHECKS = {"frame_size", "start", "state_vs_api", "step_pace", "speed_units", "lateral_handedness", "focus",
               "give_up_restarts_at_zero"}


def _tmnf_cfg():
    return config_from_dict({
        "environment": {"backend": "tmnf", "game_launch": "fake", "tmi_protection_timeout_s": 10,
                        "timeout_during_run_ms": 5000},
        "nn": {"vis": {"image_size": {"width": 32, "height": 24}}},
    })


def _tmnf(faults=None, **game):
    return doctor_tmnf(_tmnf_cfg(), launcher=FakeLauncher(faults=faults, countdown_ms=-300, **game), port=0)


def test_tmnf_doctor_passes_against_the_fake_game():
    report = _tmnf()
    assert report.error == "" and report.failed == [], render(report)
    assert {c.name for c in report.checks} == TMNF_CHECKS and all(c.ok for c in report.checks)
    assert "all checks passed" in render(report)


@pytest.mark.parametrize("broken,game,check", [
    (FakeFaults(mirrored_lateral=True), {}, "lateral_handedness"),
    (FakeFaults(speed_kmh=True), {}, "speed_units"),
    (FakeFaults(respawn_on_give_up=True), {}, "give_up_restarts_at_zero"),
    (None, {"window_size": (20, 24)}, "frame_size"),  # the game captures less than asked
    # the blob layout differs from the fact sheet's; the game's own values are right
    (FakeFaults(blob_offset_error="angular_speed"), {}, "state_vs_api"),
    (FakeFaults(blob_offset_error="wheel_order"), {}, "state_vs_api"),
])
def test_tmnf_doctor_names_the_one_assumption_a_broken_fake_breaks(broken, game, check):
    report = _tmnf(broken, **game)
    assert report.failed == [check], render(report)
    assert f"FAIL  {check}:" in render(report)


def test_tmnf_doctor_names_an_installed_plugin_older_than_the_api_state_query():
    cfg = config_from_dict({
        "environment": {"backend": "tmnf", "game_launch": "fake", "tmi_protection_timeout_s": 1,
                        "timeout_during_run_ms": 5000},
        "nn": {"vis": {"image_size": {"width": 32, "height": 24}}},
    })
    report = doctor_tmnf(cfg, launcher=FakeLauncher(faults=FakeFaults(plugin_before_1_1=True), countdown_ms=-300), port=0)
    assert report.failed == ["state_vs_api"] and report.error, render(report)
    assert "rulka tm install-plugin --game tmnf" in render(report)


def test_tmnf_doctor_runs_before_a_reference_line_is_recorded(tmp_path):
    # the first-race order: doctor, then record-line; the map's line file does not exist yet
    cfg = config_from_dict({
        "environment": {"backend": "tmnf", "game_launch": "fake", "tmi_protection_timeout_s": 10,
                        "cutoff_rollout_if_no_vcp_passed_within_duration_ms": 600000},
        "nn": {"vis": {"image_size": {"width": 32, "height": 24}}},
        "map_cycle": {"entries": [{"short_name": "A01", "map_path": "default",
                                   "reference_line_path": str(tmp_path / "not_recorded_yet.json")}]},
    })
    report = doctor_tmnf(cfg, launcher=FakeLauncher(countdown_ms=-300), port=0)
    assert report.error == "" and report.failed == [], render(report)


TM2020_CHECKS = {"frame_size", "start", "focus", "step_pace", "speed_units", "lateral_handedness", "pause_flag",
                 "give_up_restarts_at_zero"}


def _tm2020_cfg():
    return config_from_dict({"environment": {"backend": "tm2020", "tm2020": {
        "capture": "fake", "control": "fake", "fake_countdown_s": 0.3, "telemetry_timeout_s": 1.0,
        "reset_timeout_s": 1.0, "fake_time_scale": 2.0}}})


def _tm2020(faults=None, window_size=None):
    """The doctor against a fake game built as ``capture: fake`` builds it, with ``faults``."""
    cfg = _tm2020_cfg()
    tm = cfg.environment.tm2020
    fake = FakeTM2020(track=cfg.environment.track, fps=tm.fake_fps * tm.fake_time_scale,
                      time_scale=tm.fake_time_scale, countdown_s=tm.fake_countdown_s,
                      window_size=window_size or (tm.window_width, tm.window_height), faults=faults).start()
    try:
        return doctor_tm2020(cfg, fake=fake)
    finally:
        fake.close()


def test_tm2020_doctor_passes_against_the_fake_game():
    report = doctor_tm2020(_tm2020_cfg())
    assert report.error == "" and report.failed == [], render(report)
    assert {c.name for c in report.checks} == TM2020_CHECKS and all(c.ok for c in report.checks), render(report)
    pause = next(c for c in report.checks if c.name == "pause_flag")
    assert "with the menu open (Escape) set on" in pause.seen and "set on 0 of" in pause.seen


@pytest.mark.parametrize("broken,window,check", [
    (Faults(mirrored_world=True), None, "lateral_handedness"),
    (Faults(speed_kmh=True), None, "speed_units"),
    (Faults(respawn_on_give_up=True), None, "give_up_restarts_at_zero"),
    (Faults(no_pause_flag=True), None, "pause_flag"),
    (None, (200, 128), "frame_size"),  # the capture is not the size the config gives the window
])
def test_tm2020_doctor_names_the_one_assumption_a_broken_fake_breaks(broken, window, check):
    report = _tm2020(broken, window)
    assert report.failed == [check], render(report)
    assert f"FAIL  {check}:" in render(report)


def test_the_command_prints_each_check_and_writes_the_report(tmp_path, capsys):
    from rulka.cli import main

    out = tmp_path / "doctor.json"
    rc = main(["tm", "doctor", "--game", "tmnf", "--fake", "--report", str(out),
               "--set", "nn.vis.image_size={width: 32, height: 24}", "--set", "environment.tmi_protection_timeout_s=10"])
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert rc == 0 and data["failed"] == [] and data["game"] == "tmnf" and data["fake"] is True
    assert {c["name"] for c in data["checks"]} == TMNF_CHECKS and len(data["samples"]) > 50
    assert printed.count("PASS  ") == len(TMNF_CHECKS) and f"report: {out}" in printed
