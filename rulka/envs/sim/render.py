"""Pictures of the simulator: episode frames (camera view beside a map) and track maps with the
driven line coloured by speed. Used by ``SimTrackEnv.render`` and ``rulka sim render``."""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from rulka.envs.sim.tracks import Track

_MAPS: weakref.WeakKeyDictionary[Track, dict[int, tuple[np.ndarray, float]]] = weakref.WeakKeyDictionary()


def track_map(track: Track, max_side: int = 256) -> tuple[np.ndarray, float]:
    """An RGB top view of ``track`` whose longer side is ``max_side`` pixels, and its scale
    (map pixels per raster cell). North (+z) is up and +x (left at heading 0) is left."""
    cache = _MAPS.setdefault(track, {})
    if max_side not in cache:
        look = track.look[::-1, ::-1]  # rows: +z up; columns: +x to the left (seen from above)
        scale = max_side / max(look.shape)
        small = cv2.resize(look, (max(1, round(look.shape[1] * scale)), max(1, round(look.shape[0] * scale))),
                           interpolation=cv2.INTER_AREA)
        cache[max_side] = (cv2.cvtColor(small, cv2.COLOR_GRAY2RGB), scale)
    img, scale = cache[max_side]
    return img.copy(), scale


def map_points(track: Track, xz: np.ndarray, scale: float) -> np.ndarray:
    """Map-pixel coordinates (column, row) of world points (N, 2) for a map from :func:`track_map`."""
    rows, cols = track.materials.shape
    c, r = track.world_to_pixel(xz[:, 0], xz[:, 1])
    return np.stack([(cols - 1 - c) * scale, (rows - 1 - r) * scale], axis=1)


def speed_colors(speeds: np.ndarray, vmax: float) -> np.ndarray:
    """RGB colours (N, 3) for speeds: blue slow .. red fast (OpenCV's turbo colour map)."""
    v = np.clip(np.asarray(speeds, dtype=np.float64) / max(vmax, 1e-6), 0.0, 1.0)
    lut = cv2.applyColorMap(np.arange(256, dtype=np.uint8).reshape(-1, 1), cv2.COLORMAP_TURBO)[:, 0, ::-1]
    return lut[(v * 255).astype(int)]


def draw_trace(img: np.ndarray, pts: np.ndarray, speeds: np.ndarray, vmax: float, thickness: int = 2) -> None:
    """Draw the driven line ``pts`` (map pixels) onto ``img`` coloured by ``speeds``."""
    if len(pts) < 2:
        return
    colors = speed_colors(speeds, vmax)
    p = np.round(pts).astype(np.int32)
    for i in range(len(p) - 1):
        cv2.line(img, tuple(int(v) for v in p[i]), tuple(int(v) for v in p[i + 1]),
                 tuple(int(v) for v in colors[i + 1]), thickness, cv2.LINE_AA)


def compose_frame(
    track: Track, view: np.ndarray, car: Any, trace: Sequence[tuple[float, float, float]], side: int = 256
) -> np.ndarray:
    """One RGB frame: the camera ``view`` scaled to ``side`` pixels high, beside the track map with
    the line driven so far and the car. Also shows speed, gear and race time."""
    h, w = view.shape
    cam = cv2.resize(view, (round(w * side / h), side), interpolation=cv2.INTER_NEAREST)
    cam = cv2.cvtColor(cam, cv2.COLOR_GRAY2RGB)
    mp, scale = track_map(track, side)
    canvas = np.zeros((side, side), dtype=np.uint8)
    canvas = cv2.cvtColor(canvas, cv2.COLOR_GRAY2RGB)
    ox, oy = (side - mp.shape[1]) // 2, (side - mp.shape[0]) // 2  # centre the map
    canvas[oy : oy + mp.shape[0], ox : ox + mp.shape[1]] = mp
    offset = np.array([ox, oy], dtype=np.float64)
    if len(trace) >= 2:
        tr = np.asarray(trace, dtype=np.float64)
        draw_trace(canvas, map_points(track, tr[:, :2], scale) + offset, tr[:, 2], 90.0, 1)
    cx, cz = map_points(track, np.array([[car.x, car.z]]), scale)[0] + offset
    hx, hz = math.sin(car.heading), math.cos(car.heading)
    tip = map_points(track, np.array([[car.x + 12 * hx, car.z + 12 * hz]]), scale)[0] + offset
    cv2.circle(canvas, (int(cx), int(cz)), 4, (255, 60, 60), -1, cv2.LINE_AA)
    cv2.line(canvas, (int(cx), int(cz)), (int(tip[0]), int(tip[1])), (255, 60, 60), 1, cv2.LINE_AA)
    frame = np.concatenate([cam, canvas], axis=1)
    text = f"{car.speed * 3.6:5.0f} km/h  gear {car.gear}  {car.race_time_ms / 1000:6.2f} s"
    cv2.putText(frame, text, (6, side - 8), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 80), 1, cv2.LINE_AA)
    return np.ascontiguousarray(frame)


def track_picture(
    track: Track, trace: np.ndarray | None = None, max_side: int = 800, title: str | None = None,
    reference: np.ndarray | None = None, checkpoints: np.ndarray | None = None,
) -> np.ndarray:
    """RGB picture of ``track`` with the driven line (``trace``: (N, 3) x, z, speed) coloured by
    speed; ``reference`` ((M, 3) x, y, z: a reference line, e.g. from ``rulka tm record-line``) is
    drawn in white under it, its real ``checkpoints`` as circles."""
    img, scale = track_map(track, max_side)
    if reference is not None and len(reference) >= 2:
        pts = map_points(track, np.asarray(reference)[:, [0, 2]], scale).astype(np.int32)
        cv2.polylines(img, [pts.reshape(-1, 1, 2)], False, (255, 255, 255), 1, cv2.LINE_AA)
    if checkpoints is not None and len(checkpoints):
        for p in map_points(track, np.asarray(checkpoints)[:, [0, 2]], scale):
            cv2.circle(img, (int(p[0]), int(p[1])), 5, (255, 255, 0), 1, cv2.LINE_AA)
    vmax = 1.0
    if trace is not None and len(trace) >= 2:
        vmax = float(np.max(trace[:, 2]))
        draw_trace(img, map_points(track, trace[:, :2], scale), trace[:, 2], vmax, 2)
    # legend: colour bar from 0 to the top speed
    bar_w = min(200, img.shape[1] - 20)
    bar = speed_colors(np.linspace(0, vmax, bar_w), vmax)
    y0 = 10
    for i, c in enumerate(bar):
        cv2.line(img, (10 + i, y0), (10 + i, y0 + 10), tuple(int(v) for v in c), 1)
    cv2.putText(img, f"0 .. {vmax * 3.6:.0f} km/h", (10, y0 + 26), cv2.FONT_HERSHEY_SIMPLEX, 0.45,
                (255, 255, 255), 1, cv2.LINE_AA)
    if title:
        cv2.putText(img, title, (10, y0 + 44), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
    return img


def write_png(path: str | Path, rgb: np.ndarray) -> None:
    """Write an RGB image as PNG."""
    if not cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)):
        raise OSError(f"could not write {path}")


def write_animation(path: str | Path, frames: Sequence[np.ndarray], fps: int = 20) -> None:
    """Write RGB ``frames`` as a GIF, or as an MP4 (OpenCV's mp4v encoder) when ``path`` ends in .mp4."""
    path = str(path)
    if path.endswith(".mp4"):
        h, w = frames[0].shape[:2]
        writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (w, h))
        if not writer.isOpened():
            raise OSError("OpenCV has no MP4 encoder here")
        try:
            for f in frames:
                writer.write(cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
        finally:
            writer.release()
        return
    import imageio.v2 as imageio

    imageio.mimwrite(path, list(frames), duration=1000.0 / fps, loop=0)
