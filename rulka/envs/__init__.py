"""rulka.envs

Importing this package registers the built-in simulator with Gymnasium as
``rulka/SimTrack-v0`` (an entry in gymnasium's registry only: nothing is built or read).
"""

from __future__ import annotations

import gymnasium as _gym

if "rulka/SimTrack-v0" not in _gym.registry:
    _gym.register(id="rulka/SimTrack-v0", entry_point="rulka.envs.sim.env:SimTrackEnv")
