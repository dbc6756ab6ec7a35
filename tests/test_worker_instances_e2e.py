"""`rulka-worker --instances 2` end to end: real rulka-server (TLS), a real rulka-trainer process on
the simulator's small network, and one worker process driving two simulator instances over one
connection. Both instances' episodes reach the trainer intact, each weights version is received
once by the worker (not once per instance), and both instances end on the newest version."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rulka.compress import SegmentDecoder, ZstdCompressor
from rulka.net.keys import add_worker, generate_keys
from rulka.server.server import Server
from rulka.trainer.journal import read_journal

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
SETS = ["trainer.publish_every_updates=40", "memory.memory_size_schedule=[[0, [20000, 300]]]",
        "trainer.checkpoint_every_s=100000", "worker.segment_max_steps=20", "training.batch_size=32",
        "logging.wandb.enabled=false", "logging.tensorboard.enabled=false", "logging.progress=never"]


def journal_segments(run_dir: Path) -> list:
    decoder = SegmentDecoder(ZstdCompressor())
    out = []
    for path in sorted((run_dir / "journal").glob("journal-*.bin")):
        out += [decoder.decompress(payload) for _, _, payload in read_journal(path, repair=False)]
    return out


def published(run_dir: Path) -> int:
    """The newest weights version the trainer published (its run folder's record)."""
    path = run_dir / "published.json"
    return int(json.loads(path.read_text())["version"]) if path.exists() else 0


def test_two_instances_share_one_connection_and_one_download_per_version(tmp_path):
    keys = tmp_path / "keys"
    generate_keys(keys, [])
    add_worker(keys, "w0")
    run_dir = tmp_path / "run"
    server = Server({}, keys, bind_host="127.0.0.1", port=0).start()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    logs = {name: open(tmp_path / f"{name}.log", "wb") for name in ("trainer", "worker")}  # noqa: SIM115
    trainer = subprocess.Popen(
        [sys.executable, "-m", "rulka.trainer.cli", "--config", str(REPO / "configs" / "sim_iqn.yaml"),
         *[a for s in SETS for a in ("--set", s)], "--keys", str(keys), "--server", f"127.0.0.1:{server.port}",
         "--run-dir", str(run_dir)], stdout=logs["trainer"], stderr=subprocess.STDOUT, env=env)
    worker = subprocess.Popen(
        [sys.executable, "-m", "rulka.worker.cli", "--server", f"127.0.0.1:{server.port}",
         "--keys", str(keys / "bundles" / "w0"), "--state-dir", str(tmp_path / "state"), "--instances", "2",
         "--max-steps-per-s", "150", "--log-file", "none"], stdout=logs["worker"], stderr=subprocess.STDOUT, env=env)
    try:
        # run until both instances have sent segments played with the newest version any segment
        # carries (version 3 or later)
        deadline, newest_by_both, newest = time.monotonic() + 120, False, 0
        while time.monotonic() < deadline and not newest_by_both:
            time.sleep(1.0)
            assert trainer.poll() is None and worker.poll() is None, (tmp_path / "worker.log").read_text()[-2000:]
            segs = journal_segments(run_dir) if (run_dir / "journal").is_dir() else []
            newest = max((s.policy_version for s in segs), default=0)
            newest_by_both = newest >= 3 and all(
                any(s.policy_version == newest and s.info.get("instance") == i for s in segs) for i in (0, 1))
        assert newest_by_both, "the two instances did not both reach the newest version in time"
        worker.send_signal(signal.SIGINT)
        assert worker.wait(60) == 0, (tmp_path / "worker.log").read_text()[-2000:]
        segs = journal_segments(run_dir)  # everything the worker drained (a stopped trainer checkpoints them away)
        trainer.send_signal(signal.SIGINT)
        assert trainer.wait(60) == 0
    finally:
        for p in (worker, trainer):
            if p.poll() is None:
                p.kill()
                p.wait(10)
        server.stop()
        for f in logs.values():
            f.close()

    assert {s.worker_id for s in segs} == {"w0"}  # one worker, one connection
    assert [c for c in Counter(s.seq for s in segs).values() if c > 1] == []
    assert {s.info.get("instance") for s in segs} == {0, 1}
    by_episode: dict[int, list] = {}
    for s in sorted(segs, key=lambda s: s.seq):
        by_episode.setdefault(s.episode_id, []).append(s)
    for eid, parts in by_episode.items():  # an id is one instance's episode, its segments contiguous
        assert len({s.info["instance"] for s in parts}) == 1, eid
        assert [s.index_in_episode for s in parts] == list(range(len(parts))), eid
    assert sum(1 for parts in by_episode.values() if parts[-1].episode_done) >= 2
    # the worker received each version once over its one connection, and both instances loaded it
    text = (tmp_path / "worker.log").read_text()
    m = re.search(r"worker w0: \d+ episodes, \d+ steps, weights v(\d+) \(2 instances; (\d+) weights messages "
                  r"received, (\d+) of them stale, (\d+) loads\)", text)
    assert m, text[-2000:]
    version, received, stale, loads = (int(g) for g in m.groups())
    fresh = received - stale  # versions newer than the worker had (a stale one: the trainer's re-send after connecting)
    assert 2 <= fresh <= published(run_dir)  # one download per version, never one per instance
    assert fresh + 1 <= loads <= 2 * fresh  # each instance loads what it takes (a newer one may pass an older by)
    assert version >= newest  # both instances run the newest version they played with (or newer)
