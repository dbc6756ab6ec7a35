"""worker.max_steps_per_s paces a fast env so a trainer on the same machine keeps its CPU."""

from __future__ import annotations

import threading
import time

import gymnasium as gym

from rulka.config import load_config
from rulka.net.local import LocalHub
from rulka.worker.worker import Worker


class Always0:
    def act_with_info(self, obs, test=False):
        return 0, {}

    def reset(self):
        pass


def test_config_cap_and_command_line_override():
    cfg = load_config(overrides=["worker.max_steps_per_s=50"], env_file=None)
    hub = LocalHub()
    assert Worker(cfg, hub.worker_link("a")).min_step_s == 1 / 50
    assert Worker(cfg, hub.worker_link("b"), max_steps_per_s=200).min_step_s == 1 / 200
    assert Worker(load_config(env_file=None), hub.worker_link("c")).min_step_s == 0.0


def test_capped_worker_steps_no_faster_than_the_cap():
    cfg = load_config(overrides=["worker.max_steps_per_s=100"], env_file=None)
    worker = Worker(cfg, LocalHub().worker_link("w"), env=gym.make("CartPole-v1"), actor=Always0())
    t0 = time.monotonic()
    worker.run(max_steps=50, stop_event=threading.Event(), drain_timeout_s=0)
    assert time.monotonic() - t0 >= 49 / 100  # 50 steps at <= 100 steps/s
    worker.close()
