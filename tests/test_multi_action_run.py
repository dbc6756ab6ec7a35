"""`rulka run` with multi-action blocks: the simulator recipes (IQN, PPO) with
``environment.rl_action_offsets_ms=[0,10,20,30,40]`` (5 actions per 50 ms decision, one network
pass per block) train a few hundred IQN updates (PPO: 8 policy updates) with finite losses, no
segment is refused, IQN's replay holds (N,) actions per transition, and the trained weights reach
the worker."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parent.parent
RULKA = [sys.executable, "-c", "import sys; from rulka.cli import main; sys.exit(main())"]


# config: (overrides, loss key, (counter, least value)): a few hundred IQN updates; PPO an update
# every 256 blocks, 4 epochs x 8 minibatches each
CASES = {
    "sim_iqn.yaml": (["exploration.multi_action_exploration=per_block", "exploration.epsilon_z_exponent=null",
                     "memory.memory_size_schedule=[[0,[20000,500]]]",
                      "trainer.publish_every_updates=20"], "losses/td_loss", ("charts/batches_trained", 200)),
    "sim_ppo.yaml": (["ppo.rollout_steps_per_update=256", "trainer.publish_every_updates=1"],
                     "losses/policy_loss", ("charts/policy_updates", 8)),
}


@pytest.mark.parametrize("config", sorted(CASES))
def test_multi_action_blocks_train_through_rulka_run(tmp_path, config):
    overrides, loss_key, (counter, least) = CASES[config]
    run_dir = tmp_path / "run"
    # IQN: training starts after 500 blocks; 8 samples per insert at batch 64: ~300 updates by 3000 blocks
    cmd = [*RULKA, "run", str(ROOT / "configs" / config), "--workers", "1", "--frames", "3000",
           "--minutes", "3", "--run-dir", str(run_dir), "--set", "logging.wandb.enabled=false",
           "--set", "logging.progress=never", "--set", "logging.log_every_s=2",
           "--set", "environment.rl_action_offsets_ms=[0,10,20,30,40]"]
    for o in overrides:
        cmd += ["--set", o]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            rows.append(json.loads(line).get("metrics", {}))
        except json.JSONDecodeError:
            pass
    assert max(r.get(counter, 0) for r in rows) >= least
    losses = [r[loss_key] for r in rows if loss_key in r]
    assert losses and all(math.isfinite(x) for x in losses), losses
    assert max(r.get("perf/segments_dropped", 0) for r in rows) == 0  # every block segment accepted
    worker_log = (run_dir / "logs" / "worker0.log").read_text()
    assert "refused weights" not in worker_log and "cannot build" not in worker_log
    version = int(re.findall(r"weights v(\d+)", worker_log)[-1])
    assert version >= 3, worker_log[-2000:]
    if config != "sim_iqn.yaml":
        return
    # the checkpointed replay holds one transition per block with its 5 actions
    from rulka.agents.iqn.replay import MiniRaceReplayMemory
    from rulka.memory.files import ChunkStore

    latest = json.loads((run_dir / "checkpoints" / "latest.json").read_text())["checkpoint"]
    mem = MiniRaceReplayMemory(n_action_branches=5, n_steps=3)
    mem.load(run_dir / "checkpoints" / latest / "replay", ChunkStore(run_dir / "checkpoints" / "chunks"))
    actions = mem.train.arrays["action"][mem.train.valid_slots()]
    assert actions.shape[1] == 5 and len(actions) > 2000
    assert np.all((actions >= 0) & (actions < 12))
