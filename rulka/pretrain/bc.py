"""Behaviour cloning into the RL network the config builds (``rulka pretrain bc``).

The network is exactly the one ``training.algorithm`` trains (same spec, same parameter names):
the actor-critic's policy logits for PPO / GRPO / DPO, and for IQN the mean Q over ``nn.iqn.n``
sampled quantile fractions used as logits. The loss is the cross-entropy of the recorded action.
Softmax ignores a shift shared by all actions, so for IQN a second term pins the scale that RL
will see: the squared error between the expert action's mean Q and the recorded return of that
step, with weight ``value_coef``. Without it the cloned Q-values sit far from the returns
(measured: mean Q near -160 where returns are about 1) and the first TD updates undo the clone.
For the cross-entropy IQN sees the float slot 0 (the mini-race time) as its actor does, set to 0;
for the value term it sees the times the replay draws for its transitions
(``rulka.agents.iqn.minirace.draw_mini_race_times``) and the return is that of the rest of the
mini-race (``rulka.pretrain.data.returns_to_go``, the run's first discount): the replay asks the
network for values at every time of the mini-race, and a clone fitted at time 0 alone answers
at the other times with values no training set. With mini-races the value term is IQN's own
quantile Huber loss (``rulka.agents.iqn.loss``) of the recorded action's ``nn.iqn.n`` quantiles
against the recorded return, so the quantiles, not only their mean, start where TD will look. One tenth of the steps (at least one) is held
out to report accuracy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from rulka.errors import UserError
from rulka.nn.freeze import network_kind
from rulka.pretrain.data import Steps

log = logging.getLogger(__name__)


@dataclass
class BCResult:
    network: nn.Module
    kind: str
    spec: dict[str, Any]
    first_loss: float
    last_loss: float
    train_accuracy: float
    held_out_accuracy: float


def build_network(cfg: Any) -> tuple[nn.Module, str, Any]:
    """(network, ``iqn`` | ``policy``, spec) for the config's learner."""
    kind = network_kind(cfg)
    if kind == "iqn":
        from rulka.agents.iqn.network import IQNNetwork
        from rulka.agents.iqn.settings import network_spec_from_config

        spec = network_spec_from_config(cfg)
        return IQNNetwork(spec), kind, spec
    if kind == "policy":
        from rulka.agents.policy.network import ActorCritic
        from rulka.agents.policy.settings import network_spec_from_config as policy_spec

        spec = policy_spec(cfg)
        return ActorCritic(spec), kind, spec
    raise UserError(f"rulka pretrain builds IQN or actor-critic networks, not training.algorithm "
                    f"{cfg.training.algorithm}")


def logits(net: nn.Module, kind: str, img: torch.Tensor | None, flt: torch.Tensor, n_taus: int) -> torch.Tensor:
    if kind == "iqn":
        from rulka.agents.iqn.network import mean_q

        return mean_q(net, img, flt, n_taus)
    return net(img, flt)[0]


def bc_return_settings(cfg: Any) -> tuple[int | None, float]:
    """(horizon, gamma) of the returns IQN's targets estimate: one mini-race (None for a gym env,
    the whole episode) and the first discount of ``training.gamma_schedule``."""
    from rulka.agents.iqn.settings import uses_mini_races

    knots = cfg.scaled_knots("training.gamma_schedule") or [[0, 1.0]]
    gamma = float(list(knots)[0][1])
    return (int(cfg.temporal_mini_race_duration_actions) if uses_mini_races(cfg) else None), gamma


def fit(opt: torch.optim.Optimizer, updates: int, batch_loss: Callable[[], torch.Tensor], *, label: str,
        log_every: int, digits: int = 4) -> tuple[float, float]:
    """``updates`` optimizer steps on ``batch_loss()`` (a fresh batch each call); the first and last
    loss, logged every ``log_every`` updates. The loop of every ``rulka pretrain`` trainer."""
    first = last = float("nan")
    for u in range(updates):
        loss = batch_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        last = float(loss.detach())
        if u == 0:
            first = last
        if log_every and (u + 1) % log_every == 0:
            log.info("%s update %d/%d: loss %.*f", label, u + 1, updates, digits, last)
    return first, last


def actor_floats(cfg: Any, kind: str, floats: np.ndarray) -> np.ndarray:
    """The float observations as the config's actor feeds them: IQN with mini-races sees slot 0
    (the mini-race time) set to 0, as ``IQNActor`` does."""
    from rulka.agents.iqn.settings import uses_mini_races

    out = floats.copy()
    if kind == "iqn" and uses_mini_races(cfg):
        out[:, 0] = 0.0
    return out


@torch.no_grad()
def greedy_accuracy(net: nn.Module, kind: str, cfg: Any, steps: Steps, idx: np.ndarray) -> float:
    """Share of the steps ``idx`` where the network's greedy action (IQN: the mean over the greedy
    actor's ``nn.iqn.k`` fixed quantile fractions) is the recorded one."""
    was_training = net.training
    net.eval()
    floats = actor_floats(cfg, kind, steps.floats[idx])
    hits = 0
    for start in range(0, len(idx), 1024):
        sl = slice(start, start + 1024)
        img = None if steps.images is None else torch.from_numpy(steps.images[idx[sl]])
        flt = torch.from_numpy(floats[sl])
        if kind == "iqn":
            from rulka.agents.iqn.network import mean_q

            k = int(cfg.nn.iqn.k)
            taus = (torch.arange(k, dtype=torch.float32) + 0.5) / k  # the greedy actor's fractions
            out = mean_q(net, img, flt, k, taus.repeat_interleave(len(flt)))
        else:
            out = net(img, flt)[0]
        hits += int((out.argmax(1) == torch.from_numpy(steps.actions[idx[sl]])).sum())
    net.train(was_training)
    return hits / max(1, len(idx))


def train_bc(cfg: Any, steps: Steps, *, updates: int = 2000, batch_size: int = 256, lr: float = 1e-3,
             seed: int = 0, log_every: int = 500, value_coef: float = 1.0) -> BCResult:
    """Fit the config's network to the recorded actions (see the module docstring)."""
    from rulka.agents.iqn.loss import quantile_huber_loss
    from rulka.agents.iqn.minirace import draw_mini_race_times
    from rulka.agents.iqn.network import stratified_mirrored_taus
    from rulka.agents.iqn.settings import uses_mini_races

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net, kind, spec = build_network(cfg)
    net.train()
    floats = actor_floats(cfg, kind, steps.floats)
    if floats.shape[1] != spec.float_dim:
        raise UserError(f"the episodes have {floats.shape[1]} floats per step, the config's network {spec.float_dim}")
    if int(steps.actions.max()) >= spec.n_actions:
        raise UserError(f"the episodes use action {int(steps.actions.max())}, the network has {spec.n_actions}")
    images = steps.images if spec.uses_image else None
    order = rng.permutation(len(steps))
    n_held = max(1, len(order) // 10)
    held, train = order[:n_held], order[n_held:]
    if len(train) == 0:
        raise UserError("too few recorded steps to clone (need at least 2)")
    opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=lr)
    n_taus = int(cfg.nn.iqn.n)

    def tensors(idx: np.ndarray) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        img = None if images is None else torch.from_numpy(images[idx])
        return img, torch.from_numpy(floats[idx]), torch.from_numpy(steps.actions[idx])

    returns = to_go = None
    if kind == "iqn" and value_coef > 0:
        if steps.returns is None:
            raise UserError("IQN behaviour cloning needs the recorded returns (load_steps computes them)")
        returns = torch.from_numpy(steps.returns)
        if uses_mini_races(cfg) and steps.returns_to_go is not None:
            to_go = torch.from_numpy(steps.returns_to_go)
    tr = cfg.training

    def batch_loss() -> torch.Tensor:
        idx = rng.choice(train, size=min(batch_size, len(train)), replace=False)
        img, flt, act = tensors(idx)
        out = logits(net, kind, img, flt, n_taus)
        loss = nn.functional.cross_entropy(out, act)
        if to_go is not None:  # the value of the rest of the mini-race, at the times the replay draws
            horizon = to_go.shape[1]
            t = draw_mini_race_times(rng, len(idx), horizon, tr.oversample_long_term_steps,
                                     tr.oversample_maximum_term_steps)
            flt_t = flt.clone()
            flt_t[:, 0] = torch.from_numpy(t).float()
            b = len(idx)
            taus = stratified_mirrored_taus(b, n_taus)
            z = net(img, flt_t, taus).reshape(n_taus, b, -1)[:, torch.arange(b), act].T  # (B, n) quantiles of a_E
            target = to_go[idx, horizon - 1 - t][:, None]  # one sample of the return: the recorded one
            per_item = quantile_huber_loss(target, z, taus.reshape(n_taus, b).T, float(cfg.nn.iqn.kappa))
            loss = loss + value_coef * per_item.mean()
        elif returns is not None:
            chosen = out.gather(1, act[:, None])[:, 0]
            loss = loss + value_coef * nn.functional.mse_loss(chosen, returns[idx])
        return loss

    first, last = fit(opt, updates, batch_loss, label="bc", log_every=log_every)
    return BCResult(net, kind, spec.to_dict(), first, last, greedy_accuracy(net, kind, cfg, steps, train),
                    greedy_accuracy(net, kind, cfg, steps, held))
