"""bench/recipe.py: a seed gives the same run twice (the point of studying recipes in-process), and
the run follows the trainer's rate limiter (no updates before the start size, then the ratio)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import recipe  # noqa: E402

CARTPOLE = str(Path(__file__).resolve().parents[1] / "configs" / "cartpole_iqn.yaml")


@pytest.mark.slow
def test_a_seed_repeats_and_holds_the_ratio():
    a = recipe.run_seed(CARTPOLE, [], 3, 2500, 1200, 2, "475")
    b = recipe.run_seed(CARTPOLE, [], 3, 2500, 1200, 2, "475")
    c = recipe.run_seed(CARTPOLE, [], 4, 2500, 1200, 2, "475")
    strip = lambda run: [{k: v for k, v in row.items() if k != "minutes"} for row in run["history"]]  # noqa: E731
    assert strip(a) == strip(b) and a["updates"] == b["updates"]
    assert strip(a) != strip(c)
    # start size 1000 (memory_size_schedule), 8 samples per insert, batch 64: no burst at the start
    start, spi, batch = 1000, 8, 64
    trainable = a["frames"] * 0.95  # about 5% of transitions go to the held-out test store
    assert a["updates"] == pytest.approx((trainable - start) * spi / batch, rel=0.1)
    # Reverb's window: ahead by at most the error buffer (Acme's default, 0.1 x spi x start); a
    # burst (the start size's worth at once) would be start x spi / batch = 125 updates
    first = a["history"][0]
    assert first["updates"] <= ((first["frames"] - start) * spi + 0.1 * spi * start) / batch + 1
