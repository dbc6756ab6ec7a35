"""The IQN quantile Huber loss, the target self-loss rescaling, and the Munchausen terms."""

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


def greedy_next_value(q_next: torch.Tensor, target_action: str) -> torch.Tensor:
    """The no-DDQN bootstrap value, ``q_next`` ``(n, B, A)`` -> ``(n, B)``. ``quantile_max``
    (Linesight): each target quantile takes its own max over actions (an upward-biased mix of
    actions); ``mean_argmax`` (Dabney et al. 2018, IQN): one action per item, the argmax of the
    quantile mean, and all its quantiles."""
    if target_action == "quantile_max":
        return q_next.max(dim=2).values
    if target_action == "mean_argmax":
        a_star = q_next.mean(0).argmax(1)  # (B,)
        return q_next.gather(2, a_star[None, :, None].expand(q_next.shape[0], -1, 1))[..., 0]
    raise ValueError(f"target_action must be quantile_max or mean_argmax, got {target_action!r}")


class TargetSelfLossScale:
    """Linesight's target self-loss rescaling (``nn.training.target_self_loss_clamp_ratio``).

    The self-loss of an item is the quantile Huber loss of its target quantiles against
    themselves (at the target's taus): how spread the target distribution is, the loss floor
    that item cannot go below. Each update, with ``c`` the clamp ratio:

    - ``typical <- 0.99 typical + 0.01 mean(self)`` (starts at 0.01);
    - ``clamped = max(self, typical / c)`` per item;
    - ``typical_clamped <- 0.99 typical_clamped + 0.01 mean(clamped)`` (starts at 0.01);
    - each item's loss is multiplied by ``typical_clamped / clamped``,

    so items with a wide target distribution (a large irreducible loss) weigh less and a
    near-deterministic target weighs at most ``c`` times the typical (the clamp). The factors
    carry no gradient.
    """

    EMA = 0.01
    START = 0.01

    def __init__(self, clamp_ratio: float) -> None:
        self.clamp_ratio = float(clamp_ratio)
        # 0-d tensors on the loss's device (no host sync per update), created at the first call
        self._typical: torch.Tensor | float = self.START
        self._typical_clamped: torch.Tensor | float = self.START

    def __call__(self, target: torch.Tensor, target_taus: torch.Tensor, kappa: float) -> torch.Tensor:
        """Per-item factors ``(B,)`` for ``target`` ``(B, N')`` at ``target_taus`` ``(B, N')``; updates
        the running means."""
        with torch.no_grad():
            self_loss = quantile_huber_loss(target, target, target_taus, kappa)
            self._typical = (1 - self.EMA) * self._typical + self.EMA * self_loss.mean()
            clamped = torch.maximum(self_loss, self._typical / self.clamp_ratio)
            self._typical_clamped = (1 - self.EMA) * self._typical_clamped + self.EMA * clamped.mean()
            return self._typical_clamped / clamped

    @property
    def typical_self_loss(self) -> float:
        return float(self._typical)

    @property
    def typical_clamped_self_loss(self) -> float:
        return float(self._typical_clamped)

    def state_dict(self) -> dict[str, float]:
        return {"typical_self_loss": self.typical_self_loss,
                "typical_clamped_self_loss": self.typical_clamped_self_loss}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self._typical = float(state.get("typical_self_loss", self.START))
        self._typical_clamped = float(state.get("typical_clamped_self_loss", self.START))


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
