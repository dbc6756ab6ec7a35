"""The fastest race the simulator allows with a learner's action set and decision period
(``rulka sim optimal``): seed races from scripted drivers, improved by beam searches over the
deterministic physics.

**Seeds.** The scripted driver's race (``rulka sim drive``), and races of the same pure-pursuit
driver steering for a *racing line* (:func:`racing_line`: the least-curvature line within the road,
outside-apex-outside through corners) at that line's speed plan, over a fixed grid and a seeded
random draw of its knobs (line margin, grip and braking fractions). On the default track the
scripted driver races 22.84 s and the best line driver 19.60 s.

**Beam search.** From the start line, one decision at a time: every state of the beam is stepped
with every action of the action set; the children are binned by where the car is along the
centreline, how far off it, its heading against the track and its speed, one (the best) per bin,
and the ``width`` best by a progress key go on. The key is the distance along the centreline plus
``lookahead`` seconds of the car's speed, where speed beyond the racing line's speed plan (at more
grip than the seeds use) counts against it and, with ``line_penalty``, so does distance from the
racing line. The first decision at which a child crosses the finish line ends the search: no state
still racing can finish earlier, and among the children that finished there the earliest 10 ms tick
wins. The seed's state at each decision always stays in the beam, so the search can leave the
seed's race at any decision and is never slower than it.

**How hard it searched.** :func:`solve` runs one beam search per key of :data:`KEYS` at ``width``,
each seeded with the best race so far, then (``doubling``) the same chain at twice the width. Its
report gives both times, the nodes expanded and the seconds: when doubling the search still
improves the time, the time is an upper bound that more search would lower, not the limit.

The result is an action tape (:class:`Tape`, JSON) whose replay in the simulator (the physics, or
``SimTrackEnv`` with the same decision period) reproduces the race time exactly. A step of the
physics is pure Python (about 45 us for a 50 ms decision on one core); a node costs about 1.35
steps (the state copy is a flat tuple, see :func:`save_state`).
"""

from __future__ import annotations

import heapq
import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from rulka.envs.actions import ACTION_NAMES, N_ACTIONS
from rulka.envs.sim.driver import MAX_PLANNED_SPEED
from rulka.envs.sim.env import _DISCRETE_CONTROLS
from rulka.envs.sim.physics import BRAKE_DECEL, GRIP, MS_PER_STEP, CarPhysics, Controls
from rulka.envs.sim.tracks import SAMPLE_STEP, Track, get_track
from rulka.errors import UserError

TAPE_FORMAT = "rulka-sim-tape/1"

# the attributes that make up a car's state (CarPhysics.reset sets every one of them)
_FIELDS = ("x", "z", "heading", "vx", "vz", "yaw_rate", "steer", "gear", "rpm", "shift_timer", "turbo_timer",
           "slip", "sliding", "race_time_ms", "finished", "finish_time_ms", "wall_hits")

# physics controls (steer positive = left) of the discrete actions: the ones the env applies
CONTROLS: tuple[Controls, ...] = tuple(_DISCRETE_CONTROLS)


def save_state(car: CarPhysics) -> tuple[Any, ...]:
    """The car's state as a flat tuple (cheap to keep, cheap to put back)."""
    d = car.__dict__
    return (*[d[k] for k in _FIELDS], *car.wheel_codes)


def load_state(car: CarPhysics, state: tuple[Any, ...]) -> None:
    """Put a state from :func:`save_state` back into ``car``."""
    n = len(_FIELDS)
    car.__dict__.update(zip(_FIELDS, state[:n]))
    car.wheel_codes[:] = state[n:]


@dataclass
class Tape:
    """A race as the actions taken, one per decision of ``ms_per_action``."""

    track: str
    actions: list[int]
    ms_per_action: int
    race_time_ms: int | None  # None: the tape does not finish
    action_set: list[str] = field(default_factory=lambda: list(ACTION_NAMES))
    source: str = ""
    search: dict[str, Any] = field(default_factory=dict)
    format: str = TAPE_FORMAT

    @property
    def steps_per_action(self) -> int:
        return self.ms_per_action // MS_PER_STEP

    def to_json(self) -> str:
        data = asdict(self)
        actions = data.pop("actions")
        text = json.dumps(data, indent=1)
        # the actions on one line: a tape of a few hundred decisions stays readable
        return text[:-2] + ',\n "actions": ' + json.dumps(actions) + "\n}\n"

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(self.to_json(), encoding="utf-8")
        return p

    @classmethod
    def read(cls, path: str | Path) -> Tape:
        """A tape from its JSON file; a bad file is a one-line UserError."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot read tape '{path}': {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != TAPE_FORMAT:
            raise UserError(f"'{path}' is not a rulka simulator tape (format {TAPE_FORMAT})")
        try:
            tape = cls(track=str(data["track"]), actions=[int(a) for a in data["actions"]],
                       ms_per_action=int(data["ms_per_action"]),
                       race_time_ms=None if data.get("race_time_ms") is None else int(data["race_time_ms"]),
                       action_set=[str(a) for a in data.get("action_set", ACTION_NAMES)],
                       source=str(data.get("source", "")), search=dict(data.get("search") or {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"tape '{path}' is missing or has a bad field: {exc}") from exc
        if tape.ms_per_action < MS_PER_STEP or tape.ms_per_action % MS_PER_STEP:
            raise UserError(f"tape '{path}': ms_per_action must be a multiple of {MS_PER_STEP}, "
                            f"got {tape.ms_per_action}")
        if tape.action_set != list(ACTION_NAMES):
            raise UserError(f"tape '{path}': unknown action set {tape.action_set}")
        if any(not 0 <= a < N_ACTIONS for a in tape.actions):
            raise UserError(f"tape '{path}': an action outside 0..{N_ACTIONS - 1}")
        return tape


def replay(track: Track, actions: Sequence[int], steps_per_action: int) -> CarPhysics:
    """The car after driving ``actions`` from the start line (it stops at the finish)."""
    car = CarPhysics(track)
    for a in actions:
        if car.finished:
            break
        car.step(CONTROLS[a], steps_per_action)
    return car


def scripted_tape(track: Track, steps_per_action: int, max_race_time_ms: int = 180_000) -> list[int]:
    """The scripted driver's race as discrete actions (the race ``rulka sim drive`` runs)."""
    from rulka.envs.sim.driver import ScriptedDriver

    car = CarPhysics(track)
    driver = ScriptedDriver(track)
    out: list[int] = []
    while not car.finished and car.race_time_ms < max_race_time_ms:
        a = driver.action(car)
        out.append(a)
        car.step(CONTROLS[a], steps_per_action)
    return out


class _Progress:
    """Where a point is along the track: the nearest centreline sample, found by walking from a
    nearby one (the course may pass near itself; a car moves a few samples per decision)."""

    def __init__(self, track: Track) -> None:
        pts = track.centerline[:, [0, 2]]
        self.xs = pts[:, 0].tolist()
        self.zs = pts[:, 1].tolist()
        d = np.diff(pts, axis=0, append=pts[-1:] + (pts[-1:] - pts[-2:-1]))
        norm = np.linalg.norm(d, axis=1)
        self.tx = (d[:, 0] / norm).tolist()
        self.tz = (d[:, 1] / norm).tolist()
        self.heading = np.arctan2(d[:, 0], d[:, 1]).tolist()
        self.n = len(pts)
        self.start = track.start_index

    def locate(self, x: float, z: float, i: int) -> tuple[int, float, float]:
        """(sample, metres from the start line along the centreline, metres to the left)."""
        xs, zs, last = self.xs, self.zs, self.n - 1
        best = (x - xs[i]) ** 2 + (z - zs[i]) ** 2
        while i < last:
            d = (x - xs[i + 1]) ** 2 + (z - zs[i + 1]) ** 2
            if d > best:
                break
            best, i = d, i + 1
        while i > 0:
            d = (x - xs[i - 1]) ** 2 + (z - zs[i - 1]) ** 2
            if d >= best:
                break
            best, i = d, i - 1
        dx, dz = x - xs[i], z - zs[i]
        tx, tz = self.tx[i], self.tz[i]
        along = (i - self.start) * SAMPLE_STEP + dx * tx + dz * tz
        return i, along, dx * tz - dz * tx  # left of the direction (tx, tz) is (tz, -tx)


@lru_cache(maxsize=32)
def racing_line(track: Track, margin: float = 1.0, sweeps: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """A smooth line through the track: (points (N, 2) x/z, lateral offsets (N,) left of the
    centreline), one per centreline sample, within the road less ``margin`` metres on each side.

    It relaxes the offsets towards the least curvature (each point to the biharmonic average of its
    neighbours, coarse spacing first), clipped to the road: the outside-apex-outside line a
    driver takes through a corner, far straighter than the centreline."""
    pts = track.centerline[:, [0, 2]].astype(np.float64)
    d = np.gradient(pts, axis=0)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    left = np.stack([d[:, 1], -d[:, 0]], axis=1)  # left of heading h is (cos h, -sin h)
    bound = np.maximum(track.widths / 2 - margin, 0.0)
    bound[: track.start_index + 1] = 0.0  # the race starts on the centreline
    off = np.zeros(len(pts))
    for k in (64, 32, 16, 8, 4, 2, 1):
        if len(pts) <= 4 * k:
            continue
        for _ in range(sweeps):
            p = pts + left * off[:, None]
            avg = (-p[: -4 * k] + 4 * p[k : -3 * k] + 4 * p[3 * k : -k] - p[4 * k :]) / 6.0
            off[2 * k : -2 * k] += 0.5 * ((avg - p[2 * k : -2 * k]) * left[2 * k : -2 * k]).sum(1)
            np.clip(off, -bound, bound, out=off)
    line = pts + left * off[:, None]
    line.setflags(write=False)
    off.setflags(write=False)
    return line, off


def line_speed_plan(track: Track, line: np.ndarray, grip_fraction: float, brake_fraction: float) -> np.ndarray:
    """Target speed at each point of ``line`` (as ``rulka.envs.sim.driver.speed_plan`` on the
    centreline): the cornering speed the surface's grip allows on the line's curvature, braked
    for every corner ahead."""
    d = np.gradient(line, axis=0)
    seg = np.linalg.norm(d, axis=1)
    heading = np.unwrap(np.arctan2(d[:, 0], d[:, 1]))
    k = 6  # curvature over +-3 m, as the driver's plan
    curv = np.zeros(len(line))
    if len(line) > 2 * k:
        span = np.convolve(seg, np.ones(2 * k), "same")[k:-k]
        curv[k:-k] = np.abs(heading[2 * k :] - heading[: -2 * k]) / np.maximum(span, 1e-6)
    grip = np.array([GRIP[track.cell(x, z)] for x, z in line])
    v = np.minimum(np.sqrt(grip_fraction * grip / np.maximum(curv, 1e-6)), MAX_PLANNED_SPEED)
    decel = brake_fraction * np.minimum(grip, BRAKE_DECEL)
    for i in range(len(v) - 2, -1, -1):
        v[i] = min(v[i], math.sqrt(v[i + 1] ** 2 + 2 * decel[i] * seg[i]))
    return v


@dataclass(frozen=True)
class LineDriverKnobs:
    """A line driver: the racing line ``margin`` metres inside the road edges, its speed plan at
    ``grip`` and ``brake`` fractions of the surface's grip."""

    margin: float = 1.0
    grip: float = 1.0
    brake: float = 0.7


def line_driver_tape(track: Track, steps_per_action: int, knobs: LineDriverKnobs,
                     max_race_time_ms: int = 180_000) -> list[int]:
    """The scripted driver steering for :func:`racing_line` at its speed plan, as discrete actions
    (a seed for the search; it may crash or stall, the search replays it to see)."""
    from rulka.envs.sim.driver import DriverConfig, ScriptedDriver

    cfg = DriverConfig(grip_fraction=knobs.grip, brake_fraction=knobs.brake)
    driver = ScriptedDriver(track, cfg)
    line, _ = racing_line(track, knobs.margin)
    driver._xz = line  # pure pursuit of the racing line instead of the centreline
    driver.plan = line_speed_plan(track, line, knobs.grip, knobs.brake)
    car = CarPhysics(track)
    out: list[int] = []
    last_progress, stalled_since = -1.0, 0
    while not car.finished and car.race_time_ms < max_race_time_ms:
        a = driver.action(car)
        out.append(a)
        car.step(CONTROLS[a], steps_per_action)
        if driver.index > last_progress:
            last_progress, stalled_since = driver.index, car.race_time_ms
        elif car.race_time_ms - stalled_since > 3000:  # stuck against a wall: give up
            break
    return out


@dataclass
class SearchResult:
    actions: list[int]
    race_time_ms: int | None
    width: int
    depth: int
    nodes_expanded: int
    seconds: float


@dataclass
class SearchSettings:
    """Knobs of the beam search (defaults picked from a few trials at width 8 on default and hairpins)."""

    width: int = 8
    lookahead: float = 0.5  # seconds of speed added to the progress key
    envelope_margin: float = 1.0  # the racing line whose speed plan is the key's envelope
    envelope_grip: float = 1.4  # grip fraction of the envelope
    envelope_brake: float = 0.9  # braking fraction of the envelope
    over_penalty: float = 2.0  # key lost per m/s above the envelope, in seconds of speed
    line_penalty: float = 0.5  # key lost per metre off the racing line
    bin_along: float = 1.0  # bin sizes: metres along, metres across, radians of heading, m/s
    bin_lateral: float = 1.0
    bin_heading: float = 0.1
    bin_speed: float = 2.0
    max_race_time_ms: int = 180_000


def beam_search(track: Track, steps_per_action: int, settings: SearchSettings,
                seed: Sequence[int] = (), actions: Sequence[int] = tuple(range(N_ACTIONS))) -> SearchResult:
    """One beam search (see the module docstring). ``seed``: a tape whose states stay in the beam."""
    t0 = time.perf_counter()
    car = CarPhysics(track)
    prog = _Progress(track)
    line, offsets = racing_line(track, settings.envelope_margin)
    env = line_speed_plan(track, line, settings.envelope_grip, settings.envelope_brake).tolist()
    off = offsets.tolist()
    lat_pen = settings.line_penalty
    look, pen = settings.lookahead, settings.over_penalty
    ba, bl, bh, bs = 1.0 / settings.bin_along, 1.0 / settings.bin_lateral, 1.0 / settings.bin_heading, \
        1.0 / settings.bin_speed
    controls = [CONTROLS[a] for a in actions]
    step, save, load, locate = car.step, save_state, load_state, prog.locate
    two_pi, pi = 2.0 * math.pi, math.pi
    heading_of = prog.heading
    # a node: (state, centreline sample, parent node, action); the tape is the chain of parents
    root = (save_state(car), track.start_index, None, -1)
    beam = [root]
    seed_node = root
    depth = 0
    expanded = 0
    max_depth = settings.max_race_time_ms // (MS_PER_STEP * steps_per_action)
    best_finish: tuple[int, Any] | None = None
    while beam and depth < max_depth:
        depth += 1
        bins: dict[tuple[int, int, int, int], tuple[float, Any]] = {}
        for node in beam:
            state, idx = node[0], node[1]
            for a, ctl in zip(actions, controls):
                load(car, state)
                step(ctl, steps_per_action)
                expanded += 1
                if car.finished:
                    ft = car.finish_time_ms
                    if best_finish is None or ft < best_finish[0]:
                        best_finish = (ft, (None, idx, node, a))
                    continue
                x, z = car.x, car.z
                i, along, lat = locate(x, z, idx)
                vx, vz = car.vx, car.vz
                v = math.sqrt(vx * vx + vz * vz)
                over = v - env[i]
                key = along + look * (v if over <= 0.0 else v - pen * over) - lat_pen * abs(lat - off[i])
                dh = (car.heading - heading_of[i] + pi) % two_pi - pi
                b = (int(along * ba), int(lat * bl + 1000.0), int(dh * bh + 1000.0), int(v * bs))
                held = bins.get(b)
                if held is None or key > held[0]:
                    bins[b] = (key, (save(car), i, node, a))
        if best_finish is not None:
            break
        # the seed's state at this depth stays in the beam, whatever its key
        keep = heapq.nlargest(settings.width, bins.values(), key=lambda kv: kv[0])
        nodes = [n for _, n in keep]
        if depth <= len(seed) and seed_node is not None:
            a = seed[depth - 1]
            load(car, seed_node[0])
            step(CONTROLS[a], steps_per_action)
            expanded += 1
            if car.finished:  # the seed finished where the beam did not (it never should)
                best_finish = (car.finish_time_ms, (None, seed_node[1], seed_node, a))
                break
            i, _, _ = locate(car.x, car.z, seed_node[1])
            seed_node = (save(car), i, seed_node, a)
            nodes.append(seed_node)
        else:
            seed_node = None
        beam = nodes
    tape: list[int] = []
    finish = None
    if best_finish is not None:
        finish = int(best_finish[0])
        node: Any = best_finish[1]
        while node is not None and node[3] >= 0:
            tape.append(int(node[3]))
            node = node[2]
        tape.reverse()
    return SearchResult(actions=tape, race_time_ms=finish, width=settings.width, depth=depth,
                        nodes_expanded=expanded, seconds=time.perf_counter() - t0)


# the keys ``solve`` searches with, one pass each at every width: one that holds the car near the
# racing line and one that leaves it free (neither was best on every bundled track)
KEYS: tuple[dict[str, float], ...] = (
    {"line_penalty": 0.5, "envelope_grip": 1.4, "envelope_brake": 0.9},
    {"line_penalty": 0.0, "envelope_grip": 1.2, "envelope_brake": 0.8},
)


def seed_tapes(track: Track, steps_per_action: int, n_random: int = 16, seed: int = 0,
               max_race_time_ms: int = 180_000) -> list[tuple[str, list[int]]]:
    """Candidate seeds: the scripted driver's race, then line drivers (:func:`line_driver_tape`)
    over a fixed grid and ``n_random`` knob sets drawn from ``seed``."""
    out = [("scripted driver", scripted_tape(track, steps_per_action, max_race_time_ms))]
    knobs = [LineDriverKnobs(m, g, b) for m in (1.0, 2.0) for g, b in ((0.8, 0.55), (0.9, 0.6), (1.0, 0.7))]
    rng = np.random.default_rng(seed)
    # margins from a few values: each margin is one racing line to compute (cached)
    knobs += [LineDriverKnobs(float(rng.choice([0.5, 1.0, 1.5, 2.0])), round(float(rng.uniform(0.75, 1.15)), 3),
                              round(float(rng.uniform(0.5, 0.85)), 3)) for _ in range(n_random)]
    for k in knobs:
        out.append((f"line driver margin {k.margin} grip {k.grip} brake {k.brake}",
                    line_driver_tape(track, steps_per_action, k, max_race_time_ms)))
    return out


@dataclass
class Solution:
    """What :func:`solve` found, and how hard it searched."""

    tape: Tape
    seed_source: str
    seed_time_ms: int | None
    scripted_time_ms: int | None
    passes: list[dict[str, Any]]


def _finish_time(track: Track, actions: Sequence[int], steps_per_action: int) -> int | None:
    car = replay(track, actions, steps_per_action)
    return car.finish_time_ms if car.finished else None


def expand_tape(tape: Tape, ms_per_action: int) -> list[int]:
    """``tape``'s actions at a decision period that divides its own: each action held for as many
    decisions as fit in one of the tape's (the same race: the physics steps the same ticks)."""
    if tape.ms_per_action % ms_per_action:
        raise UserError(f"a tape of {tape.ms_per_action} ms decisions cannot seed a search at {ms_per_action} ms "
                        "(its period must be a multiple of the search's)")
    k = tape.ms_per_action // ms_per_action
    return [a for a in tape.actions for _ in range(k)]


def solve(track_name: str, steps_per_action: int = 5, width: int = 8, doubling: bool = True,
          n_random_seeds: int = 16, max_race_time_ms: int = 180_000,
          log: Any = None, seed_from: Sequence[Tape] = ()) -> Solution:
    """The fastest race found on ``track_name`` (bundled, ``gen:SEED`` or a .json path) with the
    12 discrete actions held ``steps_per_action`` ticks each.

    The best of the seeds (:func:`seed_tapes`) starts a chain of beam searches, one per key in
    :data:`KEYS`, at ``width``, each seeded with the best race so far; with ``doubling`` the chain
    runs again at twice the width. Each pass is reported (width, key, time, nodes, seconds); the
    time after the ``width`` chain and after the doubled one say whether more search still helped.
    ``seed_from``: more seed races, tapes at a multiple of the decision period (:func:`expand_tape`;
    a coarser search is cheaper and sometimes finds a faster race than a finer one).
    """
    if steps_per_action < 1:
        raise UserError(f"steps per action must be at least 1, got {steps_per_action}")
    if width < 1:
        raise UserError(f"--width must be at least 1, got {width}")
    track = get_track(track_name)
    t0 = time.perf_counter()
    seeds = seed_tapes(track, steps_per_action, n_random_seeds, max_race_time_ms=max_race_time_ms)
    seeds += [(f"tape at {t.ms_per_action} ms", expand_tape(t, MS_PER_STEP * steps_per_action)) for t in seed_from]
    timed = [(src, tape, _finish_time(track, tape, steps_per_action)) for src, tape in seeds]
    scripted_time = timed[0][2]
    finished = [s for s in timed if s[2] is not None]
    passes: list[dict[str, Any]] = [{"pass": "seeds", "tapes": len(seeds), "finished": len(finished),
                                     "race_time_ms": min((s[2] for s in finished), default=None),
                                     "seconds": round(time.perf_counter() - t0, 2)}]
    if log:
        log(f"{track.name}: {len(finished)} of {len(seeds)} seed races finish, best "
            f"{passes[0]['race_time_ms']} ms ({passes[0]['seconds']} s)")
    if finished:
        seed_src, best, best_time = min(finished, key=lambda s: (s[2], s[0] != "scripted driver"))
    else:  # nothing finishes: search from scratch, the seed only steers the first depths
        seed_src, best, best_time = timed[0]
    seed_time = best_time
    widths = [width, 2 * width] if doubling else [width]
    for w in widths:
        for key in KEYS:
            settings = replace(SearchSettings(width=w, max_race_time_ms=max_race_time_ms), **key)
            r = beam_search(track, steps_per_action, settings, seed=best)
            improved = r.race_time_ms is not None and (best_time is None or r.race_time_ms < best_time)
            if improved:
                best, best_time = r.actions, r.race_time_ms
            passes.append({"pass": "beam", "width": w, "key": key, "race_time_ms": r.race_time_ms,
                           "best_ms": best_time, "depth": r.depth, "nodes_expanded": r.nodes_expanded,
                           "seconds": round(r.seconds, 2)})
            if log:
                log(f"{track.name}: beam width {w} {key}: {r.race_time_ms} ms, best {best_time} ms "
                    f"({r.nodes_expanded} nodes, {r.seconds:.1f} s)")
    by_width = {w: min((p["best_ms"] for p in passes if p.get("width") == w and p["best_ms"] is not None),
                       default=None) for w in widths}
    search = {"width": width, "doubled": doubling, "keys": [dict(k) for k in KEYS],
              "best_ms_by_width": {str(w): t for w, t in by_width.items()},
              "nodes_expanded": sum(p.get("nodes_expanded", 0) for p in passes),
              "seconds": round(time.perf_counter() - t0, 2),
              "improved_by_doubling_ms": (by_width[width] - by_width[2 * width]
                                          if doubling and by_width[width] is not None
                                          and by_width[2 * width] is not None else None)}
    final_time = _finish_time(track, best, steps_per_action)
    if final_time != best_time:  # the replay is the truth; a mismatch is a bug, not a result
        raise RuntimeError(f"{track.name}: the tape replays in {final_time} ms, the search said {best_time} ms")
    tape = Tape(track=track_name, actions=list(best), ms_per_action=MS_PER_STEP * steps_per_action,
                race_time_ms=best_time, source="rulka sim optimal", search=search)
    return Solution(tape=tape, seed_source=seed_src, seed_time_ms=seed_time, scripted_time_ms=scripted_time,
                    passes=passes)


# the solver's times shipped with rulka (written by bench/optimal.py): decision period (ms) -> track -> ms
SOLVER_TIMES_FILE = Path(__file__).with_name("optimal_times.json")
SOLVER_TIMES_FORMAT = "rulka-sim-optimal-times/1"


@lru_cache(maxsize=4)
def _read_solver_times(path: str) -> dict[str, dict[str, int]]:
    import logging

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.get("format") != SOLVER_TIMES_FORMAT:
            raise ValueError(f"format is not {SOLVER_TIMES_FORMAT}")
        return {str(ms): {str(t): int(v) for t, v in tracks.items()} for ms, tracks in data["times"].items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        logging.getLogger(__name__).warning("ignoring the solver times in %s: %s", path, exc)
        return {}


def solver_time_ms(track: str, ms_per_action: int, path: str | Path | None = None) -> int | None:
    """The solver's race time on ``track`` with decisions every ``ms_per_action`` ms, from the
    times rulka ships (``SOLVER_TIMES_FILE``); None when none is on record."""
    return _read_solver_times(str(path or SOLVER_TIMES_FILE)).get(str(int(ms_per_action)), {}).get(track)
