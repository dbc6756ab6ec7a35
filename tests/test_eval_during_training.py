"""Evaluation during training: every ``trainer.eval_every_versions`` weights versions the trainer
asks one worker (in turn) for greedy test episodes; the worker runs them with ``test=True`` and
marks their segments ``evaluation``; the trainer logs them under ``eval/...`` and never trains on
them."""

from __future__ import annotations

import time

import numpy as np
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import CountingAgent, ListMemory

from rulka.agents.simple import SimpleDQNActor
from rulka.compress import SegmentDecoder, ZstdCompressor
from rulka.config import config_from_dict
from rulka.net.link import Message
from rulka.net.local import LocalHub
from rulka.net.messages import Stats
from rulka.net.weights import WeightsBlob, decode_weights, encode_weights
from rulka.segment import Segment
from rulka.telemetry import MetricsLogger
from rulka.telemetry.logger import read_metrics
from rulka.trainer.trainer import Trainer
from rulka.worker.worker import Worker


def _trainer(tmp_path, every: int, episodes: int = 2) -> tuple[Trainer, list[WeightsBlob], MetricsLogger]:
    cfg = config_from_dict({"trainer": {"eval_every_versions": every, "eval_episodes": episodes}})
    published: list[WeightsBlob] = []

    def keep(blob: WeightsBlob) -> bytes:
        published.append(blob)
        return b"weights"

    logger = MetricsLogger(tmp_path, run_name="t", tensorboard=False)
    trainer = Trainer(cfg, LocalHub().trainer_link(), agent=CountingAgent(), memory=ListMemory(),
                      weights_encoder=keep, metrics=logger)
    return trainer, published, logger


def test_every_kth_version_asks_one_worker_in_turn(tmp_path):
    trainer, published, logger = _trainer(tmp_path, every=2, episodes=3)
    trainer.publisher.publish()  # v1: no worker known yet
    trainer.publisher.publish()  # v2: asks any worker
    trainer.ingest([Message("stats", name, Stats({"episodes": 0}).encode()) for name in ("pc2", "pc1")])
    for _ in range(4):
        trainer.publisher.publish()  # v3..v6
    asks = {b.version: (b.header.get("eval_episodes"), b.header.get("eval_worker")) for b in published}
    assert asks == {1: (None, None), 2: (3, ""), 3: (None, None), 4: (3, "pc2"), 5: (None, None), 6: (3, "pc1")}
    assert trainer.state.counters["eval_requests"] == 3
    trainer.close()
    logger.close()


def test_no_eval_requests_by_default(tmp_path):
    trainer, published, logger = _trainer(tmp_path, every=0)
    for _ in range(5):
        trainer.publisher.publish()
    assert not any("eval_episodes" in b.header for b in published)
    trainer.close()
    logger.close()


def _episode(seq: int, ret: float, race_ms: int, finished: bool, evaluation: bool, fill_buffer: bool = True) -> Message:
    t = 3
    info = {"episode_return": ret, "race_time_ms": race_ms, "finished": finished}
    if not fill_buffer:
        info["fill_buffer"] = False
    seg = Segment(run_id="", worker_id="w1", episode_id=seq, seq=seq, index_in_episode=0, first_step=0,
                  policy_version=0, episode_done=True, map_name="default", evaluation=evaluation, info=info,
                  arrays={"obs/x": np.zeros((t + 1, 2), np.float32), "action": np.zeros(t, np.int64),
                          "reward": np.ones(t, np.float32), "terminated": np.zeros(t, bool)})
    return Message("segment", "w1", ZstdCompressor().compress(seg))


def test_test_episodes_are_logged_under_eval_apart_from_exploring_ones(tmp_path):
    trainer, _, logger = _trainer(tmp_path, every=1)
    trainer.ingest([_episode(0, 5.0, 30000, True, False), _episode(1, 1.0, 9000, False, False),
                    # requested test episodes (the worker marks them fill_buffer false)
                    _episode(2, 40.0, 24000, True, True, fill_buffer=False),
                    _episode(3, 30.0, 26000, True, True, fill_buffer=False),
                    # a map-cycle evaluation entry with fill_buffer true: trained on, logged as eval
                    _episode(4, 30.0, 26000, True, True)])
    trainer.ingest([_episode(3, 30.0, 26000, True, True, fill_buffer=False)])  # a duplicate
    trainer.reporter.report(force=True)
    trainer.close()
    logger.close()
    assert [s.seq for s in trainer.memory.segments] == [0, 1, 4] and trainer.state.samples == 9
    assert trainer.state.episodes == 2 and trainer.state.counters["eval_episodes"] == 3
    m = list(read_metrics(tmp_path))[-1]["metrics"]
    assert m["charts/episodic_return"] == 3.0 and m["charts/default/finish_rate"] == 0.5
    assert m["eval/episodic_return"] == (40 + 30 + 30) / 3
    assert m["eval/default/race_time_ms"] == (24000 + 26000 + 26000) / 3
    assert m["eval/default/finish_rate"] == 1.0 and m["eval/episodes"] == 3


def _segments(worker: Worker) -> list[Segment]:
    payloads = worker.outbox.due(time.monotonic(), 0.0, 10**6, limit=10**6)
    return [SegmentDecoder(ZstdCompressor()).decompress(p) for _, p in payloads]


def _worker_after_weights(name: str, spec_extra: dict) -> Worker:
    key = Ed25519PrivateKey.generate()
    hub = LocalHub()
    spec = {"actor": "simple_dqn", "kwargs": {"obs_dim": 4, "n_actions": 2, "hidden": 8,
                                              "epsilon_start": 1.0, "epsilon_end": 1.0},
            "run_config_json": '{"environment": {"backend": "gym", "gym_id": "CartPole-v1"}}', **spec_extra}
    torch.manual_seed(0)
    weights = SimpleDQNActor(4, 2, 8).get_weights()
    hub.trainer_link().broadcast("weights", encode_weights(WeightsBlob("run", 1, weights, spec), key))
    return Worker(None, hub.worker_link(name), weights_decoder=lambda d: decode_weights(d, key.public_key()))


def test_worker_runs_the_requested_greedy_episodes_first():
    worker = _worker_after_weights("pc1", {"eval_episodes": 2, "eval_worker": "pc1"})
    stats = worker.run(max_episodes=4, drain_timeout_s=0)
    segments = _segments(worker)
    by_episode: dict[int, list[Segment]] = {}
    for seg in segments:
        by_episode.setdefault(seg.episode_id, []).append(seg)
    episodes = [by_episode[k] for k in sorted(by_episode)]
    assert len(episodes) == 4 and stats.eval_episodes == 2 and worker.eval_pending == 0
    for i, segs in enumerate(episodes):
        greedy = np.concatenate([s.arrays["extra/greedy"] for s in segs])
        assert all(s.evaluation == (i < 2) for s in segs)
        assert all((s.info.get("fill_buffer") is False) == (i < 2) for s in segs)  # never trained on
        if i < 2:
            assert greedy.all()  # test=True: never the random action
        else:
            assert not greedy.all() or len(greedy) < 8  # epsilon 1: exploring, random actions
    worker.close()


def test_a_request_for_another_worker_is_not_run_here():
    worker = _worker_after_weights("pc1", {"eval_episodes": 2, "eval_worker": "pc2"})
    stats = worker.run(max_episodes=2, drain_timeout_s=0)
    assert stats.eval_episodes == 0 and not any(s.evaluation for s in _segments(worker))
    worker.close()


def _orange_pixels(path) -> int:
    from PIL import Image

    with Image.open(path) as image:
        rgb = np.asarray(image.convert("RGB")).astype(int)
    return int((np.abs(rgb - np.array([0xFF, 0x7F, 0x0E])).sum(axis=2) < 30).sum())


def test_plot_draws_greedy_test_episodes_beside_exploring_ones(tmp_path):
    from rulka.telemetry import metrics as m
    from rulka.telemetry.plot import plot_run

    for name, with_eval in (("with", True), ("without", False)):
        run = tmp_path / name
        with MetricsLogger(run, run_name=name, tensorboard=False) as logger:
            for i in range(1, 40):
                values = {m.per_map(m.EPISODIC_RETURN, "A01"): float(i), m.per_map(m.RACE_TIME_MS, "A01"): 60_000 - 100 * i}
                if with_eval and i % 5 == 0:
                    values.update({m.per_map(m.EVAL_RETURN, "A01"): 2.0 * i,
                                   m.per_map(m.EVAL_RACE_TIME_MS, "A01"): 50_000 - 200 * i})
                logger.log(values, step=i * 1000)
        paths = {p.name: p for p in plot_run(run)}
        assert (_orange_pixels(paths["A01.png"]) > 50) == with_eval
