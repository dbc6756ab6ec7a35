"""Incremental replay checkpoints (issue 15): the replay's arrays go into content-addressed chunks
shared by the checkpoints, a checkpoint writes only the chunks that changed, a resume gives the
memory a whole-file save gives, damaged chunks fall back to the previous checkpoint, chunks no
kept checkpoint needs are deleted, and checkpoints with a whole ``replay.npz`` still load."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from rulka.agents.iqn.replay import MiniRaceReplayMemory
from rulka.errors import BadInput, UserError
from rulka.memory import UniformReplayMemory
from rulka.memory.files import ChunkStore, read_replay
from rulka.segment import Segment
from rulka.trainer import checkpoint_store as ckpt

CHUNK = 4096  # 16 frames of 16 x 16 pixels per image chunk


def iqn_segment(episode: int, t: int, rng: np.random.Generator, done: bool = True) -> Segment:
    arrays = {"obs/float": rng.normal(size=(t + 1, 5)).astype(np.float32),
              "obs/img": rng.integers(0, 255, (t + 1, 16, 16), dtype=np.uint8),
              "action": rng.integers(0, 4, t), "reward": rng.normal(size=t).astype(np.float32),
              "terminated": np.array([False] * (t - 1) + [done]), "truncated": np.zeros(t, bool)}
    return Segment("r", "w", episode, 0, 0, 0, 0, arrays, episode_done=True)


def uniform_segment(episode: int, t: int, rng: np.random.Generator, done: bool = True) -> Segment:
    arrays = {"obs/img": rng.integers(0, 255, (t + 1, 16, 16), dtype=np.uint8),
              "obs/float": rng.normal(size=(t + 1, 3)).astype(np.float32),
              "action": rng.normal(size=(t, 2)).astype(np.float32), "reward": rng.normal(size=t).astype(np.float32),
              "terminated": np.array([False] * (t - 1) + [done]), "truncated": np.zeros(t, bool)}
    return Segment("r", "w", episode, 0, 0, 0, 0, arrays, episode_done=True)


def new_iqn() -> MiniRaceReplayMemory:
    return MiniRaceReplayMemory(batch_size=8, n_steps=3, memory_size_schedule=[[0, (300, 10)]],
                                gamma_schedule=[[0, 0.9]], mini_race_duration_actions=None, buffer_test_ratio=0.1,
                                prio_alpha=0.6, max_pending_episodes=2, seed=0)


def new_uniform() -> UniformReplayMemory:
    return UniformReplayMemory(capacity=300, batch_size=8, n_steps=2, start_learning_size=0, max_pending_episodes=2,
                               seed=0)


KINDS = {"iqn": (new_iqn, iqn_segment), "uniform": (new_uniform, uniform_segment)}


def contents(mem) -> dict:
    """Every array and counter the memory keeps (what a resume must give back)."""
    out = {f"frames/{k}": v.copy() for k, v in mem.frames.fields.items()}
    out["frames/written"] = mem.frames.written
    if isinstance(mem, MiniRaceReplayMemory):
        for name, ring in (("train", mem.train), ("test", mem.test)):
            out.update({f"{name}/{k}": v.copy() for k, v in ring.arrays.items()})
            out[f"{name}/state"] = (ring.count, ring.size, ring.capacity)
        out["priorities"] = mem.tree.values().copy()
        out["counts"] = (mem.frames_played, mem.transitions_added, mem.train_transitions_added, mem.batches_sampled,
                         mem.max_priority, mem._prio_updated)
    else:
        out.update({f"transitions/{k}": v.copy() for k, v in mem.transitions.items()})
        out["counts"] = (mem.count, mem.transitions_added, mem.batches_sampled)
    out["counters"] = dict(mem.counters)
    return out


def assert_same(a, b) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def fill(mem, make, episodes: range, rng: np.random.Generator, t: int = 20) -> None:
    for e in episodes:
        mem.append(make(e, t, rng, done=e % 3 != 0))
        if hasattr(mem, "tree"):
            batch = mem.sample()  # priorities change anywhere in the ring
            batch.report_td_errors(rng.random(len(batch)))
        else:
            mem.sample()


def sample_equal(a, b) -> None:
    a.rng, b.rng = np.random.default_rng(7), np.random.default_rng(7)
    x, y = a.sample(), b.sample()
    for field in ("obs", "next_obs", "state_img", "next_img", "state_float", "action", "reward", "weights"):
        u, v = getattr(x, field, None), getattr(y, field, None)
        if isinstance(u, dict):
            assert all(np.array_equal(u[k], v[k]) for k in u)
        elif u is not None:
            assert np.array_equal(u, v), field


def write(root, number, mem, **kw):
    return ckpt.write_checkpoint(root, number, {"w": np.zeros(2)}, {"n": number}, mem, chunk_bytes=CHUNK, **kw)


@pytest.mark.parametrize("kind", list(KINDS))
def test_resume_gives_what_a_whole_save_gives_after_the_ring_wrapped(tmp_path, kind):
    new, make = KINDS[kind]
    rng = np.random.default_rng(1)
    mem = new()
    fill(mem, make, range(12), rng)
    write(tmp_path / "ck", 1, mem)
    frames_before = mem.frames.written
    fill(mem, make, range(12, 30), rng)  # the frame ring wraps between the checkpoints
    assert mem.frames.written - frames_before > 0 and mem.frames.written > mem.frames.capacity
    write(tmp_path / "ck", 2, mem)
    mem.save(tmp_path / "whole")  # the whole layout (replay.npz), as checkpoints were written before

    resumed, whole = new(), new()
    folder, _, state = ckpt.load_latest(tmp_path / "ck", resumed)
    assert folder.name == "ckpt-000002" and state == {"n": 2}
    assert not (folder / "replay" / "replay.npz").exists()
    whole.load(tmp_path / "whole")
    assert_same(contents(resumed), contents(mem))
    assert_same(contents(resumed), contents(whole))
    sample_equal(resumed, mem)
    # and the resumed memory goes on checkpointing incrementally from what it loaded
    fill(resumed, make, range(30, 32), rng)
    write(tmp_path / "ck", 3, resumed)
    again = new()
    ckpt.load_latest(tmp_path / "ck", again)
    assert_same(contents(again), contents(resumed))


def chunk_files(root):
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size) for p in (root / "chunks").iterdir()}


def replay_entries(folder):
    return json.loads((folder / "replay" / "replay.json").read_text())["chunks"]["arrays"]


@pytest.mark.parametrize("kind", list(KINDS))
def test_second_checkpoint_writes_only_the_chunks_that_changed(tmp_path, kind):
    new, make = KINDS[kind]
    rng = np.random.default_rng(2)
    mem = new()
    fill(mem, make, range(16), rng)  # 336 frames in a ring of about 450 slots
    first = write(tmp_path, 1, mem)
    before = chunk_files(tmp_path)
    written_before = mem.frames.written
    fill(mem, make, range(16, 17), rng)  # 21 new frames, about 5% of the ring
    second = write(tmp_path, 2, mem)
    after = chunk_files(tmp_path)

    new_files = set(after) - set(before)
    manifest = json.loads((second / "manifest.json").read_text())
    assert manifest["replay_written"]["chunks_written"] == len(new_files)
    assert manifest["replay_written"]["bytes_written"] == sum(after[f][2] for f in new_files)
    assert all(after[f] == before[f] for f in before if f in after)  # nothing rewritten in place
    # the image ring: exactly the chunks the new frames landed in are new, the others are named again
    img = next(k for k in replay_entries(second) if k.endswith("img"))
    old, now = replay_entries(first)[img]["chunks"], replay_entries(second)[img]["chunks"]
    rows = replay_entries(second)[img]["rows_per_chunk"]
    slots = np.arange(written_before, mem.frames.written) % mem.frames.capacity
    touched = set((slots // rows).tolist())
    assert {i for i, (a, b) in enumerate(zip(old, now)) if a != b} == touched
    assert {f"{now[i]}.bin" for i in touched} <= new_files
    # what was written: the new frames' chunks plus the small per-transition arrays, not the ring
    ring_bytes = sum(v.nbytes for v in mem.frames.fields.values())
    first_bytes = json.loads((first / "manifest.json").read_text())["replay_written"]["bytes_written"]
    assert manifest["replay_written"]["bytes_written"] < 0.3 * ring_bytes < 0.5 * first_bytes


def test_a_damaged_chunk_of_the_newest_checkpoint_falls_back_to_the_previous(tmp_path, caplog):
    rng = np.random.default_rng(3)
    mem = new_iqn()
    fill(mem, iqn_segment, range(10), rng)
    first = write(tmp_path, 1, mem)
    at_first = contents(mem)
    fill(mem, iqn_segment, range(10, 12), rng)
    second = write(tmp_path, 2, mem)
    needed1 = json.loads((first / "manifest.json").read_text())["chunks"]
    needed2 = json.loads((second / "manifest.json").read_text())["chunks"]
    only_second = sorted(set(needed2) - set(needed1))
    path = tmp_path / "chunks" / f"{only_second[0]}.bin"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the checksum tells
    path.write_bytes(bytes(data))

    fresh = new_iqn()
    with caplog.at_level(logging.WARNING, logger="rulka.trainer"):
        folder, _, _ = ckpt.load_latest(tmp_path, fresh)
    assert folder == first
    assert_same(contents(fresh), at_first)
    assert any("damaged" in r.getMessage() and only_second[0] in r.getMessage() for r in caplog.records)
    assert any("previous checkpoint" in r.getMessage() for r in caplog.records)

    shared = sorted(set(needed1) & set(needed2))[0]  # one copy for both: neither loads, one clear line
    (tmp_path / "chunks" / f"{shared}.bin").write_bytes(b"")
    with pytest.raises(UserError, match="no intact checkpoint") as info:
        ckpt.load_latest(tmp_path, new_iqn())
    assert "\n" not in str(info.value) and shared in str(info.value)


def test_chunks_no_kept_checkpoint_needs_are_deleted(tmp_path):
    rng = np.random.default_rng(4)
    mem = new_uniform()
    for n in range(1, 5):
        fill(mem, uniform_segment, range(10 * n, 10 * n + 4), rng)
        write(tmp_path, n, mem)
        (tmp_path / "chunks" / ".leftover.tmp").write_bytes(b"x")  # a crash while writing a chunk
    (tmp_path / ".ckpt-000009.tmp").mkdir()  # a crash while writing a checkpoint
    write(tmp_path, 5, mem)
    kept = ckpt.checkpoint_folders(tmp_path)
    assert [f.name for f in kept] == ["ckpt-000005", "ckpt-000004"]
    needed = set()
    for folder in kept:
        needed |= set(json.loads((folder / "manifest.json").read_text())["chunks"])
    assert {p.name for p in (tmp_path / "chunks").iterdir()} == {f"{d}.bin" for d in needed}
    assert not (tmp_path / ".ckpt-000009.tmp").exists()


def test_checkpoints_with_a_whole_replay_npz_still_load(tmp_path):
    """Runs resume across the upgrade: a checkpoint in the layout before chunks (replay.npz, a
    manifest without "chunks") loads, and the chunked checkpoint after it keeps it as fallback."""
    rng = np.random.default_rng(5)
    mem = new_iqn()
    fill(mem, iqn_segment, range(8), rng)
    old = ckpt.write_checkpoint(tmp_path, 1, {"w": np.zeros(2)}, {"n": 1}, mem, chunk_bytes=None)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["chunks"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert (old / "replay" / "replay.npz").exists() and not (tmp_path / "chunks").exists()
    resumed = new_iqn()
    assert ckpt.load_latest(tmp_path, resumed)[0] == old
    assert_same(contents(resumed), contents(mem))

    fill(resumed, iqn_segment, range(8, 10), rng)
    new = write(tmp_path, 2, resumed)
    assert ckpt.load_latest(tmp_path, new_iqn())[0] == new
    (tmp_path / "chunks" / f"{sorted(json.loads((new / 'manifest.json').read_text())['chunks'])[0]}.bin").unlink()
    fallback = new_iqn()
    assert ckpt.load_latest(tmp_path, fallback)[0] == old
    assert_same(contents(fallback), contents(mem))


def test_a_replay_json_from_someone_else_cannot_reach_outside_or_unpickle(tmp_path):
    mem = new_uniform()
    fill(mem, uniform_segment, range(3), np.random.default_rng(6))
    store = ChunkStore(tmp_path / "chunks", CHUNK)
    mem.save(tmp_path / "replay", chunks=store)
    meta = json.loads((tmp_path / "replay" / "replay.json").read_text())
    name = next(iter(meta["chunks"]["arrays"]))
    for bad in ({"chunks": ["../../etc/passwd"]}, {"dtype": "|O"}, {"shape": [10**12, 10**6]}, {"rows_per_chunk": 0}):
        broken = json.loads(json.dumps(meta))
        broken["chunks"]["arrays"][name].update(bad)
        (tmp_path / "replay" / "replay.json").write_text(json.dumps(broken))
        with pytest.raises(BadInput, match="replay"):
            read_replay(tmp_path / "replay")


def test_trainer_checkpoints_and_resumes_through_the_chunks(tmp_path, caplog):
    """The real Trainer path: its checkpoints share checkpoints/chunks/, a resume loads the memory
    it saved, and a damaged chunk of the newest checkpoint makes it resume from the one before."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from roles_helpers import CountingAgent
    from test_trainer_checkpoint import seg_msg

    from rulka.net.local import LocalHub
    from rulka.trainer.trainer import Trainer

    key = Ed25519PrivateKey.generate()

    def trainer(resume=False):
        return Trainer(None, LocalHub().trainer_link(), agent=CountingAgent(), memory=new_uniform(), run_dir=tmp_path,
                       signing_key=key, resume=resume)

    t1 = trainer()
    t1.ingest([seg_msg("a", seq) for seq in range(3)])
    first = t1.checkpoint()
    at_first = contents(t1.memory)
    t1.ingest([seg_msg("a", seq) for seq in range(3, 6)])
    second = t1.checkpoint()
    at_second = contents(t1.memory)
    t1.close()
    assert not (second / "replay" / "replay.npz").exists() and (tmp_path / "checkpoints" / "chunks").is_dir()

    t2 = trainer(resume=True)
    assert_same(contents(t2.memory), at_second)
    t2.close()
    needed = [json.loads((f / "manifest.json").read_text())["chunks"] for f in (first, second)]
    damaged = sorted(set(needed[1]) - set(needed[0]))[0]
    (tmp_path / "checkpoints" / "chunks" / f"{damaged}.bin").write_bytes(b"\0" * needed[1][damaged])
    with caplog.at_level(logging.WARNING, logger="rulka.trainer"):
        t3 = trainer(resume=True)
    assert any("previous checkpoint ckpt-000001" in r.getMessage() for r in caplog.records)
    assert t3.state.segments == 6  # the first checkpoint's 3, the journal since it replays the other 3
    # the journal's segments are stored again (less the steps held back at the checkpoint, which
    # no checkpoint saves)
    assert at_first["counts"][0] < t3.memory.count <= at_second["counts"][0]
    t3.close()


def test_trajectory_memory_checkpoints_write_only_new_rollouts(tmp_path):
    """The DPO pair buffer (a FIFO of whole episodes that outlive checkpoints): each rollout is
    a chunk, so the next checkpoint writes the new episode only; a resume gives the same buffer."""
    from test_policy_learners import seg

    from rulka.agents.policy.memory import PairMemory

    def rollouts(mem):
        return [(meta, {k: v.tolist() for k, v in arrays.items()}) for meta, arrays in
                (r.to_arrays() for r in mem.buffer)]

    mem = PairMemory(pair_buffer_max=8)
    for ep in range(5):
        mem.append(seg(episode=ep, reward=float(ep), t=6))
    write(tmp_path, 1, mem)
    mem.append(seg(episode=5, reward=9.0, t=6))
    second = write(tmp_path, 2, mem)
    assert json.loads((second / "manifest.json").read_text())["replay_written"]["chunks_written"] == 1
    assert len(list((tmp_path / "chunks").iterdir())) == 6

    again = PairMemory(pair_buffer_max=8)
    assert ckpt.load_latest(tmp_path, again)[0] == second
    assert rollouts(again) == rollouts(mem) and again.frames_played == mem.frames_played
    newest = json.loads((second / "manifest.json").read_text())["chunks"]
    only_second = set(newest) - set(json.loads((tmp_path / "ckpt-000001" / "manifest.json").read_text())["chunks"])
    (tmp_path / "chunks" / f"{only_second.pop()}.bin").write_bytes(b"\1" * max(newest.values()))
    fallback = PairMemory(pair_buffer_max=8)
    assert ckpt.load_latest(tmp_path, fallback)[0].name == "ckpt-000001" and len(fallback.buffer) == 5
