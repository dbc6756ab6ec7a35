"""The trainer logs what a user watches: return, race time and finish rate per map."""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import CountingAgent, ListMemory

from rulka.compress import ZstdCompressor
from rulka.net.link import Message
from rulka.net.local import LocalHub
from rulka.segment import Segment
from rulka.telemetry import MetricsLogger
from rulka.telemetry.logger import read_metrics
from rulka.trainer.trainer import Trainer


def episode_end(seq: int, ret: float, race_ms: int, finished: bool, track: str) -> Message:
    t = 3
    seg = Segment(run_id="", worker_id="w1", episode_id=seq, seq=seq, index_in_episode=0, first_step=0,
                  policy_version=0, episode_done=True, map_name=track,
                  info={"episode_return": ret, "race_time_ms": race_ms, "finished": finished},
                  arrays={"obs/x": np.zeros((t + 1, 2), np.float32), "action": np.zeros(t, np.int64),
                          "reward": np.ones(t, np.float32), "terminated": np.zeros(t, bool)})
    return Message("segment", "w1", ZstdCompressor().compress(seg))


def test_race_time_and_finish_rate_per_map_reach_the_log(tmp_path):
    logger = MetricsLogger(tmp_path, run_name="t", tensorboard=False)
    trainer = Trainer(None, LocalHub().trainer_link(), agent=CountingAgent(), memory=ListMemory(),
                      run_dir=tmp_path, signing_key=Ed25519PrivateKey.generate(), metrics=logger)
    trainer.ingest([episode_end(0, 10.0, 21000, True, "default"), episode_end(1, 2.0, 9000, False, "default"),
                    episode_end(2, 30.0, 15000, True, "slalom")])
    trainer.reporter.report(force=True)
    trainer.close()
    logger.close()
    metrics = list(read_metrics(tmp_path))[-1]["metrics"]
    assert metrics["charts/episodic_return"] == 14.0
    assert metrics["charts/default/race_time_ms"] == 21000  # finished episodes only
    assert abs(metrics["charts/default/finish_rate"] - 0.5) < 1e-9
    assert metrics["charts/slalom/finish_rate"] == 1.0
    assert metrics["charts/episodes"] == 3
    assert trainer.intake.last_race_time_ms == 15000
