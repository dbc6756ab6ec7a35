"""``PPOAgent``: proximal policy optimisation with the clipped surrogate (guide: ``ppo:``).

One ``train(batch)`` is one PPO update on the rollouts ``StepsMemory`` gathered (at least
``rollout_steps_per_update`` steps): GAE(lambda) with the discount each rollout was shaped with,
then ``update_epochs`` passes, each a fresh permutation of all T steps cut into
``min(num_minibatches, T)`` minibatches whose sizes differ by at most one (no tiny trailing
minibatch), with the advantages normalised within each minibatch (as CleanRL and
Stable-Baselines3 do) when ``normalize_advantages``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from rulka.agents.policy.base import OptimHyper, PolicyLearner, knots_at
from rulka.agents.policy.losses import gae, ppo_policy_loss, ppo_value_loss
from rulka.agents.policy.memory import PolicyBatch
from rulka.agents.policy.network import PolicyNetworkSpec


@dataclasses.dataclass
class PPOHyper:
    """The ``ppo:`` keys (schedules are ``[[frames, value], ...]``, linear, speed-scaled)."""

    gae_lambda_schedule: list = dataclasses.field(default_factory=lambda: [[0, 0.95]])
    clip_coef: float = 0.2
    clip_coef_vf: float | None = None
    ent_coef_schedule: list = dataclasses.field(default_factory=lambda: [[0, 0.01]])
    vf_coef_schedule: list = dataclasses.field(default_factory=lambda: [[0, 0.5]])
    max_grad_norm: float = 0.5
    update_epochs: int = 4
    num_minibatches: int = 4
    normalize_advantages: bool = True


def minibatch_sizes(t: int, num_minibatches: int) -> list[int]:
    """``min(num_minibatches, t)`` sizes summing to ``t`` that differ by at most one, larger first
    (10 steps in 4: 3, 3, 2, 2; never 2, 2, 2, 2, 2 or a 1-step remainder)."""
    k = max(1, min(int(num_minibatches), t))
    base, extra = divmod(t, k)
    return [base + 1] * extra + [base] * (k - extra)


def normalized(adv: torch.Tensor) -> torch.Tensor:
    """``(A - mean) / (std + 1e-8)`` over one minibatch (unchanged for a single step)."""
    if adv.numel() <= 1:
        return adv
    return (adv - adv.mean()) / (adv.std() + 1e-8)


class PPOAgent(PolicyLearner):
    algorithm = "ppo"

    def __init__(self, spec: PolicyNetworkSpec, hyper: PPOHyper | None = None, optim: OptimHyper | None = None,
                 *, device: str = "cpu", seed: int | None = None) -> None:
        super().__init__(spec, optim, device=device, seed=seed)
        self.hp = hyper or PPOHyper()
        self._perm = torch.Generator().manual_seed(seed if seed is not None else 0)

    def advantages(self, batch: PolicyBatch, lam: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(advantages, returns, old values) of all steps, rollout after rollout."""
        rollouts = batch.rollouts
        bootstrap = self.values_of_final_states(rollouts)
        advs, rets, vals = [], [], []
        for r, v_last in zip(rollouts, bootstrap):
            values = r.value if r.value is not None else self._values_now(r)
            next_values = np.append(values[1:], v_last)
            dones = r.terminated | r.truncated
            a, ret = gae(r.reward, values, next_values, r.terminated, dones, r.gamma, lam)
            advs.append(a)
            rets.append(ret)
            vals.append(values)
        return np.concatenate(advs), np.concatenate(rets), np.concatenate(vals).astype(np.float32)

    @torch.no_grad()
    def _values_now(self, r) -> np.ndarray:
        img = torch.from_numpy(r.img[:-1]).to(self.device) if self.spec.uses_image else None
        return self.net(img, torch.from_numpy(r.flt[:-1]).to(self.device))[1].float().cpu().numpy()

    def train(self, batch: PolicyBatch) -> dict[str, float]:
        lr = self._begin(batch.frames_played)
        f = self.frames_played
        lam = knots_at(self.hp.gae_lambda_schedule, f)
        ent_coef = knots_at(self.hp.ent_coef_schedule, f)
        vf_coef = knots_at(self.hp.vf_coef_schedule, f)
        adv_np, ret_np, val_np = self.advantages(batch, lam)
        data = self._states(batch.rollouts)
        if data.old_logp is None:
            raise ValueError("PPO needs the behaviour log-probabilities (extra/logprob) in every segment")
        dev = self.device
        adv = torch.from_numpy(adv_np).to(dev)
        ret = torch.from_numpy(ret_np).to(dev)
        old_v = torch.from_numpy(val_np).to(dev)
        t = len(adv)
        sizes = minibatch_sizes(t, self.hp.num_minibatches)
        sums = {"pg": 0.0, "v": 0.0, "ent": 0.0, "kl": 0.0, "clip": 0.0, "grad": 0.0}
        n = 0
        self.net.train()
        for _ in range(self.hp.update_epochs):
            perm = torch.randperm(t, generator=self._perm).to(dev)
            for idx in torch.split(perm, sizes):
                img = data.img[idx] if data.img is not None else None
                logp, entropy, value = self.net.evaluate_actions(img, data.flt[idx], data.action[idx])
                mb_adv = normalized(adv[idx]) if self.hp.normalize_advantages else adv[idx]
                pg_loss, clipfrac, approx_kl = ppo_policy_loss(logp, data.old_logp[idx], mb_adv, self.hp.clip_coef)
                v_loss = ppo_value_loss(value, old_v[idx], ret[idx], self.hp.clip_coef_vf)
                ent = entropy.mean()
                loss = pg_loss - ent_coef * ent + vf_coef * v_loss
                sums["grad"] += self._step(loss, self.hp.max_grad_norm)
                sums["pg"] += float(pg_loss.detach())
                sums["v"] += float(v_loss.detach())
                sums["ent"] += float(ent.detach())
                sums["kl"] += float(approx_kl)
                sums["clip"] += float(clipfrac)
                n += 1
        self.updates += 1
        var_y = float(np.var(ret_np))
        explained = float("nan") if var_y == 0 else 1.0 - float(np.var(ret_np - val_np)) / var_y
        return {
            "losses/policy_loss": sums["pg"] / n, "losses/value_loss": sums["v"] / n,
            "losses/entropy": sums["ent"] / n, "losses/approx_kl": sums["kl"] / n,
            "losses/clipfrac": sums["clip"] / n, "losses/grad_norm": sums["grad"] / n,
            "losses/explained_variance": explained, "charts/learning_rate": lr,
            "charts/gae_lambda": lam, "charts/ent_coef": ent_coef, "charts/vf_coef": vf_coef,
            "charts/rollout_gamma": float(np.mean([r.gamma for r in batch.rollouts])),
            "charts/update_steps": float(t), "charts/policy_updates": float(self.updates),
            **batch.stats,
        }
