"""``pretrain``: learning from demonstrations during the RL run (IQN)."""

from __future__ import annotations

from pydantic import NonNegativeFloat, PositiveInt

from rulka.config.sections.common import Section


class PretrainConfig(Section):
    """Demonstrations kept for the whole IQN run (DQfD, Hester et al. 2018).

    Recorded episodes (``rulka pretrain record``, ``rulka dpo record``) in a replay of their own that is
    never overwritten; every update adds, on a batch drawn from it, the TD loss and the
    large-margin loss ``max_a [Q(s,a) + l(a_E,a)] - Q(s,a_E)`` that keeps the recorded action
    on top. ``rulka pretrain bc --objective dqfd`` trains the same two losses on the recordings
    alone before the run (DQfD's pre-training phase)."""

    demo_episodes: str = ""
    """Folder (or file) of *.rulka-episode demonstrations kept for the whole run (IQN); empty = off."""
    demo_batch_size: PositiveInt = 16
    """Demonstration transitions per update, drawn besides training.batch_size."""
    margin: NonNegativeFloat = 0.8
    """Large margin l(a_E, a) of the supervised loss for every action a other than the recorded a_E (DQfD: 0.8)."""
    margin_loss_weight: NonNegativeFloat = 1.0
    """Weight of the large-margin loss on demonstration transitions (DQfD lambda_2: 1)."""
    demo_td_loss_weight: NonNegativeFloat = 1.0
    """Weight of the TD (quantile Huber) loss on demonstration transitions (DQfD: 1)."""
