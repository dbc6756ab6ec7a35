"""``rulka verify CONFIG``: does the memory rebuild exactly what the worker saw?

A real ``Worker`` runs through its public API (``Worker.run`` in a thread) on an in-process
``LocalHub``; each segment it sends is decoded as the trainer decodes it (by the codec its header
names, with a compressor of the trainer's own) and compared, transition by transition, with the
segment as the worker built it before compression (``rulka.memory.rebuild_check``, the check
``trainer.verify: true`` runs on every segment), so a lossy compressor is caught too. The roles
are imported when the command runs, not when ``rulka`` builds its parser.
"""

from __future__ import annotations

import argparse
import copy
import json
import threading
import time
from typing import TYPE_CHECKING, Any

from rulka.interfaces import SampleCompressor

if TYPE_CHECKING:
    from rulka.config import ConfigLike
    from rulka.segment import Segment


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "verify", help="check that the replay memory rebuilds exactly what the worker saw",
        description=(
            "Runs the configured env, policy, compressor and memory in this process (no network) "
            "and compares, transition by transition, what the memory rebuilds from the compressed "
            "segments with the segments the worker produced. Prints the first difference (key, "
            "transition, values) and exits 1 if there is one. During training, "
            "`trainer.verify: true` runs the same check on every segment the trainer receives."
        ),
        epilog="example: rulka verify configs/sim_iqn.yaml --segments 50",
    )
    parser.add_argument("config", metavar="CONFIG", help="run configuration YAML")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a config value (repeatable)")
    parser.add_argument("--segments", type=int, default=20, help="segments to check (default 20)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from rulka.config import load_config
    from rulka.errors import UserError

    if args.segments < 1:
        raise UserError("--segments must be at least 1")
    cfg = load_config(args.config, args.overrides)
    result = verify_pipeline(cfg, segments=args.segments)
    if args.json:
        print(json.dumps(result))
    elif result["first_difference"] is None:
        print(f"verify: OK, {result['segments']} segments / {result['transitions']} transitions rebuilt exactly")
    else:
        print(f"verify: MISMATCH after {result['segments']} segments: {result['first_difference']}")
    return 0 if result["first_difference"] is None else 1


class _Capturing(SampleCompressor):
    """The worker's compressor, keeping each segment as it was before compression."""

    def __init__(self, inner: SampleCompressor, codec: str) -> None:
        self.inner = inner
        self.codec = codec  # the header names the real codec, so the trainer side decodes it by name
        self.originals: dict[int, Segment] = {}
        self._lock = threading.Lock()

    def compress(self, segment: Segment) -> bytes:
        with self._lock:
            self.originals[segment.seq] = copy.deepcopy(segment)
        return self.inner.compress(segment)

    def decompress(self, data: bytes) -> Segment:
        return self.inner.decompress(data)

    def original(self, seq: int) -> Segment | None:
        with self._lock:
            return self.originals.pop(seq, None)


def verify_pipeline(cfg: ConfigLike, segments: int = 20, max_steps: int = 100_000, timeout_s: float = 600.0
                    ) -> dict[str, Any]:
    """Check ``segments`` segments of the configured path; returns ``{"segments": n,
    "transitions": n, "first_difference": str | None}``."""
    from rulka.compress import SegmentDecoder, codec_name, make_compressor
    from rulka.config import as_config
    from rulka.memory.rebuild_check import first_difference
    from rulka.net.local import LocalHub
    from rulka.plugins import build_plugin, make_env
    from rulka.worker.worker import Worker

    cfg = as_config(cfg)
    agent = build_plugin("agent", str(cfg.trainer.agent), cfg.trainer.agent_kwargs, cfg)
    memory = build_plugin("memory", str(cfg.trainer.memory), cfg.trainer.memory_kwargs, cfg)
    name = cfg.worker.compressor
    kwargs = dict(cfg.worker.compressor_kwargs)
    worker_side = make_compressor(name, **kwargs)
    capturing = _Capturing(worker_side, codec_name(worker_side, name))
    decoder = SegmentDecoder(make_compressor(name, **kwargs), name)  # the trainer's own compressor
    hub = LocalHub()
    trainer_link = hub.trainer_link()
    worker = Worker(cfg, hub.worker_link("verify"), env=make_env(cfg), actor=agent.get_actor(),
                    compressor=capturing)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, kwargs={"max_steps": max_steps, "stop_event": stop,
                                                         "drain_timeout_s": 0.0}, daemon=True)
    thread.start()
    checked = transitions = 0
    problem = None
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while checked < segments and problem is None and time.monotonic() < deadline:
            messages = [m for m in trainer_link.receive(timeout=0.2) if m.kind == "segment"]
            if not messages and not thread.is_alive():
                break
            for msg in messages:
                received = decoder.decompress(msg.payload)
                if received.seq in seen:
                    continue  # a resend of a segment already checked
                seen.add(received.seq)
                original = capturing.original(received.seq)
                if original is None:
                    continue
                problem = first_difference(received, memory, reference=original)
                memory.append(received)
                checked += 1
                transitions += original.num_transitions
                if problem is not None:
                    problem = (f"worker {original.worker_id} episode {original.episode_id} segment "
                               f"{original.index_in_episode} (seq {original.seq}): {problem}")
                    break
                if checked >= segments:
                    break
    finally:
        stop.set()
        thread.join(timeout=30)
        worker.close()
    return {"segments": checked, "transitions": transitions, "first_difference": problem}
