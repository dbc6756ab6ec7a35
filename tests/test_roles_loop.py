"""Trainer loop arithmetic (replay ratio, start threshold, publishing), worker stats, command-line
errors, and the one-process mode."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import ConstActor, CountingAgent, CountingEnv, ListMemory
from test_trainer_checkpoint import seg_msg

from rulka.net.local import LocalHub
from rulka.net.messages import Stats
from rulka.net.weights import decode_weights
from rulka.trainer.trainer import Trainer
from rulka.worker.worker import Worker

KEY = Ed25519PrivateKey.generate()


class RatioMemory(ListMemory):
    def __init__(self, min_samples):
        super().__init__()
        self.start_learning_size = min_samples


def trainer_with(memory, ratio=None, publish_every=None):
    cfg = {"trainer": {"max_updates_per_env_step": ratio, "publish_every_updates": publish_every}}
    return Trainer(cfg, LocalHub().trainer_link(), agent=CountingAgent(), memory=memory, signing_key=KEY)


def test_allowed_updates_follow_threshold_and_ratio():
    # 0.25 update per env step at batch 4 = 1 sample per insert; start size 10; window 10 +- 2
    # (0.1 x 1 x 10 = 1, raised to half a batch): pre-learning inserts are not owed (Reverb)
    mem = RatioMemory(min_samples=10)
    t = trainer_with(mem, ratio=0.25)
    assert (t.limiter.min_diff, t.limiter.max_diff) == (8, 12)
    assert t.learner.allowed_updates() == 0  # empty memory: below the start threshold

    t.ingest([seg_msg("w", 0), seg_msg("w", 1)])  # 2 segments of 4 transitions = 8 < 10
    assert t.state.samples == 8 and t.learner.allowed_updates() == 0
    t.ingest([seg_msg("w", 2)])  # 12 transitions: cursor 12, one batch of 4 leaves 8 = min_diff
    assert t.learner.allowed_updates() == 1
    assert t.learner.train_slice() == 1 and t.state.updates == 1
    assert t.learner.train_slice() == 0  # the ratio holds training back until more data comes
    t.ingest([seg_msg("w", 3)])  # cursor 8 + 4 = 12
    assert t.learner.train_slice() == 1 and t.state.updates == 2


def test_no_ratio_means_no_cap_and_threshold_at_least_a_batch():
    mem = RatioMemory(min_samples=0)
    t = trainer_with(mem, ratio=None)
    assert t.limiter is None
    t.ingest([seg_msg("w", 0, t=3)])  # 3 transitions: less than one batch of 4
    assert t.learner.allowed_updates() == 0
    t.ingest([seg_msg("w", 1, t=3)])
    assert t.learner.allowed_updates() == math.inf


def test_memory_samples_per_insert_decides_over_max_updates_per_env_step():
    class Counted(ListMemory):
        samples_per_insert = 2.0

    t = trainer_with(Counted(), ratio=100.0)
    assert t.limiter.samples_per_insert == 2.0
    cfg = {"trainer": {"max_updates_per_env_step": 100.0, "rate_limit": {"samples_per_insert": 3.0}}}
    t = Trainer(cfg, LocalHub().trainer_link(), agent=CountingAgent(), memory=Counted(), signing_key=KEY)
    assert t.limiter.samples_per_insert == 3.0  # the explicit key wins


def test_publish_every_n_updates_and_on_demand():
    t = trainer_with(RatioMemory(0), ratio=None, publish_every=2)
    t.ingest([seg_msg("w", 0)])
    for _ in range(5):
        t.learner.train_once()
    assert t.state.version == 2  # after updates 2 and 4
    assert t.publisher.publish() == 3


def test_trainer_weights_reach_a_late_worker_with_config():
    hub = LocalHub()
    t = Trainer({"environment": {"backend": "gym", "gym_id": "CartPole-v1"}}, hub.trainer_link(),
                agent=CountingAgent(), memory=ListMemory(), signing_key=KEY)
    t.publisher.publish()
    t.publisher.publish()
    link = hub.worker_link("late")
    msgs = link.receive(timeout=1)
    assert [m.kind for m in msgs] == ["weights"]
    blob = decode_weights(msgs[0].payload, KEY.public_key())
    assert blob.version == 2 and blob.run_id == t.state.run_id
    assert '"gym_id": "CartPole-v1"' in blob.header["run_config_json"]


def test_worker_sends_stats_the_status_table_reads():
    hub = LocalHub()
    w = Worker({"worker": {"segment_max_steps": 4}}, hub.worker_link("pc1"), env=CountingEnv(5), actor=ConstActor(),
               weights_decoder=lambda d: decode_weights(d, KEY.public_key()))
    w.run(max_episodes=2, drain_timeout_s=0)
    w.send_stats()
    row = hub.status()["workers"][0]
    assert (row["name"], row["episodes"], row["weights_version"], row["unacked"]) == ("pc1", 2, 0, 4)
    trainer_side = [m for m in hub.trainer_link().receive(timeout=1) if m.kind == "stats"]
    assert Stats.decode(trainer_side[-1].payload).values["steps"] == 10
    w.close()


def test_run_local_threads_trains_and_workers_follow(tmp_path):
    from rulka.local import run_local

    result = run_local({"worker": {"segment_max_steps": 5}, "trainer": {"publish_every_updates": 5}}, n_workers=2,
                       max_updates=20, max_seconds=60, agent=CountingAgent(), memory=ListMemory(),
                       env_factory=lambda i: CountingEnv(6), actor_factory=lambda i: ConstActor(),
                       run_dir=tmp_path / "run")
    assert not result.worker_errors
    assert result.trainer["updates"] == 20 and result.trainer["version"] == 1 + 4
    assert set(result.workers) == {"local-0", "local-1"}
    assert all(s.episodes > 0 and s.weights_version >= 1 for s in result.workers.values())
    assert (tmp_path / "run" / "checkpoints" / "latest.json").exists()
    first = result.trainer

    again = run_local({"worker": {"segment_max_steps": 5}, "trainer": {"publish_every_updates": 5}}, n_workers=1,
                      max_updates=30, max_seconds=60, agent=CountingAgent(), memory=ListMemory(),
                      env_factory=lambda i: CountingEnv(6), actor_factory=lambda i: ConstActor(),
                      run_dir=tmp_path / "run", resume=True)
    assert again.trainer["run_id"] == first["run_id"]
    assert again.trainer["updates"] == 30 and again.trainer["version"] == first["version"] + 1 + 2
    assert np.isfinite(again.trainer["samples"]) and again.trainer["samples"] > first["samples"]


@pytest.mark.parametrize("argv, needle", [
    (["run", "no/such.yaml"], "config file no/such.yaml not found"),
    (["run", "configs/cartpole_simple.yaml", "--workers", "0"], "--workers must be at least 1"),
])
def test_rulka_run_user_errors_are_one_line(argv, needle, capsys):
    from rulka.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and err.startswith("error:")


def test_role_commands_user_errors_are_one_line(tmp_path, capsys):
    from rulka.trainer.cli import main as trainer_main
    from rulka.worker.cli import main as worker_main

    assert worker_main(["--server", "nonsense", "--keys", str(tmp_path)]) == 2
    assert "expected HOST:PORT" in capsys.readouterr().err
    assert worker_main(["--server", "127.0.0.1:5", "--keys", str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert trainer_main(["--config", str(tmp_path / "missing.yaml")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    (tmp_path / "c.yaml").write_text("environment: {backend: gym, gym_id: CartPole-v1}\n")
    assert trainer_main(["--config", str(tmp_path / "c.yaml"), "--resume", str(tmp_path / "nope")]) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_test_mode_is_greedy_and_marks_evaluation_segments():
    calls = []

    class Spy(ConstActor):
        def act_with_info(self, obs, test=False):
            calls.append(test)
            return 0, {}

    hub = LocalHub()
    w = Worker({"worker": {"segment_max_steps": 10}}, hub.worker_link("eval"), env=CountingEnv(4), actor=Spy(),
               weights_decoder=lambda d: decode_weights(d, KEY.public_key()), test=True)
    w.run(max_episodes=1, drain_timeout_s=0)
    w.pump()
    segs = [m for m in hub.trainer_link().receive(timeout=1) if m.kind == "segment"]
    from rulka.compress import SegmentDecoder, ZstdCompressor

    seg = SegmentDecoder(ZstdCompressor()).decompress(segs[0].payload)
    assert calls == [True] * 4 and seg.evaluation is True and seg.episode_done
    w.close()


def test_trainer_metrics_names_and_per_worker_rates():
    from rulka.net.link import Message
    from rulka.net.messages import Stats

    class Sink:
        def __init__(self):
            self.records = []

        def log(self, metrics, step):
            self.records.append((step, dict(metrics)))

        def close(self):
            pass

    sink = Sink()
    t = Trainer(None, LocalHub().trainer_link(), agent=CountingAgent(), memory=ListMemory(), signing_key=KEY,
                metrics=sink)
    t.publisher.publish()
    t.ingest([seg_msg("pc1", 0), seg_msg("pc1", 0),
              Message("stats", "pc1", Stats({"samples_per_s": 20.5, "unacked": 3}).encode())])
    t.reporter.report(force=True)
    step, m = sink.records[-1]
    assert step == 4
    assert m["charts/samples_received"] == 4 and m["perf/segments_duplicate"] == 1
    assert m["perf/workers_connected"] == 1 and m["charts/weights_version"] == 1
    assert m["perf/pc1/samples_per_s"] == 20.5 and m["perf/pc1/unsent_segments"] == 3
    assert m["perf/policy_lag_max"] == 1  # segment made with v0 while the trainer published v1
    assert m["perf/ingest_mb_per_s"] > 0


def test_engineered_reward_schedules_follow_the_trainers_frame_count():
    """The trainer's frame count travels with the weights; the worker hands it to its env before
    each episode, so rewards.engineered_*_reward_schedule advance (scaled by global_schedule_speed)."""
    from rulka.config import config_from_dict
    from rulka.envs.sim.env import SimTrackEnv

    cfg = config_from_dict({"rewards": {"engineered_speedslide_reward_schedule": [[0, 0.0], [100, 1.0]]},
                            "training": {"global_schedule_speed": 2.0}, "nn": {"vis": {"no_image": True}}})
    seen = []

    class Recording(SimTrackEnv):
        def set_frames_played(self, frames):
            seen.append(frames)
            super().set_frames_played(frames)

    env = Recording(config=cfg)
    # global_schedule_speed 2 stretches the knots: 1.0 is reached at frame 200
    assert env.params.engineered_speedslide_reward_schedule == ((0.0, 0.0), (200.0, 1.0))
    hub = LocalHub()
    t = Trainer({}, hub.trainer_link(), agent=CountingAgent(), memory=ListMemory(), signing_key=KEY)
    t.ingest([seg_msg("w", i, t=25) for i in range(4)])  # 100 frames played
    t.publisher.publish()
    w = Worker({"worker": {"segment_max_steps": 50}}, hub.worker_link("pc1"), env=env, actor=ConstActor(),
               weights_decoder=lambda d: decode_weights(d, KEY.public_key()))
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the weights arrive through the worker's I/O thread
        w.run(max_steps=10, drain_timeout_s=0)
        if seen[-1] == 100:
            break
    w.close()
    assert t.state.samples == 100 and seen[-1] == 100


class QuickServerRestartLink:
    """A trainer link over a LocalHub whose server restarts (new session) while the link never
    looks disconnected: what a relay killed and restarted within the heartbeat window does."""

    def __init__(self, restart_at_receive: int):
        self.inner = LocalHub().trainer_link()
        self.restart_at = restart_at_receive
        self.receives = 0
        self.session = 1
        self.weights_sent = 0

    def broadcast(self, kind, payload):
        self.weights_sent += kind == "weights"
        self.inner.broadcast(kind, payload)

    def send_to(self, worker_id, kind, payload):
        self.inner.send_to(worker_id, kind, payload)

    def receive(self, timeout=0.0):
        self.receives += 1
        if self.receives == self.restart_at:
            self.session += 1
        return self.inner.receive(timeout)

    def connected(self):
        return True

    def server_session(self):
        return self.session

    def close(self):
        self.inner.close()


def test_weights_are_sent_again_to_a_server_that_restarted_within_the_heartbeat_window():
    # the restarted server retains no weights: a worker joining it later would wait forever
    link = QuickServerRestartLink(restart_at_receive=3)
    t = Trainer(None, link, agent=CountingAgent(), memory=ListMemory(), signing_key=KEY)
    t.run(max_seconds=0.5)
    assert link.receives > 3
    assert link.weights_sent == 2  # the start publish, then the same blob again after the restart
