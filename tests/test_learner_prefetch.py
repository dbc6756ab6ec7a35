"""trainer.prefetch_batches: the learner step samples the next replay batch on a second thread
while the agent trains on this one. What a user relies on: the same batches in the same order as
without it, the rate limiter counting only batches trained on, no sampling in flight once a step
returns (intake and checkpoints meet a quiet memory), and auto leaving it off on CPU."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from test_iqn_replay import make_segment, memory

from rulka.agents.iqn import IQNAgent, IQNHyper, IQNNetworkSpec
from rulka.config import config_from_dict
from rulka.trainer.learner_step import LearnerStep
from rulka.trainer.ratelimit import SampleToInsertRatio
from rulka.trainer.state import RunState, Window


class _Memory:
    """Hands out numbered batches; records on which thread each was drawn and whether the agent
    was inside train() then."""

    sample_while_training = True
    start_learning_size = 0
    samples_per_insert = None

    def __init__(self, agent: _Agent) -> None:
        self.agent = agent
        self.drawn: list[tuple[int, str, bool]] = []
        self.in_flight = 0

    def __len__(self) -> int:
        return 1000

    def ready(self) -> bool:
        return False

    def sample(self, n: int) -> int:
        self.in_flight += 1
        time.sleep(0.005)
        k = len(self.drawn)
        self.drawn.append((k, threading.current_thread().name, self.agent.training))
        self.in_flight -= 1
        return k


class _Agent:
    def __init__(self) -> None:
        self.training = False
        self.seen: list[int] = []

    def train(self, batch: int) -> dict:
        self.training = True
        time.sleep(0.03)
        self.seen.append(batch)
        self.training = False
        return {}

    def take_sample_credit(self) -> int:  # TrainingAgent's default: no resets
        return 0


def _step(memory, agent, limiter=None, prefetch=True) -> LearnerStep:
    return LearnerStep(RunState(), Window(), agent, memory, limiter, lambda: 0, batch_size=8, publish_every=1000,
                       slice_s=1.0, prefetch=prefetch)


def test_next_batch_is_drawn_on_the_prefetch_thread_during_train_and_trained_next_in_order() -> None:
    agent = _Agent()
    mem = _Memory(agent)
    step = _step(mem, agent)
    for _ in range(5):
        assert step.train_once()
        assert mem.in_flight == 0  # nothing samples once the step has returned
    step.close()
    assert agent.seen == [0, 1, 2, 3, 4]  # each batch trained once, in the order drawn
    first, *ahead = mem.drawn
    assert not first[1].startswith("rulka-prefetch")
    assert all(name.startswith("rulka-prefetch") and during_train for _, name, during_train in ahead)
    assert step.prefetched == 4


def test_without_the_memorys_consent_or_with_off_nothing_is_sampled_ahead() -> None:
    agent = _Agent()
    mem = _Memory(agent)
    mem.sample_while_training = False
    for step in (_step(mem, agent), _step(_Memory(agent), agent, prefetch=False)):
        assert not step.prefetch
        step.train_once()
        step.train_once()
        assert not any(name.startswith("rulka-prefetch") for _, name, _ in step.memory.drawn)


def test_the_limiter_counts_only_batches_trained_on_and_the_one_ahead_waits_for_room() -> None:
    agent = _Agent()
    mem = _Memory(agent)
    limiter = SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=8.0, batch_size=8)
    limiter.record_insert(24)  # room for a few batches of 8
    step = _step(mem, agent, limiter)
    trained = 0
    while step.train_once():
        trained += 1
    assert limiter.samples == 8 * trained  # the batch drawn ahead is not counted
    assert len(mem.drawn) == trained + 1 and step._ahead is not None
    limiter.record_insert(16)  # room again: the batch drawn ahead is the next one trained on
    assert step.train_once()
    assert agent.seen[-1] == trained and limiter.samples == 8 * (trained + 1)
    step.close()
    assert step._ahead is None


def _iqn_run(prefetch: bool, prio_alpha: float) -> tuple[list[list[int]], np.ndarray]:
    mem = memory(batch_size=16, prio_alpha=prio_alpha, seed=3)
    for ep in range(6):
        mem.append(make_segment(episode=ep, t=40, done=True, img=False, fdim=5, base=100 * ep))
    spec = IQNNetworkSpec(float_dim=5, n_actions=3, image_height=0, image_width=0, float_hidden_dim=16,
                          dense_hidden_dimension=16, embedding_dimension=8)
    agent = IQNAgent(spec, IQNHyper(use_jit=False, use_amp=False), seed=0)
    slots: list[list[int]] = []
    train = agent.train

    def recording_train(batch):
        slots.append(batch.slots.tolist())
        return train(batch)

    agent.train = recording_train  # type: ignore[method-assign]
    step = LearnerStep(RunState(), Window(), agent, mem, None, lambda: 0, batch_size=16, publish_every=1000,
                       slice_s=1.0, prefetch=prefetch)
    for _ in range(12):
        assert step.train_once()
    step.close()
    priorities = mem.tree.get(np.arange(len(mem))) if mem.tree is not None else np.zeros(0)
    return slots, priorities


def test_a_real_replay_memory_gives_the_same_batches_with_and_without_prefetch() -> None:
    with_prefetch, _ = _iqn_run(True, prio_alpha=0.0)
    without, _ = _iqn_run(False, prio_alpha=0.0)
    assert with_prefetch == without


def test_prioritized_replay_trains_with_prefetch_and_priorities_are_written() -> None:
    """With PER the batch drawn ahead cannot see the priorities of the update it overlaps (one
    update stale, as in Ape-X); the memory's lock keeps the tree consistent."""
    slots, priorities = _iqn_run(True, prio_alpha=0.6)
    assert len(slots) == 12
    assert np.all(np.isfinite(priorities)) and not np.allclose(priorities, priorities[0])


@pytest.mark.parametrize(("setting", "expected"), [("auto", False), ("on", True), ("off", False)])
def test_trainer_setting_auto_is_off_for_a_cpu_agent(setting: str, expected: bool) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from roles_helpers import CountingAgent

    from rulka.net.local import LocalHub
    from rulka.trainer.trainer import Trainer

    agent = CountingAgent()
    mem = _Memory(_Agent())
    cfg = config_from_dict({"trainer": {"prefetch_batches": setting}})
    trainer = Trainer(cfg, LocalHub().trainer_link(), agent=agent, memory=mem,
                      signing_key=Ed25519PrivateKey.generate())
    assert trainer.learner.prefetch is expected
    trainer.close()


def test_auto_is_on_for_an_agent_on_cuda() -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from roles_helpers import CountingAgent

    from rulka.net.local import LocalHub
    from rulka.trainer.trainer import Trainer

    agent = CountingAgent()
    agent.device = "cuda:0"  # what an agent on the GPU reports; nothing here runs on it
    trainer = Trainer(None, LocalHub().trainer_link(), agent=agent, memory=_Memory(_Agent()),
                      signing_key=Ed25519PrivateKey.generate())
    assert trainer.learner.prefetch
    trainer.close()
