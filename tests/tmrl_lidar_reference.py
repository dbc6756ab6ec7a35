"""TMRL 0.7.1's own LIDAR on fixed images: the reference ``lidar: tmrl`` is checked against.

    python tests/tmrl_lidar_reference.py WHEEL_OR_DIR   # rewrites tests/data/tmrl_lidar_0.7.1.npz

WHEEL_OR_DIR is TMRL 0.7.1's wheel (``pip download --no-deps tmrl==0.7.1``) or a folder holding
its ``tmrl`` package (``bench/peer_tmrl.py`` installs one). Only ``tmrl/custom/tm/utils/tools.py``
is run, with TMRL's ``LIDAR_BLACK_THRESHOLD`` ([55, 55, 55], ``tmrl/config/config_constants.py``)
supplied directly: importing TMRL's config would create its data folders.
"""

from __future__ import annotations

import sys
import types
import zipfile
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "tmrl_lidar_0.7.1.npz"
SIZES = ((256, 128), (958, 488), (64, 64))  # rulka's default window, TMRL's LIDAR window, small
TMRL_BLACK_THRESHOLD = [55, 55, 55]


def images() -> list[np.ndarray]:
    """Road-like BGR frames: grey road, dark blocks and specks (borders), plus two extremes."""
    rng = np.random.default_rng(2026)
    out = []
    for w, h in SIZES:
        for _ in range(4):
            img = np.full((h, w, 3), 120, dtype=np.uint8)
            for _ in range(int(rng.integers(3, 9))):
                x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
                img[y0 : y0 + int(rng.integers(2, h // 2)), x0 : x0 + int(rng.integers(2, w // 3))] = rng.integers(0, 60)
            specks = rng.random((h, w)) < 0.002
            img[specks] = 10
            img[rng.random((h, w)) < 0.01, int(rng.integers(0, 3))] = 5  # one dark channel: not a border
            out.append(img)
        out.append(np.full((h, w, 3), 200, dtype=np.uint8))  # no border anywhere
        out.append(np.full((h, w, 3), 54, dtype=np.uint8))  # everything just below the threshold
    return out


def load_tmrl_lidar(source: Path) -> type:
    """TMRL's ``Lidar`` class from its wheel or package folder, without importing TMRL's config."""
    rel = "tmrl/custom/tm/utils/tools.py"
    if source.suffix == ".whl":
        with zipfile.ZipFile(source) as z:
            code = z.read(rel).decode("utf-8")
    else:
        code = (source / rel).read_text(encoding="utf-8")
    stub = types.ModuleType("tmrl.config.config_constants")
    stub.LIDAR_BLACK_THRESHOLD = TMRL_BLACK_THRESHOLD
    saved = {k: sys.modules.get(k) for k in ("tmrl", "tmrl.config", "tmrl.config.config_constants")}
    sys.modules.update({"tmrl": types.ModuleType("tmrl"), "tmrl.config": types.ModuleType("tmrl.config"),
                        "tmrl.config.config_constants": stub})
    try:
        namespace: dict = {"__name__": "tmrl_tools_0_7_1"}
        exec(compile(code, rel, "exec"), namespace)  # noqa: S102 - TMRL's published source, a local file
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return namespace["Lidar"]


def tmrl_outputs(lidar_cls: type) -> list[np.ndarray]:
    return [lidar_cls(img).lidar_20(img, show=False) for img in images()]


if __name__ == "__main__":
    outs = tmrl_outputs(load_tmrl_lidar(Path(sys.argv[1])))
    DATA.parent.mkdir(exist_ok=True)
    np.savez_compressed(DATA, *outs)
    print(f"wrote {DATA}: {len(outs)} scans")
