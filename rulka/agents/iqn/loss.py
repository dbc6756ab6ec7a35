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
