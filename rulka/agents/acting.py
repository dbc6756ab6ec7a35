"""The actor a worker acts with, on the device its config names (``worker.device``).

``build_actor`` is what a worker calls where it builds an actor from the ``actor_spec`` that came
with the weights: the ``actor`` plugin, then ``prepare_actor``, which hands the device and the
CPU options to an actor that has an ``accelerate`` method (``IQNActor``: fp16 autocast,
channels_last and a CUDA graph on CUDA; int8 heads and ONNX Runtime on CPU, ``worker.cpu_int8``
and ``worker.cpu_runtime``; ``rulka.nn.inference``). An actor
without one acts as built, on CPU; asked for CUDA it says so once in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rulka.config import RulkaConfig

log = logging.getLogger(__name__)


def prepare_actor(actor: Any, cfg: RulkaConfig | None) -> Any:
    """Put ``actor`` on ``cfg.worker.device`` (defaults without a config) and return it; raises
    ConfigError (one line, naming the key) when ``worker.device`` names a GPU this machine lacks
    or ``worker.cpu_runtime`` a runtime it lacks."""
    from rulka.config import as_config

    worker = as_config(cfg).worker
    device = worker.torch_device()
    accelerate = getattr(actor, "accelerate", None)
    if not callable(accelerate):
        if device != "cpu":
            log.warning("actor %s has no accelerate(): it acts on the CPU, not %s", type(actor).__name__, device)
        return actor
    runtime = worker.cpu_runtime_here() if device == "cpu" else "torch"
    accelerate(device, int8=worker.cpu_int8, runtime=runtime)
    log.info("actor %s acts on %s%s", type(actor).__name__, device, " (ONNX Runtime)" if runtime != "torch" else "")
    return actor


def build_actor(name: str, kwargs: Mapping[str, Any] | None, cfg: RulkaConfig | None) -> Any:
    """The ``actor`` plugin ``name`` built with ``kwargs`` (from the weights' actor spec), then
    ``prepare_actor``."""
    from rulka.plugins import build_plugin

    return prepare_actor(build_plugin("actor", name, kwargs, cfg), cfg)
