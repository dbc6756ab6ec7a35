"""Publishing the policy: each version of the agent's actor weights is signed and broadcast through
the server with the actor spec and the config sections a worker needs; every
``eval_every_versions`` versions it carries a request for greedy test episodes, and a version the
best policy wants judged is marked as an evaluation version (inside the cooldown of a run that ends
on its average, every other one is the average so far: ``rulka.trainer.best``). A restarted server
gets the latest weights again."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rulka.interfaces import Memory, TrainingAgent
from rulka.net.messages import EvalRequest, RunConfig, WeightsHeader
from rulka.trainer import checkpoint_store as ckpt
from rulka.trainer.average import PolicyAverage
from rulka.trainer.best import AVERAGE, TRAINED, BestPolicy
from rulka.trainer.credit import WorkerBook
from rulka.trainer.state import RunState


def signed_encoder(signing_key: Any, dtype: str = "float16") -> Callable[[Any], bytes]:
    """Weights blob -> signed bytes (zstd), with the trainer's Ed25519 key; floating tensors travel
    as ``dtype`` (``trainer.weights_dtype``)."""
    import dataclasses

    from rulka.net.weights import encode_weights

    return lambda blob: encode_weights(dataclasses.replace(blob, dtype=dtype), signing_key)


class Publisher:
    """``publish()`` the next version; ``actor_spec()`` for files that save the policy;
    ``republish_after_reconnect()`` once per loop. ``link`` is set by the trainer."""

    def __init__(self, state: RunState, agent: TrainingAgent, memory: Memory, workers: WorkerBook,
                 encode_weights: Callable[[Any], bytes], worker_config: Callable[[], dict[str, Any] | None], *,
                 run_dir: Path | None, eval_every_versions: int, eval_episodes: int,
                 best_policy: BestPolicy | None, average: PolicyAverage | None = None,
                 average_candidates: Callable[[int], bool] | None = None) -> None:
        self.state = state
        self.agent = agent
        self.memory = memory
        self.workers = workers
        self.encode_weights = encode_weights
        self.worker_config = worker_config
        self.run_dir = run_dir
        self.eval_every_versions = eval_every_versions
        self.eval_episodes = eval_episodes
        self.best_policy = best_policy
        self.average = average  # the moving average of the published weights (rulka.trainer.average)
        # samples -> whether candidates now alternate with the average (the run ends on it, and cools)
        self.average_candidates = average_candidates
        self._average_next = False  # an average candidate comes after one of the learner's weights
        self.link: Any = None
        self.last_weights: bytes | None = None
        self.was_connected = True  # publish() at start already reaches a connected server
        self.server_session = 0  # link.server_session() when the weights last reached the server
        self._eval_turns: dict[str, int] = {}  # a turn of its own per kind of request

    def header(self) -> WeightsHeader:
        """The agent's actor spec, the frame count (workers' schedules, such as engineered rewards,
        follow it) and the config sections a worker needs."""
        run_config = self.worker_config()
        return WeightsHeader.from_actor_spec(self.agent.actor_spec(), frames_played=int(self.state.samples),
                                             run_config=RunConfig.of(run_config) if run_config is not None else None)

    def actor_spec(self) -> dict[str, Any]:
        """What a policy file keeps beside the actor's tensors: ``header()`` without requests."""
        return self.header().policy_spec()

    def publish(self) -> int:
        """Sign and broadcast the agent's current actor weights as the next version."""
        from rulka.net.weights import WeightsBlob

        state = self.state
        state.version += 1
        self.memory.set_policy_version(state.version)
        if self.run_dir is not None:
            ckpt.record_published(self.run_dir, state.run_id, state.version)
        header = self.header()
        if self.eval_every_versions and state.version % self.eval_every_versions == 0:
            header = dataclasses.replace(header, evaluation=self._eval_request())
        weights = self.agent.actor_weights()
        if self.average is not None:
            self.average.update(weights, state.samples)
        if self.best_policy is not None and self.best_policy.wants_candidate(state.samples):
            kind = TRAINED
            alternate = self.average_candidates is not None and self.average_candidates(state.samples)
            if alternate and self._average_next and self.average is not None and self.average.weights is not None:
                # the weights the run will end on compete too: this version is the average so far
                kind, weights = AVERAGE, self.average.weights
                state.counters["eval_policy_average_versions"] += 1
            # outside the cooldown as after an average: the next candidate is the learner's weights
            self._average_next = alternate and kind == TRAINED
            # workers drive the cycle's greedy entries (or the episodes requested) with this version
            self.best_policy.mark(state.version, weights, header.policy_spec(), state.samples, state.updates, kind)
            request = (self.best_policy.request(self._next_eval_worker("best"))
                       if self.best_policy.request_episodes else None)
            header = dataclasses.replace(header, candidate=True, candidate_request=request)
            state.counters["eval_policy_versions"] += 1
        blob = WeightsBlob(state.run_id, state.version, weights, header.to_wire())
        self.last_weights = self.encode_weights(blob)
        self.link.broadcast("weights", self.last_weights)
        return state.version

    def _eval_request(self) -> EvalRequest:
        """Ask for ``eval_episodes`` greedy test episodes (they ride with the weights): from the
        workers heard from, one in turn; any worker while none is known."""
        self.state.counters["eval_requests"] += 1
        return EvalRequest(self.eval_episodes, self._next_eval_worker("eval"))

    def _next_eval_worker(self, turn: str) -> str:
        """The workers heard from, one in turn (a turn of its own per kind of request: ``eval``,
        ``best``); any worker ("") while none is known."""
        known = sorted(set(self.workers.last_heard) | set(self.workers.stats))
        n = self._eval_turns.get(turn, 0)
        self._eval_turns[turn] = n + 1
        return known[n % len(known)] if known else ""

    def start_session(self) -> None:
        """The server session the first weights reached (``Trainer.run`` calls it after publishing)."""
        self.server_session = self.link.server_session()

    def republish_after_reconnect(self) -> None:
        # a restarted server has lost the weights it retained for late joiners: send them again,
        # also when it came back within the heartbeat window (a new server session)
        connected = self.link.connected()
        session = self.link.server_session()
        reconnected = not self.was_connected or session != self.server_session
        if connected and reconnected and self.last_weights is not None:
            self.link.broadcast("weights", self.last_weights)
            self.state.counters["republished"] += 1
        self.was_connected = connected
        if connected:
            self.server_session = session
