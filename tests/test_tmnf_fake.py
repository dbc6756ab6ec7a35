"""The TMNF env against the fake game: lock-step driving, finishes, rewinds, frames, the map cycle,
and each failure mode of fact sheet E, with a worker and a trainer counting what arrives."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import ConstActor, CountingAgent, ListMemory

from rulka.config import config_from_dict
from rulka.envs.sim.driver import ScriptedDriver
from rulka.envs.sim.tracks import get_track
from rulka.envs.tmnf.env import TmnfEnv
from rulka.envs.tmnf.fake import FakeFaults
from rulka.envs.tmnf.game import FakeLauncher
from rulka.errors import UserError
from rulka.net.local import LocalHub
from rulka.trainer.trainer import Trainer
from rulka.worker.worker import Worker

KEY = Ed25519PrivateKey.generate()


def tmnf_cfg(image: bool = False, **env):
    return config_from_dict({
        "environment": {"backend": "tmnf", "game_launch": "fake", "tmi_protection_timeout_s": 1,
                        "timeout_during_run_ms": 3000, **env},
        "nn": {"vis": {"no_image": not image, "image_size": {"width": 32, "height": 24}}},
        "worker": {"segment_max_steps": 40},
    })


def make_env(faults=None, image=False, **env):
    launcher = FakeLauncher(faults=faults, countdown_ms=-100)
    return TmnfEnv(tmnf_cfg(image, **env), launcher=launcher, port=0), launcher


def drive_scripted(env, launcher, options=None):
    obs, info = env.reset(options=options)
    game = launcher.game
    driver = ScriptedDriver(game._track)
    steps = 0
    while True:
        obs, reward, terminated, truncated, info = env.step(driver.action(game._car))
        steps += 1
        if terminated or truncated:
            return obs, info, steps, terminated


def test_scripted_driver_finishes_in_the_simulators_reference_time_and_the_game_is_parked():
    env, launcher = make_env()
    try:
        for _ in range(2):  # the second rollout rewinds to the cached start state
            obs, info, steps, terminated = drive_scripted(env, launcher)
            assert terminated and info["finished"] and info["cutoff"] == ""
            assert info["race_time_ms"] == get_track("default").reference_time_ms
            assert obs["float"].shape == env.observation_space["float"].shape
        game = launcher.game
        assert game.counters["races"] == 2  # one countdown after the map load, then rewinds
        log = game.log
        assert "cmd:map default" in log and "cmd:cam 2" in log and "interface:0" in log
        deadline = time.monotonic() + 2
        while game._timeout_ms != 600_000_000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert game._timeout_ms == 600_000_000  # parked between runs with the long timeout
        assert env.counters["finishes"] == 2
    finally:
        env.close()


def test_frames_are_the_requested_size_grayscale_and_match_the_state():
    env, launcher = make_env(image=True)
    try:
        obs, info = env.reset()
        assert obs["img"].shape == (24, 32) and obs["img"].dtype == np.uint8
        for _ in range(5):
            obs, _, _, _, info = env.step(0)
        # the fake writes the race time into the alpha bytes of the first pixels: grab the raw frame
        c = env.client
        assert c.frame_size is None
        # gray is the camera's own image: the same the simulator shows at this pose
        game = launcher.game
        from rulka.envs.sim.camera import Camera

        expected = Camera(game._track, 32, 24).render(game._car.x, game._car.z, game._car.heading)
        assert np.array_equal(obs["img"], expected)
        assert info["race_time_ms"] == 250
    finally:
        env.close()


def test_a_frame_captured_smaller_than_requested_is_an_error_not_a_wrong_image():
    # the fake's window is smaller than the 32x24 frame: it captures 20x24, as TMInterface's
    # CaptureScreenshot(vec2&inout) would, and the client refuses it with the reason
    launcher = FakeLauncher(countdown_ms=-100, window_size=(20, 24))
    env = TmnfEnv(tmnf_cfg(True), launcher=launcher, port=0)
    try:
        with pytest.raises(UserError, match="captured a 20x24 frame where 32x24 was requested"):
            env.reset()
        assert launcher.game.counters["frames"] >= 1  # frames were captured, and all refused
    finally:
        env.close()


def test_frames_are_clean_the_console_closed_and_the_pb_ghost_hidden(tmp_path):
    # the fake draws TMInterface's console while it is open (it opens at launch) and the PB
    # ghost when the map's personal-best autosave exists; rulka closes the one after a launch
    # and renames the other away before loading the map, so the frames show only the track
    from rulka.envs.sim.camera import Camera
    from rulka.envs.tmnf.fake import draw_overlays

    base = tmp_path / "TrackMania"
    autosaves = base / "Tracks" / "Replays" / "Autosaves"
    autosaves.mkdir(parents=True)
    (autosaves / "Player_default.Replay.gbx").write_bytes(b"pb")
    cfg = config_from_dict({
        "environment": {"backend": "tmnf", "game_launch": "fake", "tmi_protection_timeout_s": 1,
                        "timeout_during_run_ms": 3000},
        "nn": {"vis": {"no_image": False, "image_size": {"width": 32, "height": 24}}},
        "user": {"trackmania_base_path": str(base), "username": "Player"},
    })
    launcher = FakeLauncher(countdown_ms=-100, trackmania_base_path=str(base), username="Player")
    env = TmnfEnv(cfg, launcher=launcher, port=0)
    try:
        obs, _ = env.reset()
        for _ in range(3):
            obs, *_ = env.step(0)
        game = launcher.game
        assert not game.console_open and not game.ghost_visible
        assert [line for line in game.log if line == "cmd:toggle_console"] == ["cmd:toggle_console"]
        assert not (autosaves / "Player_default.Replay.gbx").exists()
        assert (autosaves / "Player_default.Replay.gbx.bak").read_bytes() == b"pb"
        assert env.game.counters["ghosts_hidden"] == 1
        clean = Camera(game._track, 32, 24).render(game._car.x, game._car.z, game._car.heading)
        assert np.array_equal(obs["img"], clean)
        # the overlays the fake would have drawn are visible: a frame with them is not clean
        dirty = np.repeat(clean[..., None], 4, axis=2)
        draw_overlays(dirty, console=True, ghost=True)
        assert not np.array_equal(dirty[..., 0], clean)
    finally:
        env.close()


def test_map_cycle_entries_reach_the_game_and_the_metrics(tmp_path):
    env, launcher = make_env()
    try:
        _, info, _, _ = drive_scripted(env, launcher, {"map": "hairpins", "short_name": "hp"})
        assert info["map_name"] == "hp" and info["finished"]
        assert launcher.game.map_name == "hairpins"
        _, info, _, _ = drive_scripted(env, launcher, {"map": "default", "short_name": "def"})
        assert info["map_name"] == "def" and info["finished"]
        assert info["race_time_ms"] == get_track("default").reference_time_ms
    finally:
        env.close()


# ------------------------------------------------------------------------------- failure modes
def run_worker_against_trainer(env, episodes, max_s=120):
    """A worker drives ``env`` for ``episodes`` episodes; a trainer ingests. Returns (worker, trainer, produced)."""
    hub = LocalHub()
    trainer = Trainer({"worker": {"segment_max_steps": 40}}, hub.trainer_link(), agent=CountingAgent(),
                      memory=ListMemory(), signing_key=KEY)
    worker = Worker(tmnf_cfg(), hub.worker_link("pc1"), env=env, actor=ConstActor())
    done = threading.Event()
    stats = {}

    def work():
        stats["w"] = worker.run(max_episodes=episodes, drain_timeout_s=20)
        done.set()

    th = threading.Thread(target=work, daemon=True)
    th.start()
    link = trainer.link
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline and not (done.is_set() and not worker.outbox):
        trainer.ingest(link.receive(timeout=0.05))
    th.join(5)
    worker.close()
    return worker, trainer


@pytest.mark.slow
@pytest.mark.parametrize("fault, restarted", [
    # frozen game: timeout, un-minimise and reconnect, timeout again: killed, relaunched
    (FakeFaults(hang_at_ms=700), True),
    (FakeFaults(close_at_ms=700), False),  # connection closed mid-race: reconnect to the live game
    # dropped to the menus mid-race: timeout, un-minimised, reconnected, map reloaded (no relaunch)
    (FakeFaults(menus_at_ms=700), "unminimised"),
    # minimised mid-race (the game pauses): timeout, un-minimised, reconnected (no relaunch)
    (FakeFaults(minimise_at_ms=700), "unminimised"),
    (FakeFaults(slow_frame_at_ms=700, slow_frame_s=0.4), False),  # slow render inside the timeout: nothing lost
    (FakeFaults(slow_frame_at_ms=700, slow_frame_s=2.0), "unminimised"),  # a render slower than the timeout
    (FakeFaults(split_writes=True, refuse_for_s=0.5, startup_for_s=0.5), False),  # late start, split writes
], ids=["hang", "close_mid_race", "menus", "minimised", "slow_frame", "frame_timeout", "late_start_split_writes"])
def test_worker_recovers_from_each_failure_and_the_trainer_gets_every_segment(fault, restarted):
    image = fault.slow_frame_at_ms is not None
    launcher = FakeLauncher(faults=fault, countdown_ms=-100)
    env = TmnfEnv(tmnf_cfg(image), launcher=launcher, port=0)
    worker, trainer = run_worker_against_trainer(env, episodes=3)
    assert worker.stats.episodes == 3
    assert len(worker.outbox) == 0
    # every segment the worker produced reached the trainer's memory, in full episodes
    assert trainer.state.segments == worker.stats.segments
    mem = trainer.memory.segments
    assert sum(s.num_transitions for s in mem) == worker.stats.steps
    assert sum(s.episode_done for s in mem) == 3
    fired = [f for f in ("hang", "close", "menus", "slow_frame", "minimise") if f in fault.fired]
    if fault.hang_at_ms or fault.close_at_ms or fault.menus_at_ms or fault.slow_frame_at_ms or fault.minimise_at_ms:
        assert fired, "the fault never fired"
    lost = env.counters["game_lost"]
    if restarted == "unminimised":
        assert lost >= 1 and env.game.counters["unminimised"] >= 1 and env.game.counters["restarts"] == 0
        assert env.game.counters["launches"] == 1
    elif restarted:
        assert env.game.counters["restarts"] >= 1 and lost >= 1
        ends = [s.info for s in mem if s.episode_done]
        assert ends[0]["finished"] is False  # the episode cut by the failure ended truncated
    elif fault.close_at_ms:
        assert lost == 1 and env.game.counters["restarts"] == 0 and env.game.counters["reconnects"] == 2
    else:
        assert lost == 0 and env.game.counters["restarts"] == 0


def test_plugin_timeout_drops_a_client_that_stalls_inside_a_callback():
    env, launcher = make_env(timeout_during_run_ms=300)
    try:
        env.reset()
        env.step(0)
        time.sleep(0.6)  # the policy "thinks" longer than the plugin's run timeout
        _, _, _, truncated, info = env.step(0)
        assert truncated and info["cutoff"] == "game_lost"
        assert launcher.game.counters["timeouts"] == 1 and "drop:timeout" in launcher.game.log
        env.reset()  # reconnects to the live game
        _, _, _, truncated, _ = env.step(0)
        assert not truncated and env.game.counters["restarts"] == 0
    finally:
        env.close()


def test_game_reboot_interval_restarts_between_episodes():
    env, launcher = make_env(game_reboot_interval=1)
    try:
        env.reset()
        env.step(0)
        time.sleep(1.1)
        env.reset()
        assert env.game.counters["reboots"] == 1 and len(launcher.games) == 2
        assert not launcher.games[0].alive and launcher.games[1].alive
    finally:
        env.close()


def test_instance_slots_give_each_env_its_own_port(tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    base = s.getsockname()[1]
    s.close()
    cfg = config_from_dict({"environment": {"backend": "tmnf", "game_launch": "attach"},
                            "map_cycle": {"entries": [{"short_name": "a", "map_path": "A.Challenge.Gbx",
                                                       "reference_line_path": "a.npy"}]},
                            "nn": {"vis": {"no_image": True}}, "worker": {"num_envs": 2},
                            "user": {"base_tmi_port": base - 200 if base > 1200 else base + 200}})
    a, b = TmnfEnv(cfg), TmnfEnv(cfg)
    try:
        assert {a.game.port, b.game.port} == {cfg.user.base_tmi_port, cfg.user.base_tmi_port + 1}
        from rulka.errors import UserError

        with pytest.raises(UserError, match="all 2 TMNF instance slots"):
            TmnfEnv(cfg)
    finally:
        a.close()
        b.close()
    TmnfEnv(cfg).close()  # released slots can be claimed again


@pytest.mark.slow
def test_a_crashed_game_process_is_relaunched_through_the_launch_script(tmp_path):
    """The Linux/Wine path: a script started with the port; the game process dies mid-race; the
    episode ends truncated, the next reset launches the script again."""
    import socket
    import stat
    import sys

    from rulka.envs.tmnf.game import ScriptLauncher

    script = tmp_path / "launch_game.sh"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -m rulka.envs.tmnf.fake --port $1 --countdown-ms -100\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = TmnfEnv(tmnf_cfg(game_start_timeout_s=30, tmi_protection_timeout_s=15), launcher=ScriptLauncher(str(script), settle_s=0.2, lock_path=str(tmp_path / "spawn.lock")),
                  port=port)
    try:
        env.reset()
        for _ in range(3):
            assert not env.step(0)[3]
        first = env.game.process
        first.proc.kill()  # the game crashes
        first.proc.wait(10)
        truncated, info = False, {}
        for _ in range(5):
            _, _, _, truncated, info = env.step(0)
            if truncated:
                break
        assert truncated and info["cutoff"] == "game_lost"
        env.reset()
        assert env.game.process is not first and env.game.process.alive()
        assert env.game.counters["launches"] == 2
        _, _, _, truncated, _ = env.step(0)
        assert not truncated
    finally:
        env.close()
    assert env.game.process is None


def test_hold_keeps_the_game_waiting_through_a_long_pause_mid_episode():
    """The worker waits for the trainer's credit between segments: the env raises the plugin's
    timeout for the pause, and restores the run timeout after."""
    env, launcher = make_env(timeout_during_run_ms=300)
    try:
        env.reset()
        env.step(0)
        env.hold()
        time.sleep(0.8)  # longer than the run timeout
        env.release()
        _, _, _, truncated, _ = env.step(0)
        assert not truncated and launcher.game.counters["timeouts"] == 0
        deadline = time.monotonic() + 2
        while launcher.game._timeout_ms != 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert launcher.game._timeout_ms == 300
    finally:
        env.close()


@pytest.mark.parametrize("track_name", ["default", "hairpins"])
def test_checkpoint_gates_span_every_drivable_cell_across_the_track(track_name):
    # a car on the verge must pass a checkpoint as it passes the simulator's finish line; a gate
    # narrower than the drivable width let the greedy policy reach the line without its checkpoints
    # and never finish (the TMNF-fake learning run, 2026-11-23)
    from rulka.envs.sim.tracks import WALL
    from rulka.envs.tmnf.fake import _gates

    track = get_track(track_name)
    gates = _gates(track, (1 / 3, 2 / 3, 1.0))
    assert gates[-1][4] == pytest.approx(track.finish_line[4] + 1.0)
    ox, oz = track.origin
    for gx, gz, tx, tz, half in gates:
        for side in (1.0, -1.0):  # walk from the centre line outward to the first wall
            lateral = 0.0
            while True:
                x, z = gx + side * lateral * tz, gz - side * lateral * tx
                row, col = int((z - oz) / track.cell_size), int((x - ox) / track.cell_size)
                if track.materials[row, col] == WALL:
                    break
                assert lateral <= half, (track_name, side * lateral, half)
                lateral += 0.25


@pytest.mark.skipif(sys.platform == "win32", reason="the spawn lock is for Wine launches on Linux")
def test_wine_launches_are_serialised_by_the_spawn_lock(tmp_path):
    # two workers launching at once: the second spawn waits until the first has settled
    import stat

    from rulka.envs.tmnf.game import ScriptLauncher

    stamps = tmp_path / "stamps"
    script = tmp_path / "launch_game.sh"
    script.write_text(f"#!/bin/sh\n{sys.executable} -c 'import time; print(time.monotonic())' >> {stamps}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    launchers = [ScriptLauncher(str(script), settle_s=0.6, lock_path=str(tmp_path / "spawn.lock")) for _ in range(2)]
    procs = []
    threads = [threading.Thread(target=lambda lch=lch, p=p: procs.append(lch.launch(p))) for lch, p in zip(launchers, (1, 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for p in procs:
        p.proc.wait(10)
    first, second = sorted(float(x) for x in stamps.read_text().split())
    assert second - first >= 0.5  # without the lock both start within a few milliseconds


def test_the_window_is_focused_once_per_launch_after_the_first_action():
    env, launcher = make_env()
    try:
        _, info, steps, _ = drive_scripted(env, launcher)
        drive_scripted(env, launcher)  # a second rollout on the same game: no second focus
        assert steps > 1 and launcher.game.focus_calls == 1 and env.game.counters["focused"] == 1
    finally:
        env.close()
