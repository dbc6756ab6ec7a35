"""MiniRaceReplayMemory: frames stored once, segments of one episode joined across interleaved
workers, replay-ratio accounting, the PER priority rule, save/load without pickle."""

from __future__ import annotations

import numpy as np
import pytest

from rulka.agents.iqn.replay import MiniRaceReplayMemory
from rulka.errors import BadInput
from rulka.segment import Segment


def make_segment(worker="w", episode=0, index=0, first=0, t=5, done=False, finished=False, img=True,
                 greedy=None, fdim=3, reward=None, base=0.0, img_shape=(8, 6)):
    """Floats encode (step + base) in slot 1 so transitions can be traced back to frames."""
    steps = np.arange(first, first + t + 1, dtype=np.float32)
    flt = np.zeros((t + 1, fdim), np.float32)
    flt[:, 1] = steps + base
    arrays = {"obs/float": flt, "action": (np.arange(first, first + t) % 3).astype(np.int64),
              "reward": np.asarray(reward if reward is not None else np.ones(t), np.float32),
              "terminated": np.array([False] * (t - 1) + [finished]), "truncated": np.zeros(t, bool)}
    if img:
        arrays["obs/img"] = np.broadcast_to((steps % 250).astype(np.uint8)[:, None, None], (t + 1, *img_shape)).copy()
    if greedy is not None:
        arrays["extra/greedy"] = np.asarray(greedy, bool)
    return Segment(run_id="r", worker_id=worker, episode_id=episode, seq=index, index_in_episode=index,
                   first_step=first, policy_version=0, arrays=arrays, episode_done=done)


def memory(**kw):
    defaults = dict(batch_size=4, n_steps=3, memory_size_schedule=[[0, (1000, 10)]], gamma_schedule=[[0, 1.0]],
                    buffer_test_ratio=0.0, mini_race_duration_actions=None, seed=0)
    defaults.update(kw)
    return MiniRaceReplayMemory(**defaults)


def stored(mem):
    ar = mem.train.arrays
    v = mem.train.valid_slots()
    s = mem.flt[ar["state"][v] % mem.frame_capacity, 1]
    ns = mem.flt[ar["next_state"][v] % mem.frame_capacity, 1]
    return sorted(zip(s.tolist(), ns.tolist(), ar["n_steps"][v].tolist(), ar["terminal_actions"][v].tolist()))


def test_frames_are_stored_once():
    mem = memory()
    for k in range(4):
        mem.append(make_segment(index=k, first=5 * k, done=k == 3, img_shape=(64, 64)))
    assert mem.frames_written == 21  # 4 x 5 steps + 1 final frame: no copies per n-step
    assert len(mem) == 20
    # the frame ring holds the pixels; a transition is a few integers (far less than a frame)
    frame_bytes = 64 * 64 + 4 * 3 + 4
    per_transition = sum(a[0].nbytes for a in mem.train.arrays.values())
    assert per_transition < frame_bytes / 50
    total = mem.img.nbytes + mem.flt.nbytes + mem.potential.nbytes
    # about 1.25 frames of storage per transition slot, never n_steps or history copies
    assert total <= 1.3 * (mem.train.capacity + mem.test.capacity + mem.max_pending * 5 + 64) * frame_bytes


def test_episode_split_in_segments_equals_single_segment_even_interleaved():
    whole = memory()
    whole.append(make_segment(t=12, done=True, finished=True))
    split = memory()
    split.append(make_segment(worker="a", index=0, first=0, t=5))
    split.append(make_segment(worker="b", index=0, first=0, t=4, base=100.0))  # another worker in between
    split.append(make_segment(worker="a", index=1, first=5, t=4))
    split.append(make_segment(worker="b", index=1, first=4, t=3, done=True, base=100.0))
    split.append(make_segment(worker="a", index=2, first=9, t=3, done=True, finished=True))
    mine = [x for x in stored(split) if x[0] < 100]
    assert mine == stored(whole)
    assert len([x for x in stored(split) if x[0] >= 100]) == 7
    # near the finish: state 10 -> next 12 (2 steps, finish 2 steps away)
    assert (10.0, 12.0, 2, 2) in mine


def test_missing_segment_closes_the_episode_as_cut_off():
    mem = memory()
    mem.append(make_segment(index=0, t=5))
    mem.append(make_segment(index=2, first=10, t=5, done=True))  # index 1 lost
    assert mem.counters["episode_gaps"] == 1
    assert len(mem) == 10


def test_replay_ratio_accounting():
    """Linesight's offset: updates allowed = (training transitions - start_learning_size) x uses /
    batch, so learning starts without a burst of start x uses / batch updates."""
    mem = memory(batch_size=4, number_times_single_memory_is_used_before_discard=2,
                 memory_size_schedule=[[0, (1000, 12)]])
    mem.append(make_segment(t=10, done=True))
    assert mem.trainable_updates(10) == 0  # 10 < start_learning_size 12
    mem.append(make_segment(episode=1, t=2, done=True))
    assert mem.trainable_updates(12) == 0  # learning may start, with no burst: (12 - 12) * 2 / 4
    mem.append(make_segment(episode=2, t=8, done=True))
    assert mem.trainable_updates(20) == 4  # (20 - 12) * 2 / 4
    for _ in range(3):
        mem.sample()
    assert mem.trainable_updates(20) == 4 and mem.remaining_updates() == 1
    mem.append(make_segment(episode=3, t=2, done=True))
    assert mem.trainable_updates(22) == 5  # (22 - 12) * 2 / 4
    assert mem.remaining_updates() == 2


def test_test_buffer_transitions_do_not_count_toward_the_replay_ratio():
    mem = memory(batch_size=4, number_times_single_memory_is_used_before_discard=2,
                 memory_size_schedule=[[0, (1000, 10)]], buffer_test_ratio=0.5, seed=3)
    mem.append(make_segment(t=60, done=True))
    train, test = len(mem.train), len(mem.test)
    assert train + test == 60 and 10 < train < 50  # about half went to the test store
    assert mem.trainable_updates(60) == (train - 10) * 2 // 4
    assert mem.held_out_transitions == test  # what the trainer's rate limiter leaves out of its inserts


def test_a_larger_start_size_in_the_schedule_pauses_training_until_data_catch_up():
    mem = memory(batch_size=4, number_times_single_memory_is_used_before_discard=2,
                 memory_size_schedule=[[0, (1000, 10)], [30, (2000, 20)]])
    mem.append(make_segment(t=26, done=True))
    assert mem.trainable_updates(26) == 8  # (26 - 10) * 2 / 4
    assert mem.trainable_updates(30) == 3  # start 20 from frame 30: (26 - 20) * 2 / 4


def test_memory_size_schedule_grows_capacity_and_start_threshold():
    mem = memory(memory_size_schedule=[[0, (8, 4)], [30, (64, 20)]])
    mem.append(make_segment(t=10, done=True))
    assert len(mem) == 8  # FIFO at capacity 8
    assert mem.trainable_updates(10) > 0
    mem.append(make_segment(episode=1, t=25, done=True))
    assert mem.train.capacity == 64 and mem.start_learning_size == 20
    assert len(mem) == 8 + 25
    assert sorted(s for s, *_ in stored(mem)) == sorted([2, 3, 4, 5, 6, 7, 8, 9] + list(range(25)))


def test_sample_batch_mini_race_times_written_in_slot_zero():
    mem = memory(mini_race_duration_actions=20, oversample_long_term_steps=4, oversample_maximum_term_steps=2)
    mem.append(make_segment(t=30, done=True, img=True))
    b = mem.sample(64)
    assert b.state_img.shape == (64, 8, 6) and b.state_img.dtype == np.uint8
    assert np.array_equal(b.state_float[:, 0], b.time)
    assert np.all(b.next_float[:, 0] - b.state_float[:, 0] >= 1)
    past = b.next_float[:, 0] >= 20
    assert np.all(b.gamma[past] == 0)
    # image of the state is the stored frame of that state
    assert np.array_equal(b.state_img[:, 0, 0], (b.state_float[:, 1] % 250).astype(np.uint8))


def test_per_priority_rule_and_sampling_bias():
    mem = memory(prio_alpha=1.0, prio_epsilon=0.0, prio_beta=1.0, mini_race_duration_actions=140,
                 min_horizon_to_update_priority_actions=100)
    mem.append(make_segment(t=4, done=True))
    slots = np.array([0, 1, 2, 3])
    # only items whose mini-race time is below 100 get a new priority
    mem.update_priorities(slots, np.array([3.0, 1.0, 5.0, 7.0]), np.array([10, 99, 100, 120]))
    assert mem.tree.get(slots).tolist() == [3.0, 1.0, 1.0, 1.0]
    b = mem.sample(6000)
    freq = np.bincount(b.slots, minlength=4) / 6000
    assert freq == pytest.approx([0.5, 1 / 6, 1 / 6, 1 / 6], abs=0.03)
    # importance weights (N P)^-beta divided by their maximum (Schaul et al.): P = [1/2, 1/6, 1/6, 1/6],
    # (4 P)^-1 = [1/2, 3/2, 3/2, 3/2], / 3/2 = [1/3, 1, 1, 1]
    assert b.weights[b.slots == 0] == pytest.approx(1 / 3, rel=1e-5)
    assert b.weights[b.slots != 0] == pytest.approx(1.0, rel=1e-5)
    # a new transition enters at the largest priority given so far (3), not at the mean
    mem.append(make_segment(episode=1, t=1, done=True))
    assert mem.tree.get(np.array([4]))[0] == pytest.approx(3.0)


def test_short_mini_races_still_update_priorities():
    """A mini-race of 40 actions or fewer has no "duration - 40" horizon: every item's priority
    is updated (the rule would otherwise leave each at its first value)."""
    from rulka.config import config_from_dict

    mem = memory(prio_alpha=1.0, prio_epsilon=0.0, mini_race_duration_actions=30)
    assert mem.min_horizon_prio is None
    mem.append(make_segment(t=4, done=True))
    slots = np.array([0, 1, 2, 3])
    mem.update_priorities(slots, np.array([3.0, 1.0, 5.0, 7.0]), np.array([0, 10, 20, 29]))
    assert mem.tree.get(slots).tolist() == [3.0, 1.0, 5.0, 7.0]
    cfg = config_from_dict({"environment": {"temporal_mini_race_duration_ms": 1500}})  # 30 actions at 50 ms
    assert cfg.temporal_mini_race_duration_actions == 30 and cfg.min_horizon_to_update_priority_actions is None


def test_td_errors_reported_by_batch_update_priorities():
    mem = memory(prio_alpha=0.5, prio_epsilon=0.01)
    mem.append(make_segment(t=4, done=True))
    b = mem.sample(2)
    b.report_td_errors(np.array([0.99, 0.99]))
    assert np.allclose(mem.tree.get(b.slots), 1.0)


def test_td_errors_reach_only_transitions_still_stored_where_they_are_now():
    """A batch trained on after more data arrived (the trainer's batch prefetch): transitions
    overwritten since it was sampled keep their entry priority; after the ring grew, the others'
    priorities land at their new slots."""
    mem = memory(prio_alpha=1.0, prio_epsilon=0.0, memory_size_schedule=[[0, (8, 1)], [100, (32, 1)]])
    mem.append(make_segment(t=8, done=True))  # 8 transitions: logical 0..7 fill the ring
    b = mem.sample(64)
    logical = mem.train.logical_of(b.slots)
    mem.append(make_segment(episode=1, t=3, done=True))  # overwrites logical 0..2 (slots 0..2)
    b.report_td_errors(np.full(64, 5.0))
    overwritten = np.isin(b.slots, [0, 1, 2]) & (logical < 3)
    assert overwritten.any() and (~overwritten).any()
    assert np.all(mem.tree.get(np.array([0, 1, 2])) == 1.0)  # the new transitions, at their entry priority
    assert np.all(mem.tree.get(np.unique(b.slots[~overwritten])) == 5.0)
    # a batch sampled before the ring grows reports after: priorities follow their transitions
    b2 = mem.sample(64)
    lg2 = mem.train.logical_of(b2.slots)
    mem.set_frames_played(200)  # capacity 8 -> 32, transitions re-laid by logical index
    assert mem.train.capacity == 32
    b2.report_td_errors(np.full(64, 9.0))
    assert np.all(mem.tree.get(np.unique(lg2 % 32)) == 9.0)


def test_test_split_and_test_batch():
    mem = memory(buffer_test_ratio=0.5, test_every=2)
    mem.append(make_segment(t=200, done=True))
    assert 60 < len(mem.test) < 140 and len(mem) + len(mem.test) == 200
    assert mem.sample().test_batch is None
    assert mem.sample().test_batch is not None


def test_bad_segments_are_rejected_and_counted_without_losing_data():
    mem = memory(n_actions=3)
    mem.append(make_segment(t=5, done=True))
    bad = make_segment(episode=1, t=5, done=True)
    bad.arrays["action"][0] = 7
    with pytest.raises(BadInput):
        mem.append(bad)
    wrong_shape = make_segment(episode=2, t=5, done=True, fdim=4)
    with pytest.raises(BadInput):
        mem.append(wrong_shape)
    assert mem.counters["rejected"] == 2 and len(mem) == 5


def test_fill_buffer_false_is_skipped():
    mem = memory()
    seg = make_segment(t=5, done=True)
    seg.info["fill_buffer"] = False
    assert mem.append(seg) == 0 and len(mem) == 0 and mem.counters["skipped_no_fill"] == 1


def test_save_load_roundtrip(tmp_path):
    mem = memory(prio_alpha=0.6)
    mem.append(make_segment(t=20, done=True, finished=True))
    mem.sample()
    mem.save(tmp_path)
    other = memory(prio_alpha=0.6)
    other.load(tmp_path)
    assert stored(other) == stored(mem)
    assert other.batches_sampled == 1 and other.transitions_added == 20
    assert np.array_equal(other.img, mem.img)
    assert other.tree.total == pytest.approx(mem.tree.total)
    (tmp_path / "replay.json").write_text("{not json")
    with pytest.raises(BadInput):
        memory().load(tmp_path)


def test_rebuild_transitions_pass_the_trainer_verify_check():
    from rulka.memory.rebuild_check import first_difference

    mem = memory(n_steps=2)
    for seg in (make_segment(t=4, done=True, finished=True, reward=[1, 2, 3, 4]),
                make_segment(t=6, index=1, first=4), make_segment(t=3, img=False)):
        seg.arrays["obs/float"][:, 0] = 7.0  # the mini-race slot is untouched by a rebuild
        assert first_difference(seg, mem) is None
        assert len(mem.rebuild_transitions(seg)) == seg.num_transitions
    assert len(mem) == 0  # verify mode adds nothing


def test_defaults_are_the_config_models():
    from rulka.agents.iqn.settings import memory_kwargs_from_config
    from rulka.config import RulkaConfig

    built, configured = MiniRaceReplayMemory(), MiniRaceReplayMemory(**memory_kwargs_from_config(RulkaConfig()))
    for name in ("batch_size", "n_max", "memory_size_schedule", "gamma_schedule", "discard_non_greedy", "mini_race",
                 "oversample_long", "oversample_max_term", "replay_ratio", "prio_alpha", "prio_epsilon", "prio_beta",
                 "min_horizon_prio", "test_ratio"):
        assert getattr(built, name) == getattr(configured, name), name


def test_the_finish_reward_reaches_the_sampled_batches():
    kw = dict(mini_race_duration_actions=20, oversample_long_term_steps=4, oversample_maximum_term_steps=2)
    plain, paid = memory(**kw), memory(**kw, finish_reward_per_action_left=0.5)
    for mem in (plain, paid):
        mem.append(make_segment(t=8, done=True, finished=True, img=False))
    a, b = plain.sample(256), paid.sample(256)  # same seed: the same slots and times
    assert np.array_equal(a.slots, b.slots) and np.array_equal(a.time, b.time)
    ta = paid.train.arrays["terminal_actions"][b.slots]
    n = paid.train.arrays["n_steps"][b.slots]
    finished = (ta <= n) & (b.time + ta <= 20)
    assert finished.any() and (~finished).any()
    left = np.where(finished, 20 - b.time - ta, 0)
    np.testing.assert_allclose(b.reward - a.reward, 0.5 * left, atol=1e-5)
