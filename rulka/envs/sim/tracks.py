"""Tracks of the built-in simulator: a centreline with widths, surface patches and walls,
rasterised into a material map for per-wheel lookups and for the camera.

A track is described in plain data (the bundled JSON files in ``rulka/envs/tracks/``, or the
output of :func:`generate_track`) as a list of pieces driven from the start line to the finish
line::

    {"name": "default", "width": 14, "runoff": 8,
     "pieces": [{"straight": 60}, {"turn": 90, "radius": 40}, ...],
     "patches": [{"from": 120, "to": 160, "surface": "dirt"}],
     "reference_time_ms": 23450}

``turn`` is in degrees, positive to the left. A piece may override ``width`` (road width, m) and
``runoff`` (grass between road edge and wall, m; 0 puts the wall at the road edge). Patches are
arc-length ranges measured from the start line, optionally limited to ``lateral: [l0, l1]``
(metres from the centreline, positive to the left). World axes: x and z span the ground, y is up;
heading 0 drives towards +z.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import cv2
import numpy as np

from rulka.errors import UserError

# Raster codes (uint8). Physics and camera map them through lookup tables.
WALL = 0
ROAD = 1
GRASS = 2
DIRT = 3
TURBO = 4
LINE = 5  # painted road edge: asphalt to the physics, bright to the camera
FINISH = 6  # finish line: asphalt, chequered to the camera
START = 7  # start line: asphalt, white to the camera

SURFACE_NAMES = {"road": ROAD, "asphalt": ROAD, "grass": GRASS, "dirt": DIRT, "turbo": TURBO, "wall": WALL}

CELL_SIZE = 0.25  # metres per raster cell
SAMPLE_STEP = 0.5  # metres between centreline samples
LEAD_IN = 12.0  # straight road behind the start line (m), closed by a wall
RUN_OUT = 60.0  # straight road after the finish line (m), closed by a wall
MARGIN = 20.0  # metres of wall around the track's bounding box


@dataclass(eq=False)
class Track:
    """A rasterised track. Arrays are read-only in spirit: the simulator never writes them."""

    name: str
    spec: dict[str, Any]
    centerline: np.ndarray  # (N, 3) float64 x, y=0, z; SAMPLE_STEP apart, lead-in to run-out
    widths: np.ndarray  # (N,) road width at each sample
    start_index: int  # sample of the start line
    finish_index: int  # sample of the finish line
    materials: np.ndarray  # (H, W) uint8 raster codes; row = z, column = x
    look: np.ndarray  # (H, W) uint8 gray level the camera sees
    origin: tuple[float, float]  # world (x, z) of the raster's cell (0, 0) corner
    cell_size: float = CELL_SIZE
    description: str = ""
    reference_time_ms: int | None = None
    runoffs: np.ndarray | None = None  # (N,) verge width beyond the road edge at each sample (to the wall)
    _flat: bytes = field(default=b"", repr=False)
    _normals: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        # bytes indexing is several times faster than numpy scalar indexing in the physics loop
        self._flat = self.materials.tobytes()

    # --- geometry -------------------------------------------------------------------------
    @property
    def length(self) -> float:
        """Race length from the start line to the finish line along the centreline, metres."""
        return (self.finish_index - self.start_index) * SAMPLE_STEP

    @property
    def start_pose(self) -> tuple[float, float, float]:
        """(x, z, heading) of the car at the start line."""
        x, _, z = self.centerline[self.start_index]
        return float(x), float(z), self.heading_at(self.start_index)

    def heading_at(self, index: int) -> float:
        """Heading (radians, 0 = +z, positive turns left) of the centreline at sample ``index``."""
        i = min(max(index, 0), len(self.centerline) - 2)
        dx, _, dz = self.centerline[i + 1] - self.centerline[i]
        return math.atan2(dx, dz)

    @property
    def finish_line(self) -> tuple[float, float, float, float, float]:
        """(x, z, tx, tz, half_width): a point on the finish line, the race direction, and the gate's
        half width. The gate spans the verges up to the walls, as a TrackMania finish block spans its
        whole block: a car that crosses the line on the grass finishes too."""
        x, _, z = self.centerline[self.finish_index]
        h = self.heading_at(self.finish_index)
        return float(x), float(z), math.sin(h), math.cos(h), self.gate_half_width(self.finish_index)

    def gate_half_width(self, index: int) -> float:
        """Half width of a gate (finish or checkpoint) across the track at sample ``index``: the road
        plus its verge, wall to wall, as TrackMania's gate blocks span their whole block."""
        verge = float(self.runoffs[index]) if self.runoffs is not None else 0.0
        return float(self.widths[index]) / 2 + verge

    def race_line(self) -> np.ndarray:
        """Centreline points (N, 3) from the start line to the finish line, SAMPLE_STEP apart."""
        return self.centerline[self.start_index : self.finish_index + 1].copy()

    def reference_line(self, params: Any = None) -> Any:
        """The track's ``ReferenceLine`` (its centreline, start to finish) with the zone spacing,
        extrapolation and road width of ``params`` (a ``PipelineParams``; defaults if None)."""
        from rulka.envs.pipeline import PipelineParams, make_reference_line  # imported on demand

        return make_reference_line(self.race_line(), params if params is not None else PipelineParams())

    # --- raster lookups -------------------------------------------------------------------
    def cell(self, x: float, z: float) -> int:
        """Raster code under world point (x, z); outside the raster is WALL."""
        c = int((x - self.origin[0]) / self.cell_size)
        r = int((z - self.origin[1]) / self.cell_size)
        h, w = self.materials.shape
        if c < 0 or r < 0 or c >= w or r >= h:
            return WALL
        return self._flat[r * w + c]

    def wall_normal(self, x: float, z: float) -> tuple[float, float]:
        """Unit vector pointing from nearby walls into free space at (x, z) (called on impacts)."""
        key = (int((x - self.origin[0]) / self.cell_size), int((z - self.origin[1]) / self.cell_size))
        cached = self._normals.get(key)
        if cached is None:
            # walls never move: one probe per cell (a car pushing into a wall asks every tick)
            cs = self.cell_size
            cached = self._probe_normal(self.origin[0] + (key[0] + 0.5) * cs, self.origin[1] + (key[1] + 0.5) * cs)
            if len(self._normals) < 200_000:
                self._normals[key] = cached
        return cached

    def _probe_normal(self, x: float, z: float) -> tuple[float, float]:
        nx = nz = 0.0
        for dx, dz in _RING:
            if self.cell(x + dx, z + dz) != WALL:
                nx += dx
                nz += dz
        n = math.hypot(nx, nz)
        if n < 1e-9:
            return 0.0, 0.0
        return nx / n, nz / n

    def world_to_pixel(self, x: np.ndarray | float, z: np.ndarray | float) -> tuple[Any, Any]:
        """Raster (column, row) coordinates of world points (floats)."""
        return (np.asarray(x) - self.origin[0]) / self.cell_size, (np.asarray(z) - self.origin[1]) / self.cell_size


# probe points for wall normals: 16 directions at 0.6 m and 1.2 m
_RING = [(r * math.cos(a * math.pi / 8), r * math.sin(a * math.pi / 8)) for r in (0.6, 1.2) for a in range(16)]


# --- building ---------------------------------------------------------------------------------
def _piece_points(spec: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """Sample the centreline of ``spec``: points (N, 2), widths, runoffs, start and finish index."""
    base_width = float(spec.get("width", 14.0))
    base_runoff = float(spec.get("runoff", 8.0))
    pieces = [{"straight": LEAD_IN}, *spec["pieces"], {"straight": RUN_OUT}]
    xs: list[float] = [0.0]
    zs: list[float] = [0.0]
    widths: list[float] = []
    runoffs: list[float] = []
    heading = math.radians(float(spec.get("heading", 0.0)))
    x = z = 0.0
    carry = 0.0  # arc length already covered towards the next sample
    boundaries: list[int] = []
    for piece in pieces:
        w = float(piece.get("width", base_width))
        ro = float(piece.get("runoff", base_runoff))
        if "straight" in piece:
            length, curvature = float(piece["straight"]), 0.0
        elif "turn" in piece:
            radius = float(piece["radius"])
            if radius <= 0:
                raise UserError(f"track '{spec.get('name')}': turn radius must be > 0, got {radius}")
            length = abs(math.radians(float(piece["turn"]))) * radius
            curvature = math.copysign(1.0 / radius, float(piece["turn"]))
        else:
            raise UserError(f"track '{spec.get('name')}': piece {piece} needs 'straight' or 'turn'")
        if length <= 0:
            raise UserError(f"track '{spec.get('name')}': piece {piece} has no length")
        if not widths:
            widths.append(w)
            runoffs.append(ro)
        s = SAMPLE_STEP - carry
        while s <= length + 1e-9:
            if curvature == 0.0:
                px, pz, ph = x + s * math.sin(heading), z + s * math.cos(heading), heading
            else:
                ph = heading + curvature * s
                # arc of signed curvature k: integral of (sin h, cos h) ds
                px = x + (math.cos(heading) - math.cos(ph)) / curvature
                pz = z + (math.sin(ph) - math.sin(heading)) / curvature
            xs.append(px)
            zs.append(pz)
            widths.append(w)
            runoffs.append(ro)
            s += SAMPLE_STEP
        carry = length - (s - SAMPLE_STEP)
        # advance the exact piece end
        if curvature == 0.0:
            x, z = x + length * math.sin(heading), z + length * math.cos(heading)
        else:
            nh = heading + curvature * length
            x = x + (math.cos(heading) - math.cos(nh)) / curvature
            z = z + (math.sin(nh) - math.sin(heading)) / curvature
            heading = nh
        boundaries.append(len(xs) - 1)
    start_index = int(round(LEAD_IN / SAMPLE_STEP))
    finish_index = boundaries[-2]  # end of the last real piece
    pts = np.stack([np.asarray(xs), np.asarray(zs)], axis=1)
    return pts, np.asarray(widths), np.asarray(runoffs), start_index, finish_index


def _check_no_overlap(name: str, pts: np.ndarray, widths: np.ndarray, runoffs: np.ndarray) -> None:
    """Raise if two parts of the course that are far apart along it come too close in space."""
    step = 4  # every 2 m is enough for this check
    sub = pts[::step]
    reach = (widths[::step] / 2 + np.maximum(runoffs[::step], 1.0))
    d = np.sqrt(((sub[:, None, :] - sub[None, :, :]) ** 2).sum(-1))
    idx = np.arange(len(sub))
    along = np.abs(idx[:, None] - idx[None, :]) * step * SAMPLE_STEP
    need = reach[:, None] + reach[None, :]
    bad = (d < need) & (along > 1.6 * need + 10)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise UserError(
            f"track '{name}': the course overlaps itself near ({sub[i, 0]:.0f}, {sub[i, 1]:.0f}) m "
            f"(samples {i * step} and {j * step}); lengthen a straight or change a turn"
        )


def _offset(pts: np.ndarray, lateral: np.ndarray | float) -> np.ndarray:
    """Points shifted ``lateral`` metres to the left of the direction of travel."""
    d = np.gradient(pts, axis=0)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    left = np.stack([d[:, 1], -d[:, 0]], axis=1)  # left of heading h is (cos h, -sin h)
    return pts + left * np.asarray(lateral, dtype=np.float64).reshape(-1, 1)


def _line_quad(pts: np.ndarray, idx: int, half: float) -> np.ndarray:
    """The corners of a line 1 m deep across the track at sample ``idx``, ``half`` to each side."""
    seg = pts[idx - 1 : idx + 2]
    left, right = _offset(seg, half), _offset(seg, -half)
    return np.array([right[0], left[0], left[2], right[2]])


def build_track(spec: dict[str, Any], cell_size: float = CELL_SIZE) -> Track:
    """Turn a track description (see module docstring) into a rasterised :class:`Track`."""
    name = str(spec.get("name", "unnamed"))
    if not spec.get("pieces"):
        raise UserError(f"track '{name}' has no pieces")
    pts, widths, runoffs, start_index, finish_index = _piece_points(spec)
    _check_no_overlap(name, pts, widths, runoffs)
    reach = float((widths / 2 + runoffs).max())
    lo = pts.min(axis=0) - reach - MARGIN
    hi = pts.max(axis=0) + reach + MARGIN
    cols, rows = (np.ceil((hi - lo) / cell_size)).astype(int)
    mat = np.full((rows, cols), WALL, dtype=np.uint8)
    shift = 4  # cv2 sub-pixel bits
    scale = (1 << shift) / cell_size

    def fix(p: np.ndarray) -> np.ndarray:
        return np.round((p - lo) * scale).astype(np.int32)

    pix = fix(pts)
    # run-off (grass) then road: a union of discs along the centreline
    for (cx, cz), w, ro in zip(pix, widths, runoffs):
        cv2.circle(mat, (int(cx), int(cz)), int((w / 2 + ro) * scale), GRASS, -1, cv2.LINE_8, shift)
    for (cx, cz), w in zip(pix, widths):
        cv2.circle(mat, (int(cx), int(cz)), int(w / 2 * scale), ROAD, -1, cv2.LINE_8, shift)
    # close the lead-in and the run-out with walls across the track
    for i, sign in ((0, -1.0), (len(pts) - 1, 1.0)):
        h = math.atan2(pts[min(i + 1, len(pts) - 1), 0] - pts[max(i - 1, 0), 0],
                       pts[min(i + 1, len(pts) - 1), 1] - pts[max(i - 1, 0), 1])
        f = np.array([math.sin(h), math.cos(h)]) * sign
        left = np.array([math.cos(h), -math.sin(h)])
        r = widths[i] / 2 + runoffs[i] + 2
        c = pts[i]
        quad = np.array([c - left * r, c + left * r, c + left * r + f * (r + 5), c - left * r + f * (r + 5)])
        cv2.fillConvexPoly(mat, fix(quad), WALL, cv2.LINE_8, shift)
    # surface patches, on top of the road
    race = slice(start_index, len(pts))
    race_pts = pts[race]
    for patch in spec.get("patches", []):
        surface = SURFACE_NAMES.get(str(patch.get("surface")))
        if surface is None:
            raise UserError(f"track '{name}': unknown surface {patch.get('surface')!r} "
                            f"(known: {', '.join(sorted(SURFACE_NAMES))})")
        a = int(round(float(patch["from"]) / SAMPLE_STEP))
        b = int(round(float(patch["to"]) / SAMPLE_STEP))
        a, b = max(a, 0), min(b, len(race_pts) - 1)
        if b <= a:
            continue
        w = widths[race][a : b + 1]
        lat = patch.get("lateral")
        l0 = np.full(b - a + 1, float(lat[0])) if lat else -w / 2
        l1 = np.full(b - a + 1, float(lat[1])) if lat else w / 2
        seg = race_pts[a : b + 1]
        left_edge, right_edge = _offset(seg, l1), _offset(seg, l0)
        for k in range(b - a):
            quad = np.array([right_edge[k], left_edge[k], left_edge[k + 1], right_edge[k + 1]])
            cv2.fillConvexPoly(mat, fix(quad), surface, cv2.LINE_8, shift)
    # painted edges (asphalt to the physics) where the road is still road
    paint = np.zeros_like(mat)
    for side in (1.0, -1.0):
        edge = _offset(pts, side * (widths / 2 - 0.35))
        cv2.polylines(paint, [fix(edge)], False, 1, max(1, int(round(0.3 / cell_size))), cv2.LINE_8, shift)
    mat[(paint == 1) & (mat == ROAD)] = LINE
    # start and finish lines across the road
    for idx, code in ((start_index, START), (finish_index, FINISH)):
        cv2.fillConvexPoly(mat, fix(_line_quad(pts, idx, widths[idx] / 2)), code, cv2.LINE_8, shift)
    # the finish gate spans the verges: the camera sees the chequer across the grass too
    gate = np.zeros_like(mat)
    gate_half = float(widths[finish_index] / 2 + runoffs[finish_index])
    cv2.fillConvexPoly(gate, fix(_line_quad(pts, finish_index, gate_half)), 1, cv2.LINE_8, shift)
    look = _paint_look(mat, cell_size, finish_verge=(gate == 1) & (mat == GRASS))
    # dashed centre line (look only: the physics sees asphalt), 4 m dash every 10 m
    dash = np.zeros_like(mat)
    per = int(round(10.0 / SAMPLE_STEP))
    on = int(round(4.0 / SAMPLE_STEP))
    for k in range(0, len(pix) - on, per):
        cv2.polylines(dash, [pix[k : k + on + 1]], False, 1, max(1, int(round(0.3 / cell_size))), cv2.LINE_8, shift)
    look[(dash == 1) & (mat == ROAD)] = 175
    centerline = np.stack([pts[:, 0], np.zeros(len(pts)), pts[:, 1]], axis=1)
    ref = spec.get("reference_time_ms")
    return Track(
        name=name,
        spec=spec,
        centerline=centerline,
        widths=widths,
        start_index=start_index,
        finish_index=finish_index,
        materials=mat,
        look=look,
        origin=(float(lo[0]), float(lo[1])),
        cell_size=cell_size,
        description=str(spec.get("description", "")),
        reference_time_ms=int(ref) if ref is not None else None,
        runoffs=np.asarray(runoffs, dtype=np.float64),
    )


# camera gray levels per raster code; textures below make motion visible
_LOOK = np.array([30, 105, 70, 150, 235, 200, 255, 220], dtype=np.uint8)


def _paint_look(mat: np.ndarray, cell_size: float, finish_verge: np.ndarray | None = None) -> np.ndarray:
    """Camera gray levels of the raster; ``finish_verge`` marks grass cells the finish gate spans
    (chequered like the finish line itself)."""
    look = _LOOK[mat]
    rows, cols = np.indices(mat.shape)
    # chequered finish line, 1 m squares
    sq = int(round(1.0 / cell_size))
    check = ((rows // sq + cols // sq) % 2).astype(bool)
    look[(mat == FINISH) & check] = 0
    # stripes on turbo pads and mottled grass/dirt, so speed is visible in the image
    stripes = ((rows + cols) // sq % 2).astype(bool)
    look[(mat == TURBO) & stripes] = 190
    rng = np.random.default_rng(12345)  # fixed: the look is part of the track, not of a run
    blotch = cv2.resize(rng.integers(-14, 15, size=(max(mat.shape[0] // 8, 1), max(mat.shape[1] // 8, 1)),
                                     dtype=np.int16).astype(np.float32), (mat.shape[1], mat.shape[0]),
                        interpolation=cv2.INTER_NEAREST).astype(np.int16)
    rough = (mat == GRASS) | (mat == DIRT) | (mat == WALL)
    out = look.astype(np.int16)
    out[rough] += blotch[rough]
    road = mat == ROAD
    out[road] += blotch[road] // 3
    look = np.clip(out, 0, 255).astype(np.uint8)
    if finish_verge is not None:
        look[finish_verge] = np.where(check[finish_verge], 0, _LOOK[FINISH])
    return look


# --- bundled tracks and generator --------------------------------------------------------------
def bundled_track_names() -> list[str]:
    """Names of the tracks shipped in ``rulka/envs/tracks``, sorted."""
    folder = resources.files("rulka.envs") / "tracks"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def load_track_spec(name: str) -> dict[str, Any]:
    """The JSON description of a bundled track, or of a track file when ``name`` ends in .json."""
    if name.endswith(".json"):
        try:
            with open(name, encoding="utf-8") as fh:
                return dict(json.load(fh))
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot read track file '{name}': {exc}") from exc
    if name.startswith("gen:"):
        try:
            seed = int(name[4:])
        except ValueError as exc:
            raise UserError(f"generated track name must be 'gen:<seed>', got '{name}'") from exc
        return generate_track_spec(seed)
    known = bundled_track_names()
    if name not in known:
        raise UserError(f"unknown track '{name}' (bundled: {', '.join(known)}; or 'gen:<seed>' or a .json file)")
    path = resources.files("rulka.envs") / "tracks" / f"{name}.json"
    return dict(json.loads(path.read_text(encoding="utf-8")))


@lru_cache(maxsize=16)
def _cached(name: str) -> Track:
    return build_track(load_track_spec(name))


def get_track(name: str = "default") -> Track:
    """A track by name: bundled (``default``, ``hairpins``...), ``gen:<seed>`` or a path to a .json.

    Tracks are cached per process; treat the returned object as read-only."""
    if name.endswith(".json"):
        return build_track(load_track_spec(name))
    return _cached(name)


def generate_track_spec(seed: int, n_pieces: int = 9, width: float = 14.0, surfaces: bool = True) -> dict[str, Any]:
    """A random, non-overlapping track description from ``seed`` (same seed, same track)."""
    rng = np.random.default_rng(seed)
    for _attempt in range(200):
        pieces: list[dict[str, Any]] = [{"straight": float(rng.integers(30, 70))}]
        for k in range(n_pieces - 1):
            if k % 2 == 0:
                angle = float(rng.choice([-1, 1]) * rng.integers(30, 150))
                pieces.append({"turn": angle, "radius": float(rng.integers(18, 70))})
            else:
                pieces.append({"straight": float(rng.integers(20, 90))})
        spec: dict[str, Any] = {
            "name": f"gen:{seed}",
            "description": f"generated from seed {seed}",
            "width": width,
            "runoff": float(rng.integers(4, 12)),
            "pieces": pieces,
            "patches": [],
        }
        total = sum(p.get("straight", 0.0) or abs(math.radians(p.get("turn", 0.0))) * p.get("radius", 0.0)
                    for p in pieces)
        if surfaces:
            for _ in range(int(rng.integers(0, 3))):
                kind = str(rng.choice(["dirt", "turbo", "grass"]))
                a = float(rng.uniform(20, max(total - 60, 21)))
                length = 8.0 if kind == "turbo" else float(rng.uniform(15, 50))
                patch: dict[str, Any] = {"from": round(a, 1), "to": round(a + length, 1), "surface": kind}
                if kind == "grass":  # a grass bite on one side, never the whole road
                    side = float(rng.choice([-1, 1]))
                    patch["lateral"] = sorted([side * width / 2, side * width / 8])
                spec["patches"].append(patch)
        try:
            pts, widths, runoffs, _, _ = _piece_points(spec)
            _check_no_overlap(spec["name"], pts, widths, runoffs)
        except UserError:
            continue
        return spec
    raise UserError(f"could not generate a non-overlapping track from seed {seed}")


def generate_track(seed: int, **kwargs: Any) -> Track:
    """A random track from ``seed`` (see :func:`generate_track_spec` for the knobs)."""
    return build_track(generate_track_spec(seed, **kwargs))


def dump_track_spec(spec: dict[str, Any]) -> str:
    """JSON text of a track description, one piece or patch per line (as the bundled files)."""
    lines = ["{"]
    items = list(spec.items())
    for n, (key, value) in enumerate(items):
        comma = "," if n < len(items) - 1 else ""
        if isinstance(value, list):
            if not value:
                lines.append(f'  "{key}": []{comma}')
                continue
            lines.append(f'  "{key}": [')
            for k, item in enumerate(value):
                lines.append("    " + json.dumps(item) + ("," if k < len(value) - 1 else ""))
            lines.append(f"  ]{comma}")
        else:
            lines.append(f'  "{key}": {json.dumps(value)}{comma}')
    lines.append("}")
    return "\n".join(lines) + "\n"
