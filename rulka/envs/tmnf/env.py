"""``TmnfEnv``: TrackMania Nations Forever through rulka's TMInterface plugin, as a Gymnasium env.

It looks to the learner exactly like the simulator (``rulka/SimTrack-v0``): the 12 discrete
actions, ``{"img": (H, W) uint8, "float": (D,) float32}`` observations, and rewards and cut-offs
from the shared ``TrackmaniaPipeline``, fed with the ``CarState`` decoded from the game's state
blob. The game runs in lock-step with the policy (fact sheet A.8): at every ``ms_per_action`` of
race time the game is held inside its run-step callback, the state is read, the frame is
requested and read (the game waits inside the frame callback while the policy decides), and the
action's inputs are set before the game resumes at ``performance.running_speed``.

Rollouts (A.9): the first run step of a rollout loads the map when another is loaded, rewinds to
the cached start state of this map when there is one, and otherwise gives up (restart with the
countdown). The finish is the checkpoint event with ``current == target``: the state is read,
the game is stopped from ending the race (last checkpoint time set to -1, or
``C_PREVENT_SIMULATION_FINISH``), and the env returns ``terminated``. Between rollouts the game is
*parked*: the pending callback is not answered and the plugin's timeout is raised to
``environment.timeout_between_runs_ms``.

Failures: when the game stops answering (``tmi_protection_timeout_s``), closes the connection or
dies, the episode in progress ends ``truncated`` with ``info["cutoff"] == "game_lost"`` (what was
collected stays valid: the worker sends it), and the next ``reset`` reconnects, or kills and
relaunches the game. The terminal observation of a finish repeats the last frame (the game is
held in the checkpoint callback, where no frame can be rendered).

Reset options: ``{"map": path, "reference_line": path, "short_name": name}`` (the map cycle).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rulka.config import ConfigLike, as_config
from rulka.envs.actions import N_ACTIONS, action_to_flags
from rulka.envs.car_state import CarState
from rulka.envs.pipeline import PipelineParams, TrackmaniaPipeline, make_reference_line
from rulka.envs.reference_line import read_reference_file
from rulka.envs.tmnf import protocol as P
from rulka.envs.tmnf.client import GameConnectionError
from rulka.envs.tmnf.frames import bgra_to_gray
from rulka.envs.tmnf.game import (
    FakeLauncher,
    GameInstance,
    GameSettings,
    InstanceSlot,
    Launcher,
    launcher_from_config,
)
from rulka.envs.tmnf.state import BadStateBlob, decode_state, prevent_finish
from rulka.errors import UserError

log = logging.getLogger(__name__)

MAX_RESET_ATTEMPTS = 4
MAX_MESSAGES_TO_START = 200_000  # messages while starting a rollout before giving up (a stuck game)


@dataclass
class _MapSetup:
    map_path: str
    short_name: str
    pipeline: TrackmaniaPipeline


FINISH_REREADS = 5
"""State re-reads at a finish whose blob has no checkpoint times (Linesight: 5 attempts)."""

class TmnfEnv(gym.Env):
    """TMNF as a Gymnasium env (registered as the ``tmnf`` env plugin).

    Args:
        config: the run config (a ``RulkaConfig``, or a mapping of sections / a YAML path,
            validated here; None: the built-in defaults): ``environment.*`` (timing, timeouts, camera, ``track`` = the map
            when there is no map cycle, ``game_launch``), ``performance.running_speed``,
            ``nn.vis`` (image size, ``no_image``), ``user.*`` (ports, launcher paths),
            ``worker.num_envs`` (instances on this PC).
        launcher: overrides ``environment.game_launch`` (tests pass a ``FakeLauncher`` with faults).
        port: overrides the instance slot's port (0 with a fake: any free port).
    """

    metadata = {"render_modes": []}

    def __init__(self, config: ConfigLike = None, launcher: Launcher | None = None, port: int | None = None) -> None:
        super().__init__()
        cfg = as_config(config)
        if cfg.environment.continuous_actions:
            raise UserError("environment.backend tmnf drives the game with binary inputs: set continuous_actions false")
        self.cfg = cfg
        self.params = PipelineParams.from_config(cfg)
        self.settings = GameSettings.from_config(cfg)
        vis = cfg.nn.vis
        self.image = not vis.no_image
        self.image_size = (vis.image_size.width, vis.image_size.height)
        self.launcher = launcher if launcher is not None else launcher_from_config(cfg)
        self.fake_maps = isinstance(self.launcher, FakeLauncher) or cfg.environment.game_launch == "fake"
        self.slot: InstanceSlot | None = None
        if port is None and isinstance(self.launcher, FakeLauncher):
            port = 0  # the fake game takes any free port: fake workers never collide
        if port is None:
            self.slot = InstanceSlot(cfg.user.base_tmi_port, cfg.worker.num_envs)
            port = self.slot.port
        self.game = GameInstance(port, self.launcher, self.settings)
        self.default_map = cfg.environment.track
        self._setups: dict[tuple[str, str], _MapSetup] = {}
        self._frames_played = 0.0  # the trainer's frame count (engineered reward schedules)
        self._start_states: dict[str, bytes] = {}
        self._pending: int | None = None
        self._hud_hidden = False
        self._last_frame: np.ndarray | None = None
        self._last_obs: dict[str, np.ndarray] | None = None
        self._last_info: dict[str, Any] = {}
        self._last_action_t = 0
        self._setup: _MapSetup | None = None
        self.counters = {"episodes": 0, "game_lost": 0, "finishes": 0, "bad_state": 0, "finish_rereads": 0,
                         "finish_prevented_by_command": 0}
        dim = self.params_dim()
        obs: dict[str, spaces.Space[Any]] = {}
        if self.image:
            obs["img"] = spaces.Box(0, 255, shape=(self.image_size[1], self.image_size[0]), dtype=np.uint8)
        obs["float"] = spaces.Box(-1e6, 1e6, shape=(dim,), dtype=np.float32)
        self.observation_space = spaces.Dict(obs)
        self.action_space = spaces.Discrete(N_ACTIONS)

    def params_dim(self) -> int:
        from rulka.envs.pipeline import layout_dim

        return layout_dim(self.params)

    @property
    def client(self) -> Any:
        return self.game.client

    # ------------------------------------------------------------------ maps
    def _map_setup(self, map_path: str, reference_line: str, short_name: str) -> _MapSetup:
        key = (map_path, reference_line)
        setup = self._setups.get(key)
        if setup is None:
            if reference_line:
                points, checkpoints = read_reference_file(Path(reference_line).expanduser())
                line = make_reference_line(points, self.params, checkpoints)
            elif self.fake_maps:  # rulka's fake game plays simulator tracks: their centreline is the line
                from rulka.envs.sim.tracks import get_track

                line = get_track(map_path).reference_line(self.params)
            else:
                raise UserError(
                    f"map {map_path!r} has no reference line: set map_cycle.entries[].reference_line_path "
                    "(record one with `rulka tm record-line`)"
                )
            setup = _MapSetup(map_path, short_name or Path(map_path).name.split(".")[0],
                              TrackmaniaPipeline(self.params, line))
            setup.pipeline.set_frames_played(self._frames_played)
            self._setups[key] = setup
        return setup

    def set_frames_played(self, frames: float) -> None:
        """The run's frame count (sent by the trainer with the weights): moves the engineered
        reward schedules along."""
        self._frames_played = float(frames)
        for setup in self._setups.values():
            setup.pipeline.set_frames_played(self._frames_played)

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start a rollout on ``options["map"]`` (default ``environment.track``); reconnects or
        restarts the game when it was lost."""
        super().reset(seed=seed)
        options = options or {}
        map_path = str(options.get("map") or options.get("track") or self.default_map)
        setup = self._map_setup(map_path, str(options.get("reference_line") or ""), str(options.get("short_name") or ""))
        self._setup = setup
        if self.game.due_for_reboot():
            self.game.counters["reboots"] += 1
            self._lose_game("game_reboot_interval reached")
        last: Exception | None = None
        for _ in range(MAX_RESET_ATTEMPTS):
            try:
                return self._start_rollout(setup)
            except (GameConnectionError, P.ProtocolError, BadStateBlob) as exc:
                last = exc
                log.warning("%s", exc)
                self._lose_game(str(exc), exc)
        raise UserError(f"could not start a race on {map_path!r} after {MAX_RESET_ATTEMPTS} attempts: {last}")

    def _lose_game(self, reason: str, exc: BaseException | None = None) -> None:
        self._pending = None
        self._hud_hidden = False
        if exc is None:
            self.game.restart(reason)
        else:
            self.game.recover(exc)

    def _start_rollout(self, setup: _MapSetup) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        game, c, s = self.game, self.client, self.settings
        game.connect(setup.map_path)
        if game.fresh_connection:
            game.fresh_connection = False
            self._pending = None
            self._first_step_of_connection = True
        if self._pending is not None:  # parked since the last rollout: release the game
            c.set_timeout(s.timeout_during_run_ms)
            c.set_speed(s.running_speed)
            c.respond(self._pending)
            self._pending = None
        started = seen_negative = rewound = False
        for _ in range(MAX_MESSAGES_TO_START):
            msg = c.receive()
            if isinstance(msg, P.RunStep):
                t = msg.race_time_ms
                if getattr(self, "_first_step_of_connection", False):
                    self._first_step_of_connection = False
                    c.set_timeout(s.timeout_during_run_ms)
                    c.execute_command(f"cam {s.camera}")
                    c.set_speed(s.running_speed)
                if not self._hud_hidden:
                    c.toggle_interface(False)
                    self._hud_hidden = True
                if not started:
                    started = True
                    if game.loaded_map != setup.map_path:
                        game.request_map(setup.map_path)
                        self._hud_hidden = False
                        c.respond(P.MessageType.SC_RUN_STEP_SYNC)
                        continue
                    blob = self._start_states.get(setup.map_path)
                    if blob is not None:
                        c.rewind_to_state(blob)
                        rewound, t = True, 0
                    else:
                        c.give_up()
                        c.respond(P.MessageType.SC_RUN_STEP_SYNC)
                        continue
                if t < 0:
                    seen_negative = True
                if t < 0 or not (seen_negative or rewound) or t % self.params.ms_per_action:
                    c.respond(P.MessageType.SC_RUN_STEP_SYNC)
                    continue
                if t == 0 and setup.map_path not in self._start_states:
                    self._start_states[setup.map_path] = c.get_simulation_state()
                car = self._action_step()
                float_obs, info = setup.pipeline.reset(car)
                self.counters["episodes"] += 1
                self._last_action_t = t
                return self._finish_obs(float_obs, info)
            c.respond(msg.id)
        raise GameConnectionError("the game never reached the start of a race")

    def _action_step(self) -> CarState:
        """At an action run step: read the state, hold the game, fetch the frame. Leaves the game
        parked in the callback it is in (``_pending``)."""
        c = self.client
        state = decode_state(c.get_simulation_state())
        if self.image:
            c.rewind_to_current_state()
            c.set_speed(0.0)
            c.request_frame(*self.image_size)
            c.respond(P.MessageType.SC_RUN_STEP_SYNC)
            while True:
                msg = c.receive()
                if isinstance(msg, P.RequestedFrame):
                    self._last_frame = bgra_to_gray(msg.data, msg.width, msg.height, self.image_size)
                    self._pending = P.MessageType.SC_REQUESTED_FRAME_SYNC
                    break
                if isinstance(msg, P.CheckpointCountChanged) and msg.current >= msg.target > 0:
                    # the finish of the same tick, reported after its run step: the race ends here
                    return self._finish()
                c.respond(msg.id)  # nothing ticks at speed 0; answer anything else
        else:
            self._pending = P.MessageType.SC_RUN_STEP_SYNC  # stay inside the run step: no pause needed
        return state.car

    def _finish_obs(self, float_obs: np.ndarray, info: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        obs: dict[str, np.ndarray] = {"float": float_obs}
        if self.image:
            assert self._last_frame is not None
            obs["img"] = self._last_frame
        assert self._setup is not None
        info["map_name"] = info["track"] = self._setup.short_name
        self._last_obs, self._last_info = obs, info
        return obs, info

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self._setup is None or self._pending is None or not self.client.connected:
            if self._last_obs is not None and self._setup is not None:
                return self._game_lost(None)
            raise RuntimeError("TmnfEnv.step called before reset")
        a = int(action)
        if not 0 <= a < N_ACTIONS:
            raise ValueError(f"discrete action must be in 0..{N_ACTIONS - 1}, got {action!r}")
        try:
            return self._step(a)
        except (GameConnectionError, P.ProtocolError, BadStateBlob) as exc:
            return self._game_lost(exc)

    def _step(self, action: int) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        c, s = self.client, self.settings
        assert self._setup is not None and self._pending is not None
        accelerate, brake, left, right = (bool(v) for v in action_to_flags(action))
        c.set_input_state(left, right, accelerate, brake)
        self.game.after_action()
        if self._pending == P.MessageType.SC_REQUESTED_FRAME_SYNC:
            c.set_speed(s.running_speed)
        c.respond(self._pending)
        self._pending = None
        while True:
            msg = c.receive()
            if isinstance(msg, P.RunStep):
                t = msg.race_time_ms
                if t > self._last_action_t and t % self.params.ms_per_action == 0:
                    self._last_action_t = t
                    car = self._action_step()
                    break
                c.respond(msg.id)
            elif isinstance(msg, P.CheckpointCountChanged) and msg.current >= msg.target > 0:
                car = self._finish()
                break
            else:
                c.respond(msg.id)
        float_obs, reward, terminated, truncated, info = self._setup.pipeline.step(car, action)
        obs, info = self._finish_obs(float_obs, info)
        if terminated or truncated:
            self._park()
        return obs, reward, terminated, truncated, info

    def _finish(self) -> CarState:
        c = self.client
        blob = c.get_simulation_state()
        state = decode_state(blob)
        stopped = prevent_finish(blob)
        # a finish state without checkpoint times: read it again, up to FINISH_REREADS times,
        # before falling back to PreventSimulationFinish (Linesight's game_instance_manager.py
        # allows 5 ``cp_times_bug_handling_attempts``; its loop only counts them, this one re-reads)
        rereads = 0
        while stopped is None and rereads < FINISH_REREADS:
            rereads += 1
            blob = c.get_simulation_state()
            state = decode_state(blob)
            stopped = prevent_finish(blob)
        self.counters["finish_rereads"] += rereads
        if stopped is not None:
            c.rewind_to_state(stopped)
        else:
            self.counters["finish_prevented_by_command"] += 1
            c.prevent_simulation_finish()
        self._pending = P.MessageType.SC_CHECKPOINT_COUNT_CHANGED_SYNC
        self.counters["finishes"] += 1
        car = state.car
        car.finished = True
        finish_times = [t for t, _ in state.cp_times if t >= 0]
        car.race_time_ms = max(finish_times) if finish_times else state.race_time_ms
        return car

    def _park(self) -> None:
        """Hold the game in the pending callback until the next rollout."""
        c = self.client
        c.set_timeout(self.settings.timeout_between_runs_ms)
        if c.frame_size is not None:
            c.unrequest_frame()
        c.flush()

    def hold(self) -> None:
        """The worker pauses mid-episode for a while it does not know (waiting for the trainer's
        credit): raise the plugin's timeout so the game, held inside its callback, keeps us."""
        if self._pending is not None and self.client.connected:
            try:
                self.client.set_timeout(self.settings.timeout_between_runs_ms)
                self.client.flush()
            except GameConnectionError as exc:  # seen again, and handled, at the next step
                log.debug("hold: %s", exc)

    def release(self) -> None:
        """The pause is over: the run timeout applies again (sent with the next step)."""
        if self._pending is not None and self.client.connected:
            self.client.set_timeout(self.settings.timeout_during_run_ms)

    def _game_lost(self, exc: BaseException | None) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        self.counters["game_lost"] += 1
        if exc is not None:
            log.warning("%s", exc)
            self._lose_game(str(exc), exc)
        assert self._last_obs is not None
        info = dict(self._last_info)
        info["cutoff"] = "game_lost"
        info["finished"] = False
        return self._last_obs, 0.0, False, True, info

    def close(self) -> None:
        self.game.close()
        if self.slot is not None:
            self.slot.release()
