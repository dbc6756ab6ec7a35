"""PER without a host read-back in the update: the agent reports TD errors as DeferredValues and the
replay applies them before it next samples, inserts or saves. The same seed gives the same sampled
batches and the same priorities as the immediate report (``defer_td_errors=False``, the code
before), with and without the trainer's prefetch order (the next batch sampled before the update
reports), through inserts and ring growth between updates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rulka.agents.iqn import IQNAgent, IQNHyper, IQNNetworkSpec
from rulka.agents.iqn.replay import MiniRaceReplayMemory
from rulka.memory.deferred import DeferredValues, PendingReports
from tests.test_acting import one_thread  # noqa: F401 - tiny updates: one torch thread (autouse)
from tests.test_batch_device import segments

SPEC = IQNNetworkSpec(float_dim=5, n_actions=4, image_height=36, image_width=48, float_hidden_dim=16,
                      dense_hidden_dimension=32, embedding_dimension=8)


def run(defer: bool, prefetch: bool, steps: int = 12):
    """(slots of every batch trained on, priorities at the end, max priority, pending seen after a train)."""
    torch.manual_seed(0)
    mem = MiniRaceReplayMemory(batch_size=16, n_steps=3, memory_size_schedule=[[0, (300, 10)], [200, (900, 10)]],
                               mini_race_duration_actions=140, prio_alpha=0.6, buffer_test_ratio=0.1,
                               test_every=0, seed=3)
    agent = IQNAgent(SPEC, IQNHyper(iqn_n=4, iqn_k=4, mini_race_actions=140), seed=0)
    agent.defer_td_errors = defer
    for seg in segments(4):
        mem.append(seg)
    slots, pending_after_train = [], []
    ahead = mem.sample() if prefetch else None
    for step in range(steps):
        if step in (4, 8):  # intake between updates; at step 4 the ring grows (past 200 frames)
            for seg in segments(3, seed=step, start=10 * step):
                mem.append(seg)
        if prefetch:  # LearnerStep with prefetch: the next batch is sampled while this one trains
            batch, ahead = ahead, mem.sample()
        else:
            batch = mem.sample()
        slots.append(batch.slots.copy())
        agent.train(batch)
        pending_after_train.append(len(mem._pending))
    mem.flush_priorities()
    return slots, mem.tree.values().copy(), mem.max_priority, pending_after_train


@pytest.mark.parametrize("prefetch", [False, True])
def test_deferred_td_errors_give_the_same_batches_and_priorities_as_an_immediate_read_back(prefetch):
    slots_now, prio_now, max_now, pending_now = run(defer=False, prefetch=prefetch)
    slots_def, prio_def, max_def, pending_def = run(defer=True, prefetch=prefetch)
    assert len(slots_now) == 12
    for a, b in zip(slots_now, slots_def):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(prio_now, prio_def)
    assert max_now == max_def
    assert not any(pending_now)  # the code before: applied during the update
    assert all(pending_def)  # deferred: the update left its report pending, the next sample applied it
    assert len(np.unique(prio_def[prio_def > 0])) > 10  # priorities did move


def test_a_save_applies_pending_reports(tmp_path):
    mem = MiniRaceReplayMemory(batch_size=8, n_steps=3, memory_size_schedule=[[0, (300, 10)]],
                               mini_race_duration_actions=140, prio_alpha=0.6, buffer_test_ratio=0.0, seed=1)
    for seg in segments(2):
        mem.append(seg)
    batch = mem.sample()
    batch.report_td_errors(DeferredValues(torch.full((len(batch),), 50.0)))
    assert len(mem._pending) == 1 and mem.max_priority == 1.0
    mem.save(tmp_path / "replay")
    assert len(mem._pending) == 0 and mem.max_priority == pytest.approx((50.0 + mem.prio_epsilon) ** 0.6)
    again = MiniRaceReplayMemory(batch_size=8, n_steps=3, memory_size_schedule=[[0, (300, 10)]],
                                 mini_race_duration_actions=140, prio_alpha=0.6, buffer_test_ratio=0.0, seed=1)
    again.load(tmp_path / "replay")
    np.testing.assert_array_equal(again.tree.values(), mem.tree.values())


def test_pending_reports_apply_in_arrival_order():
    seen = []
    pending = PendingReports(lambda tag, values: seen.append((tag, values.tolist())))
    pending.add("a", DeferredValues(torch.tensor([1.0, 2.0])))
    pending.add("b", np.array([3.0]))
    assert len(pending) == 2 and not seen
    assert pending.drain() == 2 and pending.drain() == 0
    assert seen == [("a", [1.0, 2.0]), ("b", [3.0])]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_values_come_back_through_pinned_memory():
    v = DeferredValues(torch.arange(1000, device="cuda", dtype=torch.float32))
    np.testing.assert_array_equal(v.numpy(), np.arange(1000, dtype=np.float32))
    assert v.ready()
