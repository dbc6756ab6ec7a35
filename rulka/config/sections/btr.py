"""``btr``: Beyond The Rainbow additions (NoisyNet, Munchausen, spectral norm...)."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)

from rulka.config.sections.common import Section


class BtrConfig(Section):
    """Optional IQN extras (Munchausen, IMPALA CNN, LayerNorm, NoisyNet)."""

    use_munchausen: bool = False
    """Munchausen soft targets."""
    munchausen_alpha: Annotated[float, Field(ge=0.0, le=1.0)] = 0.9
    """Munchausen scale."""
    munchausen_entropy_tau: PositiveFloat = 0.03
    """Munchausen entropy temperature."""
    munchausen_lo: float = -1.0
    """Lower clip of the Munchausen log-policy term."""
    use_impala_cnn: bool = False
    """Fills nn.vis.cnn.use_impala_cnn when that key is omitted."""
    impala_model_size: PositiveInt = 2
    """Fills nn.vis.cnn.impala_model_size when omitted."""
    use_adaptive_maxpool: bool = False
    """Fills nn.vis.cnn.use_adaptive_maxpool when omitted."""
    adaptive_maxpool_size: PositiveInt = 6
    """Fills nn.vis.cnn.adaptive_maxpool_size when omitted."""
    use_spectral_norm: bool = False
    """Fills nn.vis.cnn.use_spectral_norm when omitted."""
    use_layer_norm: bool = False
    """LayerNorm in the float extractor and heads."""
    use_noisy_linear: bool = False
    """Factorised noisy linear layers in the heads."""
    noisy_sigma0: PositiveFloat = 0.5
    """Initial noise scale of noisy layers."""
    noisy_resample_every_actions: NonNegativeInt = 0
    """Workers' noise sample: redrawn each episode, and every N actions when N > 0 (greedy: none)."""
