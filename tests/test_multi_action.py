"""Multi-action blocks (``environment.rl_action_offsets_ms``, ``exploration.multi_action_exploration``):
the block wrapper (reward sum, early end), the simulator's 10 ms steps, the action-branching
target and loss against hand-computed values, both exploration modes against hand-computed
expectations, N-action segments through the codec and the replay memory, and the config checks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from rulka.agents.iqn import IQNActor, IQNAgent, IQNHyper, IQNNetworkSpec
from rulka.agents.iqn import agent as agent_module
from rulka.agents.iqn.branching import BranchedDuelingHead, branched_next_value
from rulka.agents.iqn.loss import greedy_next_value
from rulka.agents.iqn.replay import MiniRaceReplayMemory, ReplayBatch
from rulka.agents.iqn.reset import last_layer_names
from rulka.compress import make_compressor
from rulka.config import config_from_dict, load_config
from rulka.config.built import NOT_BUILT, check_built
from rulka.envs.multi_action import ActionBlockEnv
from rulka.errors import BadInput, ConfigError
from rulka.plugins import make_env
from rulka.segment import Segment


class CountingEnv(gym.Env):
    """Discrete(3); reward of a step = action + 1; the episode terminates at step ``end``."""

    def __init__(self, end: int = 7) -> None:
        self.action_space = spaces.Discrete(3)
        self.observation_space = spaces.Box(0, 100, shape=(1,), dtype=np.float32)
        self.end = end
        self.seen: list[int] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seen = []
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.seen.append(int(action))
        n = len(self.seen)
        return np.full(1, n, np.float32), float(action + 1), n >= self.end, False, {"step": n}


# ---------------------------------------------------------------------------------- the wrapper
def test_block_sums_rewards_in_order_and_stops_at_the_episode_end():
    env = ActionBlockEnv(CountingEnv(end=7), 3)
    assert env.action_space == spaces.MultiDiscrete([3, 3, 3])
    env.reset()
    obs, reward, terminated, truncated, info = env.step([0, 1, 2])
    assert reward == 1 + 2 + 3 and obs[0] == 3 and not terminated
    assert info == {"step": 3, "block_steps": 3, "block_cut": False}
    env.step(np.array([2, 2, 2]))  # steps 4-6: 9
    obs, reward, terminated, truncated, info = env.step([1, 0, 0])  # step 7 ends the episode
    assert terminated and reward == 2 and obs[0] == 7
    assert info["block_steps"] == 1 and info["block_cut"] is True
    assert env.unwrapped.seen == [0, 1, 2, 2, 2, 2, 1]  # the rest of the cut block is not applied
    assert (env.blocks, env.cut_blocks) == (3, 1)


def test_block_truncation_and_bad_blocks():
    env = ActionBlockEnv(gym.wrappers.TimeLimit(CountingEnv(end=100), max_episode_steps=5), 4)
    env.reset()
    env.step([0, 0, 0, 0])
    _, reward, terminated, truncated, info = env.step([2, 2, 2, 2])
    assert truncated and not terminated and reward == 3 and info["block_steps"] == 1 and info["block_cut"]
    env.reset()
    for bad in ([0, 0, 0], [0, 0, 0, 3], [0.5, 0, 0, 0]):
        with pytest.raises(ValueError):
            env.step(bad)
    assert env.unwrapped.seen == []  # nothing stepped by a refused block


def test_simulator_runs_10_ms_steps_in_50_ms_blocks():
    single = make_env(config_from_dict({"nn": {"vis": {"no_image": True}}}))
    multi = make_env(config_from_dict({"nn": {"vis": {"no_image": True}},
                                       "environment": {"rl_action_offsets_ms": [0, 10, 20, 30, 40]}}))
    assert not isinstance(single, ActionBlockEnv) and single.unwrapped.steps_per_action == 5
    assert isinstance(multi, ActionBlockEnv) and multi.unwrapped.steps_per_action == 1
    for env, action in ((single, 0), (multi, [0] * 5)):
        env.reset(seed=0)
        _, _, _, _, info = env.step(action)
        assert info["race_time_ms"] == 50  # one decision: 5 x 10 ms either way
        env.close()


def test_tmnf_steps_10_ms_per_action_in_blocks():
    """The TMNF backend's step period follows environment.ms_per_action (10 ms with blocks): with
    rulka's fake game in lock-step, each 5-action block is 50 ms of race time."""
    cfg = load_config("configs/tmnf_fake.yaml", overrides=["environment.rl_action_offsets_ms=[0,10,20,30,40]"],
                      env_file=None)
    env = make_env(cfg)
    try:
        assert isinstance(env, ActionBlockEnv)
        env.reset(seed=0)
        times = [env.step([0, 0, 0, 0, 0])[4]["race_time_ms"] for _ in range(4)]
    finally:
        env.close()
    assert times == [50, 100, 150, 200]


# ---------------------------------------------------------------------------------- the learner
class FixedQ(torch.nn.Module):
    """Stands in for a network: Q(item b, column c, tau) = base[b, c] + tau."""

    def __init__(self, base) -> None:
        super().__init__()
        self.base = torch.tensor(base, dtype=torch.float32)

    def forward(self, img, floats, taus):
        n = taus.numel() // self.base.shape[0]
        return self.base.repeat(n, 1) + taus[:, None]


def fixed_taus(b, n, *, generator=None, device="cpu"):
    assert n == 2
    return torch.tensor([0.25] * b + [0.75] * b, device=device)


SPEC2 = IQNNetworkSpec(float_dim=3, n_actions=3, float_hidden_dim=16, dense_hidden_dimension=32,
                       embedding_dimension=8, n_action_branches=2)


def branch_batch(action, reward, gamma):
    b = len(reward)
    return ReplayBatch(state_img=None, state_float=np.zeros((b, 3), np.float32), action=np.asarray(action),
                       reward=np.asarray(reward, np.float32), next_img=None, next_float=np.zeros((b, 3), np.float32),
                       gamma=np.asarray(gamma, np.float32), weights=np.ones(b, np.float32), slots=np.arange(b))


def test_branching_target_is_the_mean_of_the_branches_greedy_values(monkeypatch):
    """BDQ's target y = r + gamma (1/N) sum_d max_a Q_d(s', a), per quantile fraction."""
    monkeypatch.setattr(agent_module, "stratified_mirrored_taus", fixed_taus)
    agent = IQNAgent(SPEC2, IQNHyper(iqn_n=2, iqn_k=2, mini_race_actions=None), seed=0)
    # next states: item 0 branches [1, 5, 2] and [4, 0, 3] (max 5 and 4: mean 4.5);
    # item 1 [-1, -2, -3] and [0, 2, 1] (max -1 and 2: mean 0.5)
    agent.target = FixedQ([[1, 5, 2, 4, 0, 3], [-1, -2, -3, 0, 2, 1]])
    _, _, target, _, taus = agent._loss(branch_batch([[0, 0], [0, 0]], [1.0, 2.0], [0.5, 0.9]))
    assert taus.tolist() == [[0.25, 0.75], [0.25, 0.75]]
    np.testing.assert_allclose(target.numpy(), [[1 + 0.5 * 4.75, 1 + 0.5 * 5.25], [2 + 0.9 * 0.75, 2 + 0.9 * 1.25]],
                               rtol=1e-6)
    # Double DQN: the online net picks each branch's action (2 and 0 for item 0: values 2 and 4)
    ddqn = IQNAgent(SPEC2, IQNHyper(iqn_n=2, iqn_k=2, mini_race_actions=None, use_ddqn=True), seed=0)
    ddqn.target = agent.target
    ddqn.online = FixedQ([[0, 0, 9, 9, 0, 0], [9, 0, 0, 0, 0, 9]])
    target = ddqn._loss(branch_batch([[0, 0], [0, 0]], [0.0, 0.0], [1.0, 1.0]))[2]
    np.testing.assert_allclose(target.numpy(), [[3.25, 3.75], [0.25, 0.75]])  # (2+4)/2, (-1+1)/2, + tau


def test_branching_loss_is_the_mean_of_the_branch_losses(monkeypatch):
    """One item, 2 branches of 2 actions, n = 2 quantiles at 0.25 / 0.75, kappa 1 (hand-computed)."""
    monkeypatch.setattr(agent_module, "stratified_mirrored_taus", fixed_taus)
    spec = IQNNetworkSpec(float_dim=3, n_actions=2, float_hidden_dim=16, dense_hidden_dimension=32,
                          embedding_dimension=8, n_action_branches=2)
    agent = IQNAgent(spec, IQNHyper(iqn_n=2, iqn_k=2, iqn_kappa=1.0, mini_race_actions=None), seed=0)
    agent.target = FixedQ([[0, 2, 1, 0]])  # next value: mean(2, 1) + tau -> targets 1.75, 2.25
    agent.online = FixedQ([[1, 0, 0, 3]])  # taken (0, 1): branch 0 at 1 + tau, branch 1 at 3 + tau
    per_item, online, target, _, _ = agent._loss(branch_batch([[0, 1]], [0.0], [1.0]))
    assert target.tolist() == [[1.75, 2.25]]
    assert online.tolist() == [[[1.25, 1.75], [3.25, 3.75]]]
    # branch 0: pairs (target 1.75: 0.5^2/2 x 0.25, 0) and (2.25: 0.5 x 0.25, 0.5^2/2 x 0.75) -> mean 0.125
    # branch 1: (1.75: 1.0 x 0.75, 1.5 x 0.25) and (2.25: 0.5 x 0.75, 1.0 x 0.25) -> mean 0.875
    assert per_item.tolist() == pytest.approx([(0.125 + 0.875) / 2])


def test_branched_network_heads_and_helpers():
    torch.manual_seed(0)
    agent = IQNAgent(SPEC2, IQNHyper(iqn_n=4, iqn_k=4, mini_race_actions=None), seed=0)
    head = agent.online.head
    assert isinstance(head, BranchedDuelingHead) and len(head.advantage.branches) == 2
    q = agent.online(None, torch.zeros(5, 3), torch.rand(20))
    assert q.shape == (20, 6)
    # each branch's advantages are centred on their own mean: Q_d - V averages to 0 per branch
    x = torch.randn(7, agent.online.dense_input_dimension)
    v = head.value(x)
    centred = head(x).reshape(7, 2, 3) - v[:, :, None]
    assert torch.allclose(centred.mean(2), torch.zeros(7, 2), atol=1e-6)
    # the IQN reset's last layer is every branch's last layer
    assert last_layer_names(agent.online) == [f"head.advantage.branches.{d}.{n}.{p}" for d in (0, 1)
                                              for n, p in (("2", "weight"), ("2", "bias"))]
    # the shared-value helper: per branch max, then the branch mean
    q_next = torch.tensor([[[[1.0, 5.0, 2.0], [4.0, 0.0, 3.0]]]])  # (n=1, B=1, N=2, A=3)
    assert branched_next_value(q_next, lambda t: greedy_next_value(t, "quantile_max")).tolist() == [[4.5]]


def test_branched_agent_trains_and_its_actor_acts_in_blocks():
    agent = IQNAgent(SPEC2, IQNHyper(iqn_n=4, iqn_k=4, lr_schedule=[[0, 1e-2]], mini_race_actions=None,
                                     epsilon_schedule=[[0, 0.0]], epsilon_boltzmann_schedule=[[0, 0.0]]), seed=0)
    rng = np.random.default_rng(0)
    b = branch_batch(rng.integers(0, 3, (16, 2)), np.full(16, 2.0), np.zeros(16))
    b.state_float = rng.normal(size=(16, 3)).astype(np.float32)
    first = agent.train(b)["losses/td_loss"]
    for _ in range(80):
        last = agent.train(b)["losses/td_loss"]
    assert last < 0.2 * float(first)
    actor = agent.get_actor()
    assert actor.uses_numpy  # the numpy copy handles branch streams
    torch_actor = IQNActor(**agent.actor_spec()["kwargs"], numpy_inference=False)
    torch_actor.load_weights(agent.actor_weights())
    obs = rng.normal(size=3).astype(np.float32)
    np.testing.assert_allclose(actor.q_values(obs, test=True), torch_actor.q_values(obs, test=True), atol=1e-4)
    action, info = actor.act_with_info(obs)
    assert action.shape == (2,) and action.dtype == np.int64 and info["greedy"] is True
    assert action.tolist() == np.argmax(info["q_values"].reshape(2, 3), axis=1).tolist()


# ---------------------------------------------------------------------------------- exploration
@pytest.mark.parametrize("mode", ["per_action", "per_block"])
def test_exploration_counts_match_hand_computed_expectations(mode):
    """20000 blocks of N = 4 actions from A = 3, epsilon 0.3, greedy action 0 in every branch.

    A random action differs from the greedy one with probability 2/3, so in both modes an action
    is non-greedy with probability 0.3 x 2/3 = 0.2 (16000 of 80000 expected). They differ per block:
    per_action, a block is all greedy with probability 0.8^4 = 0.4096 and has exactly one non-greedy
    action with 4 x 0.2 x 0.8^3 = 0.4096; per_block, all greedy with 0.7 + 0.3 / 81 = 0.703704 and
    exactly one non-greedy with 0.3 x 4 x (2/3) x (1/3)^3 = 0.029630."""
    spec = IQNNetworkSpec(float_dim=2, n_actions=3, float_hidden_dim=4, dense_hidden_dimension=8,
                          embedding_dimension=4, n_action_branches=4)
    actor = IQNActor(spec.to_dict(), iqn_k=2, epsilon=0.3, seed=123, multi_action_exploration=mode)
    q = np.tile(np.array([1.0, 0.0, 0.0]), (4, 1))
    blocks, flags = zip(*(actor.choose_block(q) for _ in range(20000)))
    off = np.array(blocks) != 0  # (20000, 4)
    per_block = off.sum(1)
    all_greedy = {"per_action": 0.8 ** 4, "per_block": 0.7 + 0.3 / 81}[mode]
    one_off = {"per_action": 4 * 0.2 * 0.8 ** 3, "per_block": 0.3 * 4 * (2 / 3) * (1 / 3) ** 3}[mode]

    def near(count, p, n):  # within 4 binomial standard deviations
        assert abs(count - n * p) < 4 * np.sqrt(n * p * (1 - p)), (count, n * p)

    near(off.sum(), 0.2, 80000)
    near((per_block == 0).sum(), all_greedy, 20000)
    near((per_block == 1).sum(), one_off, 20000)
    assert list(flags) == list(per_block == 0)
    # greedy (test) blocks never explore
    assert actor.choose_block(q, test=True)[0].tolist() == [0, 0, 0, 0]


def test_per_block_boltzmann_and_mode_check():
    spec = IQNNetworkSpec(float_dim=2, n_actions=3, float_hidden_dim=4, dense_hidden_dimension=8,
                          embedding_dimension=4, n_action_branches=3)
    # Boltzmann only, noise far above the Q gaps: per_block perturbs every action of a block or none
    actor = IQNActor(spec.to_dict(), iqn_k=2, epsilon_boltzmann=0.5, tau_epsilon_boltzmann=100.0, seed=1,
                     multi_action_exploration="per_block")
    q = np.tile(np.array([0.01, 0.0, 0.0]), (3, 1))
    draws = [actor.choose_block(q)[0] for _ in range(400)]
    assert any((d != 0).sum() >= 2 for d in draws)
    with pytest.raises(ValueError):
        IQNActor(spec.to_dict(), iqn_k=2, multi_action_exploration="per_step")


# ---------------------------------------------------------------------------------- segments / replay
def block_segment(t=6, n=5, seed=0, done=True, action=None):
    rng = np.random.default_rng(seed)
    arrays = {"obs/float": rng.normal(size=(t + 1, 4)).astype(np.float32),
              "action": rng.integers(0, 12, (t, n)) if action is None else action,
              "reward": rng.normal(size=t).astype(np.float32), "terminated": np.zeros(t, bool),
              "truncated": np.zeros(t, bool)}
    return Segment(run_id="r", worker_id="w", episode_id=seed, seq=seed, index_in_episode=0, first_step=0,
                   policy_version=1, arrays=arrays, episode_done=done)


def test_segment_with_n_actions_round_trips_and_fills_the_replay(tmp_path):
    seg = block_segment()
    codec = make_compressor("zstd")
    back = codec.decompress(codec.compress(seg))
    assert back.arrays["action"].shape == (6, 5) and back.arrays["action"].dtype == np.int64
    np.testing.assert_array_equal(back.arrays["action"], seg.arrays["action"])
    mem = MiniRaceReplayMemory(batch_size=8, n_steps=2, memory_size_schedule=[[0, (100, 1)]],
                               mini_race_duration_actions=None, buffer_test_ratio=0.0, n_actions=12,
                               n_action_branches=5, seed=0)
    assert mem.append(back) == 6
    batch = mem.sample(32)
    assert batch.action.shape == (32, 5)
    stored = {tuple(a) for a in seg.arrays["action"]}
    assert {tuple(a) for a in batch.action} <= stored
    # verify mode reads the N actions of each transition back
    rows = mem.rebuild_transitions(seg)
    assert [r["action"].tolist() for r in rows] == seg.arrays["action"].tolist()
    from rulka.memory.rebuild_check import first_difference

    assert first_difference(seg, mem) is None  # trainer.verify: what the worker saw is what is stored
    # save / load keeps the (capacity, N) actions
    mem.save(tmp_path / "replay")
    again = MiniRaceReplayMemory(batch_size=8, n_steps=2, memory_size_schedule=[[0, (100, 1)]],
                                 mini_race_duration_actions=None, buffer_test_ratio=0.0, n_actions=12,
                                 n_action_branches=5, seed=0)
    again.load(tmp_path / "replay")
    np.testing.assert_array_equal(again.train.arrays["action"], mem.train.arrays["action"])
    assert again.train.arrays["action"].shape[1:] == (5,)


def test_wrong_action_shapes_are_refused_with_a_clear_error_and_counted():
    mem = MiniRaceReplayMemory(batch_size=8, n_steps=2, memory_size_schedule=[[0, (100, 1)]],
                               mini_race_duration_actions=None, buffer_test_ratio=0.0, n_actions=12,
                               n_action_branches=5, seed=0)
    for action, words in ((np.zeros(6, np.int64), r"shape \(T, 5\); got \(6,\)"),
                          (np.zeros((6, 4), np.int64), r"shape \(T, 5\); got \(6, 4\)"),
                          (np.full((6, 5), 12), "out of range")):
        with pytest.raises(BadInput, match=words):
            mem.append(block_segment(action=action))
    assert mem.counters["rejected"] == 3 and len(mem) == 0
    single = MiniRaceReplayMemory(batch_size=8, n_steps=2, memory_size_schedule=[[0, (100, 1)]],
                                  mini_race_duration_actions=None, buffer_test_ratio=0.0, seed=0)
    with pytest.raises(BadInput, match="rl_action_offsets_ms"):
        single.append(block_segment())
    assert single.counters["rejected"] == 1
    # the codec refuses an action array that is neither (T,) nor (T, N)
    with pytest.raises(BadInput, match="'action' must be"):
        block_segment(action=np.zeros((6, 5, 2), np.int64)).validate()


def test_n_step_and_mini_race_count_blocks():
    """One transition per block: 3-step returns sum 3 blocks' rewards; the mini-race horizon in
    blocks is temporal_mini_race_duration_ms // ms_per_block."""
    t = 4
    seg = block_segment(t=t)
    seg.arrays["reward"] = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    mem = MiniRaceReplayMemory(batch_size=4, n_steps=3, memory_size_schedule=[[0, (100, 1)]],
                               gamma_schedule=[[0, 1.0]], mini_race_duration_actions=None, buffer_test_ratio=0.0,
                               n_action_branches=5, discard_non_greedy_actions_in_nsteps=False, seed=0)
    assert mem.append(seg) == t
    slots = mem.train.slots_back(np.arange(t)[::-1])
    assert mem.train.arrays["rewards"][slots, 2].tolist() == [7.0, 14.0, 12.0, 8.0]
    cfg = config_from_dict({"environment": {"rl_action_offsets_ms": [0, 10, 20, 30, 40],
                                            "temporal_mini_race_duration_ms": 3000}})
    assert (cfg.ms_per_block, cfg.temporal_mini_race_duration_actions) == (50, 60)


# ---------------------------------------------------------------------------------- config
def test_config_builds_both_keys_and_refuses_what_does_not_apply():
    assert "environment.rl_action_offsets_ms" not in NOT_BUILT
    assert "exploration.multi_action_exploration" not in NOT_BUILT
    multi = {"environment": {"rl_action_offsets_ms": [0, 10, 20]}}
    check_built(config_from_dict({**multi, "exploration": {"multi_action_exploration": "per_block"}}))
    for bad in ([10, 20], [0, 20], [0, 10, 10], [0, 15]):
        with pytest.raises(Exception, match="rl_action_offsets_ms|offsets"):
            config_from_dict({"environment": {"rl_action_offsets_ms": bad}})
    for algorithm in ("ppo", "grpo", "dpo"):
        check_built(config_from_dict({**multi, "training": {"algorithm": algorithm}}))
        with pytest.raises(ConfigError, match=f"multi_action_exploration.*the {algorithm} policy samples"):
            check_built(config_from_dict({**multi, "training": {"algorithm": algorithm},
                                          "exploration": {"multi_action_exploration": "per_block"}}))
    for algorithm in ("sac",):  # continuous actions (REDQ is SAC with more critics)
        with pytest.raises(ConfigError, match=f"rl_action_offsets_ms.*iqn, ppo, grpo, dpo learners.*'{algorithm}'"):
            check_built(config_from_dict({"environment": {"rl_action_offsets_ms": [0, 10], "continuous_actions": True},
                                          "nn": {"vis": {"no_image": True}}, "training": {"algorithm": algorithm}}))
    with pytest.raises(ConfigError, match="continuous_actions"):
        check_built(config_from_dict({"environment": {"rl_action_offsets_ms": [0, 10], "continuous_actions": True}}))
    with pytest.raises(ConfigError, match="multi_action_exploration.*one action"):
        check_built(config_from_dict({"exploration": {"multi_action_exploration": "per_block"}}))


def test_config_reaches_the_network_memory_and_actor():
    from rulka.agents.iqn.settings import make_agent, make_memory

    cfg = load_config("configs/sim_iqn.yaml", overrides=["environment.rl_action_offsets_ms=[0,10,20,30,40]",
                                                          "exploration.multi_action_exploration=per_block"],
                      env_file=None)
    agent = make_agent(cfg, device="cpu")
    assert agent.spec.n_action_branches == 5
    assert agent.actor_spec()["kwargs"]["multi_action_exploration"] == "per_block"
    assert agent.get_actor().multi_action_exploration == "per_block"
    assert make_memory(cfg).n_action_branches == 5


# ---------------------------------------------------------------------------------- policy learners
def test_factorised_categorical_logp_entropy_and_kl_by_hand():
    """2 branches of 2 actions: branch 0 logits [0, ln 3] (probabilities 1/4, 3/4), branch 1
    [0, 0] (1/2, 1/2). Block (1, 0): log pi = ln 3/4 + ln 1/2; entropy = H(1/4, 3/4) + ln 2."""
    from rulka.agents.policy.losses import categorical_kl
    from rulka.agents.policy.network import ActorCritic, PolicyNetworkSpec, factored_logp_entropy

    net = ActorCritic(PolicyNetworkSpec(float_dim=2, n_actions=2, trunk_hidden_dim=8, n_action_branches=2))
    logp_all = net.log_probs(torch.tensor([[0.0, np.log(3.0), 0.0, 0.0]]))
    assert logp_all.shape == (1, 2, 2)
    logp, entropy = factored_logp_entropy(logp_all, torch.tensor([[1, 0]]))
    assert logp.item() == pytest.approx(np.log(0.75) + np.log(0.5), rel=1e-6)
    h0 = -(0.25 * np.log(0.25) + 0.75 * np.log(0.75))
    assert entropy.item() == pytest.approx(h0 + np.log(2.0), rel=1e-6)
    # the KL of two factorised policies is the sum of the per-branch KLs (as GRPO takes it)
    ref = net.log_probs(torch.zeros(1, 4))  # uniform in both branches
    kl0 = 0.25 * np.log(0.25 / 0.5) + 0.75 * np.log(0.75 / 0.5)
    assert categorical_kl(logp_all, ref).sum(-1).item() == pytest.approx(kl0, rel=1e-5)


def test_policy_actor_samples_blocks_and_records_their_joint_logprob():
    from rulka.agents.policy.actor import PolicyActor
    from rulka.agents.policy.network import PolicyNetworkSpec

    spec = PolicyNetworkSpec(float_dim=3, n_actions=4, trunk_hidden_dim=16, n_action_branches=3)
    actor = PolicyActor(spec.to_dict(), seed=0)
    obs = np.ones(3, np.float32)
    logp, _ = actor.distribution(obs)
    assert logp.shape == (3, 4)
    block, info = actor.act_with_info(obs)
    assert block.shape == (3,) and block.dtype == np.int64
    assert info["logprob"] == pytest.approx(float(logp[np.arange(3), block].sum()), rel=1e-5)
    greedy, _ = actor.act_with_info(obs, test=True)
    assert greedy.tolist() == np.argmax(logp, axis=1).tolist()


def policy_segment(episode, reward, t=5, n=3, action=None):
    rng = np.random.default_rng(episode)
    arrays = {"obs/x": rng.normal(size=(t + 1, 4)).astype(np.float32),
              "action": rng.integers(0, 2, (t, n)) if action is None else action,
              "reward": np.full(t, reward, np.float32), "terminated": np.array([False] * (t - 1) + [True]),
              "truncated": np.zeros(t, bool), "extra/logprob": np.full(t, -2.0, np.float32),
              "extra/value": np.zeros(t, np.float32)}
    return Segment(run_id="r", worker_id="w", episode_id=episode, seq=episode, index_in_episode=0, first_step=0,
                   policy_version=1, arrays=arrays, episode_done=True, info={"start_id": 7})


@pytest.mark.parametrize("algorithm", ["ppo", "grpo", "dpo"])
def test_policy_learners_train_on_blocks_and_refuse_wrong_shapes(algorithm):
    from rulka.agents.policy.settings import make_agent, make_memory

    cfg = config_from_dict({"environment": {"backend": "gym", "gym_id": "CartPole-v1",
                                            "rl_action_offsets_ms": [0, 10, 20]},
                            "nn": {"vis": {"no_image": True}, "float": {"mlp": {"hidden_dim": 16}},
                                   "decoder": {"dense_hidden_dimension": 32}},
                            "training": {"algorithm": algorithm, "seed": 0},
                            "ppo": {"rollout_steps_per_update": 8},
                            "grpo": {"grpo_group_size": 2, "grpo_ref_kl_coef": 0.1}})
    agent, memory = make_agent(cfg, device="cpu"), make_memory(cfg)
    assert agent.spec.n_action_branches == 3
    with pytest.raises(BadInput, match=r"shape \(T, 3\); got \(5,\)"):
        memory.append(policy_segment(9, 1.0, action=np.zeros(5, np.int64)))
    for ep, r in enumerate([1.0, 3.0, 2.0, 0.5]):
        memory.append(policy_segment(ep, r))
    metrics = agent.train(memory.take())
    assert metrics and all(np.isfinite(float(v)) for v in metrics.values())
    block = agent.get_actor().act(np.zeros(4, np.float32))
    assert block.shape == (3,)
