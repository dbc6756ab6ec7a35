"""What roles report for ``rulka status``, and the status report shape.

Each role sends a ``stats`` message every few seconds: ``link.send("stats", Stats(d).encode())``
on a worker, ``link.broadcast("stats", Stats(d).encode())`` on the trainer (the server keeps it;
it is not forwarded to workers). ``d`` is a flat map of plain scalars (``rulka.net.messages.Stats``).
Keys the status table knows (others are kept and shown as they are):

- worker: ``episodes`` (int, finished so far), ``samples_per_s`` (float, env steps per second
  over the last interval), ``weights_version`` (int, loaded now), ``segments_sent`` (int),
  ``unacked`` (int, segments waiting for an ack), ``dropped`` (int), ``quarantined`` (int, spill
  files moved to ``<state dir>/quarantine/``), ``map`` (str), ``instances`` (int, game instances
  the worker process drives; its counts are their sums and ``weights_version`` the oldest any of
  them runs), ``weights_received`` (int, verified weights messages: one per version per worker
  process, whatever its instances).
- trainer: ``weights_version`` (int, latest published), ``updates`` (int, gradient steps),
  ``samples`` (int, transitions stored), ``memory_size`` (int), ``updates_per_s`` (float).

The server (or ``LocalHub``) keeps the latest stats per authenticated sender and answers
``rulka.net.status.query_status`` with ``build_status``'s shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_KIND_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def check_kind(kind: str) -> None:
    """Raise ValueError unless ``kind`` is a short lowercase name (``segment``, ``stats`` ...)."""
    if not isinstance(kind, str) or not _KIND_RE.match(kind):
        raise ValueError(f"message kind {kind!r} must match {_KIND_RE.pattern}")


def build_status(
    server: Mapping[str, Any],
    stats_by_sender: Mapping[str, tuple[float, Mapping[str, Any]]],
    addresses: Mapping[str, str],
    *,
    now: float,
) -> dict[str, Any]:
    """The ``query_status`` report: ``{"server": {...}, "trainer": {...} | None, "workers": [...]}``.

    ``stats_by_sender`` maps sender -> (time received, stats). Each worker row has ``name``,
    ``address``, ``episodes``, ``samples_per_s``, ``weights_version``, ``last_seen_s`` plus every
    other key the worker reported.
    """
    trainer = None
    workers = []
    for sender, (t, stats) in sorted(stats_by_sender.items()):
        if sender == "trainer":
            trainer = dict(stats)
            trainer["last_seen_s"] = round(max(0.0, now - t), 3)
            continue
        row = dict(stats)
        row.update({
            "name": sender,
            "address": addresses.get(sender, ""),
            "episodes": stats.get("episodes"),
            "samples_per_s": stats.get("samples_per_s"),
            "weights_version": stats.get("weights_version"),
            "last_seen_s": round(max(0.0, now - t), 3),
        })
        # the relay's view: weights versions complete at the relay and not yet all sent to this
        # worker, and for how long (a relay uplink too slow for the fleet shows here)
        client = (server.get("clients") or {}).get(sender) or {}
        for key in ("weights_behind", "weights_behind_s"):
            if key in client:
                row[key] = client[key]
        workers.append(row)
    return {"server": dict(server), "trainer": trainer, "workers": workers}
