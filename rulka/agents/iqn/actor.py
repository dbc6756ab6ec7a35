"""``IQNActor``: the IQN policy a worker runs (epsilon-greedy + epsilon-Boltzmann exploration)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rulka.agents.iqn.network import IQNNetwork, IQNNetworkSpec, mean_q
from rulka.interfaces import ActorModule, Weights

EXPLORATION_KEY = "exploration"  # weights entry [epsilon, epsilon_boltzmann, tau_epsilon_boltzmann]


def split_obs(obs: Any) -> tuple[np.ndarray | None, np.ndarray]:
    """(image or None, float vector) from a Dict observation ``{"img", "float"}`` or a plain array."""
    if isinstance(obs, dict):
        img = obs.get("img")
        flt = obs.get("float", obs.get("x"))
        return (None if img is None else np.asarray(img)), np.asarray(flt, dtype=np.float32).reshape(-1)
    return None, np.asarray(obs, dtype=np.float32).reshape(-1)


class IQNActor(ActorModule):
    """Chooses actions from the mean of ``iqn_k`` quantiles.

    Exploration (not when ``test=True``): with probability ``epsilon`` a uniformly random action;
    otherwise with probability ``epsilon_boltzmann`` the argmax of ``Q + tau_epsilon_boltzmann *
    N(0, 1)``; otherwise the greedy action. ``act_with_info`` records ``q_values`` and ``greedy``
    (whether the chosen action is the argmax of Q). With ``mini_race_actions`` set, the float
    slot 0 (mini-race time) is set to 0: acting always looks a full mini-race ahead.

    Exploring, Q is averaged over ``iqn_k`` sampled quantile fractions (as in training); with
    ``test=True`` over the ``iqn_k`` stratum midpoints ``(j + 0.5) / iqn_k``, so the greedy policy
    is a deterministic function of the observation and a race can be driven again.
    """

    def __init__(self, network: dict[str, Any], iqn_k: int = 32, epsilon: float = 0.0,
                 epsilon_boltzmann: float = 0.0, tau_epsilon_boltzmann: float = 0.01,
                 mini_race_actions: int | None = None, seed: int | None = None, device: str = "cpu") -> None:
        if iqn_k % 2:
            raise ValueError("iqn_k must be even")
        self.spec = IQNNetworkSpec.from_dict(dict(network))
        self.device = torch.device(device)
        self.net = IQNNetwork(self.spec).to(self.device).eval()
        self.iqn_k = int(iqn_k)
        self._midpoints = (torch.arange(self.iqn_k, dtype=torch.float32, device=self.device) + 0.5) / self.iqn_k
        self.epsilon = float(epsilon)
        self.epsilon_boltzmann = float(epsilon_boltzmann)
        self.tau_epsilon_boltzmann = float(tau_epsilon_boltzmann)
        self.mini_race_actions = mini_race_actions
        self.rng = np.random.default_rng(seed)

    def q_values(self, obs: Any, test: bool = False) -> np.ndarray:
        """Mean Q per action for one observation (over the fixed midpoint fractions if ``test``)."""
        img, flt = split_obs(obs)
        if self.mini_race_actions:
            flt = flt.copy()
            flt[0] = 0.0
        with torch.inference_mode():  # less per-call bookkeeping than no_grad; outputs leave as numpy
            img_t = None if img is None or not self.spec.uses_image else torch.from_numpy(img[None]).to(self.device)
            flt_t = torch.from_numpy(flt[None]).to(self.device)
            taus = self._midpoints if test else None
            return mean_q(self.net, img_t, flt_t, self.iqn_k, taus)[0].cpu().numpy().astype(np.float32)

    def act_with_info(self, obs: Any, test: bool = False) -> tuple[int, dict[str, Any]]:
        q = self.q_values(obs, test)
        greedy_action = int(np.argmax(q))
        action = greedy_action
        if not test:
            if self.rng.random() < self.epsilon:
                action = int(self.rng.integers(len(q)))
            elif self.rng.random() < self.epsilon_boltzmann:
                action = int(np.argmax(q + self.tau_epsilon_boltzmann * self.rng.standard_normal(len(q))))
        return action, {"q_values": q, "greedy": action == greedy_action}

    def act(self, obs: Any, test: bool = False) -> int:
        return self.act_with_info(obs, test)[0]

    def set_exploration(self, epsilon: float, epsilon_boltzmann: float, tau_epsilon_boltzmann: float | None = None) -> None:
        self.epsilon, self.epsilon_boltzmann = float(epsilon), float(epsilon_boltzmann)
        if tau_epsilon_boltzmann is not None:
            self.tau_epsilon_boltzmann = float(tau_epsilon_boltzmann)

    def load_weights(self, weights: Weights) -> None:
        """Load network tensors; an ``exploration`` entry (3 floats) updates the exploration rates."""
        tensors = {k: torch.as_tensor(np.asarray(v)) if not isinstance(v, torch.Tensor) else v
                   for k, v in weights.items()}
        explo = tensors.pop(EXPLORATION_KEY, None)
        self.net.load_state_dict(tensors)
        if explo is not None:
            e = explo.float().reshape(-1).tolist()
            if len(e) == 3:
                self.set_exploration(*e)

    def get_weights(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v.detach().cpu().clone() for k, v in self.net.state_dict().items()}
        out[EXPLORATION_KEY] = torch.tensor([self.epsilon, self.epsilon_boltzmann, self.tau_epsilon_boltzmann])
        return out
