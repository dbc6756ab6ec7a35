"""The discrete actor-critic shared by PPO, GRPO and DPO.

Image head (``nn.vis``: classic CNN or IMPALA CNN) and float MLP (``nn.float``) feed a shared
trunk (``nn.decoder.dense_hidden_dimension``), then a policy head (``nn.decoder.advantage``) giving
logits over the discrete actions and a value head (``nn.decoder.value``) giving V(s). Built from a
plain-data ``PolicyNetworkSpec`` so a worker rebuilds exactly the trainer's network.

Multi-action blocks (``environment.rl_action_offsets_ms`` with N offsets, ``n_action_branches``):
the policy is a factorised categorical, one distribution over the same A actions per offset from
one shared trunk: the policy head gives ``N * A`` logits (branch-major), the block's
log-probability is the sum of its N actions' log-probabilities and its entropy the sum of the N
branches' entropies (the branches are independent given the state), and a KL between two such
policies is the sum of the per-branch KLs.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from rulka.nn import init_orthogonal, make_mlp
from rulka.nn.blocks import LEAKY_SLOPE, leaky_gain
from rulka.nn.encoder import EncoderSpec, ImageFloatEncoder


@dataclasses.dataclass
class PolicyNetworkSpec(EncoderSpec):
    """Everything that fixes the actor-critic's shape (plain data, crosses the wire in actor_spec):
    the shared encoder's fields plus the trunk, policy and value heads."""

    trunk_hidden_dim: int = 1024
    policy_hidden_dim: int | None = None  # default trunk_hidden_dim // 2
    policy_layers: int = 1
    value_hidden_dim: int | None = None
    value_layers: int = 1
    n_action_branches: int = 1  # multi-action blocks: N categorical distributions (module docstring)


class ActorCritic(ImageFloatEncoder):
    """``forward(img, floats)`` -> ``(logits (B, A), value (B,))``; ``img`` uint8 ``(B, H, W)`` or
    None without image, ``floats`` ``(B, F)``."""

    def __init__(self, spec: PolicyNetworkSpec) -> None:
        super().__init__()
        self.spec = spec
        feature_dim = self._build_encoder(spec)
        self.trunk = nn.Sequential(nn.Linear(feature_dim, spec.trunk_hidden_dim),
                                   nn.LeakyReLU(LEAKY_SLOPE))
        init_orthogonal(self.trunk[0], leaky_gain())
        half = max(1, spec.trunk_hidden_dim // 2)
        # small initial logits (near-uniform policy) and unit-scale values, as PPO practice has it
        self.policy_head = make_mlp(spec.trunk_hidden_dim, spec.policy_hidden_dim or half,
                                    spec.n_actions * spec.n_action_branches, spec.policy_layers, last_gain=0.01)
        self.value_head = make_mlp(spec.trunk_hidden_dim, spec.value_hidden_dim or half, 1,
                                   spec.value_layers, last_gain=1.0)

    def features(self, img: torch.Tensor | None, floats: torch.Tensor) -> torch.Tensor:
        return self.trunk(self.encode(img, floats))

    def forward(self, img: torch.Tensor | None, floats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.features(img, floats)
        return self.policy_head(h), self.value_head(h)[:, 0]

    def log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Log-probabilities ``(B, N, A)`` of each branch's categorical from the logits ``(B, N * A)``
        (N = 1 without multi-action)."""
        return torch.log_softmax(logits.float().reshape(logits.shape[0], self.spec.n_action_branches, -1), dim=-1)

    def evaluate_actions(self, img: torch.Tensor | None, floats: torch.Tensor, actions: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log pi(a|s) (B,), entropy (B,), V(s) (B,)) for the given actions, ``(B,)`` or ``(B, N)``
        (a block: its log-probability and entropy are the sums over the N branches)."""
        logits, value = self(img, floats)
        logp_all = self.log_probs(logits)
        logp, entropy = factored_logp_entropy(logp_all, actions)
        return logp, entropy, value.float()


def factored_logp_entropy(logp_all: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For branch log-probabilities ``(B, N, A)`` and actions ``(B,)`` / ``(B, N)``: the actions'
    joint log-probability ``sum_d log pi_d(a_d|s)`` and the joint entropy ``sum_d H(pi_d)``, ``(B,)`` each."""
    b, n = logp_all.shape[:2]
    a = actions.long().reshape(b, n)
    logp = logp_all.gather(2, a[:, :, None])[..., 0].sum(1)
    entropy = -(logp_all.exp() * logp_all).sum(-1).sum(-1)
    return logp, entropy
