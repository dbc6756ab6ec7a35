"""The map cycle's best policy (rulka.trainer.best): the trainer marks evaluation versions, the
workers drive the cycle's greedy entries with the newest one, and the version that drove every
greedy map best (most finished, then the lowest total race time) is written to <run>/best."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import CountingAgent, ListMemory

from rulka.agents.simple import SimpleDQNActor
from rulka.compress import SegmentDecoder, ZstdCompressor
from rulka.config import config_from_dict
from rulka.config.sections import MapCycleEntry
from rulka.envs.map_cycle import MapCycle
from rulka.envs.sim.policy import read_policy_file
from rulka.net.link import Message
from rulka.net.local import LocalHub
from rulka.net.weights import WeightsBlob, decode_weights, encode_weights
from rulka.segment import Segment
from rulka.trainer import best as best_mod
from rulka.trainer.best import BestPolicy, MapResult, score
from rulka.trainer.trainer import Trainer
from rulka.worker.worker import Worker

W = {"w": torch.zeros(2)}


def test_score_ranks_finishes_then_references_beaten_then_total_time_then_metres():
    done = lambda t, ref=None: MapResult(True, t, 500.0, ref)  # noqa: E731
    cut = lambda m: MapResult(False, None, m, 30_000)  # noqa: E731
    assert score({"a": done(20_000), "b": done(15_500)}) == (-2, 0, 35_500.0, -0.0)
    assert score({"a": done(20_000, 21_000), "b": cut(310.0)}) == (-1, -1, 20_000.0, -310.0)
    assert score({"a": done(20_000, 20_000), "b": done(15_000, 16_000)}) == (-2, -1, 35_000.0, -0.0)  # a tie is not faster
    # two finishes beat one, however slow; then more references beaten, whatever the total; then
    # the lower total; then more metres
    assert score({"a": done(90_000), "b": done(90_000)}) < score({"a": done(10_000, 11_000), "b": cut(499.0)})
    assert (score({"a": done(20_000, 21_000), "b": done(17_900, 18_000)})  # 2 beaten, 37.9 s
            < score({"a": done(21_500, 21_000), "b": done(16_000, 18_000)}))  # 1 beaten, 37.5 s
    assert score({"a": done(20_000), "b": done(15_000)}) < score({"a": done(20_000), "b": done(15_001)})
    assert score({"a": done(20_000), "b": cut(300.0)}) < score({"a": done(20_000), "b": cut(200.0)})


def _complete(bp: BestPolicy, version: int, times: dict[str, float | None]) -> bool:
    out = False
    for name, t in times.items():
        out = bp.add_result(version, name, t is not None, t, 400.0 if t is None else 617.0)
    return out


def test_the_fastest_complete_candidate_is_written_and_a_slower_one_is_not(tmp_path):
    bp = BestPolicy(["hairpins", "default"], tmp_path / "best")
    bp.mark(5, {"w": torch.tensor([5.0, 5.0])}, {"actor": "x", "kwargs": {}}, frames=1000, updates=10)
    assert not bp.add_result(5, "default", True, 24_000, 617)
    assert not bp.add_result(5, "slalom", True, 1.0, 500)  # not a greedy map of this cycle
    assert not bp.add_result(7, "hairpins", True, 1.0, 500)  # not a candidate
    assert bp.add_result(5, "hairpins", True, 26_500, 700)
    best = json.loads((tmp_path / "best" / "best.json").read_text())
    assert (best["version"], best["frames"], best["updates"], best["maps_finished"]) == (5, 1000, 10, 2)
    assert best["maps_beating_reference"] == 0  # no reference times given
    assert best["race_time_total_ms"] == 50_500
    _, tensors, spec = read_policy_file(tmp_path / "best")
    assert tensors["w"].tolist() == [5.0, 5.0] and spec["actor"] == "x"

    bp.mark(9, {"w": torch.tensor([9.0, 9.0])}, {"actor": "x"}, frames=2000, updates=20)
    assert not _complete(bp, 9, {"default": 23_000, "hairpins": 28_000})  # 51.0 s: slower
    bp.mark(12, {"w": torch.tensor([12.0, 12.0])}, {"actor": "x"}, frames=3000, updates=30)
    assert _complete(bp, 12, {"default": 23_000, "hairpins": 27_000})  # 50.0 s
    _, tensors, _ = read_policy_file(tmp_path / "best")
    assert tensors["w"].tolist() == [12.0, 12.0]
    m = bp.metrics()
    assert m["eval/best_policy/version"] == 12 and m["eval/best_policy/race_time_total_ms"] == 50_000
    assert m["eval/best_policy/candidates_completed"] == 3 and bp.improved == 2
    log = [json.loads(line) for line in (tmp_path / "best" / "candidates.jsonl").read_text().splitlines()]
    assert [(c["version"], c["race_time_total_ms"]) for c in log] == [(5, 50_500), (9, 51_000), (12, 50_000)]


def test_the_weights_are_copied_when_marked():
    bp = BestPolicy(["a"], None)
    live = torch.tensor([1.0])
    bp.mark(1, {"w": live}, {"actor": "x"}, 0, 0)
    live += 41.0  # the agent trains on after publishing
    assert bp.add_result(1, "a", True, 1000, 10)
    assert bp._candidates[1].weights["w"].tolist() == [1.0]


def test_a_new_candidate_is_marked_once_the_last_is_complete_or_timed_out(monkeypatch):
    now = [0.0]
    bp = BestPolicy(["a", "b"], None, clock=lambda: now[0])
    assert bp.wants_candidate()
    bp.mark(1, W, {}, 0, 0)
    bp.add_result(1, "a", True, 1000, 10)
    assert not bp.wants_candidate()  # still waiting for b
    bp.add_result(1, "b", True, 1000, 10)
    assert bp.wants_candidate()
    bp.mark(2, W, {}, 0, 0)
    now[0] = best_mod.TIMEOUT_S + 1  # a worker stopped mid-pass
    assert bp.wants_candidate()
    for v in range(3, 3 + best_mod.KEEP_CANDIDATES):
        bp.mark(v, W, {}, 0, 0)
    assert bp.dropped >= 1 and 2 not in bp._candidates and len(bp._candidates) == best_mod.KEEP_CANDIDATES


def test_a_resumed_run_keeps_its_best_and_another_cycle_does_not_compare(tmp_path):
    folder = tmp_path / "best"
    bp = BestPolicy(["a", "b"], folder)
    bp.mark(3, W, {"actor": "x"}, 0, 0)
    _complete(bp, 3, {"a": 10_000, "b": 12_000})
    again = BestPolicy(["b", "a"], folder)  # the trainer restarted
    assert again.best_key == (-2, 0, 22_000.0, -0.0)
    again.mark(8, W, {"actor": "x"}, 0, 0)
    assert not _complete(again, 8, {"a": 11_000, "b": 12_000})
    assert json.loads((folder / "best.json").read_text())["version"] == 3
    other = BestPolicy(["a", "b", "c"], folder)  # a different cycle: the old score is not kept
    assert other.best_key is None
    # a best.json without the summary fields (an older rulka) still loads and reports
    old = json.loads((folder / "best.json").read_text())
    del old["maps_beating_reference"], old["race_time_total_ms"]
    (folder / "best.json").write_text(json.dumps(old))
    m = BestPolicy(["a", "b"], folder).metrics()
    assert m["eval/best_policy/maps_beating_reference"] == 0 and m["eval/best_policy/race_time_total_ms"] == 22_000
    for garbage in ("{", "[]", '{"maps": []}', '{"maps": {"a": {"finished": true, "race_time_ms": "x"}}}'):
        (folder / "best.json").write_text(garbage)
        assert BestPolicy(["a", "b"], folder).best is None  # ignored with a warning, not a crash


def test_best_policy_needs_a_greedy_map():
    with pytest.raises(ValueError):
        BestPolicy([], None)


# -- through the trainer -------------------------------------------------------------------------
CYCLE = {"map_cycle": {"entries": [
    {"short_name": "a", "map_path": "a", "repeat": 2}, {"short_name": "a", "map_path": "a", "is_exploration": False},
    {"short_name": "b", "map_path": "b"}, {"short_name": "b", "map_path": "b", "is_exploration": False}]}}


def _eval_episode(seq: int, map_name: str, version: int, race_ms: int | None, ref_ms: int = 19_000) -> Message:
    t = 3
    info = {"episode_return": 1.0, "finished": race_ms is not None, "progress_m": 300.0,
            "eval_policy_version": version, "reference_time_ms": ref_ms}
    if race_ms is not None:
        info["race_time_ms"] = race_ms
    seg = Segment(run_id="", worker_id="w1", episode_id=seq, seq=seq, index_in_episode=0, first_step=0,
                  policy_version=version, episode_done=True, map_name=map_name, evaluation=True, info=info,
                  arrays={"obs/x": np.zeros((t + 1, 2), np.float32), "action": np.zeros(t, np.int64),
                          "reward": np.ones(t, np.float32), "terminated": np.zeros(t, bool)})
    return Message("segment", "w1", ZstdCompressor().compress(seg))


def _trainer(tmp_path, cfg: dict, agent: CountingAgent | None = None) -> tuple[Trainer, list[WeightsBlob]]:
    published: list[WeightsBlob] = []

    def keep(blob: WeightsBlob) -> bytes:
        published.append(blob)
        return b"weights"

    trainer = Trainer(config_from_dict(cfg), LocalHub().trainer_link(), agent=agent or CountingAgent(),
                      memory=ListMemory(), weights_encoder=keep, run_dir=tmp_path / "run")
    return trainer, published


def test_the_trainer_marks_versions_and_writes_the_best_one(tmp_path):
    trainer, published = _trainer(tmp_path, CYCLE)
    trainer.agent.w.data.fill_(7.0)
    trainer.publisher.publish()  # v1: a candidate
    trainer.agent.w.data.fill_(8.0)
    trainer.publisher.publish()  # v2: v1 is not complete yet
    assert [b.header.get("eval_policy") for b in published] == [True, None]
    trainer.ingest([_eval_episode(0, "a", 1, 20_000), _eval_episode(1, "b", 2, 18_000)])  # b of v2: not a candidate
    assert not (tmp_path / "run" / "best").exists()
    trainer.ingest([_eval_episode(2, "b", 1, None)])  # v1 complete: a finished, b cut off at 300 m
    best = json.loads((tmp_path / "run" / "best" / "best.json").read_text())
    assert best["version"] == 1 and best["maps_finished"] == 1 and best["race_time_total_ms"] == 20_000
    assert best["maps_beating_reference"] == 0 and best["maps"]["a"]["reference_time_ms"] == 19_000
    _, tensors, spec = read_policy_file(tmp_path / "run" / "best")
    assert tensors["w"].tolist() == [7.0]  # v1's weights, not the agent's current ones
    assert spec["actor"] == "roles_helpers:ConstActor" and "run_config_json" in spec
    trainer.publisher.publish()  # v3: the next candidate
    assert published[-1].header.get("eval_policy") is True
    # v3 is slower in all (40 s) but under the reference on a (18 s < 19 s): it is the new best
    trainer.ingest([_eval_episode(3, "a", 3, 18_000), _eval_episode(4, "b", 3, 22_000)])
    best = json.loads((tmp_path / "run" / "best" / "best.json").read_text())
    assert (best["version"], best["maps_finished"], best["maps_beating_reference"]) == (3, 2, 1)
    assert trainer.state.counters["eval_policy_versions"] == 2 and trainer.state.counters["best_policy_improved"] == 2
    trainer.close()


def test_no_candidates_when_turned_off(tmp_path):
    exploring_only = {"map_cycle": {"entries": [{"short_name": "a", "map_path": "a"}]},
                      "trainer": {"best_policy_every_frames": 0}}
    off = {**CYCLE, "map_cycle": {**CYCLE["map_cycle"], "keep_best_policy": False}}
    single_off = {"map_cycle": {"keep_best_policy": False}}
    for i, cfg in enumerate((exploring_only, off, single_off, {"trainer": {"best_policy_every_frames": 0}})):
        trainer, published = _trainer(tmp_path / str(i), cfg)
        trainer.publisher.publish()
        assert trainer.best_policy is None and "eval_policy" not in published[0].header
        trainer.close()


# -- every env kind: a single track, a Gymnasium env, a cycle of exploring entries ---------------
def test_score_ranks_a_gym_env_by_its_mean_greedy_return():
    ret = lambda r: MapResult(False, None, 0.0, None, r)  # noqa: E731
    assert score({"CartPole-v1": ret(475.0)}, best_mod.RETURN) == (0, 0, -475.0, 0.0)
    assert score({"x": ret(500.0)}, best_mod.RETURN) < score({"x": ret(499.5)}, best_mod.RETURN)
    # a return env has no finish line: a "finished" flag it may report does not rank
    assert score({"x": MapResult(True, 10.0, 0.0, None, 20.0)}, best_mod.RETURN) > score({"x": ret(21.0)}, best_mod.RETURN)


def test_a_gym_candidate_is_the_mean_of_its_episodes(tmp_path):
    bp = BestPolicy(["CartPole-v1"], tmp_path / "best", ranking=best_mod.RETURN, episodes=3, request_episodes=3,
                    every_frames=100, single=True)
    bp.mark(1, W, {"actor": "x"}, frames=50, updates=1)
    assert not bp.add_result(1, "", False, None, None, episode_return=500.0)  # map names do not matter
    assert not bp.add_result(1, "", False, None, None, episode_return=200.0)
    assert bp.add_result(1, "other", False, None, None, episode_return=350.0)  # (500+200+350)/3
    best = json.loads((tmp_path / "best" / "best.json").read_text())
    assert (best["version"], best["frames"], best["ranking"], best["return_mean"]) == (1, 50, "return", 350.0)
    assert "scored_at" in best and bp.describe() == "best v1 return 350.0"
    assert not bp.wants_candidate(frames=149)  # complete, but not 100 frames since the mark at 50
    assert bp.wants_candidate(frames=150)
    bp.mark(2, W, {"actor": "x"}, frames=150, updates=2)
    assert not any(bp.add_result(2, "", False, None, None, episode_return=r) for r in (500.0, 500.0, 40.0))  # 346.7
    bp.mark(3, W, {"actor": "x"}, frames=300, updates=3)
    assert [bp.add_result(3, "", False, None, None, episode_return=r) for r in (400.0, 400.0, 400.0)] == [False, False, True]
    assert bp.metrics()["eval/best_policy/return_mean"] == 400.0 and bp.metrics()["eval/best_policy/frames"] == 300
    again = BestPolicy(["CartPole-v1"], tmp_path / "best", ranking=best_mod.RETURN, single=True)  # resumed
    assert again.best_key == (0, 0, -400.0, 0.0)
    assert BestPolicy(["CartPole-v1"], tmp_path / "best").best_key is None  # ranked by race: no comparison


def test_a_single_track_candidate_is_ranked_by_its_race():
    bp = BestPolicy(["default"], None, single=True, request_episodes=1, every_frames=10)
    bp.mark(0, W, {}, 0, 0)
    assert bp.add_result(0, "default", False, None, -1.2)  # backed off the line: shown as no distance
    assert bp.describe() == "best v0 0m"
    bp.mark(1, W, {}, 0, 0)
    assert bp.add_result(1, "default", False, None, 300.0)  # cut off at 300 m
    assert bp.describe() == "best v1 300m"
    bp.mark(2, W, {}, 10, 0)
    assert bp.add_result(2, "default", True, 30_000, 617.0)  # a finish beats any distance
    bp.mark(3, W, {}, 20, 0)
    assert not bp.add_result(3, "default", True, 31_000, 617.0)
    bp.mark(4, W, {}, 30, 0)
    assert bp.add_result(4, "default", True, 24_000, 617.0, 22_840)
    assert bp.best["version"] == 4 and bp.describe() == "best v4 24.00s"


def _gym_segment(seq: int, version: int, ret: float, worker: str = "w1") -> Message:
    t = 3
    seg = Segment(run_id="", worker_id=worker, episode_id=seq, seq=seq, index_in_episode=0, first_step=0,
                  policy_version=version, episode_done=True, map_name="", evaluation=True,
                  info={"episode_return": ret, "eval_policy_version": version, "fill_buffer": False},
                  arrays={"obs/x": np.zeros((t + 1, 2), np.float32), "action": np.zeros(t, np.int64),
                          "reward": np.ones(t, np.float32), "terminated": np.zeros(t, bool)})
    return Message("segment", worker, ZstdCompressor().compress(seg))


def test_a_gym_run_asks_for_the_candidates_episodes_and_keeps_the_best(tmp_path):
    cfg = {"environment": {"backend": "gym", "gym_id": "CartPole-v1"},
           "trainer": {"best_policy_every_frames": 1000, "best_policy_episodes": 2}}
    trainer, published = _trainer(tmp_path, cfg)
    assert trainer.best_policy is not None and trainer.best_policy.ranking == best_mod.RETURN
    trainer.agent.w.data.fill_(3.0)
    trainer.publisher.publish()  # v1: a candidate, its episodes asked of a worker
    assert published[0].header["eval_policy"] is True and published[0].header["eval_policy_episodes"] == 2
    trainer.publisher.publish()  # v2: v1 not scored yet
    assert "eval_policy" not in published[1].header
    trainer.ingest([_gym_segment(0, 1, 100.0), _gym_segment(1, 1, 300.0)])
    best = json.loads((tmp_path / "run" / "best" / "best.json").read_text())
    assert (best["version"], best["return_mean"]) == (1, 200.0)
    _, tensors, _ = read_policy_file(tmp_path / "run" / "best")
    assert tensors["w"].tolist() == [3.0]
    trainer.publisher.publish()  # v3: complete, but fewer than 1000 frames played since v1 was marked
    assert "eval_policy" not in published[2].header
    trainer.state.samples += 1000
    trainer.publisher.publish()  # v4: the next candidate
    assert published[3].header.get("eval_policy") is True
    trainer.close()


def test_an_exploring_cycle_asks_for_a_pass_of_the_cycle(tmp_path):
    cfg = {"map_cycle": {"entries": [{"short_name": "a", "map_path": "a", "repeat": 2},
                                     {"short_name": "b", "map_path": "b"}]}}
    trainer, published = _trainer(tmp_path, cfg)
    trainer.publisher.publish()
    assert published[0].header["eval_policy_episodes"] == 3 and trainer.best_policy.maps == ["a", "b"]
    trainer.ingest([_eval_episode(0, "a", 1, 20_000), _eval_episode(1, "a", 1, 25_000), _eval_episode(2, "b", 1, 18_000)])
    best = json.loads((tmp_path / "run" / "best" / "best.json").read_text())
    assert best["race_time_total_ms"] == 38_000  # a's first race counts
    trainer.close()


# -- through the worker --------------------------------------------------------------------------
# the weights' actor spec of a greedy CartPole SimpleDQNActor (the worker builds its env from it)
CARTPOLE_ACTOR = {"actor": "simple_dqn", "kwargs": {"obs_dim": 4, "n_actions": 2, "hidden": 8,
                                                    "epsilon_start": 0.0, "epsilon_end": 0.0},
                  "run_config_json": json.dumps({"environment": {"backend": "gym", "gym_id": "CartPole-v1"}})}


def _weights(action: int) -> dict[str, torch.Tensor]:
    """A SimpleDQNActor whose greedy action is always ``action``."""
    w = SimpleDQNActor(4, 2, 8).get_weights()
    w = {k: torch.zeros_like(v) for k, v in w.items()}
    last_bias = [k for k in w if k.endswith("bias")][-1]
    w[last_bias][action] = 1.0
    return w


def test_the_workers_greedy_entries_drive_the_evaluation_version():
    """v1 (greedy action 0) is an evaluation version, v2 (action 1) is not: the exploring episode
    drives v2, the greedy entry v1, tagged with its version."""
    key = Ed25519PrivateKey.generate()
    hub = LocalHub()
    spec = dict(CARTPOLE_ACTOR)
    link = hub.trainer_link()
    worker = Worker(None, hub.worker_link("pc1"), weights_decoder=lambda d: decode_weights(d, key.public_key()))
    # both reach the worker (a late joiner would get only the newest, v2)
    link.broadcast("weights", encode_weights(WeightsBlob("run", 1, _weights(0), {**spec, "eval_policy": True}), key))
    link.broadcast("weights", encode_weights(WeightsBlob("run", 2, _weights(1), spec), key))
    worker.pump()  # both received before the first episode: the actor starts with v2
    # a one-map cycle (a config refuses map_cycle for gym envs; CartPole ignores the reset options)
    worker.runner.map_cycle = MapCycle([MapCycleEntry(short_name="cp", map_path="cp"),
                                  MapCycleEntry(short_name="cp", map_path="cp", is_exploration=False)])
    worker.run(max_episodes=2, drain_timeout_s=0)
    payloads = worker.outbox.due(time.monotonic(), 0.0, 10**6, limit=10**6)
    segments = [SegmentDecoder(ZstdCompressor()).decompress(p) for _, p in payloads]
    explore = [s for s in segments if s.episode_id == segments[0].episode_id]
    greedy = [s for s in segments if s.episode_id != segments[0].episode_id]
    assert explore and greedy and not any(s.evaluation for s in explore) and all(s.evaluation for s in greedy)
    assert np.concatenate([s.arrays["action"] for s in explore]).tolist() == [1] * sum(len(s.arrays["action"]) for s in explore)
    assert not np.concatenate([s.arrays["action"] for s in greedy]).any()  # all action 0: v1
    assert greedy[-1].info["eval_policy_version"] == 1 and "eval_policy_version" not in explore[-1].info
    assert {s.policy_version for s in greedy} == {1} and {s.policy_version for s in explore} == {2}
    assert worker.stats.weights_version == 2 and worker.eval_version == 1
    worker.close()


def test_a_worker_drives_the_candidates_requested_episodes_with_the_evaluation_version():
    """Without greedy cycle entries: v1 (greedy action 0) is a candidate asking this worker for two
    episodes, v2 (action 1) is newer: two greedy episodes with v1 tagged with it, then exploring v2."""
    key = Ed25519PrivateKey.generate()
    hub = LocalHub()
    spec = dict(CARTPOLE_ACTOR)
    link = hub.trainer_link()
    worker = Worker(None, hub.worker_link("pc1"), weights_decoder=lambda d: decode_weights(d, key.public_key()))
    ask = {"eval_policy": True, "eval_policy_episodes": 2, "eval_policy_worker": "pc1"}
    link.broadcast("weights", encode_weights(WeightsBlob("run", 1, _weights(0), {**spec, **ask}), key))
    link.broadcast("weights", encode_weights(WeightsBlob("run", 2, _weights(1), spec), key))
    worker.pump()
    worker.run(max_episodes=3, drain_timeout_s=0)
    payloads = worker.outbox.due(time.monotonic(), 0.0, 10**6, limit=10**6)
    segments = [SegmentDecoder(ZstdCompressor()).decompress(p) for _, p in payloads]
    episodes: dict[int, list[Segment]] = {}
    for seg in segments:
        episodes.setdefault(seg.episode_id, []).append(seg)
    first, second, third = (episodes[k] for k in sorted(episodes))
    for ep in (first, second):
        assert all(s.evaluation for s in ep) and ep[-1].info["eval_policy_version"] == 1
        assert ep[-1].info["fill_buffer"] is False  # not trained on
        assert not np.concatenate([s.arrays["action"] for s in ep]).any()  # v1 drove
    assert not any(s.evaluation for s in third) and "eval_policy_version" not in third[-1].info
    assert np.concatenate([s.arrays["action"] for s in third]).all()  # v2 explores
    assert worker.eval_policy_pending == 0 and worker.stats.eval_episodes == 2
    worker.close()


def test_another_workers_candidate_episodes_are_not_driven_here():
    key = Ed25519PrivateKey.generate()
    hub = LocalHub()
    spec = {**CARTPOLE_ACTOR, "eval_policy": True, "eval_policy_episodes": 2, "eval_policy_worker": "pc2"}
    worker = Worker(None, hub.worker_link("pc1"), weights_decoder=lambda d: decode_weights(d, key.public_key()))
    hub.trainer_link().broadcast("weights", encode_weights(WeightsBlob("run", 1, _weights(0), spec), key))
    worker.pump()
    worker.run(max_episodes=1, drain_timeout_s=0)
    assert worker.stats.eval_episodes == 0 and worker.eval_policy_pending == 0
    worker.close()


# -- several races per map: the median decides ---------------------------------------------------
def test_the_median_race_is_the_lower_middle_finishes_by_time_then_distance():
    done = lambda t: MapResult(True, t, 617.0, 22_840)  # noqa: E731
    cut = lambda m: MapResult(False, None, m, 22_840)  # noqa: E731
    five = [done(24_000), done(22_000), cut(400.0), done(30_000), done(23_000)]
    med = best_mod.median_race(five)  # 22, 23, [24], 30, cut
    assert (med.finished, med.race_time_ms) == (True, 24_000)
    assert med.race_times_ms == (24_000, 22_000, None, 30_000, 23_000)  # every race, in the order driven
    four = [done(22_000), cut(300.0), cut(500.0), done(25_000)]  # 22, [25], cut at 500 m, cut at 300 m
    assert best_mod.median_race(four).race_time_ms == 25_000
    three_cut = [cut(300.0), done(21_000), cut(500.0)]  # 21, [cut at 500 m], cut at 300 m
    med = best_mod.median_race(three_cut)
    assert (med.finished, med.progress_m) == (False, 500.0)
    one = best_mod.median_race([done(20_000)])
    assert one == done(20_000) and one.race_times_ms == ()  # one race: as before


def test_a_candidate_with_one_lucky_race_loses_to_a_steadier_one(tmp_path):
    """Three races per candidate: v1's fastest race (20 s) is its only good one (median 30 s); v2
    never drives under 25 s but its median is 26 s: v2 is the best policy."""
    bp = BestPolicy(["default"], tmp_path / "best", single=True, episodes=3, request_episodes=3, every_frames=10,
                    start_noise=0.3)
    assert bp.request("pc1").to_wire() == {"eval_policy_episodes": 3, "eval_policy_worker": "pc1", "eval_policy_start_noise": 0.3}
    bp.mark(1, W, {}, 0, 0)
    assert [bp.add_result(1, "default", True, t, 617.0, 22_840) for t in (20_000, 30_000, 31_000)] == [False, False, True]
    bp.mark(2, W, {}, 10, 0)
    assert [bp.add_result(2, "default", True, t, 617.0, 22_840) for t in (25_000, 26_000, 40_000)] == [False, False, True]
    assert bp.best["version"] == 2 and bp.describe() == "best v2 26.00s"
    best = json.loads((tmp_path / "best" / "best.json").read_text())
    assert best["maps"]["default"]["race_times_ms"] == [25_000, 26_000, 40_000]
    assert best["race_time_total_ms"] == 26_000
    bp.mark(3, W, {}, 20, 0)
    assert not any(bp.add_result(3, "default", True, t, 617.0) for t in (19_000, 27_000, 27_000))  # median 27 s
    lines = (tmp_path / "best" / "candidates.jsonl").read_text().splitlines()
    assert [json.loads(line)["race_time_total_ms"] for line in lines] == [30_000, 26_000, 27_000]
    again = BestPolicy(["default"], tmp_path / "best", single=True, episodes=3)  # a resumed run keeps v2's median
    assert again.best_key == (-1, 0, 26_000.0, -0.0)
    assert BestPolicy(["default"], None, single=True, request_episodes=1).request("pc1").to_wire() == {
        "eval_policy_episodes": 1, "eval_policy_worker": "pc1"}  # no start noise: nothing about it


def test_a_simulator_run_asks_for_moved_starts_and_the_config_refuses_them_where_nothing_reads_them(tmp_path):
    from rulka.errors import ConfigError

    sim = {"environment": {"backend": "sim", "track": "default"},
           "trainer": {"best_policy_episodes": 5, "best_policy_start_noise": 0.3}}
    bp = BestPolicy.for_config(config_from_dict(sim), None)
    assert (bp.episodes, bp.request_episodes, bp.start_noise) == (5, 5, 0.3)
    refused = {
        "backend": {"environment": {"backend": "gym", "gym_id": "CartPole-v1"},
                    "trainer": {"best_policy_episodes": 5, "best_policy_start_noise": 0.3}},
        "one race": {"environment": {"backend": "sim"}, "trainer": {"best_policy_start_noise": 0.3}},
        "no requests": {"environment": {"backend": "sim"},
                        "trainer": {"best_policy_every_frames": 0, "best_policy_episodes": 5,
                                    "best_policy_start_noise": 0.3}},
        "greedy entries": {"environment": {"backend": "sim"}, "map_cycle": {"entries": [
            {"short_name": "a", "map_path": "a"}, {"short_name": "a", "map_path": "a", "is_exploration": False}]},
            "trainer": {"best_policy_episodes": 5, "best_policy_start_noise": 0.3}},
        "episodes with greedy entries": {"environment": {"backend": "sim"}, "map_cycle": {"entries": [
            {"short_name": "a", "map_path": "a", "is_exploration": False}]}, "trainer": {"best_policy_episodes": 3}},
    }
    for why, cfg in refused.items():
        with pytest.raises(ConfigError, match="best_policy_"):
            config_from_dict(cfg)
        assert why


class _ResetLog:
    """A Gymnasium env that keeps the options of every reset (CartPole ignores them)."""

    def __init__(self) -> None:
        import gymnasium

        self.env = gymnasium.make("CartPole-v1")
        self.action_space, self.observation_space = self.env.action_space, self.env.observation_space
        self.options: list[dict | None] = []

    def reset(self, *, seed=None, options=None):
        self.options.append(options)
        return self.env.reset(seed=seed)

    def step(self, action):
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()


def test_a_worker_drives_each_candidate_from_the_same_moved_starts():
    """A candidate asking for 3 episodes with start noise: its races reset with start seeds
    1000, 1001, 1002 and the noise, the exploring episode after them from the line; the next
    candidate starts again at 1000; a start noise out of range is not passed on."""
    key = Ed25519PrivateKey.generate()
    hub = LocalHub()
    spec = dict(CARTPOLE_ACTOR)
    link = hub.trainer_link()
    env = _ResetLog()
    worker = Worker(None, hub.worker_link("pc1"), env=env,
                    weights_decoder=lambda d: decode_weights(d, key.public_key()))
    ask = {"eval_policy": True, "eval_policy_episodes": 3, "eval_policy_worker": "pc1",
           "eval_policy_start_noise": 0.3}
    link.broadcast("weights", encode_weights(WeightsBlob("run", 1, _weights(0), {**spec, **ask}), key))
    worker.pump()
    worker.run(max_episodes=4, drain_timeout_s=0)
    moved = [{"start_noise": 0.3, "start_seed": 1000 + k} for k in range(3)]
    assert env.options == [*moved, None]
    link.broadcast("weights", encode_weights(WeightsBlob("run", 2, _weights(0), {**spec, **ask,
                                                                                   "eval_policy_episodes": 1}), key))
    worker.pump()
    worker.run(max_episodes=1, drain_timeout_s=0)
    assert env.options[-1] == moved[0]  # the next candidate: the same first start
    assert worker.stats.eval_episodes == 4
    for version, bad in enumerate((1e9, -1.0, "0.3", True), start=3):
        link.broadcast("weights", encode_weights(WeightsBlob("run", version, _weights(0), {
            **spec, **ask, "eval_policy_episodes": 1, "eval_policy_start_noise": bad}), key))
        worker.pump()
        worker.run(max_episodes=1, drain_timeout_s=0)
        assert env.options[-1] is None and worker.stats.eval_episodes == version + 2  # a candidate's race, from the line
    worker.close()


class _LoadingAgent(CountingAgent):
    """CountingAgent that can take published weights back (what ending on the average needs) and
    has a learning rate to cool."""

    follows_lr_schedule = True
    loads_actor_weights = True

    def load_actor_weights(self, weights):
        with torch.no_grad():
            self.w.copy_(weights["w"])


def test_inside_the_cooldown_of_a_run_that_ends_on_its_average_the_average_is_a_candidate_too(tmp_path):
    """training.lr_cooldown_end_on_average: the run ends on weights that were never raced, so inside
    the cooldown every other candidate is the average so far, published as that version; when it
    races best, best/ holds it and says so. Before the cooldown, and in a run that ends on the
    weights it trained, candidates are the learner's weights only."""
    from rulka.trainer.cooldown import LrCooldown

    cfg = {"environment": {"backend": "gym", "gym_id": "CartPole-v1"},
           "trainer": {"best_policy_every_frames": 100, "best_policy_episodes": 1, "average_policy_frames": 1000,
                       "average_policy_kind": "mean"},
           "training": {"lr_cooldown_fraction": 0.5, "lr_cooldown_end_on_average": True}}
    trainer, published = _trainer(tmp_path, cfg, _LoadingAgent())
    trainer.cooldown.schedule = LrCooldown(0.5, 0.05, budget_samples=1000)
    trainer.cooldown.schedule.start(samples=0)
    seq = iter(range(100))

    def candidate(w: float, samples: int, ret: float) -> WeightsBlob:
        """Publish the learner's weights ``w`` at ``samples``; the candidate's race returns ``ret``."""
        trainer.agent.w.data.fill_(w)
        trainer.state.samples = samples
        trainer.publisher.publish()
        blob = published[-1]
        assert blob.header.get("eval_policy") is True
        trainer.ingest([_gym_segment(next(seq), blob.version, ret)])
        return blob

    # before the cooldown (the last half of 1000 frames): the learner's weights
    assert candidate(2.0, 100, 50.0).tensors["w"].tolist() == [2.0]
    assert candidate(4.0, 300, 60.0).tensors["w"].tolist() == [4.0]
    # inside it: the learner's, then the mean so far of the published versions (2, 4, 6 -> 4), ...
    assert candidate(6.0, 600, 70.0).tensors["w"].tolist() == [6.0]
    averaged = candidate(8.0, 700, 90.0)
    assert averaged.tensors["w"].tolist() == [5.0]  # (2 + 4 + 6 + 8) / 4: the average, not the learner's 8
    assert trainer.agent.w.item() == 8.0  # the learner trains on: only the published version is the average
    best = json.loads((tmp_path / "run" / "best" / "best.json").read_text())
    assert (best["version"], best["weights"], best["return_mean"]) == (averaged.version, "average", 90.0)
    _, tensors, _ = read_policy_file(tmp_path / "run" / "best")
    assert tensors["w"].tolist() == [5.0]
    assert trainer.best_policy.describe() == f"best v{averaged.version} (average) return 90.0"
    # ... then the learner's again; the log says which candidates were averages
    assert candidate(10.0, 800, 80.0).tensors["w"].tolist() == [10.0]
    rows = [json.loads(line) for line in (tmp_path / "run" / "best" / "candidates.jsonl").read_text().splitlines()]
    assert [r.get("weights", "trained") for r in rows] == ["trained"] * 3 + ["average", "trained"]
    assert trainer.state.counters["eval_policy_average_versions"] == 1
    trainer.close()

    # a run that ends on the weights it trained: no average candidates, even while cooling
    cfg["training"]["lr_cooldown_end_on_average"] = False
    trainer, published = _trainer(tmp_path / "2", cfg, _LoadingAgent())
    trainer.cooldown.schedule = LrCooldown(0.5, 0.05, budget_samples=1000)
    trainer.cooldown.schedule.start(samples=0)
    seq = iter(range(100))
    assert [candidate(w, s, 1.0).tensors["w"].item() for w, s in ((2.0, 600), (4.0, 700), (6.0, 800))] == [2.0, 4.0, 6.0]
    trainer.close()
