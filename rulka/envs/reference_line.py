"""The reference line: the centreline a track is measured along, cut into virtual checkpoints.

TrackMania reference lines come from a driven replay (positions every few ms); the built-in
simulator ships its own. Either way ``ReferenceLine`` resamples the line to equally spaced
*zone centres* (virtual checkpoints, about ``distance_between_checkpoints`` metres apart, the
first at the start and the last at the finish) and extends it with straight, extrapolated zone
centres before the start and after the finish, so that zone tracking still works while the car
waits behind the start line or coasts past the finish.

Indexing: ``zone_centers`` holds ``n_extrapolate_before`` extrapolated centres, then the track's
centres (``start_zone`` .. ``finish_zone``), then ``n_extrapolate_after`` extrapolated centres.
Zone ``i`` is the stretch of road closest to centre ``i``; its boundaries ("transitions") are
the midpoints with its neighbours. Progress ("metres advanced along the centreline") is measured
along the polyline of transitions, with 0 at the start centre and ``finish_progress`` at the
finish centre.

``project`` is local, like the game's own checkpoints: from the zone the car was in, it walks
forward (or back) while the next centre is at least as close and within reach, so a road that
passes near itself (a hairpin, a bridge) cannot make the car jump ahead.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from rulka.errors import UserError

FILE_FORMAT = "rulka.reference_line"
FILE_VERSION = 1


def resample_polyline(points: np.ndarray, spacing: float) -> np.ndarray:
    """Points at equal arc-length steps along ``points`` (N,3), first and last points kept.

    The step is the polyline length divided by ``max(1, round(length / spacing))``, so it is
    within half a step of ``spacing`` and the last point lands exactly on the finish.
    """
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise ValueError(f"reference line points must have shape (N, 3), got {pts.shape}")
    if not np.all(np.isfinite(pts)):
        raise ValueError("reference line points contain NaN or infinite values")
    if spacing <= 0:
        raise ValueError(f"distance between checkpoints must be > 0, got {spacing}")
    seg = np.linalg.norm(np.diff(pts, axis=0), axis=1)
    keep = np.concatenate([[True], seg > 1e-9])  # drop repeated positions (a car standing still)
    pts = pts[keep]
    if len(pts) < 2:
        raise ValueError("reference line needs at least two distinct points")
    cum = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(pts, axis=0), axis=1))])
    n_steps = max(1, int(round(cum[-1] / spacing)))
    targets = np.linspace(0.0, cum[-1], n_steps + 1)
    out = np.empty((n_steps + 1, 3))
    for k in range(3):
        out[:, k] = np.interp(targets, cum, pts[:, k])
    return out


class ReferenceLine:
    """A track's centreline as zone centres, with fast local projection of car positions.

    Args:
        points: (N,3) positions along the driven line, start first, finish last (metres, y up).
        distance_between_checkpoints: target spacing of the zone centres (config key
            ``environment.distance_between_checkpoints``).
        n_extrapolate_before: extrapolated centres before the start
            (``environment.n_zone_centers_extrapolate_before_start_of_map``).
        n_extrapolate_after: extrapolated centres after the finish
            (``environment.n_zone_centers_extrapolate_after_end_of_map``).
        road_width: the car may be up to about half of it from a centre and still enter its zone
            (``environment.road_width``).
        checkpoint_positions: optional (C,3) positions of the game's real checkpoints, in the
            order they are passed (``environment.sync_virtual_and_real_checkpoints``). Each is
            tied to the nearest zone centre within ``checkpoint_radius`` metres (searching on
            from the previous one, so laps work), and the car cannot move past that zone unless it
            is within ``checkpoint_radius`` of the real checkpoint: progress cannot run ahead of
            the game's own checkpoints through a shortcut.
        checkpoint_radius: see ``checkpoint_positions`` (metres).
    """

    def __init__(
        self,
        points: np.ndarray,
        distance_between_checkpoints: float = 0.5,
        n_extrapolate_before: int = 20,
        n_extrapolate_after: int = 1000,
        road_width: float = 90.0,
        checkpoint_positions: np.ndarray | None = None,
        checkpoint_radius: float = 12.0,
    ) -> None:
        if n_extrapolate_before < 1 or n_extrapolate_after < 1:
            raise ValueError(
                "need at least one extrapolated zone centre before the start and after the finish"
            )
        track = resample_polyline(points, distance_between_checkpoints)
        self.track_points: np.ndarray = track
        """(M,3) the track's own zone centres: start .. finish, equally spaced."""
        self.spacing = float(np.linalg.norm(track[1] - track[0]))
        """Actual distance between consecutive centres (close to distance_between_checkpoints)."""
        self.distance_between_checkpoints = float(distance_between_checkpoints)
        self.n_extrapolate_before = int(n_extrapolate_before)
        self.n_extrapolate_after = int(n_extrapolate_after)
        self.road_width = float(road_width)
        self.max_distance_to_zone_center = math.hypot(self.spacing / 2.0, self.road_width / 2.0)
        """A zone is entered only when its centre is within this distance (metres)."""

        first_dir = (track[1] - track[0]) / self.spacing
        last_dir = (track[-1] - track[-2]) / np.linalg.norm(track[-1] - track[-2])
        before = (
            track[0] - first_dir[None, :] * self.spacing * np.arange(n_extrapolate_before, 0, -1)[:, None]
        )
        after = track[-1] + last_dir[None, :] * self.spacing * np.arange(1, n_extrapolate_after + 1)[:, None]
        centers = np.vstack([before, track, after])
        centers.setflags(write=False)
        self.zone_centers: np.ndarray = centers
        """(K,3) all zone centres: extrapolated-before, track, extrapolated-after."""
        self.start_zone = self.n_extrapolate_before
        """Index of the start centre; the zone a car is in at the start of a race."""
        self.finish_zone = self.n_extrapolate_before + len(track) - 1
        """Index of the finish centre."""

        # Transition k separates zone k and zone k+1.
        transitions = 0.5 * (centers[:-1] + centers[1:])
        seg = np.diff(transitions, axis=0)
        seg_len = np.linalg.norm(seg, axis=1)
        self._transitions = transitions
        self._seg_dir = seg / np.maximum(seg_len, 1e-12)[:, None]
        self._seg_len = seg_len
        self._trans_cum = np.concatenate([[0.0], np.cumsum(seg_len)])
        # Plain Python copies for the per-step path (cheaper than numpy on 3-vectors).
        self._seg_py = [
            (*t, *d, float(n), float(c))
            for t, d, n, c in zip(
                transitions[:-1].tolist(),
                self._seg_dir.tolist(),
                seg_len.tolist(),
                self._trans_cum[:-1].tolist(),
            )
        ]
        self._max_zone = len(centers) - 2
        self._centers_list = [tuple(c) for c in centers.tolist()]
        self._zero = 0.0
        self._zero = self._progress_in_zone(centers[self.start_zone], self.start_zone)
        self.finish_progress = self._progress_in_zone(centers[self.finish_zone], self.finish_zone)
        """Progress (metres from the start) of the finish centre: the track length."""
        self.zone_progress = np.array(
            [self._progress_in_zone(centers[k], k) for k in range(1, len(centers) - 1)]
        )
        self.zone_progress = np.concatenate(
            [
                [self.zone_progress[0] - self.spacing],
                self.zone_progress,
                [self.zone_progress[-1] + self.spacing],
            ]
        )
        """(K,) progress of each zone centre (negative before the start)."""
        self.checkpoint_radius = float(checkpoint_radius)
        self.checkpoint_zones: np.ndarray = np.zeros(0, dtype=np.int64)
        """Zone tied to each real checkpoint (empty without checkpoint_positions)."""
        self._gates: dict[int, tuple[float, float, float]] = {}
        self.checkpoint_positions: np.ndarray | None = None
        """(C,3) the real checkpoints the zones are tied to, when given."""
        if checkpoint_positions is not None:
            self._tie_checkpoints(np.asarray(checkpoint_positions, dtype=np.float64))

    def _tie_checkpoints(self, cps: np.ndarray) -> None:
        if cps.ndim != 2 or cps.shape[1] != 3 or not np.all(np.isfinite(cps)):
            raise ValueError(f"checkpoint positions must be a finite (C, 3) array, got shape {cps.shape}")
        zones = []
        first = self.start_zone
        for k, cp in enumerate(cps):
            track = self.zone_centers[first : self.finish_zone + 1]
            d = np.linalg.norm(track - cp, axis=1)
            if len(d) == 0 or d.min() > self.checkpoint_radius:
                raise ValueError(
                    f"real checkpoint {k} at {np.round(cp, 2).tolist()} is more than "
                    f"{self.checkpoint_radius:g} m from the reference line after the previous checkpoint"
                )
            z = first + int(np.argmin(d))
            zones.append(z)
            self._gates[z] = (float(cp[0]), float(cp[1]), float(cp[2]))
            first = z + 1
        self.checkpoint_zones = np.asarray(zones, dtype=np.int64)
        self.checkpoint_positions = cps.copy()

    # ------------------------------------------------------------------ queries
    @property
    def n_zones(self) -> int:
        """Number of zone centres, extrapolated ones included."""
        return len(self.zone_centers)

    @property
    def length(self) -> float:
        """Track length from start to finish along the centreline, metres."""
        return self.finish_progress

    @property
    def max_zone(self) -> int:
        """The furthest zone a car can be in (the last extrapolated centre is never entered)."""
        return self.n_zones - 2

    def _progress_in_zone(self, position: np.ndarray, zone: int) -> float:
        tx, ty, tz, dx, dy, dz, length, cum = self._seg_py[zone - 1]
        along = (
            (float(position[0]) - tx) * dx + (float(position[1]) - ty) * dy + (float(position[2]) - tz) * dz
        )
        along = min(max(along, 0.0), length)
        return cum + along - self._zero

    def update_zone(self, position: np.ndarray, zone: int) -> int:
        """The zone the car at ``position`` is in, searched locally from ``zone`` (its last zone).

        Walks forward while the next centre is no farther than the current one and within
        ``max_distance_to_zone_center`` (and, at a zone tied to a real checkpoint, while the car
        is within ``checkpoint_radius`` of it); otherwise walks back under the same rule.
        """
        max_zone = self._max_zone
        z = min(max(int(zone), 1), max_zone)
        c = self._centers_list
        p = (float(position[0]), float(position[1]), float(position[2]))
        reach = self.max_distance_to_zone_center
        d_cur = math.dist(p, c[z])
        d_next = math.dist(p, c[z + 1])
        moved = False
        gates = self._gates
        while z < max_zone and d_next <= d_cur and d_next <= reach:
            if gates and z in gates and math.dist(p, gates[z]) > self.checkpoint_radius:
                break  # the game's checkpoint here has not been reached
            z += 1
            d_cur = d_next
            d_next = math.dist(p, c[z + 1])
            moved = True
        if not moved:
            d_prev = math.dist(p, c[z - 1])
            while z > 1 and d_prev < d_cur and d_prev <= reach:
                z -= 1
                d_cur = d_prev
                d_prev = math.dist(p, c[z - 1])
        return z

    def project(self, position: np.ndarray, hint_zone: int | None = None) -> tuple[int, float]:
        """``(zone_idx, meters_along)`` of a car at ``position``.

        ``hint_zone`` is the zone the car was in at the previous step (``start_zone`` when
        omitted); the search is local around it. ``meters_along`` is the progress from the start
        (negative behind the start line, above ``finish_progress`` past the finish).
        """
        zone = self.update_zone(position, self.start_zone if hint_zone is None else hint_zone)
        return zone, self._progress_in_zone(position, zone)

    def progress_in_zone(self, position: np.ndarray, zone: int) -> float:
        """Progress (metres from the start) of ``position`` measured within ``zone``."""
        return self._progress_in_zone(position, min(max(int(zone), 1), self._max_zone))

    def point_at(self, progress_m: float) -> np.ndarray:
        """Point of the centreline at ``progress_m`` metres from the start (extrapolated beyond)."""
        return np.array(
            [np.interp(progress_m, self.zone_progress, self.zone_centers[:, k]) for k in range(3)]
        )

    def tangent_at(self, progress_m: float) -> np.ndarray:
        """Unit direction of travel of the centreline at ``progress_m``."""
        k = int(
            np.clip(np.searchsorted(self.zone_progress, progress_m, side="right") - 1, 0, self.n_zones - 2)
        )
        d = self.zone_centers[k + 1] - self.zone_centers[k]
        return d / max(float(np.linalg.norm(d)), 1e-12)

    # ------------------------------------------------------------------ files
    def save(self, path: str | Path) -> None:
        """Write the track's centres to ``.json`` (rulka format, with the real checkpoints when
        there are some) or ``.npy`` (an (M,3) array, as Linesight stores reference lines)."""
        p = Path(path)
        if p.suffix == ".npy":
            np.save(p, self.track_points.astype(np.float64), allow_pickle=False)
            return
        doc = {
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "distance_between_checkpoints": self.distance_between_checkpoints,
            "points": self.track_points.round(6).tolist(),
        }
        if self.checkpoint_positions is not None:
            doc["checkpoints"] = self.checkpoint_positions.round(6).tolist()
        p.write_text(json.dumps(doc))

    @classmethod
    def load(
        cls,
        path: str | Path,
        distance_between_checkpoints: float = 0.5,
        n_extrapolate_before: int = 20,
        n_extrapolate_after: int = 1000,
        road_width: float = 90.0,
        use_checkpoints: bool = True,
    ) -> ReferenceLine:
        """Read a reference line from ``.json`` (rulka) or ``.npy`` (an (N,3) array, e.g. a
        Linesight ``*_0.5m_*.npy``); never unpickles. Raises ``UserError`` on a bad file.

        Real checkpoints stored in a ``.json`` file gate the zone tracking unless
        ``use_checkpoints`` is False (``environment.sync_virtual_and_real_checkpoints``).
        """
        points, checkpoints = read_reference_file(path)
        try:
            return cls(
                points,
                distance_between_checkpoints,
                n_extrapolate_before,
                n_extrapolate_after,
                road_width,
                checkpoints if use_checkpoints else None,
            )
        except ValueError as exc:
            raise UserError(f"reference line file {path}: {exc}") from None


def load_points(path: str | Path) -> np.ndarray:
    """The (N,3) float64 points stored in a reference-line file; ``UserError`` if unusable."""
    return read_reference_file(path)[0]


def _points_array(value: object, p: Path, what: str, min_rows: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiu" or arr.ndim != 2 or arr.shape[1] != 3 or len(arr) < min_rows:
        raise UserError(
            f"reference line file {p}: {what} must be an (N, 3) array of numbers with N >= {min_rows}, "
            f"got shape {arr.shape}"
        )
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise UserError(f"reference line file {p}: {what} contain NaN or infinite coordinates")
    return arr


def read_reference_file(path: str | Path) -> tuple[np.ndarray, np.ndarray | None]:
    """``(points, checkpoints)`` stored in a reference-line file (checkpoints None when absent);
    ``UserError`` if the file is missing or unusable. Never unpickles."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"reference line file {p} does not exist")
    cps = None
    try:
        if p.suffix == ".npy":
            pts = np.load(p, allow_pickle=False)
        else:
            doc = json.loads(p.read_text())
            if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
                raise ValueError(f"not a {FILE_FORMAT} JSON file")
            if doc.get("version") != FILE_VERSION:
                raise ValueError(
                    f"unsupported version {doc.get('version')!r} (this rulka reads {FILE_VERSION})"
                )
            pts = np.asarray(doc["points"], dtype=np.float64)
            cps = doc.get("checkpoints")
            cps = None if cps is None else np.asarray(cps, dtype=np.float64)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise UserError(f"reference line file {p} is unreadable: {exc}") from None
    pts = _points_array(pts, p, "points", 2)
    if p.suffix == ".npy" or cps is None or cps.size == 0:
        return pts, None
    return pts, _points_array(cps, p, "checkpoints", 1)
