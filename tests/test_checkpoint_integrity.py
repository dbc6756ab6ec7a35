"""Checkpoint integrity (issue 10): checksums, the previous checkpoint as fallback with nothing
lost, a clear one-line error when no checkpoint is intact, and version numbers never reused."""

from __future__ import annotations

import json

import pytest
from test_trainer_checkpoint import accepted_lines, new_trainer, seg_msg

from rulka.errors import UserError
from rulka.trainer import checkpoint_store as ckpt


def zero_tail(path, n=4096):
    data = path.read_bytes()
    n = min(n, len(data) // 2)
    path.write_bytes(data[:-n] + b"\0" * n)
    assert path.read_bytes() != data or not data


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGES = {
    "agent.safetensors zero-filled tail": lambda f: zero_tail(f / "agent.safetensors"),
    "agent.safetensors truncated": lambda f: truncate(f / "agent.safetensors"),
    "agent.json garbage": lambda f: (f / "agent.json").write_text("{"),
    "trainer.json garbage": lambda f: (f / "trainer.json").write_text("[1, 2"),
    "replay file damaged": lambda f: (f / "replay" / "keys.txt").write_text("a 99"),
    "replay file missing": lambda f: (f / "replay" / "keys.txt").unlink(),
}


def two_checkpoints_and_a_crash(tmp_path):
    t1 = new_trainer(tmp_path)
    folders = []
    for seq in (0, 1):  # one segment and one update before each checkpoint
        t1.ingest([seg_msg("a", seq)])
        t1.learner.train_once()
        folders.append(t1.checkpoint())
    t1.ingest([seg_msg("a", 2)])  # acknowledged (so journaled and flushed), then kill -9
    return folders[0], folders[1]


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_newest_checkpoint_falls_back_to_the_previous_one_losing_nothing(tmp_path, damage, caplog):
    first, second = two_checkpoints_and_a_crash(tmp_path)
    DAMAGES[damage](second)
    t2 = new_trainer(tmp_path, resume=True)
    assert t2.state.updates == 1 and float(t2.agent.w.detach()[0]) == 1.0  # the state of the first checkpoint
    assert t2.memory.loaded_keys == ["a 0"]
    assert [s.seq for s in t2.memory.segments] == [1, 2]  # the journals since it were kept and replayed
    assert accepted_lines(tmp_path) == ["a", "0", "a", "1", "a", "2"]  # each exactly once
    assert any("damaged" in r.getMessage() or "does not load" in r.getMessage() for r in caplog.records)
    t2.ingest([seg_msg("a", 1)])
    assert t2.state.counters["duplicates"] == 1
    t2.close()


def test_garbage_latest_json_uses_the_newest_intact_folder(tmp_path):
    _, second = two_checkpoints_and_a_crash(tmp_path)
    (tmp_path / "checkpoints" / "latest.json").write_bytes(b"\x00garbage")
    t2 = new_trainer(tmp_path, resume=True)
    assert t2.state.updates == 2 and t2.memory.loaded_keys == ["a 0", "a 1"]
    assert [s.seq for s in t2.memory.segments] == [2]
    t2.close()


@pytest.mark.parametrize("damage", ["agent.safetensors zero-filled tail", "replay file damaged"])
def test_no_intact_checkpoint_is_one_clear_error(tmp_path, damage):
    first, second = two_checkpoints_and_a_crash(tmp_path)
    DAMAGES[damage](first)
    DAMAGES[damage](second)
    with pytest.raises(UserError, match="no intact checkpoint") as info:
        new_trainer(tmp_path, resume=True)
    assert "\n" not in str(info.value) and "checksum" in str(info.value)


def test_checkpoint_keeps_exactly_the_newest_two(tmp_path):
    t = new_trainer(tmp_path)
    for _ in range(4):
        t.checkpoint()
    names = [p.name for p in ckpt.checkpoint_folders(tmp_path / "checkpoints")]
    assert names == ["ckpt-000004", "ckpt-000003"]
    manifest = json.loads((tmp_path / "checkpoints" / "ckpt-000004" / "manifest.json").read_text())
    assert {"agent.safetensors", "agent.json", "trainer.json"} <= set(manifest["sha256"])
    t.close()


def test_resumed_trainer_never_reuses_a_published_version(tmp_path):
    t1 = new_trainer(tmp_path)
    t1.publisher.publish()
    t1.checkpoint()  # holds v1
    t1.learner.train_once()
    t1.publisher.publish()
    t1.publisher.publish()  # v2 and v3 reached the workers with other weights, then kill -9
    assert t1.state.version == 3
    t2 = new_trainer(tmp_path, resume=True)
    assert t2.state.version == 3
    assert t2.publisher.publish() == 4
    t2.close()
