"""The simulator's camera: a grayscale first-person view of the ground ahead of the car.

Every pixel below the horizon looks at a point of the flat ground; pixel -> car frame is a fixed
homography (camera height, pitch, field of view) and car frame -> track raster is an affine map
that changes every step. Their product is one 3x3 matrix, so a frame is a single
``cv2.warpPerspective`` of the track's look-raster: no per-pixel Python or numpy work.
"""

from __future__ import annotations

import math
import weakref

import cv2
import numpy as np

from rulka.envs.sim.tracks import Track

SKY = 185  # gray level above the horizon
FAR = 30  # gray level of ground beyond the raster (same as walls)
_SOURCES: weakref.WeakKeyDictionary[Track, tuple[np.ndarray, float]] = weakref.WeakKeyDictionary()


def _camera_source(track: Track) -> tuple[np.ndarray, float]:
    """The look-raster at 0.5 m cells (less aliasing at a small image size), cached per track."""
    src = _SOURCES.get(track)
    if src is None:
        factor = max(1, int(round(0.5 / track.cell_size)))
        img = track.look
        if factor > 1:
            img = cv2.resize(img, (img.shape[1] // factor, img.shape[0] // factor), interpolation=cv2.INTER_AREA)
        src = (np.ascontiguousarray(img), track.cell_size * factor)
        _SOURCES[track] = src
    return src


class Camera:
    """Renders (height, width) uint8 frames of ``track`` from a car pose.

    Args:
        track: the track to look at.
        width, height: image size in pixels (config ``nn.vis.image_size``).
        fov_deg: horizontal field of view.
        height_m: camera height above the ground.
        pitch_deg: downward tilt; with the defaults the horizon sits about a quarter from the top.
        forward_m: camera position ahead of the car's centre.
    """

    def __init__(
        self,
        track: Track,
        width: int = 64,
        height: int = 64,
        fov_deg: float = 100.0,
        height_m: float = 2.5,
        pitch_deg: float = 16.0,
        forward_m: float = 0.0,
    ) -> None:
        if width < 8 or height < 8:
            raise ValueError(f"camera image must be at least 8x8, got {width}x{height}")
        self.track = track
        self.width, self.height = int(width), int(height)
        self._src, cell = _camera_source(track)
        self._inv_cell = 1.0 / cell
        self._origin = track.origin
        f = (self.width / 2) / math.tan(math.radians(fov_deg) / 2)
        cx, cy = self.width / 2, self.height / 2
        phi = math.radians(pitch_deg)
        # pixel (u, v, 1) -> ray (right, up, forward) in the car frame, pitched down by phi
        k_inv = np.array([[1 / f, 0, (0.5 - cx) / f], [0, -1 / f, -(0.5 - cy) / f], [0, 0, 1.0]])
        pitch = np.array([[1, 0, 0], [0, math.cos(phi), -math.sin(phi)], [0, math.sin(phi), math.cos(phi)]])
        d = pitch @ k_inv
        horizon = cy - f * math.tan(phi) - 0.5  # rows below it see the ground
        self.ground_row = min(max(int(math.floor(horizon)) + 1, 0), self.height)
        # ray -> ground point (right, forward, 1), homogeneous; shifted to start at ground_row
        h1 = np.stack([height_m * d[0], height_m * d[2] - forward_m * d[1], -d[1]])
        h1 = h1 @ np.array([[1, 0, 0], [0, 1, self.ground_row], [0, 0, 1.0]])
        self._h1 = h1
        self._h1_rows = [tuple(float(v) for v in row) for row in h1]
        self._m = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], list(self._h1_rows[2])])
        self._frame = np.full((self.height, self.width), SKY, dtype=np.uint8)
        self._ground = self._frame[self.ground_row :]
        self._size = (self.width, self.height - self.ground_row)

    def render(self, x: float, z: float, heading: float, out: np.ndarray | None = None) -> np.ndarray:
        """The view from a car at world (x, z) with ``heading``; a new array unless ``out`` is given."""
        s, c = math.sin(heading), math.cos(heading)
        ic = self._inv_cell
        # m = A @ H1 with A: car (right, forward) -> raster (column, row); right of heading is
        # (-cos h, sin h). Scalar arithmetic: cheaper than building A and a numpy product.
        a00, a01, a02 = -c * ic, s * ic, (x - self._origin[0]) * ic
        a10, a11, a12 = s * ic, c * ic, (z - self._origin[1]) * ic
        h0, h1, h2 = self._h1_rows
        m = self._m
        m[0] = [a00 * h0[0] + a01 * h1[0] + a02 * h2[0], a00 * h0[1] + a01 * h1[1] + a02 * h2[1],
                a00 * h0[2] + a01 * h1[2] + a02 * h2[2]]
        m[1] = [a10 * h0[0] + a11 * h1[0] + a12 * h2[0], a10 * h0[1] + a11 * h1[1] + a12 * h2[1],
                a10 * h0[2] + a11 * h1[2] + a12 * h2[2]]
        if self._size[1] > 0:
            cv2.warpPerspective(
                self._src, m, self._size, dst=self._ground,
                flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                borderMode=cv2.BORDER_CONSTANT, borderValue=FAR,
            )
        if out is None:
            return self._frame.copy()
        out[...] = self._frame
        return out
