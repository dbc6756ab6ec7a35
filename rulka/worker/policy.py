"""The worker's policies: the actor it explores with, the trainer's evaluation version, and the
greedy episodes the trainer asked for. Runs on the env thread only; weights reach it through
``rulka.worker.network.WeightsInbox``.

``build_actor`` is the one place a worker builds an actor from what the weights' header names
(on ``worker.device``: ``rulka.agents.acting``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from rulka.agents import acting
from rulka.envs.map_cycle import MapCycle, MapCycleEntry
from rulka.net.messages import EVAL_POLICY_VERSION, WeightsHeader

log = logging.getLogger(__name__)

# the best policy's candidate races from moved starts (trainer.best_policy_start_noise): the k-th on
# a map from the simulator's start seed CANDIDATE_START_SEED + k, apart from the seeds 1..K
# bench/learning.py's perturbed races use, so the bench judges a best policy on starts it was not
# picked on (a start noise out of range is dropped by rulka.net.messages.CandidateRequest)
CANDIDATE_START_SEED = 1000


def build_actor(header: WeightsHeader, cfg: Any) -> Any:
    """The actor ``header`` names (a registry name, or an allowed ``module:Class``, with its
    kwargs), built for the run config ``cfg`` on its ``worker.device``. ValueError when the header
    names none."""
    if header.actor is None:
        raise ValueError("the weights name no actor")
    return acting.build_actor(header.actor, dict(header.kwargs), cfg)


@dataclasses.dataclass
class EpisodePlan:
    """How the next episode is driven. ``greedy``: an evaluation episode (``Segment.evaluation``);
    ``requested``: one the trainer asked for (never stored for training, no GRPO start);
    ``actor``: the evaluation version's actor, or None for the exploring actor; ``info``: what
    every segment of it carries (``fill_buffer``, ``eval_policy_version``); ``options``: the
    env's reset options."""

    greedy: bool
    requested: bool
    candidate: bool
    actor: Any = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def version(self) -> int | None:
        """The version that chose the actions when it is not the exploring actor's."""
        return self.info.get(EVAL_POLICY_VERSION)


class Policies:
    """``actor`` (given, or built from the first weights) and ``eval_actor`` with the trainer's
    newest evaluation version (``rulka.trainer.best``; swapped only between episodes, so one
    greedy race is one version); ``eval_pending`` test episodes and ``eval_policy_pending``
    candidate episodes asked of this worker. ``takes_requests`` False: the trainer's requests are
    left to another instance of this worker (``rulka-worker --instances``: the first one runs them,
    so the trainer gets the episodes it asked this worker for, not N times as many)."""

    def __init__(self, name: str, actor: Any = None, *, takes_requests: bool = True) -> None:
        self.name = name
        self.actor = actor
        self.takes_requests = takes_requests
        self.eval_actor: Any = None
        self.eval_version: int | None = None
        self.eval_pending = 0  # greedy test episodes the trainer asked for (trainer.eval_every_versions)
        self.eval_policy_pending = 0  # greedy episodes of the evaluation version asked for (best policy)
        self.eval_start_noise = 0.0  # the simulator's start moved this far for those episodes (metres, degrees)
        self._eval_starts: dict[str, int] = {}  # per map: the evaluation version's moved starts driven so far

    def load(self, tensors: Any, header: WeightsHeader, cfg: Any) -> None:
        """Load newer weights into ``actor`` (built first when there is none; ValueError when the
        header names no actor), and take the test episodes they ask of this worker."""
        if self.actor is None:
            self.actor = build_actor(header, cfg)
        self.actor.load_weights(tensors)
        if header.evaluation is not None and self.takes_requests:
            self.eval_pending = max(self.eval_pending, header.evaluation.episodes_for(self.name))

    def load_eval(self, version: int, tensors: Any, header: WeightsHeader, cfg: Any) -> None:
        """Load an evaluation version into ``eval_actor`` (never fatal: the same weights went into
        ``actor``), with the candidate episodes it asks of this worker."""
        if self.actor is None:
            return
        try:
            if self.eval_actor is None:
                self.eval_actor = build_actor(header, cfg)
            self.eval_actor.load_weights(tensors)
        except Exception as exc:  # noqa: BLE001 - a broken evaluation actor only skips the evaluation
            log.warning("evaluation version v%d not loaded: %s", version, str(exc)[:200])
            self.eval_actor, self.eval_version = None, None
            return
        self.eval_version = int(version)
        # a run without greedy map-cycle entries asks one worker for the candidate's greedy episodes
        request = header.candidate_request if self.takes_requests else None
        self.eval_policy_pending = request.episodes_for(self.name) if request is not None else 0
        self.eval_start_noise = request.start_noise if request is not None else 0.0
        self._eval_starts = {}

    def wants_requested(self, test_worker: bool) -> tuple[bool, bool]:
        """(requested, candidate): whether the next episode is one the trainer asked for, and
        whether it is the best policy's candidate (driven first)."""
        candidate = not test_worker and self.eval_policy_pending > 0 and self.eval_actor is not None
        return candidate or (not test_worker and self.eval_pending > 0 and self.actor is not None), candidate

    def plan(self, test_worker: bool, requested: bool, candidate: bool, entry: MapCycleEntry | None) -> EpisodePlan:
        """The next episode's plan: greedy for a test worker, a requested episode and a map-cycle
        entry with ``is_exploration: false`` (driven by the evaluation version when there is one);
        an entry with ``fill_buffer: false`` reaches the trainer's metrics but not its memory."""
        greedy_entry = entry is not None and not entry.is_exploration
        plan = EpisodePlan(greedy=test_worker or requested or greedy_entry, requested=requested, candidate=candidate)
        if requested or (entry is not None and not entry.fill_buffer):
            plan.info["fill_buffer"] = False
        if (candidate or (greedy_entry and not requested)) and self.eval_actor is not None \
                and self.eval_version is not None:
            plan.actor = self.eval_actor
            plan.info[EVAL_POLICY_VERSION] = self.eval_version
        plan.options = MapCycle.reset_options(entry) if entry is not None else {}
        if candidate and self.eval_start_noise > 0.0:
            # the k-th race on a map from the k-th moved start: the same starts for every candidate
            on_map = str(plan.options.get("short_name", ""))
            k = self._eval_starts.get(on_map, 0)
            self._eval_starts[on_map] = k + 1
            plan.options.update(start_noise=self.eval_start_noise, start_seed=CANDIDATE_START_SEED + k)
        return plan

    def finished(self, plan: EpisodePlan) -> None:
        """A requested episode was run: one fewer is pending."""
        if plan.candidate:
            self.eval_policy_pending -= 1
        elif plan.requested:
            self.eval_pending -= 1

    def reset(self, plan: EpisodePlan) -> None:
        """Reset the actors that drive the episode (a recurrent actor's state, a schedule's step)."""
        for actor in {id(a): a for a in (self.actor, plan.actor) if a is not None}.values():
            actor.reset()

    def act(self, env: Any, obs: Any, plan: EpisodePlan) -> tuple[Any, dict[str, Any]]:
        actor = plan.actor if plan.actor is not None else self.actor
        if actor is None:  # act_before_weights="random"
            return env.action_space.sample(), {}
        return actor.act_with_info(obs, test=plan.greedy)
