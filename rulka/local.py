"""One-process mode: a trainer and N workers in threads, joined by an in-process ``LocalHub``.

The same ``Trainer`` and ``Worker`` classes as the distributed roles, the same segments,
compression, acks, dedupe and signed weights (with a throwaway key pair), minus TLS and the
server process: the mode for debugging a plugin with a debugger and for tests. For separate
processes with the real server on loopback, use ``rulka run`` (``rulka.cli.run``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rulka.interfaces import ActorModule, Memory, SampleCompressor, TrainingAgent
from rulka.trainer.trainer import Trainer
from rulka.worker.worker import Worker, WorkerStats

log = logging.getLogger(__name__)


@dataclass
class LocalRunResult:
    """What ``run_local`` returns: the trainer's summary and each worker's counters."""

    trainer: dict[str, Any]
    workers: dict[str, WorkerStats] = field(default_factory=dict)
    worker_errors: dict[str, str] = field(default_factory=dict)


def run_local(
    cfg: Any,
    n_workers: int = 2,
    *,
    mode: str = "threads",
    run_dir: str | Path | None = None,
    max_updates: int | None = None,
    max_seconds: float | None = None,
    max_samples: int | None = None,
    agent: TrainingAgent | None = None,
    memory: Memory | None = None,
    env_factory: Callable[[int], Any] | None = None,
    actor_factory: Callable[[int], ActorModule] | None = None,
    compressor: SampleCompressor | None = None,
    trainer_compressor: SampleCompressor | None = None,
    worker_state_dir: str | Path | None = None,
    progress: Any = None,
    worker_kwargs: dict[str, Any] | None = None,
    resume: bool = False,
) -> LocalRunResult:
    """Run a trainer and ``n_workers`` workers in this process until a limit is reached.

    ``env_factory(i)`` / ``actor_factory(i)`` build worker ``i``'s env / actor (default: from
    the config and from the weights' ``actor_spec``); ``compressor`` is used by the workers and
    ``trainer_compressor`` (default: the same) by the trainer. ``worker_state_dir`` keeps each
    worker's sequence numbers and unacknowledged segments in ``<dir>/<name>``; ``worker_kwargs``
    go to every ``Worker`` (e.g. ``{"max_steps_per_s": 500}``); ``resume`` continues the run in
    ``run_dir``.
    """
    if mode != "threads":
        raise ValueError("run_local runs threads; use `rulka run` (rulka.cli.run.launch) for processes")
    from rulka.net.local import LocalHub
    from rulka.net.weights import decode_weights

    hub = LocalHub()
    key = Ed25519PrivateKey.generate()
    public = key.public_key()
    trainer = Trainer(cfg, hub.trainer_link(), agent=agent, memory=memory, run_dir=run_dir,
                      compressor=trainer_compressor or compressor, signing_key=key, progress=progress,
                      resume=resume)
    stop = threading.Event()
    result = LocalRunResult(trainer={})
    threads = []
    for i in range(n_workers):
        name = f"local-{i}"
        worker = Worker(
            cfg, hub.worker_link(name),
            env=env_factory(i) if env_factory else None,
            actor=actor_factory(i) if actor_factory else None,
            compressor=compressor,
            weights_decoder=lambda data: decode_weights(data, public),
            state_dir=Path(worker_state_dir) / name if worker_state_dir is not None else None,
            **(worker_kwargs or {}),
        )

        def body(w: Worker = worker, n: str = name) -> None:
            try:
                result.workers[n] = w.run(stop_event=stop, drain_timeout_s=0)
            except Exception as exc:  # noqa: BLE001 - reported to the caller, and stops the run
                log.exception("worker %s failed", n)
                result.worker_errors[n] = f"{type(exc).__name__}: {exc}"
                stop.set()
            finally:
                w.close()

        threads.append(threading.Thread(target=body, name=name, daemon=True))
    for t in threads:
        t.start()
    try:
        result.trainer = trainer.run(max_updates=max_updates, max_seconds=max_seconds, stop_event=stop,
                                     max_samples=max_samples)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
        trainer.close()
    return result
