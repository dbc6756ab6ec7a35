"""Trajectory memories (PPO steps, GRPO groups, DPO pairs), staleness, files without pickle,
checkpoints of the three learners, and PPO through the real trainer/worker loop."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rulka.agents.policy.episodes import append_pair, offline_pair_loader, read_episode, write_episode
from rulka.agents.policy.memory import GroupMemory, PairMemory, StepsMemory
from rulka.config import config_from_dict, load_config
from rulka.errors import BadInput
from rulka.segment import Segment


def seg(worker="w", episode=0, index=0, t=4, version=1, done=True, reward=1.0, start=None, evaluation=False):
    arrays = {"obs/x": np.zeros((t + 1, 4), np.float32), "action": np.zeros(t, np.int64),
              "reward": np.full(t, reward, np.float32), "terminated": np.array([False] * (t - 1) + [done]),
              "truncated": np.zeros(t, bool), "extra/logprob": np.full(t, -0.69, np.float32),
              "extra/value": np.zeros(t, np.float32)}
    info = {"start_id": start} if start is not None else {}
    return Segment(run_id="r", worker_id=worker, episode_id=episode, seq=episode * 10 + index,
                   index_in_episode=index, first_step=index * t, policy_version=version, arrays=arrays,
                   episode_done=done, info=info, evaluation=evaluation)


def test_steps_memory_waits_for_the_steps_of_all_workers_and_drops_stale_data():
    mem = StepsMemory(rollout_steps_per_update=10, max_policy_lag=1)
    mem.set_policy_version(3)
    assert mem.append(seg("a", version=3)) == 4 and not mem.ready()
    assert mem.append(seg("b", version=1)) == 0  # 2 versions old: over the lag cap
    assert mem.counters["stale_dropped"] == 1 and mem.counters["stale_steps"] == 4
    assert mem.append(seg("evaluation", version=3, evaluation=True)) == 0
    mem.append(seg("b", version=2, done=False))
    assert not mem.ready()
    mem.append(seg("c", version=3))
    assert mem.ready()
    mem.set_policy_version(4)  # the version-2 rollout is now 2 behind: dropped before the take
    assert not mem.ready() and len(mem) == 8
    mem.append(seg("d", version=4))
    batch = mem.take()
    assert batch.steps == 12 and len(mem) == 0 and not mem.ready()
    assert batch.stats["memory/stale_dropped"] == 2 and batch.stats["memory/skipped_evaluation"] == 1


def test_steps_memory_keeps_one_step_segments_and_ppo_trains_on_them():
    """An episode of length 1 mod segment_max_steps ends in a 1-step segment: PPO keeps it."""
    from rulka.agents.policy.settings import make_agent

    mem = StepsMemory(rollout_steps_per_update=5)
    assert mem.append(seg("a", t=4, done=False)) == 4
    assert mem.append(seg("a", index=1, t=1, done=True)) == 1 and mem.counters["too_short"] == 0
    batch = mem.take()
    assert [len(r) for r in batch.rollouts] == [4, 1]
    cfg = config_from_dict({**CARTPOLE, "training": {"algorithm": "ppo", "seed": 0},
                            "ppo": {"num_minibatches": 2, "update_epochs": 1}})
    metrics = make_agent(cfg, device="cpu").train(batch)
    assert metrics["charts/update_steps"] == 5.0 and np.isfinite(metrics["losses/policy_loss"])


def test_group_memory_gives_exactly_k_episodes_of_one_start():
    mem = GroupMemory(group_size=3)
    # worker a runs start 7, worker b start 9; episodes come in two segments each
    for ep in range(2):
        for w, start in (("a", 7), ("b", 9)):
            mem.append(seg(w, episode=ep, index=0, done=False))
            mem.append(seg(w, episode=ep, index=1, start=start))
    assert not mem.ready()
    mem.append(seg("a", episode=2, index=0, start=7))
    assert mem.ready()
    batch = mem.take()
    assert len(batch.rollouts) == 3 and {r.start_key for r in batch.rollouts} == {("a", 7)}
    assert [len(r) for r in batch.rollouts] == [8, 8, 4]
    assert not mem.ready()
    # starts that never fill a group are bounded (oldest dropped, counted)
    small = GroupMemory(group_size=2, max_pending_episodes=2)
    for start in range(3):
        small.append(seg("a", episode=start, start=start))
    assert len(small.buckets) == 2 and small.counters["dropped_partial_groups"] == 1
    # a lost middle segment drops its episode (counted), never a half trajectory
    mem.append(seg("c", episode=0, index=0, done=False))
    mem.append(seg("c", episode=0, index=2, start=1))
    assert mem.counters["episode_gaps"] == 1


def test_pair_memory_online_best_and_worst_then_removed():
    mem = PairMemory(pair_buffer_max=3)
    for ep, r in enumerate([1.0, 5.0]):
        mem.append(seg(episode=ep, reward=r))
    batch = mem.take()
    assert [x.score for x in batch.rollouts] == [20.0, 4.0] and len(mem.buffer) == 0
    for ep, r in enumerate([2.0, 2.0], start=2):
        mem.append(seg(episode=ep, reward=r))
    assert not mem.ready()  # best and worst coincide: no pair
    for ep, r in enumerate([3.0, 4.0], start=4):
        mem.append(seg(episode=ep, reward=r))  # FIFO of 3: the first 2.0 episode is evicted
    assert len(mem.buffer) == 3 and mem.counters["fifo_evicted"] == 1
    chosen, rejected = mem.take().rollouts
    assert (chosen.score, rejected.score) == (16.0, 8.0) and [r.score for r in mem.buffer] == [12.0]


def test_pair_memory_pairs_episodes_of_one_start_by_default():
    """Start 7 (worker a: scores 20, 8, 40) holds the best and start 9 (worker b: 4, 16) the
    worst: across starts (40, 4) would be the pair; within one start the pairs are (40, 8) of
    start 7, then (16, 4) of start 9. ``within_start=False`` pairs the whole buffer as before."""
    def fill(mem):
        for ep, (w, start, r) in enumerate([("a", 7, 5.0), ("b", 9, 1.0), ("a", 7, 2.0), ("b", 9, 4.0),
                                            ("a", 7, 10.0)]):
            mem.append(seg(w, episode=ep, reward=r, start=start))
    mem = PairMemory(pair_buffer_max=8)
    fill(mem)
    first = [r.score for r in mem.take().rollouts]
    assert first == [40.0, 8.0]
    assert [r.score for r in mem.take().rollouts] == [16.0, 4.0]
    assert not mem.ready() and [r.score for r in mem.buffer] == [20.0]
    across = PairMemory(pair_buffer_max=8, within_start=False)
    fill(across)
    assert [r.score for r in across.take().rollouts] == [40.0, 4.0]


def test_dpo_keeps_its_reference_and_regresses_v_on_discounted_returns():
    """Default: the reference stays fixed over many pairs (the margin grows from 0 as the policy
    moves); the value term's target is the discounted return, not the recorded values."""
    from rulka.agents.policy.settings import make_agent

    cfg = config_from_dict({**CARTPOLE, "training": {"algorithm": "dpo", "seed": 0, "lr_schedule": [[0, 1e-2]]},
                            "dpo": {"dpo_update_epochs": 1, "dpo_vf_coef": 1.0}})
    agent = make_agent(cfg, device="cpu")
    assert agent.hp.ref_sync_every_updates == 50
    margins = []
    for _i in range(3):
        mem = PairMemory()
        good, bad = seg(episode=0, reward=2.0), seg(episode=1, reward=1.0)
        good.arrays["action"][:] = 1
        mem.append(good)
        mem.append(bad)
        margins.append(agent.train(mem.take())["losses/dpo_margin"])
    assert margins[0] == 0.0 and margins[2] > margins[1] > 0.0
    # the value loss is against G_t of each 4-step episode (per-step rewards 2 and 1, the rollout gamma)
    from rulka.agents.policy.losses import discounted_returns

    mem = PairMemory()
    mem.append(seg(episode=0, reward=2.0))
    mem.append(seg(episode=1, reward=1.0))
    batch = mem.take()
    data = agent._states(batch.rollouts)
    with torch.no_grad():
        v = agent.net(data.img, data.flt)[1]
    g = np.concatenate([discounted_returns(r.reward, r.gamma) for r in batch.rollouts])
    expected = float(((v.numpy() - g) ** 2).mean())
    agent.hp.update_epochs = 1
    assert agent.train(batch)["losses/value_loss"] == pytest.approx(expected, rel=1e-5)


def test_pair_memory_both_mode_alternates_offline_and_online(tmp_path):
    good, bad = seg(episode=100, reward=3.0), seg(episode=101, reward=-1.0)
    write_episode(tmp_path / "good.rulka-episode", [good])
    write_episode(tmp_path / "bad.rulka-episode", [bad])
    append_pair(tmp_path / "pairs.jsonl", tmp_path / "good.rulka-episode", tmp_path / "bad.rulka-episode")
    line = json.loads((tmp_path / "pairs.jsonl").read_text())
    assert line == {"chosen": "good.rulka-episode", "rejected": "bad.rulka-episode"}
    mem = PairMemory(data_mode="both", offline_pairs=offline_pair_loader(tmp_path / "pairs.jsonl"))
    assert mem.ready()  # fewer than two online episodes: offline
    assert mem.take().rollouts[0].score == 12.0
    mem.append(seg(episode=0, reward=1.0))
    mem.append(seg(episode=1, reward=2.0))
    assert mem.take().rollouts[0].score == 12.0  # odd pair-update index: offline again
    assert mem.take().rollouts[0].score == 8.0  # even: online pair from the buffer
    assert len(mem.buffer) == 0


def test_episode_files_are_inert_and_refuse_garbage(tmp_path):
    path = write_episode(tmp_path / "e.rulka-episode", [seg(index=0, done=False), seg(index=1)])
    assert [s.index_in_episode for s in read_episode(path)] == [0, 1]
    assert b"pickle" not in path.read_bytes()
    bad = tmp_path / "bad.rulka-episode"
    bad.write_bytes(b"\x80\x04K\x01.")  # a pickle of the integer 1
    with pytest.raises(BadInput):
        read_episode(bad)
    (tmp_path / "pairs.jsonl").write_text('{"chosen": "bad.rulka-episode", "rejected": "e.rulka-episode"}\nnot json\n')
    with pytest.raises(Exception, match="no readable pair"):
        offline_pair_loader(tmp_path / "pairs.jsonl")(0.99)


def test_memory_files_round_trip(tmp_path):
    mem = GroupMemory(group_size=2)
    mem.append(seg("a", episode=0, start=1))
    mem.set_policy_version(5)
    mem.save(tmp_path)
    again = GroupMemory(group_size=2)
    again.load(tmp_path)
    assert again.policy_version == 5 and len(again) == 4 and again.frames_played == 4
    again.append(seg("a", episode=1, start=1, version=5))
    assert again.ready() and len(again.take().rollouts) == 2


CARTPOLE = {"environment": {"backend": "gym", "gym_id": "CartPole-v1"}, "nn": {"vis": {"no_image": True},
            "float": {"mlp": {"hidden_dim": 16}}, "decoder": {"dense_hidden_dimension": 32}}}


@pytest.mark.parametrize("algorithm", ["ppo", "grpo", "dpo"])
def test_each_learner_trains_and_checkpoints_without_pickle(tmp_path, algorithm):
    from rulka.agents.policy.settings import make_agent, make_memory
    from rulka.trainer import checkpoint_store as ckpt

    cfg = config_from_dict({**CARTPOLE, "training": {"algorithm": algorithm, "seed": 1},
                            "ppo": {"rollout_steps_per_update": 8}, "grpo": {"grpo_group_size": 2,
                            "grpo_ref_kl_coef": 0.1, "grpo_ref_sync_every_updates": 2}})
    assert cfg.trainer.publish_every_updates == 1  # on-policy: every update reaches the workers
    agent, memory = make_agent(cfg, device="cpu"), make_memory(cfg)
    for ep, r in enumerate([1.0, 3.0, 2.0, 0.5]):
        memory.append(seg(episode=ep, reward=r))
    batch = memory.take()
    metrics = agent.train(batch)
    assert all(np.isfinite(v) for v in metrics.values()) and agent.updates == 1
    folder = ckpt.write_checkpoint(tmp_path, 1, agent.state_dict(), {"x": 1}, memory)
    state, _ = ckpt.read_checkpoint(folder)
    other = make_agent(cfg, device="cpu", seed=2)
    other.load_state_dict(state)
    for a, b in zip(agent.net.parameters(), other.net.parameters()):
        assert torch.equal(a, b)
    assert other.updates == 1 and not list(tmp_path.rglob("*.pkl"))


def test_grpo_pushes_up_the_better_trajectory():
    from rulka.agents.policy.settings import make_agent

    cfg = config_from_dict({**CARTPOLE, "training": {"algorithm": "grpo", "seed": 0,
                            "lr_schedule": [[0, 1e-2]]}, "grpo": {"grpo_group_size": 2, "grpo_ent_coef": 0.0}})
    agent = make_agent(cfg, device="cpu")
    good, bad = seg(episode=0, reward=2.0), seg(episode=1, reward=1.0)
    good.arrays["action"][:] = 1  # the better trajectory pushed action 1 everywhere
    mem = GroupMemory(group_size=2)
    mem.append(good)
    mem.append(bad)
    batch = mem.take()
    p_before = agent.get_actor().distribution(np.zeros(4, np.float32))[0][1]
    agent.train(batch)
    assert agent.get_actor().distribution(np.zeros(4, np.float32))[0][1] > p_before


def test_grpo_clipped_uses_the_behaviour_logprobs_and_the_exact_reference_kl():
    """``grpo_objective: clipped``: the first pass's ratio is pi / behaviour (the recorded
    log-prob, here 0.69 below a near-uniform pi = 0.5: ratio ~2, clipped), and the reference KL is
    exactly 0 while the policy equals its reference, then positive after the update."""
    from rulka.agents.policy.settings import make_agent

    cfg = config_from_dict({**CARTPOLE, "training": {"algorithm": "grpo", "seed": 0, "lr_schedule": [[0, 1e-2]]},
                            "grpo": {"grpo_group_size": 2, "grpo_ent_coef": 0.0, "grpo_objective": "clipped",
                                     "grpo_update_epochs": 1, "grpo_ref_kl_coef": 1.0}})
    agent = make_agent(cfg, device="cpu")
    assert agent.hp.objective == "clipped"
    good, bad = seg(episode=0, reward=2.0), seg(episode=1, reward=1.0)
    for s_ in (good, bad):
        s_.arrays["extra/logprob"][:] = np.log(0.25)  # the behaviour gave the taken action 1/4
    mem = GroupMemory(group_size=2)
    mem.append(good)
    mem.append(bad)
    m = agent.train(mem.take())
    assert m["losses/ref_kl"] == 0.0  # first pass: policy == reference
    assert m["losses/clipfrac"] == 1.0  # ratio ~0.5 / 0.25 = 2 for every step
    batch = GroupMemory(group_size=2)
    batch.append(seg(episode=2, reward=2.0))
    batch.append(seg(episode=3, reward=1.0))
    m2 = agent.train(batch.take())
    assert m2["losses/ref_kl"] > 0.0
    no_logp = seg(episode=4)
    del no_logp.arrays["extra/logprob"]
    mem3 = GroupMemory(group_size=2)
    mem3.append(no_logp)
    mem3.append(seg(episode=5, reward=3.0))
    with pytest.raises(ValueError, match="behaviour log-probs"):
        agent.train(mem3.take())


def test_ppo_through_the_trainer_and_workers(tmp_path):
    """The real worker -> link -> trainer path: actors record log pi and V, the trainer publishes
    after every PPO update and reports policy lag; a resumed run keeps its learner state."""
    from rulka.local import run_local

    cfg = load_config("configs/cartpole_ppo.yaml", ["ppo.rollout_steps_per_update=256", "worker.segment_max_steps=64"])
    result = run_local(cfg, n_workers=2, run_dir=tmp_path / "run", max_updates=4, max_seconds=120)
    assert result.trainer["updates"] >= 4 and result.trainer["version"] >= 5
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(line)["metrics"] for line in lines]
    assert any("losses/approx_kl" in m for m in metrics) and any("perf/policy_lag_max" in m for m in metrics)
    assert max(m.get("memory/segments", 0) for m in metrics) > 0


def test_dpo_pair_command_records_two_runs_and_the_memory_reads_the_pairs(tmp_path, capsys):
    from rulka.agents.policy.settings import make_agent
    from rulka.cli import main
    from rulka.envs.sim.policy import save_policy

    cfg = config_from_dict({**CARTPOLE, "training": {"algorithm": "dpo", "seed": 0}})
    for name, seed in (("good", 0), ("bad", 1)):  # two "runs": two saved policies
        agent = make_agent(cfg, device="cpu", seed=seed)
        (tmp_path / name).mkdir()
        save_policy(tmp_path / name / "policy.safetensors", agent.actor_weights(),
                    {**agent.actor_spec(), "run_config_json": json.dumps(cfg.to_dict(), default=str)})
    pairs = tmp_path / "pairs" / "pairs.jsonl"
    assert main(["dpo", "pair", "--chosen", str(tmp_path / "good"), "--rejected", str(tmp_path / "bad"),
                 "--out", str(pairs)]) == 0
    assert main(["dpo", "pair", "--chosen", str(pairs.parent / "chosen-0.rulka-episode"),
                 "--rejected", str(pairs.parent / "rejected-0.rulka-episode"), "--out", str(pairs)]) == 0
    lines = [json.loads(line) for line in pairs.read_text().splitlines()]
    assert lines == [{"chosen": "chosen-0.rulka-episode", "rejected": "rejected-0.rulka-episode"}] * 2
    loaded = offline_pair_loader(pairs, n_actions=2)(0.99)
    assert len(loaded) == 2 and len(loaded[0][0]) > 0
    assert main(["dpo", "pair", "--chosen", str(pairs), "--rejected", str(pairs), "--out", str(pairs)]) == 2
    assert "cannot read policy file" in capsys.readouterr().err  # one line, no traceback


def test_sim_image_path_acts_and_trains(tmp_path):
    """The simulator with the camera image: the worker's obs arrays (obs/img, obs/float,
    obs/potential) go through the rollout builder into a PPO update on the CNN actor-critic."""
    from rulka.agents.policy.settings import make_agent, make_memory
    from rulka.envs.sim.env import SimTrackEnv
    from rulka.plugins import obs_to_arrays

    cfg = load_config("configs/sim_ppo.yaml",
                      ["nn.vis.no_image=false", "ppo.rollout_steps_per_update=16", "ppo.num_minibatches=2"])
    agent, memory = make_agent(cfg, device="cpu", seed=0), make_memory(cfg)
    assert agent.spec.uses_image and agent.spec.float_dim == cfg.float_input_dim
    actor, env = agent.get_actor(), SimTrackEnv(config=cfg)
    obs, info = env.reset(seed=0)
    frames, actions, extras, rewards = [obs_to_arrays(obs, info)], [], [], []
    for _ in range(16):
        action, extra = actor.act_with_info(obs)
        obs, r, _, _, info = env.step(action)
        frames.append(obs_to_arrays(obs, info))
        actions.append(action)
        extras.append(extra)
        rewards.append(r)
    arrays = {k: np.stack([f[k] for f in frames]) for k in frames[0]}
    assert arrays["obs/img"].dtype == np.uint8 and "obs/potential" in arrays
    arrays.update({"action": np.asarray(actions), "reward": np.asarray(rewards, np.float32),
                   "terminated": np.zeros(16, bool), "truncated": np.zeros(16, bool),
                   "extra/logprob": np.asarray([e["logprob"] for e in extras]),
                   "extra/value": np.asarray([e["value"] for e in extras])})
    memory.append(Segment(run_id="r", worker_id="w", episode_id=0, seq=0, index_in_episode=0, first_step=0,
                          policy_version=0, arrays=arrays))
    metrics = agent.train(memory.take())
    assert np.isfinite(metrics["losses/policy_loss"]) and metrics["charts/update_steps"] == 16


def test_optimiser_defaults_are_the_config_models():
    from rulka.agents.policy.base import OptimHyper
    from rulka.agents.policy.settings import optim_from_config
    from rulka.config import RulkaConfig

    assert OptimHyper() == optim_from_config(RulkaConfig())  # one home for each default
