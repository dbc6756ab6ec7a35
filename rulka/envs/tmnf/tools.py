"""``rulka tm ... --game tmnf``: install the plugin, check the set-up, record a reference line.

The ``rulka tm`` command dispatches to a module per game that offers ``install_plugin``,
``check`` and ``record_line`` (this one for TMNF; ``rulka.envs.tm2020.tools`` for TM2020).
"""

from __future__ import annotations

import hashlib
import socket
import sys
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rulka.envs.record_line import LineRecorder, save_recorded_line
from rulka.errors import UserError

if TYPE_CHECKING:
    from rulka.config import RulkaConfig

PLUGIN_NAME = "RulkaLink.as"


def plugin_source() -> bytes:
    """rulka's TMInterface plugin, as shipped in the package."""
    return resources.files("rulka.envs.tmnf").joinpath("plugin", PLUGIN_NAME).read_bytes()


def plugin_dir(cfg: RulkaConfig) -> Path:
    """The TMInterface plugin folder (the folder of ``user.target_python_link_path``)."""
    return Path(cfg.user.target_python_link_path).expanduser().parent


def install_plugin(cfg: RulkaConfig, dest: Path | None = None) -> Path:
    """Copy the plugin into ``dest`` (default: the TMInterface plugin folder); returns the file."""
    folder = Path(dest).expanduser() if dest is not None else plugin_dir(cfg)
    if not folder.parent.exists() and dest is None:
        raise UserError(f"{folder.parent} does not exist: is TMInterface 2 installed? (or pass --dest)")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / PLUGIN_NAME
    target.write_bytes(plugin_source())
    return target


def _port_free(port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def check(cfg: RulkaConfig) -> list[tuple[str, bool, str]]:
    """(what, ok, detail) for each part a TMNF worker needs on this PC."""
    rows: list[tuple[str, bool, str]] = []
    launch = cfg.environment.game_launch
    if launch == "launch":
        if sys.platform == "win32":
            exe = Path(cfg.user.windows_tmloader_path).expanduser()
            rows.append(("TMLoader", exe.is_file(), f"{exe}" + ("" if exe.is_file() else
                         " missing: install TMLoader (tomashu.dev) or set user.windows_tmloader_path")))
        else:
            script = cfg.user.linux_launch_game_path
            ok = bool(script) and Path(str(script)).expanduser().is_file()
            rows.append(("launch script", ok, str(script) if ok else
                         f"{script or 'not set'}: set user.linux_launch_game_path to a script that starts TMNF "
                         "under Wine with the port as $1 (docs/tmnf.md)"))
    else:
        rows.append(("game launch", True, f"environment.game_launch: {launch}"))
    folder = plugin_dir(cfg)
    rows.append(("TMInterface folder", folder.parent.is_dir(),
                 str(folder.parent) if folder.parent.is_dir() else f"{folder.parent} missing: install TMInterface 2.1.x"))
    plugin = folder / PLUGIN_NAME
    if plugin.is_file():
        same = hashlib.sha256(plugin.read_bytes()).digest() == hashlib.sha256(plugin_source()).digest()
        rows.append(("rulka plugin", same, str(plugin) if same else f"{plugin} is another version: `rulka tm install-plugin`"))
    else:
        rows.append(("rulka plugin", False, f"{plugin} missing: `rulka tm install-plugin`"))
    other = folder / "Python_Link.as"
    if other.is_file():
        rows.append(("Linesight plugin", False, f"{other} also uses custom_port: remove it, or the two plugins fight over the port"))
    tracks = Path(cfg.user.trackmania_base_path).expanduser() / "Tracks"
    rows.append(("TrackMania tracks", tracks.is_dir(), str(tracks) if tracks.is_dir() else
                 f"{tracks} missing: set user.trackmania_base_path"))
    base, n = cfg.user.base_tmi_port, cfg.worker.num_envs
    busy = [p for p in range(base, base + n) if not _port_free(p)]
    rows.append(("plugin ports", not busy or launch == "attach",
                 f"{base}..{base + n - 1} free" if not busy else f"in use: {busy} (a game already running there is fine "
                 "with game_launch: attach)"))
    return rows


def record_line(cfg: RulkaConfig, out: Path, map_path: str, port: int, fake: bool = False, wait_s: float = 600.0,
                max_race_ms: int = 600_000) -> tuple[Path, Path, int]:
    """Connect to the game on ``port``, load ``map_path`` and record the next run from the start to
    the finish (a person drives; with ``fake`` the simulator's scripted driver does). Writes the
    ``.npy`` and ``.json`` reference line; returns both paths and the race time."""
    from rulka.envs.tmnf import protocol as P
    from rulka.envs.tmnf.game import AttachLauncher, FakeLauncher, GameInstance, GameSettings
    from rulka.envs.tmnf.state import decode_state

    settings = GameSettings.from_config(cfg)
    settings.running_speed = 1.0  # a person drives in real time
    settings.start_timeout_s = wait_s
    launcher: Any = FakeLauncher(countdown_ms=-100) if fake else AttachLauncher()
    game = GameInstance(0 if fake else port, launcher, settings)
    recorder = LineRecorder()
    driver = None
    try:
        game.connect(map_path)
        c = game.client
        if fake:
            c.set_speed(100.0)  # the scripted driver needs no real time
        if not game.loaded_map:
            game.request_map(map_path)
        started = False
        race_time = -1
        t_end = time.monotonic() + wait_s + max_race_ms / 1000
        while time.monotonic() < t_end:
            msg = c.receive()
            if isinstance(msg, P.RunStep):
                if not started:
                    started = True
                    c.give_up()  # record from a fresh start
                    c.respond(msg.id)
                    continue
                if msg.race_time_ms >= 0:
                    state = decode_state(c.get_simulation_state())
                    recorder.add(state.car.position)
                    if fake:
                        if driver is None:
                            from rulka.envs.sim.driver import ScriptedDriver

                            driver = ScriptedDriver(launcher.game._track)
                        from rulka.envs.actions import action_to_flags

                        acc, brk, left, right = (bool(v) for v in action_to_flags(driver.action(launcher.game._car)))
                        c.set_input_state(left, right, acc, brk)
                    if msg.race_time_ms > max_race_ms:
                        raise UserError(f"no finish within {max_race_ms / 1000:.0f} s of race time")
            elif isinstance(msg, P.CheckpointCountChanged) and started:
                state = decode_state(c.get_simulation_state())
                recorder.add(state.car.position)
                recorder.add_checkpoint(state.car.position)
                if msg.current >= msg.target:
                    race_time = state.race_time_ms
                    c.respond(msg.id)
                    break
            c.respond(msg.id)
        if race_time < 0:
            raise UserError("the run did not reach the finish")
        spacing = float(cfg.environment.distance_between_checkpoints)
        npy, js = save_recorded_line(recorder, out, spacing, {"map": map_path, "race_time_ms": race_time,
                                                                "backend": "tmnf", "source": "driven run"})
        return npy, js, race_time
    finally:
        game.close()


__all__ = ["install_plugin", "check", "record_line", "plugin_source", "PLUGIN_NAME"]
