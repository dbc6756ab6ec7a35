"""rulka.envs

Importing this package registers the built-in simulator with Gymnasium as
``rulka/SimTrack-v0`` (12 discrete actions) and ``rulka/SimTrackAnalog-v0`` (analog
``(gas, brake, steer)`` actions) (entries in gymnasium's registry only: nothing is built or read).
"""

from __future__ import annotations

import gymnasium as _gym

if "rulka/SimTrack-v0" not in _gym.registry:
    _gym.register(id="rulka/SimTrack-v0", entry_point="rulka.envs.sim.env:SimTrackEnv")
if "rulka/SimTrackAnalog-v0" not in _gym.registry:
    _gym.register(id="rulka/SimTrackAnalog-v0", entry_point="rulka.envs.sim.env:SimTrackEnv",
                  kwargs={"continuous": True})
