"""``PolicyActor``: the stochastic policy a worker runs for PPO, GRPO and DPO."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rulka.agents.iqn.actor import split_obs
from rulka.agents.policy.network import ActorCritic, PolicyNetworkSpec
from rulka.interfaces import ActorModule, Weights


class PolicyActor(ActorModule):
    """Samples ``a ~ pi(.|s)`` (``test=True``: the most probable action).

    ``act_with_info`` records, per step, ``logprob`` (log pi(a|s) of the action taken, under the
    weights that chose it) and ``value`` (V(s)); the worker stores them as ``extra/logprob`` and
    ``extra/value`` in the segment, whose header carries the weights version. The learners use the
    log-probabilities as the behaviour policy (PPO's ratio) and the values for GAE.
    """

    def __init__(self, network: dict[str, Any], seed: int | None = None, device: str = "cpu") -> None:
        self.spec = PolicyNetworkSpec.from_dict(dict(network))
        self.device = torch.device(device)
        self.net = ActorCritic(self.spec).to(self.device).eval()
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(int(seed) if seed is not None else int(np.random.SeedSequence().entropy % 2**63))

    @torch.inference_mode()
    def distribution(self, obs: Any) -> tuple[np.ndarray, float]:
        """(log-probabilities over actions, V(s)) for one observation; with N action branches
        (multi-action blocks) the log-probabilities are ``(N, A)``, one row per branch."""
        img, flt = split_obs(obs)
        img_t = None if img is None or not self.spec.uses_image else torch.from_numpy(img[None]).to(self.device)
        logits, value = self.net(img_t, torch.from_numpy(flt[None]).to(self.device))
        logp = self.net.log_probs(logits)[0].cpu().numpy()
        return (logp[0] if self.spec.n_action_branches == 1 else logp), float(value[0])

    def act_with_info(self, obs: Any, test: bool = False) -> tuple[Any, dict[str, Any]]:
        logp, value = self.distribution(obs)
        if logp.ndim == 2:  # a block: each branch sampled (or its argmax), log-probability summed
            if test:
                block = np.argmax(logp, axis=1).astype(np.int64)
            else:
                probs = torch.from_numpy(np.exp(logp.astype(np.float64)))
                block = torch.multinomial(probs, 1, generator=self.generator)[:, 0].numpy().astype(np.int64)
            return block, {"logprob": np.float32(logp[np.arange(len(block)), block].sum()), "value": np.float32(value)}
        if test:
            action = int(np.argmax(logp))
        else:
            probs = torch.from_numpy(np.exp(logp.astype(np.float64)))
            action = int(torch.multinomial(probs, 1, generator=self.generator)[0])
        return action, {"logprob": np.float32(logp[action]), "value": np.float32(value)}

    def act(self, obs: Any, test: bool = False) -> Any:
        return self.act_with_info(obs, test)[0]

    def load_weights(self, weights: Weights) -> None:
        tensors = {k: v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v)) for k, v in weights.items()}
        self.net.load_state_dict(tensors)

    def get_weights(self) -> dict[str, Any]:
        return {k: v.detach().cpu().clone() for k, v in self.net.state_dict().items()}
