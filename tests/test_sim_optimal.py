"""``rulka sim optimal``: the optimal-race solver's tapes replay exactly, it is never slower than
its seed, and its tapes become pretraining demonstrations."""

from __future__ import annotations

import json

import pytest

from rulka.cli import main
from rulka.envs.sim.env import SimTrackEnv
from rulka.envs.sim.optimal import (
    CONTROLS,
    SearchSettings,
    Tape,
    beam_search,
    expand_tape,
    load_state,
    replay,
    save_state,
    scripted_tape,
    solve,
    solver_time_ms,
)
from rulka.envs.sim.physics import CarPhysics
from rulka.envs.sim.tracks import get_track
from rulka.errors import UserError

# a short track: one corner, a race of about 5 s (the solver's tests run in seconds)
SHORT = {"name": "short", "width": 14, "runoff": 6,
         "pieces": [{"straight": 40}, {"turn": 90, "radius": 30}, {"straight": 30}]}


@pytest.fixture(scope="module")
def short_track(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("track") / "short.json"
    path.write_text(json.dumps(SHORT), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def solved(short_track: str) -> tuple[str, object]:
    return short_track, solve(short_track, steps_per_action=5, width=2, n_random_seeds=0)


def _env_race(track: str, actions: list[int], steps_per_action: int) -> tuple[int | None, int, bool]:
    """(race time, actions taken, ended on the last action) of ``actions`` replayed in SimTrackEnv."""
    env = SimTrackEnv(track=track, image=False, tm_engine_step_per_action=steps_per_action)
    env.reset(seed=0)
    info: dict = {}
    done, taken = False, 0
    for a in actions:
        _, _, terminated, truncated, info = env.step(a)
        taken += 1
        done = terminated or truncated
        if done:
            break
    return (info["race_time_ms"] if info.get("finished") else None), taken, done and taken == len(actions)


def test_the_tape_replays_in_the_env_to_the_same_time(solved, tmp_path):
    track, sol = solved
    tape = sol.tape
    assert tape.race_time_ms is not None and tape.ms_per_action == 50
    read = Tape.read(tape.write(tmp_path / "tape.json"))
    assert read.actions == tape.actions and read.race_time_ms == tape.race_time_ms
    race_ms, taken, ended_on_last = _env_race(track, read.actions, read.steps_per_action)
    assert race_ms == tape.race_time_ms and taken == len(tape.actions) and ended_on_last


def test_the_solver_beats_the_scripted_driver_and_reports_its_search(solved):
    _, sol = solved
    assert sol.scripted_time_ms is not None
    assert sol.tape.race_time_ms < sol.scripted_time_ms  # measured: 5.27 s against 6.06 s at width 4
    s = sol.tape.search
    assert s["width"] == 2 and s["doubled"] and set(s["best_ms_by_width"]) == {"2", "4"}
    assert s["best_ms_by_width"]["4"] <= s["best_ms_by_width"]["2"]  # the doubled chain starts from the first
    assert s["improved_by_doubling_ms"] == s["best_ms_by_width"]["2"] - s["best_ms_by_width"]["4"]
    assert s["nodes_expanded"] > 0 and s["seconds"] > 0
    assert [p["width"] for p in sol.passes if p["pass"] == "beam"] == [2, 2, 4, 4]


def test_a_beam_is_never_slower_than_its_seed(short_track):
    track = get_track(short_track)
    seed = scripted_tape(track, 5)
    seed_ms = replay(track, seed, 5).finish_time_ms
    result = beam_search(track, 5, SearchSettings(width=1), seed=seed)
    assert result.race_time_ms is not None and result.race_time_ms <= seed_ms
    assert replay(track, result.actions, 5).finish_time_ms == result.race_time_ms


def test_a_coarser_tape_seeds_a_finer_search_which_is_never_slower(short_track):
    """A 100 ms tape is a 50 ms race with each action held twice: it replays to the same tick and
    a 50 ms search seeded with it finishes no later."""
    coarse = solve(short_track, steps_per_action=10, width=1, doubling=False, n_random_seeds=0).tape
    track = get_track(short_track)
    assert replay(track, expand_tape(coarse, 50), 5).finish_time_ms == coarse.race_time_ms
    fine = solve(short_track, steps_per_action=5, width=1, doubling=False, n_random_seeds=0, seed_from=[coarse])
    assert fine.tape.race_time_ms <= coarse.race_time_ms
    with pytest.raises(UserError, match="multiple of the search's"):
        expand_tape(coarse, 30)


def test_a_saved_state_steps_exactly_like_the_car_it_came_from(short_track):
    track = get_track(short_track)
    car = CarPhysics(track)
    for a in [0] * 30 + [1] * 6 + [7] * 3:
        car.step(CONTROLS[a], 5)
    state = save_state(car)
    car.step(CONTROLS[2], 5)
    after = save_state(car)
    other = CarPhysics(track)
    load_state(other, state)
    other.step(CONTROLS[2], 5)
    assert save_state(other) == after
    assert after != state


def test_cli_takes_the_decision_period_and_writes_a_replayable_tape(short_track, tmp_path, capsys):
    out = tmp_path / "t100.json"
    assert main(["sim", "optimal", short_track, "--steps-per-action", "10", "--width", "1", "--no-double",
                 "--random-seeds", "0", "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "(100 ms decisions)" in text and "width 1" in text
    tape = Tape.read(out)
    assert tape.ms_per_action == 100 and tape.search["doubled"] is False
    race_ms, taken, ended_on_last = _env_race(short_track, tape.actions, 10)
    assert race_ms == tape.race_time_ms and ended_on_last


def test_cli_reads_the_decision_period_from_a_config(short_track, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("environment:\n  tm_engine_step_per_action: 10\n", encoding="utf-8")
    out = tmp_path / "t.json"
    assert main(["sim", "optimal", short_track, "--config", str(cfg), "--width", "1", "--no-double",
                 "--random-seeds", "0", "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ms_per_action"] == 100 and Tape.read(out).ms_per_action == 100
    cfg.write_text("environment:\n  continuous_actions: true\n", encoding="utf-8")
    assert main(["sim", "optimal", short_track, "--config", str(cfg)]) == 2
    assert "discrete action set" in capsys.readouterr().err


@pytest.mark.parametrize("text, why", [
    ("not json", "cannot read tape"),
    ('{"format": "other"}', "not a rulka simulator tape"),
    ('{"format": "rulka-sim-tape/1", "track": "default", "ms_per_action": 50, "actions": [0, 12]}', "outside"),
    ('{"format": "rulka-sim-tape/1", "track": "default", "ms_per_action": 55, "actions": [0]}', "multiple of 10"),
    ('{"format": "rulka-sim-tape/1", "track": "default", "actions": [0]}', "missing or has a bad field"),
])
def test_a_bad_tape_is_a_one_line_error(text, why, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=why) as info:
        Tape.read(path)
    assert "\n" not in str(info.value)


def test_shipped_solver_times_cover_the_bundled_tracks_and_beat_the_driver():
    """The times ``rulka eval`` compares against (rulka/envs/sim/optimal_times.json, written by
    bench/optimal.py): every bundled track at the default 50 ms, each no slower than its reference."""
    from rulka.envs.sim.tracks import bundled_track_names

    for name in bundled_track_names():
        opt = solver_time_ms(name, 50)
        assert opt is not None, name
        assert opt <= get_track(name).reference_time_ms, name
    assert solver_time_ms("default", 37) is None and solver_time_ms("no-such-track", 50) is None


def test_a_damaged_solver_times_file_reads_as_no_time(tmp_path):
    bad = tmp_path / "times.json"
    bad.write_text("{broken", encoding="utf-8")
    assert solver_time_ms("default", 50, path=bad) is None
    assert solver_time_ms("default", 50, path=tmp_path / "absent.json") is None


def test_solver_tapes_record_as_demonstrations_that_load_back(solved, tmp_path, capsys):
    """``rulka pretrain record --tape``: the tape's race as an episode file, the same actions,
    finishing in the tape's time, ready for ``rulka pretrain bc|dqfd``."""
    from rulka.pretrain.data import episode_files, load_steps

    track, sol = solved
    tape_file = sol.tape.write(tmp_path / "tape.json")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("environment:\n  track: default\nnn:\n  vis:\n    no_image: true\n", encoding="utf-8")
    out = tmp_path / "demos"
    assert main(["pretrain", "record", str(cfg), "--out", str(out), "--tape", str(tape_file)]) == 0
    assert "wrote 1 episode files" in capsys.readouterr().out
    steps = load_steps(episode_files([out]), with_images=False)
    assert steps.actions.tolist() == sol.tape.actions and steps.episodes == 1
    # the same episode format as the scripted driver's recordings, which tests/test_pretrain.py trains on
    assert steps.floats.shape[0] == len(sol.tape.actions) and steps.returns is not None
    # a config at another decision period refuses the tape in one line
    cfg.write_text("environment:\n  tm_engine_step_per_action: 10\n", encoding="utf-8")
    assert main(["pretrain", "record", str(cfg), "--out", str(out), "--tape", str(tape_file)]) == 2
    err = capsys.readouterr().err
    assert "decides every 50 ms" in err and err.count("\n") == 1
