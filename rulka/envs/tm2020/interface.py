"""``TM2020Interface``: TrackMania 2020 behind rtgym's ``RealTimeGymInterface``.

rtgym owns the clock (fact sheet D.6): each ``step(a)`` sends ``a`` at once (``send_control``),
reads the game ``start_obs_capture`` into the step (``get_obs_rew_terminated_info``) and ends the
step ``time_step_duration`` after it began; a late step is absorbed up to
``time_step_timeout_factor`` steps, after which the clock restarts. This interface reads the newest
telemetry record and a frame, and turns them into rulka's observation and reward with the shared
``TrackmaniaPipeline`` (the same one the simulator and TMNF use).

Faults never crash the worker and never feed bad transitions: when the plugin goes silent, the
window is lost or the game is paused, the step ends the episode (``info["fault"]`` names it,
``truncated_by_pipeline`` is set so the env reports it as truncated), the controls go neutral and
a warning says what happened. The next ``reset`` waits until the game is back, logging what it
waits for, then gives up (restart at zero).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from rtgym import RealTimeGymInterface

from rulka.envs.actions import N_ACTIONS
from rulka.envs.pipeline import TrackmaniaPipeline
from rulka.envs.tm2020.capture import (
    FrameSource,
    Lidar,
    TmrlLidar,
    WindowLost,
    end_screen_click_point,
    make_lidar,
    to_image,
)
from rulka.envs.tm2020.control import Controller
from rulka.envs.tm2020.telemetry import Telemetry, TelemetryClient
from rulka.errors import UserError

log = logging.getLogger(__name__)

FAULT_MESSAGES = {
    "plugin_silent": "telemetry silent for {age:.1f} s: is a map loaded and the rulka plugin running "
    "(Openplanet F3 -> Developer -> reload)? Ending the episode; waiting for telemetry",
    "window_lost": "game window lost ({detail}): restore the Trackmania window. Ending the episode; waiting for it",
    "game_paused": "game paused (in-game menu open): close the menu. Ending the episode; waiting for the race",
    "mirrored_record": "telemetry record with a mirrored or malformed car basis ({detail}): the plugin's "
    "Left, Up, Dir disagree with the rest of the stream. Ending the episode; waiting for good records",
}


@dataclass
class InterfaceSettings:
    observation: str = "image"
    image: bool = True  # image mode without the image (nn.vis.no_image): frames checked, not observed
    image_size: tuple[int, int] = (64, 64)  # (width, height)
    continuous: bool = False
    lidar_history: int = 4
    lidar_dark_threshold: int = 55
    lidar: str = "rulka"
    telemetry_timeout_s: float = 2.0
    reset_timeout_s: float = 10.0
    recover_timeout_s: float = 600.0
    poll_s: float = 0.05


class TM2020Interface(RealTimeGymInterface):
    """rtgym interface to the game. Observations are ``[float_obs]`` plus ``[img]`` in image mode
    (``(H, W)`` uint8); in LIDAR mode the beams (``lidar_history`` scans of 19, newest last, in
    [0, 1]) are appended to the float observation.

    Args:
        telemetry: a started ``TelemetryClient``.
        frames: the window's ``FrameSource``.
        controller: the pad or keyboard.
        pipeline: the observation/reward pipeline over the track's reference line.
        settings: observation mode, sizes, timeouts.
    """

    def __init__(self, telemetry: TelemetryClient, frames: FrameSource, controller: Controller,
                 pipeline: TrackmaniaPipeline, settings: InterfaceSettings) -> None:
        self.telemetry = telemetry
        self.frames = frames
        self.controller = controller
        self.pipeline = pipeline
        self.s = settings
        if settings.observation not in ("image", "lidar"):
            raise UserError(f"tm2020 observation must be image or lidar, got {settings.observation!r}")
        self._lidar: Lidar | TmrlLidar | None = None
        self._scans: deque[np.ndarray] = deque(maxlen=settings.lidar_history)
        self._last_action: Any = self.get_default_action()
        self._last_obs: list[Any] | None = None
        self._last_info: dict[str, Any] = {}
        self._fault = ""
        self.closed = False  # set by the env's close(): no control reaches the game after it
        self.faults: dict[str, int] = {"plugin_silent": 0, "window_lost": 0, "game_paused": 0, "mirrored_record": 0}
        self.reset_error: Exception | None = None
        """An exception from the last reset, raised again by ``TM2020Env.reset``."""
        self.handedness = 0
        """det([Left, Up, Dir]) sign of the stream, set by its first well-formed record."""
        self.resets = 0
        self._reset_ok = False
        self.focus_failures = 0
        """Give ups before which the window could not be given the keyboard focus."""
        self.end_screens = 0
        """End-of-race screens dismissed."""
        self._window_size: tuple[int, int] = (0, 0)

    # ------------------------------------------------------------------ spaces
    @property
    def float_dim(self) -> int:
        extra = 19 * self.s.lidar_history if self.s.observation == "lidar" else 0
        return self.pipeline.float_input_dim + extra

    def get_observation_space(self) -> spaces.Tuple:
        parts: list[spaces.Space[Any]] = [spaces.Box(-1e6, 1e6, shape=(self.float_dim,), dtype=np.float32)]
        if self.s.observation == "image" and self.s.image:
            w, h = self.s.image_size
            parts.append(spaces.Box(0, 255, shape=(h, w), dtype=np.uint8))
        return spaces.Tuple(parts)

    def get_action_space(self) -> spaces.Space[Any]:
        if self.s.continuous:
            return spaces.Box(np.array([0.0, 0.0, -1.0], np.float32), np.array([1.0, 1.0, 1.0], np.float32))
        return spaces.Discrete(N_ACTIONS)

    def get_default_action(self) -> Any:
        return np.zeros(3, dtype=np.float32) if self.s.continuous else 3  # nothing pressed

    # ------------------------------------------------------------------ observation parts
    def _frame_part(self, frame: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(image, lidar scans) of a captured frame, as the observation mode needs."""
        if self.s.observation == "image":
            if not self.s.image:
                return None, None
            w, h = self.s.image_size
            return to_image(frame, w, h, grayscale=True), None
        if self._lidar is None or (self._lidar.width, self._lidar.height) != (frame.shape[1], frame.shape[0]):
            self._lidar = make_lidar(self.s.lidar, frame.shape[1], frame.shape[0], self.s.lidar_dark_threshold)
        scan = self._lidar.measure(frame)
        self._scans.append(scan)
        while len(self._scans) < self._scans.maxlen:
            self._scans.appendleft(scan)
        return None, np.concatenate(list(self._scans))

    def _assemble(self, float_obs: np.ndarray, img: np.ndarray | None, scans: np.ndarray | None) -> list[Any]:
        if scans is not None:
            float_obs = np.concatenate([float_obs, scans]).astype(np.float32)
        obs: list[Any] = [float_obs]
        if img is not None:
            obs.append(img)
        return obs

    # ------------------------------------------------------------------ health
    def _health(self) -> tuple[str, str, Telemetry | None, np.ndarray | None]:
        """(fault, detail, telemetry, frame): fault "" when everything answers."""
        rec = self.telemetry.latest()
        age = self.telemetry.silent_for()
        if rec is None or age > self.s.telemetry_timeout_s:
            return "plugin_silent", f"{age:.1f}", rec, None
        if rec.paused:
            return "game_paused", "", rec, None
        hand = rec.handedness()
        if hand and not self.handedness:
            self.handedness = hand
            log.info("tm2020: the game's Left is %s(Up x Dir)", "" if hand > 0 else "-")
        if hand != self.handedness:
            why = "not orthonormal" if hand == 0 else f"handedness {hand:+d}, stream {self.handedness:+d}"
            return "mirrored_record", why, rec, None
        try:
            frame = self.frames.grab()
        except WindowLost as exc:
            return "window_lost", str(exc), rec, None
        return "", "", rec, frame

    def _report(self, fault: str, detail: str) -> None:
        self.faults[fault] += 1
        age = self.telemetry.silent_for()
        log.warning("tm2020: " + FAULT_MESSAGES[fault].format(age=min(age, 1e9), detail=detail))

    def _await_healthy(self) -> tuple[Telemetry, np.ndarray]:
        start = time.monotonic()
        deadline = start + self.s.recover_timeout_s
        next_log = start + 5.0
        while True:
            fault, detail, rec, frame = self._health()
            if not fault and rec is not None and frame is not None:
                if self._fault or time.monotonic() - start > 5.0:
                    log.warning("tm2020: game is back (telemetry, window, race) after %.1f s: resuming",
                                time.monotonic() - start)
                return rec, frame
            now = time.monotonic()
            if now >= deadline:
                raise UserError(
                    f"tm2020: the game did not come back within {self.s.recover_timeout_s:.0f} s ({fault}"
                    f"{': ' + detail if detail else ''}); check the game, the rulka plugin and the window"
                )
            if now >= next_log:
                log.warning("tm2020: still waiting for the game (%s%s)", fault, f": {detail}" if detail else "")
                next_log = now + 5.0
            time.sleep(self.s.poll_s)

    def _respawn(self) -> Telemetry:
        """Give up until a new race starts (start signal seen); return its first record. A
        respawn would not do: past a checkpoint it keeps the clock running."""
        for attempt in range(3):
            before = self.telemetry.latest()
            t_before = before.race_time_ms if before is not None else 0
            frame_before = before.frame if before is not None else None
            self._give_up()
            deadline = time.monotonic() + self.s.reset_timeout_s
            saw_countdown = False
            rec = None
            while time.monotonic() < deadline:
                rec = self.telemetry.wait_newer(frame_before, self.s.poll_s)
                if rec is None:
                    continue
                frame_before = rec.frame
                rt = rec.race_time_ms
                if rt < 0:
                    saw_countdown = True
                elif not rec.finished and not rec.paused and (saw_countdown or rt < t_before - 100):
                    return rec
            log.warning("tm2020: no start signal %.0f s after give up (attempt %d); pressing again",
                        self.s.reset_timeout_s, attempt + 1)
            self._await_healthy()
        focus = (f"; the game window refused the keyboard focus before {self.focus_failures} of the give ups"
                 if self.focus_failures else "")
        raise UserError("tm2020: the race does not restart on give up: keyboard Delete must be bound to "
                        "\"Give up\" (the game's default; Settings -> Controls) and the game window must have "
                        f"the keyboard focus{focus}")

    def _focus(self) -> bool:
        """Give the game window the keyboard focus before a key press (every give up is keyboard
        Delete, also while the virtual pad drives: the key goes to the focused window). False, a
        warning and a count when the window did not take it; the press is sent anyway and its
        effect is checked (the start signal)."""
        focus = getattr(self.frames, "focus", None)
        if focus is None or focus():
            return True
        self.focus_failures += 1
        log.warning("tm2020: could not give the game window the keyboard focus (%d times): the give up (Delete) "
                    "may go to another window; keep the Trackmania window in front", self.focus_failures)
        return False

    def _give_up(self) -> None:
        self._focus()
        self.controller.press_reset()

    def _dismiss_end_screen(self) -> None:
        """After a finish the game shows its end-of-race pop-up. TMRL 0.7.1's sequence
        (tmrl/custom/tm/tm_gym_interfaces.py ``wait``): restart the race, sleep 0.5 s, close the
        pop-up; with the gamepad by pressing A (control_gamepad.py
        ``gamepad_close_finish_pop_up_tm20``), with the keyboard by clicking it
        (control_mouse.py ``mouse_close_finish_pop_up_tm20``; capture.py ``END_SCREEN_CLICK``).
        rulka restarts with give up (keyboard Delete) where TMRL's pad presses B."""
        self._give_up()
        time.sleep(0.5)
        click = getattr(self.frames, "click", None)
        if self.controller.name == "keyboard" and click is not None and all(self._window_size):
            self._focus()
            click(*end_screen_click_point(*self._window_size))
        else:
            self.controller.press_confirm()
        self.end_screens += 1

    # ------------------------------------------------------------------ rtgym API
    def send_control(self, control: Any) -> None:
        if control is None:
            return
        if self._fault or self.closed:
            self.controller.neutral()
            return
        self.controller.apply(control)
        self._last_action = control

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[Any], dict[str, Any]]:
        # rtgym calls this in its own thread and waits for it: an exception there would end the
        # thread and leave the caller waiting forever. It is kept for TM2020Env.reset to raise.
        try:
            return self._reset(seed, options)
        except Exception as exc:  # noqa: BLE001 - re-raised by TM2020Env.reset
            self.reset_error = exc
            self._reset_ok = False
            self.controller.neutral()
            obs = [np.zeros(sp.shape, sp.dtype) for sp in self.get_observation_space().spaces]
            return list(self._last_obs or obs), {"fault": "reset_failed"}

    def _reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[list[Any], dict[str, Any]]:
        self.controller.neutral()
        rec, frame = self._await_healthy()
        self._window_size = (int(frame.shape[1]), int(frame.shape[0]))
        if rec.finished:
            self._dismiss_end_screen()
        rec = self._respawn()
        self._fault = ""
        self._scans.clear()
        self._last_action = self.get_default_action()
        try:
            frame = self.frames.grab()
        except WindowLost:
            _, frame = self._await_healthy()
        float_obs, info = self.pipeline.reset(rec.car_state())
        img, scans = self._frame_part(frame)
        self._last_obs = self._assemble(float_obs, img, scans)
        self.resets += 1
        self._reset_ok = True
        info["fault"] = ""
        self._last_info = dict(info)
        return self._last_obs, info

    def get_obs_rew_terminated_info(self) -> tuple[list[Any], float, bool, dict[str, Any]]:
        if not self._reset_ok:
            # rtgym captures once more after a reset that failed: no race to read (an exception
            # here would end rtgym's thread and leave close() waiting for it forever)
            obs = [np.zeros(sp.shape, sp.dtype) for sp in self.get_observation_space().spaces]
            return list(self._last_obs or obs), 0.0, True, {"fault": "reset_failed", "truncated_by_pipeline": True}
        t0 = time.perf_counter()
        fault, detail, rec, frame = self._health()
        if fault or rec is None or frame is None:
            self._fault = fault
            self.controller.neutral()
            self._report(fault, detail)
            # the last good step's info (same keys, e.g. the shaping potential the memory needs)
            info = {**self._last_info, "fault": fault, "truncated_by_pipeline": True, "finished": False,
                    "cutoff": fault, "progress_delta_m": 0.0}
            info = {k: v for k, v in info.items() if not k.startswith("reward/")}
            return list(self._last_obs or []), 0.0, True, info
        float_obs, reward, terminated, truncated, info = self.pipeline.step(rec.car_state(), self._last_action)
        img, scans = self._frame_part(frame)
        self._last_obs = self._assemble(float_obs, img, scans)
        info["fault"] = ""
        info["truncated_by_pipeline"] = bool(truncated)
        self._last_info = dict(info)
        info["telemetry_age_ms"] = 1000.0 * self.telemetry.silent_for()
        info["obs_ms"] = 1000.0 * (time.perf_counter() - t0)  # capture + conversion + pipeline
        return self._last_obs, float(reward), bool(terminated or truncated), info

    def wait(self) -> None:
        """Between episodes: release the controls (the next reset gives up: a restart at zero)."""
        self.controller.neutral()
