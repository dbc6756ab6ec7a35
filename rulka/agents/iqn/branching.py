"""Action branching for multi-action blocks: one IQN quantile head per action offset.

With ``environment.rl_action_offsets_ms`` holding N offsets, one decision chooses N actions from
the same action set (one per 10 ms step of the block). Enumerating the A^N joint actions is out of
the question (12^5 = 248832), so the network follows the Branching Dueling Q-Network (BDQ) of
Tavakoli, Pardo and Kormushev, "Action Branching Architectures for Deep Reinforcement Learning"
(AAAI 2018): a shared state representation (here: rulka's encoder times the quantile embedding),
one shared state-value stream V, and one advantage stream per action dimension ("branch") d,
combined per branch as

    Q_d(s, a_d) = V(s) + A_d(s, a_d) - (1/A) sum_a' A_d(s, a')        (BDQ, eq. 1 / "mean" dueling)

and trained with one temporal-difference target shared by every branch, the *mean* over the
branches of each branch's greedy next-state value (BDQ, the target they retain, eq. 4):

    y = r + gamma * (1/N) sum_d Q_d^-(s', argmax_a' Q_d(s', a'))

with the loss averaged over branches, L = E[(1/N) sum_d (y - Q_d(s, a_d))^2] (BDQ, eq. 5).

The distributional (IQN) version used here applies the same rules per quantile fraction: every
branch shares the quantile embedding, each target quantile sample is the mean over branches of
the branches' next-state quantiles at that fraction (the bootstrap the agent's ``target_action``,
Double DQN or Munchausen choose per branch), and the per-branch quantile Huber losses against
that shared target are averaged over branches. The reward is the block's SUM of the N step rewards
(the guide: one replay transition = one block), so the target is the block's, shared by all
branches as in BDQ. With N = 1 every formula is the plain IQN one.

Network outputs are laid out branch-major, ``(rows, N * A)``: column ``d * A + a`` is action ``a``
of branch ``d`` (offset ``rl_action_offsets_ms[d]``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from rulka.nn.blocks import DuelingHead


class BranchAdvantage(nn.Module):
    """N advantage streams over the same input, outputs concatenated ``(rows, N * A)``."""

    def __init__(self, branches: list[nn.Module]) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([b(x) for b in self.branches], dim=-1)


class BranchedDuelingHead(DuelingHead):
    """BDQ's dueling head: a shared value stream, one advantage stream per branch, each branch's
    advantages centred on their own mean (``Q_d = V + A_d - mean_a A_d``). Output ``(rows, N * A)``."""

    def __init__(self, value: nn.Module, branches: list[nn.Module], n_actions: int) -> None:
        nn.Module.__init__(self)
        self.advantage = BranchAdvantage(branches)
        self.value = value
        self.n_branches = len(branches)
        self.n_actions = int(n_actions)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        adv = self.advantage(x).reshape(x.shape[0], self.n_branches, self.n_actions)
        q = self.combine(self.value(x)[:, :, None], adv)
        return q.reshape(x.shape[0], self.n_branches * self.n_actions)


def branched_head(single: DuelingHead, in_dim: int, hidden_dim: int, spec: Any) -> BranchedDuelingHead:
    """The BDQ head for ``spec.n_action_branches`` branches: ``single``'s value stream (the
    network's one-action head, built from the same keys) and one advantage stream per branch,
    each shaped as ``single``'s advantage stream (the ``nn.decoder.advantage`` MLP or transformer
    slot), each with its own initialisation."""
    from rulka.nn.blocks import make_mlp
    from rulka.nn.transformer import optional_transformer_head

    def stream() -> nn.Module:
        module = optional_transformer_head(in_dim, spec.n_actions, spec.advantage_transformer)
        return module or make_mlp(in_dim, hidden_dim, spec.n_actions, spec.head_layers,
                                  layer_norm=spec.use_layer_norm, noisy=spec.use_noisy_linear,
                                  noisy_sigma0=spec.noisy_sigma0)

    return BranchedDuelingHead(single.value, [stream() for _ in range(spec.n_action_branches)], spec.n_actions)


def split_branches(q: torch.Tensor, n: int, b: int, n_branches: int) -> torch.Tensor:
    """Network output ``(n * B, N * A)`` (quantile-major rows) -> ``(n, B, N, A)``."""
    return q.reshape(n, b, n_branches, -1)


def branched_next_value(q_next: torch.Tensor, per_branch: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """BDQ's shared bootstrap: ``q_next`` ``(n, B, N, A)``; ``per_branch`` maps ``(n, M, A)`` to one
    value per quantile sample ``(n, M)`` (a greedy max, a Double-DQN pick, a Munchausen soft value);
    returns the mean over the N branches, ``(n, B)``."""
    n, b, nb, a = q_next.shape
    return per_branch(q_next.reshape(n, b * nb, a)).reshape(n, b, nb).mean(dim=2)


def gather_branches(q: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """``q`` ``(n, B, N, A)`` at the taken actions ``action`` ``(B, N)`` -> ``(n, B, N)``."""
    n = q.shape[0]
    return q.gather(3, action[None, :, :, None].expand(n, -1, -1, 1))[..., 0]
