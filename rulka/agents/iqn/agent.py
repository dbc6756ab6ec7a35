"""``IQNAgent``: the IQN learner (online + target network, quantile Huber loss, soft target
updates, optional Double-DQN and Munchausen targets) trained on ``ReplayBatch`` es from
``MiniRaceReplayMemory``. Readable top to bottom: ``train`` is the whole update."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rulka.agents.base import Learner, soft_update
from rulka.agents.iqn.actor import EXPLORATION_KEY, IQNActor
from rulka.agents.iqn.branching import branched_next_value, gather_branches, split_branches
from rulka.agents.iqn.loss import (
    TargetSelfLossScale,
    greedy_next_value,
    munchausen_bonus,
    munchausen_next_value,
    quantile_huber_loss,
)
from rulka.agents.iqn.network import IQNNetwork, IQNNetworkSpec, stratified_mirrored_taus
from rulka.agents.iqn.replay import ReplayBatch
from rulka.config.schedules import linear_schedule
from rulka.config.sections import (
    BtrConfig,
    EnvironmentConfig,
    ExplorationConfig,
    IqnCoreConfig,
    NnTrainingConfig,
    TrainingConfig,
)
from rulka.telemetry import metrics as m

# every default is the run config's (rulka.config.sections): one home for each
_IQN, _NN_TRAINING = IqnCoreConfig(), NnTrainingConfig()
_TRAINING, _BTR, _EXPLORATION = TrainingConfig(), BtrConfig(), ExplorationConfig()


def _knots(value: Any) -> Callable[[], list]:
    return lambda: [list(k) for k in value]


@dataclasses.dataclass
class IQNHyper:
    """Learner hyperparameters (guide names; schedules are ``[[frames, value], ...]``). The
    defaults are the config model's; ``rulka.agents.iqn.settings.hyper_from_config`` builds one
    from a run config."""

    iqn_n: int = _IQN.n
    iqn_k: int = _IQN.k
    iqn_kappa: float = _IQN.kappa
    lr_schedule: list = dataclasses.field(default_factory=_knots(_TRAINING.lr_schedule))
    adam_epsilon: float = _TRAINING.adam_epsilon
    adam_beta1: float = _TRAINING.adam_beta1
    adam_beta2: float = _TRAINING.adam_beta2
    optimizer: str = "radam"  # radam | adam (not a config key: the guide's learner uses RAdam)
    use_ddqn: bool = _NN_TRAINING.use_ddqn
    target_action: str = _NN_TRAINING.target_action
    """Without DDQN or Munchausen: ``quantile_max`` (Linesight: the max over actions of each target
    quantile) or ``mean_argmax`` (the IQN paper: one action, the argmax of the target's quantile mean)."""
    target_self_loss_clamp_ratio: float | None = _NN_TRAINING.target_self_loss_clamp_ratio
    """Linesight's per-item rescaling by the target self-loss (``loss.TargetSelfLossScale``); None: off."""
    weight_decay_lr_ratio: float = _TRAINING.weight_decay_lr_ratio
    """Decoupled weight decay after each step: online parameters *= 1 - ratio * lr (Linesight)."""
    clip_grad_norm: float = _NN_TRAINING.clip_grad_norm
    clip_grad_value: float = _NN_TRAINING.clip_grad_value
    soft_update_tau: float = _NN_TRAINING.soft_update_tau
    number_memories_trained_on_between_target_network_updates: int = (
        _NN_TRAINING.number_memories_trained_on_between_target_network_updates)
    use_munchausen: bool = _BTR.use_munchausen
    munchausen_alpha: float = _BTR.munchausen_alpha
    munchausen_entropy_tau: float = _BTR.munchausen_entropy_tau
    munchausen_lo: float = _BTR.munchausen_lo
    epsilon_schedule: list = dataclasses.field(default_factory=_knots(_EXPLORATION.epsilon_schedule))
    epsilon_boltzmann_schedule: list = dataclasses.field(default_factory=_knots(_EXPLORATION.epsilon_boltzmann_schedule))
    tau_epsilon_boltzmann: float = _EXPLORATION.tau_epsilon_boltzmann
    multi_action_exploration: str = _EXPLORATION.multi_action_exploration
    """With action branches (multi-action blocks): per_action or per_block epsilon draws (``IQNActor``)."""
    epsilon_z_exponent: float | None = _EXPLORATION.epsilon_z_exponent
    """εz-greedy: random actions held for n ~ zeta(exponent) actions (``IQNActor``); None: one action."""
    epsilon_z_max_actions: int = _EXPLORATION.epsilon_z_max_actions
    noisy_resample_every_actions: int = _BTR.noisy_resample_every_actions
    """NoisyNet actors: a new noise sample at each episode start and, when > 0, every N actions."""
    mini_race_actions: int | None = EnvironmentConfig().temporal_mini_race_duration_actions
    """Mini-race length in decisions (the time slot of the floats); None: no mini-race slot."""
    use_amp: bool = _NN_TRAINING.use_amp  # CUDA only
    use_jit: bool = _NN_TRAINING.use_jit  # torch.compile, CUDA only

    def __post_init__(self) -> None:
        if self.iqn_n % 2 or self.iqn_k % 2:
            raise ValueError("iqn_n and iqn_k must be even (taus are mirrored around 0.5)")
        if self.target_action not in ("quantile_max", "mean_argmax"):
            raise ValueError(f"target_action must be quantile_max or mean_argmax, got {self.target_action!r}")


def _t(a: np.ndarray | None, device: torch.device) -> torch.Tensor | None:
    return None if a is None else torch.from_numpy(np.ascontiguousarray(a)).to(device, non_blocking=True)


class IQNAgent(Learner):
    """One ``train(batch)`` = one gradient step. The learning-rate and exploration schedules follow
    the frame count carried by each batch (or ``set_frames_played``)."""

    saved = ("online", "target", "optimizer", "scaler", ("reset", "resetter"), "self_loss_scale")
    counters = ("frames_played", "batches_trained", "memories_trained", "next_target_update")
    actor_class = IQNActor
    follows_lr_schedule = True
    loads_actor_weights = True

    def __init__(self, spec: IQNNetworkSpec, hyper: IQNHyper | None = None, *, device: str = "cpu",
                 seed: int | None = None) -> None:
        self.spec = spec
        self.hp = hyper or IQNHyper()
        self.device = torch.device(device)
        if seed is not None:
            torch.manual_seed(seed)
        self.actor_seeds = np.random.default_rng(seed)  # exploration of actors made here
        self.online = IQNNetwork(spec).to(self.device).train()
        self.target = copy.deepcopy(self.online)
        for p in self.target.parameters():
            p.requires_grad_(False)
        opt_cls = torch.optim.RAdam if self.hp.optimizer.lower() == "radam" else torch.optim.Adam
        self.optimizer = opt_cls(self.online.parameters(), lr=self.lr,
                                 betas=(self.hp.adam_beta1, self.hp.adam_beta2), eps=self.hp.adam_epsilon)
        cuda = self.device.type == "cuda"
        self.amp = bool(self.hp.use_amp and cuda)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp)
        # torch.compile only where it pays off and is supported; the CPU path never uses it
        self._online_fwd = torch.compile(self.online) if (self.hp.use_jit and cuda) else self.online
        self.frames_played = 0
        self.batch_size = 512  # what the trainer samples; set by the factory from training.batch_size
        self.batches_trained = 0
        self.memories_trained = 0
        self.next_target_update = self.hp.number_memories_trained_on_between_target_network_updates
        self.resetter: Any = None  # rulka.agents.iqn.reset.IQNResetter, set by the factory
        ratio = self.hp.target_self_loss_clamp_ratio
        self.self_loss_scale = TargetSelfLossScale(ratio) if ratio else None
        # an extra term added to each update's loss: f(agent) -> (loss tensor, metrics), e.g. the
        # demonstration losses of rulka.pretrain.dqfd.DemoLoss (pretrain.demo_episodes); None: none
        self.auxiliary_loss: Callable[[IQNAgent], tuple[torch.Tensor, dict[str, Any]]] | None = None

    # -------------------------------------------------------------- schedules
    @property
    def lr(self) -> float:
        return self.scheduled_lr(self.hp.lr_schedule)

    def set_frames_played(self, frames_played: int) -> None:
        self.frames_played = int(frames_played)

    def exploration(self) -> tuple[float, float]:
        return (linear_schedule(self.hp.epsilon_schedule, self.frames_played),
                linear_schedule(self.hp.epsilon_boltzmann_schedule, self.frames_played))

    # -------------------------------------------------------------- learning
    def _actions(self, batch: ReplayBatch) -> torch.Tensor:
        """The taken actions as ``(B, N)`` (N action branches; N = 1 without multi-action)."""
        return _t(batch.action, self.device).long().reshape(len(batch), self.spec.n_action_branches)

    def _targets(self, batch: ReplayBatch, n: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Target quantile samples (B, n) and their taus (B, n). With N action branches the
        bootstrap is BDQ's shared one, the mean over branches of each branch's next value
        (``rulka.agents.iqn.branching``); with N = 1 it is that branch's value."""
        dev, nb = self.device, self.spec.n_action_branches
        next_img, next_float = _t(batch.next_img, dev), _t(batch.next_float, dev)
        reward = _t(batch.reward, dev).float()
        gamma = _t(batch.gamma, dev).float()
        taus = stratified_mirrored_taus(b, n, device=dev)
        q_next = split_branches(self.target(next_img, next_float, taus).float(), n, b, nb)  # (n, B, N, A)
        if self.hp.use_munchausen:
            ent = self.hp.munchausen_entropy_tau
            next_value = branched_next_value(q_next, lambda q: munchausen_next_value(q, ent))  # (n, B)
            q_s = split_branches(self.target(_t(batch.state_img, dev), _t(batch.state_float, dev), taus),
                                 n, b, nb).mean(0)  # (B, N, A)
            a = self._actions(batch)
            bonus = munchausen_bonus(q_s.reshape(b * nb, -1), a.reshape(-1), self.hp.munchausen_alpha, ent,
                                     self.hp.munchausen_lo)
            reward = reward + bonus.reshape(b, nb).mean(1)  # BDQ's branch mean, as for the bootstrap
        elif self.hp.use_ddqn:
            q_online_next = self._online_fwd(next_img, next_float, stratified_mirrored_taus(b, n, device=dev))
            a_star = split_branches(q_online_next, n, b, nb).mean(0).argmax(2)  # (B, N)
            next_value = gather_branches(q_next, a_star).mean(2)
        else:
            next_value = branched_next_value(q_next, lambda q: greedy_next_value(q, self.hp.target_action))
        target = (reward[None] + gamma[None] * next_value).transpose(0, 1)  # (B, n)
        return target, taus.reshape(n, b).transpose(0, 1)

    def _loss(self, batch: ReplayBatch
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(per-item loss (B,), online quantiles (B, N, n), targets (B, n), all online Q, target taus).
        With N action branches each branch's quantiles at its taken action meet the shared target;
        the per-item loss is the mean over branches (BDQ)."""
        n, b, dev, nb = self.hp.iqn_n, len(batch), self.device, self.spec.n_action_branches
        with torch.autocast(device_type=dev.type, dtype=torch.float16, enabled=self.amp):
            with torch.no_grad():
                target, target_taus = self._targets(batch, n, b)
            taus = stratified_mirrored_taus(b, n, device=dev)
            q = self._online_fwd(_t(batch.state_img, dev), _t(batch.state_float, dev), taus)
            online = gather_branches(split_branches(q, n, b, nb), self._actions(batch)).permute(1, 2, 0)  # (B, N, n)
        online = online.float()
        item_taus = taus.reshape(n, b).transpose(0, 1)
        per_branch = quantile_huber_loss(target.float().repeat_interleave(nb, 0), online.reshape(b * nb, n),
                                         item_taus.repeat_interleave(nb, 0), self.hp.iqn_kappa)
        return per_branch.reshape(b, nb).mean(1), online, target, q, target_taus

    def train(self, batch: ReplayBatch) -> dict[str, float]:
        """One update on ``batch``; returns ``losses/...`` and ``charts/...`` metrics."""
        if self.spec.use_noisy_linear:  # fresh noise for every update
            self.online.reset_noise()
            self.target.reset_noise()
        self.frames_played = max(self.frames_played, int(batch.frames_played))
        if self.resetter is not None:
            self.resetter.step(self)
        lr = self.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        per_item, online, target, q, target_taus = self._loss(batch)
        weights = _t(batch.weights, self.device).float()
        if self.self_loss_scale is not None:
            weights = weights * self.self_loss_scale(target.float(), target_taus.float(), self.hp.iqn_kappa)
        # summed over the batch, as the reference implementation does (Adam is scale-invariant)
        total = (weights * per_item).sum()
        aux_metrics: dict[str, Any] = {}
        if self.auxiliary_loss is not None:
            aux, aux_metrics = self.auxiliary_loss(self)
            total = total + aux
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(total).backward()
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.online.parameters(), self.hp.clip_grad_norm)
        torch.nn.utils.clip_grad_value_(self.online.parameters(), self.hp.clip_grad_value)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.hp.weight_decay_lr_ratio > 0:  # decoupled from the gradient, after the step (Linesight)
            self.decay_weights(1.0 - self.hp.weight_decay_lr_ratio * lr)

        b = len(batch)
        self.batches_trained += 1
        self.memories_trained += b
        while self.memories_trained >= self.next_target_update:
            self.soft_update_target()
            self.next_target_update += self.hp.number_memories_trained_on_between_target_network_updates

        td = (online.detach().mean(2) - target.mean(1, keepdim=True)).abs().mean(1)  # mean over branches
        if batch.report_td_errors is not None:
            batch.report_td_errors(td.cpu().numpy())
        eps, eps_boltzmann = self.exploration()
        # device tensors, not floats: a float() per metric would make every GPU update wait for the
        # host; the trainer converts the last update's metrics when it logs (Agent.train)
        metrics = {
            m.TD_LOSS: per_item.detach().mean(),
            m.GRAD_NORM: grad_norm.detach(),
            m.LEARNING_RATE: lr,
            m.Q_MEAN: q.detach().float().mean(),
            "charts/mean_target": target.mean(),
            m.BATCHES_TRAINED: float(self.batches_trained),
            m.EPSILON: eps,
            m.EPSILON_BOLTZMANN: eps_boltzmann,
            **aux_metrics,
        }
        if batch.test_batch is not None:
            metrics[m.TEST_LOSS] = self.evaluate(batch.test_batch)
        return metrics

    def evaluate(self, batch: ReplayBatch) -> float:
        """Mean loss on ``batch`` without updating (the held-out test loss)."""
        with torch.no_grad():
            per_item, *_ = self._loss(batch)
        return float(per_item.mean())

    @torch.no_grad()
    def decay_weights(self, factor: float) -> None:
        """Multiply every trainable parameter of the online network by ``factor`` (not buffers:
        the input normalisation is not a weight)."""
        for p in self.online.parameters():
            if p.requires_grad:
                p.mul_(factor)

    def soft_update_target(self) -> None:
        soft_update(self.target, self.online, self.hp.soft_update_tau)

    # -------------------------------------------------------------- actors
    def actor_spec(self) -> dict[str, Any]:
        eps, eps_b = self.exploration()
        return {"actor": "iqn", "kwargs": {
            "network": self.spec.to_dict(), "iqn_k": self.hp.iqn_k, "epsilon": eps,
            "epsilon_boltzmann": eps_b, "tau_epsilon_boltzmann": self.hp.tau_epsilon_boltzmann,
            "mini_race_actions": self.hp.mini_race_actions,
            **({"noisy_resample_every_actions": self.hp.noisy_resample_every_actions}
               if self.spec.use_noisy_linear else {}),
            **({"multi_action_exploration": self.hp.multi_action_exploration}
               if self.spec.n_action_branches > 1 else {}),
            **({"epsilon_z_exponent": self.hp.epsilon_z_exponent, "epsilon_z_max_actions": self.hp.epsilon_z_max_actions}
               if self.hp.epsilon_z_exponent is not None else {})}}

    def actor_weights(self) -> dict[str, torch.Tensor]:
        """What to publish: the online network's tensors (not copies: the trainer encodes them at
        once) plus the current exploration rates."""
        out = self.module_weights(self.online)
        eps, eps_b = self.exploration()
        out[EXPLORATION_KEY] = torch.tensor([eps, eps_b, self.hp.tau_epsilon_boltzmann], dtype=torch.float32)
        return out

    @torch.no_grad()
    def load_actor_weights(self, weights: dict[str, Any]) -> None:
        """Set the online and the target network to published weights (``actor_weights()`` of an
        earlier version, e.g. the run's best policy: ``training.lr_cooldown_from_best``); the
        optimizer's moments and the counters go on as they were. Weights whose names or shapes differ
        from the network's raise ValueError before anything is changed."""
        state = {k: v for k, v in weights.items() if k != EXPLORATION_KEY}
        own = self.online.state_dict()
        if set(state) != set(own) or any(tuple(state[k].shape) != tuple(v.shape) for k, v in own.items()):
            missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
            raise ValueError(f"weights do not fit this network (missing {missing[:3]}, unexpected {extra[:3]}, "
                             "or other shapes)")
        self.online.load_state_dict(state)
        self.target.load_state_dict(self.online.state_dict())

    def reset_optimizer(self) -> None:
        """Forget the optimizer's per-parameter moments and step counts (``training.lr_cooldown_reset_optimizer``):
        the next step starts them again, as the first step of a run does."""
        self.optimizer.state.clear()

    # -------------------------------------------------------------- checkpoints
    def extra_state(self) -> dict[str, Any]:
        return {"spec": self.spec.to_dict()}

    def take_sample_credit(self) -> int:
        """Extra samples the learner may draw without new data (granted by network resets)."""
        return self.resetter.take_sample_credit() if self.resetter is not None else 0
