"""``rulka tm doctor --game tmnf|tm2020``: a short scripted drive on the real game (or rulka's fake
with ``--fake``) that checks, one by one, what only the game can show: the frame's size and format,
the start of a race, that a give up restarts the clock at zero, the speed's units, the lateral
axis's handedness, the step pace, the keyboard focus (TM2020), TM2020's pause flag and countdown,
and (TMNF) the state blob against what TMInterface's API reports for the same step.

The sequence: start a race, accelerate straight for ``STRAIGHT_S`` seconds, accelerate and steer
left for ``LEFT_S`` seconds, give up. Each check prints PASS or FAIL with the values seen and what
was expected; the JSON report (``--report``, default ``rulka-doctor-<game>.json``) holds the same,
for a bug report. Use a map whose start is a straight road at least 60 m long.
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

STRAIGHT_S = 2.5
LEFT_S = 1.5
GIVE_UP_WAIT_S = 6.0  # game seconds a give up may take to show the countdown and the new start


@dataclass
class Check:
    name: str
    ok: bool | None  # None: not run (an earlier failure stopped the sequence)
    seen: str
    expected: str


@dataclass
class Report:
    game: str
    fake: bool
    checks: list[Check] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""

    def add(self, name: str, ok: bool | None, seen: str, expected: str) -> None:
        self.checks.append(Check(name, ok, seen, expected))

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if c.ok is False]

    def to_json(self) -> dict[str, Any]:
        return {"game": self.game, "fake": self.fake, "platform": platform.platform(), "time": time.time(),
                "checks": [asdict(c) for c in self.checks], "failed": self.failed, "error": self.error,
                "samples": self.samples}


ORDER = ("frame_size", "start", "state_vs_api", "step_pace", "speed_units", "lateral_handedness", "focus",
         "pause_flag", "give_up_restarts_at_zero")


# ---------------------------------------------------------------------- shared analysis
def _sample(t_ms: float, car: Any, **extra: Any) -> dict[str, Any]:
    return {"t_ms": float(t_ms), "pos": [float(v) for v in car.position], "vel": [float(v) for v in car.velocity],
            "left": [float(v) for v in car.orientation[:, 0]], "fwd": [float(v) for v in car.orientation[:, 2]],
            **extra}


def _speed_units(report: Report, samples: list[dict[str, Any]], speed_key: str = "vel") -> None:
    """Speed x time between two samples against the distance moved: 1 when the speed is in m/s."""
    ratios = []
    for a, b in zip(samples, samples[1:]):
        dt = (b["t_ms"] - a["t_ms"]) / 1000.0
        dist = float(np.linalg.norm(np.subtract(b["pos"], a["pos"])))
        if speed_key == "vel":
            speed = 0.5 * (float(np.linalg.norm(a["vel"])) + float(np.linalg.norm(b["vel"])))
        else:
            speed = 0.5 * (abs(a[speed_key]) + abs(b[speed_key]))
        if dt > 0 and dist > 0.2:
            ratios.append(speed * dt / dist)
    if not ratios:
        report.add("speed_units", False, "the car did not move", "speed x time = distance (m/s)")
        return
    r = float(np.median(ratios))
    report.add("speed_units", 0.85 <= r <= 1.18,
               f"speed x time / distance = {r:.3f} (median of {len(ratios)}; 3.6 means km/h)",
               "1.0 +- 15%: speed in m/s")


def _lateral(report: Report, turn: list[dict[str, Any]]) -> None:
    """Steering left moves the car to its left: the displacement along the lateral axis the game
    reports at the start of the turn is positive."""
    if len(turn) < 2:
        report.add("lateral_handedness", False, "no samples while turning", "positive displacement to the left")
        return
    d = np.subtract(turn[-1]["pos"], turn[0]["pos"])
    along = float(np.dot(d, turn[0]["left"]))
    fwd = float(np.dot(d, turn[0]["fwd"]))
    report.add("lateral_handedness", along > 0.05,
               f"steering left for {LEFT_S} s moved the car {along:+.2f} m along its lateral axis ({fwd:+.1f} m forward)",
               "> 0: the lateral axis points to the car's left")


def _pace(report: Report, samples: list[dict[str, Any]], ms_per_action: int, allowed_off: float = 0.05) -> None:
    """Race time between actions. TMNF is lock-step (every step exact); TM2020 runs in real time,
    where a loaded PC delays some steps (rtgym absorbs them): its median must hold and at most
    ``allowed_off`` of the steps be off by more than half a step."""
    steps = np.diff([s["t_ms"] for s in samples])
    if not len(steps):
        report.add("step_pace", False, "no steps", f"{ms_per_action} ms of race time per action")
        return
    bad = int(np.sum(np.abs(steps - ms_per_action) > 0.5 * ms_per_action))
    median = float(np.median(steps))
    report.add("step_pace", abs(median - ms_per_action) <= 0.1 * ms_per_action and bad <= max(1, allowed_off * len(steps)),
               f"race time per action: median {median:.1f} ms, {bad} of {len(steps)} off by > 50%",
               f"{ms_per_action} ms per action (at most {allowed_off:.0%} of the steps off)")


# ---------------------------------------------------------------------- TMNF
def doctor_tmnf(cfg: Any, launcher: Any = None, port: int | None = None) -> Report:
    from rulka.envs.tmnf import protocol as P
    from rulka.envs.tmnf.env import TmnfEnv
    from rulka.envs.tmnf.state import decode_state

    report = Report("tmnf", fake=cfg.environment.game_launch == "fake" or launcher is not None)
    ms = cfg.environment.ms_per_action
    env = TmnfEnv(cfg, launcher=launcher, port=port)
    api_vs_blob: list[tuple[int, int]] = []
    samples: list[dict[str, Any]] = []
    original = env._action_step

    def recording_action_step() -> Any:
        car = original()
        api_vs_blob.append((int(env._last_action_t), int(car.race_time_ms)))
        return car

    env._action_step = recording_action_step  # type: ignore[method-assign]
    original_setup = env._map_setup

    def any_line_setup(map_path: str, reference_line: str, short_name: str) -> Any:
        # the doctor reads the car, not the rewards: a map without a recorded line (the doctor
        # runs before `rulka tm record-line`) gets a straight stand-in line
        from pathlib import Path as _Path

        if (_Path(reference_line).expanduser().exists() if reference_line else env.fake_maps):
            return original_setup(map_path, reference_line, short_name)
        from rulka.envs.pipeline import TrackmaniaPipeline, make_reference_line
        from rulka.envs.tmnf.env import _MapSetup

        points = np.stack([np.zeros(4000), np.zeros(4000), np.arange(4000) * 0.5], axis=1)
        return _MapSetup(map_path, short_name or "doctor", TrackmaniaPipeline(
            env.params, make_reference_line(points, env.params)))

    env._map_setup = any_line_setup  # type: ignore[method-assign]
    try:
        try:
            _, info = env.reset()
        except Exception as exc:  # noqa: BLE001 - the check that failed is named below
            msg = str(exc)
            frame = "frame" in msg.lower()
            report.add("frame_size", False if frame else None, msg if frame else "not reached",
                       f"{cfg.w_downsized}x{cfg.h_downsized} BGRA frames as requested")
            if not frame:
                report.add("start", False, msg, "a race starts at race time 0")
            report.error = msg
            return report
        img = env._last_frame if env.image else None
        want = (cfg.h_downsized, cfg.w_downsized)
        if img is None:
            report.add("frame_size", None, "nn.vis.no_image: true, no frame requested", f"{want[1]}x{want[0]}")
        else:
            report.add("frame_size", tuple(img.shape[-2:]) == want and env.client.frame_size_mismatches == 0,
                       f"{img.shape[-1]}x{img.shape[-2]} from BGRA, {env.client.frame_size_mismatches} size mismatches",
                       f"{want[1]}x{want[0]} (environment image size)")
        t0 = api_vs_blob[-1][0] if api_vs_blob else None
        report.add("start", t0 == 0, f"first action at race time {t0} ms (after the countdown)",
                   "the first action at race time 0")
        phases = ((0, STRAIGHT_S, "straight"), (1, LEFT_S, "left"))  # 0 accelerate, 1 accelerate + left
        fields = _BlobVsApi()
        for action, seconds, phase in phases:
            for _ in range(int(seconds * 1000 / ms)):
                _, _, terminated, truncated, info = env.step(action)
                car = decode_state(env.client.get_simulation_state()).car
                fields.compare(api_vs_blob[-1][0], car, _api_state(report, env.client))
                samples.append(_sample(api_vs_blob[-1][0], car, phase=phase))
                if terminated or truncated:
                    break
        report.samples = samples
        fields.report(report, api_vs_blob)
        _pace(report, [s for s in samples], ms)
        _speed_units(report, [s for s in samples if s["phase"] == "straight"][int(1000 / ms):])
        _lateral(report, [s for s in samples if s["phase"] == "left"])
        report.add("focus", True, "inputs go through TMInterface's SetInputState", "no keyboard focus needed")
        _give_up_tmnf(report, env, P)
    except Exception as exc:  # noqa: BLE001 - reported, never a traceback
        report.error = f"{type(exc).__name__}: {exc}"
    finally:
        env.close()
    return report


# The state blob's fields the doctor compares with what TMInterface's API reports for the same
# step (C_GET_API_STATE): name, the blob's value, the API's value. Wheels in the API's accessor
# order (FrontLeft, FrontRight, BackRight, BackLeft); the blob's are put in that order by the
# wheel order rulka assumes (car_state.TMI_WHEEL_INDEX), so a wrong assumption shows here
# whenever the four wheels differ.
_API_ORDER = [0, 1, 3, 2]  # CarState's FL, FR, RL, RR -> FL, FR, BR, BL
_FIELDS: tuple[tuple[str, Any, Any], ...] = (
    ("position", lambda c: c.position, lambda a: a.position),
    ("velocity", lambda c: c.velocity, lambda a: a.velocity),
    ("angular_velocity", lambda c: c.angular_velocity, lambda a: a.angular_velocity),
    ("wheel_contact", lambda c: np.asarray(c.wheel_contact)[_API_ORDER], lambda a: a.wheel_contact),
    ("wheel_damper", lambda c: np.asarray(c.wheel_damper_absorb)[_API_ORDER], lambda a: a.wheel_damper),
    ("wheel_material", lambda c: np.asarray(c.wheel_material)[_API_ORDER], lambda a: a.wheel_material),
)


class _BlobVsApi:
    """Per field: the steps where the state blob and the API disagree (float32 tolerance)."""

    def __init__(self) -> None:
        self.steps = 0
        self.wheels_differ = 0  # steps where the API's four wheels were not all equal
        self.bad: dict[str, list[str]] = {}

    def compare(self, step_time_ms: int, car: Any, api: Any) -> None:
        self.steps += 1
        pairs = [("race_time", car.race_time_ms, api.race_time_ms)]
        pairs += [(name, blob(car), of_api(api)) for name, blob, of_api in _FIELDS]
        for name, b, a in pairs:
            if not np.allclose(np.asarray(b, dtype=np.float64), np.asarray(a, dtype=np.float64), rtol=1e-5, atol=1e-4):
                self.bad.setdefault(name, []).append(f"at {step_time_ms} ms blob {_fmt(b)} vs API {_fmt(a)}")
        if len(set(api.wheel_damper)) > 1 or len(set(api.wheel_material)) > 1 or len(set(api.wheel_contact)) > 1:
            self.wheels_differ += 1

    def report(self, report: Report, step_vs_blob: list[tuple[int, int]]) -> None:
        late = [(a, b) for a, b in step_vs_blob if a != b]
        if late:
            self.bad.setdefault("race_time", []).insert(0, f"run step at {late[0][0]} ms, blob {late[0][1]} ms")
        names = ["race_time"] + [n for n, _, _ in _FIELDS]
        seen = "; ".join(f"{n}: {len(self.bad[n])} of {self.steps} steps differ, first {self.bad[n][0]}"
                         for n in names if n in self.bad)
        report.add("state_vs_api", not self.bad and self.steps > 0,
                   (seen or f"{', '.join(names)} equal on all {self.steps} steps")
                   + f" (wheels distinguishable on {self.wheels_differ} steps)",
                   "the blob's race time, position, velocities and wheels (contact, damper, material, in "
                   "the assumed order) equal what TMInterface's API reports for the same step")


def _api_state(report: Report, client: Any) -> Any:
    """``C_GET_API_STATE``'s reply; a plugin older than 1.1.0 never answers it: named, with the fix."""
    try:
        return client.get_api_state()
    except Exception as exc:
        report.add("state_vs_api", False, f"no reply to C_GET_API_STATE ({type(exc).__name__}): the plugin in "
                   "TMInterface's Plugins folder is older than 1.1.0; run `rulka tm install-plugin --game tmnf` "
                   "and reload it", "the plugin answers C_GET_API_STATE")
        raise


def _fmt(v: Any) -> str:
    a = np.atleast_1d(np.asarray(v, dtype=np.float64))
    return "[" + ", ".join(f"{x:.3f}" for x in a) + "]" if a.size > 1 else f"{a[0]:.3f}"


def _give_up_tmnf(report: Report, env: Any, P: Any) -> None:
    """Give up while parked in a callback; read run steps: a countdown (race time < 0), then 0."""
    from rulka.envs.tmnf.state import decode_state

    c = env.client
    before = decode_state(c.get_simulation_state())
    c.give_up()
    c.set_speed(env.settings.running_speed)
    c.respond(env._pending)
    env._pending = None
    seen_negative, t_first, t_min = False, None, math.inf
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = c.receive()
        if isinstance(msg, P.RunStep):
            t = msg.race_time_ms
            t_first = t if t_first is None else t_first
            t_min = min(t_min, t)
            seen_negative |= t < 0
            if t >= 0 and seen_negative or (t_first is not None and t - t_first > GIVE_UP_WAIT_S * 1000):
                break
        c.respond(msg.id)
    after = decode_state(c.get_simulation_state())
    env._pending = P.MessageType.SC_RUN_STEP_SYNC
    report.add("give_up_restarts_at_zero", seen_negative,
               f"after give up at race time {before.race_time_ms} ms ({before.checkpoint_count} checkpoints passed): "
               f"lowest race time {t_min if t_min != math.inf else None} ms, then {after.race_time_ms} ms",
               "a countdown (race time < 0), then the race from 0")


# ---------------------------------------------------------------------- TM2020
def doctor_tm2020(cfg: Any, fake: Any = None) -> Report:
    from rulka.envs.tm2020.capture import WindowLost
    from rulka.envs.tm2020.env import TM2020Env

    tm = cfg.environment.tm2020
    report = Report("tm2020", fake=fake is not None or tm.capture == "fake")
    ms = cfg.environment.ms_per_action
    env = TM2020Env(cfg, fake=fake)
    samples: list[dict[str, Any]] = []
    try:
        try:
            frame = env.frames.grab()
            want = (tm.window_height, tm.window_width)
            report.add("frame_size", tuple(frame.shape[:2]) == want and frame.ndim == 3 and frame.shape[2] == 4,
                       f"{frame.shape[1]}x{frame.shape[0]}x{frame.shape[2] if frame.ndim == 3 else 1}",
                       f"{want[1]}x{want[0]}x4 (BGRA, the window's client area)")
        except WindowLost as exc:
            report.add("frame_size", False, str(exc), f"{tm.window_width}x{tm.window_height} BGRA")
        try:
            _, info = env.reset()
        except Exception as exc:  # noqa: BLE001 - the check that failed is named below
            msg = str(exc)
            give_up = "does not restart on give up" in msg
            report.add("give_up_restarts_at_zero" if give_up else "start", False, msg,
                       "a countdown (race time < 0), then the race from 0" if give_up else "a new race")
            report.error = msg
            return report
        rec = env.telemetry.latest()
        report.add("start", rec is not None and 0 <= rec.race_time_ms < 500 and not rec.finished,
                   f"reset returned at race time {rec.race_time_ms if rec else None} ms",
                   "a new race, race time 0 .. 500 ms")
        focus = getattr(env.frames, "focus", None)
        ok = bool(focus()) if focus is not None else None
        report.add("focus", ok, "the game window " + ("took" if ok else "refused") + " the keyboard focus",
                   "the window takes the focus (keyboard give up)")
        for action, seconds, phase in ((0, STRAIGHT_S, "straight"), (1, LEFT_S, "left")):
            for _ in range(int(seconds * 1000 / ms)):
                _, _, terminated, truncated, info = env.step(action)
                r = env.telemetry.latest()
                samples.append(_sample(r.race_time_ms, r.car_state(), phase=phase, speed=float(r["speed"]),
                                       paused=bool(r.paused), frame=int(r.frame)))
                if terminated or truncated:
                    break
        report.samples = samples
        _pace(report, samples, ms, allowed_off=0.25)
        by_frame = {s["frame"]: s for s in samples if s["phase"] == "straight"}
        _speed_units(report, [by_frame[k] for k in sorted(by_frame)][int(1000 / ms):], speed_key="speed")
        _lateral(report, [s for s in samples if s["phase"] == "left"])
        _pause_flag(report, env, samples)
        before = env.telemetry.latest()
        env.interface._give_up()
        seen_negative, t_min, last = False, math.inf, None
        deadline = time.monotonic() + GIVE_UP_WAIT_S / max(env.fake.time_scale if env.fake else 1.0, 1.0) + 2
        frame_no = before.frame
        while time.monotonic() < deadline:
            r = env.telemetry.wait_newer(frame_no, 0.05)
            if r is None:
                continue
            frame_no, last = r.frame, r
            t_min = min(t_min, r.race_time_ms)
            seen_negative |= r.race_time_ms < 0
            if seen_negative and r.race_time_ms >= 0:
                break
        report.add("give_up_restarts_at_zero", seen_negative,
                   f"after give up at race time {before.race_time_ms:.0f} ms: lowest race time "
                   f"{t_min if t_min != math.inf else None}, then {last.race_time_ms if last else None}",
                   "a countdown (race time < 0), then the race from 0")
    except Exception as exc:  # noqa: BLE001 - reported, never a traceback
        report.error = f"{type(exc).__name__}: {exc}"
    finally:
        env.close()
    return report


MENU_S = 1.0  # game seconds the doctor holds the in-game menu open


def _pause_flag(report: Report, env: Any, samples: list[dict[str, Any]]) -> None:
    """The paused flag: clear on every racing record, then set while the in-game menu (Escape)
    is open, with the race clock stopped; the menu is closed again before the give up."""
    racing = sum(s["paused"] for s in samples)
    scale = max(env.fake.time_scale if env.fake else 1.0, 1.0)
    env.interface._focus()
    env.interface.controller.press_menu()
    menu: list[Any] = []
    frame_no = env.telemetry.latest().frame
    deadline = time.monotonic() + MENU_S / scale
    while time.monotonic() < deadline:
        r = env.telemetry.wait_newer(frame_no, 0.05)
        if r is not None:
            frame_no = r.frame
            menu.append(r)
    env.interface._focus()
    env.interface.controller.press_menu()
    late = [r for r in menu if r.paused]  # the records after the menu opened
    times = [r.race_time_ms for r in late]
    stopped = bool(times) and max(times) - min(times) <= 20
    closed = False
    deadline = time.monotonic() + 2.0 / scale + 1.0
    while time.monotonic() < deadline:  # racing again before the give up
        r = env.telemetry.wait_newer(frame_no, 0.05)
        if r is not None:
            frame_no = r.frame
            if not r.paused:
                closed = True
                break
    report.add("pause_flag", racing == 0 and bool(late) and stopped,
               f"set on {racing} of {len(samples)} racing records; with the menu open (Escape) set on {len(late)} of "
               f"{len(menu)} records, race time " + (f"{min(times)}..{max(times)} ms" if times else "not seen")
               + ("" if closed else "; still paused after the second Escape (close the menu by hand)"),
               "0 while racing; 1 with the menu open (a solo race: online races do not pause), the race clock stopped")


# ---------------------------------------------------------------------- output
def render(report: Report) -> str:
    lines = [f"rulka tm doctor --game {report.game}{' (fake game)' if report.fake else ''}"]
    for c in sorted(report.checks, key=lambda c: ORDER.index(c.name) if c.name in ORDER else 99):
        mark = {True: "PASS", False: "FAIL", None: "----"}[c.ok]
        lines.append(f"{mark}  {c.name}: {c.seen} (expected: {c.expected})")
    if report.error:
        lines.append(f"stopped: {report.error}")
    lines.append("all checks passed" if not report.failed and not report.error
                 else f"failed: {', '.join(report.failed) or 'the sequence'}")
    return "\n".join(lines)


def write_report(report: Report, path: Path) -> Path:
    path.write_text(json.dumps(report.to_json(), indent=1), encoding="utf-8")
    return path
