"""Learning from demonstrations with IQN, after DQfD (Hester et al. 2018, "Deep Q-learning from
Demonstrations", AAAI): the recorded episodes stay in a replay of their own for the whole run, and
on transitions drawn from it the learner minimises, besides the TD loss, the large-margin
supervised loss (the paper's equation 2)

    J_E(Q) = max_a [Q(s, a) + l(a_E, a)] - Q(s, a_E),   l(a_E, a) = margin if a != a_E else 0,

which is zero only when the recorded action a_E is ahead of every other action by at least the
margin (the paper: 0.8), and pushes Q(s, a_E) up and the offending action down otherwise. The
paper's loss is J_DQ + lambda_1 J_n + lambda_2 J_E + lambda_3 J_L2 with lambda_1 = lambda_2 = 1;
here the TD part is IQN's own loss on rulka's n-step mini-race transitions (``IQNAgent._loss``, so
it plays J_DQ and J_n at once), J_E applies to the quantile mean Q(s, a) = mean_i Z_tau_i(s, a)
(the same taus as the TD loss), and weight decay stays the run's ``weight_decay_lr_ratio``. The
paper's pre-training phase (TD + J_E on demonstrations only, before any interaction) is
``pretrain_dqfd`` (``rulka pretrain bc --objective dqfd``); its interaction phase, where the
demonstrations stay in the replay and only they get J_E, is ``DemoLoss`` attached to the run's
``IQNAgent`` (config ``pretrain.*``). Where the paper mixes demonstrations into one prioritised
replay (with a priority bonus), a fixed number of demonstration transitions (``demo_batch_size``)
is drawn per update here: the share cannot fall to zero as the agent's own data grow.

Why: a behaviour clone (``train_bc``) fits the IQN heads as a classifier, not as values; once RL
starts, TD updates on exploration data rewrite those values and the clone's greedy choices with
them (measured on the simulator: the clone drives the default track, and within ~10k frames of
IQN it no longer does). Here the values are TD-consistent from the start and the demonstrations
keep pulling the recorded actions to the top.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rulka.agents.iqn.demos import DemoLoss, margin_loss  # noqa: F401 - re-exported: the run-time half
from rulka.errors import UserError

log = logging.getLogger(__name__)


def load_demo_memory(cfg: Any, sources: Iterable[str | Path], *, seed: int = 0) -> Any:
    """``rulka.agents.iqn.demos.load_demo_memory`` with the run's IQN memory factory."""
    from rulka.agents.iqn import demos
    from rulka.agents.iqn.settings import make_memory

    return demos.load_demo_memory(cfg, sources, make_memory=make_memory, seed=seed)


@dataclasses.dataclass
class DqfdResult:
    network: torch.nn.Module
    spec: dict[str, Any]
    transitions: int
    first_loss: float
    last_loss: float
    first_margin: float
    last_margin: float
    accuracy: float  # share of recorded steps where the greedy action is the recorded one


def pretrain_dqfd(cfg: Any, sources: Iterable[str | Path], *, updates: int = 2000, batch_size: int = 64,
                  lr: float = 1e-3, seed: int = 0, log_every: int = 500) -> DqfdResult:
    """DQfD's pre-training phase on the config's IQN network: ``updates`` IQN updates (the run's
    learner: TD loss, target network, its soft updates) on demonstration batches, each with
    ``DemoLoss`` (``pretrain.margin``, ``pretrain.margin_loss_weight``, a second demonstration batch
    of ``batch_size``) added; ``lr`` constant. Starts from ``nn.init_from_pretrained`` when the
    config sets it (a behaviour clone: the pre-training then calibrates its values at every
    mini-race time, which the clone saw only at time 0); nothing is frozen."""
    from rulka.agents.iqn.agent import IQNAgent
    from rulka.agents.iqn.settings import hyper_from_config, network_spec_from_config
    from rulka.nn.freeze import network_kind
    from rulka.nn.pretrained import load_pretrained
    from rulka.pretrain.bc import greedy_accuracy
    from rulka.pretrain.data import episode_files, load_steps

    if network_kind(cfg) != "iqn":
        raise UserError(f"--objective dqfd trains IQN's heads, not training.algorithm {cfg.training.algorithm}")
    sources = list(sources)
    memory = load_demo_memory(cfg, sources, seed=seed)
    hyper = dataclasses.replace(hyper_from_config(cfg), lr_schedule=[[0, float(lr)]], weight_decay_lr_ratio=0.0)
    agent = IQNAgent(network_spec_from_config(cfg), hyper, device="cpu", seed=seed)
    if str(cfg.nn.init_from_pretrained or "").strip():  # e.g. a behaviour clone (train_bc) to calibrate
        load_pretrained(agent.online, cfg.nn.init_from_pretrained)
        agent.target.load_state_dict(agent.online.state_dict())
    p = cfg.pretrain
    agent.auxiliary_loss = DemoLoss(memory, batch_size=batch_size, margin=p.margin, margin_weight=p.margin_loss_weight,
                                    td_weight=0.0)
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for u in range(updates):
        out = agent.train(memory.sample(batch_size))
        last = {"td": float(out["losses/td_loss"]), "margin": float(out["losses/demo_margin_loss"])}
        if u == 0:
            first = dict(last)
        if log_every and (u + 1) % log_every == 0:
            log.info("dqfd update %d/%d: td %.4f margin %.4f", u + 1, updates, last["td"], last["margin"])
    net = agent.online.eval()
    steps = load_steps(episode_files(sources), with_images=agent.spec.uses_image)
    acc = greedy_accuracy(net, "iqn", cfg, steps, np.arange(len(steps)))
    nan = float("nan")
    return DqfdResult(net, agent.spec.to_dict(), len(memory), first.get("td", nan), last.get("td", nan),
                      first.get("margin", nan), last.get("margin", nan), acc)
