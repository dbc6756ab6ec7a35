"""SAC and REDQ for continuous actions (``training.algorithm: sac``).

- ``network``: the squashed-Gaussian actor, the critic ensemble, the tanh log-probability;
- ``agent``: ``SACAgent`` (critic target, polyak averaging, entropy tuning; REDQ when
  ``sac.n_critics`` > 2);
- ``actor``: ``SACActor``, what a worker runs;
- ``settings``: config -> spec/hyperparameters/memory, and the registry factories.

The replay is the generic ``rulka.memory.UniformReplayMemory``.
"""

from rulka.agents.sac.actor import SACActor
from rulka.agents.sac.agent import SACAgent, SacHyper, critic_target, temperature_loss
from rulka.agents.sac.network import CriticEnsemble, SacNetworkSpec, SquashedGaussianActor, squashed_log_prob

__all__ = ["CriticEnsemble", "SACActor", "SACAgent", "SacHyper", "SacNetworkSpec", "SquashedGaussianActor",
           "critic_target", "squashed_log_prob", "temperature_loss"]
