"""The typed sections of a run configuration (one pydantic model per YAML section).

Key names and defaults follow the configuration guide (``environment``, ``nn``, ``training``,
``memory``, ``exploration``, ``rewards``, ``map_cycle``, ``performance``, ``btr``, ``ppo``, ``dpo``,
``grpo``, and ``state_normalization``); rulka adds ``network``, ``worker``, ``trainer``, ``logging``
and ``user``. Every model forbids unknown keys and NaN/infinite numbers, and is frozen: change a
loaded config with
:func:`rulka.config.with_overrides`, which validates again.

Values the guide calls *computed* (``ms_per_action``, ``float_input_dim``, ...) are read-only
properties, never YAML keys. The docstring under each field is its one-line documentation; it is
written next to the key in ``configs/default.yaml`` (read from this source only when that text is
made, so importing stays fast).

One module per section of the guide; this package re-exports every name, so
``from rulka.config.sections import X`` is the import to use.
"""

from __future__ import annotations

from rulka.config.sections.btr import BtrConfig
from rulka.config.sections.common import (
    Algorithm,
    FloatKnots,
    Frame,
    MemoryKnots,
    PositiveKnots,
    Section,
    SuffixKnots,
    UnitKnots,
    _knots,
    _positive_values,
    _unit_values,
)
from rulka.config.sections.dpo import DpoConfig
from rulka.config.sections.environment import EnvironmentConfig, Tm2020Config
from rulka.config.sections.exploration import ExplorationConfig
from rulka.config.sections.grpo import GrpoConfig
from rulka.config.sections.log import LoggingConfig, TensorboardConfig, WandbConfig
from rulka.config.sections.map_cycle import MapCycleConfig, MapCycleEntry
from rulka.config.sections.memory import MemoryConfig
from rulka.config.sections.network import NetworkConfig
from rulka.config.sections.nn import (
    DecoderConfig,
    EncoderConfig,
    FloatBranchConfig,
    FloatMlpConfig,
    FusionCnnConfig,
    FusionMlpConfig,
    FusionMode,
    HeadSlotConfig,
    HfEmbeddingConfig,
    ImageSizeConfig,
    IqnCoreConfig,
    MlpSlotConfig,
    NnConfig,
    NnTrainingConfig,
    TransformersConfig,
    TransformerStackConfig,
    VisCnnConfig,
    VisConfig,
)
from rulka.config.sections.performance import PerformanceConfig
from rulka.config.sections.ppo import PpoConfig
from rulka.config.sections.pretrain import PretrainConfig
from rulka.config.sections.rewards import RewardsConfig
from rulka.config.sections.sac import SacConfig
from rulka.config.sections.state_normalization import StateNormalizationConfig
from rulka.config.sections.trainer import RateLimitConfig, TrainerConfig
from rulka.config.sections.training import TrainingConfig
from rulka.config.sections.user import UserConfig
from rulka.config.sections.worker import WorkerConfig

# the modules whose source holds the field docstrings (rulka.config.reference reads them)
MODULES = (
    "common",
    "environment",
    "nn",
    "training",
    "memory",
    "exploration",
    "rewards",
    "map_cycle",
    "performance",
    "state_normalization",
    "btr",
    "ppo",
    "dpo",
    "grpo",
    "sac",
    "pretrain",
    "network",
    "worker",
    "trainer",
    "log",
    "user",
)

__all__ = [
    "_knots",
    "_positive_values",
    "_unit_values",
    "Frame",
    "FloatKnots",
    "UnitKnots",
    "PositiveKnots",
    "MemoryKnots",
    "SuffixKnots",
    "Algorithm",
    "Section",
    "Tm2020Config",
    "EnvironmentConfig",
    "FusionMode",
    "ImageSizeConfig",
    "VisCnnConfig",
    "TransformersConfig",
    "FloatMlpConfig",
    "VisConfig",
    "FloatBranchConfig",
    "FusionMlpConfig",
    "FusionCnnConfig",
    "HfEmbeddingConfig",
    "EncoderConfig",
    "IqnCoreConfig",
    "MlpSlotConfig",
    "TransformerStackConfig",
    "HeadSlotConfig",
    "DecoderConfig",
    "NnTrainingConfig",
    "NnConfig",
    "TrainingConfig",
    "MemoryConfig",
    "ExplorationConfig",
    "RewardsConfig",
    "MapCycleEntry",
    "MapCycleConfig",
    "PerformanceConfig",
    "StateNormalizationConfig",
    "BtrConfig",
    "PpoConfig",
    "DpoConfig",
    "GrpoConfig",
    "PretrainConfig",
    "SacConfig",
    "NetworkConfig",
    "WorkerConfig",
    "RateLimitConfig",
    "TrainerConfig",
    "WandbConfig",
    "TensorboardConfig",
    "LoggingConfig",
    "UserConfig",
    "MODULES",
]
