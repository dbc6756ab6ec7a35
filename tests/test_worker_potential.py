"""The worker keeps the pipeline's shaping potential beside each observation (obs/potential),
so the memory can add potential-based shaping; it is not part of what the actor sees."""

from __future__ import annotations

import numpy as np

from rulka.envs.sim.env import SimTrackEnv
from rulka.plugins import arrays_to_obs, obs_to_arrays


def test_sim_potential_is_recorded_and_not_fed_back_as_observation() -> None:
    env = SimTrackEnv(image=False)
    obs, info = env.reset(seed=3)
    rows = [obs_to_arrays(obs, info)]
    potentials = [info["potential"]]
    for _ in range(5):
        obs, _, _, _, info = env.step(0)
        rows.append(obs_to_arrays(obs, info))
        potentials.append(info["potential"])
    arrays = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    np.testing.assert_allclose(arrays["obs/potential"], np.asarray(potentials, np.float32))
    assert arrays["obs/potential"].shape == (6,) and arrays["obs/potential"].dtype == np.float32
    back = arrays_to_obs(arrays, 2)
    assert set(back) == {"float"}
    np.testing.assert_array_equal(back["float"], arrays["obs/float"][2])


def test_plain_gym_observation_without_potential_stays_a_plain_array() -> None:
    rows = [obs_to_arrays(np.arange(4.0), {"potential": True}), obs_to_arrays(np.ones(4), {})]
    assert set(rows[0]) == {"obs/x"}  # a bool is not a potential
    arrays = {"obs/x": np.stack([rows[0]["obs/x"], rows[1]["obs/x"]])}
    np.testing.assert_array_equal(arrays_to_obs(arrays, 1), np.ones(4, np.float32))
