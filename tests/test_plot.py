"""`rulka plot` turns a run's metrics.jsonl into PNG learning curves."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rulka.cli import main
from rulka.telemetry import MetricsLogger
from rulka.telemetry import metrics as m
from rulka.telemetry.plot import load_series

TAB_RED = np.array([0xD6, 0x27, 0x28])


def _synthetic_run(run_dir: Path) -> None:
    with MetricsLogger(run_dir, run_name="synthetic", tensorboard=False) as logger:
        logger.log({m.per_map(m.REFERENCE_TIME_MS, "A01"): 40_000}, step=0)
        for i in range(1, 60):
            step = i * 1000
            logger.log({
                m.EPISODIC_RETURN: math.log(i),
                m.per_map(m.EPISODIC_RETURN, "A01"): math.log(i),
                m.per_map(m.RACE_TIME_MS, "A01"): 80_000 - 500 * i,
                m.per_map(m.EPISODIC_RETURN, "B02"): 0.5 * i,
                m.TD_LOSS: 1.0 / i,
                m.LEARNING_RATE: 1e-3,
            }, step=step)


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG"
        return np.asarray(image.convert("RGB"))


def _has_red(pixels: np.ndarray) -> bool:
    return bool((np.abs(pixels.astype(int) - TAB_RED).sum(axis=2) < 30).any())


def test_plot_writes_one_png_per_map_with_reference_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    _synthetic_run(run_dir)
    assert main(["plot", str(run_dir), "--out", str(tmp_path / "png")]) == 0
    printed = capsys.readouterr().out.split()
    names = sorted(Path(p).name for p in printed)
    assert names == ["A01.png", "B02.png", "all_maps.png", "training.png"]
    for name in names:
        pixels = _pixels(tmp_path / "png" / name)
        assert pixels.shape[0] >= 300 and pixels.shape[1] >= 400
        assert pixels.std() > 10  # not blank
        packed = (pixels[..., 0].astype(np.int64) << 16) | (pixels[..., 1].astype(np.int64) << 8) | pixels[..., 2]
        assert len(np.unique(packed)) > 20  # curves and text, not a flat fill
    # the A01 reference time (logged) is drawn as a red line; B02 has none
    assert _has_red(_pixels(tmp_path / "png" / "A01.png"))
    assert not _has_red(_pixels(tmp_path / "png" / "B02.png"))


def test_plot_defaults_to_run_plots_folder(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, run_name="r", tensorboard=False) as logger:
        logger.log({m.EPISODIC_RETURN: 1.0}, step=10)
        logger.log({m.EPISODIC_RETURN: 2.0}, step=20)
    assert main(["plot", str(tmp_path)]) == 0
    assert [p.name for p in (tmp_path / "plots").iterdir()] == ["all_maps.png"]


def test_load_series_skips_nulls_and_sorts(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, run_name="r", tensorboard=False) as logger:
        logger.log({m.TD_LOSS: 2.0}, step=20)
        logger.log({m.TD_LOSS: float("nan")}, step=30)
        logger.log({m.TD_LOSS: 1.0}, step=10)
    assert [(p[0], p[2]) for p in load_series(tmp_path)[m.TD_LOSS]] == [(10.0, 1.0), (20.0, 2.0)]


def test_plot_on_a_folder_without_log_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no metrics log at") and err.count("\n") == 1


def test_reference_time_of_a_bundled_track_comes_from_the_simulator(tmp_path: Path) -> None:
    tracks = pytest.importorskip("rulka.envs.sim.tracks")
    from rulka.telemetry.plot import _bundled_reference_ms

    expected = tracks.load_track_spec("default")["reference_time_ms"]
    assert _bundled_reference_ms("default") == float(expected)
    assert _bundled_reference_ms("no-such-track") is None
    assert _bundled_reference_ms("/etc/passwd.json") is None


def test_single_track_sim_run_gets_the_reference_line_from_its_config(tmp_path: Path) -> None:
    tracks = pytest.importorskip("rulka.envs.sim.tracks")
    from rulka.telemetry.plot import run_track

    with MetricsLogger(tmp_path, run_name="r", tensorboard=False) as logger:
        for i in range(1, 5):
            logger.log({m.RACE_TIME_MS: 40_000.0 - i}, step=i)
    assert run_track(tmp_path) is None
    (tmp_path / "config.resolved.yaml").write_text("environment:\n  backend: sim\n  track: hairpins\n")
    assert run_track(tmp_path) == "hairpins"
    assert tracks.load_track_spec("hairpins")["reference_time_ms"]
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "with")]) == 0
    assert _has_red(_pixels(tmp_path / "with" / "all_maps.png"))
    (tmp_path / "config.resolved.yaml").write_text("environment:\n  backend: gym\n  track: hairpins\n")
    assert run_track(tmp_path) is None
    (tmp_path / "config.resolved.yaml").write_text("!!python/object:os.system {}\n")
    assert run_track(tmp_path) is None  # safe_load refuses objects
