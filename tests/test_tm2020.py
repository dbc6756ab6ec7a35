"""TrackMania 2020 backend: telemetry framing, capture conversion, control mapping, neutral on
exit, and the fake game's failure modes (the worker recovers, nothing is lost, a clear log line)."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from rulka.envs.actions import N_ACTIONS, discrete_to_flags
from rulka.envs.tm2020 import telemetry as T
from rulka.envs.tm2020.capture import LIDAR_ANGLES_DEG, Lidar, to_image
from rulka.envs.tm2020.control import NEUTRAL, Controller, NeutralOnExit, to_analog
from rulka.envs.tm2020.fake import FakeGamepad, FakeTM2020, FakeWindow

# rtgym warns on each late step; the env counts them (perf/<worker>/overruns) and a busy CI
# machine makes some
pytestmark = pytest.mark.filterwarnings("ignore:Time-step timed out")


def _values(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=T.N_FIELDS).astype(np.float32)


# ---------------------------------------------------------------------- framing
def test_record_round_trip_and_layout() -> None:
    vals = _values()
    rec = T.encode_record(7, vals)
    assert len(rec) == T.RECORD_SIZE == 12 + 4 * T.N_FIELDS
    assert rec[:4] == b"RLK2" and int.from_bytes(rec[4:6], "little") == T.VERSION
    out = T.RecordDecoder().feed(rec)
    assert len(out) == 1 and out[0].frame == 7
    np.testing.assert_array_equal(out[0].values, vals)


def test_decoder_any_split_and_merge_keeps_every_record_in_order() -> None:
    stream = b"".join(T.encode_record(i, _values(i)) for i in range(5))
    for cut in range(1, T.RECORD_SIZE + 3):
        dec = T.RecordDecoder()
        got = []
        for start in range(0, len(stream), cut):
            got += dec.feed(stream[start : start + cut])
        assert [r.frame for r in got] == list(range(5)), cut
        assert dec.skipped_bytes == 0


def test_decoder_resyncs_after_garbage_and_counts_it() -> None:
    good = T.encode_record(3, _values(3))
    dec = T.RecordDecoder()
    # a client joining mid-record sees the tail of one record first
    got = dec.feed(good[17:] + b"\x00RL" + good)
    assert [r.frame for r in got] == [3]
    assert dec.skipped_bytes == len(good) - 17 + 3


def test_decoder_refuses_another_version_with_a_clear_message() -> None:
    bad = bytearray(T.encode_record(1, _values()))
    bad[4] = 9
    with pytest.raises(T.TelemetryError, match="reinstall the plugin"):
        T.RecordDecoder().feed(bytes(bad))


def test_car_state_from_telemetry_uses_left_up_dir_as_orientation_columns() -> None:
    v = np.zeros(T.N_FIELDS, np.float32)
    v[T.INDEX["race_time_ms"]] = 1234
    v[2:5] = (1, 2, 3)
    v[8:11] = (0, 0, 1)  # dir
    v[11:14] = (0, 1, 0)  # up
    v[14:17] = (1, 0, 0)  # left
    v[23:27] = (16, 16, T.NO_CONTACT_MATERIAL, 2)
    v[27:31] = (0.9, 0.1, 0, 0)
    v[T.INDEX["finished"]] = 1
    cs = T.Telemetry(0, v).car_state()
    np.testing.assert_array_equal(cs.orientation, np.eye(3))
    assert cs.race_time_ms == 1234 and cs.finished
    assert cs.wheel_contact.tolist() == [True, True, False, True]
    assert cs.wheel_sliding.tolist() == [True, False, False, False]


def test_lateral_axis_is_up_cross_dir_and_a_mirrored_record_is_detected() -> None:
    v = np.zeros(T.N_FIELDS, np.float32)
    h = 0.3
    v[8:11] = (math.sin(h), 0, math.cos(h))  # dir
    v[11:14] = (0, 1, 0)  # up
    v[14:17] = (-math.cos(h), 0, math.sin(h))  # Left = -(Up x Dir): a left-handed world
    rec = T.Telemetry(0, v)
    cs = rec.car_state()
    # hand-computed: (0,1,0) x (sin h, 0, cos h) = (cos h, 0, -sin h), whatever Left says
    np.testing.assert_allclose(cs.orientation[:, 0], [math.cos(h), 0, -math.sin(h)], atol=1e-6)
    assert np.linalg.det(cs.orientation) == pytest.approx(1.0, abs=1e-6)
    assert rec.handedness() == -1
    v[14:17] = (math.cos(h), 0, -math.sin(h))
    assert T.Telemetry(0, v).handedness() == 1
    v[14:17] = (0.5, 0, 0)  # not a unit vector: malformed
    assert T.Telemetry(0, v).handedness() == 0


def test_client_reconnects_after_a_plugin_reload(caplog: pytest.LogCaptureFixture) -> None:
    with FakeTM2020(fps=100) as game, T.TelemetryClient(port=game.port, retry_s=0.05) as client:
        first = client.wait_newer(None, 5.0)
        assert first is not None
        with caplog.at_level(logging.WARNING):
            game.drop_client()
            deadline = time.monotonic() + 5
            while client.connects < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
        assert client.connects == 2 and client.disconnects == 1
        assert "connection to 127.0.0.1" in caplog.text and "reconnecting" in caplog.text
        later = client.wait_newer(client.latest().frame, 5.0)
        assert later is not None and later.frame > first.frame


def test_client_retries_until_the_plugin_listens(caplog: pytest.LogCaptureFixture) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with caplog.at_level(logging.WARNING), T.TelemetryClient(port=port, retry_s=0.05) as client:
        time.sleep(0.3)
        assert client.latest() is None and not client.connected
        assert "not listening on 127.0.0.1" in caplog.text and "(re)load the rulka plugin" in caplog.text
        with FakeTM2020(port=port, fps=100):
            assert client.wait_newer(None, 5.0) is not None


# ---------------------------------------------------------------------- capture
def test_to_image_resizes_and_converts_bgra_to_gray() -> None:
    frame = np.zeros((128, 256, 4), np.uint8)
    frame[:, :128] = (255, 0, 0, 255)  # blue left half (BGRA)
    frame[:, 128:] = (0, 0, 255, 255)  # red right half
    img = to_image(frame, 64, 32)
    assert img.shape == (32, 64) and img.dtype == np.uint8
    # ITU-R 601 luma: 0.114 B, 0.299 R
    assert abs(int(img[5, 5]) - round(0.114 * 255)) <= 1
    assert abs(int(img[5, 60]) - round(0.299 * 255)) <= 1
    rgb = to_image(frame, 64, 32, grayscale=False)
    assert rgb.shape == (32, 64, 3) and tuple(rgb[0, 0]) == (0, 0, 255)


def test_lidar_beams_stop_at_dark_borders() -> None:
    w, h = 201, 101
    frame = np.full((h, w, 3), 200, np.uint8)
    frame[:, :50] = 0  # dark border 50 px left of the origin column (x = 100)
    frame[:, 171:] = 0  # 71 px right
    frame[:20] = 0  # top rows dark
    lidar = Lidar(w, h, origin_x=0.5, origin_y=1.0)
    beams = lidar.measure(frame) * lidar.max_len
    assert len(beams) == len(LIDAR_ANGLES_DEG) == 19
    left, up, right = beams[0], beams[9], beams[18]  # 90, 180, 270 degrees
    assert left == pytest.approx(100 - 49, abs=1)
    assert right == pytest.approx(171 - 100, abs=1)
    assert up == pytest.approx(100 - 19, abs=1)
    # the 130-degree beam hits the left wall first: x drops by 51 -> length 51 / sin(130 deg)
    assert beams[4] == pytest.approx(51 / math.sin(math.radians(130)), abs=1.5)


# ---------------------------------------------------------------------- control
class _Recorder(Controller):
    def __init__(self) -> None:
        self.sent: list[tuple[float, float, float]] = []
        self.buttons: list[bool] = []
        super().__init__()

    def _send(self, gas: float, brake: float, steer: float) -> None:
        self.sent.append((gas, brake, steer))

    def _reset_button(self, down: bool) -> None:
        self.buttons.append(down)


def test_discrete_actions_map_to_full_pad_values() -> None:
    for a in range(N_ACTIONS):
        acc, brk, left, right = discrete_to_flags(a)
        assert to_analog(a) == (float(acc), float(brk), float(right - left))
    assert to_analog(np.int64(2)) == (1.0, 0.0, 1.0)
    assert to_analog([0.3, 2.0, -4.0]) == pytest.approx((0.3, 1.0, -1.0))
    assert to_analog([float("nan"), 0, 0]) == NEUTRAL


def test_controller_neutral_on_context_exit_and_reset_press() -> None:
    c = _Recorder()
    with pytest.raises(RuntimeError), NeutralOnExit(c):
        c.apply(0)
        raise RuntimeError("policy crashed")
    assert c.sent[-1] == NEUTRAL and c.last == NEUTRAL
    c.press_reset(hold_s=0.0)
    assert c.buttons == [True, False] and c.sent[-1] == NEUTRAL


def test_keyboard_thresholds_match_tmrl() -> None:
    from rulka.envs.tm2020.control import KeyboardController

    kb = KeyboardController.__new__(KeyboardController)
    pressed: list[tuple[str, bool]] = []
    kb._press = lambda key, down: pressed.append((key, down))
    kb._down = set()
    Controller.__init__(kb)
    kb.apply(np.array([0.2, 0.0, 0.4]))
    assert pressed == [("gas", True)]
    kb.apply(np.array([0.0, 0.7, -0.6]))
    assert set(pressed[1:]) == {("gas", False), ("brake", True), ("left", True)}
    kb.neutral()
    assert kb._down == set()


@pytest.mark.slow
def test_a_crashing_process_leaves_the_pad_neutral(tmp_path) -> None:
    """The interpreter exits on an uncaught exception while the car accelerates: atexit releases."""
    log_file = tmp_path / "pad.txt"
    script = textwrap.dedent(f"""
        from rulka.envs.tm2020.control import Controller
        class FilePad(Controller):
            def _send(self, gas, brake, steer):
                with open({str(log_file)!r}, "a") as f:
                    f.write(f"{{gas}} {{brake}} {{steer}}\\n")
            def _reset_button(self, down):
                pass
        pad = FilePad()
        pad.apply(0)  # full gas
        raise SystemExit("crash") if False else ValueError("worker crashed mid-race")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "worker crashed mid-race" in proc.stderr
    lines = log_file.read_text().split("\n")
    assert lines[0] == "1.0 0.0 0.0" and lines[-2] == "0.0 0.0 0.0"


def test_fake_gamepad_drives_the_fake_car() -> None:
    with FakeTM2020(countdown_s=0.0, fps=100) as game:
        pad = FakeGamepad(game)
        pad.apply(0)
        time.sleep(0.5)
        assert game.car.speed > 2.0 and game.inputs == (1.0, 0.0, 0.0)
        pad.close()
        assert game.inputs == NEUTRAL
        frame = FakeWindow(game).grab()
        assert frame.shape == (128, 256, 4) and frame.dtype == np.uint8


# ---------------------------------------------------------------------- env on the fake
FAST = {"fake_countdown_s": 0.2, "telemetry_timeout_s": 0.5, "reset_timeout_s": 5.0, "recover_timeout_s": 30.0}


def _env(fake: FakeTM2020, **tm2020):
    from rulka.envs.tm2020.env import TM2020Env

    cfg = {"environment": {"backend": "tm2020", "tm2020": {"capture": "fake", "control": "fake", **FAST, **tm2020}},
           "nn": {"vis": {"image_size": {"width": 32, "height": 32}}}}
    return TM2020Env(cfg, fake=fake)


def _drive(env, steps: int, action: int = 0) -> list[tuple]:
    out = []
    for _ in range(steps):
        obs, r, te, tr, info = env.step(action)
        out.append((obs, r, te, tr, info))
        if te or tr:
            break
    return out


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["plugin_silent", "window_lost", "game_paused", "mirrored_record"])
def test_fault_ends_the_episode_cleanly_and_the_next_one_runs(fault: str, caplog: pytest.LogCaptureFixture) -> None:
    with FakeTM2020(countdown_s=0.2, fps=60) as game:
        env = _env(game)
        try:
            obs, info = env.reset()
            assert obs["img"].shape == (32, 32) and info["fault"] == ""
            before = _drive(env, 10)
            assert len(before) == 10 and not any(s[2] or s[3] for s in before)
            assert before[-1][4]["progress_m"] > 0.5  # the car moves
            with caplog.at_level(logging.WARNING):
                {"plugin_silent": lambda: game.silence(1.5), "window_lost": lambda: game.lose_window(1.5),
                 "game_paused": lambda: game.pause(1.5), "mirrored_record": lambda: game.mirror(1.5)}[fault]()
                steps = _drive(env, 100)
                obs, r, te, tr, info = steps[-1]
                assert info["fault"] == fault and tr and not te and r == 0.0
                assert np.isfinite(obs["float"]).all()  # the last good observation, not garbage
                assert game.inputs == NEUTRAL  # the car is not left accelerating
                message = {"plugin_silent": "telemetry silent", "window_lost": "game window lost",
                           "game_paused": "game paused", "mirrored_record": "mirrored or malformed car basis"}[fault]
                assert message in caplog.text
                obs, info = env.reset()  # waits for the game, then respawns
            assert "game is back" in caplog.text
            assert info["fault"] == "" and info["progress_m"] < 1.0
            after = _drive(env, 10)
            assert not any(s[4]["fault"] for s in after) and after[-1][4]["progress_m"] > 0.5
            assert env.perf_stats()[f"faults_{fault}"] == 1.0
        finally:
            env.close()
        assert game.inputs == NEUTRAL


@pytest.mark.slow
def test_plugin_reload_mid_episode_is_invisible_to_the_learner() -> None:
    with FakeTM2020(countdown_s=0.2, fps=60) as game:
        env = _env(game)
        try:
            env.reset()
            _drive(env, 5)
            game.drop_client()
            steps = _drive(env, 20)
            assert len(steps) == 20 and not any(s[4]["fault"] for s in steps)
            assert env.telemetry.connects == 2
        finally:
            env.close()


def test_a_client_that_hangs_up_in_the_menus_is_dropped_at_once() -> None:
    # while nothing is written (menus, loading) only IsHungUp() notices a closed client; the
    # plugin checks it every frame, so the next client is served without waiting for a race
    import socket

    with FakeTM2020(countdown_s=0.2, fps=60) as game:
        game.silence(30.0)  # the menus: no records
        first = socket.create_connection(("127.0.0.1", game.port), timeout=2)
        deadline = time.monotonic() + 5
        while game.clients < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        first.close()
        second = socket.create_connection(("127.0.0.1", game.port), timeout=2)
        while game.clients < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert game.clients == 2 and "client_hung_up" in [what for _, what in game.events]
        second.close()


def test_env_previous_action_slots_end_with_the_action_just_sent() -> None:
    with FakeTM2020(countdown_s=0.2, fps=60) as game:
        env = _env(game, observation="image")
        try:
            env.reset()
            obs, *_ = env.step(6)  # brake
            prev = obs["float"][env.pipeline.slices["prev_actions"]].reshape(-1, 4)
            np.testing.assert_array_equal(prev[-1], discrete_to_flags(6))
            np.testing.assert_array_equal(prev[-2], discrete_to_flags(0))  # the default before
        finally:
            env.close()


def test_lidar_mode_appends_beams_to_the_float_inputs() -> None:
    from rulka.config import config_from_dict

    cfg = config_from_dict({"environment": {"backend": "tm2020", "tm2020": {"observation": "lidar"}},
                            "nn": {"vis": {"no_image": True}}})
    assert cfg.float_input_dim == cfg.environment.float_input_dim + 19 * 4
    with FakeTM2020(countdown_s=0.2, fps=60) as game:
        from rulka.envs.tm2020.env import TM2020Env

        env = TM2020Env({"environment": {"backend": "tm2020", "tm2020": {"capture": "fake", "observation": "lidar",
                                                                         **FAST}},
                         "nn": {"vis": {"no_image": True}}}, fake=game)
        try:
            obs, _ = env.reset()
            assert set(obs) == {"float"} and obs["float"].shape == (cfg.float_input_dim,)
            beams = obs["float"][-19:]
            assert ((beams >= 0) & (beams <= 1)).all()
        finally:
            env.close()


@pytest.mark.slow
def test_worker_loses_no_transition_across_a_fault(caplog: pytest.LogCaptureFixture) -> None:
    """A real Worker on the fake game: a pause mid-episode ends that episode (truncated, sent),
    the next episodes run, and every step the env made arrives in a segment, in order."""
    import threading

    from rulka.compress import SegmentDecoder, ZstdCompressor
    from rulka.net.local import LocalHub
    from rulka.worker.worker import Worker
    from tests.roles_helpers import ConstActor

    with FakeTM2020(countdown_s=0.2, fps=60) as game:
        env = _env(game)
        hub = LocalHub()
        trainer = hub.trainer_link()
        worker = Worker({"worker": {"segment_max_steps": 15}}, hub.worker_link("pc1"), env=env, actor=ConstActor(),
                        compressor=ZstdCompressor())
        timer = threading.Timer(1.5, lambda: game.pause(1.0))
        timer.start()
        try:
            with caplog.at_level(logging.WARNING):
                stats = worker.run(max_steps=120, drain_timeout_s=0)
        finally:
            timer.cancel()
            worker.close()
        assert game.inputs == NEUTRAL
    segs = [SegmentDecoder(ZstdCompressor()).decompress(m.payload) for m in trainer.receive(timeout=2) if m.kind == "segment"]
    assert "game paused" in caplog.text and "game is back" in caplog.text
    by_episode: dict[int, list] = {}
    for s in sorted(segs, key=lambda s: s.seq):
        by_episode.setdefault(s.episode_id, []).append(s)
    faulted = [e for e, ss in by_episode.items() if ss[-1].episode_done and bool(ss[-1].arrays["truncated"][-1])
               and not bool(ss[-1].arrays["terminated"][-1])]
    assert faulted, "the paused episode must end truncated"
    assert len(by_episode) >= 2  # and the worker went on with a new episode
    for ss in by_episode.values():
        steps = [s.first_step for s in ss]
        assert steps == [i * 15 for i in range(len(ss))]  # no gap inside an episode
    produced = sum(len(s.arrays["reward"]) for s in segs)
    # every step of every finished episode was sent (the last, unfinished one may be cut short)
    done_steps = sum(sum(len(s.arrays["reward"]) for s in ss) for ss in by_episode.values() if ss[-1].episode_done)
    assert produced >= done_steps > 0 and stats.steps >= produced


def test_continuous_actions_reach_the_pad_as_analog_values() -> None:
    with FakeTM2020(countdown_s=0.2, fps=60) as game:
        from rulka.envs.tm2020.env import TM2020Env

        env = TM2020Env({"environment": {"backend": "tm2020", "continuous_actions": True,
                                         "tm2020": {"capture": "fake", **FAST}},
                         "nn": {"vis": {"no_image": True}}}, fake=game)
        try:
            assert env.action_space.shape == (3,)
            obs, _ = env.reset()
            assert set(obs) == {"float"}  # no_image: frames checked, not observed
            env.step(np.array([0.5, 0.0, -0.25], np.float32))
            env.step(np.array([0.5, 0.0, -0.25], np.float32))
            assert game.inputs == pytest.approx((0.5, 0.0, -0.25))
            obs, *_ = env.step(np.array([0.0, 0.8, 0.6], np.float32))
            prev = obs["float"][env.pipeline.slices["prev_actions"]].reshape(-1, 4)
            np.testing.assert_allclose(prev[-1], [0.0, 0.8, 0.0, 0.6], atol=1e-6)
        finally:
            env.close()


@pytest.mark.slow
def test_a_finished_race_terminates_and_the_next_reset_restarts_it() -> None:
    """Drive the fake track to the finish (scripted driver's actions through the env, 4x time):
    the episode terminates on the game's finish flag, then reset restarts the race."""
    from rulka.envs.sim.driver import ScriptedDriver

    with FakeTM2020(countdown_s=0.2, fps=120, time_scale=4.0) as game:
        env = _env(game)
        driver = ScriptedDriver(game.track)
        try:
            env.reset()
            info, te, tr = {}, False, False
            for _ in range(3000):
                _, _, te, tr, info = env.step(driver.action(game.car))
                if te or tr:
                    break
            assert te and not tr and info["finished"] and info["fault"] == ""
            assert info["progress_m"] == pytest.approx(env.pipeline.line.finish_progress)
            resets_before = game.resets
            _, info = env.reset()
            assert game.resets > resets_before and info["progress_m"] < 1.0 and not info["finished"]
        finally:
            env.close()


def _drive_past_checkpoint(env, game, driver, limit: int = 3000) -> dict:
    info = {}
    for _ in range(limit):
        _, _, te, tr, info = env.step(driver.action(game.car))
        if game.checkpoints_passed >= 1 or te or tr:
            break
    assert game.checkpoints_passed == 1 and not info.get("finished")
    return info


def test_fake_respawn_keeps_the_clock_and_give_up_restarts_at_zero() -> None:
    # TM2020 (game-interfaces.md, corrections): B / Backspace respawn at the last checkpoint with
    # the race clock running; Delete gives up (restart at zero)
    with FakeTM2020(countdown_s=0.2, fps=60, time_scale=4.0, checkpoint_fractions=(0.25,)) as game:
        game.respawn()  # before the first checkpoint a respawn restarts the run
        assert game.resets == 1 and game.respawns == 0
        game.start_autopilot()
        deadline = time.monotonic() + 30
        while game.checkpoints_passed < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        game.stop_autopilot()
        game.set_inputs(0.0, 0.0, 0.0)
        assert game.checkpoints_passed == 1
        t_before = game.record_values()[0]
        game.respawn()
        rec = game.record_values()
        cp = game.track.centerline[game.track.start_index + game.checkpoints[0]]
        assert rec[0] >= t_before > 0  # the clock runs on
        assert math.hypot(rec[2] - cp[0], rec[4] - cp[2]) < 1e-3 and game.respawns == 1
        game.give_up()
        rec = game.record_values()
        sx, sz, _ = game.track.start_pose
        assert rec[0] == -200 and game.checkpoints_passed == 0  # countdown again, from zero
        assert math.hypot(rec[2] - sx, rec[4] - sz) < 1e-3


def test_an_episode_ended_past_a_checkpoint_is_followed_by_one_from_the_line() -> None:
    from rulka.envs.sim.driver import ScriptedDriver

    with FakeTM2020(countdown_s=0.2, fps=120, time_scale=4.0, checkpoint_fractions=(0.2,)) as game:
        env = _env(game)
        driver = ScriptedDriver(game.track)
        try:
            env.reset()
            info = _drive_past_checkpoint(env, game, driver)
            assert info["progress_m"] > 0.15 * env.pipeline.line.finish_progress
            _, info = env.reset()  # the controller gives up: the next episode starts at the line
            assert info["progress_m"] < 1.0 and game.checkpoints_passed == 0
            assert 0 <= info["race_time_ms"] < 1000
        finally:
            env.close()


def test_a_reset_that_respawned_would_never_see_a_start_past_a_checkpoint() -> None:
    # the bug this replaces: resetting with B (a respawn) after a checkpoint keeps the clock
    # running, so no start signal comes and the reset gives up with the bindings message
    from rulka.envs.sim.driver import ScriptedDriver
    from rulka.envs.tm2020.fake import FakeGamepad
    from rulka.errors import UserError

    class RespawningPad(FakeGamepad):
        def _reset_button(self, down: bool) -> None:
            if down:
                self.game.respawn()

    with FakeTM2020(countdown_s=0.2, fps=120, time_scale=4.0, checkpoint_fractions=(0.2,)) as game:
        env = _env(game, reset_timeout_s=0.5)
        driver = ScriptedDriver(game.track)
        try:
            env.reset()
            _drive_past_checkpoint(env, game, driver)
            env.interface.controller = RespawningPad(game)
            with pytest.raises(UserError, match="does not restart on give up"):
                env.reset()
            assert game.respawns >= 3
        finally:
            env.close()


def test_platform_specific_parts_fail_with_a_clear_message_elsewhere() -> None:
    from rulka.envs.tm2020.capture import LinuxCapture, WindowsCapture
    from rulka.envs.tm2020.control import GamepadController
    from rulka.errors import UserError

    if sys.platform != "win32":
        with pytest.raises(UserError, match="needs Windows"):
            WindowsCapture()
    else:
        with pytest.raises(UserError, match="needs Linux"):
            LinuxCapture()
    try:
        import vgamepad  # noqa: F401
    except ImportError:
        with pytest.raises(UserError, match=r"pip install rulka\[trackmania\]"):
            GamepadController()


def test_the_fake_reports_no_turbo_surface_like_tm2020() -> None:
    # TM2020's EPlugSurfaceMaterialId 7 / 26 are Turbo_Deprecated (OpenplanetNext.json 1.29.5):
    # a turbo pad reads as its asphalt, and the other surfaces keep their ids
    from rulka.envs.sim import physics
    from rulka.envs.tm2020.fake import _material

    assert _material(physics.TURBO) == 16.0
    assert _material(physics.DIRT) == 6.0 and _material(physics.GRASS) == 2.0


def test_tmrl_lidar_matches_tmrl_0_7_1_on_the_same_images() -> None:
    # tests/data/tmrl_lidar_0.7.1.npz holds TMRL 0.7.1's own Lidar.lidar_20 on these images
    # (regenerate: python tests/tmrl_lidar_reference.py <tmrl-0.7.1 wheel>)
    import tmrl_lidar_reference as ref

    from rulka.envs.tm2020.capture import TmrlLidar

    with np.load(ref.DATA) as data:
        expected = [data[f"arr_{i}"] for i in range(len(data.files))]
    imgs = ref.images()
    assert len(expected) == len(imgs) == 18
    for img, want in zip(imgs, expected):
        got = TmrlLidar(img.shape[1], img.shape[0], dark=55).measure(img)
        np.testing.assert_array_equal(got, want)
    # BGRA frames (what the capture hands over) give the same scan: alpha is ignored
    bgra = np.concatenate([imgs[0], np.zeros(imgs[0].shape[:2] + (1,), np.uint8)], axis=2)
    np.testing.assert_array_equal(TmrlLidar(256, 128).measure(bgra), expected[0])


def test_tmrl_lidar_live_against_tmrl_when_it_is_available() -> None:
    import os
    from pathlib import Path

    import tmrl_lidar_reference as ref

    from rulka.envs.tm2020.capture import TmrlLidar

    source = os.environ.get("RULKA_TMRL_SOURCE", "")  # a tmrl 0.7.1 wheel or package folder
    if not source or not Path(source).exists():
        pytest.skip("set RULKA_TMRL_SOURCE to TMRL 0.7.1's wheel to compare live")
    tmrl_lidar = ref.load_tmrl_lidar(Path(source))
    for img in ref.images():
        want = tmrl_lidar(img).lidar_20(img, show=False)
        np.testing.assert_array_equal(TmrlLidar(img.shape[1], img.shape[0]).measure(img), want)


def test_lidar_tmrl_reaches_the_observation_and_points_the_other_way() -> None:
    from rulka.envs.tm2020.capture import Lidar, TmrlLidar, make_lidar

    img = np.full((128, 256, 3), 120, np.uint8)
    img[:, :60] = 0  # a dark border on the left of the image only
    rulka, tmrl = Lidar(256, 128).measure(img), TmrlLidar(256, 128).measure(img)
    # rulka's first beam points left, TMRL's right: the short beam is first in one, last in the other
    assert rulka[0] < rulka[-1] and tmrl[-1] < tmrl[0]
    assert isinstance(make_lidar("tmrl", 256, 128, 55), TmrlLidar)
    with FakeTM2020(countdown_s=0.2, fps=60) as game:
        from rulka.envs.tm2020.env import TM2020Env

        env = TM2020Env({"environment": {"backend": "tm2020", "tm2020": {"capture": "fake", "observation": "lidar",
                                                                         "lidar": "tmrl", **FAST}},
                         "nn": {"vis": {"no_image": True}}}, fake=game)
        try:
            obs, _ = env.reset()
            assert isinstance(env.interface._lidar, TmrlLidar)
            beams = obs["float"][-19:]
            assert (beams >= 0).all() and beams.max() > 1  # raw pixel indexes, as TMRL gives them
        finally:
            env.close()


@pytest.mark.slow
def test_a_sped_up_fake_game_still_sends_a_record_every_game_frame() -> None:
    """`fake_fps` is the game's frame rate: at `fake_time_scale` 4 the fake sends 4 x 60 records
    per wall second, so each 50 ms step of game time reads telemetry at most a frame old, as the
    game at real time does (at 60 records per wall second a step saw a record up to 67 game ms old
    and about one step in four saw no new record: the extended learning test trained on that)."""
    from rulka.envs.tm2020.env import TM2020Env

    cfg = {"environment": {"backend": "tm2020", "tm2020": {"capture": "fake", "control": "fake", "observation": "lidar",
                                                           "fake_fps": 60, "fake_time_scale": 4, "fake_countdown_s": 0.2}},
           "nn": {"vis": {"no_image": True}}}
    env = TM2020Env(cfg)
    try:
        assert env.fake.fps == 240
        env.reset()
        race_ms = []
        for _ in range(120):
            _, _, te, tr, info = env.step(0)
            race_ms.append(info["race_time_ms"])
            if te or tr:
                break
        steps = np.diff(race_ms)
        # a busy machine delays some steps (rtgym's elasticity), never to a stale record
        assert len(steps) > 50 and float(np.mean(steps == 0)) < 0.05, steps
    finally:
        env.close()
