"""Game instances: launch (or attach to) one TMNF game per env, connect, handshake, restart.

- ``Launcher``s start a game on a plugin port and return a ``GameProcess`` that can be killed:
  ``TMLoaderLauncher`` (Windows: ``TMLoader.exe run TmForever "<profile>"
  /configstring="set custom_port <port>"``), ``ScriptLauncher`` (Linux/Wine: the user's script,
  called with the port; it should ``exec`` the game so that killing the script kills the game),
  ``FakeLauncher`` (rulka's fake game in this process) and ``AttachLauncher`` (a game the user
  started: never launched, never killed).
- ``InstanceSlot`` claims instance ``i`` of ``worker.num_envs`` on this PC (port
  ``user.base_tmi_port + i``), so several workers on one PC each drive their own game. The claim is
  a bound loopback socket, released by the OS when the worker dies, on Windows and Linux alike.
- ``GameInstance`` owns the ``TMIClient``: ``connect()`` launches when needed, waits for the
  plugin, answers ``SC_ON_CONNECT_SYNC`` with the handshake (speed, on-step period, console
  settings, map load when in the menus); ``restart()`` kills what it launched and starts again;
  ``due_for_reboot()`` says when ``environment.game_reboot_interval`` has passed.

Only portable process calls are used here (``subprocess.Popen``, ``Popen.kill``): the worker runs
on Windows. Kill only what we launched, never every ``TmForever.exe`` on the machine.
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rulka.envs.tmnf.client import GameClosed, GameConnectionError, GameTimeout, TMIClient
from rulka.envs.tmnf.protocol import OnConnect
from rulka.errors import UserError

if TYPE_CHECKING:
    from rulka.config import RulkaConfig

log = logging.getLogger(__name__)

SLOT_LOCK_OFFSET = 100  # instance i is claimed by binding 127.0.0.1:(base_port + 100 + i)


class GameProcess(Protocol):
    """A launched game. It may also have ``restore_window()`` (un-minimise) and
    ``focus_window()``; those without them are skipped."""

    def alive(self) -> bool: ...

    def kill(self) -> None: ...


class Launcher(Protocol):
    def launch(self, port: int) -> GameProcess | None: ...


# ---------------------------------------------------------------------------------------- slots
class InstanceSlot:
    """Claim the first free instance number ``i < count`` on this PC; ``port = base_port + i``."""

    def __init__(self, base_port: int, count: int, instance: int | None = None) -> None:
        self.base_port = int(base_port)
        candidates = [instance] if instance is not None else list(range(int(count)))
        for i in candidates:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", self.base_port + SLOT_LOCK_OFFSET + i))
            except OSError:
                s.close()
                continue
            self.index, self._lock = i, s
            return
        raise UserError(
            f"all {count} TMNF instance slots on this PC are taken (ports {self.base_port}.."
            f"{self.base_port + count - 1}); raise worker.num_envs to run more games on this PC"
        )

    @property
    def port(self) -> int:
        return self.base_port + self.index

    def release(self) -> None:
        self._lock.close()


# ---------------------------------------------------------------------------------------- launchers
class _PopenProcess:
    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # TerminateProcess on Windows, SIGKILL elsewhere
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.warning("game process %d did not exit after kill", self.proc.pid)


class _WindowsGame:
    """The ``TmForever.exe`` child of a TMLoader process, found and killed by pid."""

    def __init__(self, loader: subprocess.Popen) -> None:
        self.loader = loader
        self.pid: int | None = None

    def _find(self) -> int | None:
        if self.pid is None:
            query = (f"(Get-CimInstance Win32_Process -Filter \"ParentProcessId={self.loader.pid} and "
                     "Name='TmForever.exe'\").ProcessId")
            try:
                out = subprocess.run(["powershell", "-NoProfile", "-Command", query], capture_output=True,
                                     text=True, timeout=20).stdout.strip()
            except (OSError, subprocess.TimeoutExpired):
                return None
            self.pid = int(out.split()[0]) if out.split() and out.split()[0].isdigit() else None
        return self.pid

    def alive(self) -> bool:
        pid = self._find()
        if pid is None:
            return self.loader.poll() is None
        out = subprocess.run(["tasklist", "/FI", f"PID eq {pid}", "/NH"], capture_output=True, text=True).stdout
        return str(pid) in out

    def _windows(self) -> list[int]:
        """Top-level window handles of the game process (user32, Windows only)."""
        pid = self._find()
        if pid is None:
            return []
        user32 = ctypes.windll.user32  # type: ignore[attr-defined]
        found: list[int] = []
        proc = ctypes.WINFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_void_p)

        def visit(hwnd: Any, _: Any) -> bool:
            owner = ctypes.c_ulong()
            user32.GetWindowThreadProcessId(hwnd, ctypes.byref(owner))
            if owner.value == pid:
                found.append(hwnd)
            return True

        user32.EnumWindows(proc(visit), 0)
        return found

    def restore_window(self) -> None:
        for hwnd in self._windows():
            ctypes.windll.user32.ShowWindow(hwnd, 1)  # type: ignore[attr-defined]  # SW_SHOWNORMAL

    def focus_window(self) -> None:
        for hwnd in self._windows():
            ctypes.windll.user32.SetForegroundWindow(hwnd)  # type: ignore[attr-defined]

    def kill(self) -> None:
        pid = self._find()
        if pid is not None:
            subprocess.run(["taskkill", "/PID", str(pid), "/F"], capture_output=True)
        if self.loader.poll() is None:
            self.loader.kill()


@dataclass
class TMLoaderLauncher:
    """Windows: start TMNF with TMInterface through a TMLoader profile."""

    tmloader_path: str
    profile: str = "default"

    def launch(self, port: int) -> GameProcess:
        exe = Path(self.tmloader_path).expanduser()
        if not exe.is_file():
            raise UserError(f"TMLoader not found at {exe}: set user.windows_tmloader_path (`rulka tm check`)")
        proc = subprocess.Popen([str(exe), "run", "TmForever", self.profile, f"/configstring=set custom_port {port}"])
        return _WindowsGame(proc)


@dataclass
class ScriptLauncher:
    """Linux (Wine) or anything else: run the user's launch script with the port as its argument.

    On Linux the launch holds a spawn lock (a file lock shared by every worker on the machine)
    from the spawn until ``settle_s`` later, so two Wine games never start at the same time
    (Linesight's ``game_instance_manager.py`` holds one while a game starts: concurrent Wine and
    TMLoader/ModLoader starts interfere)."""

    script: str
    settle_s: float = 5.0
    lock_path: str = ""

    def launch(self, port: int) -> GameProcess:
        path = Path(self.script).expanduser()
        if not path.is_file():
            raise UserError(f"game launch script {path} does not exist (user.linux_launch_game_path)")
        if sys.platform != "win32":  # the Wine spawn lock: POSIX only, never on a Windows worker
            import fcntl

            lock = Path(self.lock_path or Path(tempfile.gettempdir()) / "rulka-tmnf-spawn.lock")
            with open(lock, "a+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                try:
                    proc = _PopenProcess(subprocess.Popen([str(path), str(port)]))
                    time.sleep(self.settle_s)
                finally:
                    fcntl.flock(f, fcntl.LOCK_UN)
            return proc
        return _PopenProcess(subprocess.Popen([str(path), str(port)]))


class AttachLauncher:
    """The user runs the game; rulka only connects (and cannot restart it)."""

    def launch(self, port: int) -> None:
        return None


class _FakeProcess:
    def __init__(self, game: Any) -> None:
        self.game = game
        self.port = game.port

    def alive(self) -> bool:
        return bool(self.game.alive)

    def kill(self) -> None:
        self.game.stop()

    def restore_window(self) -> None:
        self.game.restore_window()

    def focus_window(self) -> None:
        self.game.focus_window()


class FakeLauncher:
    """rulka's fake game (``rulka.envs.tmnf.fake``) in this process: CI, tests, ``configs/tmnf_fake.yaml``.

    ``faults`` is shared by every game it starts, so a fault fires once per launcher."""

    def __init__(self, faults: Any = None, **game_kwargs: Any) -> None:
        from rulka.envs.tmnf.fake import FakeFaults

        self.faults = faults or FakeFaults()
        self.game_kwargs = game_kwargs
        self.games: list[Any] = []

    def launch(self, port: int) -> GameProcess:
        from rulka.envs.tmnf.fake import FakeGame

        game = FakeGame(port, faults=self.faults, **self.game_kwargs).start()
        self.games.append(game)
        return _FakeProcess(game)

    @property
    def game(self) -> Any:
        return self.games[-1] if self.games else None


def launcher_from_config(cfg: RulkaConfig) -> Launcher:
    """The launcher ``environment.game_launch`` names (``launch`` picks by platform)."""
    mode, user = cfg.environment.game_launch, cfg.user
    if mode == "fake":
        return FakeLauncher()
    if mode == "attach":
        return AttachLauncher()
    if sys.platform == "win32":
        return TMLoaderLauncher(user.windows_tmloader_path, user.windows_tmloader_profile_name)
    if not user.linux_launch_game_path:
        raise UserError(
            "environment.game_launch is 'launch' but user.linux_launch_game_path is not set: give the script "
            "that starts TMNF under Wine (see docs/tmnf.md), or use game_launch: attach with a game you started"
        )
    return ScriptLauncher(user.linux_launch_game_path)


# ---------------------------------------------------------------------------------------- instance
@dataclass
class GameSettings:
    """What the handshake and the instance manager need, from the run config (``from_config``)."""

    running_speed: float
    ms_per_action: int
    timeout_during_run_ms: int
    timeout_between_runs_ms: int
    protection_timeout_s: float
    start_timeout_s: float
    reboot_interval_s: float
    camera: int
    username: str
    profile: str
    trackmania_base_path: str = ""

    @classmethod
    def from_config(cls, cfg: RulkaConfig) -> GameSettings:
        env = cfg.environment
        return cls(
            running_speed=float(cfg.performance.running_speed),
            ms_per_action=env.ms_per_action,
            timeout_during_run_ms=env.timeout_during_run_ms,
            timeout_between_runs_ms=env.timeout_between_runs_ms,
            protection_timeout_s=float(env.tmi_protection_timeout_s),
            start_timeout_s=float(env.game_start_timeout_s),
            reboot_interval_s=float(env.game_reboot_interval),
            camera=env.game_camera_number,
            username=cfg.user.username,
            profile=cfg.user.windows_tmloader_profile_name,
            trackmania_base_path=cfg.user.trackmania_base_path,
        )


def map_command(map_path: str) -> str:
    """The TMInterface console command that loads ``map_path`` (relative to Tracks/Challenges;
    separators normalised for the platform, quoted when it has spaces)."""
    sep = "\\" if sys.platform == "win32" else "/"
    path = map_path.replace("\\", "/").replace("/", sep)
    return f'map "{path}"' if " " in path else f"map {path}"


def hide_personal_best_replay(base_path: str, username: str, map_path: str) -> Path | None:
    """Rename the personal-best autosave of ``map_path`` (``Tracks/Replays/Autosaves/<user>_<map
    name>.Replay.gbx``) to ``.bak`` so the game shows no PB ghost: once the agent sets a record a
    second car would otherwise drive in every frame (Linesight's ``map_loader.py``
    ``hide_personal_record_replay``). Returns the renamed file, or None when there was none."""
    if not base_path:
        return None
    name = Path(map_path.replace("\\", "/")).name
    for suffix in (".Challenge.Gbx", ".Challenge.gbx", ".gbx", ".Gbx"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    replay = Path(base_path).expanduser() / "Tracks" / "Replays" / "Autosaves" / f"{username}_{name}.Replay.gbx"
    if not replay.exists():
        return None
    hidden = replay.with_name(replay.name + ".bak")
    os.replace(replay, hidden)
    return hidden


class GameInstance:
    """One game and its plugin connection; the env calls ``connect`` before each rollout."""

    def __init__(self, port: int, launcher: Launcher, settings: GameSettings) -> None:
        self.port = int(port)
        self.launcher = launcher
        self.settings = settings
        self.client = TMIClient(port, settings.protection_timeout_s)
        self.process: GameProcess | None = None
        self.launched_at = 0.0
        self.loaded_map: str | None = None
        self.wanted_map: str | None = None
        self.counters = {"launches": 0, "restarts": 0, "reconnects": 0, "reboots": 0, "ghosts_hidden": 0,
                         "ghost_hide_errors": 0, "unminimised": 0, "focused": 0}
        self.fresh_connection = False
        self._console_to_close = False
        self._focus_pending = False
        self._restored_since_ok = False

    # ---------------------------------------------------------------- process
    def _launch(self) -> None:
        self.process = self.launcher.launch(self.port)
        self.launched_at = time.monotonic()
        self.loaded_map = None
        # TMInterface opens its console when the game starts; left open it is in every frame
        # (Linesight's handshake sends toggle_console only after a launch)
        self._console_to_close = True
        self._focus_pending = True  # once per launch, after the first action (Linesight)
        if self.process is not None:
            port = getattr(self.process, "port", None)  # a fake asked for port 0 picked its own
            if port:
                self.port = self.client.port = int(port)
            self.counters["launches"] += 1
            log.info("launched a game on port %d", self.port)

    def restart(self, reason: str) -> None:
        """Drop the connection; kill the game when we launched it (it starts again at ``connect``)."""
        self.client.close(polite=False)
        if self.process is not None:
            log.warning("restarting the game on port %d: %s", self.port, reason)
            self.process.kill()
            self.process = None
            self.counters["restarts"] += 1
        self.loaded_map = None

    def due_for_reboot(self) -> bool:
        return self.process is not None and time.monotonic() - self.launched_at >= self.settings.reboot_interval_s

    def close(self) -> None:
        self.client.close()
        if self.process is not None:
            self.process.kill()
            self.process = None

    # ---------------------------------------------------------------- connection
    def connect(self, map_path: str) -> None:
        """Be connected with the handshake done. ``map_path`` is loaded during the handshake when
        the game is in the menus."""
        self.wanted_map = map_path
        if self.client.connected:
            return
        if self.process is not None and not self.process.alive():
            log.warning("the game on port %d died; launching it again", self.port)
            self.process = None
            self.counters["restarts"] += 1
        if self.process is None and not isinstance(self.launcher, AttachLauncher):
            self._launch()
        proc = self.process
        self.client.connect(self.settings.start_timeout_s, self.settings.profile,
                            alive=(proc.alive if proc is not None else None))
        self.counters["reconnects"] += 1
        msg = self.client.receive()
        if not isinstance(msg, OnConnect):
            self.client.close(polite=False)
            raise GameClosed(f"expected the connect message from the game, got {type(msg).__name__}")
        self._handshake(map_path)

    def _handshake(self, map_path: str) -> None:
        s, c = self.settings, self.client
        if self._console_to_close:
            c.execute_command("toggle_console")
            self._console_to_close = False
        c.set_speed(1.0)
        c.set_on_step_period(s.ms_per_action)
        for command in ("set countdown_speed 80", f"set autologin {s.username}", "set unfocused_fps_limit false",
                        "set skip_map_load_screens true", "set disable_forced_camera true", "set autorewind false",
                        "set auto_reload_plugins false"):
            c.execute_command(command)
        if c.is_in_menus():
            self.request_map(map_path)
        c.respond(OnConnect.id)
        self.fresh_connection = True
        self._restored_since_ok = False

    def after_action(self) -> None:
        """Called after each action is sent: focuses the window once per launch, after the first
        action (Linesight forces focus once, late, not while another instance starts)."""
        if not self._focus_pending:
            return
        self._focus_pending = False
        focus = getattr(self.process, "focus_window", None)
        if focus is None:
            return
        try:
            focus()
            self.counters["focused"] += 1
        except Exception as exc:  # noqa: BLE001 - window APIs vary; focus is a convenience
            log.warning("could not focus the game window on port %d: %s", self.port, exc)

    def request_map(self, map_path: str) -> None:
        """Load ``map_path`` (buffered; sent with the next echo), its PB ghost hidden first."""
        try:
            if hide_personal_best_replay(self.settings.trackmania_base_path, self.settings.username, map_path):
                self.counters["ghosts_hidden"] += 1
        except OSError as exc:
            self.counters["ghost_hide_errors"] += 1
            log.warning("could not hide the personal-best replay of %s (its ghost may show): %s", map_path, exc)
        self.client.execute_command(map_command(map_path))
        self.loaded_map = map_path

    def recover(self, exc: BaseException) -> None:
        """After a failure: a dropped connection to a live game reconnects at the next ``connect``;
        a timeout (frozen, minimised, stuck in a menu) or a dead game restarts it."""
        if isinstance(exc, GameClosed) and (self.process is None or self.process.alive()):
            self.client.close(polite=False)
            return
        restore = getattr(self.process, "restore_window", None)
        if isinstance(exc, GameTimeout) and restore is not None and not self._restored_since_ok and self.process.alive():
            # A minimised game pauses and says nothing: un-minimise it and reconnect rather than
            # kill and relaunch (Linesight's ensure_not_minimized after a timeout). A second
            # timeout before a handshake succeeds restarts the game.
            self._restored_since_ok = True
            self.client.close(polite=False)
            try:
                restore()
                self.counters["unminimised"] += 1
                log.warning("the game on port %d timed out: un-minimised its window; reconnecting", self.port)
            except Exception as werr:  # noqa: BLE001 - window APIs vary; the restart below still works
                log.warning("could not un-minimise the game window on port %d: %s", self.port, werr)
            return
        if isinstance(exc, GameConnectionError) or self.process is not None:
            self.restart(str(exc).splitlines()[0])
