"""``GRPOAgent``: group-relative policy optimisation (seed 003, guide: ``grpo:``).

One ``train(batch)`` is one update on exactly ``grpo_group_size`` whole trajectories from
``GroupMemory``: each trajectory's scalar return ``R_i`` (sum of shaped rewards) becomes a
detached group-relative advantage ``A_i`` (``mean`` or ``mean_std``); for
``grpo_update_epochs`` passes the live policy recomputes ``log pi`` and minimises

    -1/K sum_i A_i sum_t log pi(a_it | s_it) - ent_coef * mean_t H + kl_coef * mean_t (log pi - log pi_ref)

with a gradient-norm clip. No ratio and no clip: the data are on-policy for the current weights
at the first pass. The value head runs (same network and collector as PPO) but is not in the loss.
The reference is a frozen copy refreshed every ``grpo_ref_sync_every_updates`` group updates;
with ``grpo_ref_kl_coef`` at 0 it is never evaluated.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from rulka.agents.policy.base import OptimHyper, PolicyLearner, knots_at
from rulka.agents.policy.losses import group_relative_advantages
from rulka.agents.policy.memory import PolicyBatch
from rulka.agents.policy.network import PolicyNetworkSpec


@dataclasses.dataclass
class GRPOHyper:
    """The ``grpo:`` keys (schedules linear, speed-scaled)."""

    group_size: int = 4
    normalize_group: str = "mean"
    ent_coef_schedule: list = dataclasses.field(default_factory=lambda: [[0, 0.01]])
    max_grad_norm_schedule: list = dataclasses.field(default_factory=lambda: [[0, 0.5]])
    ref_kl_coef_schedule: list = dataclasses.field(default_factory=lambda: [[0, 0.0]])
    update_epochs: int = 4
    ref_sync_every_updates: int = 50


class GRPOAgent(PolicyLearner):
    algorithm = "grpo"

    def __init__(self, spec: PolicyNetworkSpec, hyper: GRPOHyper | None = None, optim: OptimHyper | None = None,
                 *, device: str = "cpu", seed: int | None = None) -> None:
        super().__init__(spec, optim, device=device, seed=seed, with_reference=True)
        self.hp = hyper or GRPOHyper()

    def train(self, batch: PolicyBatch) -> dict[str, float]:
        if len(batch.rollouts) != self.hp.group_size:
            raise ValueError(f"GRPO needs exactly {self.hp.group_size} trajectories, got {len(batch.rollouts)}")
        lr = self._begin(batch.frames_played)
        f = self.frames_played
        ent_coef = knots_at(self.hp.ent_coef_schedule, f)
        max_norm = knots_at(self.hp.max_grad_norm_schedule, f)
        kl_coef = knots_at(self.hp.ref_kl_coef_schedule, f)
        returns = np.array([r.score for r in batch.rollouts])
        adv = group_relative_advantages(returns, self.hp.normalize_group).to(self.device)
        data = self._states(batch.rollouts)
        k = len(batch.rollouts)
        owner = torch.repeat_interleave(torch.arange(k), torch.tensor(data.lengths)).to(self.device)
        ref_logp = None
        if kl_coef > 0:
            assert self.ref is not None
            with torch.no_grad():
                ref_logp = self.ref.evaluate_actions(data.img, data.flt, data.action)[0]
        self.net.train()
        totals = {"pg": 0.0, "ent": 0.0, "kl": 0.0, "grad": 0.0}
        for _ in range(self.hp.update_epochs):
            logp, entropy, _value = self.net.evaluate_actions(data.img, data.flt, data.action)
            traj_logp = torch.zeros(k, device=self.device).index_add(0, owner, logp)
            pg_loss = -(adv * traj_logp).mean()
            ent = entropy.mean()
            loss = pg_loss - ent_coef * ent
            kl = torch.zeros((), device=self.device)
            if ref_logp is not None:
                kl = (logp - ref_logp).mean()
                loss = loss + kl_coef * kl
            totals["grad"] += self._step(loss, max_norm)
            totals["pg"] += float(pg_loss.detach())
            totals["ent"] += float(ent.detach())
            totals["kl"] += float(kl.detach())
        self.updates += 1
        if self.updates % self.hp.ref_sync_every_updates == 0:
            self.sync_reference()
        e = self.hp.update_epochs
        return {
            "losses/policy_loss": totals["pg"] / e, "losses/entropy": totals["ent"] / e,
            "losses/ref_kl": totals["kl"] / e, "losses/grad_norm": totals["grad"] / e,
            "charts/learning_rate": lr, "charts/ent_coef": ent_coef, "charts/ref_kl_coef": kl_coef,
            "charts/max_grad_norm": max_norm, "charts/group_return_mean": float(returns.mean()),
            "charts/group_return_std": float(returns.std()), "charts/group_return_max": float(returns.max()),
            "charts/group_steps": float(sum(data.lengths)), "charts/policy_updates": float(self.updates),
            **batch.stats,
        }
