"""The IQN quantile Huber loss."""

from __future__ import annotations

import torch


def quantile_huber_loss(target: torch.Tensor, online: torch.Tensor, online_taus: torch.Tensor,
                        kappa: float) -> torch.Tensor:
    """Per-item quantile Huber loss, shape ``(B,)``.

    ``target`` ``(B, N')``: target quantile samples; ``online`` ``(B, N)``: online quantiles at
    ``online_taus`` ``(B, N)``. For each pair, with delta = target_j - online_i:
    huber = delta^2 / (2 kappa) if |delta| < kappa else |delta| - kappa / 2 (the Huber loss
    divided by kappa, so it tends to |delta| as kappa -> 0), weighted by |tau_i - 1{delta < 0}|;
    summed over online quantiles i and averaged over target samples j.
    """
    delta = target[:, :, None] - online[:, None, :]  # (B, N', N)
    abs_d = delta.abs()
    huber = torch.where(abs_d < kappa, 0.5 * delta * delta / kappa, abs_d - 0.5 * kappa)
    tau = online_taus[:, None, :]
    weight = torch.where(delta < 0, 1.0 - tau, tau)
    return (weight * huber).sum(dim=2).mean(dim=1)


def munchausen_bonus(q_state: torch.Tensor, action: torch.Tensor, alpha: float, tau: float,
                     lo: float) -> torch.Tensor:
    """The Munchausen reward bonus ``alpha * clamp(tau * log pi(a|s), lo, 0)``, shape ``(B,)``
    (Vieillard et al. 2020, M-DQN; as in BTR).

    ``q_state`` ``(B, A)``: the target network's mean Q of the state the action was taken in;
    ``pi = softmax(q / tau)``. The clip bounds the scaled log-policy, so with tau = 0.03 and
    lo = -1 the bonus reaches ``alpha * lo`` for an action the policy gives probability e^-33.
    """
    log_pi = torch.log_softmax(q_state.float() / tau, dim=1).gather(1, action[:, None])[:, 0]
    return alpha * (tau * log_pi).clamp(lo, 0.0)


def munchausen_next_value(q_next: torch.Tensor, tau: float) -> torch.Tensor:
    """Soft value of the next state, ``sum_a pi(a|s') (q(s', a) - tau log pi(a|s'))`` per target
    quantile: ``q_next`` ``(n, B, A)`` -> ``(n, B)``; ``pi = softmax(mean_n q_next / tau)``."""
    log_pi = torch.log_softmax(q_next.mean(0) / tau, dim=1)  # (B, A)
    return (log_pi.exp()[None] * (q_next - tau * log_pi[None])).sum(-1)
