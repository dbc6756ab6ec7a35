"""Learning from demonstrations with IQN (DQfD, Hester et al. 2018): the large-margin loss against
hand-computed values, the demonstration replay that keeps every recorded transition, the loss an
IQN update adds for it (``pretrain.*``), and ``rulka pretrain bc --objective dqfd``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from test_pretrain import SMALL_NN  # the same tiny network as the behaviour-cloning tests

from rulka.cli import main
from rulka.config import load_config
from rulka.errors import ConfigError
from rulka.pretrain.data import load_steps, record_scripted
from rulka.pretrain.dqfd import DemoLoss, load_demo_memory, margin_loss


def write_config(tmp_path, algorithm: str = "iqn", **extra) -> str:
    data = {"environment": {"backend": "sim", "track": "default", "temporal_mini_race_duration_ms": 3000},
            "training": {"algorithm": algorithm, "batch_size": 32}, "nn": SMALL_NN, **extra}
    path = tmp_path / f"{algorithm}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demos")
    return record_scripted(load_config(write_config(tmp)), tmp / "ep", 2, seed=0, start_noise=1.0)


def test_margin_loss_by_hand():
    q = torch.tensor([[1.0, 2.0, 0.5], [3.0, 1.0, 2.9], [1.0, 2.0, 0.5]], requires_grad=True)
    expert = torch.tensor([1, 0, 0])
    loss = margin_loss(q, expert, 0.8)
    # row 0: q + l = [1.8, 2.0, 1.3], max 2.0 (the expert's own) - 2.0 = 0: ahead by more than the margin
    # row 1: q + l = [3.0, 1.8, 3.7], max 3.7 - 3.0 = 0.7: action 2 is within the margin
    # row 2: q + l = [1.0, 2.8, 1.3], max 2.8 - 1.0 = 1.8: action 1 is ahead of the expert's
    torch.testing.assert_close(loss, torch.tensor([0.0, 0.7, 1.8]))
    loss.sum().backward()
    # the gradient lowers the offending action and raises the expert's; a satisfied row gets none
    torch.testing.assert_close(q.grad, torch.tensor([[0.0, 0.0, 0.0], [-1.0, 0.0, 1.0], [-1.0, 1.0, 0.0]]))
    # margin 0: the plain "expert action is the max" hinge, zero for row 1 (3.0 > 2.9)
    torch.testing.assert_close(margin_loss(q.detach(), expert, 0.0), torch.tensor([0.0, 0.0, 1.0]))


def test_demo_memory_keeps_every_recorded_transition(tmp_path, episodes):
    cfg = load_config(write_config(tmp_path))
    memory = load_demo_memory(cfg, [episodes[0].parent], seed=0)
    steps = load_steps(episodes, with_images=False)
    assert len(memory) == len(steps)  # one transition per recorded action, none held out
    assert len(memory.test) == 0
    batch = memory.sample(64)
    # every sampled transition is a recorded (state, action) pair: the float state minus the
    # mini-race slot 0, which the memory draws per item
    recorded = {(tuple(np.round(f[1:], 4)), int(a)) for f, a in zip(steps.floats, steps.actions, strict=True)}
    assert all((tuple(np.round(f[1:], 4)), int(a)) in recorded
               for f, a in zip(batch.state_float, batch.action, strict=True))


class FixedMemory:
    def __init__(self, batch):
        self.batch = batch

    def sample(self, batch_size):
        return self.batch


def test_demo_loss_is_the_weighted_sum_of_td_and_margin_terms(tmp_path, episodes):
    from rulka.agents.iqn.settings import make_agent

    cfg = load_config(write_config(tmp_path))
    agent = make_agent(cfg, device="cpu", seed=0)
    batch = load_demo_memory(cfg, episodes, seed=0).sample(16)
    fixed = FixedMemory(batch)

    def value(td_weight, margin_weight):
        torch.manual_seed(5)  # the same quantile fractions in every call
        loss, metrics = DemoLoss(fixed, batch_size=16, margin=0.8, td_weight=td_weight,
                                 margin_weight=margin_weight)(agent)
        return loss, metrics

    td, m_td = value(1.0, 0.0)
    mg, _ = value(0.0, 1.0)
    both, metrics = value(2.0, 3.0)
    torch.testing.assert_close(both, 2.0 * td + 3.0 * mg)
    # the terms are sums over the 16 items; the metrics report their means
    torch.testing.assert_close(td / 16, m_td["losses/demo_td_loss"])
    torch.testing.assert_close(mg / 16, metrics["losses/demo_margin_loss"])
    # the margin term by hand from the network's quantile-mean Q at the same fractions
    torch.manual_seed(5)
    per_item, _, _, q, _ = agent._loss(batch)
    q_mean = q.reshape(agent.hp.iqn_n, 16, -1).mean(0)
    expected = (q_mean + 0.8).scatter(1, torch.from_numpy(batch.action)[:, None], q_mean.gather(
        1, torch.from_numpy(batch.action)[:, None])).max(1).values - q_mean.gather(
        1, torch.from_numpy(batch.action)[:, None])[:, 0]
    torch.testing.assert_close(mg, expected.sum())
    torch.testing.assert_close(td, per_item.sum())


def test_run_config_adds_the_demo_loss_to_every_update(tmp_path, episodes):
    from rulka.agents.iqn.settings import make_agent, make_memory

    demo = str(episodes[0].parent)
    cfg = load_config(write_config(tmp_path, pretrain={"demo_episodes": demo, "demo_batch_size": 8}))
    agent = make_agent(cfg, device="cpu", seed=0)
    assert isinstance(agent.auxiliary_loss, DemoLoss) and agent.auxiliary_loss.batch_size == 8
    # the agent's own replay: a recorded episode stands in for a worker's
    memory = make_memory(load_config(write_config(tmp_path)), seed=0)
    from rulka.agents.policy.episodes import read_episode

    for seg in read_episode(episodes[1]):
        memory.append(seg)
    metrics = agent.train(memory.sample(32))
    assert {"losses/demo_td_loss", "losses/demo_margin_loss", "charts/demo_expert_action_top"} <= set(metrics)
    # with both weights 0 the update is the plain IQN update (same seeds, same batch)
    plain = make_agent(load_config(write_config(tmp_path)), device="cpu", seed=0)
    zero = make_agent(load_config(write_config(tmp_path, pretrain={
        "demo_episodes": demo, "margin_loss_weight": 0.0, "demo_td_loss_weight": 0.0})), device="cpu", seed=0)
    batch = memory.sample(32)
    for a in (plain, zero):
        torch.manual_seed(1)
        a.train(batch)
    for (name, p), q in zip(plain.online.named_parameters(), zero.online.parameters(), strict=True):
        torch.testing.assert_close(p, q, msg=name)
    # and with the margin weighted, it is not
    weighted = make_agent(load_config(write_config(tmp_path, pretrain={"demo_episodes": demo})), device="cpu", seed=0)
    torch.manual_seed(1)
    weighted.train(batch)
    assert any(not torch.equal(p, q) for p, q in zip(plain.online.parameters(), weighted.online.parameters(),
                                                     strict=True))


def test_the_trainer_builds_the_demo_loss_for_a_run_without_a_seed(tmp_path, episodes):
    """`rulka run` builds the agent from the config alone, and training.seed is null (random) unless a
    user sets it: demonstrations must load then too (they once failed with int(None))."""
    from rulka.plugins import build_plugin

    cfg = load_config(write_config(tmp_path, pretrain={"demo_episodes": str(episodes[0].parent)}))
    assert cfg.training.seed is None
    agent = build_plugin("agent", "iqn", cfg=cfg)
    assert isinstance(agent.auxiliary_loss, DemoLoss)
    assert len(agent.auxiliary_loss.memory) == len(load_steps(episodes, with_images=False))
    assert agent.auxiliary_loss.memory.sample(8).action.shape == (8,)


def test_demo_episodes_is_refused_for_learners_that_do_not_read_it(tmp_path, episodes):
    from rulka.config.built import check_built

    with pytest.raises(ConfigError, match="pretrain.demo_episodes"):
        check_built(load_config(write_config(tmp_path, "ppo", pretrain={"demo_episodes": str(episodes[0].parent)})))


def test_pretrain_dqfd_cli_writes_heads_that_rank_the_recorded_action_first(tmp_path, episodes):
    config = write_config(tmp_path)
    out = tmp_path / "dqfd"
    assert main(["pretrain", "bc", config, str(episodes[0].parent), "--out", str(out), "--objective", "dqfd",
                 "--updates", "300", "--lr", "2e-3"]) == 0
    summary = json.loads((out / "bc_summary.json").read_text())
    steps = load_steps(episodes, with_images=False)
    majority = np.bincount(steps.actions).max() / len(steps)
    assert summary["objective"] == "dqfd" and summary["transitions"] == len(steps)
    assert summary["last_margin_loss"] < 0.5 * summary["first_margin_loss"]
    assert summary["greedy_accuracy"] > majority + 0.2, (summary, majority)
    # the RL learner starts from every tensor of it
    from rulka.agents.iqn.settings import make_agent

    agent = make_agent(load_config(config, overrides=[f"nn.init_from_pretrained={out}"]), device="cpu", seed=1)
    assert agent.prepared["loaded"] == sorted(agent.online.state_dict())
