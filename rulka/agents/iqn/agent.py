"""``IQNAgent``: the IQN learner (online + target network, quantile Huber loss, soft target
updates, optional Double-DQN and Munchausen targets) trained on ``ReplayBatch`` es from
``MiniRaceReplayMemory``. Readable top to bottom: ``train`` is the whole update."""

from __future__ import annotations

import copy
import dataclasses
import inspect
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
from rulka.memory.deferred import DeferredValues
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
    amp_dtype: str = _NN_TRAINING.amp_dtype
    """Autocast dtype with ``use_amp``: float16 (a gradient scaler, which reads the GPU's inf check
    back every step) or bfloat16 (no scaler, no such read)."""
    use_jit: bool = _NN_TRAINING.use_jit  # torch.compile, CUDA only
    compile_mode: str = _NN_TRAINING.compile_mode
    """torch.compile's mode with ``use_jit``: default, reduce-overhead (CUDA graphs), max-autotune."""
    optimizer_impl: str = "auto"
    """How the optimizer steps its tensors (not a config key; bench rows pick one through
    ``trainer.agent_kwargs``): auto (fused where torch has it on CUDA: Adam; else foreach),
    fused, foreach, or for_loop (torch's per-tensor loop, torch's own choice on CPU)."""
    fuse_forwards: bool | None = None
    """Run forwards of one network on two inputs as one forward of both (Munchausen's target
    network on next states and states; the same numbers); None: on CUDA only (fewer launches there;
    on the 2-core CPU machine a paired bench/learner.py --steps run found no gain)."""

    def __post_init__(self) -> None:
        if self.iqn_n % 2 or self.iqn_k % 2:
            raise ValueError("iqn_n and iqn_k must be even (taus are mirrored around 0.5)")
        if self.target_action not in ("quantile_max", "mean_argmax"):
            raise ValueError(f"target_action must be quantile_max or mean_argmax, got {self.target_action!r}")
        if self.amp_dtype not in _AMP_DTYPES:
            raise ValueError(f"amp_dtype must be float16 or bfloat16, got {self.amp_dtype!r}")
        if self.optimizer_impl not in ("auto", "fused", "foreach", "for_loop"):
            raise ValueError(f"optimizer_impl must be auto, fused, foreach or for_loop, got {self.optimizer_impl!r}")


_AMP_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def optimizer_kwargs(opt_cls: type, impl: str, device: torch.device) -> dict[str, bool]:
    """``fused``/``foreach`` arguments for ``opt_cls`` on ``device``: auto takes torch's fused
    kernel where the class has one on CUDA (Adam, AdamW: one launch for every tensor), else foreach
    (a few launches for all tensors instead of several per tensor). bench/learner.py's optimizer
    rows measure the choice against the per-tensor loop."""
    fused_ok = "fused" in inspect.signature(opt_cls.__init__).parameters and device.type == "cuda"
    if impl == "auto":
        impl = "fused" if fused_ok else "foreach"
    if impl == "fused":
        if not fused_ok:
            raise ValueError(f"{opt_cls.__name__} has no fused implementation on {device.type}")
        return {"fused": True, "foreach": False}
    return {"foreach": impl == "foreach"}


def _t(a: np.ndarray | torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """A batch array on ``device`` (a batch the memory assembled there passes through as it is)."""
    if a is None:
        return None
    if isinstance(a, torch.Tensor):
        return a.to(device, non_blocking=True)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device, non_blocking=True)


def _forward_pair(net: torch.nn.Module, first: tuple[torch.Tensor | None, torch.Tensor],
                  second: tuple[torch.Tensor | None, torch.Tensor], taus: torch.Tensor, n: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``net`` on two batches of B items at the same taus ``(n*B,)`` as one forward of 2B items:
    the two ``(n*B, A)`` outputs. The network has no batch statistics (no batch norm, no dropout
    in training; noisy layers keep one noise sample per forward), so each row is what a forward
    of its own batch gives."""
    (img1, flt1), (img2, flt2) = first, second
    b = flt1.shape[0]
    img = None if img1 is None else torch.cat([img1, img2])
    both_taus = taus.reshape(n, 1, b).expand(n, 2, b).reshape(-1)
    q = net(img, torch.cat([flt1, flt2]), both_taus).reshape(n, 2, b, -1)
    return q[:, 0].reshape(n * b, -1), q[:, 1].reshape(n * b, -1)


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
        self._optimizer_impl = optimizer_kwargs(opt_cls, self.hp.optimizer_impl, self.device)
        self.optimizer = opt_cls(self.online.parameters(), lr=self.lr,
                                 betas=(self.hp.adam_beta1, self.hp.adam_beta2), eps=self.hp.adam_epsilon,
                                 **self._optimizer_impl)
        cuda = self.device.type == "cuda"
        self.amp = bool(self.hp.use_amp and cuda)
        self.amp_dtype = _AMP_DTYPES[self.hp.amp_dtype]
        self._fuse_forwards = cuda if self.hp.fuse_forwards is None else bool(self.hp.fuse_forwards)
        # bfloat16 has float32's range: no loss scaling, and no read of the scaler's inf check per step
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp and self.amp_dtype == torch.float16)
        # torch.compile (CUDA only) compiles the loss's forwards as one function that always runs with
        # gradients on (the targets' forwards are inside it, under no_grad) at the batch's fixed shapes:
        # no recompile on grad mode or on shapes. ``compile_loss`` compiles it on any device (tests).
        self._compiled_loss: Callable[..., Any] | None = None
        if self.hp.use_jit and cuda:
            self.compile_loss()
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
        # PER: report TD errors as DeferredValues where the memory accepts them (False: read back at
        # once, the behaviour before; the batches and priorities are the same either way)
        self.defer_td_errors = True

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

    def _draw_taus(self, b: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """The update's quantile fractions, drawn in one fixed order: the target's, the online
        network's on next states (Double DQN only), the online network's on states."""
        n, dev = self.hp.iqn_n, self.device
        target_taus = stratified_mirrored_taus(b, n, device=dev)
        ddqn = self.hp.use_ddqn and not self.hp.use_munchausen
        ddqn_taus = stratified_mirrored_taus(b, n, device=dev) if ddqn else None
        return target_taus, ddqn_taus, stratified_mirrored_taus(b, n, device=dev)

    def _targets(self, state_img: torch.Tensor | None, state_float: torch.Tensor, action: torch.Tensor,
                 next_img: torch.Tensor | None, next_float: torch.Tensor, reward: torch.Tensor,
                 gamma: torch.Tensor, taus: torch.Tensor, ddqn_taus: torch.Tensor | None) -> torch.Tensor:
        """Target quantile samples (B, n). With N action branches the bootstrap is BDQ's shared one,
        the mean over branches of each branch's next value (``rulka.agents.iqn.branching``); with
        N = 1 it is that branch's value."""
        n, b, nb = self.hp.iqn_n, next_float.shape[0], self.spec.n_action_branches
        if self.hp.use_munchausen:
            ent = self.hp.munchausen_entropy_tau
            if self._fuse_forwards:  # the target network on next states and states in one forward
                both = _forward_pair(self.target, (next_img, next_float), (state_img, state_float), taus, n)
                q_next, q_s = (split_branches(q, n, b, nb) for q in both)
            else:
                q_next = split_branches(self.target(next_img, next_float, taus), n, b, nb)
                q_s = split_branches(self.target(state_img, state_float, taus), n, b, nb)
            next_value = branched_next_value(q_next.float(), lambda q: munchausen_next_value(q, ent))  # (n, B)
            bonus = munchausen_bonus(q_s.mean(0).reshape(b * nb, -1), action.reshape(-1), self.hp.munchausen_alpha,
                                     ent, self.hp.munchausen_lo)
            reward = reward + bonus.reshape(b, nb).mean(1)  # BDQ's branch mean, as for the bootstrap
        else:
            q_next = split_branches(self.target(next_img, next_float, taus).float(), n, b, nb)  # (n, B, N, A)
            if ddqn_taus is not None:
                q_online_next = self.online(next_img, next_float, ddqn_taus)
                a_star = split_branches(q_online_next, n, b, nb).mean(0).argmax(2)  # (B, N)
                next_value = gather_branches(q_next, a_star).mean(2)
            else:
                next_value = branched_next_value(q_next, lambda q: greedy_next_value(q, self.hp.target_action))
        return (reward[None] + gamma[None] * next_value).transpose(0, 1)  # (B, n)

    def _loss_terms(self, state_img: torch.Tensor | None, state_float: torch.Tensor, action: torch.Tensor,
                    next_img: torch.Tensor | None, next_float: torch.Tensor, reward: torch.Tensor,
                    gamma: torch.Tensor, target_taus: torch.Tensor, ddqn_taus: torch.Tensor | None,
                    taus: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The update's forwards and quantile loss on device tensors, nothing read back to the host
        (what ``compile_loss`` compiles): (per-item loss (B,), online quantiles (B, N, n), targets
        (B, n), all online Q). With N action branches each branch's quantiles at its taken action
        meet the shared target; the per-item loss is the mean over branches (BDQ)."""
        n, b, nb = self.hp.iqn_n, state_float.shape[0], self.spec.n_action_branches
        with torch.autocast(device_type=self.device.type, dtype=self.amp_dtype, enabled=self.amp):
            with torch.no_grad():
                target = self._targets(state_img, state_float, action, next_img, next_float, reward, gamma,
                                       target_taus, ddqn_taus)
            q = self.online(state_img, state_float, taus)
            online = gather_branches(split_branches(q, n, b, nb), action).permute(1, 2, 0)  # (B, N, n)
        online = online.float()
        item_taus = taus.reshape(n, b).transpose(0, 1)
        # the loss is vectorised over items, branches and quantile pairs: (B*N, n', n) in one go
        per_branch = quantile_huber_loss(target.float().repeat_interleave(nb, 0), online.reshape(b * nb, n),
                                         item_taus.repeat_interleave(nb, 0), self.hp.iqn_kappa)
        return per_branch.reshape(b, nb).mean(1), online, target, q

    def compile_loss(self, **compile_kwargs: Any) -> None:
        """Compile ``_loss_terms`` (torch.compile, ``hp.compile_mode``, static shapes); ``train`` then
        calls the compiled function. ``evaluate`` (no gradients) stays eager, so the compiled
        function only ever sees one grad mode."""
        kwargs = {"mode": self.hp.compile_mode, "dynamic": False, **compile_kwargs}
        if kwargs.get("backend") not in (None, "inductor"):
            kwargs.pop("mode")  # the mode is inductor's
        self._compiled_loss = torch.compile(self._loss_terms, **kwargs)

    def _loss(self, batch: ReplayBatch, compiled: bool = False
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(per-item loss (B,), online quantiles (B, N, n), targets (B, n), all online Q, target taus (B, n))."""
        n, b, dev = self.hp.iqn_n, len(batch), self.device
        target_taus, ddqn_taus, taus = self._draw_taus(b)
        fn = self._loss_terms
        if compiled and self._compiled_loss is not None:
            fn = self._compiled_loss
            if self.hp.compile_mode == "reduce-overhead":  # CUDA graphs: a new update, earlier outputs are done
                torch.compiler.cudagraph_mark_step_begin()
        per_item, online, target, q = fn(
            _t(batch.state_img, dev), _t(batch.state_float, dev), self._actions(batch), _t(batch.next_img, dev),
            _t(batch.next_float, dev), _t(batch.reward, dev).float(), _t(batch.gamma, dev).float(),
            target_taus, ddqn_taus, taus)
        return per_item, online, target, q, target_taus.reshape(n, b).transpose(0, 1)

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
        per_item, online, target, q, target_taus = self._loss(batch, compiled=True)
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
            # a memory that takes them deferred reads them back when it next needs them: no wait here
            # for the step to finish on a GPU (rulka.memory.deferred)
            batch.report_td_errors(DeferredValues(td) if self.defer_td_errors and getattr(batch, "defers_td_errors", False)
                                   else td.cpu().numpy())
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

    def _keep_optimizer_impl(self) -> None:
        """A loaded optimizer state brings the fused/foreach flags of the run that saved it (another
        device, an older rulka): this agent's own choice is put back, and a fused kernel gets its
        step counts on the parameters' device."""
        for group in self.optimizer.param_groups:
            group.update(self._optimizer_impl)
            if "fused" in group and not self._optimizer_impl.get("fused"):
                group["fused"] = False
        if self._optimizer_impl.get("fused"):
            for p, st in self.optimizer.state.items():
                if torch.is_tensor(st.get("step")):
                    st["step"] = st["step"].to(p.device, torch.float32)

    def take_sample_credit(self) -> int:
        """Extra samples the learner may draw without new data (granted by network resets)."""
        return self.resetter.take_sample_credit() if self.resetter is not None else 0

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._keep_optimizer_impl()
