"""``rulka verify CONFIG``: does the memory rebuild exactly what the worker saw?"""

from __future__ import annotations

import argparse
import json
from typing import Any


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
    from rulka.verify import verify_pipeline

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
