"""``DPOAgent``: direct preference optimisation on trajectory pairs (guide: ``dpo:``).

One ``train(batch)`` is one pair ``[chosen, rejected]`` from ``PairMemory``. For
``dpo_update_epochs`` passes on the same pair, the live policy's summed log-probabilities of each
trajectory are compared with the frozen reference's:

    loss = -log sigmoid(beta * ((log pi(c) - log ref(c)) - (log pi(r) - log ref(r))))
           + dpo_vf_coef * mean_t (V(s_t) - G_t)^2

where ``G_t`` is the discounted return from step t to the episode's end with the rollout
discount (``losses.discounted_returns``; the value head learns V of the current policy's data, not
its own recorded outputs), with ``dpo_max_grad_norm`` clipping. After each pair the counter of
pair updates grows; every ``dpo_ref_sync_every_updates``-th (default 50) copies the policy into
the reference, so the reference stays fixed over many pairs and the margin measures how far the
policy has moved from it (with a sync after every pair each pair starts at margin 0 and beta is
only a step size).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from rulka.agents.policy.base import OptimHyper, PolicyLearner, knots_at
from rulka.agents.policy.losses import discounted_returns, dpo_loss
from rulka.agents.policy.memory import PolicyBatch
from rulka.agents.policy.network import PolicyNetworkSpec


@dataclasses.dataclass
class DPOHyper:
    """The ``dpo:`` keys (schedules linear, speed-scaled)."""

    beta_schedule: list = dataclasses.field(default_factory=lambda: [[0, 0.1]])
    vf_coef_schedule: list = dataclasses.field(default_factory=lambda: [[0, 0.1]])
    max_grad_norm_schedule: list = dataclasses.field(default_factory=lambda: [[0, 0.5]])
    update_epochs: int = 4
    ref_sync_every_updates: int = 50


class DPOAgent(PolicyLearner):
    algorithm = "dpo"

    def __init__(self, spec: PolicyNetworkSpec, hyper: DPOHyper | None = None, optim: OptimHyper | None = None,
                 *, device: str = "cpu", seed: int | None = None) -> None:
        super().__init__(spec, optim, device=device, seed=seed, with_reference=True)
        self.hp = hyper or DPOHyper()

    def train(self, batch: PolicyBatch) -> dict[str, float]:
        if len(batch.rollouts) != 2:
            raise ValueError(f"DPO trains on one [chosen, rejected] pair, got {len(batch.rollouts)} rollouts")
        lr = self._begin(batch.frames_played)
        f = self.frames_played
        beta = knots_at(self.hp.beta_schedule, f)
        vf_coef = knots_at(self.hp.vf_coef_schedule, f)
        max_norm = knots_at(self.hp.max_grad_norm_schedule, f)
        data = self._states(batch.rollouts)
        n_chosen = data.lengths[0]
        assert self.ref is not None
        with torch.no_grad():
            ref_logp = self.ref.evaluate_actions(data.img, data.flt, data.action)[0]
        ref_c, ref_r = ref_logp[:n_chosen].sum(), ref_logp[n_chosen:].sum()
        returns = torch.from_numpy(np.concatenate([discounted_returns(r.reward, r.gamma)
                                                   for r in batch.rollouts])).to(self.device)
        self.net.train()
        totals = {"dpo": 0.0, "v": 0.0, "margin": 0.0, "grad": 0.0}
        for _ in range(self.hp.update_epochs):
            logp, _entropy, value = self.net.evaluate_actions(data.img, data.flt, data.action)
            pref, margin = dpo_loss(logp[:n_chosen].sum(), ref_c, logp[n_chosen:].sum(), ref_r, beta)
            loss = pref
            v_loss = torch.zeros((), device=self.device)
            if vf_coef > 0:
                v_loss = ((value - returns) ** 2).mean()
                loss = loss + vf_coef * v_loss
            totals["grad"] += self._step(loss, max_norm)
            totals["dpo"] += float(pref.detach())
            totals["v"] += float(v_loss.detach())
            totals["margin"] += float(margin)
        self.updates += 1
        if self.updates % self.hp.ref_sync_every_updates == 0:
            self.sync_reference()
        e = self.hp.update_epochs
        c, r = batch.rollouts
        return {
            "losses/dpo_loss": totals["dpo"] / e, "losses/value_loss": totals["v"] / e,
            "losses/dpo_margin": totals["margin"] / e, "losses/grad_norm": totals["grad"] / e,
            "charts/learning_rate": lr, "charts/dpo_beta": beta, "charts/dpo_vf_coef": vf_coef,
            "charts/max_grad_norm": max_norm, "charts/chosen_score": c.score, "charts/rejected_score": r.score,
            "charts/policy_updates": float(self.updates), **batch.stats,
        }
