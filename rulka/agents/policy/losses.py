"""The math of the three policy learners, as pure functions (tested against hand-computed values).

- ``gae``: generalised advantage estimation (Schulman et al. 2016) with separate terminal and
  episode-boundary flags, so a time-limit truncation bootstraps from V(s_T) instead of 0.
- ``ppo_policy_loss`` / ``ppo_value_loss``: the clipped surrogate of PPO (Schulman et al. 2017).
- ``group_relative_advantages``: GRPO's per-group centring (``mean``) or standardising (``mean_std``).
- ``grpo_clipped_loss``: GRPO's clipped objective (Shao et al. 2024, DeepSeekMath eq. 3): per-step
  ratios against the behaviour policy, PPO's clip, the mean over each trajectory's steps, then over
  the group.
- ``categorical_kl``: the exact KL(pi || pi_ref) of two categorical distributions, from log-probs.
- ``dpo_loss``: DPO (Rafailov et al. 2023) on trajectory-level log-probability sums.
- ``discounted_returns``: ``G_t = r_t + gamma G_{t+1}`` of one whole episode (DPO's value target).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

GROUP_STD_EPS = 1e-8  # stabiliser of grpo_normalize_group: mean_std


def gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray, terminated: np.ndarray,
        dones: np.ndarray, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns (``advantages + values``) of one stretch of ``T`` steps.

    ``next_values[t]`` is V(s_{t+1}); ``terminated[t]`` zeroes it (the episode really ended);
    ``dones[t]`` (terminated or truncated) stops the advantage recursion at t:
    ``delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)``,
    ``A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1}``, ``A_T = 0``.
    """
    r = np.asarray(rewards, np.float64)
    v = np.asarray(values, np.float64)
    nv = np.asarray(next_values, np.float64)
    term = np.asarray(terminated, bool)
    done = np.asarray(dones, bool) | term
    adv = np.zeros(len(r), np.float64)
    last = 0.0
    for t in range(len(r) - 1, -1, -1):
        delta = r[t] + gamma * (0.0 if term[t] else nv[t]) - v[t]
        last = delta + gamma * lam * (0.0 if done[t] else last)
        adv[t] = last
    return adv.astype(np.float32), (adv + v).astype(np.float32)


def ppo_policy_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                    clip_coef: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clipped surrogate ``mean(max(-A r, -A clip(r, 1 - eps, 1 + eps)))`` with ``r = pi / pi_old``.
    Returns (loss, fraction of clipped ratios, approximate KL ``mean((r - 1) - log r)``)."""
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
    loss = torch.max(unclipped, clipped).mean()
    with torch.no_grad():
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
    return loss, clipfrac, approx_kl


def ppo_value_loss(new_values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                   clip_coef_vf: float | None) -> torch.Tensor:
    """``0.5 * mean((V - R)^2)``; with ``clip_coef_vf`` the pessimistic maximum of that and the
    error of ``old_V + clip(V - old_V, -c, c)``."""
    err = (new_values - returns) ** 2
    if clip_coef_vf is not None:
        v_clipped = old_values + (new_values - old_values).clamp(-clip_coef_vf, clip_coef_vf)
        err = torch.max(err, (v_clipped - returns) ** 2)
    return 0.5 * err.mean()


def group_relative_advantages(returns: np.ndarray | torch.Tensor, mode: str) -> torch.Tensor:
    """``mean``: ``A_i = R_i - mean(R)``; ``mean_std``: that divided by ``std(R) + 1e-8``
    (population std). The advantages sum to zero over the group."""
    r = torch.as_tensor(np.asarray(returns, np.float64) if not torch.is_tensor(returns) else returns,
                        dtype=torch.float64)
    a = r - r.mean()
    if mode == "mean_std":
        a = a / (r.std(unbiased=False) + GROUP_STD_EPS)
    elif mode != "mean":
        raise ValueError(f"grpo_normalize_group must be 'mean' or 'mean_std', got {mode!r}")
    return a.float()


def grpo_clipped_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, traj_advantages: torch.Tensor,
                      owner: torch.Tensor, lengths: torch.Tensor, clip_coef: float
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``-1/K sum_i 1/T_i sum_t min(r_it A_i, clip(r_it, 1 - eps, 1 + eps) A_i)``, ``r_it =
    pi(a_it|s_it) / pi_old(a_it|s_it)``. ``owner[t]`` is the trajectory index of step t and
    ``lengths[i] = T_i``. Returns (loss, fraction of clipped ratios, approximate KL to the
    behaviour policy ``mean((r - 1) - log r)``)."""
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    adv = traj_advantages[owner]
    per_step = torch.max(-adv * ratio, -adv * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef))
    k = traj_advantages.shape[0]
    per_traj = torch.zeros(k, dtype=per_step.dtype, device=per_step.device).index_add(0, owner, per_step)
    loss = (per_traj / lengths.to(per_step.dtype)).mean()
    with torch.no_grad():
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
    return loss, clipfrac, approx_kl


def categorical_kl(logp_all: torch.Tensor, ref_logp_all: torch.Tensor) -> torch.Tensor:
    """``KL(pi || pi_ref) = sum_a pi(a) (log pi(a) - log pi_ref(a))`` per row of ``(B, A)``
    log-probabilities; exact for discrete actions, with a gradient through ``pi``."""
    return (logp_all.exp() * (logp_all - ref_logp_all)).sum(-1)


def dpo_loss(policy_chosen: torch.Tensor, ref_chosen: torch.Tensor, policy_rejected: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``-log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r)))`` on log-probabilities summed over
    each trajectory. Returns (loss, the margin inside the sigmoid)."""
    margin = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    return -F.logsigmoid(margin).mean(), margin.detach()


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = sum_k gamma^k r_{t+k}`` to the end of one episode (``G_T = 0``: no bootstrap; the
    value head's regression target in DPO, whose pairs are whole episodes)."""
    r = np.asarray(rewards, np.float64)
    out = np.zeros(len(r), np.float64)
    acc = 0.0
    for t in range(len(r) - 1, -1, -1):
        acc = r[t] + gamma * acc
        out[t] = acc
    return out.astype(np.float32)
