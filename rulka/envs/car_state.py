"""``CarState``: what a backend (the built-in simulator, TMNF, TM2020) reports about the car.

It is the single input of the observation/reward pipeline (``rulka.envs.pipeline``), so every
backend fills the same fields in the same units and frames:

- World frame as in TrackMania: metres, **y is up**. The built-in simulator uses a right-handed
  world (x, y up, z).
- ``orientation`` is a 3x3 rotation matrix whose **columns are the car's axes expressed in world
  coordinates**: column 0 the lateral axis (``up x forward``: in a right-handed world it points
  to the car's *left*), column 1 the car's up, column 2 the car's forward. A world vector ``v``
  in the car frame is therefore ``orientation.T @ v`` (components: lateral, up, forward).
  TMInterface's ``dyna.current_state.rotation`` (row-major, as parsed by Linesight) has this
  convention: a TMNF backend passes it unchanged.
- ``velocity`` and ``angular_velocity`` are in the world frame (m/s, rad/s).
- Wheels are ordered front-left, front-right, rear-left, rear-right. TMInterface's wheel array
  is probably FL, FR, RR, RL: the TMNF backend reorders.
- ``wheel_material`` holds TrackMania material ids (``rulka.envs.materials``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rulka.envs.materials import ASPHALT

N_WHEELS = 4
WHEEL_NAMES: tuple[str, ...] = ("fl", "fr", "rl", "rr")
# TMInterface's simulation_wheels index of each CarState wheel (FL, FR, RL, RR), assuming the
# game orders them FL, FR, RR, RL as its accessors suggest (not verified in game yet):
# ``car_wheel_values = tmi_wheel_values[TMI_WHEEL_INDEX]``.
TMI_WHEEL_INDEX: tuple[int, ...] = (0, 1, 3, 2)


_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
_BOOL = np.dtype(bool)


def _array(value: object, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    # Backends build a CarState every action: skip the conversion when it is already right.
    if type(value) is np.ndarray and value.dtype == dtype and value.shape == shape:
        return value
    return np.asarray(value, dtype=dtype).reshape(shape)


@dataclass
class CarState:
    """The car at one instant, in TrackMania units (see module docstring for frames).

    Arrays are converted to the documented dtype and shape on construction (arrays that already
    have them are kept, not copied: do not modify them afterwards); a wrong shape raises
    ``ValueError``. Defaults describe a car at rest at the origin facing +z on asphalt.
    """

    position: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """(3,) metres, world frame, y up."""
    orientation: np.ndarray = field(default_factory=lambda: np.eye(3))
    """(3,3) rotation; columns = car lateral (left in a right-handed world), up, forward."""
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """(3,) m/s, world frame."""
    angular_velocity: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """(3,) rad/s, world frame."""
    wheel_material: np.ndarray = field(default_factory=lambda: np.full(N_WHEELS, ASPHALT))
    """(4,) int TrackMania material id per wheel (FL, FR, RL, RR)."""
    wheel_contact: np.ndarray = field(default_factory=lambda: np.ones(N_WHEELS, dtype=bool))
    """(4,) bool: the wheel touches the ground."""
    wheel_sliding: np.ndarray = field(default_factory=lambda: np.zeros(N_WHEELS, dtype=bool))
    """(4,) bool: the wheel slides (TrackMania's ``is_sliding``)."""
    wheel_damper_absorb: np.ndarray = field(default_factory=lambda: np.full(N_WHEELS, 0.01))
    """(4,) float: suspension compression (TMNF ``damper_absorb``, about 0.005-0.15; 0.01 at rest)."""
    gear: int = 1
    """Engine gear (about 0-5 in TMNF)."""
    rpm: float = 0.0
    """Engine rpm (about 0-10000)."""
    gearbox_state: int = 0
    """TMNF gearbox state: non-zero while shifting (2 at start-up). Backends without it leave 0."""
    race_time_ms: int = 0
    """Race time in ms (0 at the start signal; negative during the countdown)."""
    finished: bool = False
    """The car has crossed the finish line (set by the backend: the game knows, the sim decides)."""
    is_freewheeling: bool = False
    """Engine disconnected (TrackMania's free-wheeling state, e.g. after a FreeWheeling surface)."""

    def __post_init__(self) -> None:
        self.position = _array(self.position, _F64, (3,))
        self.velocity = _array(self.velocity, _F64, (3,))
        self.angular_velocity = _array(self.angular_velocity, _F64, (3,))
        self.orientation = _array(self.orientation, _F64, (3, 3))
        self.wheel_material = _array(self.wheel_material, _I64, (N_WHEELS,))
        self.wheel_contact = _array(self.wheel_contact, _BOOL, (N_WHEELS,))
        self.wheel_sliding = _array(self.wheel_sliding, _BOOL, (N_WHEELS,))
        self.wheel_damper_absorb = _array(self.wheel_damper_absorb, _F64, (N_WHEELS,))
        self.gear = int(self.gear)
        self.rpm = float(self.rpm)
        self.gearbox_state = int(self.gearbox_state)
        self.race_time_ms = int(self.race_time_ms)
        self.finished = bool(self.finished)
        self.is_freewheeling = bool(self.is_freewheeling)

    @property
    def speed(self) -> float:
        """Norm of the velocity, m/s."""
        return float(np.linalg.norm(self.velocity))

    @property
    def forward(self) -> np.ndarray:
        """The car's forward axis in world coordinates (orientation column 2)."""
        return self.orientation[:, 2]

    @property
    def up(self) -> np.ndarray:
        """The car's up axis in world coordinates (orientation column 1)."""
        return self.orientation[:, 1]

    def to_car_frame(self, world_vectors: np.ndarray) -> np.ndarray:
        """World vectors ``(..., 3)`` expressed in the car frame (lateral, up, forward)."""
        return np.asarray(world_vectors, dtype=np.float64) @ self.orientation


def yaw_orientation(yaw: float) -> np.ndarray:
    """Rotation for a level car heading ``yaw`` radians about world +y (yaw 0 faces +z).

    With yaw > 0 the car turns toward world +x (its left at yaw 0 in a right-handed world):
    forward = (sin yaw, 0, cos yaw), lateral = (cos yaw, 0, -sin yaw), up = (0, 1, 0).
    """
    c, s = float(np.cos(yaw)), float(np.sin(yaw))
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])
