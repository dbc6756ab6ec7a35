"""Typed run configuration: one YAML file describes a run.

>>> from rulka.config import load_config
>>> cfg = load_config("configs/default.yaml", overrides=["training.batch_size=256"])
>>> cfg.training.batch_size, cfg.float_input_dim, cfg.lr_at(1_000_000)

Importing this package reads nothing: files and ``.env`` are read only by :func:`load_config`.
"""

from __future__ import annotations

from rulka.config.loader import (
    ENV_KEYS,
    RESOLVED_NAME,
    ConfigLike,
    add_config_arguments,
    all_key_paths,
    apply_overrides,
    as_config,
    config_from_args,
    config_from_dict,
    load_config,
    parse_override,
    resolved_yaml,
    save_resolved,
    with_overrides,
)
from rulka.config.model import SCHEDULE_KINDS, RulkaConfig
from rulka.config.schedules import exponential_schedule, linear_schedule, staircase_schedule

__all__ = [
    "ENV_KEYS",
    "RESOLVED_NAME",
    "SCHEDULE_KINDS",
    "RulkaConfig",
    "ConfigLike",
    "add_config_arguments",
    "all_key_paths",
    "as_config",
    "apply_overrides",
    "config_from_args",
    "config_from_dict",
    "exponential_schedule",
    "linear_schedule",
    "load_config",
    "parse_override",
    "resolved_yaml",
    "save_resolved",
    "staircase_schedule",
    "with_overrides",
]
