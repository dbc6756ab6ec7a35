"""What ``rulka tm ... --game tm2020`` does: install the Openplanet plugin, check a gaming PC, and
record the reference line the rewards follow.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rulka.envs.tm2020.telemetry import TelemetryClient
from rulka.errors import UserError

log = logging.getLogger(__name__)

PLUGIN_FOLDER_NAME = "rulka_telemetry"


def plugin_source_dir() -> Path:
    """The plugin shipped inside the package (``info.toml`` + ``main.as``)."""
    return Path(__file__).resolve().parent / "plugin"


def openplanet_plugins_dir() -> Path:
    """Openplanet's user plugin folder: ``%USERPROFILE%/OpenplanetNext/Plugins`` on Windows (the
    same folder inside the Proton prefix's user profile on Linux: pass ``--dest`` there)."""
    home = Path(os.environ.get("USERPROFILE") or Path.home())
    return home / "OpenplanetNext" / "Plugins"


def install_plugin(dest: Path | None = None) -> Path:
    """Copy rulka's plugin into ``dest`` (Openplanet's plugin folder by default) as a folder
    plugin ``rulka_telemetry/``; returns the installed folder. Openplanet loads an unsigned folder
    plugin only in Developer signature mode (Club access): see docs/tm2020.md."""
    root = dest if dest is not None else openplanet_plugins_dir()
    if not root.is_dir():
        raise UserError(
            f"Openplanet plugin folder {root} does not exist: install Openplanet and start the game once, "
            "or pass --dest FOLDER"
        )
    target = root / PLUGIN_FOLDER_NAME
    target.mkdir(exist_ok=True)
    for name in ("info.toml", "main.as"):
        shutil.copyfile(plugin_source_dir() / name, target / name)
    return target


@dataclass
class CheckResult:
    item: str
    ok: bool
    message: str


def check(tm: Any, timeout_s: float = 5.0, port: int | None = None) -> list[CheckResult]:
    """Check a gaming PC for ``environment.tm2020`` settings ``tm``: the plugin answers with
    telemetry, the game window is found and sized, the controller can be built."""
    results: list[CheckResult] = []
    with TelemetryClient(tm.plugin_host, port or tm.plugin_port, retry_s=0.25) as client:
        rec = client.wait_newer(None, timeout_s)
        if rec is not None:
            results.append(CheckResult("plugin", True, f"telemetry on {tm.plugin_host}:{port or tm.plugin_port}, "
                                       f"race time {rec.race_time_ms} ms, speed {rec['speed']:.1f}"))
        elif client.connects:
            results.append(CheckResult("plugin", False, f"connected but silent for {timeout_s:.0f} s: load a map "
                                       "and start driving; check the Openplanet log for script errors"))
        else:
            results.append(CheckResult("plugin", False, f"not listening on {tm.plugin_host}:{port or tm.plugin_port} "
                                       f"({client.last_error}): Openplanet (F3) -> Developer -> (re)load "
                                       "'rulka telemetry'; unsigned plugins need Developer signature mode"))
    from rulka.envs.tm2020.capture import WindowLost, make_capture

    try:
        frames = make_capture(tm.capture if tm.capture != "fake" else "auto", tm.window_title,
                              tm.window_width, tm.window_height)
        frame = frames.grab()
        h, w = frame.shape[:2]
        ok = (w, h) == (tm.window_width, tm.window_height)
        results.append(CheckResult("window", ok, f"'{tm.window_title}' client area {w}x{h}"
                                   + ("" if ok else f", expected {tm.window_width}x{tm.window_height}: set the "
                                      "game's windowed resolution to match")))
        frames.close()
    except (UserError, WindowLost) as exc:
        results.append(CheckResult("window", False, str(exc)))
    from rulka.envs.tm2020.control import make_controller

    try:
        controller = make_controller(tm.control if tm.control != "fake" else "gamepad")
        controller.close()
        results.append(CheckResult("control", True, f"{controller.name} ready (inputs neutral)"))
    except UserError as exc:
        results.append(CheckResult("control", False, str(exc)))
    return results


def record_line(
    client: TelemetryClient,
    out: Path,
    spacing_m: float = 0.5,
    start_timeout_s: float = 600.0,
    lap_timeout_s: float = 1800.0,
    on_progress: Callable[[str], None] | None = None,
) -> tuple[Path, Path]:
    """Record one lap driven by a person: positions from the start signal to the finish.

    Waits for a race to start (race time back near 0, e.g. after a respawn), feeds every new
    position to the shared ``LineRecorder`` until the finished flag, then writes ``out`` as
    ``.npy`` and ``.json`` (``rulka.envs.record_line.save_recorded_line``, resampled every
    ``spacing_m`` metres); returns both paths. A respawn mid-lap starts over.
    """
    from rulka.envs.record_line import LineRecorder, save_recorded_line

    say = on_progress or (lambda msg: log.info("%s", msg))
    say("waiting for a race to start: give up (Delete) and drive one lap to the finish")
    deadline = time.monotonic() + start_timeout_s
    last_frame = None
    recorder: LineRecorder | None = None
    last_rt = None
    race_time = 0
    while True:
        if time.monotonic() > deadline:
            raise UserError("no complete lap recorded in time (no start, or no finish): drive a lap to the finish")
        rec = client.wait_newer(last_frame, 0.5)
        if rec is None or rec.paused:
            continue
        last_frame = rec.frame
        rt = rec.race_time_ms
        if recorder is None:
            if 0 <= rt < 500 and not rec.finished:
                recorder = LineRecorder()
                recorder.add(rec.position)
                deadline = time.monotonic() + lap_timeout_s
                say("recording: drive to the finish")
            last_rt = rt
            continue
        if last_rt is not None and rt < last_rt - 100:  # respawn: start over
            recorder = None
            say("race restarted: recording again from the start signal")
            continue
        last_rt = rt
        recorder.add(rec.position)
        if rec.finished:
            race_time = rt
            break
    npy, js = save_recorded_line(recorder, out, spacing_m,
                                 {"backend": "tm2020", "race_time_ms": race_time, "source": "rulka telemetry plugin"})
    say(f"reference line written to {npy} and {js} ({len(recorder.points)} positions, race time "
        f"{race_time / 1000:.2f} s); set environment.tm2020.reference_line to either")
    return npy, js
