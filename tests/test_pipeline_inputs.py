"""Actions, materials and CarState: the vocabulary every backend shares."""

from __future__ import annotations

import numpy as np
import pytest

from rulka.envs import actions as A
from rulka.envs import materials as M
from rulka.envs.car_state import CarState, yaw_orientation


def test_discrete_action_table_order() -> None:
    # {accelerate, nothing, brake, brake+accelerate} x {straight, left, right}.
    assert A.N_ACTIONS == 12
    np.testing.assert_array_equal(A.ACTION_FLAGS[0], [1, 0, 0, 0])
    np.testing.assert_array_equal(A.ACTION_FLAGS[1], [1, 0, 1, 0])
    np.testing.assert_array_equal(A.ACTION_FLAGS[5], [0, 0, 0, 1])
    np.testing.assert_array_equal(A.ACTION_FLAGS[6], [0, 1, 0, 0])
    np.testing.assert_array_equal(A.ACTION_FLAGS[10], [1, 1, 1, 0])
    assert A.ACTION_NAMES[A.ACTION_BRAKE] == "brake" and A.ACTION_NAMES[A.ACTION_NOTHING] == "nothing"
    # Every combination appears once.
    assert len({tuple(r) for r in A.ACTION_FLAGS}) == 12
    for i in range(12):
        assert A.flags_to_discrete(A.ACTION_FLAGS[i]) == i


def test_continuous_round_trip_and_nearest_discrete() -> None:
    for i in range(12):
        cont = A.discrete_to_continuous(i)
        assert A.continuous_to_discrete(cont) == i
        np.testing.assert_array_equal(A.continuous_to_flags(cont), A.ACTION_FLAGS[i])
    np.testing.assert_allclose(A.discrete_to_continuous(7), [0, 1, -1])  # brake + left
    assert A.continuous_to_discrete([0.9, 0.1, 0.3]) == 0  # light steer stays straight
    assert A.continuous_to_discrete([0.9, 0.1, 0.7]) == 2
    np.testing.assert_allclose(A.continuous_to_flags([2.0, -1.0, -3.0]), [1, 0, 1, 0])  # clipped
    assert A.flags_to_discrete([1, 0, 1, 1]) == 0  # left + right cancel
    with pytest.raises(ValueError):
        A.discrete_to_flags(12)
    with pytest.raises(ValueError):
        A.action_to_flags(np.zeros(5))
    with pytest.raises(ValueError, match="finite"):
        A.action_to_flags(np.array([np.nan, 0.0, 0.0]))
    with pytest.raises(ValueError, match="finite"):
        A.action_to_flags(np.array([1.0, np.inf, 0.0, 0.0]))


def test_material_categories_follow_trackmania_groups() -> None:
    assert M.material_category(M.ASPHALT) == M.CATEGORY_ASPHALT
    assert M.material_category(M.CONCRETE) == M.CATEGORY_ASPHALT
    assert M.material_category(M.WET_GRASS) == M.CATEGORY_GRASS
    assert M.material_category(M.DIRT_ROAD) == M.CATEGORY_DIRT
    assert M.material_category(M.TURBO2) == M.CATEGORY_TURBO
    assert M.material_category(M.TURBO_ROULETTE) == M.CATEGORY_OTHER
    assert M.material_category(M.ICE) == M.CATEGORY_OTHER
    assert M.material_category(0x10000 | M.GRASS) == M.CATEGORY_GRASS  # flag bits masked
    assert M.material_category(999) == M.CATEGORY_OTHER
    one_hot = M.wheel_material_one_hot(np.array([M.DIRT, M.ICE]), 4)
    np.testing.assert_array_equal(one_hot, [0, 0, 1, 0, 0, 0, 0, 0])


def test_car_state_shapes_and_frame() -> None:
    s = CarState(position=[1, 2, 3], orientation=yaw_orientation(0.3), velocity=(0, 0, 10))
    assert s.position.dtype == np.float64 and s.wheel_material.dtype == np.int64
    assert s.speed == pytest.approx(10.0)
    # Columns: lateral = up x forward; the frame is a rotation.
    rot = s.orientation
    np.testing.assert_allclose(np.cross(rot[:, 1], rot[:, 2]), rot[:, 0], atol=1e-12)
    np.testing.assert_allclose(rot.T @ rot, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(s.to_car_frame(s.forward), [0, 0, 1], atol=1e-12)
    with pytest.raises(ValueError):
        CarState(position=[1, 2])
