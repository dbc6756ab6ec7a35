"""``GRPOAgent``: group-relative policy optimisation (seed 003, guide: ``grpo:``).

One ``train(batch)`` is one update on exactly ``grpo_group_size`` whole trajectories from
``GroupMemory``: each trajectory's scalar return ``R_i`` (sum of shaped rewards) becomes a
detached group-relative advantage ``A_i`` (``mean`` or ``mean_std``); for
``grpo_update_epochs`` passes the live policy recomputes ``log pi`` and minimises one of two
objectives (``grpo_objective``):

- ``reinforce`` (the guide's): ``-1/K sum_i A_i sum_t log pi(a_it | s_it)``. No ratio: exact only
  while the data come from the current weights, i.e. the first pass on rollouts of the current
  version.
- ``clipped`` (DeepSeekMath, Shao et al. 2024, eq. 3): ``-1/K sum_i 1/T_i sum_t min(r_it A_i,
  clip(r_it, 1 - eps, 1 + eps) A_i)`` with ``r_it`` the ratio of the live policy to the recorded
  behaviour log-prob. It corrects rollouts from workers a version or more behind and the later
  passes, and the per-step mean keeps the gradient's scale independent of episode length.

Both add ``- ent_coef * mean_t H + kl_coef * mean_t KL(pi || pi_ref)``, the KL exact from the two
networks' logits (a sum over the actions, not a sampled estimate), with a gradient-norm clip. The
value head runs (same network and collector as PPO) but is not in the loss. The reference is a
frozen copy refreshed every ``grpo_ref_sync_every_updates`` group updates; with
``grpo_ref_kl_coef`` at 0 it is never evaluated.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from rulka.agents.policy.base import OptimHyper, PolicyLearner, knots_at
from rulka.agents.policy.losses import categorical_kl, group_relative_advantages, grpo_clipped_loss
from rulka.agents.policy.memory import PolicyBatch
from rulka.agents.policy.network import PolicyNetworkSpec, factored_logp_entropy


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
    objective: str = "reinforce"
    clip_coef: float = 0.2

    def __post_init__(self) -> None:
        if self.objective not in ("reinforce", "clipped"):
            raise ValueError(f"grpo_objective must be 'reinforce' or 'clipped', got {self.objective!r}")


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
        lengths = torch.tensor(data.lengths, device=self.device)
        clipped = self.hp.objective == "clipped"
        if clipped and data.old_logp is None:
            raise ValueError("grpo_objective: clipped needs the behaviour log-probs; a rollout arrived without them")
        ref_logp_all = None
        if kl_coef > 0:
            assert self.ref is not None
            with torch.no_grad():
                ref_logp_all = self.ref.log_probs(self.ref(data.img, data.flt)[0])  # (T, N, A)
        self.net.train()
        totals = {"pg": 0.0, "ent": 0.0, "kl": 0.0, "grad": 0.0, "clipfrac": 0.0, "behaviour_kl": 0.0}
        for _ in range(self.hp.update_epochs):
            logp_all = self.net.log_probs(self.net(data.img, data.flt)[0])  # (T, N, A); N = 1 but for blocks
            logp, entropy = factored_logp_entropy(logp_all, data.action)  # sums over the N branches
            if clipped:
                assert data.old_logp is not None
                pg_loss, clipfrac, behaviour_kl = grpo_clipped_loss(logp, data.old_logp, adv, owner, lengths,
                                                                    self.hp.clip_coef)
                totals["clipfrac"] += float(clipfrac)
                totals["behaviour_kl"] += float(behaviour_kl)
            else:
                traj_logp = torch.zeros(k, device=self.device).index_add(0, owner, logp)
                pg_loss = -(adv * traj_logp).mean()
            ent = entropy.mean()
            loss = pg_loss - ent_coef * ent
            kl = torch.zeros((), device=self.device)
            if ref_logp_all is not None:
                kl = categorical_kl(logp_all, ref_logp_all).sum(-1).mean()  # factorised: the branches' sum
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
            **({"losses/clipfrac": totals["clipfrac"] / e, "losses/approx_kl": totals["behaviour_kl"] / e}
               if clipped else {}),
            "charts/learning_rate": lr, "charts/ent_coef": ent_coef, "charts/ref_kl_coef": kl_coef,
            "charts/max_grad_norm": max_norm, "charts/group_return_mean": float(returns.mean()),
            "charts/group_return_std": float(returns.std()), "charts/group_return_max": float(returns.max()),
            "charts/group_steps": float(sum(data.lengths)), "charts/policy_updates": float(self.updates),
            **batch.stats,
        }
