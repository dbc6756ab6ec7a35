"""TrackMania contact materials and the physics-behaviour categories the learner sees.

The ids are TrackMania's own (``TM::PlugSurfaceMaterialId`` in TMInterface, the same ids
Linesight uses), so a game backend can pass the id it reads straight into
``CarState.wheel_material``. The learner does not see ids: it sees, per wheel, a one-hot over a
few *categories* of physical behaviour (``n_contact_material_physics_behavior_types``, 4 by
default). Categories at or above that number ("other": ice, metal, wood, walls, no contact...)
are encoded as all zeros.

The built-in simulator uses the same ids for its surfaces (asphalt, grass, dirt, turbo) so that
its observations look like the game's.
"""

from __future__ import annotations

import numpy as np

# Physics-behaviour categories (index into the per-wheel one-hot).
CATEGORY_ASPHALT = 0
CATEGORY_GRASS = 1
CATEGORY_DIRT = 2
CATEGORY_TURBO = 3
CATEGORY_OTHER = 4
CATEGORY_NAMES: tuple[str, ...] = ("asphalt", "grass", "dirt", "turbo", "other")

# TrackMania material ids (TMNF / TMInterface numbering).
CONCRETE = 0
PAVEMENT = 1
GRASS = 2
ICE = 3
METAL = 4
SAND = 5
DIRT = 6
TURBO = 7
DIRT_ROAD = 8
RUBBER = 9
SLIDING_RUBBER = 10
TEST = 11
ROCK = 12
WATER = 13
WOOD = 14
DANGER = 15
ASPHALT = 16
WET_DIRT_ROAD = 17
WET_ASPHALT = 18
WET_PAVEMENT = 19
WET_GRASS = 20
SNOW = 21
RESONANT_METAL = 22
GOLF_BALL = 23
GOLF_WALL = 24
GOLF_GROUND = 25
TURBO2 = 26
BUMPER = 27
NOT_COLLIDABLE = 28
FREE_WHEELING = 29
TURBO_ROULETTE = 30

MATERIAL_NAMES: dict[int, str] = {
    CONCRETE: "Concrete",
    PAVEMENT: "Pavement",
    GRASS: "Grass",
    ICE: "Ice",
    METAL: "Metal",
    SAND: "Sand",
    DIRT: "Dirt",
    TURBO: "Turbo",
    DIRT_ROAD: "DirtRoad",
    RUBBER: "Rubber",
    SLIDING_RUBBER: "SlidingRubber",
    TEST: "Test",
    ROCK: "Rock",
    WATER: "Water",
    WOOD: "Wood",
    DANGER: "Danger",
    ASPHALT: "Asphalt",
    WET_DIRT_ROAD: "WetDirtRoad",
    WET_ASPHALT: "WetAsphalt",
    WET_PAVEMENT: "WetPavement",
    WET_GRASS: "WetGrass",
    SNOW: "Snow",
    RESONANT_METAL: "ResonantMetal",
    GOLF_BALL: "GolfBall",
    GOLF_WALL: "GolfWall",
    GOLF_GROUND: "GolfGround",
    TURBO2: "Turbo2",
    BUMPER: "Bumper",
    NOT_COLLIDABLE: "NotCollidable",
    FREE_WHEELING: "FreeWheeling",
    TURBO_ROULETTE: "TurboRoulette",
}

_ASPHALT_LIKE = (CONCRETE, PAVEMENT, ASPHALT, WET_ASPHALT, WET_PAVEMENT)
_GRASS_LIKE = (GRASS, WET_GRASS)
_DIRT_LIKE = (SAND, DIRT, DIRT_ROAD, WET_DIRT_ROAD)
# TurboRoulette is deliberately "other": its effect is random, not a plain boost.
_TURBO_LIKE = (TURBO, TURBO2)

# id -> category; ids not listed (and unknown ids) are "other".
MATERIAL_CATEGORY = np.full(len(MATERIAL_NAMES), CATEGORY_OTHER, dtype=np.int64)
for _ids, _cat in (
    (_ASPHALT_LIKE, CATEGORY_ASPHALT),
    (_GRASS_LIKE, CATEGORY_GRASS),
    (_DIRT_LIKE, CATEGORY_DIRT),
    (_TURBO_LIKE, CATEGORY_TURBO),
):
    MATERIAL_CATEGORY[list(_ids)] = _cat
MATERIAL_CATEGORY.setflags(write=False)

# Category of every possible low-16-bit id, for fast vectorised lookups.
MATERIAL_CATEGORY_LUT = np.full(1 << 16, CATEGORY_OTHER, dtype=np.int8)
MATERIAL_CATEGORY_LUT[: len(MATERIAL_CATEGORY)] = MATERIAL_CATEGORY
MATERIAL_CATEGORY_LUT.setflags(write=False)


def material_category(material_id: int) -> int:
    """Physics-behaviour category of a TrackMania material id (unknown ids -> ``CATEGORY_OTHER``).

    The game packs flags in the upper 16 bits of the id, so only the low 16 bits are used.
    """
    mid = int(material_id) & 0xFFFF
    if mid < len(MATERIAL_CATEGORY):
        return int(MATERIAL_CATEGORY[mid])
    return CATEGORY_OTHER


def material_categories(material_ids: np.ndarray) -> np.ndarray:
    """Vectorised ``material_category`` for an int array of any shape."""
    return MATERIAL_CATEGORY_LUT[np.asarray(material_ids, dtype=np.int64) & 0xFFFF].astype(np.int64)


def wheel_material_one_hot(
    material_ids: np.ndarray, n_categories: int, contact: np.ndarray | None = None
) -> np.ndarray:
    """Per-wheel one-hot over the first ``n_categories`` categories, wheel-major, float32.

    Shape ``(len(material_ids) * n_categories,)``. A wheel in a category ``>= n_categories`` (or
    without ground contact, when ``contact`` is given) contributes all zeros.
    """
    cats = material_categories(material_ids)
    if contact is not None:
        cats = np.where(np.asarray(contact, dtype=bool), cats, CATEGORY_OTHER)
    out = (cats[:, None] == np.arange(n_categories)[None, :]).astype(np.float32)
    return out.reshape(-1)
