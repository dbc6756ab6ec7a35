"""Checks a config gets before anything runs (issue 10): the replay memory against the RAM, the
simulator's track names, the segment length, an empty file. Each is one line, exit code 2."""

from __future__ import annotations

import numpy as np
import pytest
from test_cli_config import _run

from rulka.config import load_config
from rulka.config.built import check_startable
from rulka.config.resources import check_replay_fits, replay_plan
from rulka.errors import ConfigError
from rulka.segment import Segment


def one_error_line(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_empty_file_is_one_line(tmp_path):
    for text in ("", "# a comment and nothing else\n"):
        path = tmp_path / "empty.yaml"
        path.write_text(text)
        line = one_error_line(_run("validate", str(path), cwd=tmp_path))
        assert "empty.yaml is empty" in line


def test_validate_names_the_numbers_of_a_replay_memory_too_large_for_this_machine(tmp_path):
    line = one_error_line(_run("validate", "configs/sim_iqn.yaml", "--set",
                               "memory.memory_size_schedule=[[0, [1000000000000, 1000]]]", cwd=tmp_path))
    assert "memory.memory_size_schedule" in line and "TiB" in line and "1,050,000,000,001 transitions" in line
    assert "GiB of RAM" in line


def test_replay_memory_against_the_ram_given():
    cfg = load_config(overrides=["memory.memory_size_schedule=[[0, [100000, 1000]], [50000, [400000, 1000]]]"],
                      env_file=None)
    plan = replay_plan(cfg)
    assert plan.transitions == 400_000 + 20_001  # the largest size of the schedule, plus the test store
    check_replay_fits(cfg, plan.nbytes)
    with pytest.raises(ConfigError, match="available now .*`memory.memory_size_schedule` or the image size"):
        check_replay_fits(cfg, plan.nbytes - 1, "this machine has available now")
    sac = load_config(overrides=["training.algorithm=sac", "environment.continuous_actions=true", "nn.vis.no_image=true",
                                "sac.buffer_size=1000000"], env_file=None)
    with pytest.raises(ConfigError, match="sac.buffer_size"):
        check_replay_fits(sac, replay_plan(sac).nbytes // 2)
    custom = load_config(overrides=["trainer.memory=my.module:Memory"], env_file=None)
    assert replay_plan(custom) is None  # a plugin's memory is not estimated


def _segment(t, floats, image):
    arrays = {"obs/float": np.zeros((t + 1, floats), np.float32), "obs/potential": np.zeros(t + 1, np.float32),
              "action": np.zeros(t, np.int64), "reward": np.zeros(t, np.float32), "terminated": np.zeros(t, bool)}
    if image is not None:
        arrays["obs/img"] = np.zeros((t + 1, *image), np.uint8)
    return Segment(run_id="", worker_id="w", episode_id=0, seq=0, index_in_episode=0, first_step=0,
                   policy_version=0, arrays=arrays, episode_done=True)


@pytest.mark.parametrize("sets", [
    ["memory.memory_size_schedule=[[0, [3000, 100]]]", "nn.vis.no_image=false"],
    ["memory.memory_size_schedule=[[0, [3000, 100]]]", "nn.vis.no_image=true", "memory.prio_alpha=0.6"],
    ["training.algorithm=sac", "environment.continuous_actions=true", "sac.buffer_size=3000", "nn.vis.no_image=true"],
])
def test_replay_estimate_matches_what_the_memory_allocates(sets):
    from rulka.plugins import build_plugin

    cfg = load_config("configs/default.yaml", sets, env_file=None)
    plan = replay_plan(cfg)
    memory = build_plugin("memory", str(cfg.trainer.memory or cfg.training.algorithm), None, cfg)
    image = None if cfg.nn.vis.no_image else (cfg.h_downsized, cfg.w_downsized)
    seg = _segment(50, cfg.float_input_dim, image)
    if cfg.training.algorithm == "sac":
        seg.arrays["action"] = np.zeros((50, 3), np.float32)
    memory.append(seg)  # the first segment lays out (allocates) every ring
    arrays = [*memory.frames.fields.values()]
    if hasattr(memory, "train"):
        arrays += [*memory.train.arrays.values(), *memory.test.arrays.values()]
        arrays += [memory.tree.tree] if memory.tree is not None else []
    else:
        arrays += [*memory.transitions.values()]
    allocated = sum(a.nbytes for a in arrays)
    assert plan.nbytes == pytest.approx(allocated, rel=0.01)


def test_unknown_track_and_map_cycle_entry_are_refused():
    with pytest.raises(ConfigError, match="`environment.track` is 'nosuch'.*bundled: default, "):
        check_startable(load_config(overrides=["environment.track=nosuch"], env_file=None))
    with pytest.raises(ConfigError, match=r"`map_cycle.entries\[1\].map_path` is 'hairpin'"):
        check_startable(load_config(overrides=[
            "map_cycle.entries=[{short_name: a, map_path: hairpins}, {short_name: b, map_path: hairpin}]"],
            env_file=None))
    for fine in ("hairpins", "gen:7", "my_track.json"):
        check_startable(load_config(overrides=[f"environment.track={fine}"], env_file=None))
    # other backends name maps, not simulator tracks
    check_startable(load_config("configs/tmnf_fake.yaml", ["environment.track=A01-Race"], env_file=None))


def test_segment_length_beyond_what_a_trainer_accepts_is_refused():
    with pytest.raises(ConfigError, match="`worker.segment_max_steps` is 100,000,000"):
        check_startable(load_config(overrides=["worker.segment_max_steps=100000000"], env_file=None))
    # 160 x 120 images: 13,452 steps fit in the 256 MiB a trainer decompresses
    with pytest.raises(ConfigError, match="at most 13,452 steps fit"):
        check_startable(load_config(overrides=["worker.segment_max_steps=20000"], env_file=None))
    check_startable(load_config(overrides=["worker.segment_max_steps=13000"], env_file=None))


@pytest.mark.parametrize(("path", "sets", "key"), [
    ("configs/cartpole_simple.yaml", ["trainer.memory_kwargs.capacity=1e12"], "trainer.memory_kwargs.capacity"),
    ("configs/default.yaml", ["training.algorithm=sac", "environment.continuous_actions=true", "nn.vis.no_image=true",
                              "trainer.memory_kwargs={capacity: 1000000000000}"], "trainer.memory_kwargs.capacity"),
    ("configs/default.yaml", ["trainer.memory_kwargs={memory_size_schedule: [[0, [1000000000000, 1000]]]}"],
     "trainer.memory_kwargs.memory_size_schedule"),
    ("configs/default.yaml", ["training.algorithm=ppo", "ppo.rollout_steps_per_update=1000000000000"],
     "ppo.rollout_steps_per_update"),
    ("configs/default.yaml", ["training.algorithm=dpo", "dpo.dpo_pair_buffer_max=1000000000000"],
     "dpo.dpo_pair_buffer_max"),
])
def test_each_built_in_memory_names_its_own_size_key(path, sets, key):
    cfg = load_config(path, sets, env_file=None)
    plan = replay_plan(cfg)
    assert plan is not None and plan.key == key
    with pytest.raises(ConfigError, match=f"lower `{key}`"):
        check_replay_fits(cfg, 64 << 30)
    small = load_config(path, env_file=None)
    check_replay_fits(small, 64 << 30)  # the shipped sizes fit


def test_simple_memory_estimate_is_what_it_allocates():
    from rulka.plugins import build_plugin

    cfg = load_config("configs/cartpole_simple.yaml", ["trainer.memory_kwargs.capacity=3000"], env_file=None)
    plan = replay_plan(cfg)
    memory = build_plugin("memory", "simple", cfg.trainer.memory_kwargs, cfg)
    seg = Segment(run_id="", worker_id="w", episode_id=0, seq=0, index_in_episode=0, first_step=0, policy_version=0,
                  arrays={"obs/x": np.zeros((6, 4), np.float32), "action": np.zeros(5, np.int64),
                          "reward": np.zeros(5, np.float32), "terminated": np.zeros(5, bool)}, episode_done=True)
    memory.append(seg)
    assert plan.nbytes == sum(a.nbytes for a in memory._arrays.values())
