"""The run-time half of learning from demonstrations with IQN (DQfD, Hester et al. 2018; the
whole story is in ``rulka.pretrain.dqfd``): the large-margin loss, the demonstration replay kept for
the run and the ``DemoLoss`` an ``IQNAgent`` adds to every update (config ``pretrain.*``).

It lives beside the agent, below ``rulka.agents.iqn.settings`` (which attaches it), and is handed
the memory factory instead of importing it, so that no import loop runs through the pretraining
commands."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from rulka.errors import UserError

log = logging.getLogger(__name__)


def margin_loss(q: torch.Tensor, expert_action: torch.Tensor, margin: float) -> torch.Tensor:
    """DQfD's large-margin loss per item, ``(B,)``: ``max_a [q(a) + l(a_E, a)] - q(a_E)`` for ``q``
    ``(B, A)`` and recorded actions ``expert_action`` ``(B,)``, with ``l = margin`` for every action
    but the recorded one (0 there). Never negative."""
    a = expert_action.long()[:, None]
    bonus = torch.full_like(q, float(margin)).scatter(1, a, 0.0)
    return (q + bonus).max(dim=1).values - q.gather(1, a)[:, 0]


def load_demo_memory(cfg: Any, sources: Iterable[str | Path], *, make_memory: Callable[..., Any],
                     seed: int | None = 0) -> Any:
    """A ``MiniRaceReplayMemory`` (``make_memory``: ``rulka.agents.iqn.settings.make_memory``, the
    run's n-step, mini-race and discount settings) holding every transition of the episode files in
    ``sources`` (files or folders), sized so that none is ever overwritten and none held out."""
    from rulka.agents.policy.episodes import read_episode
    from rulka.pretrain.data import episode_files

    episodes = [read_episode(f) for f in episode_files(sources)]
    steps = sum(seg.num_transitions for segs in episodes for seg in segs)
    if steps == 0:
        raise UserError("the demonstration episodes hold no step")
    memory = make_memory(cfg, seed=seed, memory_size_schedule=[[0, [steps + 1, 1]]], buffer_test_ratio=0.0,
                         batch_device="host")  # DemoLoss reads the batch's actions as numpy
    for i, segs in enumerate(episodes):
        for seg in segs:
            # one key per file: recordings from different sources may reuse episode ids
            memory.append(dataclasses.replace(seg, run_id=f"demo-{i}", info={**seg.info, "fill_buffer": True}))
    if len(memory) == 0:
        raise UserError("no transition could be built from the demonstration episodes (too short for n_steps?)")
    return memory


class DemoLoss:
    """The demonstration terms of DQfD's loss, as an ``IQNAgent.auxiliary_loss``: on
    ``batch_size`` transitions drawn from ``memory`` (``load_demo_memory``),
    ``td_weight * sum(IQN TD loss) + margin_weight * sum(margin_loss)`` (sums over items, like the
    agent's own loss), plus metrics."""

    def __init__(self, memory: Any, *, batch_size: int = 16, margin: float = 0.8, margin_weight: float = 1.0,
                 td_weight: float = 1.0) -> None:
        self.memory = memory
        self.batch_size = int(batch_size)
        self.margin = float(margin)
        self.margin_weight = float(margin_weight)
        self.td_weight = float(td_weight)

    def __call__(self, agent: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        batch = self.memory.sample(self.batch_size)
        per_item, _, _, q, _ = agent._loss(batch)
        n, b = agent.hp.iqn_n, len(batch)
        q_mean = q.float().reshape(n, b, -1).mean(0)  # (B, A): mean over the batch's quantile fractions
        expert = torch.from_numpy(batch.action).to(q_mean.device).long()
        margin = margin_loss(q_mean, expert, self.margin)
        total = self.td_weight * per_item.sum() + self.margin_weight * margin.sum()
        return total, {"losses/demo_td_loss": per_item.detach().mean(),
                       "losses/demo_margin_loss": margin.detach().mean(),
                       "charts/demo_expert_action_top": (q_mean.detach().argmax(1) == expert).float().mean()}


def demo_loss_from_config(cfg: Any, *, make_memory: Callable[..., Any], seed: int | None = 0) -> DemoLoss | None:
    """The run's ``DemoLoss`` from ``pretrain.*`` (None when ``pretrain.demo_episodes`` is empty); ``seed``
    None draws the demonstration batches from a random seed, as ``training.seed: null`` asks."""
    p = cfg.pretrain
    if not str(p.demo_episodes).strip():
        return None
    memory = load_demo_memory(cfg, [p.demo_episodes], make_memory=make_memory, seed=seed)
    log.info("pretrain.demo_episodes: %d demonstration transitions kept for the run (%s)", len(memory),
             p.demo_episodes)
    return DemoLoss(memory, batch_size=p.demo_batch_size, margin=p.margin, margin_weight=p.margin_loss_weight,
                    td_weight=p.demo_td_loss_weight)
