"""One worker process driving several game instances (``rulka-worker --instances N``): one link,
one weights inbox (a version decoded once, loaded by every instance), one outbox and numbering;
an env thread per instance. In process, through the hub; tests/test_worker_instances_e2e.py runs
the real processes over TLS."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import ConstActor, CountingEnv

from rulka.compress import SegmentDecoder, ZstdCompressor
from rulka.errors import UserError
from rulka.net.local import LocalHub
from rulka.net.weights import WeightsBlob, decode_weights, encode_weights
from rulka.worker.counters import WorkerCounters
from rulka.worker.instances import InstanceFailed
from rulka.worker.worker import Worker

SPEC = {"actor": "roles_helpers:ConstActor", "kwargs": {}}


def wait_until(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def outbox_segments(worker: Worker) -> list:
    """The segments the worker produced, in the outbox's (sequence) order: nothing acknowledges
    them here."""
    decoder = SegmentDecoder(ZstdCompressor())
    with worker.outbox._cond:
        payloads = [e.payload for e in worker.outbox._entries.values()]
    return [decoder.decompress(p) for p in payloads]


def test_instances_share_numbers_and_weights_and_keep_each_episode_in_order(tmp_path):
    key = Ed25519PrivateKey.generate()
    hub = LocalHub()
    decodes: list[int] = []

    def decoder(data: bytes):
        blob = decode_weights(data, key.public_key())
        decodes.append(blob.version)
        return blob

    envs, actors = [CountingEnv(7) for _ in range(3)], [ConstActor() for _ in range(3)]
    worker = Worker({"worker": {"segment_max_steps": 3}}, hub.worker_link("w0"), env=envs, actor=actors,
                    weights_decoder=decoder, state_dir=tmp_path / "w0", wait_for_welcome=False,
                    max_steps_per_s=400, instances=3)
    trainer = hub.trainer_link()
    # a budget of episodes (not a stop) ends the run: every instance finishes the episode it plays
    runner = threading.Thread(target=worker.run, kwargs={"max_episodes": 150, "drain_timeout_s": 0})
    runner.start()
    try:
        for version, w in ((3, 3.0), (5, 5.0)):
            wait_until(lambda v=version: all(e.step_calls >= 10 * v for e in envs), 30, "the instances to play")
            trainer.broadcast("weights", encode_weights(WeightsBlob("run1", version, {"w": torch.tensor([w])}, SPEC),
                                                        key))
            wait_until(lambda w=w: all(a.loads and a.loads[-1] == w for a in actors), 30, f"every instance on v{version}")
    finally:
        runner.join(60)
    assert not runner.is_alive()
    worker.packer.flush(10)
    assert worker.stats.episodes == 150

    # each version crossed the link and was verified once; every instance loaded it
    assert decodes == [3, 5] and worker.stats.weights_received == 2
    assert [a.loads for a in actors] == [[3.0, 5.0]] * 3
    assert worker.stats.weights_loaded == 6 and worker.stats.weights_version == 5

    segs = outbox_segments(worker)
    assert [s.seq for s in segs] == list(range(len(segs)))  # one numbering, in order, no gap
    by_episode: dict[int, list] = {}
    for s in segs:
        by_episode.setdefault(s.episode_id, []).append(s)
    # episode ids never repeat across instances: each episode comes from one instance, its
    # segments in order, the last observation of one the first of the next
    for eid, parts in by_episode.items():
        assert len({s.info["instance"] for s in parts}) == 1, eid
        assert [s.index_in_episode for s in parts] == list(range(len(parts)))
        for a, b in zip(parts, parts[1:]):
            assert a.arrays["obs/x"][-1].tolist() == b.arrays["obs/x"][0].tolist()
    finished = [eid for eid, parts in by_episode.items() if parts[-1].episode_done]
    assert len(finished) == worker.stats.episodes  # counted once each, over all instances
    assert worker.stats.steps == sum(e.step_calls for e in envs)
    assert {s.info["instance"] for s in segs} == {0, 1, 2}
    # every instance acted with the newest version at the end
    for i in range(3):
        assert max(s.policy_version for s in segs if s.info["instance"] == i) == 5
    # the numbers persisted are past everything handed out
    counters = WorkerCounters(tmp_path / "w0")
    assert counters.next_seq == len(segs) and counters.next_episode > max(by_episode)
    worker.close()


class _BrokenEnv(CountingEnv):
    def step(self, action):
        if self.step_calls >= 20:
            raise OSError("the game closed")
        return super().step(action)


def test_a_failing_instance_stops_them_all_and_keeps_what_was_finished(tmp_path):
    envs = [CountingEnv(7), _BrokenEnv(7)]
    hub = LocalHub()
    worker = Worker({"worker": {"segment_max_steps": 3}}, hub.worker_link("w0"), env=envs,
                    actor=[ConstActor(), ConstActor()], state_dir=tmp_path / "w0", wait_for_welcome=False,
                    max_steps_per_s=400, instances=2)
    t0 = time.monotonic()
    with pytest.raises(InstanceFailed, match=r"game instance 1 of 2 failed.*OSError: the game closed"):
        worker.run(drain_timeout_s=0)
    assert time.monotonic() - t0 < 20
    worker.close()  # packs what was submitted
    kept = sorted(p.name for p in (tmp_path / "w0" / "unacked").iterdir())
    assert len(kept) == worker.stats.segments > 0  # every finished segment is on disk, to be resent
    assert worker.stats.episodes >= 2


def test_tm2020_takes_one_instance_per_worker():
    hub = LocalHub()
    with pytest.raises(UserError, match="tm2020.*one game window"):
        Worker({"environment": {"backend": "tm2020"}}, hub.worker_link("w0"), instances=2)
    with pytest.raises(ValueError, match="list of 2 envs"):
        Worker(None, hub.worker_link("w1"), env=CountingEnv(), instances=2)


def test_worker_cli_refuses_tm2020_with_instances_in_one_line(tmp_path, capsys):
    from rulka.worker.cli import main

    code = main(["--server", "127.0.0.1:9", "--keys", str(tmp_path / "none"), "--instances", "2",
                 "--set", "environment.backend=tm2020", "--log-file", "none"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--instances 2" in err[0] and "tm2020" in err[0], err


def test_rulka_run_refuses_tm2020_with_instances_per_worker_before_starting(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-m", "rulka.cli", "run", str(repo / "configs" / "tm2020_fake.yaml"), "--workers", "1",
         "--instances-per-worker", "2", "--minutes", "0.1", "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(repo)})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "tm2020" in lines[0], proc.stderr
    assert not (tmp_path / "run").exists()  # nothing started
