"""A real (one-process) run writes all three dashboards: JSON lines, TensorBoard, offline wandb."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_telemetry import _tb_scalars, _wandb_history

from rulka.telemetry import metrics as m
from rulka.telemetry import read_metrics

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG = REPO_ROOT / "configs" / "cartpole_simple.yaml"


@pytest.mark.slow
def test_a_short_run_fills_jsonl_tensorboard_and_offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    from rulka.config import load_config
    from rulka.local import run_local

    if not CONFIG.is_file():
        pytest.skip("configs/cartpole_simple.yaml is not in this checkout")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_root"))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    (tmp_path / "wandb_root").mkdir()
    cfg = load_config(CONFIG, overrides=["logging.wandb.enabled=true", "logging.wandb.mode=offline",
                                         "logging.tensorboard.enabled=true", "logging.log_every_s=0.5"],
                      env_file=None)
    run_dir = tmp_path / "run"
    result = run_local(cfg, n_workers=2, run_dir=run_dir, max_seconds=5)
    assert result.trainer["samples"] > 0

    records = list(read_metrics(run_dir))
    assert records, "no metrics.jsonl records"
    logged = set().union(*(r["metrics"] for r in records))
    for name in (m.SAMPLES_RECEIVED, m.SAMPLES_PER_S, m.INGEST_MB_PER_S, m.WORKERS_CONNECTED, m.EPISODIC_RETURN):
        assert name in logged, name
    last_samples = [r["metrics"][m.SAMPLES_RECEIVED] for r in records if m.SAMPLES_RECEIVED in r["metrics"]][-1]

    tb = _tb_scalars(run_dir / "tensorboard")
    assert tb[m.SAMPLES_RECEIVED][-1][1] == pytest.approx(last_samples)

    run_id = (run_dir / "wandb_run_id.txt").read_text().strip()
    files = list((tmp_path / "wandb_root" / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(files) == 1
    history = _wandb_history(files[0])
    assert [h[m.SAMPLES_RECEIVED] for h in history if m.SAMPLES_RECEIVED in h][-1] == pytest.approx(last_samples)
