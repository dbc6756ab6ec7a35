"""SAC on Pendulum-v1, rulka vs TMRL 0.7.1's own pipeline, in the same run.

Wall-clock time and env steps until the mean return of the last 10 episodes reaches -200; see
``bench/peer_tmrl.py`` (``--pendulum``) for how each side is run and measured. ``--quick`` gives
each pipeline 3 minutes instead of 6.

    python -m bench.sac_pendulum [--quick] [--minutes M]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from peer_tmrl import TMRL_VERSION, pendulum_main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 minutes per pipeline")
    parser.add_argument("--minutes", type=float, default=None, help="time budget of each pipeline (default 6)")
    parser.add_argument("--tmrl-dir", type=Path, default=Path(tempfile.gettempdir()) / f"rulka-bench-tmrl-{TMRL_VERSION}")
    args = parser.parse_args()
    minutes = args.minutes or (3.0 if args.quick else 6.0)
    print(json.dumps(pendulum_main(args.tmrl_dir, minutes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
