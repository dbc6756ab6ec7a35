"""IQN with mini-races: network, learner, actor (the flagship off-policy agent)."""

from rulka.agents.iqn.actor import IQNActor
from rulka.agents.iqn.agent import IQNAgent, IQNHyper
from rulka.agents.iqn.network import IQNNetwork, IQNNetworkSpec, stratified_mirrored_taus

__all__ = ["IQNActor", "IQNAgent", "IQNHyper", "IQNNetwork", "IQNNetworkSpec", "stratified_mirrored_taus"]
