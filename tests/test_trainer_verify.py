"""Verify mode: the first difference between what a memory rebuilds and what the worker saw."""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import CountingAgent, ListMemory

from rulka.agents.simple import SimpleReplayMemory
from rulka.compress import ZstdCompressor
from rulka.memory.rebuild_check import compare_transitions, expected_transitions, first_difference
from rulka.net.link import Message
from rulka.net.local import LocalHub
from rulka.segment import Segment
from rulka.trainer.trainer import Trainer


def segment(t=5):
    return Segment(run_id="", worker_id="w", episode_id=0, seq=0, index_in_episode=0, first_step=0, policy_version=0,
                   arrays={"obs/x": np.arange((t + 1) * 2, dtype=np.float32).reshape(t + 1, 2),
                           "action": np.arange(t, dtype=np.int64) % 2, "reward": np.arange(t, dtype=np.float32),
                           "terminated": np.array([False] * (t - 1) + [True])})


class RewardBugMemory(ListMemory):
    """Shifts rewards by one step from transition 3 on: the kind of off-by-one verify exists for."""

    def rebuild_transitions(self, seg):
        out = super().rebuild_transitions(seg)
        for i in range(3, len(out)):
            out[i]["reward"] = seg.arrays["reward"][i - 1]
        return out


def test_a_correct_memory_matches():
    assert first_difference(segment(), SimpleReplayMemory()) is None
    assert first_difference(segment(), ListMemory()) is None


def test_planted_difference_is_reported_with_key_index_and_values():
    diff = first_difference(segment(), RewardBugMemory())
    assert diff == "transition 3: reward: expected 3., got 2."


def test_stacked_history_compares_the_newest_frame_and_shape_errors_are_named():
    seg = segment()
    exp = expected_transitions(seg)
    stacked = [dict(tr, obs=np.stack([tr["obs"] * 0, tr["obs"]])) for tr in exp]
    assert compare_transitions(exp, stacked) is None
    wrong = [dict(tr, next_obs=np.zeros(3)) for tr in exp]
    assert compare_transitions(exp, wrong) == "transition 0: next_obs: shape (3,) != expected (2,)"
    assert compare_transitions(exp, exp[:-1]) == "the memory rebuilt 4 transitions, the worker saw 5"


def test_trainer_in_verify_mode_counts_failures():
    trainer = Trainer(None, LocalHub().trainer_link(), agent=CountingAgent(), memory=RewardBugMemory(),
                      signing_key=Ed25519PrivateKey.generate(), verify=True)
    trainer.ingest([Message("segment", "w", ZstdCompressor().compress(segment()))])
    assert trainer.state.counters["verify_failures"] == 1
    assert trainer.intake.verify_failures == ["verify: worker w seq 0: transition 3: reward: expected 3., got 2."]


CARTPOLE = {"environment": {"backend": "gym", "gym_id": "CartPole-v1"}, "worker": {"segment_max_steps": 8},
            "trainer": {"agent": "simple_dqn", "memory": "simple", "agent_kwargs": {"obs_dim": 4, "n_actions": 2}}}


def test_verify_pipeline_passes_on_a_lossless_path():
    from rulka.cli.verify import verify_pipeline

    result = verify_pipeline(CARTPOLE, segments=6)
    assert result["first_difference"] is None
    assert result["segments"] == 6 and result["transitions"] >= 6


def test_verify_pipeline_catches_a_lossy_compressor():
    from rulka.cli.verify import verify_pipeline

    cfg = {**CARTPOLE, "worker": {"segment_max_steps": 8, "compressor": "roles_helpers:LossyCompressor"}}
    result = verify_pipeline(cfg, segments=6)
    assert result["segments"] == 1
    # CartPole pays 1 per step; the memory got 0.5
    assert result["first_difference"] == (
        "worker verify episode 0 segment 0 (seq 0): transition 0: reward: expected 1., got 0.5")


def test_rulka_verify_command_exit_codes(capsys):
    from pathlib import Path

    from rulka.cli import main

    config = str(Path(__file__).resolve().parent.parent / "configs" / "cartpole_simple.yaml")
    assert main(["verify", config, "--segments", "3"]) == 0
    assert "verify: OK, 3 segments" in capsys.readouterr().out
    assert main(["verify", config, "--segments", "3", "--set", "worker.compressor=none"]) == 0
    assert "verify: OK, 3 segments" in capsys.readouterr().out
    bad = ["verify", config, "--segments", "3", "--set", "worker.compressor=roles_helpers:LossyCompressor"]
    assert main(bad) == 1
    assert "MISMATCH" in capsys.readouterr().out
