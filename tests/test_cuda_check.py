"""bench/cuda_check.sh runs on a lent GPU machine only, once in a while: what can be checked here
is that it parses and that the run it makes is a valid config (a renamed key would otherwise show
only when a session finally gets a GPU)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "cuda_check.sh"


def test_script_parses() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


def test_its_run_is_a_valid_config_with_the_guide_size_network() -> None:
    from rulka.config import load_config

    text = SCRIPT.read_text()
    config = re.search(r"rulka\.cli run (\S+)", text)
    assert config is not None
    overrides = [s.replace('"$DEVICE"', "cuda") for s in re.findall(r"--set (\S+)", text)]
    cfg = load_config(REPO / config.group(1), overrides, env_file=None)
    assert cfg.trainer.device == "cuda" and not cfg.nn.vis.no_image
    assert (cfg.nn.vis.image_size.width, cfg.nn.vis.image_size.height) == (160, 120)
    assert cfg.nn.decoder.dense_hidden_dimension == 1024 and cfg.training.batch_size == 512


def test_its_trainer_loop_feed_row_is_the_guide_size_network_on_the_gpu() -> None:
    from bench.trainer_loop import CONFIGS
    from rulka.config import load_config

    text = SCRIPT.read_text()
    assert re.search(r"bench\.trainer_loop --configs guide --trainer-device \"\$DEVICE\"", text)
    assert "--feed 1.5x" in text
    config, overrides = CONFIGS["guide"]
    cfg = load_config(REPO / config, [*overrides, "trainer.device=cuda"], env_file=None)
    assert cfg.trainer.device == "cuda" and not cfg.nn.vis.no_image and cfg.training.batch_size == 512
    assert (cfg.nn.vis.image_size.width, cfg.nn.vis.image_size.height) == (160, 120)
    assert cfg.nn.decoder.dense_hidden_dimension == 1024 and cfg.nn.training.amp_dtype == "bfloat16"
