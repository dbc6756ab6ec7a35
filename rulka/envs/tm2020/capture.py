"""Frames of the game window: a small capture interface, its Windows and Linux implementations,
and the conversion to what the learner sees (grayscale image at the configured size, or
TMRL-style LIDAR beams).

A ``FrameSource`` returns the window's client area as a BGRA ``uint8`` array ``(h, w, 4)``, or
raises ``WindowLost`` when the window is gone or minimised. Windows-only and Linux-only modules
(pywin32, mss) are imported when a source is built, never at import time, so this module imports
anywhere.
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
import sys
from typing import Any, Protocol

import cv2
import numpy as np

from rulka.errors import UserError

DEFAULT_TITLE = "Trackmania"


class WindowLost(Exception):
    """The game window cannot be captured now (closed, minimised, size 0)."""


class FrameSource(Protocol):
    """Where frames come from."""

    def grab(self) -> np.ndarray:
        """The client area as BGRA uint8 ``(h, w, 4)``; ``WindowLost`` when it cannot."""
        ...

    def close(self) -> None: ...

    # optional (the env checks with getattr): ``focus() -> bool`` gives the window the keyboard
    # focus and says whether it has it; ``click(x, y)`` left-clicks a client-area pixel


# End-of-race pop-up: where TMRL 0.7.1 clicks it in keyboard mode
# (tmrl/custom/tm/utils/control_mouse.py ``mouse_close_finish_pop_up_tm20``: screen (138, 108) for
# its 256 x 128 image window, (550, 320) for its 958 x 488 LIDAR window; with the gamepad it
# presses A instead, control_gamepad.py). TMRL places the window at x = 1 - w_diff // 2, y = 0
# (window.py ``move_and_resize``), so the client area starts at screen (1, h_diff - w_diff // 2) =
# (1, 31) with Windows 10's borders (16, 39; window.py's comment): the click in client pixels is
# (137, 77) and (549, 289), kept here as fractions of the client size [inferred from those
# constants; the button's position at other sizes is not known].
END_SCREEN_CLICK = {(256, 128): (137 / 256, 77 / 128), (958, 488): (549 / 958, 289 / 488)}


def end_screen_click_point(width: int, height: int) -> tuple[int, int]:
    """Client pixel to click on the end-of-race pop-up of a ``width`` x ``height`` window: TMRL's
    point for the layout of the nearer of its two window sizes, scaled."""
    size = min(END_SCREEN_CLICK, key=lambda s: abs(s[0] - width) + abs(s[1] - height))
    fx, fy = END_SCREEN_CLICK[size]
    return int(round(fx * width)), int(round(fy * height))


# ---------------------------------------------------------------------- conversion
def to_image(frame: np.ndarray, width: int, height: int, grayscale: bool = True) -> np.ndarray:
    """A captured BGRA (or BGR / gray) frame -> ``(height, width)`` gray uint8, or
    ``(height, width, 3)`` RGB when ``grayscale`` is False. Downscaling uses area averaging."""
    if grayscale and frame.ndim == 3:
        # gray first, then resize one channel: a quarter of the work of resizing BGRA
        frame = cv2.cvtColor(frame, cv2.COLOR_BGRA2GRAY if frame.shape[2] == 4 else cv2.COLOR_BGR2GRAY)
    elif frame.ndim == 3 and frame.shape[2] == 4:
        frame = frame[:, :, :3]
    h, w = frame.shape[:2]
    if (w, h) != (width, height):
        interp = cv2.INTER_AREA if width <= w and height <= h else cv2.INTER_LINEAR
        frame = cv2.resize(frame, (width, height), interpolation=interp)
    if frame.ndim == 2:
        return frame if grayscale else np.repeat(frame[:, :, None], 3, axis=2)
    if grayscale:
        return cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
    return cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)


# TMRL's LIDAR: 19 beams from a point near the bottom centre of the frame, from 90 to 270
# degrees in 10 degree steps (pointing left, up, right in image terms), each stopping at the first
# pixel darker than a threshold on all three channels (road borders are dark in TM2020).
LIDAR_ANGLES_DEG = tuple(range(90, 271, 10))
N_BEAMS = len(LIDAR_ANGLES_DEG)


class Lidar:
    """Beam lengths (pixels) from a frame, as TMRL's LIDAR environment measures them.

    The origin is ``(origin_x, origin_y)`` as fractions of the width and height (bottom centre
    by default); beam ``k`` leaves at ``LIDAR_ANGLES_DEG[k]`` (0 = down, 180 = straight up in the
    image, counterclockwise seen on screen: 90 points left). A beam stops at the first pixel whose
    channels are all below ``dark``, or at the frame edge. ``measure`` returns lengths divided by
    ``max_len`` (1 = no border within the frame) as float32 ``(N_BEAMS,)``.
    """

    def __init__(self, width: int, height: int, dark: int = 55, origin_x: float = 0.5,
                 origin_y: float = 0.98) -> None:
        self.width, self.height, self.dark = int(width), int(height), int(dark)
        ox, oy = origin_x * (width - 1), origin_y * (height - 1)
        self.max_len = float(math.hypot(width, height))
        steps = np.arange(int(self.max_len) + 1, dtype=np.float64)
        xs, ys = [], []
        for a in LIDAR_ANGLES_DEG:
            r = math.radians(a)
            # angle 0 points down the image; 90 left; 180 up; 270 right
            xs.append(np.rint(ox - np.sin(r) * steps))
            ys.append(np.rint(oy + np.cos(r) * steps))
        self._x = np.stack(xs).astype(np.int64)
        self._y = np.stack(ys).astype(np.int64)
        self._inside = (self._x >= 0) & (self._x < width) & (self._y >= 0) & (self._y < height)
        self._xc = np.clip(self._x, 0, width - 1)
        self._yc = np.clip(self._y, 0, height - 1)
        self._steps = steps

    def measure(self, frame: np.ndarray) -> np.ndarray:
        if frame.shape[0] != self.height or frame.shape[1] != self.width:
            raise ValueError(f"lidar expects a {self.width}x{self.height} frame, got {frame.shape[1]}x{frame.shape[0]}")
        pix = frame[self._yc, self._xc]
        if pix.ndim == 3:
            dark = np.all(pix[..., :3] < self.dark, axis=-1)
        else:
            dark = pix < self.dark
        stop = dark | ~self._inside
        first = np.where(stop.any(axis=1), stop.argmax(axis=1), stop.shape[1] - 1)
        return (self._steps[first] / self.max_len).astype(np.float32)


class TmrlLidar:
    """TMRL 0.7.1's LIDAR (``tmrl/custom/tm/utils/tools.py``, ``Lidar.lidar_20``), for users who
    bring TMRL's LIDAR data or habits (``environment.tm2020.lidar: tmrl``).

    What differs from rulka's ``Lidar``: the origin is row ``44 * h // 49``, column ``w // 2``;
    beam ``k`` leaves at ``90 + 10 k`` degrees with row step ``cos`` and column step ``sin``, so the
    first beam points right (rulka's points left); pixels are visited from 20 pixels out, at
    ``int()``-truncated positions, and a beam ends before the top row, the left column or the last
    column; the value is the raw index of the first dark pixel along those visited pixels (20
    pixels less than the distance), or the last index when none is dark. float32 ``(N_BEAMS,)``.
    """

    MIN_DIST = 20

    def __init__(self, width: int, height: int, dark: int = 55) -> None:
        self.width, self.height, self.dark = int(width), int(height), int(dark)
        row0, col0 = 44 * self.height // 49, self.width // 2
        self._rows: list[np.ndarray] = []
        self._cols: list[np.ndarray] = []
        for a in LIDAR_ANGLES_DEG:
            dr, dc = math.cos(math.radians(a)), math.sin(math.radians(a))
            rows, cols = [], []
            dist = self.MIN_DIST
            while True:
                r, c = int(row0 + dist * dr), int(col0 + dist * dc)
                if r <= 0 or c <= 0 or c >= self.width - 1:
                    break
                rows.append(r)
                cols.append(c)
                dist += 1
            if not rows:
                raise ValueError(f"TMRL's lidar needs a larger frame than {width}x{height}")
            self._rows.append(np.asarray(rows, dtype=np.int64))
            self._cols.append(np.asarray(cols, dtype=np.int64))

    def measure(self, frame: np.ndarray) -> np.ndarray:
        if frame.shape[0] != self.height or frame.shape[1] != self.width:
            raise ValueError(f"lidar expects a {self.width}x{self.height} frame, got {frame.shape[1]}x{frame.shape[0]}")
        out = np.empty(N_BEAMS, dtype=np.float32)
        for k, (rows, cols) in enumerate(zip(self._rows, self._cols)):
            pix = frame[rows, cols]
            dark = np.all(pix[..., :3] < self.dark, axis=-1) if pix.ndim == 2 else pix < self.dark
            hits = np.flatnonzero(dark)
            out[k] = hits[0] if hits.size else len(rows) - 1
        return out


def make_lidar(kind: str, width: int, height: int, dark: int) -> Lidar | TmrlLidar:
    """``rulka`` (the default) or ``tmrl`` (docs/tm2020.md says why rulka's is the default)."""
    if kind == "tmrl":
        return TmrlLidar(width, height, dark=dark)
    return Lidar(width, height, dark=dark)


# ---------------------------------------------------------------------- Windows
def grab_client_area(g: Any, ui: Any, hwnd: int, w: int, h: int) -> np.ndarray:
    """BitBlt the ``w`` x ``h`` client area of ``hwnd`` into a BGRA array through GDI.

    ``g``/``ui`` are pywin32's ``win32gui``/``win32ui`` (tests pass a recording fake). Every GDI
    object is released in the order Microsoft documents, on every path (an exception included):
    the bitmap is selected out of the memory DC (the DC's original bitmap selected back, as TMRL's
    ``window.py`` does: "avoids memory leak") before ``DeleteObject`` ("do not delete a drawing
    object while it is still selected into a DC"), the memory DC from ``CreateCompatibleDC`` is
    deleted with ``DeleteDC``, and the window DC from ``GetDC`` is released with ``ReleaseDC``,
    never ``DeleteDC`` ("an application must not delete a DC whose handle was obtained by calling
    the GetDC function"). A leak here costs a GDI handle per frame: 20 per second of a run, and
    Windows stops a process at 10,000 by default.
    """
    hdc = g.GetDC(hwnd)  # client-area DC: no border arithmetic needed
    try:
        src = ui.CreateDCFromHandle(hdc)  # wraps hdc; released below with ReleaseDC only
        mem = src.CreateCompatibleDC()
        try:
            bmp = ui.CreateBitmap()
            bmp.CreateCompatibleBitmap(src, w, h)
            try:
                old = mem.SelectObject(bmp)
                try:
                    mem.BitBlt((0, 0), (w, h), src, (0, 0), 0x00CC0020)  # SRCCOPY
                    data = bmp.GetBitmapBits(True)
                finally:
                    mem.SelectObject(old)
            finally:
                g.DeleteObject(bmp.GetHandle())
        finally:
            mem.DeleteDC()
    finally:
        g.ReleaseDC(hwnd, hdc)
    return np.frombuffer(data, dtype=np.uint8).reshape(h, w, 4).copy()


class WindowsCapture:
    """The client area of the top-level window titled ``title`` (exactly), through GDI.

    The process is made DPI aware first, so sizes are physical pixels. ``resize`` moves the
    window to the top-left corner and sizes its client area to ``width`` x ``height`` (set the
    game's windowed resolution to the same).
    """

    def __init__(self, title: str = DEFAULT_TITLE, width: int | None = None, height: int | None = None,
                 resize: bool = True) -> None:
        if sys.platform != "win32":
            raise UserError("Windows screen capture needs Windows; on Linux use environment.tm2020.capture: linux")
        try:
            import win32gui
            import win32ui
        except ImportError as exc:
            raise UserError(
                f"screen capture on Windows needs pywin32 ({exc}): pip install rulka[trackmania]"
            ) from None
        self._win32gui, self._win32ui = win32gui, win32ui
        try:  # per-monitor DPI awareness: physical pixels, no blurry scaled capture
            ctypes.windll.shcore.SetProcessDpiAwareness(2)
        except (AttributeError, OSError):
            try:
                ctypes.windll.user32.SetProcessDPIAware()
            except (AttributeError, OSError):
                pass
        self.title = title
        self.hwnd = self._find()
        if resize and width and height:
            self.move_and_resize(width, height)

    def _find(self) -> int:
        hwnd = self._win32gui.FindWindow(None, self.title)
        if not hwnd:
            raise WindowLost(
                f"{self.title} window not found (the title must be exactly '{self.title}'); "
                "start the game in windowed mode"
            )
        return hwnd

    def move_and_resize(self, width: int, height: int) -> None:
        g = self._win32gui
        wl, wt, wr, wb = g.GetWindowRect(self.hwnd)
        _, _, cw, ch = g.GetClientRect(self.hwnd)
        g.MoveWindow(self.hwnd, 0, 0, width + (wr - wl - cw), height + (wb - wt - ch), True)

    def grab(self) -> np.ndarray:
        g, ui = self._win32gui, self._win32ui
        if not g.IsWindow(self.hwnd):
            self.hwnd = self._find()
        if g.IsIconic(self.hwnd):
            raise WindowLost(f"{self.title} window is minimised: restore it (the game stops rendering)")
        _, _, w, h = g.GetClientRect(self.hwnd)
        if w <= 0 or h <= 0:
            raise WindowLost(f"{self.title} window has no client area ({w}x{h})")
        return grab_client_area(g, ui, self.hwnd, w, h)

    def focus(self) -> bool:
        """Give the window the keyboard focus (a keyboard give up goes to the focused window);
        True when it has it afterwards. Windows refuses ``SetForegroundWindow`` to a process that
        did not receive the last input; an Alt press first lifts that lock (Linesight's
        ``game_instance_manager.py`` does the same with WScript's ``SendKeys("%")``)."""
        g = self._win32gui
        try:
            if not g.IsWindow(self.hwnd):
                self.hwnd = self._find()
            if g.GetForegroundWindow() == self.hwnd:
                return True
            user32 = ctypes.windll.user32
            user32.keybd_event(0x12, 0, 0, 0)  # VK_MENU down
            user32.keybd_event(0x12, 0, 0x0002, 0)  # VK_MENU up (KEYEVENTF_KEYUP)
            g.SetForegroundWindow(self.hwnd)
            return bool(g.GetForegroundWindow() == self.hwnd)
        except Exception:  # noqa: BLE001 - pywin32 raises pywintypes.error; report "not focused"
            return False

    def click(self, x: int, y: int) -> None:
        """Left click at client-area pixel (x, y) (the end-of-race pop-up, as TMRL clicks it)."""
        g = self._win32gui
        sx, sy = g.ClientToScreen(self.hwnd, (int(x), int(y)))
        user32 = ctypes.windll.user32
        user32.SetCursorPos(int(sx), int(sy))
        user32.mouse_event(0x0002, 0, 0, 0, 0)  # MOUSEEVENTF_LEFTDOWN
        user32.mouse_event(0x0004, 0, 0, 0, 0)  # MOUSEEVENTF_LEFTUP

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------- Linux (Proton / X11)
class LinuxCapture:
    """The window titled ``title`` on an X11 (or XWayland) desktop, for the game under Proton.

    The window is found with ``xdotool`` (exact name), optionally moved to (0, 0) and resized,
    and its area grabbed with ``mss``. Window decorations are not part of the grab when the
    window manager reports the client geometry (``xdotool getwindowgeometry``).
    """

    def __init__(self, title: str = DEFAULT_TITLE, width: int | None = None, height: int | None = None,
                 resize: bool = True) -> None:
        if not sys.platform.startswith("linux"):
            raise UserError("Linux screen capture needs Linux with X11/XWayland")
        if shutil.which("xdotool") is None:
            raise UserError("Linux screen capture needs xdotool (apt install xdotool)")
        try:
            import mss
        except ImportError as exc:
            raise UserError(f"Linux screen capture needs mss ({exc}): pip install rulka[trackmania]") from None
        self._mss = mss.mss()
        self.title = title
        self.window = self._find()
        if resize and width and height:
            subprocess.run(["xdotool", "windowmove", self.window, "0", "0"], check=False, timeout=5)
            subprocess.run(["xdotool", "windowsize", self.window, str(width), str(height)], check=False, timeout=5)
        self.width, self.height = width, height

    def _find(self) -> str:
        out = subprocess.run(["xdotool", "search", "--onlyvisible", "--name", f"^{self.title}$"],
                             capture_output=True, text=True, timeout=5)
        ids = out.stdout.split()
        if not ids:
            raise WindowLost(f"{self.title} window not found (visible, title exactly '{self.title}')")
        return ids[0]

    def _geometry(self) -> tuple[int, int, int, int]:
        out = subprocess.run(["xdotool", "getwindowgeometry", "--shell", self.window],
                             capture_output=True, text=True, timeout=5)
        vals = dict(line.split("=", 1) for line in out.stdout.split() if "=" in line)
        try:
            return int(vals["X"]), int(vals["Y"]), int(vals["WIDTH"]), int(vals["HEIGHT"])
        except KeyError:
            self.window = self._find()
            raise WindowLost(f"{self.title} window geometry unavailable") from None

    def focus(self) -> bool:
        """Activate the window (xdotool) and say whether it is the active one afterwards."""
        try:
            subprocess.run(["xdotool", "windowactivate", "--sync", self.window], check=False, timeout=3)
            out = subprocess.run(["xdotool", "getactivewindow"], capture_output=True, text=True, timeout=3)
        except (OSError, subprocess.SubprocessError):
            return False
        return out.stdout.strip() == str(self.window)

    def click(self, x: int, y: int) -> None:
        """Left click at client-area pixel (x, y)."""
        subprocess.run(["xdotool", "mousemove", "--window", self.window, str(int(x)), str(int(y)), "click", "1"],
                       check=False, timeout=3)

    def grab(self) -> np.ndarray:
        x, y, w, h = self._geometry()
        if w <= 0 or h <= 0:
            raise WindowLost(f"{self.title} window is minimised or has no area")
        shot = self._mss.grab({"left": x, "top": y, "width": w, "height": h})
        return np.asarray(shot, dtype=np.uint8).reshape(h, w, 4)

    def close(self) -> None:
        self._mss.close()


def make_capture(kind: str, title: str, width: int, height: int) -> FrameSource:
    """``"windows"``, ``"linux"`` or ``"auto"`` (by platform). The fake source is built by the
    fake game (``rulka.envs.tm2020.fake``)."""
    if kind == "auto":
        kind = "windows" if sys.platform == "win32" else "linux"
    if kind == "windows":
        return WindowsCapture(title, width, height)
    if kind == "linux":
        return LinuxCapture(title, width, height)
    raise UserError(f"environment.tm2020.capture must be auto, windows, linux or fake; got {kind!r}")
