"""memory.batch_device: batches assembled as device tensors are the host sampler's batches, row for
row, for the same seed (on CPU tensors here; the GPU path differs only in where the tensors live
and in page-locked staging), through ring growth, new frames and PER; and the learner's update on
them is the update on the numpy batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rulka.agents.iqn import IQNAgent, IQNHyper, IQNNetworkSpec
from rulka.agents.iqn.replay import MiniRaceReplayMemory
from rulka.memory.batch_device import resolve_batch_device
from rulka.segment import Segment

FIELDS = ("state_img", "state_float", "action", "reward", "next_img", "next_float", "gamma", "weights")


def segments(count, seed=0, t=40, h=36, w=48, fdim=5, start=0):
    rng = np.random.default_rng(seed)
    return [Segment("r", "w", ep, 0, 0, 0, 0,
                    {"obs/img": rng.integers(0, 255, (t + 1, h, w), dtype=np.uint8),
                     "obs/float": rng.normal(size=(t + 1, fdim)).astype(np.float32),
                     "action": rng.integers(0, 4, t), "reward": rng.normal(size=t).astype(np.float32),
                     "terminated": np.zeros(t, bool), "truncated": np.zeros(t, bool)}, episode_done=True)
            for ep in range(start, start + count)]


def pair(**kw):
    common = dict(batch_size=16, n_steps=3, memory_size_schedule=[[0, (300, 10)], [200, (900, 10)]],
                  mini_race_duration_actions=140, prio_alpha=0.6, buffer_test_ratio=0.1, test_every=2, seed=3)
    common.update(kw)
    return (MiniRaceReplayMemory(**common),
            MiniRaceReplayMemory(**common, batch_device="device", device="cpu"))


def assert_same(host, dev):
    for name in FIELDS:
        a, b = getattr(host, name), getattr(dev, name)
        assert isinstance(b, torch.Tensor) and not isinstance(a, torch.Tensor), name
        np.testing.assert_array_equal(a, b.numpy(), err_msg=name)
    np.testing.assert_array_equal(host.slots, dev.slots)
    np.testing.assert_array_equal(host.time, dev.time)


def test_device_batches_are_the_host_batches_for_the_same_seed():
    host, dev = pair()
    for seg in segments(4):
        host.append(seg)
        dev.append(seg)
    assert (host.batch_mode, dev.batch_mode) == ("host", "device")
    for step in range(6):
        if step == 3:  # more frames (a grown ring: the schedule passes 200 frames) mid-way
            for seg in segments(6, seed=1, start=10):
                host.append(seg)
                dev.append(seg)
            assert host.frame_capacity > 400
        a, b = host.sample(), dev.sample()
        assert_same(a, b)
        assert (a.test_batch is None) == (b.test_batch is None)
        if a.test_batch is not None:
            assert_same(a.test_batch, b.test_batch)
        td = np.abs(np.random.default_rng(step).normal(size=len(a)))
        a.report_td_errors(td)  # PER: the next draws follow the same priorities
        b.report_td_errors(td)
    assert dev.batcher.uploaded_frames >= dev.frames_written  # the mirror followed the ring


def test_learner_update_on_a_device_batch_is_the_update_on_the_numpy_batch():
    host, dev = pair(prio_alpha=0.0)
    for seg in segments(3):
        host.append(seg)
        dev.append(seg)
    spec = IQNNetworkSpec(float_dim=5, n_actions=4, image_height=36, image_width=48, float_hidden_dim=16,
                          dense_hidden_dimension=32, embedding_dimension=8)
    hp = IQNHyper(iqn_n=4, iqn_k=4, mini_race_actions=140, use_ddqn=True)
    agents = IQNAgent(spec, hp, seed=0), IQNAgent(spec, hp, seed=0)
    for _ in range(2):
        for agent, mem in zip(agents, (host, dev)):
            torch.manual_seed(1)
            agent.train(mem.sample())
    for x, y in zip(agents[0].online.parameters(), agents[1].online.parameters()):
        assert torch.equal(x, y)


@pytest.mark.parametrize(("setting", "device", "ring", "cap", "mode"), [
    ("auto", "cpu", 10, 100, "host"),          # a CPU learner reads numpy batches
    ("auto", "cuda", 10, 100, "device"),       # the ring fits the GPU budget
    ("auto", "cuda:1", 1000, 100, "pinned"),   # it does not
    ("pinned", "cpu", 10, 100, "host"),        # nothing to copy to
    ("device", "cpu", 10, 100, "device"),
    ("host", "cuda", 10, 100, "host"),
])
def test_batch_device_resolution(setting, device, ring, cap, mode):
    assert resolve_batch_device(setting, device, ring, cap) == mode


def test_a_bad_batch_device_fails_at_construction_and_the_config_key_reaches_the_memory():
    with pytest.raises(ValueError, match="batch_device"):
        MiniRaceReplayMemory(batch_device="gpu")
    from rulka.agents.iqn.settings import make_memory

    mem = make_memory({"memory": {"batch_device": "device", "device_frames_max_gb": 0.5}})
    assert (mem.batch_device, mem.device_frames_max_bytes, mem.device) == ("device", 2**29, "cpu")
    crop = make_memory({"memory": {"batch_device": "device"}, "performance": {"apply_randomcrop_augmentation": True}})
    assert crop.batch_device == "host"  # random crops work on numpy batches
