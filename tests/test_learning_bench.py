"""``bench/study/tracks.py`` (per-track first finish, greedy time vs the scripted driver) and the
map-cycle config it measures; the 30-minute learning runs themselves are ``extended``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.study import tracks as learning

REPO = Path(__file__).resolve().parents[1]


def test_cycle_config_plays_every_bundled_track_and_validates():
    from rulka.config import load_config
    from rulka.envs.map_cycle import MapCycle

    cfg = load_config(REPO / "configs" / "sim_iqn_cycle.yaml")
    cycle = MapCycle.from_config(cfg)
    assert cycle is not None
    assert {e.map_path for e in cycle.entries} == set(learning.BUNDLED)
    greedy = [e.map_path for e in cycle.entries if not e.is_exploration]
    assert sorted(greedy) == sorted(learning.BUNDLED)  # one greedy evaluation per track per cycle


def test_first_finish_is_the_first_record_with_a_finish_on_that_track(tmp_path):
    from rulka.telemetry.metrics import FINISH_RATE, per_map

    records = [
        {"step": 1000, "wall_time": 100.0, "metrics": {per_map(FINISH_RATE, "default"): 0.0}},
        {"step": 5000, "wall_time": 160.0, "metrics": {per_map(FINISH_RATE, "default"): 0.5,
                                                       per_map(FINISH_RATE, "slalom"): 0.0}},
        {"step": 9000, "wall_time": 400.0, "metrics": {per_map(FINISH_RATE, "default"): 0.0,
                                                       per_map(FINISH_RATE, "slalom"): 1.0}},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert learning.first_finishes(tmp_path) == {"default": {"frames": 5000, "minutes": 1.0},
                                                 "slalom": {"frames": 9000, "minutes": 5.0}}
    assert learning.first_finishes(tmp_path / "missing") == {}


def test_scripted_driver_time_is_the_reference_the_bench_compares_with():
    # the README's figure for the default track: 22.84 s
    assert learning.scripted_time_s("default") == pytest.approx(22.84, abs=0.01)


# the map cycle's goal (bench/targets.py RUN_TARGETS["map_cycle_runs"]): the best policy beats the scripted driver
# on 5 of 5 bundled tracks and finishes 8 of 10 generated ones. Recorded on the shipped recipe (the arm
# finish_100ms, 30 minutes, seeds 0-4, 2026-11-29/30): 5 of 5 in 4 runs, 4 of 5 in one (hairpins +0.22 s);
# generated 9-10 of 10 in every run; from moved starts the median race within 1.08x the driver on every
# track of seeds 2-4 (the moved starts of seeds 0-1 were not raced). So this fails in about one run of five.
BUNDLED_NEEDED, GEN_NEEDED, GEN_SEEDS = 5, 8, [str(s) for s in range(1, 11)]
MOVED_BAR = 1.10  # x the scripted driver, the median race from moved starts on each bundled track


@pytest.mark.extended
@pytest.mark.timeout(3600)
def test_cycle_policy_beats_the_scripted_driver_on_every_track(tmp_path, capsys):
    """The map cycle's goal as the targets table holds it: 30 minutes, 2 workers, one policy (the run's
    best, ``<run>/best``, driven again here) beats the scripted driver on all 5 bundled tracks from the
    start line, races within 1.10x of it from moved starts (the median of 5) on each, and finishes 8 of
    10 generated tracks it never saw. Outcome recorded in bench/history/extended_runs.json."""
    learning.main(["run", "--minutes", "30", "--run-dir", str(tmp_path / "run"), "--perturbed-races", "5",
                   "--gen-seeds", *GEN_SEEDS])
    result = json.loads(capsys.readouterr().out)
    summary = result["summary"]
    assert result["policy"] == "best", "the run wrote no best policy (map_cycle.keep_best_policy)"
    bundled = [r for r in result["tracks"] if not r["track"].startswith("gen:")]
    gen = [r for r in result["tracks"] if r["track"].startswith("gen:")]
    assert summary["bundled_beats_scripted"] >= BUNDLED_NEEDED, summary
    for row in bundled:
        moved = row["perturbed"]
        assert moved["finished"] and moved["race_time_s"] <= MOVED_BAR * row["scripted_s"], (row["track"], moved)
    assert sum(r["greedy"]["finished"] for r in gen) >= GEN_NEEDED, [(r["track"], r["greedy"]) for r in gen]


IMAGE_BAR = 1.20  # x the scripted driver; the one recorded run: 25.1 s (1.10x, 2026-11-24)


@pytest.mark.extended
@pytest.mark.timeout(3600)
def test_image_policy_finishes_the_default_track(tmp_path, capsys):
    """The 48x36 camera + floats recipe: its greedy policy finishes the default track within 1.20x the
    scripted driver, from the start line and (the median of 5) from moved starts."""
    learning.main(["run", "--config", str(REPO / "configs" / "sim_iqn.yaml"), "--minutes", "20",
                   "--run-dir", str(tmp_path / "run"), "--set", "nn.vis.no_image=false", "--perturbed-races", "5",
                   "--gen-seeds"])
    rows = json.loads(capsys.readouterr().out)["tracks"]
    default = next(r for r in rows if r["track"] == "default")
    for race in (default["greedy"], default["perturbed"]):
        assert race["finished"] and race["race_time_s"] <= IMAGE_BAR * default["scripted_s"], default


class _ScriptedRaces:
    """An env whose n-th race ends as ``outcomes[n]``: a race time (finished) or metres (cut off)."""

    def __init__(self, outcomes):
        self.outcomes, self.n = list(outcomes), -1
        self.car = type("Car", (), {"race_time_ms": 0})()

    def reset(self, seed=None):
        self.n += 1
        self.car.race_time_ms = 0
        return 0, {}

    def step(self, action):
        out = self.outcomes[self.n]
        finished = isinstance(out, float)
        self.car.race_time_ms = out * 1000 if finished else 60_000
        info = {"finished": finished, "race_time_ms": self.car.race_time_ms,
                "progress_m": 400.0 if finished else float(out[:-1]), "cutoff": "" if finished else "no_progress"}
        return 0, 1.0, True, False, info


class _Actor:
    resets = 0

    def reset(self):
        self.resets += 1

    def act(self, obs, test=False):
        return 0


def test_greedy_races_are_judged_by_the_median_race():
    actor = _Actor()
    out = learning.greedy_races(_ScriptedRaces([30.0, 20.0, "150m", 25.0, 40.0]), actor, 5, 120.0)
    assert actor.resets == 5
    assert out["finished"] and out["race_time_s"] == 30.0  # 20, 25, 30, 40, unfinished
    assert out["best_s"] == 20.0 and out["finishes"] == 4
    assert out["times_s"] == [30.0, 20.0, None, 25.0, 40.0]
    # most races cut off: the median race is the one that drove furthest of the unfinished
    out = learning.greedy_races(_ScriptedRaces(["100m", 22.0, "200m"]), _Actor(), 3, 120.0)
    assert not out["finished"] and out["progress_m"] == 200.0 and out["best_s"] == 22.0
    assert learning._greedy_text(out) == "not finished (no_progress at 200.0 m) (median of 3; best 22.00 s, 1/3 finished)"


def test_record_adds_one_row_per_track_to_the_benchmarks_table(tmp_path):
    result = {"date": "2026-11-24T06:50:00+00:00", "tracks": [
        {"track": "slalom", "trained_on": True, "first_finish": {"frames": 103307, "minutes": 2.0},
         "greedy": {"finished": True, "race_time_s": 14.45, "progress_m": 345.5, "cutoff": ""},
         "scripted_s": 16.38, "beats_scripted": True},
        {"track": "gen:2", "trained_on": False, "first_finish": None,
         "greedy": {"finished": False, "race_time_s": None, "progress_m": 202.7, "cutoff": "no_progress"},
         "scripted_s": 22.19, "beats_scripted": False}]}
    path = tmp_path / "track_results.json"
    path.write_text('[{"run": "earlier"}]')
    learning.record(result, "cycle 30 min", "python -m bench.study tracks run", path)
    rows = json.loads(path.read_text())
    assert [r["run"] for r in rows] == ["earlier", "cycle 30 min", "cycle 30 min"]
    assert rows[1]["greedy"] == "14.45 s" and rows[1]["beats_scripted"] == "yes"
    assert rows[1]["first_finish_min"] == 2.0 and rows[1]["date"] == "2026-11-24 06:50 UTC"
    assert rows[2]["greedy"] == "not finished (no_progress at 202.7 m)" and rows[2]["trained_on"] == "no"
    assert rows[2]["first_finish_frames"] == ""


def test_generated_track_seeds_are_drawn_fresh_and_distinct():
    a, b = learning.draw_gen_seeds(10), learning.draw_gen_seeds(10)
    assert len(set(a)) == 10 and a != b  # two draws of 10 from 2^31 do not repeat
    assert all(s >= 1000 for s in a)  # never the low seeds the recipes' notes quote


class _PursuitActor:
    """The scripted driver as an actor on ``env`` (it reads the car, not the observation)."""

    def __init__(self, env):
        from rulka.envs.sim.driver import ScriptedDriver

        self.env, self.driver = env, ScriptedDriver(env.track)

    def reset(self):
        self.driver.reset()

    def act(self, obs, test=False):
        return self.driver.action(self.env.car)


def test_perturbed_races_start_from_different_places_and_give_their_median():
    from rulka.envs.sim.env import SimTrackEnv

    env = SimTrackEnv(track="default", image=False)
    actor = _PursuitActor(env)
    plain = learning.greedy_races(env, actor, 3, 120.0)
    assert plain["times_s"] == [22.84] * 3  # from the start line the simulator repeats a race exactly
    out = learning.perturbed_races(env, actor, 5, 120.0, noise=2.0)
    assert env.start_noise == 0.0  # the env's own setting is put back
    assert out["races"] == 5 and out["start_noise"] == 2.0 and out["finishes"] == 5
    times = out["times_s"]
    assert len(set(times)) > 1, times  # the starts differ, so the races do
    assert out["race_time_s"] == sorted(times)[2] and out["best_s"] == min(times)
    # the same seeds give the same starts: a study can be raced again
    assert learning.perturbed_races(env, actor, 5, 120.0, noise=2.0)["times_s"] == times


def test_a_race_time_bar_holds_the_start_line_and_the_median_of_the_moved_starts():
    from roles_helpers import assert_race_time_within

    # the scripted driver takes 22.84 s on the default track: bar 1.0 is 22.84 s
    line, moved = (True, 22_000, 617.0), [(True, 30_000, 617.0), (True, 21_000, 617.0), (False, None, 300.0),
                                          (True, 22_500, 617.0)]
    assert_race_time_within([line, *moved], 1.0)  # moved median (lower middle): 22.5 s
    with pytest.raises(AssertionError, match="from the start line"):
        assert_race_time_within([(True, 23_000, 617.0), *moved], 1.0)
    with pytest.raises(AssertionError, match="median from moved starts"):
        assert_race_time_within([line, *moved[:3], (False, None, 200.0)], 1.0)  # median: 30 s
    with pytest.raises(AssertionError, match="no race from a moved start"):
        assert_race_time_within([line], 1.0)
