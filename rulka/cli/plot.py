"""``rulka plot RUN_DIR``: learning curves as PNG files from the run's local metrics log."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="draw learning curves (PNG) from a run folder",
        description=(
            "Write PNG learning curves from RUN_DIR/metrics.jsonl: episodic return and race time "
            "against frames and against wall time, one figure per map (reference time as a dashed "
            "line where known), plus losses and training statistics. Needs no wandb account."
        ),
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run folder (holds metrics.jsonl)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="where to write the PNGs (default: RUN_DIR/plots)")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from rulka.telemetry.plot import plot_run

    for path in plot_run(args.run_dir, args.out):
        print(path)
    return 0
