"""bench/fleet.py's figures (reach, staleness, fairness) and the targets that read them."""

from __future__ import annotations

from bench import targets
from bench.fleet import jain, reach_times, staleness


def test_reach_counts_a_worker_that_runs_a_newer_version():
    published = {1: 100.0, 2: 110.0}
    loads = {"a": [(1, 101.0), (2, 112.0)], "b": [(2, 130.0)]}  # b skipped version 1 (superseded)
    rows = reach_times(published, loads, ["a", "b"])
    assert rows[0] == {"version": 1, "reached": 2, "of": 2, "p50_s": 1.0, "p99_s": 30.0, "p100_s": 30.0}
    assert rows[1]["p50_s"] == 2.0 and rows[1]["p100_s"] == 20.0
    assert reach_times({1: 0.0}, {"a": []}, ["a"])[0]["p50_s"] is None


def test_staleness_is_versions_and_seconds_behind_the_newest():
    published = {v: 10.0 * v for v in range(1, 8)}  # a version every 10 s
    loads = {"fast": [(v, 10.0 * v + 1) for v in range(1, 8)], "slow": [(1, 80.0)]}
    st = staleness(published, loads, ["fast", "slow"], 10.0, 75.0)
    # at t=75 slow runs nothing yet: 7 versions behind, version 1 published 65 s ago
    assert st["max_versions_behind"] == 7 and st["max_seconds_behind"] == 65.0
    assert st["samples_over_bound"] > 0
    assert staleness(published, {"fast": loads["fast"]}, ["fast"], 10.0, 75.0)["samples_over_bound"] == 0
    assert jain([5, 5, 5]) == 1.0 and jain([1, 0, 0]) == round(1 / 3, 4)


def test_fleet_targets_hold_or_fail_on_the_figures():
    def run(**kw):
        base = {"config": {"workers": 256, "mbit": 50.0}, "relay": {"peak_rss_mb": 300.0},
                "segments": {"lost": 0, "duplicated": 0}, "disconnects": {"slow_client": 0, "reconnects": 0},
                "staleness": {"max_versions_behind": 2, "max_seconds_behind": 30.0, "samples": 10,
                              "samples_over_bound": 0},
                "weights": {"reach": [{"p99_s": 1.0}, {"p99_s": 4.0}, {"p99_s": None}]}}
        for path, value in kw.items():
            section, key = path.split("__")
            base[section][key] = value
        return base

    good = {"runs": {"fleet256": run(), "guide_50mbit": run(), "guide_unthrottled": run()}}
    assert targets._fleet256(good)[1] is True
    assert targets._fleet_guide_50mbit(good)[1] is True
    assert targets._fleet_guide_unthrottled(good) == ("99% of 256 workers in 4 s at worst (3 versions)", True)
    assert targets._fleet256({"runs": {"fleet256": run(relay__peak_rss_mb=600.0)}})[1] is False
    assert targets._fleet256({"runs": {"fleet256": run(config__workers=64)}})[1] is False
    assert targets._fleet_guide_50mbit({"runs": {"guide_50mbit": run(disconnects__reconnects=3)}})[1] is False
    assert targets._fleet_guide_unthrottled({"runs": {"guide_unthrottled": run(
        weights__reach=[{"p99_s": None}, {"p99_s": 1.0}])}})[1] is False
    assert targets._fleet256({}) == ("-", None)
