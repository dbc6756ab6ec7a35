"""MetricsLogger sinks (real JSONL, TensorBoard and offline wandb writers), meters and Progress."""

from __future__ import annotations

import io
import json
import struct
import time
from pathlib import Path

import pytest

from rulka.telemetry import (
    EpisodeStats,
    LagStats,
    MetricsLogger,
    Progress,
    RateMeter,
    from_config,
    per_map,
    per_worker,
    read_metrics,
    split_scoped,
    staircase_suffix,
)
from rulka.telemetry import metrics as m


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# -- meters -----------------------------------------------------------------------------------------

def test_rate_meter_counts_over_elapsed_time_then_window() -> None:
    clock = FakeClock(0.0)
    meter = RateMeter(window_s=10.0, clock=clock)
    clock.t = 1.0
    meter.add(10)
    clock.t = 2.0
    meter.add(10)
    assert meter.rate() == pytest.approx(20 / 2)  # run shorter than the window: 20 units in 2 s
    clock.t = 11.5  # the event at t=1 left the window [1.5, 11.5]
    assert meter.rate() == pytest.approx(10 / 10)
    clock.t = 30.0
    assert meter.rate() == 0.0
    assert meter.total == 20


def test_lag_stats_min_avg_max_and_reset() -> None:
    lag = LagStats()
    assert lag.pop_metrics() == {}
    lag.add_versions(10, 9)
    lag.add_versions(10, 7)
    lag.add_versions(10, 10)
    assert lag.pop_metrics() == {m.POLICY_LAG_MIN: 0.0, m.POLICY_LAG_AVG: pytest.approx(4 / 3), m.POLICY_LAG_MAX: 3.0}
    assert lag.pop_metrics() == {}


def test_episode_stats_per_map_and_overall() -> None:
    stats = EpisodeStats()
    stats.add("A01", 10.0, 40_000, True)
    stats.add("A01", 4.0, None, False)
    stats.add("B02", 1.0, 60_000, True)
    out = stats.pop_metrics()
    assert out[m.EPISODIC_RETURN] == pytest.approx(5.0)
    assert out[m.FINISH_RATE] == pytest.approx(2 / 3)
    assert out[m.RACE_TIME_MS] == pytest.approx(50_000)
    assert out["charts/A01/episodic_return"] == pytest.approx(7.0)
    assert out["charts/A01/finish_rate"] == pytest.approx(0.5)
    assert out["charts/A01/race_time_ms"] == pytest.approx(40_000)
    assert out["charts/B02/race_time_ms"] == pytest.approx(60_000)
    assert out[m.EPISODES] == 3.0
    # nothing new: only the cumulative counts remain
    assert stats.pop_metrics() == {m.EPISODES: 3.0, "charts/A01/episodes": 2.0, "charts/B02/episodes": 1.0}


def test_scoped_names() -> None:
    assert per_map(m.RACE_TIME_MS, "A01") == "charts/A01/race_time_ms"
    assert per_worker(m.SAMPLES_PER_S, "pc1") == "perf/pc1/samples_per_s"
    assert split_scoped("charts/A01/race_time_ms") == ("A01", "charts/race_time_ms")
    assert split_scoped("losses/td_loss") == (None, "losses/td_loss")
    with pytest.raises(ValueError):
        per_map("race_time", "A01")
    with pytest.raises(ValueError):
        per_worker(m.SAMPLES_PER_S, "a/b")


def test_staircase_suffix_follows_the_guide_schedule() -> None:
    schedule = [(0, ""), (6_000_000, "_2"), (15_000_000, "_3")]
    assert staircase_suffix(schedule, 0) == ""
    assert staircase_suffix(schedule, 5_999_999) == ""
    assert staircase_suffix(schedule, 6_000_000) == "_2"
    assert staircase_suffix(schedule, 20_000_000) == "_3"
    assert staircase_suffix(None, 10**9) == ""


# -- sinks ------------------------------------------------------------------------------------------

def test_jsonl_log_lines_and_read_back(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, run_name="r", tensorboard=False) as logger:
        logger.log({m.EPISODIC_RETURN: 1.5, m.BATCHES_PER_S: 3}, step=100)
        logger.log({m.TD_LOSS: float("nan"), "charts/bad": "text", m.QUEUE_DEPTH: True}, step=200)
        logger.log_text("charts/note", "hello", step=200)
        assert logger.sinks == ["jsonl"]
        assert logger.dropped_values == 1
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert first["step"] == 100 and first["metrics"] == {m.EPISODIC_RETURN: 1.5, m.BATCHES_PER_S: 3.0}
    assert isinstance(first["wall_time"], float)
    assert json.loads(lines[1])["metrics"] == {m.TD_LOSS: None, m.QUEUE_DEPTH: 1.0}  # NaN -> null, strict JSON
    assert json.loads(lines[2])["text"] == {"charts/note": "hello"}
    records = list(read_metrics(tmp_path))
    assert [r["step"] for r in records] == [100, 200]


def test_resume_appends_and_supersedes_rolled_back_steps(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, run_name="r", tensorboard=False) as logger:
        for step in (100, 200, 300):
            logger.log({m.EPISODIC_RETURN: step / 100}, step=step)
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 400, "metr')  # torn line from a crash
    # resumed from a checkpoint taken at step 200
    with MetricsLogger(tmp_path, run_name="r", tensorboard=False, resume=True) as logger:
        logger.log({m.EPISODIC_RETURN: 9.0}, step=200)
        logger.log({m.EPISODIC_RETURN: 10.0}, step=300)
    records = list(read_metrics(tmp_path / "metrics.jsonl"))
    assert [(r["step"], r["metrics"][m.EPISODIC_RETURN]) for r in records] == [(100, 1.0), (200, 9.0), (300, 10.0)]


def _tb_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_events_and_suffix_schedule(tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path, run_name="r", tb_suffix_schedule=[(0, ""), (1000, "_2")])
    logger.log({m.EPISODIC_RETURN: 1.0, m.TD_LOSS: 0.5}, step=10)
    logger.log({m.EPISODIC_RETURN: 2.0}, step=999)
    logger.log({m.EPISODIC_RETURN: 3.0}, step=1000)
    logger.close()
    first = _tb_scalars(tmp_path / "tensorboard")
    assert first[m.EPISODIC_RETURN] == [(10, 1.0), (999, 2.0)]
    assert first[m.TD_LOSS] == [(10, 0.5)]
    assert _tb_scalars(tmp_path / "tensorboard_2") == {m.EPISODIC_RETURN: [(1000, 3.0)]}


def _wandb_records(run_file: Path) -> tuple[list[str], list[dict[str, object]]]:
    """Parse a .wandb file: 7-byte header, then LevelDB-style log records holding protobufs.
    Returns the record kinds and the history rows."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    kinds: list[str] = []
    assert data[:4] == b":W&B"
    pos, block, payload, history = 7, 32768, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # too small for a header: the writer padded to the next block
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        payload += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = pb.Record()
            record.ParseFromString(payload)
            payload = b""
            kinds.append(record.WhichOneof("record_type"))
            if kinds[-1] == "history":
                history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                for item in record.history.item})
        elif kind == 0:
            break
    return kinds, history


def _wandb_history(run_file: Path, wait_s: float = 20.0) -> list[dict[str, object]]:
    # wandb's service process may still be writing the file when finish() returns: wait for the
    # run's exit record
    deadline = time.monotonic() + wait_s
    while True:
        kinds, history = _wandb_records(run_file)
        if "exit" in kinds or time.monotonic() > deadline:
            return history
        time.sleep(0.1)


def test_wandb_offline_run_is_written_and_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_root"))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    (tmp_path / "wandb_root").mkdir()
    run_dir = tmp_path / "run"
    wandb_cfg = {"enabled": True, "mode": "offline", "project": "rulka-test"}
    logger = MetricsLogger(run_dir, run_name="r", config={"training": {"lr": 1e-3}}, wandb=wandb_cfg,
                           tensorboard=False)
    assert logger.sinks == ["jsonl", "wandb"]
    logger.log({m.EPISODIC_RETURN: 1.5, m.POLICY_LAG_MAX: 2}, step=64)
    logger.log({m.EPISODIC_RETURN: 2.5}, step=128)
    logger.close()
    run_id = (run_dir / "wandb_run_id.txt").read_text().strip()
    runs = list((tmp_path / "wandb_root" / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(runs) == 1
    history = _wandb_history(runs[0])
    assert [(h["step"], h[m.EPISODIC_RETURN]) for h in history] == [(64, 1.5), (128, 2.5)]
    assert history[0][m.POLICY_LAG_MAX] == 2.0

    resumed = MetricsLogger(run_dir, run_name="r", wandb=wandb_cfg, tensorboard=False, resume=True)
    assert resumed.wandb_sink is not None and resumed.wandb_sink.run_id == run_id
    resumed.close()


def test_failing_sinks_do_not_stop_the_others(tmp_path: Path) -> None:
    (tmp_path / "tensorboard").write_text("a file where the event folder should go")
    logger = MetricsLogger(tmp_path, run_name="r")

    class Exploding:
        name = "exploding"

        def write(self, *args: object) -> None:
            raise OSError("disk full")

        def close(self) -> None:
            pass

    logger._sinks.append(Exploding())  # a sink that breaks mid-run
    logger.log({m.EPISODIC_RETURN: 1.0}, step=1)  # tensorboard cannot open, exploding raises
    logger.log({m.EPISODIC_RETURN: 2.0}, step=2)
    assert logger.sinks == ["jsonl"]
    logger.close()
    assert [r["metrics"][m.EPISODIC_RETURN] for r in read_metrics(tmp_path)] == [1.0, 2.0]


def test_bad_wandb_mode_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="wandb mode"):
        MetricsLogger(tmp_path, run_name="r", wandb={"enabled": True, "mode": "sideways"})


def test_from_config_reads_the_logging_section(tmp_path: Path) -> None:
    cfg = {"logging": {"wandb": {"enabled": False, "mode": "offline"}, "tensorboard": {"enabled": False}},
           "training": {"tensorboard_suffix_schedule": [[0, ""], [50, "_2"]]}}
    logger = from_config(cfg, tmp_path / "myrun")
    assert logger.sinks == ["jsonl"] and logger.run_name == "myrun"
    logger.close()
    cfg["logging"]["tensorboard"]["enabled"] = True
    logger = from_config(cfg, tmp_path / "myrun")
    logger.log({m.EPISODIC_RETURN: 1.0}, step=60)
    logger.close()
    assert (tmp_path / "myrun" / "tensorboard_2").is_dir()
    # the schedule is stretched by training.global_schedule_speed (frames x 2: "_2" from 100)
    cfg["training"]["global_schedule_speed"] = 2.0
    logger = from_config(cfg, tmp_path / "slow")
    logger.log({m.EPISODIC_RETURN: 1.0}, step=60)
    logger.close()
    assert not (tmp_path / "slow" / "tensorboard_2").exists()


# -- progress ---------------------------------------------------------------------------------------

class TtyBuffer(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_redraws_one_throttled_line() -> None:
    out, clock = TtyBuffer(), FakeClock(0.0)
    progress = Progress("trainer", interval_s=1.0, stream=out, clock=clock)
    assert progress.mode == "always"
    progress.update(samples_in=1200, version=3)
    clock.t = 0.5
    progress.update(samples_in=2400)  # throttled: not drawn
    clock.t = 1.2
    progress.update(race_time_s=43.21)
    progress.close()
    text = out.getvalue()
    frames = text.split("\r")[1:]
    assert len(frames) == 3  # first update, the one after 1 s, close
    assert frames[0].startswith("trainer 0:00:00 | samples_in=1,200 | version=3")
    assert "samples_in=2,400 | version=3 | race_time_s=43.2" in frames[1]
    assert text.endswith("\n") and text.count("\n") == 1


def test_progress_off_terminal_prints_plain_lines_every_interval() -> None:
    out, clock = io.StringIO(), FakeClock(0.0)
    progress = Progress("worker", log_interval_s=10.0, stream=out, clock=clock)
    assert progress.mode == "lines"
    for t in range(0, 25):
        clock.t = float(t)
        progress.update(episodes=t)
    progress.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert [line.split(" | ")[1] for line in lines] == ["episodes=0", "episodes=10", "episodes=20", "episodes=24"]
    assert lines[1].split(" ", 1)[1].startswith("worker 0:00:10")


def test_progress_never_is_silent() -> None:
    out = TtyBuffer()
    progress = Progress("server", mode="never", stream=out)
    progress.update(clients=2)
    progress.close()
    assert out.getvalue() == ""
    with pytest.raises(ValueError):
        Progress("x", mode="loud")


def test_from_config_uses_the_real_config_and_its_scaled_suffix_schedule(tmp_path: Path) -> None:
    config = pytest.importorskip("rulka.config")
    cfg = config.load_config(None, overrides=["logging.wandb.enabled=false",
                                              "training.tensorboard_suffix_schedule=[[0, ''], [100, '_2']]"],
                             env_file=None)
    expected = cfg.tensorboard_suffix_at(150)  # the config decides (global_schedule_speed applies)
    logger = from_config(cfg, tmp_path / "run")
    assert logger.sinks == ["jsonl", "tensorboard"]
    logger.log({m.EPISODIC_RETURN: 1.0}, step=150)
    logger.close()
    assert (tmp_path / "run" / f"tensorboard{expected}").is_dir()


def test_logging_from_several_threads_keeps_every_line_whole(tmp_path: Path) -> None:
    import threading

    logger = MetricsLogger(tmp_path, run_name="r", tensorboard=False)

    def worker(k: int) -> None:
        for i in range(200):
            logger.log({m.per_worker(m.SAMPLES_PER_S, f"w{k}"): float(i)}, step=i)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    logger.close()
    logger.log({m.EPISODIC_RETURN: 1.0}, step=999)  # after close: ignored, no error
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 800 and all(json.loads(line)["metrics"] for line in lines)


def test_episode_stats_from_segments() -> None:
    from types import SimpleNamespace

    stats = EpisodeStats()
    mid = SimpleNamespace(episode_done=False, map_name="A01", info={})
    done = SimpleNamespace(episode_done=True, map_name="A01",
                           info={"episode_return": 12.5, "race_time_ms": 41_230, "finished": True})
    crashed = SimpleNamespace(episode_done=True, map_name="", info={"episode_return": 2.0, "race_time_ms": 9_000,
                                                                     "finished": False, "track": "hairpins"})
    nameless = SimpleNamespace(episode_done=True, map_name="", info={"episode_return": 4.0})
    assert [stats.add_segment(s) for s in (mid, done, crashed, nameless)] == [False, True, True, True]
    out = stats.pop_metrics()
    assert out[m.EPISODIC_RETURN] == pytest.approx((12.5 + 2.0 + 4.0) / 3)
    assert out[m.RACE_TIME_MS] == 41_230  # only the finished episode has a race time
    assert out[m.FINISH_RATE] == pytest.approx(1 / 3)
    assert out["charts/A01/race_time_ms"] == 41_230
    assert out["charts/hairpins/finish_rate"] == 0.0
    assert "charts/hairpins/race_time_ms" not in out
    assert out[m.EPISODES] == 3.0
