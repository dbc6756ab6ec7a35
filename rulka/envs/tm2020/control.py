"""Driving the game: a virtual Xbox 360 gamepad (vgamepad) or the keyboard.

Every controller takes the continuous action ``(gas, brake, steer)`` (gas and brake in [0, 1],
steer in [-1, 1], negative = left), the same as ``rulka.envs.actions``; a discrete action is
first mapped with ``discrete_to_continuous`` (full trigger, full stick). The gamepad applies the
analog values (right trigger = gas, left trigger = brake, left stick x = steer: the game's
default bindings); the keyboard presses keys above the thresholds TMRL uses (gas/brake > 0,
steer beyond +-0.5).

Safety: a controller returns to neutral (nothing pressed) on ``neutral()``, ``close()``, at
interpreter exit (``atexit``) and when garbage-collected, so a worker that stops or crashes does
not leave the car accelerating. ``NeutralOnExit`` is the context manager the env uses.

vgamepad and the Windows input API are imported when a controller is built, never at import.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import shutil
import subprocess
import sys
import threading
import time
import weakref
from typing import Any

import numpy as np

from rulka.envs.actions import discrete_to_continuous
from rulka.errors import UserError

log = logging.getLogger(__name__)

NEUTRAL = (0.0, 0.0, 0.0)


def to_analog(action: Any) -> tuple[float, float, float]:
    """``(gas, brake, steer)`` of a discrete index or a continuous triple, clipped; a non-finite
    continuous action is neutral (never press something a broken policy asked for)."""
    arr = np.asarray(action)
    if arr.ndim == 0 and np.issubdtype(arr.dtype, np.integer):
        gas, brake, steer = discrete_to_continuous(int(arr))
    else:
        vals = np.asarray(arr, dtype=np.float64).reshape(3)
        if not np.isfinite(vals).all():
            return NEUTRAL
        gas, brake, steer = vals
    return (min(max(float(gas), 0.0), 1.0), min(max(float(brake), 0.0), 1.0),
            min(max(float(steer), -1.0), 1.0))


_LIVE: weakref.WeakSet[Controller] = weakref.WeakSet()


def _neutral_all() -> None:
    for c in list(_LIVE):
        try:
            c.neutral()
        except Exception:  # noqa: BLE001 - at exit, release as much as possible
            pass


atexit.register(_neutral_all)


class Controller:
    """Base: ``apply(action)``, ``press_reset()``, ``neutral()``, ``close()``."""

    name = "controller"

    def __init__(self) -> None:
        self.last: tuple[float, float, float] = NEUTRAL
        self.applied = 0
        self._lock = threading.Lock()
        _LIVE.add(self)

    def apply(self, action: Any) -> None:
        """Hold ``action`` until the next call."""
        values = to_analog(action)
        with self._lock:
            self._send(*values)
            self.last = values
            self.applied += 1

    def neutral(self) -> None:
        """Release everything."""
        with self._lock:
            self._send(*NEUTRAL)
            self.last = NEUTRAL

    def press_reset(self, hold_s: float = 0.1) -> None:
        """Give up: restart the race at zero (keyboard Delete, the game's default binding; the
        gamepad controller sends the same key, since the pad's B respawns at a checkpoint)."""
        self.neutral()
        self._reset_button(True)
        time.sleep(hold_s)
        self._reset_button(False)

    def press_confirm(self, hold_s: float = 0.1) -> None:
        """Press the pad's A (TMRL closes the end-of-race pop-up with it, control_gamepad.py). The
        keyboard controller presses Enter; the env clicks the pop-up instead in keyboard mode, as
        TMRL does (interface.py ``_dismiss_end_screen``)."""
        self.neutral()
        self._confirm_button(True)
        time.sleep(hold_s)
        self._confirm_button(False)

    def press_menu(self, hold_s: float = 0.1) -> None:
        """Open or close the in-game menu (keyboard Escape, the game's default; the pad
        controller sends the same key). Only ``rulka tm doctor`` uses it, to see the pause flag set."""
        self.neutral()
        self._menu_button(True)
        time.sleep(hold_s)
        self._menu_button(False)

    def close(self) -> None:
        try:
            self.neutral()
        finally:
            _LIVE.discard(self)

    def __del__(self) -> None:
        try:
            self.neutral()
        except Exception:  # noqa: BLE001 - best effort while being collected
            pass

    # backends
    def _send(self, gas: float, brake: float, steer: float) -> None:
        raise NotImplementedError

    def _reset_button(self, down: bool) -> None:
        raise NotImplementedError

    def _confirm_button(self, down: bool) -> None:
        """Press/release the confirm button; backends without one do nothing."""

    def _menu_button(self, down: bool) -> None:
        _press_key("menu", down)


class NeutralOnExit:
    """``with NeutralOnExit(controller): ...``: neutral on the way out, exception or not."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def __enter__(self) -> Controller:
        return self.controller

    def __exit__(self, *exc: object) -> None:
        self.controller.neutral()


class GamepadController(Controller):
    """A virtual Xbox 360 pad through vgamepad (ViGEmBus on Windows, uinput on Linux)."""

    name = "gamepad"
    BUTTON_A = 0x1000

    def __init__(self) -> None:
        try:
            import vgamepad
        except ImportError as exc:
            raise UserError(f"gamepad control needs vgamepad ({exc}): pip install rulka[trackmania]") from None
        try:
            self._pad = vgamepad.VX360Gamepad()
        except Exception as exc:  # noqa: BLE001 - the driver's own exception types vary
            raise UserError(
                f"virtual gamepad unavailable ({exc}): install ViGEmBus (Windows) or grant write access to "
                "/dev/uinput (Linux); the game's gamepad bindings must be the defaults"
            ) from None
        if sys.platform != "win32" and not shutil.which("xdotool"):
            raise UserError("gamepad control on Linux gives up with the Delete key through xdotool: install xdotool")
        self._vg = vgamepad
        super().__init__()

    def _send(self, gas: float, brake: float, steer: float) -> None:
        pad = self._pad
        pad.right_trigger_float(value_float=gas)
        pad.left_trigger_float(value_float=brake)
        pad.left_joystick_float(x_value_float=steer, y_value_float=0.0)
        pad.update()

    def _reset_button(self, down: bool) -> None:
        # Give up, never respawn: the pad's B respawns at the last checkpoint with the clock
        # running (game-interfaces.md, corrections). The game reads the keyboard alongside the
        # pad, and keyboard Delete is the default "Give up" binding, so the pad gives up with it.
        _press_key("reset", down)

    def _confirm_button(self, down: bool) -> None:
        self._button(self._vg.XUSB_BUTTON.XUSB_GAMEPAD_A, down)

    def _button(self, button: Any, down: bool) -> None:
        if down:
            self._pad.press_button(button=button)
        else:
            self._pad.release_button(button=button)
        self._pad.update()


# Windows scan codes (SendInput with KEYEVENTF_SCANCODE): W S A D, Enter; Delete is the extended
# key E0 53 (TMRL writes it 0xD3), sent as 0x53 with KEYEVENTF_EXTENDEDKEY
_SCAN = {"gas": 0x11, "brake": 0x1F, "left": 0x1E, "right": 0x20, "confirm": 0x1C, "reset": 0x53, "menu": 0x01}
_EXTENDED = {"reset"}
# reset is Delete, TM2020's default "Give up" (BackSpace respawns at the last checkpoint)
_XKEYS = {"gas": "Up", "brake": "Down", "left": "Left", "right": "Right", "reset": "Delete", "confirm": "Return",
          "menu": "Escape"}


def _press_key(key: str, down: bool) -> None:
    """Press or release one of the keys above on this platform."""
    if sys.platform == "win32":
        KeyboardController._press_windows(key, down)
    else:
        KeyboardController._press_xdotool(key, down)


class KeyboardController(Controller):
    """Keys instead of a pad (binary: gas/brake when > 0, steer beyond +-0.5). The game window
    must have the keyboard focus. Windows: SendInput scan codes (W S A D, Delete); Linux:
    xdotool (arrow keys, Delete). The reset key is the game's give up (Delete)."""

    name = "keyboard"

    def __init__(self) -> None:
        if sys.platform == "win32":
            self._press = self._press_windows
        elif shutil.which("xdotool"):
            self._press = self._press_xdotool
        else:
            raise UserError("keyboard control needs Windows, or xdotool on Linux")
        self._down: set[str] = set()
        super().__init__()

    def _send(self, gas: float, brake: float, steer: float) -> None:
        want = {k for k, on in (("gas", gas > 0.0), ("brake", brake > 0.0), ("left", steer < -0.5),
                                ("right", steer > 0.5)) if on}
        for k in self._down - want:
            self._press(k, False)
        for k in want - self._down:
            self._press(k, True)
        self._down = want

    def _reset_button(self, down: bool) -> None:
        self._press("reset", down)

    def _confirm_button(self, down: bool) -> None:
        self._press("confirm", down)

    def _menu_button(self, down: bool) -> None:
        self._press("menu", down)

    @staticmethod
    def _press_windows(key: str, down: bool) -> None:
        code = _SCAN[key]

        class KEYBDINPUT(ctypes.Structure):
            _fields_ = [("wVk", ctypes.c_ushort), ("wScan", ctypes.c_ushort), ("dwFlags", ctypes.c_ulong),
                        ("time", ctypes.c_ulong), ("dwExtraInfo", ctypes.c_void_p)]

        class INPUT(ctypes.Structure):
            class _U(ctypes.Union):
                _fields_ = [("ki", KEYBDINPUT), ("pad", ctypes.c_byte * 32)]

            _anonymous_ = ("u",)
            _fields_ = [("type", ctypes.c_ulong), ("u", _U)]

        flags = 0x0008 | (0 if down else 0x0002) | (0x0001 if key in _EXTENDED else 0)
        inp = INPUT(type=1)
        inp.ki = KEYBDINPUT(0, code, flags, 0, None)
        ctypes.windll.user32.SendInput(1, ctypes.byref(inp), ctypes.sizeof(inp))

    @staticmethod
    def _press_xdotool(key: str, down: bool) -> None:
        subprocess.run(["xdotool", "keydown" if down else "keyup", _XKEYS[key]], check=False, timeout=2)


def make_controller(kind: str) -> Controller:
    """``"gamepad"`` or ``"keyboard"`` (the fake game builds its own controller)."""
    if kind == "gamepad":
        return GamepadController()
    if kind == "keyboard":
        return KeyboardController()
    raise UserError(f"environment.tm2020.control must be gamepad, keyboard or fake; got {kind!r}")


def log_neutral(controller: Controller, why: str) -> None:
    """Release the controls and say why (pause, reset, fault)."""
    controller.neutral()
    log.info("controls released (%s)", why)
