"""bench/e2e.py: spotting the first finished race in a run's metrics log."""

from __future__ import annotations

from pathlib import Path

from bench.e2e import first_finish, run_summary
from rulka.telemetry import MetricsLogger
from rulka.telemetry import metrics as m


def test_first_finish_is_the_first_record_with_a_race_time_or_finish_rate(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "sim-001"
    assert first_finish(tmp_path) is None
    with MetricsLogger(run, run_name="r", tensorboard=False) as logger:
        logger.log({m.EPISODIC_RETURN: 1.0, m.FINISH_RATE: 0.0}, step=1000)
        logger.log({m.TD_LOSS: 0.3}, step=1500)
        assert first_finish(tmp_path) is None
        logger.log({m.per_map(m.RACE_TIME_MS, "A01"): 52_000.0, m.per_map(m.FINISH_RATE, "A01"): 0.5}, step=2000)
        logger.log({m.RACE_TIME_MS: 48_000.0}, step=3000)
    assert first_finish(tmp_path) == {"step": 2000, "wall_time": first_finish(tmp_path)["wall_time"],
                                      "race_time_ms": 52_000.0}


def test_a_finish_rate_alone_counts(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, run_name="r", tensorboard=False) as logger:
        logger.log({m.FINISH_RATE: 0.25}, step=700)
    found = first_finish(tmp_path)
    assert found is not None and found["step"] == 700 and found["race_time_ms"] is None


def test_run_summary_reports_last_counters_and_mean_rates(tmp_path: Path) -> None:
    assert run_summary(tmp_path) == {}
    with MetricsLogger(tmp_path / "run", run_name="r", tensorboard=False) as logger:
        logger.log({m.SAMPLES_RECEIVED: 100, m.SAMPLES_PER_S: 10.0}, step=100)
        logger.log({m.SAMPLES_RECEIVED: 300, m.SAMPLES_PER_S: 30.0, m.BATCHES_TRAINED: 7}, step=300)
    assert run_summary(tmp_path) == {"metric_records": 2, "last charts/samples_received": 300.0,
                                     "last charts/batches_trained": 7.0, "mean perf/samples_per_s": 20.0}
