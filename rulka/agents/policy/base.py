"""What PPO, GRPO and DPO share: the actor-critic, its optimiser and learning-rate schedule, the
tensors of a list of rollouts, actor publishing and checkpoints."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import torch

from rulka.agents.base import Learner
from rulka.agents.policy.actor import PolicyActor
from rulka.agents.policy.network import ActorCritic, PolicyNetworkSpec
from rulka.agents.policy.rollout import Rollout
from rulka.config.schedules import linear_schedule
from rulka.config.sections import TrainingConfig

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


class PolicyLearner(Learner):
    """Base of the three learners. ``train(batch)`` (a ``PolicyBatch``) is one update."""

    algorithm = "policy"
    saved = ("net", "optimizer", "ref")
    counters = ("frames_played", "updates", "optimizer_steps")
    actor_class = PolicyActor
    follows_lr_schedule = True

    def __init__(self, spec: PolicyNetworkSpec, optim: OptimHyper | None = None, *, device: str = "cpu",
                 seed: int | None = None, with_reference: bool = False) -> None:
        self.spec = spec
        self.optim_hp = optim or OptimHyper()
        self.device = torch.device(device)
        if seed is not None:
            torch.manual_seed(seed)
        self.actor_seeds = np.random.default_rng(seed)
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
        return self.scheduled_lr(self.optim_hp.lr_schedule)

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

    # -- checkpoints ------------------------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        return {"spec": self.spec.to_dict(), "algorithm": self.algorithm}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if state.get("algorithm", self.algorithm) != self.algorithm:
            raise ValueError(f"checkpoint is of a {state.get('algorithm')} learner, this is {self.algorithm}")
