"""rulka-worker command (placeholder until the role lands)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rulka-worker", description="rulka worker role (not built yet).")
    parser.parse_args(argv)
    print("rulka-worker is not built yet", file=sys.stderr)
    return 1
