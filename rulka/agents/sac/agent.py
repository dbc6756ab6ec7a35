"""``SACAgent``: soft actor-critic with an ensemble of critics (SAC with 2, REDQ with more).

One ``train(batch)`` call is one critic update, and every ``policy_every``-th call also updates
the actor and the entropy temperature:

1. target: ``y = r + discount * (min_{i in M} Q'_i(s', a') - alpha * log pi(a'|s'))`` with
   ``a' ~ pi(s')``, ``M`` a random subset of ``target_critics`` of the target critics (all of
   them for SAC's clipped double Q), ``discount = gamma^n`` or 0 at a terminal state (the memory
   provides it);
2. critics: the sum over critics of ``mean((Q_i(s, a) - y)^2)``, one Adam step; polyak targets
   ``Q' <- tau * Q + (1 - tau) * Q'``;
3. actor: ``mean(alpha * log pi(a~|s) - Q(s, a~))`` with ``a~ ~ pi(s)`` reparameterised and Q the
   min (SAC) or mean (REDQ) over the critics;
4. temperature (``autotune_alpha``): ``-mean(log_alpha * (log pi(a~|s) + target_entropy))``,
   an Adam step on ``log alpha``, which raises alpha while the policy's entropy is below target.

How many updates per env step is the memory's business (``updates_per_sample``): the agent is
called once per update by the trainer.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import torch

from rulka.agents.base import Learner, soft_update
from rulka.agents.sac.actor import SACActor
from rulka.agents.sac.network import CriticEnsemble, SacNetworkSpec, SquashedGaussianActor
from rulka.config.sections import SacConfig
from rulka.memory.uniform import TransitionBatch

_SAC = SacConfig()  # the defaults' one home


@dataclasses.dataclass(frozen=True)
class SacHyper:
    """Learner settings (the ``sac:`` config section; see its one-line docs). The defaults are
    the config model's; ``rulka.agents.sac.settings.hyper_from_config`` builds one from a run config."""

    gamma: float = _SAC.gamma
    actor_lr: float = _SAC.actor_lr
    critic_lr: float = _SAC.critic_lr
    alpha_lr: float = _SAC.alpha_lr
    tau: float = _SAC.tau
    autotune_alpha: bool = _SAC.autotune_alpha
    init_alpha: float = _SAC.init_alpha
    target_entropy: float | None = _SAC.target_entropy
    n_critics: int = _SAC.n_critics
    target_critics: int = _SAC.target_critics
    policy_critic_reduction: str | None = _SAC.policy_critic_reduction
    policy_every: int = 1  # the config's null: round(updates_per_sample) (settings.policy_every)
    random_steps: int = _SAC.random_steps

    @property
    def reduction(self) -> str:
        return self.policy_critic_reduction or ("min" if self.n_critics == 2 else "mean")


def critic_target(reward: torch.Tensor, discount: torch.Tensor, next_q: torch.Tensor, next_log_prob: torch.Tensor,
                  alpha: float | torch.Tensor, subset: torch.Tensor) -> torch.Tensor:
    """``reward + discount * (min over critics in subset of next_q - alpha * next_log_prob)``;
    ``next_q`` is (N, B), the other tensors (B,)."""
    soft_value = next_q[subset].min(dim=0).values - alpha * next_log_prob
    return reward + discount * soft_value


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """``-mean(log_alpha * (log_prob + target_entropy))`` with ``log_prob`` treated as a constant."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


class SACAgent(Learner):
    """SAC / REDQ learner on float observations; see the module docstring."""

    saved = ("actor", "critic", "critic_target", "actor_opt", "critic_opt", "alpha_opt")
    counters = ("updates",)
    actor_class = SACActor

    def __init__(self, spec: SacNetworkSpec, hyper: SacHyper, device: str = "cpu", seed: int | None = None) -> None:
        if hyper.target_critics > hyper.n_critics:
            raise ValueError("target_critics cannot exceed n_critics")
        if seed is not None:
            torch.manual_seed(seed)
        self.spec, self.hp = spec, hyper
        self.device = torch.device(device)
        self.actor = SquashedGaussianActor(spec).to(self.device)
        self.critic = CriticEnsemble(spec, hyper.n_critics).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(float(np.log(hyper.init_alpha)), device=self.device, requires_grad=True)
        self.target_entropy = float(hyper.target_entropy if hyper.target_entropy is not None else -spec.action_dim)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=hyper.actor_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=hyper.critic_lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=hyper.alpha_lr)
        self.generator = torch.Generator().manual_seed(seed if seed is not None else int(np.random.SeedSequence().entropy % 2**63))
        self.updates = 0
        self.batch_size: int | None = None  # set by the factory (the trainer reads it)
        self._actor_metrics: dict[str, float] = {}

    @property
    def alpha(self) -> float:
        return self.log_alpha.detach().exp().item()

    def _tensors(self, batch: TransitionBatch) -> tuple[torch.Tensor, ...]:
        key = self.spec.obs_key
        if key not in batch.obs:
            raise ValueError(f"SAC reads observation '{key}'; the batch holds {sorted(batch.obs)}")

        def t(a: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(np.asarray(a, np.float32), device=self.device)

        obs = t(batch.obs[key]).reshape(len(batch), -1)
        next_obs = t(batch.next_obs[key]).reshape(len(batch), -1)
        return obs, t(batch.action).reshape(len(batch), -1), t(batch.reward), next_obs, t(batch.discount)

    def train(self, batch: TransitionBatch) -> dict[str, float]:
        obs, action, reward, next_obs, discount = self._tensors(batch)
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_log_prob = self.actor.sample(next_obs)
            next_q = self.critic_target(next_obs, next_action)
            subset = torch.randperm(self.hp.n_critics, generator=self.generator)[: self.hp.target_critics]
            target = critic_target(reward, discount, next_q, next_log_prob, alpha, subset.to(self.device))
        q = self.critic(obs, action)
        critic_loss = ((q - target.unsqueeze(0)) ** 2).mean(dim=1).sum()
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()
        soft_update(self.critic_target, self.critic, self.hp.tau)
        self.updates += 1
        if self.updates % self.hp.policy_every == 0:
            self._update_actor(obs, alpha)
        return {"losses/qf_loss": critic_loss.item(), "losses/qf_mean": q.detach().mean().item(),
                "losses/alpha": self.alpha, **self._actor_metrics}

    def _update_actor(self, obs: torch.Tensor, alpha: torch.Tensor) -> None:
        self.critic.requires_grad_(False)  # the actor's loss must not build critic gradients
        action, log_prob = self.actor.sample(obs)
        q = self.critic(obs, action)
        q_pi = q.min(dim=0).values if self.hp.reduction == "min" else q.mean(dim=0)
        actor_loss = (alpha * log_prob - q_pi).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        self.critic.requires_grad_(True)
        self._actor_metrics = {"losses/actor_loss": actor_loss.item(), "losses/entropy": -log_prob.mean().item()}
        if self.hp.autotune_alpha:
            loss = temperature_loss(self.log_alpha, log_prob, self.target_entropy)
            self.alpha_opt.zero_grad(set_to_none=True)
            loss.backward()
            self.alpha_opt.step()
            self._actor_metrics["losses/alpha_loss"] = loss.item()

    # -------------------------------------------------------------- publishing
    def actor_spec(self) -> dict[str, Any]:
        return {"actor": "sac", "kwargs": {"network": self.spec.to_dict(), "random_steps": self.hp.random_steps}}

    def actor_weights(self) -> dict[str, torch.Tensor]:
        return self.module_weights(self.actor)

    # -------------------------------------------------------------- checkpoints
    def extra_state(self) -> dict[str, Any]:
        return {"log_alpha": self.log_alpha.detach().clone(), "spec": self.spec.to_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.log_alpha.copy_(torch.as_tensor(state["log_alpha"]))
