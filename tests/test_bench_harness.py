"""`python -m bench`: runs scripts in subprocesses and rewrites BENCHMARKS.md, surviving bad ones."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.__main__ import REPO_ROOT, flatten, main, parse_json_output, previous_results, run_script

GOOD = """
import json, sys
print("warming up")
quick = "--quick" in sys.argv
print(json.dumps({"actions_per_s": 1234.5678 if quick else 99.0, "quick": quick,
                  "sizes": {"64KB": {"mb_per_s": 101.25}}}))
"""
FAILING = "import sys\nprint('Traceback: something broke', file=sys.stderr)\nsys.exit(3)\n"
NO_QUICK = """
import argparse, json
argparse.ArgumentParser().parse_args()
print(json.dumps({"full_run": 1}))
"""
SILENT = "print('no json here')\n"
SLOW = """
import pathlib, subprocess, sys, time
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
pathlib.Path(sys.argv[0]).with_suffix(".pid").write_text(str(helper.pid))
time.sleep(30)
"""


def _bench_dir(tmp_path: Path, **scripts: str) -> Path:
    folder = tmp_path / "benchdir"
    folder.mkdir()
    for name, body in scripts.items():
        (folder / f"{name}.py").write_text(body)
    return folder


def test_quick_run_writes_figures_and_survives_bad_scripts(tmp_path: Path) -> None:
    folder = _bench_dir(tmp_path, good=GOOD, failing=FAILING, noquick=NO_QUICK, silent=SILENT, slow=SLOW)
    out = tmp_path / "BENCHMARKS.md"
    code = main(["--quick", "--bench-dir", str(folder), "--out", str(out), "--timeout", "3"])
    assert code == 1  # not every script succeeded
    text = out.read_text()
    assert "Last written by `python -m bench --quick`" in text
    assert "| cores |" in text and "| python |" in text and "| torch |" in text
    assert "| actions_per_s | 1,235 |" in text  # the quick figure, formatted
    assert "| quick | true |" in text
    assert "| sizes.64KB.mb_per_s | 101.2 |" in text
    assert f"`python {folder / 'good.py'} --quick`" in text
    assert "**failed**: exit code 3: Traceback: something broke" in text
    assert "| full_run | 1 |" in text  # retried without --quick
    assert f"`python {folder / 'noquick.py'}`" in text
    assert "**bad output**: no JSON object on stdout" in text
    assert "**timeout**: no result within 3 s" in text
    helper_pid = int((folder / "slow.pid").read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{helper_pid}").exists() or "Z" in Path(f"/proc/{helper_pid}/stat").read_text().split()[2]
    results = previous_results(out)
    assert {name: r["status"] for name, r in results.items()} == {
        "failing": "failed", "good": "ok", "noquick": "ok", "silent": "bad output", "slow": "timeout"}


def test_only_reruns_one_script_and_keeps_the_rest(tmp_path: Path) -> None:
    folder = _bench_dir(tmp_path, good=GOOD, noquick=NO_QUICK)
    out = tmp_path / "BENCHMARKS.md"
    assert main(["--bench-dir", str(folder), "--out", str(out)]) == 0
    assert "| actions_per_s | 99 |" in out.read_text()
    (folder / "noquick.py").write_text(FAILING)
    assert main(["--quick", "--only", "good", "--bench-dir", str(folder), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| actions_per_s | 1,235 |" in text
    assert "| full_run | 1 |" in text  # kept from the previous run, not rerun
    assert "Last written by `python -m bench --quick --only good`" in text


def test_unknown_only_name_is_a_usage_error(tmp_path: Path) -> None:
    folder = _bench_dir(tmp_path, good=GOOD)
    with pytest.raises(SystemExit) as exc:
        main(["--only", "nope", "--bench-dir", str(folder), "--out", str(tmp_path / "B.md")])
    assert exc.value.code == 2


def test_the_real_suite_lists_every_script() -> None:
    listed = subprocess.run([sys.executable, "-m", "bench", "--list"], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=60)
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        "transport", "sim", "pipeline", "learner", "learner_topologies", "actor", "trainer_loop", "allocator", "colocation", "ingest", "checkpoint", "e2e", "peer_tmrl",
        "sac_pendulum", "tm2020_fake", "tmnf_fake", "policy_cartpole", "soak", "optimal", "fleet"]


def test_parse_json_and_flatten() -> None:
    assert parse_json_output('{"a": 1}') == {"a": 1}
    assert parse_json_output('log line\n{"a": 2}\nbye\n') == {"a": 2}
    assert parse_json_output("[1, 2]\n") is None
    assert parse_json_output('{"device": "cpu", "x": 1}\n{"device": "cuda", "x": 9}\n') == {
        "cpu": {"device": "cpu", "x": 1}, "cuda": {"device": "cuda", "x": 9}}
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": [{"e": 3}]}) == [("a.b", 1), ("a.c", [1, 2]), ("d[0].e", 3)]
    # BENCHMARKS.md's sections: 4+ records with the same keys give a row per key; others stay per record
    reach = [{"v": i, "s": i / 2} for i in range(4)]
    assert flatten({"r": reach}, columns=True) == [("r[].v", [0, 1, 2, 3]), ("r[].s", [0.0, 0.5, 1.0, 1.5])]
    assert flatten({"r": reach[:3]}, columns=True) == flatten({"r": reach[:3]})
    assert flatten({"r": reach + [{"v": 9}]}, columns=True)[0] == ("r[0].v", 0)


def test_a_missing_script_is_reported_not_raised(tmp_path: Path) -> None:
    result = run_script("transport", tmp_path, quick=True, timeout_s=5)
    assert result["status"] == "missing" and "transport.py does not exist yet" in result["detail"]


PEER = """
import json
print(json.dumps({"rulka": {"zstd": {"bytes_per_transition": 1121.3}},
                  "tmrl": {"installed": True, "bytes": {"bytes_per_transition": 4296.4},
                           "relay_tls": {"64KB": {"mb_per_s": 22.6}}, "relay_tcp": {"64KB": {"mb_per_s": 30.0}}}}))
"""
TRANSPORT = 'import json\nprint(json.dumps({"relay_mb_s": {"64KB": 95.5, "1MB": 120.0}}))\n'


def test_peer_comparison_table_puts_rulka_and_tmrl_side_by_side(tmp_path: Path) -> None:
    folder = _bench_dir(tmp_path, peer_tmrl=PEER, transport=TRANSPORT)
    out = tmp_path / "BENCHMARKS.md"
    assert main(["--bench-dir", str(folder), "--out", str(out)]) == 0
    text = out.read_text()
    assert "## Peer comparison: rulka vs TMRL 0.7.1" in text
    assert "| bytes on the wire per transition (64x64 grayscale, 4-frame history) | 1,121 | 4,296 | - |" in text
    assert "| relay payload MB/s, 64KB messages | 95.5 | 22.6 | 30 |" in text
    assert "| relay payload MB/s, 1MB messages | 120 | - | - |" in text
    assert "26MB messages" not in text


def test_rewrite_rerenders_without_running_anything(tmp_path: Path) -> None:
    folder = _bench_dir(tmp_path, good=GOOD)
    out = tmp_path / "BENCHMARKS.md"
    assert main(["--bench-dir", str(folder), "--out", str(out)]) == 0
    (folder / "good.py").write_text(FAILING)  # would fail if it ran
    assert main(["--rewrite", "--bench-dir", str(folder), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| actions_per_s | 99 |" in text and "Last written by `python -m bench --rewrite`" in text


TRAINER_LOOP = """
import json
rows = [{"config": "cartpole", "workers": 2, "worker_priority": "below_normal", "pinned": True, "ratio": 0.794,
         "ratio_when_fed": 0.902, "spi_vs_target": 0.956,
         "trainer": {"updates_per_s": 124.2, "learner_busy": 0.928, "learner_starved": 0.12},
         "alone": {"updates_per_s": 156.5}},
        {"config": "sim_image", "workers": 4, "trainer": {"error": "no update within 240 s"}},
        {"config": "cartpole", "workers": 4, "worker_priority": "below_normal", "pinned": True, "ratio": 0.91,
         "ratio_repeats": [0.95, 0.91, 0.88], "ratio_vs_loaded": 0.97, "ratio_vs_loaded_repeats": [1.0, 0.97, 0.93],
         "trainer": {"updates_per_s": 150.0}}]
print(json.dumps({"bench": "trainer_loop", "results": rows}))
"""


def test_trainer_loop_runs_get_one_row_each(tmp_path: Path) -> None:
    folder = _bench_dir(tmp_path, trainer_loop=TRAINER_LOOP)
    out = tmp_path / "BENCHMARKS.md"
    assert main(["--bench-dir", str(folder), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| cartpole | 2 | below_normal | yes | 0.794 | 0.902 | 0.956 | 0.928 | 0.12 | 124.2 | 156.5 |" in text
    # a failed run still shows; rows recorded before pinning existed read as not pinned
    assert "| sim_image | 4 | normal | no | - | - | - | - | - | - | - |" in text
    # measured with --repeat: the median repeat's ratio, every repeat's beside it
    assert "| cartpole | 4 | below_normal | yes | 0.91 (0.95, 0.91, 0.88) |" in text
    assert text.count("| 0.97 (1, 0.97, 0.93) |") == 1


def test_trainer_loop_repeats_keep_the_median_ratio_row() -> None:
    from bench.trainer_loop import median_row

    reps = [{"ratio": 0.95, "ratio_vs_loaded": 1.0, "k": 0}, {"ratio": 0.88, "ratio_vs_loaded": 0.9, "k": 1},
            {"ratio": 0.91, "ratio_vs_loaded": 0.97, "k": 2}]
    row = median_row(reps)
    assert row["k"] == 2 and row["ratio"] == 0.91
    assert row["ratio_repeats"] == [0.95, 0.88, 0.91] and row["ratio_vs_loaded_repeats"] == [1.0, 0.9, 0.97]
    # an even count keeps the lower middle; a failed repeat (no ratio) is listed, not chosen
    row = median_row([{"ratio": 0.8}, {"trainer": {"error": "x"}}, {"ratio": 0.9}, {"ratio": 1.0}, {"ratio": 0.7}])
    assert row["ratio"] == 0.8 and row["ratio_repeats"] == [0.8, None, 0.9, 1.0, 0.7]
    assert median_row([{"ratio": 0.5}]) == {"ratio": 0.5}


def test_trainer_loop_pairs_each_trainer_window_with_the_bare_learner_around_it() -> None:
    from bench.trainer_loop import _median, pair_ratios

    # window k over the mean of the bare learner just before (k) and just after (k+1): 150 / 160,
    # 120 / 150; a missing neighbour leaves the other one, a missing trainer window no ratio
    ratios, vs_loaded = pair_ratios([150.0, 120.0, None, 90.0], [150.0, 170.0, 130.0, None, 100.0],
                                    [140.0, None, 100.0, 90.0])
    assert ratios == [0.938, 0.8, None, 0.9]
    assert vs_loaded == [1.071, None, None, 1.0]
    # no loaded windows measured (--no-loaded-baseline)
    assert pair_ratios([100.0], [100.0, 125.0], []) == ([0.889], [None])
    # the median of the windows measured: an even count averages the middle two
    assert _median([0.8, None, 0.9, 1.0, 0.7]) == 0.85 and _median([0.9, 0.7, 1.0]) == 0.9
    assert _median([None]) is None


def test_trainer_loop_table_shows_paired_ratios() -> None:
    from bench.__main__ import trainer_loop_table

    row = {"config": "sim_image", "workers": 2, "worker_priority": "below_normal", "pinned": True, "ratio": 0.93,
           "ratio_pairs": [0.9, 0.93, 0.97], "ratio_vs_loaded": 1.01, "ratio_vs_loaded_pairs": [1.0, 1.01, 1.1],
           "trainer": {"updates_per_s": 40.0, "updates_per_s_paired": 41.5}, "alone": {"updates_per_s": 44.0}}
    text = "\n".join(trainer_loop_table({"trainer_loop": {"status": "ok", "date": "d",
                                                           "figures": {"results": [row]}}}))
    assert "| sim_image | 2 | below_normal | yes | 0.93 (0.9, 0.93, 0.97) |" in text
    assert "| 41.5 | 44 |" in text and "| 1.01 (1, 1.01, 1.1) |" in text


ECHO_ARGS = "import json, sys\nprint(json.dumps({'argv': sys.argv[1:]}))\n"


def test_script_args_reach_the_one_script_and_its_recorded_command(tmp_path: Path) -> None:
    folder = _bench_dir(tmp_path, echo=ECHO_ARGS, good=GOOD)
    out = tmp_path / "BENCHMARKS.md"
    assert main(["--bench-dir", str(folder), "--out", str(out), "--only", "echo",
                 "--script-args", "--workers 16 --minutes 10"]) == 0
    text = out.read_text()
    assert "| argv | --workers, 16, --minutes, 10 |" in text
    assert f"`python {folder / 'echo.py'} --workers 16 --minutes 10`" in text
    with pytest.raises(SystemExit):
        main(["--bench-dir", str(folder), "--out", str(out), "--script-args", "--workers 2"])


FLAKY = """
import json, pathlib, sys, time
flag = pathlib.Path(sys.argv[0]).with_suffix(".hang")
if flag.exists():
    time.sleep(30)
print(json.dumps({"updates_per_s": 42.5}))
"""


def test_a_rerun_that_times_out_keeps_the_last_figures(tmp_path: Path) -> None:
    """A long bench that fails or times out on a rerun must not wipe the figures it had."""
    folder = _bench_dir(tmp_path, flaky=FLAKY, good=GOOD)
    out = tmp_path / "BENCHMARKS.md"
    assert main(["--bench-dir", str(folder), "--out", str(out)]) == 0
    (folder / "flaky.hang").write_text("")
    assert main(["--only", "flaky", "--bench-dir", str(folder), "--out", str(out), "--timeout", "2"]) == 1
    text = out.read_text()
    section = text[text.index("## flaky"):]
    assert "**timeout**: no result within 2 s" in section
    assert "Figures of the last run that finished" in section and "| updates_per_s | 42.5 |" in section
    assert "| flaky |  | timeout |" in text  # the summary says what happened this time
    kept = previous_results(out)["flaky"]
    assert kept["status"] == "timeout" and kept["last_ok"]["figures"] == {"updates_per_s": 42.5}
    # a second failure still keeps them; a success replaces them
    assert main(["--only", "flaky", "--bench-dir", str(folder), "--out", str(out), "--timeout", "2"]) == 1
    assert previous_results(out)["flaky"]["last_ok"]["figures"] == {"updates_per_s": 42.5}
    (folder / "flaky.hang").unlink()
    assert main(["--only", "flaky", "--bench-dir", str(folder), "--out", str(out)]) == 0
    assert "last_ok" not in previous_results(out)["flaky"]


def test_long_scripts_get_their_own_time_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.__main__ as harness

    slow_ok = "import json, time\ntime.sleep(3)\nprint(json.dumps({'done': 1}))\n"
    folder = _bench_dir(tmp_path, trainer_loop=slow_ok, other=slow_ok)
    monkeypatch.setattr(harness, "DEFAULT_TIMEOUT_S", 1.0)
    monkeypatch.setattr(harness, "SCRIPT_TIMEOUT_S", {"trainer_loop": 60.0})
    out = tmp_path / "BENCHMARKS.md"
    assert main(["--bench-dir", str(folder), "--out", str(out)]) == 1
    results = previous_results(out)
    assert results["trainer_loop"]["status"] == "ok" and results["other"]["status"] == "timeout"


def test_record_takes_a_given_json_as_one_scripts_result_without_running_it(tmp_path: Path) -> None:
    folder = _bench_dir(tmp_path, good=GOOD, other=NO_QUICK)
    out = tmp_path / "BENCHMARKS.md"
    assert main(["--bench-dir", str(folder), "--out", str(out), "--only", "other"]) == 0
    given = tmp_path / "from_gpu.json"
    given.write_text('noise before\n{"actions_per_s": 4321.0}\n')
    assert main(["--bench-dir", str(folder), "--out", str(out), "--record", "good", str(given),
                 "--script-args", "--device cuda"]) == 0
    results = previous_results(out)
    assert results["good"]["figures"] == {"actions_per_s": 4321.0}
    assert results["good"]["command"] == "python -m bench.good --device cuda"
    assert results["other"]["figures"] == {"full_run": 1}  # the others are kept
    with pytest.raises(SystemExit):
        main(["--bench-dir", str(folder), "--out", str(out), "--record", "nosuch", str(given)])
    (tmp_path / "bad.json").write_text("no json")
    with pytest.raises(SystemExit):
        main(["--bench-dir", str(folder), "--out", str(out), "--record", "good", str(tmp_path / "bad.json")])
