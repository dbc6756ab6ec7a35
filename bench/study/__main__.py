"""``python -m bench.study {runs,recipe,tracks,health} ...``: the seed-study tool (see ``bench.study``)."""

from __future__ import annotations

import sys

from bench.study import recipe, runs, tracks

KINDS = {"runs": runs.main, "recipe": recipe.main, "tracks": tracks.main, "health": runs.rejudge_main}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in KINDS:
        raise SystemExit(f"usage: python -m bench.study {{{','.join(KINDS)}}} ...  (python -m bench.study KIND --help)")
    sys.argv[0] = f"python -m bench.study {args[0]}"  # what its --help names
    KINDS[args[0]](args[1:])


if __name__ == "__main__":
    main()
