"""rulka-trainer keeps freed memory for the next update (glibc): no page faults for tensors that
are allocated and freed every update."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, resource, sys
import numpy as np
from rulka.trainer.allocator import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "1" else False
def update():  # an update's worth of temporaries: 4 blocks of 4 MB, written, then freed
    blocks = [np.ones(1 << 20, np.float32) for _ in range(4)]
    return sum(float(b[-1]) for b in blocks)
update()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    update()
print(json.dumps({"kept": kept, "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 20}))
"""


def _probe(kept: bool, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, "1" if kept else "0"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, **(env or {})}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc thresholds: Linux only")
def test_freed_blocks_are_reused_without_page_faults():
    default, kept = _probe(False), _probe(True)
    if not kept["kept"]:
        pytest.skip("not glibc")
    # 16 MB freed and taken again: thousands of page faults by default, none once kept
    assert default["faults"] > 1000
    assert kept["faults"] < 50


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc thresholds: Linux only")
def test_a_users_glibc_tunables_win():
    got = _probe(True, {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"})
    assert got["kept"] is False
