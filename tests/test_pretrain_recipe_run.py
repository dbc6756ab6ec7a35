"""The pretrain-then-RL recipe as configs/sim_iqn_from_bc.yaml and docs/configuration.md give it:
record the scripted driver, clone it, then `rulka run` the recipe with the recordings kept as
demonstrations. Real processes (server, trainer, workers over TLS), in a fresh folder, with the
run's default seed (null): the way a user runs it. Shortened: few recordings, few clone updates,
a few thousand frames."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
RULKA = [sys.executable, "-c", "import sys; from rulka.cli import main; sys.exit(main())"]


def rulka(args: list[str], cwd: Path, timeout: int) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([*RULKA, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert out.returncode == 0, f"rulka {' '.join(args)}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out


def test_record_clone_then_run_with_demonstrations(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    for name in ("sim_iqn.yaml", "sim_iqn_from_bc.yaml"):
        shutil.copy(ROOT / "configs" / name, configs / name)
    rulka(["pretrain", "record", "configs/sim_iqn.yaml", "--out", "pretrained/scripted", "--episodes", "2"],
          tmp_path, 120)
    rulka(["pretrain", "bc", "configs/sim_iqn.yaml", "pretrained/scripted", "--out", "pretrained/sim_iqn_bc",
           "--updates", "30"], tmp_path, 300)
    run_dir = tmp_path / "run"
    out = rulka(["run", "configs/sim_iqn_from_bc.yaml", "--workers", "2", "--frames", "3000", "--minutes", "4",
                 "--run-dir", str(run_dir), "--set", "logging.wandb.enabled=false", "--set", "logging.progress=never"],
                tmp_path, 400)
    assert "3000 frames received, stopping" in out.stderr
    resolved = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())
    assert resolved["pretrain"]["demo_episodes"] == "pretrained/scripted" and resolved["training"]["seed"] is None
    log = (run_dir / "logs" / "trainer.log").read_text(encoding="utf-8")
    assert "nn.init_from_pretrained:" in log and "pretrained/sim_iqn_bc" in log, log[-3000:]
    assert "demonstration transitions kept for the run" in log, log[-3000:]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    trained = [m["metrics"] for m in metrics if "losses/demo_margin_loss" in m.get("metrics", {})]
    assert trained, "no update logged the demonstrations' losses"
    assert all(m["losses/demo_td_loss"] >= 0 and m["losses/demo_margin_loss"] >= 0 for m in trained)
