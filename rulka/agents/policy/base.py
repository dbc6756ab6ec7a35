"""What PPO, GRPO and DPO share: the actor-critic, its optimiser and learning-rate schedule, the
tensors of a list of rollouts, actor publishing and checkpoints."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import torch

from rulka.agents.policy.actor import PolicyActor
from rulka.agents.policy.network import ActorCritic, PolicyNetworkSpec
from rulka.agents.policy.rollout import Rollout
from rulka.config.schedules import exponential_schedule, linear_schedule
from rulka.config.sections import TrainingConfig
from rulka.interfaces import TrainingAgent

_TRAINING = TrainingConfig()  # the defaults' one home


@dataclasses.dataclass
class OptimHyper:
    """Optimiser settings shared by the three learners (``training.*`` of the guide); the
    defaults are the config model's (``settings.optim_from_config`` reads a run config)."""

    lr_schedule: list = dataclasses.field(default_factory=lambda: [list(k) for k in _TRAINING.lr_schedule])
    adam_epsilon: float = _TRAINING.adam_epsilon
    adam_beta1: float = _TRAINING.adam_beta1
    adam_beta2: float = _TRAINING.adam_beta2


def knots_at(knots: list, frames: float) -> float:
    """Linear schedule value (the policy learners' schedules are all linear but the lr)."""
    return float(linear_schedule(knots, frames))


@dataclasses.dataclass
class RolloutTensors:
    """States, actions and behaviour data of several rollouts, concatenated (T = total steps)."""

    img: torch.Tensor | None  # (T, H, W) uint8
    flt: torch.Tensor  # (T, F)
    action: torch.Tensor  # (T,)
    old_logp: torch.Tensor | None  # (T,)
    old_value: torch.Tensor | None  # (T,)
    lengths: list[int]  # steps of each rollout, in order


class PolicyLearner(TrainingAgent):
    """Base of the three learners. ``train(batch)`` (a ``PolicyBatch``) is one update."""

    algorithm = "policy"

    def __init__(self, spec: PolicyNetworkSpec, optim: OptimHyper | None = None, *, device: str = "cpu",
                 seed: int | None = None, with_reference: bool = False) -> None:
        self.spec = spec
        self.optim_hp = optim or OptimHyper()
        self.lr_factor = 1.0  # rulka.trainer.cooldown sets it over the end of a run's budget
        self.device = torch.device(device)
        if seed is not None:
            torch.manual_seed(seed)
        self._actor_seeds = np.random.default_rng(seed)
        self.net = ActorCritic(spec).to(self.device).train()
        # a frozen copy for GRPO's KL term and DPO's reference policy
        self.ref: ActorCritic | None = None
        if with_reference:
            self.ref = copy.deepcopy(self.net).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=self.lr,
                                          betas=(self.optim_hp.adam_beta1, self.optim_hp.adam_beta2),
                                          eps=self.optim_hp.adam_epsilon)
        self.frames_played = 0
        self.updates = 0  # calls of train(): PPO updates, GRPO groups, DPO pairs
        self.optimizer_steps = 0
        self.batch_size = 1  # the trainer's sampling batch; unused (trajectory memories)

    @property
    def lr(self) -> float:
        # lr_factor: the trainer's learning-rate cooldown over the end of the run's budget
        return float(exponential_schedule(self.optim_hp.lr_schedule, getattr(self, "frames_played", 0))
                     * self.lr_factor)

    def _begin(self, frames_played: int) -> float:
        self.frames_played = max(self.frames_played, int(frames_played))
        lr = self.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _step(self, loss: torch.Tensor, max_grad_norm: float) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.net.parameters(), max_grad_norm)
        self.optimizer.step()
        self.optimizer_steps += 1
        return float(norm)

    def sync_reference(self) -> None:
        """Copy the live policy into the frozen reference."""
        assert self.ref is not None
        self.ref.load_state_dict(self.net.state_dict())

    # -- tensors ----------------------------------------------------------------------------------
    def _states(self, rollouts: list[Rollout]) -> RolloutTensors:
        """The T states (not the final observations) of each rollout, concatenated."""
        dev = self.device

        def cat(arrs: list[np.ndarray]) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(np.concatenate(arrs))).to(dev)

        img = cat([r.img[:-1] for r in rollouts]) if self.spec.uses_image else None
        has_logp = all(r.logprob is not None for r in rollouts)
        has_value = all(r.value is not None for r in rollouts)
        return RolloutTensors(
            img=img, flt=cat([r.flt[:-1] for r in rollouts]).float(), action=cat([r.action for r in rollouts]),
            old_logp=cat([r.logprob for r in rollouts]).float() if has_logp else None,
            old_value=cat([r.value for r in rollouts]).float() if has_value else None,
            lengths=[len(r) for r in rollouts])

    @torch.no_grad()
    def values_of_final_states(self, rollouts: list[Rollout]) -> np.ndarray:
        """V(s_T) of each rollout's last observation under the current network (GAE bootstrap)."""
        img = (torch.from_numpy(np.stack([r.img[-1] for r in rollouts])).to(self.device)
               if self.spec.uses_image else None)
        flt = torch.from_numpy(np.stack([r.flt[-1] for r in rollouts])).to(self.device)
        return self.net(img, flt)[1].float().cpu().numpy()

    # -- actors -----------------------------------------------------------------------------------
    def actor_spec(self) -> dict[str, Any]:
        return {"actor": self.algorithm, "kwargs": {"network": self.spec.to_dict()}}

    def actor_weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self.net.state_dict().items()}

    def get_actor(self) -> PolicyActor:
        actor = PolicyActor(**self.actor_spec()["kwargs"], seed=int(self._actor_seeds.integers(2**31)))
        actor.load_weights(self.actor_weights())
        return actor

    # -- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "counters": {"frames_played": self.frames_played, "updates": self.updates,
                              "optimizer_steps": self.optimizer_steps},
                 "spec": self.spec.to_dict(), "algorithm": self.algorithm}
        if self.ref is not None:
            state["ref"] = self.ref.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("algorithm", self.algorithm) != self.algorithm:
            raise ValueError(f"checkpoint is of a {state.get('algorithm')} learner, this is {self.algorithm}")
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.ref is not None and "ref" in state:
            self.ref.load_state_dict(state["ref"])
        c = state.get("counters", {})
        self.frames_played = int(c.get("frames_played", 0))
        self.updates = int(c.get("updates", 0))
        self.optimizer_steps = int(c.get("optimizer_steps", 0))
