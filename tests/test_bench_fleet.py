"""bench/fleet.py end to end at a small size: a real relay, real TLS, enrolled workers, a throttled
uplink. Extended: about a minute of wall time on the shared 2-core machine."""

from __future__ import annotations

import argparse

import pytest

from bench import fleet

pytestmark = pytest.mark.extended


def test_a_small_throttled_fleet_loses_nothing_and_every_worker_runs_the_newest_weights():
    args = argparse.Namespace(workers=3, procs=1, seconds=8.0, ramp_s=2.0, drain_s=4.0, network="48x36",
                              params=fleet.NETWORKS["48x36"], dtype="float16", publish_s=1.0, mbit=4.0,
                              segment_bytes=5000, segment_s=0.5, chunk_bytes=64 * 1024, weights_streams=None,
                              share_decode=True)
    out = fleet.orchestrate(args)
    assert out["workers_reported"] == 3
    assert out["segments"]["sent"] > 10 and out["segments"]["lost"] == 0 and out["segments"]["duplicated"] == 0
    assert out["disconnects"]["slow_client"] == 0 and out["disconnects"]["reconnects"] == 0
    # 3 x 275 KB per version through 4 Mbit/s (1.6 s) with a version every second: some are skipped
    assert out["relay"]["weights_superseded"] > 0
    assert out["weights"]["reach"][0]["reached"] == 3
    assert out["relay"]["peak_rss_mb"] > 0 and out["relay"]["cpu_s_per_mb"] is not None
    assert out["fairness"]["min"] > 0
