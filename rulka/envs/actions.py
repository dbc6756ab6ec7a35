"""The TrackMania action set: 12 discrete key combinations and a gamepad-like continuous variant.

Discrete actions are {accelerate, nothing, brake, brake+accelerate} x {straight, left, right}, in
the order the TrackMania RL tools use (index 0 = accelerate straight, 6 = brake straight), so that
action indices mean the same thing in rulka, in recorded runs and in the game backends.

Continuous ("analog") actions are float32 ``(gas, brake, steer)``: gas and brake in [0, 1], steer in
[-1, 1] with negative = left, positive = right (like a gamepad's triggers and stick); their ``Box``
bounds are ``CONTINUOUS_LOW`` / ``CONTINUOUS_HIGH``. Segments carry them as ``(T, 3)`` float32,
and every backend that takes analog input (the simulator, a TM2020 gamepad) reads this order.

Every action, discrete or continuous, reduces to four "flags" ``(accelerate, brake, left,
right)`` in [0, 1]: exactly 0/1 for discrete actions, the analog amounts for continuous ones.
The observation pipeline records previous actions as these flags.
"""

from __future__ import annotations

import math

import numpy as np

FLAG_NAMES: tuple[str, ...] = ("accelerate", "brake", "left", "right")
N_FLAGS = 4

# (accelerate, brake, left, right) per discrete action index.
ACTION_FLAGS = np.array(
    [
        [1, 0, 0, 0],  # 0 accelerate
        [1, 0, 1, 0],  # 1 accelerate + left
        [1, 0, 0, 1],  # 2 accelerate + right
        [0, 0, 0, 0],  # 3 nothing
        [0, 0, 1, 0],  # 4 left
        [0, 0, 0, 1],  # 5 right
        [0, 1, 0, 0],  # 6 brake
        [0, 1, 1, 0],  # 7 brake + left
        [0, 1, 0, 1],  # 8 brake + right
        [1, 1, 0, 0],  # 9 brake + accelerate
        [1, 1, 1, 0],  # 10 brake + accelerate + left
        [1, 1, 0, 1],  # 11 brake + accelerate + right
    ],
    dtype=np.float32,
)
ACTION_FLAGS.setflags(write=False)
N_ACTIONS = len(ACTION_FLAGS)
ACTION_NAMES: tuple[str, ...] = (
    "accelerate",
    "accelerate_left",
    "accelerate_right",
    "nothing",
    "left",
    "right",
    "brake",
    "brake_left",
    "brake_right",
    "brake_accelerate",
    "brake_accelerate_left",
    "brake_accelerate_right",
)
# Box bounds of the analog action (gas, brake, steer)
CONTINUOUS_LOW: tuple[float, float, float] = (0.0, 0.0, -1.0)
CONTINUOUS_HIGH: tuple[float, float, float] = (1.0, 1.0, 1.0)
ACTION_ACCELERATE = 0
ACTION_NOTHING = 3
ACTION_BRAKE = 6
# Before the first action of an episode, the previous-action inputs show this action.
DEFAULT_PREVIOUS_ACTION = ACTION_ACCELERATE


def discrete_to_flags(action: int) -> np.ndarray:
    """(accelerate, brake, left, right) of discrete ``action`` as float32 0/1 (a read-only row)."""
    a = int(action)
    if not 0 <= a < N_ACTIONS:
        raise ValueError(f"discrete action {action} is outside 0..{N_ACTIONS - 1}")
    return ACTION_FLAGS[a]


def flags_to_discrete(flags: np.ndarray) -> int:
    """The discrete action whose flags match ``flags`` thresholded at 0.5.

    Pressing left and right together cancels the steering (treated as straight).
    """
    f = np.asarray(flags, dtype=np.float64).reshape(N_FLAGS) > 0.5
    accelerate, brake, left, right = (bool(x) for x in f)
    if left and right:
        left = right = False
    base = {(True, False): 0, (False, False): 3, (False, True): 6, (True, True): 9}[(accelerate, brake)]
    return base + (1 if left else 2 if right else 0)


def discrete_to_continuous(action: int) -> np.ndarray:
    """Gamepad values ``(gas, brake, steer)`` of discrete ``action`` (steer -1 left, +1 right)."""
    acc, brk, left, right = discrete_to_flags(action)
    return np.array([acc, brk, right - left], dtype=np.float32)


def continuous_to_flags(gas_brake_steer: np.ndarray) -> np.ndarray:
    """Flags ``(accelerate, brake, left, right)`` in [0, 1] of a continuous action (clipped).

    Raises ``ValueError`` on NaN or infinite values (a policy bug, not something to record).
    """
    gas, brake, steer = (float(v) for v in np.asarray(gas_brake_steer, dtype=np.float64).reshape(3))
    if not (math.isfinite(gas) and math.isfinite(brake) and math.isfinite(steer)):
        raise ValueError(f"continuous action must be finite, got {(gas, brake, steer)}")
    gas = min(max(gas, 0.0), 1.0)
    brake = min(max(brake, 0.0), 1.0)
    steer = min(max(steer, -1.0), 1.0)
    return np.array([gas, brake, max(-steer, 0.0), max(steer, 0.0)], dtype=np.float32)


def continuous_to_discrete(gas_brake_steer: np.ndarray, steer_threshold: float = 0.5) -> int:
    """Nearest discrete action: gas/brake pressed above 0.5, steering beyond ``steer_threshold``."""
    gas, brake, steer = np.asarray(gas_brake_steer, dtype=np.float64).reshape(3)
    flags = np.array(
        [gas > 0.5, brake > 0.5, steer < -steer_threshold, steer > steer_threshold], dtype=np.float32
    )
    return flags_to_discrete(flags)


def action_to_flags(action: int | np.ndarray) -> np.ndarray:
    """Flags of any action: an int (or 0-d array) is discrete, a 3-vector is ``(gas, brake, steer)``,
    a 4-vector is taken as flags already (clipped to [0, 1])."""
    arr = np.asarray(action)
    if arr.ndim == 0:
        return discrete_to_flags(int(arr))
    if arr.size == 3:
        return continuous_to_flags(arr)
    if arr.size == N_FLAGS:
        flags = arr.astype(np.float32).reshape(N_FLAGS)
        if not np.isfinite(flags).all():
            raise ValueError(f"action flags must be finite, got {flags.tolist()}")
        return np.clip(flags, 0.0, 1.0)
    raise ValueError(f"an action is an int, a (gas, brake, steer) triple or 4 flags; got shape {arr.shape}")
