"""The generic replay storage: frames stored once across segments of interleaved episodes,
n-step targets with terminal vs truncated endings, shaping, the update rate, save/load."""

from __future__ import annotations

import numpy as np
import pytest

from rulka.errors import BadInput
from rulka.memory import EpisodeStitcher, FrameStore, UniformReplayMemory
from rulka.segment import Segment


def seg(episode=0, index=0, first=0, t=4, done=False, terminated=False, worker="w", continuous=True,
        reward=None, potential=None, obs_dim=2):
    """obs/x slot 0 holds the step number, so a transition can be traced to its frames."""
    x = np.zeros((t + 1, obs_dim), np.float32)
    x[:, 0] = np.arange(first, first + t + 1)
    action = (np.stack([np.arange(first, first + t)] * 3, 1).astype(np.float32) / 100 if continuous
              else np.arange(first, first + t).astype(np.int64) % 3)
    arrays = {"obs/x": x, "action": action,
              "reward": np.asarray(reward if reward is not None else np.ones(t), np.float32),
              "terminated": np.array([False] * (t - 1) + [terminated]), "truncated": np.zeros(t, bool)}
    if potential is not None:
        arrays["obs/potential"] = np.asarray(potential, np.float32)
    return Segment(run_id="r", worker_id=worker, episode_id=episode, seq=index, index_in_episode=index,
                   first_step=first, policy_version=0, arrays=arrays, episode_done=done)


def transitions(mem):
    tr = mem.transitions
    n = len(mem)
    s = mem.frames.get("obs/x", tr["state"][:n])[:, 0]
    ns = mem.frames.get("obs/x", tr["next_state"][:n])[:, 0]
    return sorted(zip(s.tolist(), ns.tolist(), tr["reward"][:n].round(6).tolist(), tr["discount"][:n].round(6).tolist()))


def test_frames_once_across_segments_and_one_step_targets():
    mem = UniformReplayMemory(capacity=100, n_steps=1, gamma=0.5, start_learning_size=0)
    for k in range(3):
        mem.append(seg(index=k, first=4 * k, done=k == 2, terminated=k == 2))
    assert mem.frames.written == 13  # 3 x 4 steps + the final frame: the shared boundary frame once
    got = transitions(mem)
    assert [g[:2] for g in got] == [(i, i + 1) for i in range(12)]
    assert all(g[2] == 1.0 for g in got)
    assert [g[3] for g in got] == [0.5] * 11 + [0.0]  # only the step into the terminal state is cut


def test_n_step_sums_and_truncation_bootstraps():
    mem = UniformReplayMemory(capacity=100, n_steps=3, gamma=0.5, start_learning_size=0)
    r = [1.0, 2.0, 4.0, 8.0]
    mem.append(seg(t=4, reward=r, done=False))
    assert len(mem) == 1  # the last 3 steps wait for their future
    mem.append(seg(index=1, first=4, t=2, reward=[16.0, 32.0], done=True, terminated=False))
    got = transitions(mem)
    # step 0: 1 + .5*2 + .25*4 = 3, bootstrap .125 from frame 3
    assert got[0] == (0, 3, 3.0, 0.125)
    assert got[3] == (3, 6, 8 + 8 + 8, 0.125)
    # a truncated episode's last steps bootstrap from the final frame with a shorter n
    assert got[4] == (4, 6, 16 + 16, 0.25)
    assert got[5] == (5, 6, 32.0, 0.5)


def test_terminal_within_n_steps_gets_zero_discount():
    mem = UniformReplayMemory(capacity=100, n_steps=3, gamma=0.5, start_learning_size=0)
    mem.append(seg(t=4, reward=[1, 1, 1, 1], done=True, terminated=True))
    got = transitions(mem)
    assert got[0] == (0, 3, 1.75, 0.125)
    assert [g[3] for g in got[1:]] == [0.0, 0.0, 0.0]
    assert got[1][:3] == (1, 4, 1.75)


def test_interleaved_workers_and_a_gap():
    mem = UniformReplayMemory(capacity=100, n_steps=2, gamma=1.0, start_learning_size=0)
    mem.append(seg(worker="a", t=3))
    mem.append(seg(worker="b", t=3))
    mem.append(seg(worker="a", index=1, first=3, t=3, done=True))
    assert mem.counters["episode_gaps"] == 0
    mem.append(seg(worker="b", index=2, first=6, t=3, done=True))  # b's segment 1 never came
    assert mem.counters["episode_gaps"] == 1
    assert len(mem) == 6 + (1 + 2 + 3)  # a: 6; b: 1, its 2 held steps closed at the gap, 3 more


def test_potential_shaping_matches_the_formula():
    mem = UniformReplayMemory(capacity=10, n_steps=1, gamma=0.5, start_learning_size=0)
    mem.append(seg(t=2, reward=[1.0, 1.0], potential=[10.0, 20.0, 40.0], done=True, terminated=True))
    got = transitions(mem)
    assert got[0][2] == pytest.approx(1 + 0.5 * 20 - 10)
    assert got[1][2] == pytest.approx(1 + 0.0 * 40 - 20)  # terminal: no bootstrap, no next potential


def test_rate_is_declared_to_the_trainer(tmp_path):
    from rulka.trainer.ratelimit import SampleToInsertRatio

    mem = UniformReplayMemory(capacity=1000, batch_size=4, start_learning_size=10, updates_per_sample=2.0)
    assert mem.samples_per_insert == 8.0  # two updates of 4 samples per stored transition
    limiter = SampleToInsertRatio(mem.samples_per_insert, mem.start_learning_size, batch_size=mem.batch_size)
    limiter.record_insert(mem.append(seg(t=30, done=True)))
    # 20 transitions beyond the warm-up allow about 2 x 20 updates, within the limiter's window
    assert abs(limiter.updates_ahead_allowed(len(mem)) - 40) <= limiter.error_buffer / mem.batch_size + 1


def test_sample_shapes_and_bad_input():
    mem = UniformReplayMemory(capacity=5, n_steps=1, start_learning_size=0, seed=0)
    for e in range(4):
        mem.append(seg(episode=e, t=4, done=True))
    assert len(mem) == 5
    b = mem.sample(7)
    assert b.obs["x"].shape == (7, 2) and b.action.shape == (7, 3) and b.action.dtype == np.float32
    assert np.array_equal(b.next_obs["x"][:, 0], b.obs["x"][:, 0] + 1)  # never a stale frame
    with pytest.raises(BadInput):
        mem.append(seg(episode=9, continuous=False))
    bad = seg(episode=10)
    bad.arrays["action"][0, 0] = np.nan
    with pytest.raises(BadInput):
        mem.append(bad)
    with pytest.raises(BadInput):
        mem.append(seg(episode=11, obs_dim=3))
    assert mem.counters["rejected"] == 3


def test_save_load_round_trip(tmp_path):
    mem = UniformReplayMemory(capacity=50, n_steps=2, start_learning_size=0, seed=1)
    for e in range(3):
        mem.append(seg(episode=e, t=5, done=True, terminated=e == 1))
    mem.save(tmp_path)
    other = UniformReplayMemory(capacity=50, n_steps=2, start_learning_size=0)
    other.load(tmp_path)
    assert transitions(other) == transitions(mem)
    assert other.transitions_added == mem.transitions_added


def test_rebuild_transitions_is_the_segment():
    s = seg(t=3, done=True, terminated=True, potential=[1, 2, 3, 4])
    out = UniformReplayMemory(capacity=10).rebuild_transitions(s)
    assert [int(t["obs"][0]) for t in out] == [0, 1, 2]
    assert [t["done"] for t in out] == [False, False, True]
    assert np.allclose(out[1]["action"], s.arrays["action"][1]) and out[1]["reward"] == 1.0


def test_frame_store_grows_keeping_serials():
    store = FrameStore(4)
    serials = store.store({"a": np.arange(6, dtype=np.float32)[:, None]})
    assert list(store.valid(serials)) == [False, False, True, True, True, True]
    store.grow(8)
    assert store.get("a", serials[2:])[:, 0].tolist() == [2, 3, 4, 5]
    with pytest.raises(BadInput):
        store.store({"a": np.zeros((1, 2), np.float32)})


def test_stitcher_drops_oldest_pending_episode():
    st = EpisodeStitcher(hold_back=1, max_pending=2)
    counter = iter(range(1000))
    store = lambda first: np.array([next(counter) for _ in range(4 - first)])  # noqa: E731
    for e in range(3):
        st.join(e, 0, False, False, store, {"r": np.zeros(3)})
    assert st.counters["dropped_pending"] == 1 and set(st.tails) == {1, 2}
