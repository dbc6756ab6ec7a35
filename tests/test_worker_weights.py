"""Weights on the worker: verified, only newer versions, swapped between env steps, and enough
to build the actor (and the env) from what the trainer sends."""

from __future__ import annotations

import threading

import numpy as np
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import ConstActor, CountingEnv

from rulka.net.local import LocalHub
from rulka.net.weights import WeightsBlob, decode_weights, encode_weights
from rulka.worker.worker import Worker


def blob_bytes(key, version, w, spec=None):
    return encode_weights(WeightsBlob("run1", version, {"w": torch.tensor([w])},
                                      spec or {"actor": "roles_helpers:ConstActor", "kwargs": {}}), key)


class RecordingEnv(CountingEnv):
    """Records the weight value the actor held at each step, and asserts that the actor never
    changes during a step."""

    def __init__(self, actor, hook=None):
        super().__init__(length=5)
        self.actor = actor
        self.seen: list[float] = []
        self.hook = hook

    def step(self, action):
        before = float(self.actor.w[0])
        if self.hook:
            self.hook(self.step_calls)
        out = super().step(action)
        assert float(self.actor.w[0]) == before  # nothing swapped mid-step
        self.seen.append(before)
        return out


def test_only_newer_verified_weights_are_loaded_between_steps(tmp_path):
    key = Ed25519PrivateKey.generate()
    other = Ed25519PrivateKey.generate()
    hub = LocalHub()
    actor = ConstActor()
    loads_thread = []
    orig = actor.load_weights
    actor.load_weights = lambda w: (loads_thread.append(threading.get_ident()), orig(w))
    worker = Worker({"worker": {"segment_max_steps": 50}}, hub.worker_link("w"), actor=actor,
                    weights_decoder=lambda d: decode_weights(d, key.public_key()))

    trainer_link = hub.trainer_link()

    def deliver(step):
        # weights arrive while the env is stepping, received by another thread (as the I/O
        # thread does); they apply from the next step on
        blobs = {1: [blob_bytes(key, 3, 3.0)],
                 2: [blob_bytes(key, 2, 2.0),  # older than loaded: ignored
                     blob_bytes(other, 9, 9.0)],  # not signed by the trainer: refused
                 3: [blob_bytes(key, 5, 5.0), blob_bytes(key, 4, 4.0)]}  # 4: older than pending, ignored
        for blob in blobs.get(step, []):
            trainer_link.broadcast("weights", blob)
        if step in blobs:
            receiver = threading.Thread(target=worker.pump)
            receiver.start()
            receiver.join()

    worker.env = RecordingEnv(actor, deliver)
    worker.run_episode()
    assert worker.env.seen == [0.0, 0.0, 3.0, 3.0, 5.0]
    assert actor.loads == [3.0, 5.0]
    assert set(loads_thread) == {threading.get_ident()}  # loaded by the env loop itself
    assert worker.stats.weights_version == 5
    assert worker.stats.weights_stale == 2
    assert worker.stats.weights_rejected == 1
    worker.close()


def test_worker_builds_actor_and_env_from_the_first_weights():
    key = Ed25519PrivateKey.generate()
    hub = LocalHub()
    run_config = {"environment": {"backend": "gym", "gym_id": "CartPole-v1"}, "worker": {"segment_max_steps": 10}}
    spec = {"actor": "simple_dqn", "kwargs": {"obs_dim": 4, "n_actions": 2, "hidden": 8}, "run_config_json": __import__("json").dumps(run_config)}
    from rulka.agents.simple import SimpleDQNActor

    weights = SimpleDQNActor(4, 2, 8).get_weights()
    weights["4.bias"] = torch.tensor([5.0, -5.0])  # a policy that always pushes left
    hub.trainer_link().broadcast("weights", encode_weights(WeightsBlob("run7", 1, weights, spec), key))
    worker = Worker(None, hub.worker_link("w"), weights_decoder=lambda d: decode_weights(d, key.public_key()),
                    test=True)
    stats = worker.run(max_episodes=1, drain_timeout_s=0)
    assert stats.weights_version == 1 and worker.run_id == "run7"
    assert isinstance(worker.actor, SimpleDQNActor)
    assert worker.segment_max_steps == 10
    seqs = worker.outbox.seqs()
    assert len(seqs) == int(np.ceil(stats.steps / 10))
    worker.close()
